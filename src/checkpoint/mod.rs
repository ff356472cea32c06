//! Incremental checkpoints on object storage (`design/checkpoints.md`).
//!
//! * [`CheckpointStorage`] — a synchronous facade over an `object_store` store (local directory, memory; the
//!   URL form reaches any store the crate supports), with parallel and multipart uploads.
//! * [`Checkpointer`] — one instance's checkpoints: [`Checkpointer::begin`] is the synchronous part,
//!   [`PendingCheckpoint::run`] the asynchronous part (any thread), [`Checkpointer::notify_complete`] and
//!   [`Checkpointer::notify_aborted`] the host's decision; retention, and the sweep that deletes what no
//!   retained checkpoint references. Confirmations and aborts wait on no lock `begin` needs while storage
//!   answers; the sweep runs in the background, on one thread per process
//!   ([`Checkpointer::sweep_status`], [`SweepStatus`]).
//! * Async forms of every call that waits on storage. Native (their object-store requests are tasks of the
//!   storage's I/O runtime, and the synchronous forms wait for them): [`PendingCheckpoint::run_async`],
//!   [`Checkpointer::notify_complete_async`], [`Checkpointer::notify_aborted_async`] and the storage's
//!   own calls ([`CheckpointStorage::upload_all_async`], ...). On tokio's blocking pool:
//!   [`Checkpointer::sweep_async`], [`Checkpointer::open_async`], [`restore_lsm_async`],
//!   [`restore_lsm_temp_async`], [`restore_heap_async`], [`to_savepoint_async`], [`gc_async`].
//! * [`CheckpointMetadata`] — the metadata file, written last and atomically.
//! * [`restore_lsm`] — restore and rescale into an LSM backend in a directory the caller gives, by
//!   adopting files ([`restore_lsm_temp`]: into a temporary directory); [`restore_heap`] — into a heap
//!   backend, taking the (state, key group) tables of its key groups; `restore_rocksdb` (feature
//!   `rocksdb`); [`to_savepoint`].
//! * [`list_completed`], [`checkpoint_parts`] — what a root holds; [`list_jobs`], [`resolve_job`] and
//!   [`CheckpointStorage::job`] — the jobs in a root, each in its own part of it.
//!
//! Every function returns the crate's [`Result`](crate::Result); what is specific to checkpoints is a
//! [`CheckpointError`] inside [`Error::Checkpoint`](crate::Error::Checkpoint).
//!
//! Modules: `format` (the metadata file), `storage`, `upload` (the upload path of `storage`), `checkpointer`,
//! `pending` (the asynchronous part), `reuse` (what a checkpoint references instead of uploading), `materialize`
//! (the background materialization of the LSM checkpoint view), `sweeper` (the sweep and the process's background sweeper), `async_api` (the
//! async forms), `fence` (attempts and claims in the root), `jobs` (a job's part of the root), `scan` (reading a
//! root as a whole), `restore` (one module per backend, and what they share), `fault_store` (feature `test-util`,
//! reached through `keyed_state::internals`), and, hidden from the docs, `tools` (verify and gc for the command
//! line and the test suites' oracle; see its documentation for why it stays here).

mod async_api;
pub mod buffers;
mod checkpointer;
#[cfg(any(test, feature = "test-util"))]
pub(crate) mod fault_store;
mod fence;
mod format;
mod io;
mod job_name;
mod jobs;
mod materialize;
mod pending;
mod registry;
mod restore;
mod reuse;
mod scan;
mod storage;
mod sweeper;
#[doc(hidden)]
pub mod tools;
mod upload;

pub use crate::backend::BackendKind;
pub use crate::error::CheckpointError;
pub use async_api::{
    gc_async, restore_heap_async, restore_lsm_async, restore_lsm_temp_async, to_savepoint_async,
};
pub use buffers::{UploadBufferStats, UploadBuffers};
pub use checkpointer::Checkpointer;
pub use format::{CheckpointMetadata, FileKind, FileRef, ObjectRef};
pub use io::{IoRuntime, DEFAULT_IO_THREADS};
pub use job_name::DEFAULT_JOB;
pub use jobs::{generate_job_name, list_jobs, newest_checkpoint, resolve_job};
pub use pending::PendingCheckpoint;
pub use registry::{CheckpointOptions, CheckpointSummary, MaterializationStatus, RestoreMode};
pub use registry::{SweepStatus, SWEEP_RETRY_FIRST, SWEEP_RETRY_MAX};
#[cfg(feature = "rocksdb")]
pub use restore::restore_rocksdb;
pub use restore::{restore_heap, restore_lsm, restore_lsm_temp, to_savepoint, RestoreInfo};
pub use scan::{checkpoint_parts, list_completed, MAX_METADATA_BYTES};
pub use storage::{
    CheckpointStorage, Upload, UploadPart, Uploaded, LOCAL_PART_SIZE, MULTIPART_THRESHOLD,
    PARALLELISM, PART_SIZE, REMOTE_CONNECT_TIMEOUT, REMOTE_MAX_RETRIES, REMOTE_REQUEST_TIMEOUT,
    REMOTE_RETRY_TIMEOUT,
};
pub use sweeper::wait_for_sweeps;

/// Relative path of the metadata of `instance`'s part of checkpoint `id`.
pub fn metadata_path(id: u64, instance: &str) -> String {
    format!("chk-{id:020}/{instance}/_metadata")
}

/// The default instance name of a key-group range: unique among instances running at once.
pub fn instance_name(range: crate::keygroup::KeyGroupRange) -> String {
    if range.is_empty() {
        "kg-empty".to_string()
    } else {
        format!("kg{:05}-{:05}", range.start(), range.end())
    }
}
