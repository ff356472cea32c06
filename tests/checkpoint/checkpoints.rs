//! Incremental checkpoints (`design/checkpoints.md`): the two parts, the safe-deletion invariants (each its
//! own test), failure cases, restore and rescale by adoption, the tools; each on memory, a local directory
//! and S3.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::common as checkpoint_common;
#[cfg(feature = "s3")]
use crate::s3 as common_s3;

use checkpoint_common::*;

use keyed_state::backend::heap::HeapBackend;
use keyed_state::backend::lsm::LsmBackend;
use keyed_state::checkpoint::{list_completed, tools};
use keyed_state::checkpoint::{
    restore_lsm, restore_lsm_temp, to_savepoint, CheckpointError, CheckpointOptions,
    CheckpointStorage, Checkpointer, FileKind, RestoreInfo,
};
use keyed_state::keygroup::{key_group_range_for_operator, KeyGroupRange};
use keyed_state::savepoint::SavepointReader;
use keyed_state::serializer::LongSerializer;
use keyed_state::state::{KeyedStateStore, ValueStateDescriptor};
use keyed_state_lsm::Options;

on_every_store!(
    a_second_checkpoint_uploads_only_files_the_confirmed_one_lacks,
    fifty_checkpoints_of_one_tiny_flush_each_leave_few_objects,
    instances_that_never_held_foreign_key_groups_are_all_adopted_on_rescale,
    rescale_and_rescale_back_adopt_every_instance_with_bounds,
    rescale_1_2_1_3_2_adopts_every_file_each_time_and_equals_the_model,
    instances_with_tombstones_over_each_others_key_groups_are_adopted_without_hiding_keys,
    large_files_go_up_in_parts_and_come_back_whole,
    restore_lsm_builds_the_engine_in_the_directory_the_caller_gives,
    a_part_with_other_states_is_copied_through_a_directory_inside_the_one_given_and_removed,
    a_failed_restore_leaves_the_directory_it_was_given_empty,
);

on_every_backend_and_store!(
    a_checkpoint_holds_the_state_at_its_synchronous_part,
    an_unconfirmed_checkpoint_is_never_the_incremental_base,
    no_object_referenced_by_a_retained_checkpoint_is_deleted,
    subsumed_and_aborted_checkpoints_leave_nothing_orphaned,
    two_in_flight_checkpoints_uploading_the_same_file_keep_each_others_uploads_first_aborted,
    two_in_flight_checkpoints_uploading_the_same_file_keep_each_others_uploads_second_aborted,
    an_upload_failing_midway_leaves_no_metadata_and_no_objects,
    a_cancelled_checkpoint_fails_and_leaves_nothing,
    closing_while_a_checkpoint_runs_cancels_it,
    gc_keeps_the_newest_checkpoints_and_what_they_reference,
    leftovers_of_a_crashed_run_go_when_the_instance_opens_again,
    verify_names_a_missing_or_damaged_object_and_to_savepoint_restores_anywhere,
);

fn a_checkpoint_holds_the_state_at_its_synchronous_part(
    storage: &Arc<CheckpointStorage>,
    kind: Kind,
) {
    let mut a = fresh_on(kind, storage, all(), 3);
    for k in 0..2000 {
        a.put(k, k);
    }
    let p = a.store.checkpoint(&a.ck, 1).unwrap();
    for k in 0..2000 {
        a.put(k, -1);
    }
    a.put(5000, 5);
    let s = std::thread::spawn(move || p.run()).join().unwrap().unwrap();
    assert!(s.files_new > 0);
    a.ck.notify_complete(1).unwrap();
    let mut r = restore_on(kind, storage, 1, all());
    for k in 0..2000 {
        assert_eq!(r.get(k), Some(k));
    }
    assert_eq!(r.get(5000), None);
}

fn a_second_checkpoint_uploads_only_files_the_confirmed_one_lacks(
    storage: &Arc<CheckpointStorage>,
) {
    let mut a = fresh(storage, all(), 3);
    let engine = a.engine.take().unwrap();
    for k in 0..20_000 {
        a.put(k, k);
    }
    // The load in the engine's files (not dirty in the read-modify-write cache, which every checkpoint
    // would carry again as files of its own); compactions of the load would rewrite files between the two
    // checkpoints: let them finish first.
    a.store.backend_mut().write_back().unwrap();
    engine.flush().unwrap();
    engine.wait_for_background_work().unwrap();
    let s1 = a.checkpoint(1);
    a.ck.notify_complete(1).unwrap();
    for k in 0..50 {
        a.put(k, k + 1);
    }
    let s2 = a.checkpoint(2);
    assert!(s2.files_reused > 0, "{s2:?}");
    assert!(s2.bytes_new_files < s1.bytes_new_files / 2, "{s1:?} {s2:?}");
    a.ck.notify_complete(2).unwrap();
    let mut r = restore(storage, 2, all());
    assert_eq!(r.get(3), Some(4));
    assert_eq!(r.get(19_999), Some(19_999));
}

fn an_unconfirmed_checkpoint_is_never_the_incremental_base(
    storage: &Arc<CheckpointStorage>,
    kind: Kind,
) {
    let mut a = fresh_on(kind, storage, all(), 3);
    for k in 0..5000 {
        a.put(k, k);
    }
    a.checkpoint(1);
    let s2 = a.checkpoint(2);
    assert_eq!(s2.files_reused, 0, "checkpoint 1 was never confirmed");
}

fn no_object_referenced_by_a_retained_checkpoint_is_deleted(
    storage: &Arc<CheckpointStorage>,
    kind: Kind,
) {
    let mut a = fresh_on(kind, storage, all(), 2);
    for round in 0..6u64 {
        for k in 0..3000 {
            a.put(k * 7 % 5000, k + round as i64);
        }
        a.checkpoint(round + 1);
        a.ck.notify_complete(round + 1).unwrap();
        let (objects, refs) = objects_and_references(storage);
        assert!(refs.is_subset(&objects), "round {round}");
        let r = tools::verify(storage, None).unwrap();
        assert!(r.problems.is_empty(), "{:?}", r.problems);
        assert_eq!(a.ck.retained().len(), (round as usize + 1).min(2));
    }
}

fn subsumed_and_aborted_checkpoints_leave_nothing_orphaned(
    storage: &Arc<CheckpointStorage>,
    kind: Kind,
) {
    let mut a = fresh_on(kind, storage, all(), 1);
    for round in 0..4u64 {
        for k in 0..3000 {
            a.put(k + round as i64 * 1000, k);
        }
        let id = round * 2 + 1;
        a.checkpoint(id);
        a.ck.notify_complete(id).unwrap();
        assert_storage_exact(storage);
        a.checkpoint(id + 1);
        a.ck.notify_aborted(id + 1).unwrap();
        assert_storage_exact(storage);
        assert_eq!(list_completed(storage).unwrap().len(), 1);
    }
}

fn two_in_flight_checkpoints_uploading_the_same_file_keep_each_others_uploads_first_aborted(
    storage: &Arc<CheckpointStorage>,
    kind: Kind,
) {
    two_in_flight_checkpoints_uploading_the_same_file(storage, kind, true);
}

fn two_in_flight_checkpoints_uploading_the_same_file_keep_each_others_uploads_second_aborted(
    storage: &Arc<CheckpointStorage>,
    kind: Kind,
) {
    two_in_flight_checkpoints_uploading_the_same_file(storage, kind, false);
}

fn two_in_flight_checkpoints_uploading_the_same_file(
    storage: &Arc<CheckpointStorage>,
    kind: Kind,
    abort_first: bool,
) {
    {
        let mut a = fresh_on(kind, storage, all(), 3);
        for k in 0..3000 {
            a.put(k, k);
        }
        let p1 = a.ck.begin(1, a.store.backend_mut()).unwrap();
        let p2 = a.ck.begin(2, a.store.backend_mut()).unwrap();
        let s2 = p2.run().unwrap();
        let s1 = p1.run().unwrap();
        assert!(s1.files_new > 0 && s2.files_new > 0);
        let (survivor, gone) = if abort_first { (2, 1) } else { (1, 2) };
        a.ck.notify_aborted(gone).unwrap();
        assert_eq!(tools::verify(storage, None).unwrap().problems, vec![]);
        a.ck.notify_complete(survivor).unwrap();
        assert_storage_exact(storage);
        let mut r = restore_on(kind, storage, survivor, all());
        assert_eq!(r.get(2999), Some(2999));
    }
}

fn an_upload_failing_midway_leaves_no_metadata_and_no_objects(
    storage: &Arc<CheckpointStorage>,
    kind: Kind,
) {
    let mut a = fresh_on(kind, storage, all(), 3);
    for k in 0..20_000 {
        a.put(k, k);
    }
    let p = a.ck.begin(1, a.store.backend_mut()).unwrap();
    storage.fail_puts_after(Some(1));
    let err = p.run().unwrap_err();
    storage.fail_puts_after(None);
    assert!(
        matches!(
            &err,
            keyed_state::Error::Checkpoint(CheckpointError::Store {
                operation: "put",
                ..
            })
        ),
        "{err}"
    );
    assert_eq!(err.kind(), keyed_state::ErrorKind::Io);
    assert!(list_completed(storage).unwrap().is_empty());
    a.ck.sweep().unwrap();
    assert!(objects_but_attempt_markers(storage).is_empty());
    // The next checkpoint works.
    a.checkpoint(2);
    a.ck.notify_complete(2).unwrap();
    assert_storage_exact(storage);
}

fn a_cancelled_checkpoint_fails_and_leaves_nothing(storage: &Arc<CheckpointStorage>, kind: Kind) {
    let mut a = fresh_on(kind, storage, all(), 3);
    for k in 0..3000 {
        a.put(k, k);
    }
    let p = a.ck.begin(1, a.store.backend_mut()).unwrap();
    a.ck.notify_aborted(1).unwrap();
    let err = p.run().unwrap_err();
    assert!(
        matches!(
            err,
            keyed_state::Error::Checkpoint(CheckpointError::Cancelled { id: 1 })
        ),
        "{err}"
    );
    assert_eq!(err.kind(), keyed_state::ErrorKind::Closed);
    assert!(objects_but_attempt_markers(storage).is_empty());
}

fn closing_while_a_checkpoint_runs_cancels_it(storage: &Arc<CheckpointStorage>, kind: Kind) {
    let mut a = fresh_on(kind, storage, all(), 3);
    for k in 0..3000 {
        a.put(k, k);
    }
    let p = a.ck.begin(1, a.store.backend_mut()).unwrap();
    a.ck.close();
    assert!(matches!(
        p.run(),
        Err(keyed_state::Error::Checkpoint(CheckpointError::Cancelled {
            id: 1
        }))
    ));
    assert!(objects_but_attempt_markers(storage).is_empty());
    assert!(a.ck.begin(2, a.store.backend_mut()).is_err());
}

fn fifty_checkpoints_of_one_tiny_flush_each_leave_few_objects(storage: &Arc<CheckpointStorage>) {
    let mut a = fresh(storage, all(), 1);
    for id in 1..=50u64 {
        a.put(id as i64, id as i64);
        a.checkpoint(id);
        a.ck.notify_complete(id).unwrap();
    }
    let (objects, _) = objects_and_references(storage);
    let meta = list_completed(storage).unwrap();
    assert_eq!(meta.len(), 1);
    assert!(objects.len() <= 25, "{} objects", objects.len());
    let mut r = restore(storage, 50, all());
    for id in 1..=50 {
        assert_eq!(r.get(id), Some(id));
    }
}

fn leftovers_of_a_crashed_run_go_when_the_instance_opens_again(
    storage: &Arc<CheckpointStorage>,
    kind: Kind,
) {
    let mut a = fresh_on(kind, storage, all(), 3);
    for k in 0..3000 {
        a.put(k, k);
    }
    a.checkpoint(1);
    a.ck.notify_complete(1).unwrap();
    // A crash after uploading, before the metadata: an object nothing references.
    storage
        .put("shared/kg00000-00015/dead/9-0.sst", vec![1, 2, 3])
        .unwrap();
    let cfg = KeyedStateStore::config_for(&LongSerializer, MAX_P, all());
    let _again =
        Checkpointer::open(Arc::clone(storage), &cfg, CheckpointOptions::default()).unwrap();
    assert_storage_exact(storage);
    let mut r = restore_on(kind, storage, 1, all());
    assert_eq!(r.get(7), Some(7));
}

fn rescale_and_rescale_back_adopt_every_instance_with_bounds(storage: &Arc<CheckpointStorage>) {
    let mut model = BTreeMap::new();
    let mut a = fresh(storage, all(), 3);
    for k in 0..4000 {
        a.put(k, k * 3);
        model.insert(k, k * 3);
    }
    a.checkpoint(1);
    a.ck.notify_complete(1).unwrap();
    // 1 -> 2: each new instance adopts the old one's files, bounded to its own key groups (no compaction
    // here, so that its first checkpoint holds the adopted files as they are).
    let quiet = Options {
        auto_compaction: false,
        ..options()
    };
    let mut two: Vec<Inst> = (0..2)
        .map(|i| {
            let range = key_group_range_for_operator(MAX_P, 2, i).unwrap();
            let (x, info) = restore_reported_with(storage, 1, range, quiet.clone());
            assert_eq!(info.adopted.len(), 1);
            assert!(info.copied.is_empty());
            x
        })
        .collect();
    check_instances(&mut two, &model);
    // Their checkpoints describe the adopted files with the bounds they are read under.
    checkpoint_all(&mut two, 2);
    let parts = keyed_state::checkpoint::checkpoint_parts(storage, 2).unwrap();
    assert_eq!(parts.len(), 2);
    for m in &parts {
        assert!(!m.files.is_empty());
        for f in &m.files {
            let FileKind::BoundedSst(b) = &f.kind else {
                panic!("{:?}", m.files)
            };
            // Engine keys: the state id, then the key group (one byte at max parallelism 16).
            let start = m.key_group_range.start() as u8;
            assert!(b.lo.as_slice() >= [0, 0, start].as_slice(), "{b:?}");
            assert!(
                b.hi.as_slice() <= [0, 0, start + m.key_group_range.len() as u8].as_slice(),
                "{b:?}"
            );
        }
    }
    for k in 0..4000 {
        let i = two.iter().position(|x| x.owns(k)).unwrap();
        two[i].put(k, k + 1);
        model.insert(k, k + 1);
    }
    checkpoint_all(&mut two, 3);
    // 2 -> 1: both instances are clean, both adopted, nothing copied.
    drop(a);
    let (mut one, info) = restore_reported(storage, 3, all());
    assert_eq!(info.adopted.len(), 2, "{info:?}");
    assert!(info.copied.is_empty(), "{info:?}");
    check_instances(std::slice::from_mut(&mut one), &model);
}

/// Instances whose files hold range tombstones over each other's key groups (what a restore that clipped
/// wrote, and what checkpoints of builds without bounds hold) are adopted on a rescale, and no tombstone
/// reaches past its own instance's key groups: the other instance's older keys stay visible.
fn instances_with_tombstones_over_each_others_key_groups_are_adopted_without_hiding_keys(
    storage: &Arc<CheckpointStorage>,
) {
    let mut model = BTreeMap::new();
    let mut a = fresh(storage, all(), 3);
    for k in 0..3000 {
        a.put(k, k);
        model.insert(k, k);
    }
    a.checkpoint(1);
    a.ck.notify_complete(1).unwrap();
    drop(a);
    let mut two: Vec<Inst> = (0..2)
        .map(|i| {
            let range = key_group_range_for_operator(MAX_P, 2, i).unwrap();
            let cfg = KeyedStateStore::config_for(&LongSerializer, MAX_P, range);
            let (mut backend, _) = restore_lsm_temp(storage, 1, cfg.clone(), options()).unwrap();
            // Tombstones over the other half, newer than every key of the checkpoint; the first half also
            // deletes its last key group by one tombstone reaching into the second half's first.
            backend.clip_to(range).unwrap();
            if i == 0 {
                backend.db().delete_range(&[0, 0, 7], &[0, 0, 9]).unwrap();
            }
            backend.db().flush().unwrap();
            let engine = Some(backend.engine());
            inst_on(Box::new(backend), engine, storage, &cfg, 3)
        })
        .collect();
    model.retain(|k, _| two[0].store.key_group_of(k).unwrap() != 7);
    check_instances(&mut two, &model);
    checkpoint_all(&mut two, 2);
    drop(two);
    let (mut one, info) = restore_reported(storage, 2, all());
    assert_eq!(info.adopted.len(), 2, "{info:?}");
    assert!(info.copied.is_empty(), "{info:?}");
    check_instances(std::slice::from_mut(&mut one), &model);
    one.engine.as_ref().unwrap().compact_all().unwrap();
    check_instances(std::slice::from_mut(&mut one), &model);
}

fn rescale_1_2_1_3_2_adopts_every_file_each_time_and_equals_the_model(
    storage: &Arc<CheckpointStorage>,
) {
    let mut model = BTreeMap::new();
    let mut insts = vec![fresh(storage, all(), 3)];
    let mut id = 0u64;
    let mut round = 0i64;
    let mut write_round = |insts: &mut Vec<Inst>, model: &mut BTreeMap<i64, i64>| {
        round += 1;
        // Overwrite some keys, add new ones, and delete a few, in every instance.
        for k in (0..3000)
            .step_by(round as usize)
            .chain(3000 * round..3000 * round + 500)
        {
            let i = insts.iter().position(|x| x.owns(k)).unwrap();
            insts[i].put(k, k * 10 + round);
            model.insert(k, k * 10 + round);
        }
        for k in (7..3000).step_by(97) {
            let i = insts.iter().position(|x| x.owns(k)).unwrap();
            let x = &mut insts[i];
            x.store.set_current_key(&k).unwrap();
            x.store.value(&x.counter).unwrap().clear().unwrap();
            model.remove(&k);
        }
    };
    write_round(&mut insts, &mut model);
    for parallelism in [2u32, 1, 3, 2] {
        id += 1;
        checkpoint_all(&mut insts, id);
        let old = insts.len();
        drop(std::mem::take(&mut insts));
        let next: Vec<(Inst, RestoreInfo)> = (0..parallelism)
            .map(|i| {
                let range = key_group_range_for_operator(MAX_P, parallelism, i).unwrap();
                restore_reported(storage, id, range)
            })
            .collect();
        insts = Vec::new();
        for (x, info) in next {
            assert!(info.copied.is_empty(), "{old} -> {parallelism}: {info:?}");
            assert_eq!(
                info.adopted.len(),
                info.parts.len(),
                "{old} -> {parallelism}: {info:?}"
            );
            insts.push(x);
        }
        check_instances(&mut insts, &model);
        write_round(&mut insts, &mut model);
        // Compactions rewrite bounded files into plain ones on the way; the model still holds.
        for x in insts.iter() {
            x.engine.as_ref().unwrap().compact_all().unwrap();
        }
        check_instances(&mut insts, &model);
    }
}

fn verify_names_a_missing_or_damaged_object_and_to_savepoint_restores_anywhere(
    storage: &Arc<CheckpointStorage>,
    kind: Kind,
) {
    let mut a = fresh_on(kind, storage, all(), 3);
    for k in 0..3000 {
        a.put(k, k);
    }
    a.checkpoint(1);
    a.ck.notify_complete(1).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sp");
    to_savepoint(storage, 1, &out).unwrap();
    let sp = SavepointReader::open(&out).unwrap();
    let cfg = KeyedStateStore::config_for(&LongSerializer, MAX_P, all());
    let mut heap =
        KeyedStateStore::new(Box::new(HeapBackend::new(cfg).unwrap()), LongSerializer).unwrap();
    heap.restore(&[sp]).unwrap();
    let c = heap
        .register_value(ValueStateDescriptor::new("counter", LongSerializer))
        .unwrap();
    heap.set_current_key(&77).unwrap();
    assert_eq!(heap.value(&c).unwrap().get().unwrap(), Some(77));

    let meta = &list_completed(storage).unwrap()[0];
    let victim = &meta.objects[0].path;
    let mut bytes = storage.get(victim).unwrap();
    let n = bytes.len();
    bytes[n / 2] ^= 1;
    // A new object (on a local root a new file: restores may have hard-linked the old one).
    storage.delete(victim).unwrap();
    storage.put(victim, bytes).unwrap();
    let r = tools::verify(storage, Some(1)).unwrap();
    assert!(r.problems.iter().any(|x| &x.path == victim), "{r:?}");
    storage.delete(victim).unwrap();
    let r = tools::verify(storage, None).unwrap();
    assert!(
        r.problems
            .iter()
            .any(|x| &x.path == victim && x.detail == "missing"),
        "{r:?}"
    );
}

fn gc_keeps_the_newest_checkpoints_and_what_they_reference(
    storage: &Arc<CheckpointStorage>,
    kind: Kind,
) {
    let mut a = fresh_on(kind, storage, all(), 10);
    for id in 1..=5u64 {
        for k in 0..2000 {
            a.put(k + id as i64 * 500, k);
        }
        a.checkpoint(id);
        a.ck.notify_complete(id).unwrap();
    }
    let dry = tools::gc(storage, 2, true).unwrap();
    assert_eq!(dry.kept, vec![4, 5]);
    assert_eq!(list_completed(storage).unwrap().len(), 5);
    // Beside the live writer: the metadata goes, the writer's own retired uploads stay for its sweep.
    let rep = tools::gc(storage, 2, false).unwrap();
    assert_eq!(list_completed(storage).unwrap().len(), 2);
    assert!(!rep.spared.is_empty(), "{rep:?}");
    assert!(tools::verify(storage, None).unwrap().problems.is_empty());
    // The job stopped: gc --fence takes the rest.
    let rep = tools::gc_fencing(storage, 2, false).unwrap();
    assert!(rep.spared.is_empty(), "{rep:?}");
    assert_storage_exact(storage);
    assert!(tools::verify(storage, None).unwrap().problems.is_empty());
}

fn instances_that_never_held_foreign_key_groups_are_all_adopted_on_rescale(
    storage: &Arc<CheckpointStorage>,
) {
    let mut two: Vec<Inst> = (0..2)
        .map(|i| {
            fresh(
                storage,
                key_group_range_for_operator(MAX_P, 2, i).unwrap(),
                3,
            )
        })
        .collect();
    for k in 0..6000 {
        let i = two.iter().position(|x| x.owns(k)).unwrap();
        two[i].put(k, k * 2);
    }
    for x in two.iter_mut() {
        x.checkpoint(1);
        x.ck.notify_complete(1).unwrap();
    }
    let cfg = KeyedStateStore::config_for(&LongSerializer, MAX_P, all());
    let (backend, info) = restore_lsm_temp(storage, 1, cfg, options()).unwrap();
    assert_eq!(info.adopted.len(), 2, "{info:?}");
    assert!(info.copied.is_empty());
    let (store, counter) = store_on(Box::new(backend));
    let mut one = Inst {
        store,
        counter,
        ck: two.pop().unwrap().ck,
        engine: None,
    };
    for k in 0..6000 {
        assert_eq!(one.get(k), Some(k * 2), "key {k}");
    }
    assert_eq!(one.store.num_entries().unwrap(), 6000);
}

fn large_files_go_up_in_parts_and_come_back_whole(storage: &Arc<CheckpointStorage>) {
    use keyed_state::checkpoint::{Upload, UploadPart, MULTIPART_THRESHOLD};
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big");
    let small = dir.path().join("small");
    let len = MULTIPART_THRESHOLD as usize + (3 << 20) + 17;
    let bytes: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
    std::fs::write(&big, &bytes).unwrap();
    std::fs::write(&small, b"tail").unwrap();
    let up = storage
        .upload_all(
            vec![Upload {
                path: "shared/x/big.pack".into(),
                files: vec![UploadPart::File(big), UploadPart::File(small)],
            }],
            keyed_state_lsm::storage::StorageHandle::os(),
        )
        .unwrap();
    assert_eq!(up[0].size, len as u64 + 4);
    assert_eq!(up[0].files[0].0, len as u64);
    assert_eq!(
        storage.size("shared/x/big.pack").unwrap(),
        Some(len as u64 + 4)
    );
    let back = storage
        .get_ranges(&[
            ("shared/x/big.pack".into(), 0, len as u64),
            ("shared/x/big.pack".into(), len as u64, 4),
        ])
        .unwrap();
    assert!(back[0] == bytes, "the large file comes back byte for byte");
    assert_eq!(back[1], b"tail");
}

#[cfg(feature = "s3")]
#[test]
fn an_unreachable_object_store_fails_fast_naming_the_store_and_the_operation() {
    // A port nothing listens on.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let endpoint = format!("http://127.0.0.1:{port}");
    let s = common_s3::settings(&endpoint);
    let s: Vec<(&str, &str)> = s.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let root = "s3://nowhere/ckpt";
    let t = std::time::Instant::now();
    let storage = Arc::new(CheckpointStorage::open_with(root, &s).unwrap());
    let err = storage.put("chk-1/x/_metadata", vec![1]).unwrap_err();
    match &err {
        keyed_state::Error::Checkpoint(CheckpointError::Store {
            store,
            operation,
            object,
            ..
        }) => {
            assert_eq!(store, root);
            assert_eq!(*operation, "put");
            assert_eq!(object.as_deref(), Some("chk-1/x/_metadata"));
        }
        e => panic!("expected a store error, got {e}"),
    }
    let cfg = KeyedStateStore::config_for(&LongSerializer, MAX_P, all());
    let err =
        Checkpointer::open(Arc::clone(&storage), &cfg, CheckpointOptions::default()).unwrap_err();
    let text = err.to_string();
    assert!(text.contains(root) && text.contains("list"), "{text}");
    assert!(
        t.elapsed() < std::time::Duration::from_secs(60),
        "bounded retries: {:?}",
        t.elapsed()
    );
}

/// Files of the heap backend's checkpoint: (state, key group) of every table.
fn tables_of(m: &keyed_state::checkpoint::CheckpointMetadata) -> BTreeSet<(u32, u16)> {
    m.files
        .iter()
        .filter_map(|f| match f.kind {
            FileKind::Table { state, key_group } => Some((state, key_group)),
            _ => None,
        })
        .collect()
}

#[test]
fn heap_checkpoints_rewrite_only_the_state_key_group_tables_that_changed() {
    let storage = Arc::new(CheckpointStorage::in_memory().unwrap());
    let mut a = fresh_on(Kind::Heap, &storage, all(), 3);
    let other = a
        .store
        .register_value(ValueStateDescriptor::new("other", LongSerializer))
        .unwrap();
    let mut model = BTreeMap::new();
    for k in 0..3000 {
        a.put(k, k);
        model.insert(k, k);
        a.store.set_current_key(&k).unwrap();
        a.store.value(&other).unwrap().update(&-k).unwrap();
    }
    let s1 = a.checkpoint(1);
    assert_eq!(s1.files_new, 2 * MAX_P as usize, "{s1:?}");
    a.ck.notify_complete(1).unwrap();
    // Nothing changed: everything is referenced, only the metadata is written.
    let s2 = a.checkpoint(2);
    assert_eq!((s2.files_new, s2.files_reused), (0, 2 * MAX_P as usize));
    assert_eq!(s2.objects_written, 1);
    a.ck.notify_complete(2).unwrap();
    // Keys of one key group of one state change: one table is new.
    let kg = a.store.key_group_of(&7).unwrap();
    let mut changed = 0;
    for k in 0..3000 {
        if a.store.key_group_of(&k).unwrap() == kg {
            a.put(k, k + 1);
            model.insert(k, k + 1);
            changed += 1;
        }
    }
    assert!(changed > 0);
    let s3 = a.checkpoint(3);
    assert_eq!((s3.files_new, s3.files_reused), (1, 2 * MAX_P as usize - 1));
    assert!(
        s3.bytes_new_files * 10 < s1.bytes_new_files,
        "{s1:?} {s3:?}"
    );
    a.ck.notify_complete(3).unwrap();
    let m3 = list_completed(&storage)
        .unwrap()
        .into_iter()
        .find(|m| m.checkpoint_id == 3)
        .unwrap();
    assert_eq!(tables_of(&m3).len(), 2 * MAX_P as usize);
    let new: Vec<_> = m3
        .files
        .iter()
        .filter(|f| m3.object_is_new(f.object))
        .map(|f| f.kind.clone())
        .collect();
    assert_eq!(
        new,
        vec![FileKind::Table {
            state: 0,
            key_group: kg
        }]
    );
    // A key removed empties nothing else; a cleared table disappears from the checkpoint.
    let mut r = restore_on(Kind::Heap, &storage, 3, all());
    for (k, v) in &model {
        assert_eq!(r.get(*k), Some(*v), "key {k}");
    }
    assert_storage_exact(&storage);
    assert!(tools::verify(&storage, None).unwrap().problems.is_empty());
}

#[test]
fn heap_checkpoints_hold_list_map_and_timer_tables_and_restore_them() {
    use keyed_state::serializer::StringSerializer;
    use keyed_state::state::{ListStateDescriptor, MapStateDescriptor};
    let storage = Arc::new(CheckpointStorage::in_memory().unwrap());
    let mut a = fresh_on(Kind::Heap, &storage, all(), 3);
    let list = a
        .store
        .register_list(ListStateDescriptor::new("list", StringSerializer))
        .unwrap();
    let map = a
        .store
        .register_map(MapStateDescriptor::new(
            "map",
            StringSerializer,
            LongSerializer,
        ))
        .unwrap();
    for k in 0..500i64 {
        a.store.set_current_key(&k).unwrap();
        a.store.list(&list).unwrap().add(&format!("e{k}")).unwrap();
        a.store.list(&list).unwrap().add(&"x".to_string()).unwrap();
        for j in 0..3 {
            a.store
                .map(&map)
                .unwrap()
                .put(&format!("u{j}"), &(k * 10 + j))
                .unwrap();
        }
    }
    a.checkpoint(1);
    a.ck.notify_complete(1).unwrap();
    // Change one map entry of key 3 only.
    a.store.set_current_key(&3).unwrap();
    a.store
        .map(&map)
        .unwrap()
        .put(&"u1".to_string(), &-1)
        .unwrap();
    let s = a.checkpoint(2);
    assert_eq!(s.files_new, 1, "{s:?}");
    a.ck.notify_complete(2).unwrap();
    let cfg = KeyedStateStore::config_for(&LongSerializer, MAX_P, all());
    let (backend, _) = restored(Kind::Heap, &storage, 2, cfg);
    let mut store = KeyedStateStore::new(backend, LongSerializer).unwrap();
    let list = store
        .register_list(ListStateDescriptor::new("list", StringSerializer))
        .unwrap();
    let map = store
        .register_map(MapStateDescriptor::new(
            "map",
            StringSerializer,
            LongSerializer,
        ))
        .unwrap();
    for k in 0..500i64 {
        store.set_current_key(&k).unwrap();
        assert_eq!(
            store.list(&list).unwrap().get().unwrap(),
            Some(vec![format!("e{k}"), "x".to_string()])
        );
        let want = if k == 3 { -1 } else { k * 10 + 1 };
        assert_eq!(
            store.map(&map).unwrap().get(&"u1".to_string()).unwrap(),
            Some(want)
        );
        assert_eq!(
            store
                .map(&map)
                .unwrap()
                .entries()
                .collect::<keyed_state::Result<Vec<_>>>()
                .unwrap()
                .len(),
            3
        );
    }
}

#[test]
fn heap_rescale_reads_exactly_the_tables_of_the_owned_key_groups() {
    let storage = Arc::new(CheckpointStorage::in_memory().unwrap());
    let mut model = BTreeMap::new();
    let mut a = fresh_on(Kind::Heap, &storage, all(), 3);
    for k in 0..4000 {
        a.put(k, k * 3);
        model.insert(k, k * 3);
    }
    a.checkpoint(1);
    a.ck.notify_complete(1).unwrap();
    let total = list_completed(&storage).unwrap()[0].state_size();
    // 1 -> 2: each new instance reads its own key groups' tables, nothing else.
    let mut two: Vec<Inst> = (0..2)
        .map(|i| {
            let range = key_group_range_for_operator(MAX_P, 2, i).unwrap();
            let cfg = KeyedStateStore::config_for(&LongSerializer, MAX_P, range);
            let (backend, info) = restored(Kind::Heap, &storage, 1, cfg.clone());
            // Heap tables are not engine files: counted apart.
            assert_eq!(info.tables_read, range.len(), "{info:?}");
            assert_eq!(info.files_adopted, 0, "{info:?}");
            assert!(
                info.bytes_fetched < total,
                "{} of {total}",
                info.bytes_fetched
            );
            inst_on(backend, None, &storage, &cfg, 3)
        })
        .collect();
    assert_eq!(
        two.iter_mut()
            .map(|x| x.store.num_entries().unwrap())
            .sum::<u64>(),
        4000
    );
    for (k, v) in &model {
        let i = two.iter().position(|x| x.owns(*k)).unwrap();
        assert_eq!(two[i].get(*k), Some(*v), "key {k}");
    }
    for k in 0..4000 {
        let i = two.iter().position(|x| x.owns(k)).unwrap();
        two[i].put(k, k + 1);
        model.insert(k, k + 1);
    }
    for x in two.iter_mut() {
        x.checkpoint(2);
    }
    for x in two.iter_mut() {
        x.ck.notify_complete(2).unwrap();
    }
    // 2 -> 1 and 2 -> 3.
    let mut one = restore_on(Kind::Heap, &storage, 2, all());
    for (k, v) in &model {
        assert_eq!(one.get(*k), Some(*v), "key {k}");
    }
    assert_eq!(one.store.num_entries().unwrap(), model.len() as u64);
    let mut n = 0;
    for i in 0..3 {
        let range = key_group_range_for_operator(MAX_P, 3, i).unwrap();
        let mut x = restore_on(Kind::Heap, &storage, 2, range);
        n += x.store.num_entries().unwrap();
        let owned: Vec<(i64, i64)> = model
            .iter()
            .filter(|(k, _)| x.owns(**k))
            .map(|(k, v)| (*k, *v))
            .collect();
        for (k, v) in owned {
            assert_eq!(x.get(k), Some(v), "key {k}");
        }
    }
    assert_eq!(n, model.len() as u64);
}

#[test]
fn a_restore_of_another_backends_checkpoint_names_both_and_to_savepoint_bridges_them() {
    let storage = Arc::new(CheckpointStorage::in_memory().unwrap());
    let mut a = fresh_on(Kind::Heap, &storage, all(), 3);
    for k in 0..100 {
        a.put(k, k);
    }
    a.checkpoint(1);
    a.ck.notify_complete(1).unwrap();
    let cfg = KeyedStateStore::config_for(&LongSerializer, MAX_P, all());
    let err = restore_lsm_temp(&storage, 1, cfg, options()).err().unwrap();
    let text = err.to_string();
    assert!(
        text.contains("heap backend") && text.contains("lsm"),
        "{text}"
    );
    let dir = tempfile::tempdir().unwrap();
    to_savepoint(&storage, 1, &dir.path().join("sp")).unwrap();
    let sp = SavepointReader::open(&dir.path().join("sp")).unwrap();
    let cfg = KeyedStateStore::config_for(&LongSerializer, MAX_P, all());
    let mut lsm = KeyedStateStore::new(
        Box::new(LsmBackend::temp_with(cfg, options()).unwrap()),
        LongSerializer,
    )
    .unwrap();
    lsm.restore(&[sp]).unwrap();
    let c = lsm
        .register_value(ValueStateDescriptor::new("counter", LongSerializer))
        .unwrap();
    lsm.set_current_key(&42).unwrap();
    assert_eq!(lsm.value(&c).unwrap().get().unwrap(), Some(42));
}

#[cfg(feature = "rocksdb")]
#[test]
fn rocksdb_checkpoints_reuse_uploaded_ssts_and_rescale_as_flink_does() {
    let storage = Arc::new(CheckpointStorage::in_memory().unwrap());
    let mut model = BTreeMap::new();
    let mut a = fresh_on(Kind::RocksDb, &storage, all(), 3);
    for k in 0..5000 {
        a.put(k, k * 3);
        model.insert(k, k * 3);
    }
    let s1 = a.checkpoint(1);
    a.ck.notify_complete(1).unwrap();
    let m1 = list_completed(&storage).unwrap().remove(0);
    let named: BTreeSet<String> = m1
        .files
        .iter()
        .filter_map(|f| match &f.kind {
            FileKind::Named(n) => Some(n.split('-').next().unwrap().to_string()),
            _ => None,
        })
        .collect();
    assert!(
        named.contains("CURRENT") && named.contains("MANIFEST") && named.contains("OPTIONS"),
        "{named:?}"
    );
    for k in 0..10 {
        a.put(k, k + 1);
        model.insert(k, k + 1);
    }
    let s2 = a.checkpoint(2);
    assert!(s2.files_reused > 0, "{s1:?} {s2:?}");
    assert!(s2.bytes_new_files < s1.bytes_new_files, "{s1:?} {s2:?}");
    a.ck.notify_complete(2).unwrap();
    // 1 -> 2: the base opened and clipped (nothing copied, one instance).
    let mut two: Vec<Inst> = (0..2)
        .map(|i| {
            let range = key_group_range_for_operator(MAX_P, 2, i).unwrap();
            let cfg = KeyedStateStore::config_for(&LongSerializer, MAX_P, range);
            let (backend, info) = restored(Kind::RocksDb, &storage, 2, cfg.clone());
            assert_eq!((info.adopted.len(), info.copied.len()), (1, 0));
            inst_on(backend, None, &storage, &cfg, 3)
        })
        .collect();
    for x in two.iter_mut() {
        let owned = model.keys().filter(|k| x.owns(**k)).count() as u64;
        assert_eq!(x.store.num_entries().unwrap(), owned, "clipped");
    }
    for k in 0..5000 {
        let i = two.iter().position(|x| x.owns(k)).unwrap();
        assert_eq!(two[i].get(k), model.get(&k).copied(), "key {k}");
        two[i].put(k, k - 1);
        model.insert(k, k - 1);
    }
    for x in two.iter_mut() {
        x.checkpoint(3);
        x.ck.notify_complete(3).unwrap();
    }
    // 2 -> 1: one opened, the other copied in.
    let cfg = KeyedStateStore::config_for(&LongSerializer, MAX_P, all());
    let (backend, info) = restored(Kind::RocksDb, &storage, 3, cfg);
    assert_eq!((info.adopted.len(), info.copied.len()), (1, 1), "{info:?}");
    let (store, counter) = store_on(backend);
    let mut one = Inst {
        store,
        counter,
        ck: a.ck,
        engine: None,
    };
    for (k, v) in &model {
        assert_eq!(one.get(*k), Some(*v), "key {k}");
    }
    assert_eq!(one.store.num_entries().unwrap(), model.len() as u64);
}

#[test]
fn a_checkpoint_id_written_by_two_runs_with_overlapping_instances_is_an_error_naming_both() {
    let storage = Arc::new(CheckpointStorage::in_memory().unwrap());
    let first_half = KeyGroupRange::new(0, MAX_P as u16 / 2 - 1);
    let mut old = fresh_on(Kind::Lsm, &storage, first_half, 3);
    let mut new = fresh_on(Kind::Lsm, &storage, all(), 3);
    for k in 0..200 {
        if old.owns(k) {
            old.put(k, 1);
        }
        new.put(k, 2);
    }
    old.checkpoint(5);
    old.ck.notify_complete(5).unwrap();
    new.checkpoint(5);
    new.ck.notify_complete(5).unwrap();
    let cfg = KeyedStateStore::config_for(&LongSerializer, MAX_P, all());
    let err = restore_lsm_temp(&storage, 5, cfg, options()).err().unwrap();
    let text = err.to_string();
    assert!(
        matches!(
            err,
            keyed_state::Error::Checkpoint(CheckpointError::OverlappingParts { id: 5, .. })
        ),
        "{text}"
    );
    assert_eq!(err.kind(), keyed_state::ErrorKind::Corruption);
    assert!(
        text.contains("both hold key groups")
            && text.contains(&first_half.to_string())
            && text.contains(&all().to_string()),
        "{text}"
    );
}

/// The names in directory `dir`.
fn names_in(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn restore_lsm_builds_the_engine_in_the_directory_the_caller_gives(
    storage: &Arc<CheckpointStorage>,
) {
    let mut a = fresh(storage, all(), 3);
    for k in 0..3000 {
        a.put(k, k * 7);
    }
    a.checkpoint(1);
    a.ck.notify_complete(1).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("instance-0");
    let cfg = KeyedStateStore::config_for(&LongSerializer, MAX_P, all());
    let (backend, info) = restore_lsm(storage, 1, &dir, cfg.clone(), options()).unwrap();
    assert_eq!(backend.path(), dir.as_path());
    assert!(info.files_adopted > 0, "{info:?}");
    assert_eq!(info.tables_read, 0, "{info:?}");
    // The engine's files, and nothing of the restore's staging.
    let names = names_in(&dir);
    assert!(names.iter().any(|n| n.ends_with(".sst")), "{names:?}");
    assert!(
        names
            .iter()
            .all(|n| !n.starts_with("staged-") && !n.starts_with("restore-part-")),
        "{names:?}"
    );
    let (mut store, counter) = store_on(Box::new(backend));
    for k in 0..3000 {
        store.set_current_key(&k).unwrap();
        assert_eq!(store.value(&counter).unwrap().get().unwrap(), Some(k * 7));
    }
    drop(store);
    // The directory is the caller's: it stays, and a second restore into it (not empty) is refused.
    assert!(names_in(&dir).iter().any(|n| n.ends_with(".sst")));
    let err = restore_lsm(storage, 1, &dir, cfg, options()).err().unwrap();
    assert_eq!(err.kind(), keyed_state::ErrorKind::InvalidInput, "{err}");
    assert!(err.to_string().contains("not empty"), "{err}");
}

fn a_part_with_other_states_is_copied_through_a_directory_inside_the_one_given_and_removed(
    storage: &Arc<CheckpointStorage>,
) {
    let halves = [KeyGroupRange::new(0, 7), KeyGroupRange::new(8, 15)];
    let mut a = fresh(storage, halves[0], 3);
    // The second instance registered another state first: its state ids differ, so its files cannot
    // share the first instance's engine and its entries are copied.
    let cfg_b = KeyedStateStore::config_for(&LongSerializer, MAX_P, halves[1]);
    let mut b_store = KeyedStateStore::new(
        Box::new(LsmBackend::temp_with(cfg_b.clone(), options()).unwrap()),
        LongSerializer,
    )
    .unwrap();
    b_store
        .register_value(ValueStateDescriptor::new("other", LongSerializer))
        .unwrap();
    let b_counter = b_store
        .register_value(ValueStateDescriptor::new("counter", LongSerializer))
        .unwrap();
    let b_ck =
        Checkpointer::open(Arc::clone(storage), &cfg_b, CheckpointOptions::default()).unwrap();
    let mut model = BTreeMap::new();
    for k in 0..2000 {
        if a.owns(k) {
            a.put(k, k + 1);
        } else {
            b_store.set_current_key(&k).unwrap();
            b_store.value(&b_counter).unwrap().update(&(k + 1)).unwrap();
        }
        model.insert(k, k + 1);
    }
    a.checkpoint(1);
    b_store.checkpoint(&b_ck, 1).unwrap().run().unwrap();
    a.ck.notify_complete(1).unwrap();
    b_ck.notify_complete(1).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("merged");
    let cfg = KeyedStateStore::config_for(&LongSerializer, MAX_P, all());
    let (backend, info) = restore_lsm(storage, 1, &dir, cfg, options()).unwrap();
    assert_eq!(info.adopted.len(), 1, "{info:?}");
    assert_eq!(info.copied.len(), 1, "{info:?}");
    let names = names_in(&dir);
    assert!(
        names
            .iter()
            .all(|n| !n.starts_with("staged-") && !n.starts_with("restore-part-")),
        "{names:?}"
    );
    let (mut store, counter) = store_on(Box::new(backend));
    for (k, v) in model {
        store.set_current_key(&k).unwrap();
        assert_eq!(
            store.value(&counter).unwrap().get().unwrap(),
            Some(v),
            "key {k}"
        );
    }
}

fn a_failed_restore_leaves_the_directory_it_was_given_empty(storage: &Arc<CheckpointStorage>) {
    let mut a = fresh(storage, all(), 3);
    for k in 0..3000 {
        a.put(k, k);
    }
    a.checkpoint(1);
    a.ck.notify_complete(1).unwrap();
    // Every object of the checkpoint damaged: whatever the restore fetched before it noticed goes.
    for o in &list_completed(storage).unwrap()[0].objects {
        let mut bytes = storage.get(&o.path).unwrap();
        let n = bytes.len();
        bytes[n / 2] ^= 0x55;
        bytes[n - 1] ^= 0x55;
        storage.put(&o.path, bytes).unwrap();
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("instance-0");
    let cfg = KeyedStateStore::config_for(&LongSerializer, MAX_P, all());
    let err = restore_lsm(storage, 1, &dir, cfg, options()).err().unwrap();
    assert_eq!(err.kind(), keyed_state::ErrorKind::Corruption, "{err}");
    assert!(err.location().is_some(), "{err}");
    assert_eq!(names_in(&dir), Vec::<String>::new());
}

/// An 8 GiB `_metadata` (sparse) beside a good checkpoint: listing, verifying and restoring name it as
/// too large without reading it (before the bound, reading it aborted on "memory allocation of 8589934592
/// bytes failed").
#[test]
fn an_8_gib_metadata_file_is_an_error_naming_it_never_an_allocation() {
    let dir = tempfile::tempdir().unwrap();
    let storage = Arc::new(CheckpointStorage::local(dir.path()).unwrap());
    let mut a = fresh(&storage, all(), 3);
    for k in 0..100 {
        a.put(k, k);
    }
    a.checkpoint(1);
    a.ck.notify_complete(1).unwrap();
    let huge = dir
        .path()
        .join("chk-00000000000000000002/kg00000-00015/_metadata");
    std::fs::create_dir_all(huge.parent().unwrap()).unwrap();
    std::fs::File::create(&huge)
        .unwrap()
        .set_len(8 << 30)
        .unwrap();
    let r = tools::verify(&storage, None).unwrap();
    assert_eq!(r.problems.len(), 1, "{r:?}");
    let text = format!("{:?}", r.problems[0]);
    assert!(
        text.contains("chk-00000000000000000002") && text.contains("8589934592 bytes"),
        "{text}"
    );
    let Err(e) = keyed_state::checkpoint::restore_lsm_temp(
        &storage,
        2,
        KeyedStateStore::config_for(&LongSerializer, MAX_P, all()),
        options(),
    ) else {
        panic!("restored a checkpoint from an 8 GiB metadata file");
    };
    assert!(e.to_string().contains("more than the 268435456"), "{e}");
    // The good checkpoint still restores.
    let mut one = vec![restore(&storage, 1, all())];
    check_instances(&mut one, &(0..100).map(|k| (k, k)).collect());
}

/// An S3 endpoint that accepts connections and never answers: every request times out, and the store
/// fails with an error naming the operation: after about 4.5 s with the request timeout set to 1 s
/// (`timeout`, or `AWS_TIMEOUT` in the environment), after about 30 s with the default (it was 120 s).
#[cfg(feature = "s3")]
#[test]
fn an_s3_endpoint_that_never_answers_fails_after_its_request_timeout_not_minutes() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    // Accept and hold every connection, never writing a byte.
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in listener.incoming() {
            held.push(c);
        }
    });
    let try_list = |extra: &[(&str, &str)]| {
        let mut settings: Vec<(&str, &str)> = vec![
            ("aws_endpoint", endpoint.as_str()),
            ("aws_allow_http", "true"),
            ("aws_access_key_id", "x"),
            ("aws_secret_access_key", "x"),
            ("aws_region", "us-east-1"),
        ];
        settings.extend_from_slice(extra);
        let storage = CheckpointStorage::open_with("s3://silent/root", &settings).unwrap();
        let t = std::time::Instant::now();
        let e = storage.list("").unwrap_err();
        (e, t.elapsed())
    };
    let (e, took) = try_list(&[("timeout", "1s")]);
    assert!(e.to_string().contains("list failed"), "{e}");
    eprintln!("silent endpoint, timeout 1s: failed after {took:?}: {e}");
    assert!(took < std::time::Duration::from_secs(15), "{took:?}");
    let (e, took) = try_list(&[]);
    eprintln!("silent endpoint, default timeout: failed after {took:?}: {e}");
    assert!(took < std::time::Duration::from_secs(45), "{took:?}");
}
