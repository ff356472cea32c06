//! keyed-state's LSM engine: an embeddable, sorted key-value store with merge operands, compaction filters,
//! range deletes, snapshots, checkpoints and bulk ingestion. It knows nothing of state kinds, serializers or
//! key groups (which reach it only as key prefixes).
//!
//! # The surface
//!
//! Everything an embedding user needs is at the crate root:
//!
//! * the database: [`Db`] (open, [`put`](Db::put), [`get`](Db::get), [`merge`](Db::merge),
//!   [`delete_range`](Db::delete_range), [`write`](Db::write) of a [`WriteBatch`], [`snapshot`](Db::snapshot),
//!   [`iter`](Db::iter), flush and compaction), its [`Options`] and [`ReadOptions`], and what it reports
//!   ([`DbStats`], [`RecoveryReport`], [`DroppedWrites`]);
//! * reads: [`ValueSlice`] (a value, zero-copy when it sits in a file), [`Snapshot`], and [`DbIter`], a
//!   zero-copy cursor that also turns into an [`Iterator`] of owned entries ([`DbEntries`]);
//! * extension points: [`MergeOperator`] (with [`ListAppendOperator`]), [`CompactionFilterFactory`] and
//!   [`CompactionFilter`], [`PropertiesCollector`] (which sees internal keys: [`ParsedKey`], [`ValueKind`]),
//!   [`PrefixExtractor`] (with [`FixedPrefix`]);
//! * files in and out: [`Db::checkpoint`] ([`CheckpointInfo`]), the two-part [`Db::begin_checkpoint`]
//!   ([`PendingCheckpoint`], [`CapturedCheckpoint`]), [`Db::ingest_sorted`] ([`IngestInfo`]), and adopting
//!   existing SST files as a database ([`summarize_sst`], [`adopt_sst_files`], [`AdoptFile`], with
//!   [`KeyBounds`] for files read only in part);
//! * errors: [`LsmError`], whose [`kind`](LsmError::kind) is an [`ErrorKind`] and whose corruption variants
//!   carry a [`Location`].
//!
//! Two public modules hold groups of their own: [`storage`], the seam every durable byte goes through
//! ([`Storage`](storage::Storage), [`StorageHandle`](storage::StorageHandle), the default
//! [`OsStorage`](storage::OsStorage), and with feature `test-util` the fault-injecting `storage::fault::FaultFs`),
//! and [`util`], small helpers keyed-state shares with the engine.
//!
//! With feature `test-util` there is also a hidden module `internals`: the file formats' encoders and
//! decoders, for the tests and fuzz targets. It is not API.
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use keyed_state_lsm::{Db, ListAppendOperator, Options, ReadOptions};
//!
//! # fn main() -> Result<(), keyed_state_lsm::LsmError> {
//! let dir = tempfile::tempdir().expect("a temporary directory");
//! let opts = Options { merge_operator: Some(Arc::new(ListAppendOperator)), ..Options::default() };
//! let db = Db::open(dir.path(), opts)?;
//! db.put(b"user:1", b"ada")?;
//! db.merge(b"list:1", b"a")?;
//! db.merge(b"list:1", b"b")?;
//! assert_eq!(db.get(b"list:1")?.as_deref(), Some(&b"a,b"[..]));
//! let prefix = ReadOptions { prefix: Some(b"user:".to_vec()), ..ReadOptions::default() };
//! for entry in db.iter(prefix) {
//!     let (key, value) = entry?;
//!     assert_eq!((&key[..], &value[..]), (&b"user:1"[..], &b"ada"[..]));
//! }
//! db.close()
//! # }
//! ```

#![deny(unsafe_op_in_unsafe_fn)]
#![deny(missing_docs)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

mod adopt;
mod arena;
mod batch;
mod bounds;
mod budget;
mod budget_pool;
mod cache;
mod cache_pool;
mod checkpoint;
mod checkpoint_view;
#[cfg(test)]
mod checkpoint_view_tests;
mod clock;
mod coding;
mod compaction;
mod db;
mod env;
mod error;
mod fast_path;
mod filter;
mod flush;
mod fsutil;
mod ikey;
mod ingest;
mod inner;
mod inspect;
#[cfg(feature = "test-util")]
#[doc(hidden)]
pub mod internals;
mod io;
mod iter;
#[cfg(all(test, loom))]
mod loom_fast_path;
#[cfg(all(test, loom))]
mod loom_tests;
mod manifest;
mod memtable;
mod merge;
mod options;
mod prefetch;
mod prefix;
mod rangedel;
mod record_log;
mod row_cache;
mod row_slab;
mod skiplist;
mod slice;
mod snapshot;
mod sst;
pub mod storage;
mod sync;
pub mod util;
mod version;
mod view_materialization;
mod wal;
mod words;

pub use adopt::{adopt_sst_files, summarize_sst, AdoptFile, SstSummary};
pub use batch::WriteBatch;
pub use bounds::KeyBounds;
pub use budget_pool::{CachePool, PoolMember};
pub use checkpoint::{
    CapturedCheckpoint, CapturedFile, CheckpointFile, CheckpointInfo, PendingCheckpoint,
};
pub use checkpoint_view::CaptureView;
pub use db::{Db, DbStats, DroppedWrites, Metric, RecoveryReport};
pub use env::{
    EnvOptions, EnvStats, MemoryBudget, MemoryReservation, MemoryUsage, RoomListener, SharedEnv,
    DEFAULT_ROW_CACHE_RATIO,
};
pub use error::{ErrorKind, Location, LsmError};
pub use filter::{
    CompactionFilter, CompactionFilterContext, CompactionFilterFactory, FilterDecision,
    FilterEntryKind,
};
pub use ikey::{ParsedKey, ValueKind};
pub use ingest::IngestInfo;
pub use inspect::{inspect_dir, DirStats, LevelStats, SstFileStats, INSPECT_ATTEMPTS};
pub use iter::{DbEntries, DbIter};
pub use merge::{ListAppendOperator, MergeOperator};
pub use options::{CompactionPriority, MetadataPlacement, Options, ReadOptions, WalRecovery};
pub use prefix::{prefix_successor, FixedPrefix, PrefixExtractor};
pub use slice::ValueSlice;
pub use snapshot::Snapshot;
pub use sst::{Compression, PropertiesCollector, ReaderMetadata, SstOptions, SstProperties};
pub use view_materialization::{AdvanceRefused, ViewMaterialization};
