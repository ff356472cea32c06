//! A sweep whose snapshot was taken before a checkpoint began, and whose listing of the root comes after a
//! confirmation deleted the metadata that checkpoint reuses objects from (`design/checkpoints.md`,
//! "Shared-file registry and deletion protocol"): the objects the checkpoint reuses from the last confirmed
//! checkpoint must outlive the sweep.

use std::sync::Arc;

use crate::common::*;

use keyed_state::backend::lsm::LsmBackend;
use keyed_state::checkpoint::CheckpointStorage;
use keyed_state::internals::FaultStore;
use keyed_state::serializer::LongSerializer;
use keyed_state::state::KeyedStateStore;

#[test]
fn a_sweep_keeps_what_a_checkpoint_begun_after_its_snapshot_reuses_from_metadata_deleted_before_its_listing(
) {
    let fault = FaultStore::new(Arc::new(object_store::memory::InMemory::new()));
    let storage =
        Arc::new(CheckpointStorage::from_store(Arc::new(fault.clone()), "", "fault").unwrap());
    let cfg = KeyedStateStore::config_for(&LongSerializer, MAX_P, all());
    let b = LsmBackend::temp_with(cfg.clone(), options()).unwrap();
    let engine = Some(b.engine());
    // Retain one: confirming a checkpoint deletes the previous one's metadata.
    let mut a = inst_on(Box::new(b), engine, &storage, &cfg, 1);
    for k in 0..500 {
        assert!(a.put(k, 1));
    }
    a.checkpoint(1);
    a.ck.notify_complete(1).unwrap();
    // Checkpoints 2 and 3 both begin on base 1 and each uploads its own copy of the flush of keys 500..1000.
    for k in 500..1000 {
        assert!(a.put(k, 2));
    }
    let p2 = a.ck.begin(2, a.store.backend_mut()).unwrap();
    let p3 = a.ck.begin(3, a.store.backend_mut()).unwrap();
    p2.run().unwrap();
    p3.run().unwrap();
    a.ck.notify_complete(2).unwrap();
    a.ck.wait_for_sweeps();
    // A sweep takes its snapshot (base 2) and stops before its listing of the root.
    let (reached, resume) = fault.pause_at(fault.requests() + 1);
    let ck = a.ck.clone();
    let sweep = std::thread::spawn(move || ck.sweep());
    reached.recv().unwrap();
    // Checkpoint 4 begins on base 2, reusing its objects; confirming 3 retires 2 and deletes its metadata.
    for k in 1000..1100 {
        assert!(a.put(k, 4));
    }
    let p4 = a.ck.begin(4, a.store.backend_mut()).unwrap();
    a.ck.notify_complete(3).unwrap();
    drop(resume);
    sweep.join().unwrap().unwrap();
    p4.run().unwrap();
    a.ck.notify_complete(4).unwrap();
    a.ck.wait_for_sweeps();
    let (objects, referenced) = objects_and_references(&storage);
    let missing: Vec<_> = referenced.difference(&objects).collect();
    assert!(
        missing.is_empty(),
        "checkpoint 4 references deleted objects: {missing:?}"
    );
    let mut r = restore(&storage, 4, all());
    for k in 0..1100 {
        let want = match k {
            0..500 => 1,
            500..1000 => 2,
            _ => 4,
        };
        assert_eq!(r.get(k), Some(want), "key {k}");
    }
}
