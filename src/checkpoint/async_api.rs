//! The async forms of the checkpoint calls that wait on storage, besides the ones async at their core
//! (the upload, [`PendingCheckpoint::run_async`](super::PendingCheckpoint::run_async); the confirmation
//! and the abort, [`Checkpointer::notify_complete_async`] and [`Checkpointer::notify_aborted_async`]),
//! whose object-store requests are tasks of the storage's I/O runtime and whose synchronous forms wait for
//! them. Of the forms here, [`gc_async`] is native in the same way. Sweep, open, restore and savepoint
//! conversion run their synchronous form on tokio's blocking pool (inside a tokio runtime, current-thread or
//! multi-thread) or on a thread of its own (outside one), where object-store requests run on the I/O
//! runtime directly and file I/O blocks no executor thread; the awaiting task never blocks its executor
//! thread. The synchronous part, [`Checkpointer::begin`], stays a plain call: it waits on no storage.

use std::path::PathBuf;
use std::sync::Arc;

use super::checkpointer::Checkpointer;
use super::io::off_executor;
use super::registry::CheckpointOptions;
use super::restore::RestoreInfo;
use super::storage::CheckpointStorage;
use super::tools::GcReport;
use crate::backend::heap::HeapBackend;
use crate::backend::lsm::LsmBackend;
use crate::backend::BackendConfig;
use crate::error::Result;
use keyed_state_lsm::Options;

impl Checkpointer {
    /// [`open`](Self::open), awaited.
    pub async fn open_async(
        storage: Arc<CheckpointStorage>,
        config: BackendConfig,
        opts: CheckpointOptions,
    ) -> Result<Checkpointer> {
        off_executor(move || Checkpointer::open(storage, &config, opts)).await
    }

    /// [`sweep`](Self::sweep), awaited.
    pub async fn sweep_async(&self) -> Result<()> {
        let c = self.clone();
        off_executor(move || c.sweep()).await
    }
}

/// [`restore_lsm`](super::restore_lsm), awaited.
pub async fn restore_lsm_async(
    storage: Arc<CheckpointStorage>,
    id: u64,
    dir: PathBuf,
    config: BackendConfig,
    options: Options,
) -> Result<(LsmBackend, RestoreInfo)> {
    off_executor(move || super::restore_lsm(&storage, id, &dir, config, options)).await
}

/// [`restore_lsm_temp`](super::restore_lsm_temp), awaited.
pub async fn restore_lsm_temp_async(
    storage: Arc<CheckpointStorage>,
    id: u64,
    config: BackendConfig,
    options: Options,
) -> Result<(LsmBackend, RestoreInfo)> {
    off_executor(move || super::restore_lsm_temp(&storage, id, config, options)).await
}

/// [`restore_heap`](super::restore_heap), awaited.
pub async fn restore_heap_async(
    storage: Arc<CheckpointStorage>,
    id: u64,
    config: BackendConfig,
) -> Result<(HeapBackend, RestoreInfo)> {
    off_executor(move || super::restore_heap(&storage, id, config)).await
}

/// [`to_savepoint`](super::to_savepoint), awaited.
pub async fn to_savepoint_async(
    storage: Arc<CheckpointStorage>,
    id: u64,
    out: PathBuf,
) -> Result<u64> {
    off_executor(move || super::to_savepoint(&storage, id, &out)).await
}

/// The root's garbage collection (`keyed-state checkpoint gc`: keeps the newest `retain` completed
/// checkpoints), awaited: native, as the upload is (its listings, reads and deletions are tasks of the
/// storage's I/O runtime; the synchronous `gc` waits for them).
pub async fn gc_async(
    storage: Arc<CheckpointStorage>,
    retain: usize,
    dry_run: bool,
) -> Result<GcReport> {
    super::tools::gc_async(&storage, retain, dry_run).await
}
