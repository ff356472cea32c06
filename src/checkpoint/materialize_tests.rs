//! The background materialization's task: what ends it ends its time in flight.

use std::collections::{BTreeSet, HashSet};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use super::run;
use crate::backend::{BackendConfig, CapturedFile, MaterializationCapture};
use crate::checkpoint::registry::Materializing;
use crate::checkpoint::{CheckpointOptions, CheckpointStorage, Checkpointer};
use crate::keygroup::KeyGroupRange;
use crate::serializer::SerializerSnapshot;

/// A capture whose files cannot be listed: the task panics.
struct Panics;

impl MaterializationCapture for Panics {
    fn files(&self) -> &[CapturedFile] {
        panic!("injected: a materialization's task panics")
    }

    fn storage(&self) -> keyed_state_lsm::storage::StorageHandle {
        keyed_state_lsm::storage::StorageHandle::default()
    }

    fn advance(&mut self) -> std::result::Result<(), keyed_state_lsm::AdvanceRefused> {
        Ok(())
    }

    fn is_current(&self) -> bool {
        true
    }
}

#[test]
fn a_panic_in_the_task_abandons_the_materialization_and_ends_its_time_in_flight() {
    let config = BackendConfig {
        max_parallelism: 128,
        key_group_range: KeyGroupRange::all(128),
        key_serializer: SerializerSnapshot::simple("LongSerializer", 1),
    };
    let storage = Arc::new(CheckpointStorage::in_memory().unwrap());
    let ck = Arc::new(Checkpointer::open(storage, &config, CheckpointOptions::default()).unwrap());
    let inner = Arc::clone(ck.inner());
    let cancel = Arc::new(AtomicBool::new(false));
    {
        // As `at_begin` starts one.
        let mut reg = inner.reg.lock();
        reg.mat = Some(Materializing {
            seq: 1,
            cancel: Arc::clone(&cancel),
            protect: BTreeSet::new(),
            refs: None,
            first_after: None,
        });
        reg.mat_status.started = 1;
        reg.mat_status.in_flight = true;
    }
    let task = run(
        Arc::clone(&inner),
        1,
        Box::new(Panics),
        HashSet::new(),
        1,
        cancel,
    );
    inner.storage.io().spawn_detached(task).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = Arc::clone(&ck);
    std::thread::spawn(move || {
        let _ = tx.send(waiter.wait_for_materialization());
    });
    let status = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the materialization stays in flight after its task panicked");
    assert_eq!((status.abandoned, status.advanced), (1, 0), "{status:?}");
    assert!(inner.reg.lock().mat.is_none());
}
