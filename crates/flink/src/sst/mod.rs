//! A pure-Rust reader of the RocksDB block-based table (SST) files that Flink's RocksDB backend (FRocksDB)
//! writes into native savepoints and incremental checkpoints.
//!
//! - [`table`]: one SST file: footer, metaindex, properties, index, data blocks, range tombstones;
//! - [`record`]: records and range tombstones, what a table yields and the fold takes;
//! - [`block`]: the entries of one block (shared-prefix keys, restart points, delta-encoded index values);
//! - [`manifest`]: the `MANIFEST` replayed into the live files of every column family, and `CURRENT`;
//! - [`fold`]: the versions of every key across files folded as RocksDB reads them (newest sequence
//!   number wins, tombstones and range tombstones hide older versions, merge operands joined with `,`).
//!
//! What is read and what is refused: `design/flink-interop.md`, section "RocksDB native savepoints and
//! incremental checkpoints". Every decoder returns a [`FlinkError`](super::FlinkError) (`SstCorrupt` or
//! `SstUnsupported` naming the feature), never panics, and has the fuzz target `flink_rocksdb_sst`.

pub mod block;
pub(crate) mod coding;
pub mod fold;
pub mod manifest;
pub mod record;
pub mod table;

pub use fold::{fold_versions, FoldStats, Versions};
pub use manifest::{read_current, read_manifest, ColumnFamily, LiveFile, Manifest};
pub use record::{RangeTombstone, Record, ValueKind};
pub use table::{SstFile, SstProperties};
