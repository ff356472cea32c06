//! The native LSM engine: a sorted key-value store with merge operands, compaction filters, snapshots and
//! checkpoints. It knows nothing of state kinds or serializers; key groups reach it only as key prefixes.
//!
//! What an embedding user needs is re-exported here: [`Db`], [`Options`], [`ReadOptions`], [`WriteBatch`],
//! [`Snapshot`], [`DbIter`], [`MergeOperator`], [`CompactionFilter`], [`DbStats`] and [`LsmError`].
//! Modules marked hidden in the docs (`cache`, `coding`, `ikey`, `manifest`, `record_log`, and the SST
//! reader, writer and block formats) are format internals, public for the tests and fuzz targets only.

#![deny(unsafe_op_in_unsafe_fn)]
#![deny(missing_docs)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

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
mod error;
pub(crate) mod fast_path;
pub mod filter;
pub(crate) mod flush;
#[doc(hidden)]
pub mod fsutil;
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
#[doc(hidden)]
pub mod prefetch;
pub mod prefix;
#[doc(hidden)]
pub mod rangedel;
#[doc(hidden)]
pub mod record_log;
pub(crate) mod skiplist;
pub mod snapshot;
pub(crate) mod inner;
pub mod storage;
pub(crate) mod sync;
pub(crate) mod version;
pub(crate) mod wal;

pub use batch::WriteBatch;
pub use db::{Db, DbStats, DroppedWrites, RecoveryReport};
pub use error::{ErrorKind, Location, LsmError};
pub use filter::{CompactionFilter, CompactionFilterFactory};
pub use iter::DbIter;
pub use merge::{ListAppendOperator, MergeOperator};
pub use options::{Options, ReadOptions, WalRecovery};
pub use snapshot::Snapshot;

/// The message of a panic payload (`panic!` with a literal or a formatted string), empty otherwise.
#[doc(hidden)]
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_default()
}
