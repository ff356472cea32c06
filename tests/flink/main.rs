//! Flink interop: Flink's own vectors and savepoint fixtures, import, export, RocksDB SST files.

mod flink_export;
mod flink_fixtures;
mod flink_import;
mod flink_job;
mod flink_kinds;
mod flink_rocksdb_sst;
mod flink_vectors;
mod flink_versions;
mod flink_whole_reads;
