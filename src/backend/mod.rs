//! The one backend trait that the heap, LSM and RocksDB backends implement.
//!
//! Backends are byte-level: they store entries in Flink's working-state layout (`crate::layout`), keyed by
//! the full entry key `KG | K | [lenK] | NS | [lenNS]` (plus `UK` for map entries), and know nothing of the
//! user's types. The typed state API (`crate::state`) sits on top and does all (de)serialization.
//!
//! A snapshot has a synchronous part ([`StateBackend::snapshot`], which must be cheap: it pins a consistent
//! view) and an asynchronous part (reading the returned [`BackendSnapshot`], possibly on another thread
//! while the backend keeps taking writes). The savepoint encoder reads only [`BackendSnapshot`], so every
//! backend produces the same savepoint bytes for the same logical state.

mod capture;
pub mod heap;
pub mod lsm;
pub(crate) mod lsm_cache;
mod lsm_load;
mod lsm_merge;
mod lsm_ttl;
#[cfg(feature = "rocksdb")]
pub mod rocksdb;
mod state_prefix;
mod value_merge;

use crate::error::Result;
use crate::keygroup::{KeyGroup, KeyGroupRange};
use crate::meta::StateMetaInfo;
use crate::serializer::SerializerSnapshot;
pub use capture::{
    BackendKind, CapturedFile, CapturedFiles, CheckpointCapture, FileSource,
    MaterializationCapture, TableSource,
};
pub use value_merge::ValueMerge;

/// Index of a registered state in a backend, in registration order. The savepoint header lists states in
/// this order.
pub type StateId = usize;

/// What a backend is created with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendConfig {
    /// The job's max parallelism (number of key groups).
    pub max_parallelism: u32,
    /// The key groups this instance owns.
    pub key_group_range: KeyGroupRange,
    /// Snapshot of the key serializer.
    pub key_serializer: SerializerSnapshot,
}

impl BackendConfig {
    /// Checks what every backend requires of its configuration: a max parallelism Flink accepts, and a
    /// key-group range inside it.
    pub fn validate(&self) -> Result<()> {
        crate::keygroup::check_max_parallelism(self.max_parallelism)?;
        check_range_fits(self.key_group_range, self.max_parallelism)
    }
}

/// Checks that `range` lies inside `0..max_parallelism`.
pub(crate) fn check_range_fits(range: KeyGroupRange, max_parallelism: u32) -> Result<()> {
    if !range.is_empty() && range.end() as u32 >= max_parallelism {
        return Err(crate::Error::InvalidArgument(format!(
            "key-group range {range} does not fit max parallelism {max_parallelism}"
        )));
    }
    Ok(())
}

/// The registration rule every backend shares: a state already known under `meta.name` keeps its id and takes
/// the new meta when the kind matches (the caller has checked the serializers); another kind is an error.
/// `Ok(None)`: the name is new.
pub(crate) fn reregister(
    states: &mut [StateMetaInfo],
    meta: &StateMetaInfo,
) -> Result<Option<StateId>> {
    let Some(id) = states.iter().position(|s| s.name == meta.name) else {
        return Ok(None);
    };
    if states[id].kind != meta.kind {
        return Err(crate::Error::StateKindMismatch {
            name: meta.name.clone(),
            existing: states[id].kind,
            requested: meta.kind,
        });
    }
    states[id] = meta.clone();
    Ok(Some(id))
}

/// Checks the target of an operation, as every backend does before touching storage: `state` is known, its
/// kind fits the operation (`map` operations on map states, the others on the rest), and `kg` lies in
/// `range`. The typed store has checked all three already; this keeps a backend used directly safe.
#[inline]
pub(crate) fn check_access(
    states: &[StateMetaInfo],
    range: KeyGroupRange,
    state: StateId,
    kg: KeyGroup,
    map: bool,
    op: &'static str,
) -> Result<()> {
    match states.get(state) {
        Some(m) if is_ordered_kind(m.kind) == map && range.contains(kg) => Ok(()),
        Some(m) if is_ordered_kind(m.kind) == map => Err(out_of_range(range, kg)),
        _ => Err(wrong_kind(states, state, op)),
    }
}

/// Whether a state kind is stored as ordered entries reached through the `map_*` operations: map states
/// (`key_ns | user key`) and timer states (`KG | TS | K | NS`, with the key-group prefix as `key_ns`).
#[inline]
pub fn is_ordered_kind(kind: crate::meta::StateKind) -> bool {
    matches!(
        kind,
        crate::meta::StateKind::Map | crate::meta::StateKind::Timers
    )
}

/// The error for an operation `op` on `state` of the wrong kind, or on an unknown state id.
#[cold]
pub(crate) fn wrong_kind(
    states: &[StateMetaInfo],
    state: StateId,
    op: &'static str,
) -> crate::Error {
    match states.get(state) {
        Some(m) => crate::Error::WrongKind {
            name: m.name.clone(),
            kind: m.kind,
            operation: op,
        },
        None => crate::Error::UnknownStateId(state),
    }
}

/// The error for key group `kg` outside a backend's `range`.
#[cold]
pub(crate) fn out_of_range(range: KeyGroupRange, kg: KeyGroup) -> crate::Error {
    crate::Error::KeyGroupOutOfRange {
        key_group: kg,
        range,
    }
}

/// The byte-level keyed-state backend contract.
///
/// All keys passed in are full entry keys whose key-group prefix equals `kg`, and `kg` lies in the backend's
/// key-group range (callers check it). Values are Flink's working-state value bytes.
pub trait StateBackend: Send {
    /// A short name: `heap`, `lsm`, `rocksdb`.
    fn backend_name(&self) -> &'static str;

    /// The configuration the backend was created with.
    fn config(&self) -> &BackendConfig;

    /// Registers a state, or updates the meta information of a state already registered (or restored) under
    /// the same name and kind, and returns its id. The caller has checked serializer compatibility and
    /// migrated values where needed; the backend rejects a different kind for an existing name.
    fn register_state(&mut self, meta: StateMetaInfo) -> Result<StateId>;

    /// The meta information of every state, registered or restored, in id order.
    fn states(&self) -> &[StateMetaInfo];

    /// The value of an entry (value, reducing, aggregating and list states; for lists the joined elements).
    fn get(&mut self, state: StateId, kg: KeyGroup, key: &[u8]) -> Result<Option<&[u8]>>;

    /// The values of many entries of one state, looked up together: `f(i, value)` for each `keys[i]`, in
    /// the order of `keys` (the value as [`get`](Self::get) returns it). A host processing a batch of
    /// records looks up all their keys at once, as Flink 2's asynchronous state access does. The default
    /// calls `get` for each key; the LSM backend reads the blocks of the batch from the disk concurrently
    /// when its state is not in memory (`design/decisions/0007-cold-reads.md`).
    fn multi_get(
        &mut self,
        state: StateId,
        keys: &[(KeyGroup, &[u8])],
        f: &mut dyn FnMut(usize, Option<&[u8]>),
    ) -> Result<()> {
        for (i, (kg, key)) in keys.iter().enumerate() {
            f(i, self.get(state, *kg, key)?);
        }
        Ok(())
    }

    /// Sets the value of an entry.
    fn put(&mut self, state: StateId, kg: KeyGroup, key: &[u8], value: &[u8]) -> Result<()>;

    /// Removes an entry (no error if absent).
    fn delete(&mut self, state: StateId, kg: KeyGroup, key: &[u8]) -> Result<()>;

    /// Appends serialized list elements (`e1 , e2 ...` already joined with `0x2C`) to a list entry, without
    /// reading it: a merge operand on the LSM backend.
    fn append(&mut self, state: StateId, kg: KeyGroup, key: &[u8], elements: &[u8]) -> Result<()>;

    /// Tells the backend how the values of reducing or aggregating `state` fold (`design/merge-operands.md`),
    /// and returns whether it takes adds as merge operands ([`merge_value`](Self::merge_value)) from now on.
    /// The store calls it for every reducing and aggregating state without TTL, whether its adds will be
    /// operands or not, so that operands written by an earlier run read back. The default (heap, RocksDB)
    /// ignores the fold and returns `false`: adds stay reads, folds and writes.
    fn set_value_merge(&mut self, state: StateId, merge: std::sync::Arc<dyn ValueMerge>) -> bool {
        let _ = (state, merge);
        false
    }

    /// Folds `operand` (one serialized value of the state) into the value at `key` without reading it: a
    /// merge operand on the LSM backend, folded at read and compaction time. Only for a state whose
    /// [`set_value_merge`](Self::set_value_merge) returned `true`; the default refuses.
    fn merge_value(
        &mut self,
        state: StateId,
        kg: KeyGroup,
        key: &[u8],
        operand: &[u8],
    ) -> Result<()> {
        let _ = (state, kg, key, operand);
        Err(crate::Error::Unsupported {
            backend: self.backend_name(),
            what: "merge operands for reducing and aggregating state",
        })
    }

    /// The value of a map entry `key_ns | user_key` (`nullflag | V`).
    fn map_get(
        &mut self,
        state: StateId,
        kg: KeyGroup,
        key_ns: &[u8],
        user_key: &[u8],
    ) -> Result<Option<&[u8]>>;

    /// Sets a map entry.
    fn map_put(
        &mut self,
        state: StateId,
        kg: KeyGroup,
        key_ns: &[u8],
        user_key: &[u8],
        value: &[u8],
    ) -> Result<()>;

    /// Removes a map entry (no error if absent).
    fn map_remove(
        &mut self,
        state: StateId,
        kg: KeyGroup,
        key_ns: &[u8],
        user_key: &[u8],
    ) -> Result<()>;

    /// Visits the entries of one map in ascending user-key byte order, until `f` returns `false`.
    fn map_scan(
        &mut self,
        state: StateId,
        kg: KeyGroup,
        key_ns: &[u8],
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()>;

    /// Visits the entries of one map whose user keys are `>= from`, in ascending order, until `f` returns
    /// `false` (timer queues find a key group's next head this way without passing the removed ones). The
    /// default scans the whole map and skips the smaller keys.
    fn map_scan_from(
        &mut self,
        state: StateId,
        kg: KeyGroup,
        key_ns: &[u8],
        from: &[u8],
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()> {
        self.map_scan(state, kg, key_ns, &mut |k, v| k < from || f(k, v))
    }

    /// Whether one map has no entry. The default scans for its first entry; the LSM backend answers from
    /// its cache when that holds a current entry of the map.
    fn map_is_empty(&mut self, state: StateId, kg: KeyGroup, key_ns: &[u8]) -> Result<bool> {
        map_is_empty_by_scan(self, state, kg, key_ns)
    }

    /// Sets the map entries `entries` (user key, value) of one map, in order. The default calls
    /// [`map_put`](Self::map_put) for each; the LSM backend looks them up in its cache together.
    fn map_put_all(
        &mut self,
        state: StateId,
        kg: KeyGroup,
        key_ns: &[u8],
        entries: &[(&[u8], &[u8])],
    ) -> Result<()> {
        map_put_each(self, state, kg, key_ns, entries)
    }

    /// Removes every entry of one map.
    fn map_clear(&mut self, state: StateId, kg: KeyGroup, key_ns: &[u8]) -> Result<()>;

    /// Visits every entry of a state, key group by key group, until `f` returns `false`. Entry keys are full
    /// (with the user key for maps); order within a key group is unspecified.
    fn scan_state(
        &mut self,
        state: StateId,
        f: &mut dyn FnMut(KeyGroup, &[u8], &[u8]) -> bool,
    ) -> Result<()>;

    /// Visits every entry of a state in key group `kg` until `f` returns `false`, with full entry keys; order
    /// unspecified. Key iteration (`KeyedStateStore::keys`) streams key group by key group through it. The
    /// default filters [`scan_state`](Self::scan_state); the backends read only the key group.
    fn scan_key_group(
        &mut self,
        state: StateId,
        kg: KeyGroup,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()> {
        self.scan_state(state, &mut |g, k, v| g != kg || f(k, v))
    }

    /// Replaces every value of a state by `f(value)` (serializer migration); `None` deletes the entry.
    fn transform_values(
        &mut self,
        state: StateId,
        f: &mut dyn FnMut(&[u8]) -> Result<Option<Vec<u8>>>,
    ) -> Result<()>;

    /// Loads one restored entry. During a restore, entries of each (state, key group) arrive in ascending key
    /// order, key group by key group, into (state, key group) pairs that hold nothing yet, so a backend may
    /// write them as sorted runs instead of one put at a time. [`finish_load`](Self::finish_load) ends a restore.
    fn load_entry(&mut self, state: StateId, kg: KeyGroup, key: &[u8], value: &[u8]) -> Result<()>;

    /// Makes every entry given to [`load_entry`](Self::load_entry) visible. Must end every restore, a failed
    /// one too, before the backend is used otherwise: a backend may load in the background until then.
    fn finish_load(&mut self) -> Result<()>;

    /// The number of stored entries over all states (map entries count one each).
    fn num_entries(&mut self) -> Result<u64>;

    /// The synchronous part of a snapshot: pins the current state and returns a view that can be read (on any
    /// thread) while this backend keeps changing.
    fn snapshot(&mut self) -> Result<Box<dyn BackendSnapshot>>;

    /// Writes whatever the backend holds above its storage engine into it (the LSM backend's
    /// read-modify-write cache), so that the engine alone holds the whole state: before an engine-level
    /// read such as [`LsmEngine::checkpoint`](crate::backend::lsm::LsmEngine::checkpoint). The default does
    /// nothing (the backend has nothing above its storage).
    fn write_back(&mut self) -> Result<()> {
        Ok(())
    }

    /// The synchronous part of an incremental checkpoint (`design/checkpoints.md`): no cost in the state
    /// size. Backends without checkpoints return [`Error::Unsupported`](crate::Error::Unsupported).
    fn checkpoint_capture(&mut self) -> Result<Box<dyn CheckpointCapture>> {
        Err(crate::Error::Unsupported {
            backend: self.backend_name(),
            what: "incremental checkpoints",
        })
    }

    /// A background materialization of the checkpoint view, when the backend's engine says one is due
    /// (`design/checkpoint-view.md`, "In the background"); the checkpointer asks at each
    /// [`begin`](crate::checkpoint::Checkpointer::begin). The default: none.
    fn view_materialization(&mut self) -> Option<Box<dyn MaterializationCapture>> {
        None
    }

    /// Tells the backend how values of a TTL state expire (`None`: the state has no TTL), for cleanup inside
    /// the backend's storage (the LSM compaction filter). The default ignores it: the typed layer's cleanup on
    /// access and on full snapshots works without it.
    fn set_ttl_filter(&mut self, state: StateId, filter: Option<crate::ttl::TtlStateFilter>) {
        let _ = (state, filter);
    }

    /// Incremental TTL cleanup (Flink's `cleanupIncrementally`): judges the next `entries` entries of `state`
    /// from a cursor the backend keeps, removing or rewriting what `judge` says. Returns how many entries
    /// were judged. The default does nothing (backends that clean up in compaction).
    fn ttl_cleanup_step(
        &mut self,
        state: StateId,
        entries: usize,
        judge: &mut dyn FnMut(&[u8]) -> crate::ttl::TtlVerdict,
    ) -> Result<usize> {
        let _ = (state, entries, judge);
        Ok(0)
    }
}

/// A handle on a backend's storage engine for code that drives it from outside the store: benchmarks that time
/// one phase at a time, tools. Not part of the state contract; taken from a concrete backend before it is boxed
/// into a store ([`lsm::LsmBackend::engine`], and `RocksDbBackend::engine` with the `rocksdb` feature).
pub trait EngineHandle: Send + Sync {
    /// Waits until the background work the engine has queued (memtable flushes, compactions) is done, so
    /// that a timed phase does not pay for work left by an earlier one.
    fn wait_for_background_work(&self) -> Result<()>;

    /// A one-line summary of the engine's shape (files per level, memtables), for benchmark and debug output.
    fn summary(&self) -> String;

    /// The engine's figures under RocksDB's property and statistics names where they exist
    /// (`rocksdb.cur-size-all-mem-tables`, `rocksdb.num-files-at-level<N>`, `rocksdb.stall.micros`, ...;
    /// see [`keyed_state_lsm::DbStats::metrics`]). Default: none.
    fn metrics(&self) -> Vec<keyed_state_lsm::Metric> {
        Vec::new()
    }
}

/// A consistent, immutable view of a backend at one point, for the savepoint encoder.
pub trait BackendSnapshot: Send + Sync {
    /// The configuration of the backend it was taken from.
    fn config(&self) -> &BackendConfig;

    /// The states at snapshot time, in id order.
    fn states(&self) -> &[StateMetaInfo];

    /// Visits the entries of `state` in key group `kg` in ascending byte order of entry keys. Map states give
    /// one entry per user key; empty lists and maps give nothing. Stops at the first error from `f`.
    fn visit(
        &self,
        state: StateId,
        kg: KeyGroup,
        f: &mut dyn FnMut(&[u8], &[u8]) -> Result<()>,
    ) -> Result<()>;
}

/// Whether one map has no entry, by a scan that stops at its first entry (the default of
/// [`StateBackend::map_is_empty`]).
pub(crate) fn map_is_empty_by_scan<B: StateBackend + ?Sized>(
    b: &mut B,
    state: StateId,
    kg: KeyGroup,
    key_ns: &[u8],
) -> Result<bool> {
    let mut empty = true;
    b.map_scan(state, kg, key_ns, &mut |_, _| {
        empty = false;
        false
    })?;
    Ok(empty)
}

/// Sets the map entries `entries` one [`StateBackend::map_put`] at a time (the default of
/// [`StateBackend::map_put_all`]).
pub(crate) fn map_put_each<B: StateBackend + ?Sized>(
    b: &mut B,
    state: StateId,
    kg: KeyGroup,
    key_ns: &[u8],
    entries: &[(&[u8], &[u8])],
) -> Result<()> {
    for (user_key, value) in entries {
        b.map_put(state, kg, key_ns, user_key, value)?;
    }
    Ok(())
}
