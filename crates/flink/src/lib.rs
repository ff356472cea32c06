//! Reading (and writing) Apache Flink's own savepoint files, without a JVM.
//!
//! - [`metadata`]: the `_metadata` file (operators, subtasks, state handles), versions 3–7 (Flink 1.15–2.x);
//! - [`location`]: where a handle's bytes live (inline, relative file, absolute path or URI re-rooted);
//! - [`proxy`]: the keyed-state stream header (serialization proxy, state meta infos), mapped to ours;
//! - [`typeser`]: Flink's serializer snapshots, mapped to ours, unknown ones kept as raw bytes;
//! - [`keyed_stream`]: the canonical per-key-group entry stream, uncompressed or [`snappy`]-framed;
//! - [`heap_native`]: the HashMap backend's native snapshot format, rebuilt as canonical entries;
//! - [`sst`] and [`rocksdb_native`]: the RocksDB backend's native savepoints and incremental checkpoints,
//!   their SST files read without RocksDB and folded into canonical entries;
//! - [`import`]: one operator's keyed state as a [`BackendSnapshot`](keyed_state::backend::BackendSnapshot)
//!   that our savepoint writer encodes;
//! - [`operator_id`]: the operator id Flink derives from a uid;
//! - [`export`]: our savepoints written as a Flink canonical savepoint directory ([`metadata_writer`],
//!   [`proxy_writer`] and the key-group writer of [`keyed_stream`]);
//! - [`job`]: whole jobs: several operators into one savepoint directory, and every other operator of a
//!   template savepoint carried over unchanged.
//!
//! Formats, mappings and limits: `design/flink-interop.md`. Every decoder returns a [`FlinkError`] naming
//! what is wrong and where, never panics, and has a fuzz target.

mod error;
pub mod export;
pub mod heap_native;
pub mod import;
pub mod input;
pub mod job;
pub mod keyed_stream;
pub mod location;
pub mod metadata;
pub mod metadata_writer;
pub mod operator_id;
pub mod proxy;
pub mod proxy_writer;
pub mod rocksdb_native;
pub mod snappy;
pub mod sst;
pub mod typeser;

pub use error::FlinkError;
pub use export::{export_canonical, ExportOptions, ExportSummary};
pub use import::{is_flink_savepoint, FlinkImport, FlinkSavepoint, ImportReport};
pub use job::{export_job, JobExportOptions, JobExportSummary, OperatorSources};
pub use metadata::{
    parse_metadata, CheckpointMetadata, KeyedHandle, OperatorId, OperatorState, StreamHandle,
};
pub use operator_id::operator_id_for_uid;
pub use rocksdb_native::RocksNativeState;
