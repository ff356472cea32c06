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
use crate::serializer::{Compatibility, KeySerializer, SerializerSnapshot, TypeSerializer};

/// The typed keyed-state store over one backend: Flink's keyed state backend with an implicit current key.
///
/// Set the current key with [`set_current_key`](Self::set_current_key); every state access then applies to
/// that key (its bytes and key group are computed once per key, not per access).
pub struct KeyedStateStore<K: KeySerializer> {
    pub(crate) backend: Box<dyn StateBackend>,
    key_serializer: K,
    prefix_len: usize,
    pub(crate) current_kg: Option<KeyGroup>,
    current_key: Vec<u8>,
    /// `KG | K | [lenK] | NS | [lenNS]` of the last accessor.
    pub(crate) key_ns: Vec<u8>,
    /// Scratch buffers for serialized values and user keys.
    pub(crate) scratch: Vec<u8>,
    pub(crate) scratch2: Vec<u8>,
    /// Per state id: the meta registered through this store (`None` = restored, not registered yet).
    registered: Vec<Option<StateMetaInfo>>,
}

impl<K: KeySerializer> KeyedStateStore<K> {
    /// Wraps a backend whose key serializer snapshot must equal `key_serializer`'s (or be compatible with it
    /// as is, for a backend restored from a savepoint).
    pub fn new(backend: Box<dyn StateBackend>, key_serializer: K) -> Result<Self> {
        let config = backend.config().clone();
        let compat = key_serializer.compatibility(&config.key_serializer);
        if !compat.is_compatible_as_is() {
            return Err(incompatible("<key>", "key", &config.key_serializer, &key_serializer.snapshot(), compat));
        }
        let registered = vec![None; backend.states().len()];
        Ok(KeyedStateStore {
            prefix_len: key_group_prefix_len(config.max_parallelism),
            backend,
            key_serializer,
            current_kg: None,
            current_key: Vec::with_capacity(32),
            key_ns: Vec::with_capacity(64),
            scratch: Vec::with_capacity(64),
            scratch2: Vec::with_capacity(64),
            registered,
        })
    }

    /// The backend configuration for a store with this key serializer.
    pub fn config_for(key_serializer: &K, max_parallelism: u32, key_group_range: KeyGroupRange) -> BackendConfig {
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

    /// Sets the key that state accesses apply to. Errors if its key group is not in this backend's range.
    #[inline]
    pub fn set_current_key(&mut self, key: &K::Value) -> Result<()> {
        self.current_key.clear();
        self.key_serializer
            .serialize(key, &mut self.current_key)
            .map_err(|e| Error::serializer("<key>", e))?;
        let cfg = self.backend.config();
        let kg = key_group_for_hash(self.key_serializer.key_hash(key, &self.current_key), cfg.max_parallelism);
        if !cfg.key_group_range.contains(kg) {
            self.current_kg = None;
            return Err(Error::KeyGroupOutOfRange {
                key_group: kg,
                range: cfg.key_group_range,
            });
        }
        self.current_kg = Some(kg);
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
        crate::serializer::from_bytes(&self.key_serializer, &self.current_key)
            .map(Some)
            .map_err(|e| Error::serializer("<key>", e))
    }

    /// Builds `KG | K | [lenK] | NS | [lenNS]` for the current key into `self.key_ns`.
    #[inline]
    pub(crate) fn build_key_ns<N: TypeSerializer>(&mut self, core: &HandleCore<N>, ns: &N::Value) -> Result<KeyGroup> {
        let kg = self.current_kg.ok_or(Error::NoCurrentKey)?;
        self.key_ns.clear();
        crate::keygroup::write_key_group_prefix(&mut self.key_ns, kg, self.prefix_len);
        self.key_ns.extend_from_slice(&self.current_key);
        if core.ambiguous {
            write_variable_int_bytes(&mut self.key_ns, self.current_key.len() as u32);
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
    pub fn snapshot(&mut self) -> Result<Box<dyn BackendSnapshot>> {
        self.backend.snapshot()
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

    fn core<N: TypeSerializer>(&self, id: StateId, name: &str, namespace: N) -> HandleCore<N> {
        let key_len = self.key_serializer.fixed_length();
        HandleCore {
            id,
            name: Arc::from(name),
            ambiguous: is_ambiguous_key_possible(key_len, namespace.fixed_length()),
            namespace: Arc::new(namespace),
        }
    }

    /// Registers `meta`, checking it against a state of the same name registered before (must be identical)
    /// or restored (namespace compatible as is; value compatible, or migrated with `migrate`).
    fn register_meta(
        &mut self,
        meta: StateMetaInfo,
        ns_compat: &dyn Fn(&SerializerSnapshot) -> Compatibility,
        value_compat: &dyn Fn(&SerializerSnapshot) -> Compatibility,
        migrate: &dyn Fn(&SerializerSnapshot, &[u8]) -> Result<Vec<u8>>,
    ) -> Result<StateId> {
        let existing = self.backend.states().iter().position(|s| s.name == meta.name);
        let Some(id) = existing else {
            let id = self.backend.register_state(meta.clone())?;
            self.track(id, meta);
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
        if let Some(Some(reg)) = self.registered.get(id) {
            // Registered through this store before: must be the same type.
            if reg.value_serializer != meta.value_serializer {
                return Err(Error::StateTypeMismatch {
                    name: meta.name,
                    role: "value",
                    existing: Box::new(reg.value_serializer.clone()),
                    requested: Box::new(meta.value_serializer),
                });
            }
            if reg.namespace_serializer != meta.namespace_serializer {
                return Err(Error::StateTypeMismatch {
                    name: meta.name,
                    role: "namespace",
                    existing: Box::new(reg.namespace_serializer.clone()),
                    requested: Box::new(meta.namespace_serializer),
                });
            }
            return Ok(id);
        }
        // Restored and not registered yet: check compatibility, migrate if needed.
        let nc = ns_compat(&old.namespace_serializer);
        if !nc.is_compatible_as_is() {
            return Err(incompatible(&meta.name, "namespace", &old.namespace_serializer, &meta.namespace_serializer, nc));
        }
        let vc = value_compat(&old.value_serializer);
        match vc {
            Compatibility::CompatibleAsIs | Compatibility::CompatibleWithReconfiguredSerializer => {}
            Compatibility::CompatibleAfterMigration => {
                let prev = old.value_serializer.clone();
                self.backend
                    .transform_values(id, &mut |bytes| migrate(&prev, bytes).map(Some))?;
            }
            Compatibility::Incompatible(_) => {
                return Err(incompatible(&meta.name, "value", &old.value_serializer, &meta.value_serializer, vc));
            }
        }
        let id = self.backend.register_state(meta.clone())?;
        self.track(id, meta);
        Ok(id)
    }

    fn track(&mut self, id: StateId, meta: StateMetaInfo) {
        if self.registered.len() <= id {
            self.registered.resize(id + 1, None);
        }
        self.registered[id] = Some(meta);
    }

    /// Notes states that appeared in the backend (e.g. after a restore) as not registered yet.
    pub(crate) fn sync_registered(&mut self) {
        let n = self.backend.states().len();
        if self.registered.len() < n {
            self.registered.resize(n, None);
        }
    }

    /// Whether the state with this id has been registered through this store (not only restored).
    pub(crate) fn is_registered(&self, id: StateId) -> bool {
        matches!(self.registered.get(id), Some(Some(_)))
    }

    /// Checks a new serializer set against a restored state without registering it (used by restore to
    /// check everything before loading anything).
    pub(crate) fn registered_meta(&self, name: &str) -> Option<&StateMetaInfo> {
        self.registered.iter().flatten().find(|m| m.name == name)
    }

    /// Registers a value state.
    pub fn register_value<V: TypeSerializer, N: TypeSerializer>(
        &mut self,
        d: ValueStateDescriptor<V, N>,
    ) -> Result<ValueState<V, N>> {
        let meta = meta(&d.name, StateKind::Value, d.namespace.snapshot(), d.serializer.snapshot());
        let ser = &d.serializer;
        let id = self.register_meta(
            meta,
            &|old| d.namespace.compatibility(old),
            &|old| ser.compatibility(old),
            &|prev, bytes| migrate_whole(&d.name, ser, prev, bytes),
        )?;
        Ok(ValueState {
            core: self.core(id, &d.name, d.namespace),
            serializer: Arc::new(d.serializer),
            default: d.default.map(Arc::new),
        })
    }

    /// Registers a list state.
    pub fn register_list<E: TypeSerializer, N: TypeSerializer>(
        &mut self,
        d: ListStateDescriptor<E, N>,
    ) -> Result<ListState<E, N>> {
        let meta = meta(&d.name, StateKind::List, d.namespace.snapshot(), list_state_snapshot(d.element.snapshot()));
        let el = &d.element;
        let id = self.register_meta(
            meta,
            &|old| d.namespace.compatibility(old),
            &|old| nested_compat(old, LIST_STATE_SNAPSHOT_ID, 0, |s| el.compatibility(s)),
            &|prev, bytes| {
                let prev_el = prev.nested.first().cloned().unwrap_or_else(|| prev.clone());
                migrate_list(&d.name, el, &prev_el, bytes)
            },
        )?;
        Ok(ListState {
            core: self.core(id, &d.name, d.namespace),
            element: Arc::new(d.element),
        })
    }

    /// Registers a map state.
    pub fn register_map<UK: TypeSerializer, UV: TypeSerializer, N: TypeSerializer>(
        &mut self,
        d: MapStateDescriptor<UK, UV, N>,
    ) -> Result<MapState<UK, UV, N>> {
        let meta = meta(
            &d.name,
            StateKind::Map,
            d.namespace.snapshot(),
            map_state_snapshot(d.user_key.snapshot(), d.user_value.snapshot()),
        );
        let (uk, uv) = (&d.user_key, &d.user_value);
        let id = self.register_meta(
            meta,
            &|old| d.namespace.compatibility(old),
            &|old| {
                // The user key is part of the entry key: it may never be migrated (as in Flink).
                let kc = nested_compat(old, MAP_STATE_SNAPSHOT_ID, 0, |s| uk.compatibility(s));
                if !kc.is_compatible_as_is() {
                    return match kc {
                        Compatibility::Incompatible(r) => Compatibility::Incompatible(r),
                        _ => Compatibility::Incompatible("map user-key serializer would need migration".into()),
                    };
                }
                nested_compat(old, MAP_STATE_SNAPSHOT_ID, 1, |s| uv.compatibility(s))
            },
            &|prev, bytes| {
                let prev_v = prev.nested.get(1).cloned().unwrap_or_else(|| prev.clone());
                migrate_map_value(&d.name, uv, &prev_v, bytes)
            },
        )?;
        Ok(MapState {
            core: self.core(id, &d.name, d.namespace),
            user_key: Arc::new(d.user_key),
            user_value: Arc::new(d.user_value),
        })
    }

    /// Registers a reducing state.
    pub fn register_reducing<V: TypeSerializer, N: TypeSerializer>(
        &mut self,
        d: ReducingStateDescriptor<V, N>,
    ) -> Result<ReducingState<V, N>> {
        let meta = meta(&d.name, StateKind::Reducing, d.namespace.snapshot(), d.serializer.snapshot());
        let ser = &d.serializer;
        let id = self.register_meta(
            meta,
            &|old| d.namespace.compatibility(old),
            &|old| ser.compatibility(old),
            &|prev, bytes| migrate_whole(&d.name, ser, prev, bytes),
        )?;
        Ok(ReducingState {
            core: self.core(id, &d.name, d.namespace),
            serializer: Arc::new(d.serializer),
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
        let meta = meta(&d.name, StateKind::Aggregating, d.namespace.snapshot(), d.accumulator.snapshot());
        let ser = &d.accumulator;
        let id = self.register_meta(
            meta,
            &|old| d.namespace.compatibility(old),
            &|old| ser.compatibility(old),
            &|prev, bytes| migrate_whole(&d.name, ser, prev, bytes),
        )?;
        Ok(AggregatingState {
            core: self.core(id, &d.name, d.namespace),
            function: Arc::new(d.function),
            accumulator: Arc::new(d.accumulator),
        })
    }

    // ---------------------------------------------------------------- key iteration

    /// Parses an entry key of `core`'s state into (key bytes, namespace bytes) with the current serializers.
    fn split<'a, N: TypeSerializer>(&self, core: &HandleCore<N>, entry_key: &'a [u8]) -> Option<(&'a [u8], &'a [u8])> {
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
            .map(|k| crate::serializer::from_bytes(&self.key_serializer, k).map_err(|e| Error::serializer("<key>", e)))
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
                detail: format!("entry key {k:02x?} does not parse with the registered serializers"),
            })?;
            pairs.insert((key.to_vec(), ns.to_vec()));
        }
        pairs
            .into_iter()
            .map(|(k, n)| {
                let key = crate::serializer::from_bytes(&self.key_serializer, &k).map_err(|e| Error::serializer("<key>", e))?;
                let ns = crate::serializer::from_bytes(&*core.namespace, &n).map_err(|e| Error::serializer(&*core.name, e))?;
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
        let previous = self.current_kg.map(|kg| (kg, self.current_key.clone()));
        for key in &keys {
            self.set_current_key(key)?;
            f(self, key)?;
        }
        if let Some((kg, key)) = previous {
            self.current_kg = Some(kg);
            self.current_key = key;
        }
        Ok(())
    }
}

fn incompatible(
    state: &str,
    role: &'static str,
    previous: &SerializerSnapshot,
    new: &SerializerSnapshot,
    compat: Compatibility,
) -> Error {
    let reason = match compat {
        Compatibility::Incompatible(r) => r,
        Compatibility::CompatibleAfterMigration => format!("{role} serializers can be reconfigured but never migrated"),
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
        return Compatibility::Incompatible(format!("expected {expected_id}, found {}", old.identifier));
    }
    match old.nested.get(index) {
        Some(n) => check(n),
        None => Compatibility::Incompatible(format!("{} has no nested serializer {index}", old.identifier)),
    }
}

fn migrate_whole<S: TypeSerializer>(name: &str, ser: &S, prev: &SerializerSnapshot, bytes: &[u8]) -> Result<Vec<u8>> {
    let mut input = bytes;
    let v = ser.deserialize_previous(prev, &mut input).map_err(|e| Error::serializer(name, e))?;
    let mut out = Vec::with_capacity(bytes.len());
    ser.serialize(&v, &mut out).map_err(|e| Error::serializer(name, e))?;
    Ok(out)
}

fn migrate_list<S: TypeSerializer>(name: &str, ser: &S, prev: &SerializerSnapshot, bytes: &[u8]) -> Result<Vec<u8>> {
    let mut input = bytes;
    let mut out = Vec::with_capacity(bytes.len());
    while !input.is_empty() {
        let v = ser.deserialize_previous(prev, &mut input).map_err(|e| Error::serializer(name, e))?;
        if !out.is_empty() {
            out.push(LIST_DELIMITER);
        }
        ser.serialize(&v, &mut out).map_err(|e| Error::serializer(name, e))?;
        if !input.is_empty() {
            input = &input[1..];
        }
    }
    Ok(out)
}

fn migrate_map_value<S: TypeSerializer>(name: &str, ser: &S, prev: &SerializerSnapshot, bytes: &[u8]) -> Result<Vec<u8>> {
    match bytes.split_first() {
        Some((&crate::layout::MAP_VALUE_PRESENT, rest)) => {
            let mut out = vec![crate::layout::MAP_VALUE_PRESENT];
            let mut input = rest;
            let v = ser.deserialize_previous(prev, &mut input).map_err(|e| Error::serializer(name, e))?;
            ser.serialize(&v, &mut out).map_err(|e| Error::serializer(name, e))?;
            Ok(out)
        }
        _ => Ok(bytes.to_vec()),
    }
}
