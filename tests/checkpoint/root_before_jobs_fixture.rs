//! The fixture `tests/fixtures/checkpoint/root_before_jobs/`: a checkpoint root as the code before jobs wrote
//! it (everything at the root's top level, runs named without their attempt). Written once with
//! `--ignored` by the code of that time; `checkpoint_jobs.rs` reads it as the job `default`.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::common::*;
use keyed_state::checkpoint::CheckpointStorage;

/// The state of the fixture's checkpoint `id` (1 or 2).
pub fn root_before_jobs_model(id: u64) -> BTreeMap<i64, i64> {
    let mut m = BTreeMap::new();
    for k in 0..200 {
        m.insert(k, k * 3 + 1);
    }
    if id >= 2 {
        for k in 100..300 {
            m.insert(k, k * 5);
        }
    }
    m
}

#[test]
#[ignore = "writes the fixture; run once by the code of the layout it records"]
fn write_the_root_before_jobs_fixture() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/checkpoint/root_before_jobs");
    let _ = std::fs::remove_dir_all(&dir);
    let storage = Arc::new(CheckpointStorage::local(&dir).unwrap());
    let mut a = fresh(&storage, all(), 2);
    for id in 1..=2u64 {
        for (k, v) in root_before_jobs_model(id) {
            assert!(a.put(k, v));
        }
        a.checkpoint(id);
        a.ck.notify_complete(id).unwrap();
    }
}
