//! The `keyed-state` command line, run from outside: savepoint tools, Flink import and export, checkpoints.

#[path = "../../../tests/common/s3.rs"]
mod s3;

mod checkpoint_cli;
mod cli;
mod flink_cli;
mod stats_cli;
