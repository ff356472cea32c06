//! Incremental checkpoints: the protocol, claim mode, crash and model tests, object-store failures,
//! checkpoints on `FaultFs`.

#[macro_use]
mod common;
#[path = "../common/s3.rs"]
mod s3;

mod checkpoint_adoption;
mod checkpoint_attempts_on_fault_fs;
mod checkpoint_claim;
mod checkpoint_crash;
mod checkpoint_fencing;
mod checkpoint_jobs;
mod checkpoint_model;
mod checkpoint_operands;
mod checkpoint_spans;
mod checkpoint_sweep_race;
mod checkpoint_view;
mod checkpoint_view_background;
mod checkpoints;
mod checkpoints_async;
mod checkpoints_in_tokio;
mod checkpoints_on_fault_fs;
mod root_before_jobs_fixture;
mod upload_memory;
