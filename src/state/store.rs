//! [`KeyedStateStore`]: the typed front of a backend. Holds the current key, registers states, checks
//! serializer compatibility against restored state, and hands out accessors.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::descriptor::*;
use crate::backend::{BackendConfig, BackendSnapshot, StateBackend, StateId};
use crate::error::{Error, Result};
use crate::keygroup::{key_group_for_hash, key_group_prefix_len, KeyGroup, KeyGroupRange};
use crate::layout::{is_ambiguous_key_possible, write_variable_int_bytes};
use crate::meta::{StateKind, StateMetaInfo};
use crate::serializer::{KeySerializer, TtlSerializer, TypeSerializer};
use crate::ttl::{SystemTimeProvider, TtlLayout, TtlStateFilter, TtlTimeProvider};

use super::operands::FoldWith;
use super::registration::{
    element_length, incompatible, list_registration, map_registration, whole_value_registration,
    Registered, RestorePlan,
};
use super::timer_queue::QueueHeads;

/// The typed keyed-state store over one backend: Flink's keyed state backend with an implicit current key.
///
/// Set the current key with [`set_current_key`](Self::set_current_key); every state access then applies to
/// that key (its bytes and key group are computed once per key, not per access).
pub struct KeyedStateStore<K: KeySerializer> {
    pub(crate) backend: Box<dyn StateBackend>,
    pub(crate) key_serializer: K,
    pub(crate) prefix_len: usize,
    pub(crate) current_kg: Option<KeyGroup>,
    /// `KG | K | [lenK] | NS | [lenNS]` of the last accessor. `KG | K` (the first `key_end` bytes) is written
    /// by `set_current_key` and kept while the current key stays; accessors rewrite only the rest.
    pub(crate) key_ns: Vec<u8>,
    /// End of `KG | K` in `key_ns` (the current key's bytes are `key_ns[prefix_len..key_end]`).
    pub(crate) key_end: usize,
    /// Scratch buffers for serialized values and user keys.
    pub(crate) scratch: Vec<u8>,
    pub(crate) scratch2: Vec<u8>,
    /// The buffers of the last map iteration, kept for the next one (see `state::access::map`'s cursor).
    pub(crate) map_batch: (Vec<u8>, Vec<(usize, usize, usize)>),
    /// Per state id: the registration made through this store (`None` = restored, not registered yet).
    registered: Vec<Option<Registered>>,
    /// The clock TTL is measured against.
    ttl_clock: Arc<dyn TtlTimeProvider>,
    /// The TTL states registered through this store.
    ttl_states: Vec<TtlRegistration>,
    /// Whether some TTL state cleans up incrementally on every record (every `set_current_key`).
    every_record_cleanup: bool,
    /// The in-memory heads of every timer queue, by state id.
    pub(crate) timer_heads: foldhash::HashMap<StateId, QueueHeads>,
}

/// A TTL state registered through the store: what its cleanup needs.
#[derive(Clone)]
struct TtlRegistration {
    id: StateId,
    layout: TtlLayout,
    config: crate::meta::TtlConfig,
}

impl<K: KeySerializer> KeyedStateStore<K> {
    /// Wraps a backend whose key serializer snapshot must equal `key_serializer`'s (or be compatible with it
    /// as is, for a backend restored from a savepoint).
    pub fn new(backend: Box<dyn StateBackend>, key_serializer: K) -> Result<Self> {
        let config = backend.config().clone();
        let compat = key_serializer.compatibility(&config.key_serializer);
        if !compat.is_compatible_as_is() {
            return Err(incompatible(
                "<key>",
                "key",
                &config.key_serializer,
                &key_serializer.snapshot(),
                compat,
            ));
        }
        let registered = vec![None; backend.states().len()];
        Ok(KeyedStateStore {
            prefix_len: key_group_prefix_len(config.max_parallelism),
            backend,
            key_serializer,
            current_kg: None,
            key_ns: Vec::with_capacity(64),
            key_end: 0,
            scratch: Vec::with_capacity(64),
            scratch2: Vec::with_capacity(64),
            map_batch: (Vec::new(), Vec::new()),
            registered,
            ttl_clock: Arc::new(SystemTimeProvider),
            ttl_states: Vec::new(),
            every_record_cleanup: false,
            timer_heads: foldhash::HashMap::default(),
        })
    }

    /// Sets the clock TTL is measured against (the system clock by default; [`crate::ttl::ManualClock`] in
    /// tests). Applies to every TTL state, registered already or later.
    pub fn set_ttl_time_provider(&mut self, clock: Arc<dyn TtlTimeProvider>) {
        self.ttl_clock = clock;
        for t in self.ttl_states.clone() {
            let filter = self.ttl_filter(&t.layout, &t.config);
            self.backend.set_ttl_filter(t.id, Some(filter));
        }
    }

    /// The clock TTL is measured against.
    pub fn ttl_time_provider(&self) -> &Arc<dyn TtlTimeProvider> {
        &self.ttl_clock
    }

    /// The current TTL time.
    #[inline]
    pub(crate) fn ttl_now(&self) -> i64 {
        self.ttl_clock.current_timestamp()
    }

    fn ttl_filter(&self, layout: &TtlLayout, config: &crate::meta::TtlConfig) -> TtlStateFilter {
        TtlStateFilter {
            layout: layout.clone(),
            ttl_millis: config.ttl_millis,
            clock: self.ttl_clock.clone(),
        }
    }

    /// Runs one step of the incremental TTL cleanup of state `id` (called on each access of a TTL state
    /// with incremental cleanup; `entries` is its configured size).
    pub(crate) fn ttl_cleanup(&mut self, id: StateId, entries: u32) -> Result<()> {
        let Some(t) = self.ttl_states.iter().find(|t| t.id == id) else {
            return Ok(());
        };
        let filter = self.ttl_filter(&t.layout, &t.config);
        let now = filter.now();
        self.backend
            .ttl_cleanup_step(id, entries as usize, &mut |v| filter.judge(v, now))?;
        Ok(())
    }

    /// Runs the incremental cleanup of every TTL state configured to clean up on every record (Flink's
    /// `runCleanupForEveryRecord`); `set_current_key` calls it.
    fn ttl_cleanup_every_record(&mut self) -> Result<()> {
        let due: Vec<(StateId, u32)> = self
            .ttl_states
            .iter()
            .filter_map(|t| match t.config.cleanup_incremental {
                Some((n, true)) => Some((t.id, n)),
                _ => None,
            })
            .collect();
        for (id, n) in due {
            self.ttl_cleanup(id, n)?;
        }
        Ok(())
    }

    /// The backend configuration for a store with this key serializer.
    pub fn config_for(
        key_serializer: &K,
        max_parallelism: u32,
        key_group_range: KeyGroupRange,
    ) -> BackendConfig {
        BackendConfig {
            max_parallelism,
            key_group_range,
            key_serializer: key_serializer.snapshot(),
        }
    }

    /// The backend's configuration.
    pub fn config(&self) -> &BackendConfig {
        self.backend.config()
    }

    /// The backend (for backend-specific operations).
    pub fn backend_mut(&mut self) -> &mut dyn StateBackend {
        self.backend.as_mut()
    }

    /// The key serializer.
    pub fn key_serializer(&self) -> &K {
        &self.key_serializer
    }

    /// The key group of `key` in this job.
    pub fn key_group_of(&self, key: &K::Value) -> Result<KeyGroup> {
        let mut buf = Vec::new();
        self.key_serializer
            .serialize(key, &mut buf)
            .map_err(|e| Error::serializer("<key>", e))?;
        Ok(key_group_for_hash(
            self.key_serializer.key_hash(key, &buf),
            self.backend.config().max_parallelism,
        ))
    }

    /// Sets the current key from its serialized bytes and key group (a fired timer's key).
    pub(crate) fn set_current_key_bytes(&mut self, kg: KeyGroup, key: &[u8]) -> Result<()> {
        self.key_ns.clear();
        crate::keygroup::write_key_group_prefix(&mut self.key_ns, kg, self.prefix_len);
        self.key_ns.extend_from_slice(key);
        self.key_end = self.key_ns.len();
        self.current_kg = Some(kg);
        if self.every_record_cleanup {
            self.ttl_cleanup_every_record()?;
        }
        Ok(())
    }

    /// The current key's serialized bytes, if a key is set.
    pub(crate) fn current_key_raw(&self) -> Option<(KeyGroup, &[u8])> {
        Some((self.current_kg?, self.current_key_bytes()))
    }

    /// Sets the key that state accesses apply to. Errors if its key group is not in this backend's range.
    #[inline]
    pub fn set_current_key(&mut self, key: &K::Value) -> Result<()> {
        // `KG | K` goes straight into `key_ns`: the prefix is filled in once the key group is known.
        let p = self.prefix_len;
        self.key_ns.clear();
        self.key_ns.extend_from_slice(&[0u8; 2][..p]);
        if let Err(e) = self.key_serializer.serialize(key, &mut self.key_ns) {
            self.current_kg = None;
            return Err(Error::serializer("<key>", e));
        }
        let cfg = self.backend.config();
        let kg = key_group_for_hash(
            self.key_serializer.key_hash(key, &self.key_ns[p..]),
            cfg.max_parallelism,
        );
        if !cfg.key_group_range.contains(kg) {
            self.current_kg = None;
            return Err(Error::KeyGroupOutOfRange {
                key_group: kg,
                range: cfg.key_group_range,
            });
        }
        if p == 2 {
            self.key_ns[..2].copy_from_slice(&kg.to_be_bytes());
        } else {
            self.key_ns[0] = kg as u8;
        }
        self.key_end = self.key_ns.len();
        self.current_kg = Some(kg);
        if self.every_record_cleanup {
            self.ttl_cleanup_every_record()?;
        }
        Ok(())
    }

    /// The current key's key group, if a key is set.
    pub fn current_key_group(&self) -> Option<KeyGroup> {
        self.current_kg
    }

    /// The current key, deserialized.
    pub fn current_key(&self) -> Result<Option<K::Value>> {
        if self.current_kg.is_none() {
            return Ok(None);
        }
        crate::serializer::from_bytes(&self.key_serializer, self.current_key_bytes())
            .map(Some)
            .map_err(|e| Error::serializer("<key>", e))
    }

    /// The current key's serialized bytes (meaningful only while a key is set).
    #[inline]
    fn current_key_bytes(&self) -> &[u8] {
        self.key_ns
            .get(self.prefix_len..self.key_end)
            .unwrap_or(&[])
    }

    /// Builds `KG | K | [lenK] | NS | [lenNS]` for the current key into `self.key_ns`.
    #[inline]
    pub(crate) fn build_key_ns<N: TypeSerializer>(
        &mut self,
        core: &HandleCore<N>,
        ns: &N::Value,
    ) -> Result<KeyGroup> {
        let Some(kg) = self.current_kg else {
            return Err(Error::NoCurrentKey);
        };
        self.key_ns.truncate(self.key_end);
        if core.ambiguous {
            let key_len = (self.key_end - self.prefix_len) as u32;
            write_variable_int_bytes(&mut self.key_ns, key_len);
        }
        let before = self.key_ns.len();
        core.namespace
            .serialize(ns, &mut self.key_ns)
            .map_err(|e| Error::serializer(&*core.name, e))?;
        if core.ambiguous {
            let ns_len = (self.key_ns.len() - before) as u32;
            write_variable_int_bytes(&mut self.key_ns, ns_len);
        }
        Ok(kg)
    }

    /// Takes the synchronous part of a snapshot: a consistent view to encode (on any thread) while this store
    /// keeps changing.
    ///
    /// States whose TTL asks for full-snapshot cleanup are seen without their expired values, map entries and
    /// list elements, as of the time the snapshot is taken.
    pub fn snapshot(&mut self) -> Result<Box<dyn BackendSnapshot>> {
        let inner = self.backend.snapshot()?;
        let filters: Vec<(StateId, TtlStateFilter)> = self
            .ttl_states
            .iter()
            .filter(|t| t.config.cleanup_full_snapshot)
            .map(|t| (t.id, self.ttl_filter(&t.layout, &t.config)))
            .collect();
        if filters.is_empty() {
            return Ok(inner);
        }
        let now = self.ttl_now();
        Ok(Box::new(super::ttl::CleaningSnapshot::new(
            inner, filters, now,
        )))
    }

    /// The synchronous part of checkpoint `id` through `checkpointer` (`design/checkpoints.md`): no cost in
    /// the state size. Run the returned part on any thread while this store keeps taking writes, then tell
    /// the checkpointer what the host decided (`notify_complete` / `notify_aborted`).
    #[cfg(feature = "checkpoints")]
    pub fn checkpoint(
        &mut self,
        checkpointer: &crate::checkpoint::Checkpointer,
        id: u64,
    ) -> Result<crate::checkpoint::PendingCheckpoint> {
        checkpointer.begin(id, self.backend.as_mut())
    }

    /// The number of stored entries over all states.
    pub fn num_entries(&mut self) -> Result<u64> {
        self.backend.num_entries()
    }

    /// The meta information of every state (registered or restored).
    pub fn states(&self) -> &[StateMetaInfo] {
        self.backend.states()
    }

    // ---------------------------------------------------------------- registration

    pub(crate) fn core<N: TypeSerializer>(
        &self,
        id: StateId,
        name: &str,
        namespace: Arc<N>,
    ) -> HandleCore<N> {
        let key_len = self.key_serializer.fixed_length();
        let ttl = self
            .registered
            .get(id)
            .and_then(|r| r.as_ref())
            .and_then(|r| r.meta.ttl.as_ref())
            .map(TtlParams::of);
        HandleCore {
            id,
            name: Arc::from(name),
            ambiguous: is_ambiguous_key_possible(key_len, namespace.fixed_length()),
            namespace,
            ttl,
        }
    }

    /// Notes a registered state's TTL: its filter goes to the backend, its cleanup to the store.
    fn track_ttl(&mut self, id: StateId) {
        let Some(Some(reg)) = self.registered.get(id) else {
            return;
        };
        self.ttl_states.retain(|t| t.id != id);
        match (&reg.meta.ttl, &reg.ttl_layout) {
            (Some(config), Some(layout)) => {
                let t = TtlRegistration {
                    id,
                    layout: layout.clone(),
                    config: config.clone(),
                };
                let filter = self.ttl_filter(&t.layout, &t.config);
                self.ttl_states.push(t);
                self.backend.set_ttl_filter(id, Some(filter));
            }
            _ => self.backend.set_ttl_filter(id, None),
        }
        self.every_record_cleanup = self
            .ttl_states
            .iter()
            .any(|t| matches!(t.config.cleanup_incremental, Some((_, true))));
    }

    /// Registers `reg`, checking it against a state of the same name registered before (must be identical)
    /// or restored (namespace compatible as is; value compatible, or migrated).
    pub(crate) fn register_meta(&mut self, reg: Registered) -> Result<StateId> {
        let meta = reg.meta.clone();
        let existing = self
            .backend
            .states()
            .iter()
            .position(|s| s.name == meta.name);
        let Some(id) = existing else {
            let id = self.backend.register_state(meta)?;
            self.track(id, reg);
            return Ok(id);
        };
        let old = self.backend.states()[id].clone();
        if old.kind != meta.kind {
            return Err(Error::StateKindMismatch {
                name: meta.name,
                existing: old.kind,
                requested: meta.kind,
            });
        }
        if let Some(Some(prev)) = self.registered.get(id) {
            // Registered through this store before: must be the same type.
            let prev = &prev.meta;
            if prev.value_serializer != meta.value_serializer {
                return Err(Error::StateTypeMismatch {
                    name: meta.name,
                    role: "value",
                    existing: Box::new(prev.value_serializer.clone()),
                    requested: Box::new(meta.value_serializer),
                });
            }
            if prev.namespace_serializer != meta.namespace_serializer {
                return Err(Error::StateTypeMismatch {
                    name: meta.name,
                    role: "namespace",
                    existing: Box::new(prev.namespace_serializer.clone()),
                    requested: Box::new(meta.namespace_serializer),
                });
            }
            return Ok(id);
        }
        // Restored and not registered yet: check compatibility, migrate if needed.
        if reg.check(&old)? == RestorePlan::Migrate {
            reg.migrate(self.backend.as_mut(), id, &old.value_serializer)?;
        }
        let id = self.backend.register_state(meta)?;
        self.track(id, reg);
        Ok(id)
    }

    /// Hands the fold of reducing or aggregating state `id` (without TTL) to the backend, whether its adds
    /// will be operands or not: operands an earlier run wrote must read back. Returns whether the backend
    /// takes adds as merge operands.
    fn install_fold<S: TypeSerializer>(&mut self, id: StateId, fold: FoldWith<S>) -> bool {
        self.backend.set_value_merge(id, Arc::new(fold))
    }

    fn track(&mut self, id: StateId, reg: Registered) {
        if self.registered.len() <= id {
            self.registered.resize(id + 1, None);
        }
        self.registered[id] = Some(reg);
        self.track_ttl(id);
    }

    /// Notes states that appeared in the backend (e.g. after a restore) as not registered yet.
    pub(crate) fn sync_registered(&mut self) {
        // Timer queues are read again from the backend on their next use.
        for heads in self.timer_heads.values_mut() {
            heads.invalidate();
        }
        let n = self.backend.states().len();
        if self.registered.len() < n {
            self.registered.resize(n, None);
        }
    }

    /// The registration of the state named `name`, if it was registered through this store.
    pub(crate) fn registration(&self, name: &str) -> Option<&Registered> {
        self.registered
            .iter()
            .flatten()
            .find(|r| r.meta.name == name)
    }

    /// Registers a value state.
    pub fn register_value<V: TypeSerializer, N: TypeSerializer>(
        &mut self,
        d: ValueStateDescriptor<V, N>,
    ) -> Result<ValueState<V, N>> {
        let ser = Arc::new(d.serializer);
        let ns = Arc::new(d.namespace);
        let reg = whole_value_registration(&d.name, StateKind::Value, &ns, &ser, d.ttl);
        let id = self.register_meta(reg)?;
        Ok(ValueState {
            core: self.core(id, &d.name, ns),
            serializer: ser,
            default: d.default.map(Arc::new),
        })
    }

    /// Registers a list state.
    pub fn register_list<E: TypeSerializer, N: TypeSerializer>(
        &mut self,
        d: ListStateDescriptor<E, N>,
    ) -> Result<ListState<E, N>> {
        let el = Arc::new(d.element);
        let ns = Arc::new(d.namespace);
        let reg = match d.ttl {
            Some(ttl) => {
                let stored = Arc::new(TtlSerializer::new(el.clone()));
                let len = element_length(stored.clone());
                let mut reg = list_registration(&d.name, &ns, stored, Some(ttl));
                reg.ttl_layout = Some(TtlLayout::List(len));
                reg
            }
            None => list_registration(&d.name, &ns, el.clone(), None),
        };
        let id = self.register_meta(reg)?;
        Ok(ListState {
            core: self.core(id, &d.name, ns),
            element: el,
        })
    }

    /// Registers a map state.
    pub fn register_map<UK: TypeSerializer, UV: TypeSerializer, N: TypeSerializer>(
        &mut self,
        d: MapStateDescriptor<UK, UV, N>,
    ) -> Result<MapState<UK, UV, N>> {
        let uk = Arc::new(d.user_key);
        let uv = Arc::new(d.user_value);
        let ns = Arc::new(d.namespace);
        let reg = match d.ttl {
            Some(ttl) => {
                let stored = Arc::new(TtlSerializer::new(uv.clone()));
                let mut reg = map_registration(&d.name, &ns, &uk, stored, Some(ttl));
                reg.ttl_layout = Some(TtlLayout::MapEntry);
                reg
            }
            None => map_registration(&d.name, &ns, &uk, uv.clone(), None),
        };
        let id = self.register_meta(reg)?;
        Ok(MapState {
            core: self.core(id, &d.name, ns),
            user_key: uk,
            user_value: uv,
        })
    }

    /// Registers a reducing state.
    pub fn register_reducing<V: TypeSerializer, N: TypeSerializer>(
        &mut self,
        d: ReducingStateDescriptor<V, N>,
    ) -> Result<ReducingState<V, N>> {
        let ser = Arc::new(d.serializer);
        let ns = Arc::new(d.namespace);
        let no_ttl = d.ttl.is_none();
        let reg = whole_value_registration(&d.name, StateKind::Reducing, &ns, &ser, d.ttl);
        let id = self.register_meta(reg)?;
        let reduce = d.reduce.clone();
        let operands = no_ttl
            && self.install_fold(
                id,
                FoldWith {
                    serializer: ser.clone(),
                    combine: Arc::new(move |a, b| reduce(&a, &b)),
                    associative: d.operands == Some(OperandFolding::Associative),
                },
            )
            && d.operands.is_some();
        Ok(ReducingState {
            core: self.core(id, &d.name, ns),
            serializer: ser,
            reduce: d.reduce,
            operands,
        })
    }

    /// Registers an aggregating state.
    pub fn register_aggregating<F, A, N>(
        &mut self,
        d: AggregatingStateDescriptor<F, A, N>,
    ) -> Result<AggregatingState<F, A, N>>
    where
        F: AggregateFunction,
        A: TypeSerializer<Value = F::Acc>,
        N: TypeSerializer,
    {
        let ser = Arc::new(d.accumulator);
        let ns = Arc::new(d.namespace);
        let no_ttl = d.ttl.is_none();
        let reg = whole_value_registration(&d.name, StateKind::Aggregating, &ns, &ser, d.ttl);
        let id = self.register_meta(reg)?;
        let function = Arc::new(d.function);
        let merge = function.clone();
        let operands = no_ttl
            && self.install_fold(
                id,
                FoldWith {
                    serializer: ser.clone(),
                    combine: Arc::new(move |a, b| merge.merge(a, b)),
                    associative: d.operands == Some(OperandFolding::Associative),
                },
            )
            && d.operands.is_some();
        Ok(AggregatingState {
            core: self.core(id, &d.name, ns),
            function,
            accumulator: ser,
            operands,
        })
    }

    // ---------------------------------------------------------------- key iteration

    /// Parses an entry key of `core`'s state into (key bytes, namespace bytes) with the current serializers.
    fn split<'a, N: TypeSerializer>(
        &self,
        core: &HandleCore<N>,
        entry_key: &'a [u8],
    ) -> Option<(&'a [u8], &'a [u8])> {
        let rest = entry_key.get(self.prefix_len..)?;
        let mut input = rest;
        self.key_serializer.deserialize(&mut input).ok()?;
        let key = &rest[..rest.len() - input.len()];
        if core.ambiguous {
            input = input.get(crate::layout::variable_int_len(key.len() as u32)..)?;
        }
        let ns_start = input;
        core.namespace.deserialize(&mut input).ok()?;
        let ns = &ns_start[..ns_start.len() - input.len()];
        Some((key, ns))
    }

    /// Every key that has an entry of `state` in namespace `ns`, each once, streamed key group by key group
    /// (in key-byte order within a key group): the store reads one key group of the state at a time
    /// (`StateBackend::scan_key_group`), keeps its distinct keys, and hands them out before it reads the next,
    /// so memory is bounded by one key group's keys and no backend lock is held while the caller runs. The
    /// iterator borrows the store: collect it first to change state per key (as
    /// [`apply_to_all_keys`](Self::apply_to_all_keys) does).
    pub fn keys<H: StateHandle>(
        &mut self,
        state: &H,
        ns: &<H::Namespace as TypeSerializer>::Value,
    ) -> Result<StateKeys<'_, K, H::Namespace>> {
        let core = state.core().clone();
        let mut ns_bytes = Vec::new();
        core.namespace
            .serialize(ns, &mut ns_bytes)
            .map_err(|e| Error::serializer(&*core.name, e))?;
        let groups = KeyGroups::of(self.backend.config().key_group_range);
        Ok(StateKeys {
            store: self,
            core,
            ns: ns_bytes,
            groups,
            batch: Default::default(),
            failed: false,
        })
    }

    /// Every (key, namespace) pair that has an entry of `state`, each once, streamed key group by key group
    /// as [`keys`](Self::keys) is (in byte order of the pair within a key group).
    pub fn keys_and_namespaces<H: StateHandle>(
        &mut self,
        state: &H,
    ) -> StateKeysAndNamespaces<'_, K, H::Namespace> {
        let core = state.core().clone();
        let groups = KeyGroups::of(self.backend.config().key_group_range);
        StateKeysAndNamespaces {
            store: self,
            core,
            groups,
            batch: Default::default(),
            failed: false,
        }
    }

    /// The distinct (key bytes, namespace bytes) of the entries of `core`'s state in key group `kg`, in byte
    /// order; with `ns`, only the keys in that namespace (namespace bytes left empty).
    fn key_group_keys<N: TypeSerializer>(
        &mut self,
        core: &HandleCore<N>,
        kg: KeyGroup,
        ns: Option<&[u8]>,
    ) -> Result<BTreeSet<(Vec<u8>, Vec<u8>)>> {
        let mut raw: Vec<Vec<u8>> = Vec::new();
        self.backend.scan_key_group(core.id, kg, &mut |k, _| {
            raw.push(k.to_vec());
            true
        })?;
        let mut found = BTreeSet::new();
        for k in &raw {
            let (key, n) = self.split(core, k).ok_or_else(|| Error::CorruptState {
                state: core.name.to_string(),
                detail: format!(
                    "entry key {k:02x?} does not parse with the registered serializers"
                ),
            })?;
            match ns {
                Some(want) if n != want => {}
                Some(_) => {
                    found.insert((key.to_vec(), Vec::new()));
                }
                None => {
                    found.insert((key.to_vec(), n.to_vec()));
                }
            }
        }
        Ok(found)
    }

    /// Calls `f` with every key that has an entry of `state` in `ns`, with that key set as the current key.
    /// `f` may read, change and clear any state (the keys are collected first, as in Flink).
    pub fn apply_to_all_keys<H: StateHandle>(
        &mut self,
        state: &H,
        ns: &<H::Namespace as TypeSerializer>::Value,
        mut f: impl FnMut(&mut Self, &K::Value) -> Result<()>,
    ) -> Result<()> {
        let keys: Vec<K::Value> = self.keys(state, ns)?.collect::<Result<_>>()?;
        let previous = self
            .current_kg
            .map(|kg| (kg, self.key_ns[..self.key_end].to_vec()));
        for key in &keys {
            self.set_current_key(key)?;
            f(self, key)?;
        }
        if let Some((kg, key_prefix)) = previous {
            self.current_kg = Some(kg);
            self.key_end = key_prefix.len();
            self.key_ns = key_prefix;
        }
        Ok(())
    }
}

/// The key groups of a range, in order (a nameable iterator for the key iterators' fields).
struct KeyGroups {
    range: KeyGroupRange,
    pos: usize,
}

impl KeyGroups {
    fn of(range: KeyGroupRange) -> Self {
        KeyGroups { range, pos: 0 }
    }
}

impl Iterator for KeyGroups {
    type Item = KeyGroup;

    fn next(&mut self) -> Option<KeyGroup> {
        if self.pos >= self.range.len() {
            return None;
        }
        let kg = u32::from(self.range.start()) + self.pos as u32;
        self.pos += 1;
        KeyGroup::try_from(kg).ok()
    }
}

/// The iterator of [`KeyedStateStore::keys`].
pub struct StateKeys<'s, K: KeySerializer, N: TypeSerializer> {
    store: &'s mut KeyedStateStore<K>,
    core: HandleCore<N>,
    ns: Vec<u8>,
    groups: KeyGroups,
    batch: std::collections::VecDeque<Vec<u8>>,
    failed: bool,
}

impl<K: KeySerializer, N: TypeSerializer> Iterator for StateKeys<'_, K, N> {
    type Item = Result<K::Value>;

    fn next(&mut self) -> Option<Self::Item> {
        while self.batch.is_empty() && !self.failed {
            let kg = self.groups.next()?;
            match self.store.key_group_keys(&self.core, kg, Some(&self.ns)) {
                Ok(found) => self.batch.extend(found.into_iter().map(|(k, _)| k)),
                Err(e) => {
                    self.failed = true;
                    return Some(Err(e));
                }
            }
        }
        let k = self.batch.pop_front()?;
        Some(
            crate::serializer::from_bytes(&self.store.key_serializer, &k)
                .map_err(|e| Error::serializer("<key>", e)),
        )
    }
}

/// The iterator of [`KeyedStateStore::keys_and_namespaces`].
pub struct StateKeysAndNamespaces<'s, K: KeySerializer, N: TypeSerializer> {
    store: &'s mut KeyedStateStore<K>,
    core: HandleCore<N>,
    groups: KeyGroups,
    batch: std::collections::VecDeque<(Vec<u8>, Vec<u8>)>,
    failed: bool,
}

impl<K: KeySerializer, N: TypeSerializer> Iterator for StateKeysAndNamespaces<'_, K, N> {
    type Item = Result<(K::Value, N::Value)>;

    fn next(&mut self) -> Option<Self::Item> {
        while self.batch.is_empty() && !self.failed {
            let kg = self.groups.next()?;
            match self.store.key_group_keys(&self.core, kg, None) {
                Ok(found) => self.batch.extend(found),
                Err(e) => {
                    self.failed = true;
                    return Some(Err(e));
                }
            }
        }
        let (k, n) = self.batch.pop_front()?;
        let decoded = crate::serializer::from_bytes(&self.store.key_serializer, &k)
            .map_err(|e| Error::serializer("<key>", e))
            .and_then(|key| {
                crate::serializer::from_bytes(&*self.core.namespace, &n)
                    .map(|ns| (key, ns))
                    .map_err(|e| Error::serializer(&*self.core.name, e))
            });
        Some(decoded)
    }
}
