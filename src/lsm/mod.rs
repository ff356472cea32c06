//! The native LSM engine: a sorted key-value store with merge operands, compaction filters, snapshots and
//! checkpoints. It knows nothing of state kinds or serializers; key groups reach it only as key prefixes.
//!
//! What an embedding user needs is re-exported here: [`Db`], [`Options`], [`ReadOptions`], [`WriteBatch`],
//! [`Snapshot`], [`DbIter`], [`MergeOperator`], [`CompactionFilter`], [`DbStats`] and [`LsmError`].
//! Modules marked hidden in the docs (`cache`, `coding`, `ikey`, `manifest`, `record_log`, and the SST
//! reader, writer and block formats) are format internals, public for the tests and fuzz targets only.

#[doc(hidden)]
pub mod cache;
#[doc(hidden)]
pub mod coding;
#[doc(hidden)]
pub mod ikey;
pub mod io;
pub mod slice;
pub mod sst;

pub mod adopt;
pub(crate) mod arena;
pub mod batch;
pub mod bounds;
pub mod checkpoint;
pub(crate) mod compaction;
pub mod db;
pub(crate) mod fast_path;
pub mod filter;
pub(crate) mod flush;
pub mod ingest;
pub mod iter;
#[cfg(all(test, loom))]
mod loom_fast_path;
#[cfg(all(test, loom))]
mod loom_tests;
#[doc(hidden)]
pub mod manifest;
pub(crate) mod memtable;
pub mod merge;
pub mod options;
pub mod prefix;
#[doc(hidden)]
pub mod rangedel;
#[doc(hidden)]
pub mod record_log;
pub(crate) mod skiplist;
pub mod snapshot;
pub(crate) mod state;
pub mod storage;
pub(crate) mod sync;
pub(crate) mod version;
pub(crate) mod wal;

pub use batch::WriteBatch;
pub use db::{Db, DbStats, DroppedWrites, RecoveryReport};
pub use filter::{CompactionFilter, CompactionFilterFactory};
pub use iter::DbIter;
pub use merge::{ListAppendOperator, MergeOperator};
pub use options::{Options, ReadOptions, WalRecovery};
pub use snapshot::Snapshot;

/// The message of a panic payload (`panic!` with a literal or a formatted string), empty otherwise.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_default()
}

/// Errors of the LSM engine.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LsmError {
    /// An I/O operation failed.
    #[error("I/O error on {path}: {source}")]
    Io {
        /// The file or directory.
        path: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A file's bytes are damaged.
    #[error("corruption in {file}: {detail}")]
    Corruption {
        /// The file.
        file: String,
        /// What is wrong.
        detail: String,
    },
    /// A write-ahead log or manifest is damaged at `offset`: a record (or the file header) that is neither
    /// whole nor a torn tail left by a crash, or a record that does not decode (`design/durability.md`).
    #[error("damaged log {file} at offset {offset}: {detail}")]
    DamagedLog {
        /// The file.
        file: String,
        /// Where the damaged record (or file header) starts.
        offset: u64,
        /// What is wrong.
        detail: String,
    },
    /// Point-in-time WAL recovery cannot reach a consistent point: an SST file already holds writes newer
    /// than the last write recovered before a damaged log record, so dropping the rest would not give the
    /// state of any moment.
    #[error("WAL recovery stopped at {file} offset {offset} (after seqno {recovered}), but SST {sst} holds seqno {sst_seqno}")]
    RecoveryPointBehindSst {
        /// The damaged WAL.
        file: String,
        /// Where recovery stopped in it.
        offset: u64,
        /// The last seqno recovered.
        recovered: u64,
        /// The SST file number.
        sst: u64,
        /// The largest seqno in that SST.
        sst_seqno: u64,
    },
    /// An SST writer was used incorrectly (keys out of order, malformed internal key, ...).
    #[error("invalid SST input for {file}: {detail}")]
    SstInput {
        /// The file being written.
        file: String,
        /// What is wrong.
        detail: String,
    },
    /// Merge operands were found but no merge operator is configured.
    #[error("merge operands for a key but no merge operator is configured")]
    NoMergeOperator,
    /// The merge operator failed for a key.
    #[error("merge operator {operator} failed for key {key:?}")]
    MergeFailed {
        /// The operator's name.
        operator: String,
        /// The key.
        key: Vec<u8>,
    },
    /// A background flush or compaction failed earlier; the database no longer accepts writes.
    #[error("background work failed: {0}")]
    Background(#[source] std::sync::Arc<LsmError>),
    /// The database is closed.
    #[error("database is closed")]
    Closed,
    /// The operation was cancelled by its caller.
    #[error("cancelled")]
    Cancelled,
    /// Another handle holds the database's `LOCK` file.
    #[error("database is locked by another handle: {0}")]
    Locked(String),
    /// An argument or option is invalid.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}
