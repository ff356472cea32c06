//! Incremental checkpoints on object storage (`design/checkpoints.md`).
//!
//! * [`CheckpointStorage`] — a synchronous facade over an `object_store` store (local directory, memory; the
//!   URL form reaches any store the crate supports), with parallel and multipart uploads.
//! * [`Checkpointer`] — one instance's checkpoints: [`Checkpointer::begin`] is the synchronous part,
//!   [`PendingCheckpoint::run`] the asynchronous part (any thread), [`Checkpointer::notify_complete`] and
//!   [`Checkpointer::notify_aborted`] the host's decision; retention, and the sweep that deletes what no
//!   retained checkpoint references.
//! * [`CheckpointMetadata`] — the metadata file, written last and atomically.
//! * [`restore_lsm`] — restore and rescale into an LSM backend by adopting files; [`restore_heap`] — into a
//!   heap backend, taking the (state, key group) tables of its key groups; [`to_savepoint`].
//! * [`tools`] — list, verify and gc, as the command line runs them.

mod checkpointer;
#[cfg(any(test, feature = "test-util"))]
pub mod fault_store;
pub mod format;
pub(crate) mod restore;
mod restore_heap;
pub mod storage;
pub mod tools;

#[cfg(feature = "rocksdb")]
pub use crate::backend::rocksdb::restore_rocksdb;
pub use crate::backend::BackendKind;
pub use checkpointer::{
    CheckpointOptions, CheckpointSummary, Checkpointer, PendingCheckpoint, RestoreMode,
};
pub use format::{CheckpointMetadata, FileKind, FileRef, ObjectRef};
pub use restore::{checkpoint_parts, restore_lsm, to_savepoint, RestoreInfo};
pub use restore_heap::restore_heap;
pub use storage::CheckpointStorage;

/// Errors of checkpoints.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckpointError {
    /// The object store failed.
    #[error("checkpoint storage: {0}")]
    Storage(String),
    /// The object store failed an operation (unreachable, refused, timed out after the bounded retries).
    #[error("checkpoint storage {store}: {operation} failed: {detail}")]
    Store {
        /// The store's root as given (`s3://bucket/prefix`, a directory, ...).
        store: String,
        /// The operation and the object it was on.
        operation: String,
        /// The store's error and its causes.
        detail: String,
    },
    /// A local file operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A referenced object does not exist.
    #[error("object {0} is missing")]
    MissingObject(String),
    /// A metadata file is damaged or of an unknown format.
    #[error("checkpoint metadata at byte {offset}: {detail}")]
    Metadata {
        /// Byte offset in the metadata file.
        offset: u64,
        /// What is wrong.
        detail: String,
    },
    /// A heap table file is damaged.
    #[error("heap table file at byte {offset}: {detail}")]
    Table {
        /// Byte offset in the file.
        offset: u64,
        /// What is wrong.
        detail: String,
    },
    /// A file's bytes do not match the checksum or size its metadata records.
    #[error("damaged: {0}")]
    Damaged(String),
    /// The checkpoint was cancelled (aborted by the host, subsumed, or the checkpointer closed).
    #[error("checkpoint {0} was cancelled")]
    Cancelled(u64),
    /// No completed checkpoint with this id covers what was asked.
    #[error("no completed checkpoint {id}: {detail}")]
    NotFound {
        /// The checkpoint id.
        id: u64,
        /// What is missing.
        detail: String,
    },
    /// A call that breaks the protocol (an id twice, completing a checkpoint still running, ...).
    #[error("invalid: {0}")]
    Invalid(String),
    /// The backend or the store failed.
    #[error(transparent)]
    Backend(#[from] crate::Error),
}

impl From<keyed_state_lsm::LsmError> for CheckpointError {
    fn from(e: keyed_state_lsm::LsmError) -> Self {
        CheckpointError::Backend(crate::Error::Lsm(e))
    }
}

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
