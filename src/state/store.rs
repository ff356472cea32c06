//! [`KeyedStateStore`]: the typed front of a backend. Holds the current key, registers states, checks
//! serializer compatibility against restored state, and hands out accessors.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::descriptor::*;
use crate::backend::{BackendConfig, BackendSnapshot, StateBackend, StateId};
use crate::error::{Error, Result};
use crate::keygroup::{key_group_for_hash, key_group_prefix_len, KeyGroup, KeyGroupRange};
use crate::layout::{is_ambiguous_key_possible, write_variable_int_bytes, LIST_DELIMITER};
use crate::meta::{StateKind, StateMetaInfo};
use crate::serializer::{
    Compatibility, KeySerializer, SerializerSnapshot, TtlSerializer, TypeSerializer,
};
use crate::ttl::{SystemTimeProvider, TtlLayout, TtlStateFilter, TtlTimeProvider};

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
    /// Per state id: the registration made through this store (`None` = restored, not registered yet).
    registered: Vec<Option<Registered>>,
    /// The clock TTL is measured against.
    ttl_clock: Arc<dyn TtlTimeProvider>,
    /// The TTL states registered through this store.
    ttl_states: Vec<TtlRegistration>,
    /// Whether some TTL state cleans up incrementally on every record (every `set_current_key`).
    every_record_cleanup: bool,
    /// The in-memory heads of every timer queue, by state id.
    pub(crate) timer_heads: std::collections::HashMap<StateId, super::timers::QueueHeads>,
}

/// A TTL state registered through the store: what its cleanup needs.
#[derive(Clone)]
struct TtlRegistration {
    id: StateId,
    layout: TtlLayout,
    config: crate::meta::TtlConfig,
}

type CompatFn = Arc<dyn Fn(&SerializerSnapshot) -> Compatibility + Send + Sync>;
type MigrateFn = Arc<dyn Fn(&SerializerSnapshot, &[u8]) -> Result<Vec<u8>> + Send + Sync>;

/// A state registered through the store: its meta and type-erased checks against restored serializers.
#[derive(Clone)]
pub(crate) struct Registered {
    pub(crate) meta: StateMetaInfo,
    ns_compat: CompatFn,
    value_compat: CompatFn,
    migrate: MigrateFn,
    /// Where the stored values carry their TTL timestamps (TTL states only).
    ttl_layout: Option<TtlLayout>,
}

/// What must happen to a restored state's values for a registration to use them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RestorePlan {
    /// Use the bytes as they are.
    AsIs,
    /// Rewrite every value with the registration's migration.
    Migrate,
}

impl Registered {
    /// Checks a restored state against this registration (kind, namespace, value serializers).
    pub(crate) fn check(&self, restored: &StateMetaInfo) -> Result<RestorePlan> {
        let meta = &self.meta;
        if restored.kind != meta.kind {
            return Err(Error::StateKindMismatch {
                name: meta.name.clone(),
                existing: restored.kind,
                requested: meta.kind,
            });
        }
        if restored.ttl.is_some() != meta.ttl.is_some() {
            return Err(Error::TtlToggled {
                name: meta.name.clone(),
                restored_with_ttl: restored.ttl.is_some(),
            });
        }
        let nc = (self.ns_compat)(&restored.namespace_serializer);
        if !nc.is_compatible_as_is() {
            return Err(incompatible(
                &meta.name,
                "namespace",
                &restored.namespace_serializer,
                &meta.namespace_serializer,
                nc,
            ));
        }
        match (self.value_compat)(&restored.value_serializer) {
            Compatibility::CompatibleAsIs | Compatibility::CompatibleWithReconfiguredSerializer => {
                Ok(RestorePlan::AsIs)
            }
            Compatibility::CompatibleAfterMigration => Ok(RestorePlan::Migrate),
            vc @ Compatibility::Incompatible(_) => Err(incompatible(
                &meta.name,
                "value",
                &restored.value_serializer,
                &meta.value_serializer,
                vc,
            )),
        }
    }

    /// Rewrites the values of backend state `id` from the restored serializer `previous`.
    pub(crate) fn migrate(
        &self,
        backend: &mut dyn StateBackend,
        id: StateId,
        previous: &SerializerSnapshot,
    ) -> Result<()> {
        let m = self.migrate.clone();
        let prev = previous.clone();
        backend.transform_values(id, &mut |bytes| m(&prev, bytes).map(Some))
    }
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
            registered,
            ttl_clock: Arc::new(SystemTimeProvider),
            ttl_states: Vec::new(),
            every_record_cleanup: false,
            timer_heads: std::collections::HashMap::new(),
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
    pub fn checkpoint(
        &mut self,
        checkpointer: &crate::checkpoint::Checkpointer,
        id: u64,
    ) -> std::result::Result<crate::checkpoint::PendingCheckpoint, crate::checkpoint::CheckpointError>
    {
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
        let reg = whole_value_registration(&d.name, StateKind::Reducing, &ns, &ser, d.ttl);
        let id = self.register_meta(reg)?;
        Ok(ReducingState {
            core: self.core(id, &d.name, ns),
            serializer: ser,
            reduce: d.reduce,
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
        let reg = whole_value_registration(&d.name, StateKind::Aggregating, &ns, &ser, d.ttl);
        let id = self.register_meta(reg)?;
        Ok(AggregatingState {
            core: self.core(id, &d.name, ns),
            function: Arc::new(d.function),
            accumulator: ser,
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

    /// Every key that has an entry of `state` in namespace `ns` (each key once, in key-byte order).
    pub fn keys<H: StateHandle>(
        &mut self,
        state: &H,
        ns: &<H::Namespace as TypeSerializer>::Value,
    ) -> Result<Vec<K::Value>> {
        let core = state.core().clone();
        let mut ns_bytes = Vec::new();
        core.namespace
            .serialize(ns, &mut ns_bytes)
            .map_err(|e| Error::serializer(&*core.name, e))?;
        let mut found: BTreeSet<Vec<u8>> = BTreeSet::new();
        let mut raw: Vec<Vec<u8>> = Vec::new();
        self.backend.scan_state(core.id, &mut |_, k, _| {
            raw.push(k.to_vec());
            true
        })?;
        for k in &raw {
            if let Some((key, n)) = self.split(&core, k) {
                if n == ns_bytes.as_slice() {
                    found.insert(key.to_vec());
                }
            }
        }
        found
            .iter()
            .map(|k| {
                crate::serializer::from_bytes(&self.key_serializer, k)
                    .map_err(|e| Error::serializer("<key>", e))
            })
            .collect()
    }

    /// Every (key, namespace) pair that has an entry of `state` (each pair once).
    pub fn keys_and_namespaces<H: StateHandle>(
        &mut self,
        state: &H,
    ) -> Result<Vec<(K::Value, <H::Namespace as TypeSerializer>::Value)>> {
        let core = state.core().clone();
        let mut raw: Vec<Vec<u8>> = Vec::new();
        self.backend.scan_state(core.id, &mut |_, k, _| {
            raw.push(k.to_vec());
            true
        })?;
        let mut pairs: BTreeSet<(Vec<u8>, Vec<u8>)> = BTreeSet::new();
        for k in &raw {
            let (key, ns) = self.split(&core, k).ok_or_else(|| Error::Corruption {
                location: format!("state '{}'", core.name),
                detail: format!(
                    "entry key {k:02x?} does not parse with the registered serializers"
                ),
            })?;
            pairs.insert((key.to_vec(), ns.to_vec()));
        }
        pairs
            .into_iter()
            .map(|(k, n)| {
                let key = crate::serializer::from_bytes(&self.key_serializer, &k)
                    .map_err(|e| Error::serializer("<key>", e))?;
                let ns = crate::serializer::from_bytes(&*core.namespace, &n)
                    .map_err(|e| Error::serializer(&*core.name, e))?;
                Ok((key, ns))
            })
            .collect()
    }

    /// Calls `f` with every key that has an entry of `state` in `ns`, with that key set as the current key.
    /// `f` may read, change and clear any state (the keys are collected first, as in Flink).
    pub fn apply_to_all_keys<H: StateHandle>(
        &mut self,
        state: &H,
        ns: &<H::Namespace as TypeSerializer>::Value,
        mut f: impl FnMut(&mut Self, &K::Value) -> Result<()>,
    ) -> Result<()> {
        let keys = self.keys(state, ns)?;
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

/// The registration of a state whose value is one serialized value (value, reducing, aggregating): the value
/// serializer checks compatibility itself and migrates the whole value. With TTL, the stored serializer is
/// Flink's `TtlSerializer` around `ser`.
fn whole_value_registration<S: TypeSerializer, N: TypeSerializer>(
    name: &str,
    kind: StateKind,
    ns: &Arc<N>,
    ser: &Arc<S>,
    ttl: Option<crate::meta::TtlConfig>,
) -> Registered {
    match ttl {
        Some(ttl) => {
            let stored = Arc::new(TtlSerializer::new(ser.clone()));
            let mut reg = stored_value_registration(name, kind, ns, &stored, Some(ttl));
            reg.ttl_layout = Some(TtlLayout::Value);
            reg
        }
        None => stored_value_registration(name, kind, ns, ser, None),
    }
}

fn stored_value_registration<S: TypeSerializer, N: TypeSerializer>(
    name: &str,
    kind: StateKind,
    ns: &Arc<N>,
    ser: &Arc<S>,
    ttl: Option<crate::meta::TtlConfig>,
) -> Registered {
    let (compat_ser, migrate_ser, n) = (ser.clone(), ser.clone(), name.to_string());
    Registered {
        meta: meta(name, kind, ns.snapshot(), ser.snapshot(), ttl),
        ns_compat: ns_compat(ns),
        value_compat: Arc::new(move |old| compat_ser.compatibility(old)),
        migrate: Arc::new(move |prev, b| migrate_whole(&n, &*migrate_ser, prev, b)),
        ttl_layout: None,
    }
}

/// The registration of a timer queue: Flink's `TimerSerializer` snapshot over the key and namespace
/// serializers; both must be compatible as they are (timer entries are keys: never migrated).
pub(crate) fn timer_registration<K: TypeSerializer, N: TypeSerializer>(
    name: &str,
    key: &K,
    ns: &Arc<N>,
) -> Registered {
    let element = SerializerSnapshot::composite(
        super::timers::TIMER_SNAPSHOT_ID,
        crate::serializer::COMPOSITE_SNAPSHOT_VERSION,
        vec![key.snapshot(), ns.snapshot()],
    );
    let current = element.clone();
    Registered {
        meta: meta(name, StateKind::Timers, ns.snapshot(), element, None),
        ns_compat: ns_compat(ns),
        value_compat: Arc::new(move |old| {
            if *old == current {
                Compatibility::CompatibleAsIs
            } else {
                Compatibility::Incompatible(format!(
                    "timer element serializer {current} cannot read timers written by {old}"
                ))
            }
        }),
        migrate: Arc::new(|prev, _| {
            Err(Error::InvalidArgument(format!(
                "timers written by {prev} cannot be migrated"
            )))
        }),
        ttl_layout: None,
    }
}

/// The registration of a list state whose stored elements `el` writes.
fn list_registration<S: TypeSerializer, N: TypeSerializer>(
    name: &str,
    ns: &Arc<N>,
    el: Arc<S>,
    ttl: Option<crate::meta::TtlConfig>,
) -> Registered {
    Registered {
        meta: meta(
            name,
            StateKind::List,
            ns.snapshot(),
            list_state_snapshot(el.snapshot()),
            ttl,
        ),
        ns_compat: ns_compat(ns),
        value_compat: {
            let e = el.clone();
            Arc::new(move |old| nested_compat(old, LIST_SNAPSHOT_ID, 0, |s| e.compatibility(s)))
        },
        migrate: {
            let n = name.to_string();
            Arc::new(move |prev, b| {
                let prev_el = prev.nested.first().cloned().unwrap_or_else(|| prev.clone());
                migrate_list(&n, &*el, &prev_el, b)
            })
        },
        ttl_layout: None,
    }
}

/// The registration of a map state whose stored values `uv` writes.
fn map_registration<UK: TypeSerializer, S: TypeSerializer, N: TypeSerializer>(
    name: &str,
    ns: &Arc<N>,
    uk: &Arc<UK>,
    uv: Arc<S>,
    ttl: Option<crate::meta::TtlConfig>,
) -> Registered {
    Registered {
        meta: meta(
            name,
            StateKind::Map,
            ns.snapshot(),
            map_state_snapshot(uk.snapshot(), uv.snapshot()),
            ttl,
        ),
        ns_compat: ns_compat(ns),
        value_compat: {
            let (uk, uv) = (uk.clone(), uv.clone());
            Arc::new(move |old| {
                // The user key is part of the entry key: it may never be migrated (as in Flink).
                let kc = nested_compat(old, MAP_SNAPSHOT_ID, 0, |s| uk.compatibility(s));
                match kc {
                    Compatibility::CompatibleAsIs | Compatibility::CompatibleWithReconfiguredSerializer => {
                        nested_compat(old, MAP_SNAPSHOT_ID, 1, |s| uv.compatibility(s))
                    }
                    Compatibility::Incompatible(r) => Compatibility::Incompatible(r),
                    Compatibility::CompatibleAfterMigration => Compatibility::Incompatible(
                        "the map user-key serializer would need migration; user keys are never migrated".into(),
                    ),
                }
            })
        },
        migrate: {
            let n = name.to_string();
            Arc::new(move |prev, b| {
                let prev_v = prev.nested.get(1).cloned().unwrap_or_else(|| prev.clone());
                migrate_map_value(&n, &*uv, &prev_v, b)
            })
        },
        ttl_layout: None,
    }
}

/// The length function of stored TTL list elements: a fixed length when the serializer has one, else one
/// deserialization per element.
fn element_length<S: TypeSerializer>(el: Arc<S>) -> crate::ttl::ElementLength {
    match el.fixed_length() {
        Some(n) => Arc::new(move |b: &[u8]| (b.len() >= n).then_some(n)),
        None => Arc::new(move |b: &[u8]| {
            let mut input = b;
            el.deserialize(&mut input).ok()?;
            Some(b.len() - input.len())
        }),
    }
}

fn ns_compat<N: TypeSerializer>(ns: &Arc<N>) -> CompatFn {
    let ns = ns.clone();
    Arc::new(move |old| ns.compatibility(old))
}

pub(crate) fn incompatible(
    state: &str,
    role: &'static str,
    previous: &SerializerSnapshot,
    new: &SerializerSnapshot,
    compat: Compatibility,
) -> Error {
    let reason = match compat {
        Compatibility::Incompatible(r) => r,
        Compatibility::CompatibleAfterMigration => {
            format!("{role} serializers can be reconfigured but never migrated")
        }
        _ => String::new(),
    };
    Error::IncompatibleSerializer {
        state: state.to_string(),
        role,
        previous: Box::new(previous.clone()),
        new: Box::new(new.clone()),
        reason,
    }
}

/// Compatibility of a nested serializer of a composite state snapshot (list element, map key or value).
fn nested_compat(
    old: &SerializerSnapshot,
    expected_id: &str,
    index: usize,
    check: impl Fn(&SerializerSnapshot) -> Compatibility,
) -> Compatibility {
    if old.identifier != expected_id {
        return Compatibility::Incompatible(format!(
            "expected {expected_id}, found {}",
            old.identifier
        ));
    }
    match old.nested.get(index) {
        Some(n) => check(n),
        None => Compatibility::Incompatible(format!(
            "{} has no nested serializer {index}",
            old.identifier
        )),
    }
}

fn migrate_whole<S: TypeSerializer>(
    name: &str,
    ser: &S,
    prev: &SerializerSnapshot,
    bytes: &[u8],
) -> Result<Vec<u8>> {
    let mut input = bytes;
    let v = ser
        .deserialize_previous(prev, &mut input)
        .map_err(|e| Error::serializer(name, e))?;
    let mut out = Vec::with_capacity(bytes.len());
    ser.serialize(&v, &mut out)
        .map_err(|e| Error::serializer(name, e))?;
    Ok(out)
}

fn migrate_list<S: TypeSerializer>(
    name: &str,
    ser: &S,
    prev: &SerializerSnapshot,
    bytes: &[u8],
) -> Result<Vec<u8>> {
    let mut input = bytes;
    let mut out = Vec::with_capacity(bytes.len());
    while !input.is_empty() {
        let v = ser
            .deserialize_previous(prev, &mut input)
            .map_err(|e| Error::serializer(name, e))?;
        if !out.is_empty() {
            out.push(LIST_DELIMITER);
        }
        ser.serialize(&v, &mut out)
            .map_err(|e| Error::serializer(name, e))?;
        if !input.is_empty() {
            input = &input[1..];
        }
    }
    Ok(out)
}

fn migrate_map_value<S: TypeSerializer>(
    name: &str,
    ser: &S,
    prev: &SerializerSnapshot,
    bytes: &[u8],
) -> Result<Vec<u8>> {
    match bytes.split_first() {
        Some((&crate::layout::MAP_VALUE_PRESENT, rest)) => {
            let mut out = vec![crate::layout::MAP_VALUE_PRESENT];
            let mut input = rest;
            let v = ser
                .deserialize_previous(prev, &mut input)
                .map_err(|e| Error::serializer(name, e))?;
            ser.serialize(&v, &mut out)
                .map_err(|e| Error::serializer(name, e))?;
            Ok(out)
        }
        _ => Ok(bytes.to_vec()),
    }
}
