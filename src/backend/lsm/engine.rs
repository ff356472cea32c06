//! The engine of an LSM backend, shared by the backend, its snapshots and [`LsmEngine`] handles.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::backend::lsm_merge::ValueMerges;
use crate::backend::lsm_ttl::TtlFilters;
use crate::backend::state_prefix::StateKeyPrefix;
use crate::backend::EngineHandle;
use crate::error::{Error, Result};
use keyed_state_lsm::{CheckpointInfo, Db, DbStats};

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
    /// Set by every write the read-modify-write cache takes, cleared when the backend writes everything
    /// back: while set, the cache (or a pending layer of it) may hold writes the engine has not seen.
    pub(super) unsynced: AtomicBool,
    /// The read-modify-write cache's figures (`cache_stats`).
    pub(super) step: super::cache_stats::StepStats,
    pub(super) _tmp: Option<tempfile::TempDir>,
}

impl AsRef<Db> for Shared {
    fn as_ref(&self) -> &Db {
        &self.db
    }
}

/// A shared handle on the engine of an [`LsmBackend`](super::LsmBackend) ([`LsmBackend::engine`](super::LsmBackend::engine)):
/// flushes, compactions, waiting and figures from outside the store that owns the backend. It gives no
/// read of state: the backend's read-modify-write cache holds writes the engine has not seen, which a read
/// of the engine alone would miss.
#[derive(Clone)]
pub struct LsmEngine(pub(super) Arc<Shared>);

impl LsmEngine {
    /// Flushes the engine's memtable (what reached the engine; the cache's dirty entries stay in the cache).
    pub fn flush(&self) -> Result<()> {
        Ok(self.0.db.flush()?)
    }

    /// Compacts the engine's whole key space (see [`Db::compact_all`]).
    pub fn compact_all(&self) -> Result<()> {
        Ok(self.0.db.compact_all()?)
    }

    /// Waits for the engine's flushes and compactions (see [`Db::wait_for_background_work`]).
    pub fn wait_for_background_work(&self) -> Result<()> {
        Ok(self.0.db.wait_for_background_work()?)
    }

    /// The engine's statistics (see [`Db::stats`]).
    pub fn stats(&self) -> DbStats {
        self.0.db.stats()
    }

    /// The engine's directory.
    pub fn path(&self) -> &Path {
        self.0.db.path()
    }

    /// Flushes and hard-links the engine's files into `dir` (see [`Db::checkpoint`]); with the backend's
    /// [`states`](crate::backend::StateBackend::states) it is what [`LsmBackend::open_checkpoint`](super::LsmBackend::open_checkpoint)
    /// opens. The engine must hold the whole state: after a write the backend's read-modify-write cache
    /// took, this is an [`Error::InvalidArgument`] until the backend has written everything back
    /// ([`StateBackend::write_back`](crate::backend::StateBackend::write_back), e.g. through
    /// `store.backend_mut()`); [`LsmBackend::checkpoint`](super::LsmBackend::checkpoint) does both.
    pub fn checkpoint(&self, dir: impl AsRef<Path>) -> Result<CheckpointInfo> {
        if self.0.unsynced.load(Ordering::Acquire) {
            return Err(Error::InvalidArgument(format!(
                "engine checkpoint into {}: the backend's read-modify-write cache holds writes the engine has not seen; write them back first (StateBackend::write_back) or checkpoint through LsmBackend::checkpoint or the store",
                dir.as_ref().display()
            )));
        }
        Ok(self.0.db.checkpoint(dir)?)
    }
}

impl EngineHandle for LsmEngine {
    /// Waits for the engine's flushes and compactions. A restore's entries are in the engine once
    /// [`finish_load`](crate::backend::StateBackend::finish_load) returned, so they are waited for too.
    fn wait_for_background_work(&self) -> Result<()> {
        Ok(self.0.db.wait_for_background_work()?)
    }

    /// The engine's metrics and the read-modify-write cache's (`keyed-state.rmw-cache.*`).
    fn metrics(&self) -> Vec<keyed_state_lsm::Metric> {
        let mut m = self.0.db.stats().metrics();
        m.extend(self.0.step.metrics());
        m
    }

    /// The engine's shape, and the read-modify-write cache's figures (`cache_stats`).
    fn summary(&self) -> String {
        let s = self.0.db.stats();
        format!(
            "files per level {:?}, memtable {} KiB + {} immutable, base level {}, write stalls {} ({} ms), memtable index growths {} ({} ms){}",
            s.level_files,
            s.memtable_bytes >> 10,
            s.immutable_memtables,
            s.base_level,
            s.write_stalls,
            s.write_stall_micros / 1000,
            s.memtable_index_growths,
            s.memtable_index_growth_micros / 1000,
            self.0.step.summary()
        )
    }
}
