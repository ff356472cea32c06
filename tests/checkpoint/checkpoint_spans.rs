//! Checkpoints and restores are observable: `tracing` spans on the synchronous part, the upload, the sweep
//! after a confirmation and the restore, under names a host can filter on.

use std::sync::{Arc, Mutex};

use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

use crate::common::*;
use keyed_state::checkpoint::CheckpointStorage;
use keyed_state::keygroup::KeyGroupRange;

/// The names of the spans opened anywhere in the process since the recorder was installed.
static NAMES: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());

/// A subscriber that records span names and nothing else.
struct SpanNames;

impl Subscriber for SpanNames {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &Attributes<'_>) -> Id {
        NAMES.lock().unwrap().push(span.metadata().name());
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, _: &Event<'_>) {}
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

#[test]
fn a_checkpoint_its_upload_its_sweep_and_a_restore_open_spans() {
    // Global, because the upload and the sweep run on the storage's threads; this is the binary's only
    // subscriber, and the test only asks that the names appear.
    tracing::subscriber::set_global_default(SpanNames).unwrap();
    let storage = Arc::new(CheckpointStorage::in_memory().unwrap());
    let range = KeyGroupRange::all(MAX_P);
    let mut x = fresh(&storage, range, 1);
    for id in 1..=2u64 {
        for k in 0..100i64 {
            x.put(k, k + id as i64);
        }
        x.checkpoint(id);
        x.ck.notify_complete(id).unwrap();
    }
    x.ck.wait_for_sweeps();
    let _restored = restore(&storage, 2, range);
    let names = NAMES.lock().unwrap().clone();
    for name in [
        "checkpoint_begin",
        "checkpoint_upload",
        "checkpoint_sweep",
        "checkpoint_restore",
    ] {
        assert!(names.contains(&name), "no span {name} in {names:?}");
    }
}
