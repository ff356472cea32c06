//! The engine of an LSM backend, shared by the backend, its snapshots and [`LsmEngine`] handles.

use std::path::Path;
use std::sync::Arc;

use crate::backend::lsm_merge::ValueMerges;
use crate::backend::lsm_ttl::TtlFilters;
use crate::backend::state_prefix::StateKeyPrefix;
use crate::backend::EngineHandle;
use crate::error::Result;
use keyed_state_lsm::{CheckpointInfo, Db};

/// The engine and, for a backend in a temporary directory, that directory (removed after the engine closes).
/// Shared with open snapshots, so a snapshot may outlive its backend.
pub(super) struct Shared {
    pub(super) db: Db,
    /// The prefix extractor the engine's filters use, if any (states are mapped as they register).
    pub(super) prefixes: Option<Arc<StateKeyPrefix>>,
    /// The TTL compaction filters of the states (see `lsm_ttl`).
    pub(super) ttl: Arc<TtlFilters>,
    /// What the merge operands of each state are (see `lsm_merge`).
    pub(super) merges: Arc<ValueMerges>,
    pub(super) _tmp: Option<tempfile::TempDir>,
}

impl AsRef<Db> for Shared {
    fn as_ref(&self) -> &Db {
        &self.db
    }
}

/// A shared handle on the engine of an [`LsmBackend`](super::LsmBackend) ([`LsmBackend::engine`](super::LsmBackend::engine)).
#[derive(Clone)]
pub struct LsmEngine(pub(super) Arc<Shared>);

impl LsmEngine {
    /// The engine.
    pub fn db(&self) -> &Db {
        &self.0.db
    }

    /// Flushes and hard-links the engine's files into `dir` (see [`Db::checkpoint`]); with the backend's
    /// [`states`](crate::backend::StateBackend::states) it is what [`LsmBackend::open_checkpoint`](super::LsmBackend::open_checkpoint) opens. It sees what has
    /// reached the engine: with the read-modify-write cache on, call [`LsmBackend::write_back`](super::LsmBackend::write_back) first (or
    /// use [`LsmBackend::checkpoint`](super::LsmBackend::checkpoint), which does).
    pub fn checkpoint(&self, dir: impl AsRef<Path>) -> Result<CheckpointInfo> {
        Ok(self.0.db.checkpoint(dir)?)
    }
}

impl EngineHandle for LsmEngine {
    /// Waits for the engine's flushes and compactions. A restore's entries are in the engine once
    /// [`finish_load`](crate::backend::StateBackend::finish_load) returned, so they are waited for too.
    fn wait_for_background_work(&self) -> Result<()> {
        Ok(self.0.db.wait_for_background_work()?)
    }

    fn metrics(&self) -> Vec<keyed_state_lsm::Metric> {
        self.0.db.stats().metrics()
    }

    fn summary(&self) -> String {
        let s = self.0.db.stats();
        format!(
            "files per level {:?}, memtable {} KiB + {} immutable, base level {}, write stalls {} ({} ms), memtable index growths {} ({} ms)",
            s.level_files,
            s.memtable_bytes >> 10,
            s.immutable_memtables,
            s.base_level,
            s.write_stalls,
            s.write_stall_micros / 1000,
            s.memtable_index_growths,
            s.memtable_index_growth_micros / 1000
        )
    }
}
