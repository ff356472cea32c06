//! Claim mode (`design/checkpoints.md`, "Restore modes" and "Claim across a rescale"): the restored
//! checkpoint becomes the new instances' incremental base, at the same parallelism or another; each of its
//! parts is deleted by the instance holding its first key group once subsumed, the objects only it
//! referenced follow, and every object left keeps a sweeper.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::common as checkpoint_common;
#[cfg(feature = "s3")]
use crate::s3 as common_s3;

use checkpoint_common::*;

use keyed_state::backend::StateBackend;
use keyed_state::checkpoint::{
    instance_name, restore_lsm_temp, CheckpointError, CheckpointOptions, CheckpointStorage,
    Checkpointer, FileKind, RestoreInfo, RestoreMode,
};
use keyed_state::checkpoint::{list_completed, tools};
use keyed_state::keygroup::key_group_range_for_operator;
use keyed_state::serializer::LongSerializer;
use keyed_state::state::KeyedStateStore;

on_every_backend_and_store!(
    claim_across_rescales_reuses_the_restored_files_and_deletes_each_restored_checkpoint_once_subsumed,
    a_restored_part_is_deleted_only_by_the_instance_holding_its_first_key_group,
    a_checkpoint_begun_before_its_instance_hears_of_a_confirmation_keeps_what_it_references,
);

/// Instance `i` of `parallelism`, restored from checkpoint `id` of `storage` in claim mode, retaining
/// `retain`; with the restore's report.
fn claimed_instance(
    kind: Kind,
    storage: &Arc<CheckpointStorage>,
    id: u64,
    parts: (u32, u32),
    retain: usize,
) -> (Inst, RestoreInfo) {
    claimed_instance_with(kind, storage, id, parts, retain, options())
}

/// [`claimed_instance`] with the LSM engine's options `opts`.
fn claimed_instance_with(
    kind: Kind,
    storage: &Arc<CheckpointStorage>,
    id: u64,
    (parallelism, i): (u32, u32),
    retain: usize,
    opts: keyed_state_lsm::Options,
) -> (Inst, RestoreInfo) {
    let range = key_group_range_for_operator(MAX_P, parallelism, i).unwrap();
    let cfg = KeyedStateStore::config_for(&LongSerializer, MAX_P, range);
    let (backend, info, engine): (Box<dyn StateBackend>, _, _) = match kind {
        Kind::Lsm => {
            let (b, info) = restore_lsm_temp(storage, id, cfg.clone(), opts).unwrap();
            let e = Some(b.engine());
            (Box::new(b), info, e)
        }
        _ => {
            let (b, info) = restored(kind, storage, id, cfg.clone());
            (b, info, None)
        }
    };
    let x = inst_on(backend, engine, storage, &cfg, retain);
    x.ck.restored_from(&info.parts, range, RestoreMode::Claim)
        .unwrap();
    (x, info)
}

/// A backend of `kind` restored from checkpoint `id` of `storage` (every key group) in claim mode, with a
/// checkpointer on the same storage retaining 1.
fn claimed(kind: Kind, storage: &Arc<CheckpointStorage>, id: u64) -> Inst {
    claimed_instance(kind, storage, id, (1, 0), 1).0
}

/// The claim markers of the root: (owner, `<instance>/<run>`).
fn markers(storage: &CheckpointStorage) -> Vec<(String, String)> {
    storage
        .list("claimed/")
        .unwrap()
        .into_iter()
        .map(|(p, _)| {
            let mut it = p.splitn(3, '/').skip(1);
            (
                it.next().unwrap().to_string(),
                it.next().unwrap().to_string(),
            )
        })
        .collect()
}

/// Every object under `shared/` has a sweeper among the `running` instances (its own name, or a claim
/// marker of its run that one of them holds), and every marker's run still holds an object.
fn assert_every_object_has_a_sweeper(storage: &CheckpointStorage, running: &[String]) {
    let ms = markers(storage);
    let objects: Vec<String> = storage
        .list("shared/")
        .unwrap()
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    for o in &objects {
        let mut it = o.split('/').skip(1);
        let (inst, run) = (it.next().unwrap(), it.next().unwrap());
        let run = format!("{inst}/{run}");
        let swept = running.iter().any(|r| r == inst)
            || ms
                .iter()
                .any(|(owner, m)| *m == run && running.contains(owner));
        assert!(
            swept,
            "{o} has no sweeper among {running:?}; markers {ms:?}"
        );
    }
    for (owner, run) in &ms {
        assert!(
            objects
                .iter()
                .any(|o| o.starts_with(&format!("shared/{run}/"))),
            "marker of {owner} for {run}, whose objects are all gone"
        );
    }
}

/// The files of instance `x`'s part of checkpoint `id` that the restore `info` adopted reference the
/// restored objects (none uploaded again), and at least one does; on the LSM and heap backends (nothing
/// written since the restore, no compaction due) nothing at all was uploaded.
fn assert_restored_files_reused(
    storage: &CheckpointStorage,
    kind: Kind,
    x: &Inst,
    info: &RestoreInfo,
    id: u64,
) {
    let adopted: BTreeSet<(u64, String)> = info
        .parts
        .iter()
        .flat_map(|p| {
            // The RocksDB variant's named files (MANIFEST, ...) are uploaded by every checkpoint.
            p.files
                .iter()
                .filter(|f| !matches!(f.kind, FileKind::Named(_)))
                .map(|f| (f.number, p.objects[f.object as usize].path.clone()))
        })
        .collect();
    let numbers: BTreeSet<u64> = adopted.iter().map(|(n, _)| *n).collect();
    let m = list_completed(storage)
        .unwrap()
        .into_iter()
        .find(|m| m.checkpoint_id == id && m.instance == x.ck.instance())
        .unwrap();
    let mut reused = 0;
    for f in &m.files {
        if numbers.contains(&f.number) && !matches!(f.kind, FileKind::Named(_)) {
            let o = &m.objects[f.object as usize];
            assert!(
                adopted.contains(&(f.number, o.path.clone())),
                "{}: restored file {} uploaded again as {}",
                x.ck.instance(),
                f.number,
                o.path
            );
            reused += 1;
        }
    }
    // RocksDB compacts what it opened on its own schedule (and a 2 -> 1 restore copies one part in).
    #[cfg(feature = "rocksdb")]
    let compacts_on_open = kind == Kind::RocksDb;
    #[cfg(not(feature = "rocksdb"))]
    let compacts_on_open = false;
    assert!(reused > 0 || compacts_on_open, "{}: {m:?}", x.ck.instance());
    if matches!(kind, Kind::Lsm | Kind::Heap) {
        assert!(
            m.objects.iter().all(|o| o.uploaded_by < id),
            "{}: {m:?}",
            x.ck.instance()
        );
    }
}

/// Checkpoints every instance as `id` and confirms it, its LSM files compacted first: the restored
/// instances then hold files that no compaction picks at once, and each one's reuse shows.
fn compact_and_checkpoint_all(insts: &mut [Inst], id: u64) {
    for x in insts.iter() {
        if let Some(e) = &x.engine {
            e.compact_all().unwrap();
        }
    }
    checkpoint_all(insts, id);
}

/// Writes a round into `insts` (each key in the instance that owns it): overwrites, new keys, deletions.
fn write_round(insts: &mut [Inst], model: &mut BTreeMap<i64, i64>, round: i64) {
    for k in (0..2000)
        .step_by(round as usize)
        .chain(2000 * round..2000 * round + 300)
    {
        let i = insts.iter().position(|x| x.owns(k)).unwrap();
        insts[i].put(k, k * 10 + round);
        model.insert(k, k * 10 + round);
    }
    for k in (round..2000).step_by(89) {
        let i = insts.iter().position(|x| x.owns(k)).unwrap();
        let x = &mut insts[i];
        x.store.set_current_key(&k).unwrap();
        x.store.value(&x.counter).unwrap().clear().unwrap();
        model.remove(&k);
    }
}

fn claim_across_rescales_reuses_the_restored_files_and_deletes_each_restored_checkpoint_once_subsumed(
    storage: &Arc<CheckpointStorage>,
    kind: Kind,
) {
    let mut model = BTreeMap::new();
    let mut insts = vec![fresh_on(kind, storage, all(), 1)];
    write_round(&mut insts, &mut model, 1);
    let mut id = 1u64;
    compact_and_checkpoint_all(&mut insts, id);
    for (round, parallelism) in (2i64..).zip([2u32, 1, 3, 2]) {
        let restored_id = id;
        drop(std::mem::take(&mut insts));
        let mut infos = Vec::new();
        for i in 0..parallelism {
            let (x, info) = claimed_instance(kind, storage, restored_id, (parallelism, i), 1);
            insts.push(x);
            infos.push(info);
        }
        check_instances(&mut insts, &model);
        // The first checkpoint after the restore uploads none of the files the restore adopted.
        id += 1;
        for x in insts.iter_mut() {
            x.checkpoint(id);
        }
        for (x, info) in insts.iter().zip(&infos) {
            assert_restored_files_reused(storage, kind, x, info, id);
        }
        for x in insts.iter_mut() {
            x.ck.notify_complete(id).unwrap();
        }
        // Retaining one: the restored checkpoint is gone, every part of it, and so is every object only it
        // referenced; what is left has a sweeper.
        let ids: BTreeSet<u64> = list_completed(storage)
            .unwrap()
            .iter()
            .map(|m| m.checkpoint_id)
            .collect();
        assert_eq!(
            ids,
            BTreeSet::from([id]),
            "after the rescale to {parallelism}"
        );
        assert_storage_exact(storage);
        let running: Vec<String> = insts.iter().map(|x| x.ck.instance().to_string()).collect();
        assert_every_object_has_a_sweeper(storage, &running);
        write_round(&mut insts, &mut model, round);
        id += 1;
        compact_and_checkpoint_all(&mut insts, id);
        assert_storage_exact(storage);
        assert_every_object_has_a_sweeper(storage, &running);
    }
    drop(insts);
    let mut one = vec![restore_on(kind, storage, id, all())];
    check_instances(&mut one, &model);
    // gc of the stopped job keeping nothing leaves an empty root, claim markers included (attempt markers
    // stay: they fence).
    tools::gc_fencing(storage, 0, false).unwrap();
    assert_eq!(objects_but_attempt_markers(storage), Vec::<String>::new());
}

fn a_restored_part_is_deleted_only_by_the_instance_holding_its_first_key_group(
    storage: &Arc<CheckpointStorage>,
    kind: Kind,
) {
    let mut model = BTreeMap::new();
    let mut insts: Vec<Inst> = (0..2)
        .map(|i| {
            let range = key_group_range_for_operator(MAX_P, 2, i).unwrap();
            fresh_on(kind, storage, range, 1)
        })
        .collect();
    write_round(&mut insts, &mut model, 1);
    checkpoint_all(&mut insts, 1);
    let old: Vec<String> = insts.iter().map(|x| x.ck.instance().to_string()).collect();
    drop(insts);
    // 2 -> 3: part 0 (key groups 0..=7) starts in instance 0's range (0..=5), part 1 (8..=15) in instance
    // 1's (6..=10); instance 2 (11..=15) takes files of part 1 and owns none.
    let mut insts: Vec<Inst> = (0..3)
        .map(|i| claimed_instance(kind, storage, 1, (3, i), 1).0)
        .collect();
    for x in insts.iter_mut() {
        x.checkpoint(2);
    }
    let parts_of_1 = |s: &CheckpointStorage| -> Vec<String> {
        list_completed(s)
            .unwrap()
            .into_iter()
            .filter(|m| m.checkpoint_id == 1)
            .map(|m| m.instance)
            .collect()
    };
    insts[2].ck.notify_complete(2).unwrap();
    assert_eq!(parts_of_1(storage), old, "instance 2 owns no part");
    insts[1].ck.notify_complete(2).unwrap();
    assert_eq!(parts_of_1(storage), old[..1], "instance 1 owns part 1");
    insts[0].ck.notify_complete(2).unwrap();
    assert!(parts_of_1(storage).is_empty(), "instance 0 owns part 0");
    assert_storage_exact(storage);
    let running: Vec<String> = insts.iter().map(|x| x.ck.instance().to_string()).collect();
    assert_every_object_has_a_sweeper(storage, &running);
    check_instances(&mut insts, &model);
}

fn a_checkpoint_begun_before_its_instance_hears_of_a_confirmation_keeps_what_it_references(
    storage: &Arc<CheckpointStorage>,
    kind: Kind,
) {
    let mut model = BTreeMap::new();
    let mut insts = vec![fresh_on(kind, storage, all(), 1)];
    write_round(&mut insts, &mut model, 1);
    compact_and_checkpoint_all(&mut insts, 1);
    drop(insts);
    let mut insts: Vec<Inst> = (0..2)
        .map(|i| claimed_instance(kind, storage, 1, (2, i), 1).0)
        .collect();
    for x in insts.iter_mut() {
        x.checkpoint(2);
    }
    // The host completed 2; instance 0 (the owner of the restored part) hears first: it deletes the part
    // and sweeps. Instance 1 has not heard and begins 3 on the claimed base.
    insts[0].ck.notify_complete(2).unwrap();
    write_round(&mut insts, &mut model, 2);
    let three: Vec<_> = insts
        .iter_mut()
        .map(|x| x.ck.begin(3, x.store.backend_mut()).unwrap())
        .collect();
    for p in three {
        p.run().unwrap();
    }
    assert!(tools::verify(storage, None).unwrap().problems.is_empty());
    // The host completes 3; instance 1 hears of 3 only (2 is subsumed on it).
    insts[0].ck.notify_complete(3).unwrap();
    insts[1].ck.notify_complete(3).unwrap();
    let r = tools::verify(storage, None).unwrap();
    assert!(r.problems.is_empty(), "{r:?}");
    assert_eq!(
        list_completed(storage)
            .unwrap()
            .iter()
            .map(|m| m.checkpoint_id)
            .collect::<Vec<_>>(),
        vec![3, 3]
    );
    assert_storage_exact(storage);
    drop(insts);
    let mut one = vec![restore_on(kind, storage, 3, all())];
    check_instances(&mut one, &model);
}

#[test]
fn a_claimed_checkpoint_retained_twice_survives_the_first_confirmation_and_goes_at_the_second() {
    let storage = Arc::new(CheckpointStorage::in_memory().unwrap());
    let mut model = BTreeMap::new();
    let mut insts = vec![fresh_on(Kind::Lsm, &storage, all(), 2)];
    write_round(&mut insts, &mut model, 1);
    checkpoint_all(&mut insts, 1);
    drop(insts);
    let mut insts: Vec<Inst> = (0..2)
        .map(|i| claimed_instance(Kind::Lsm, &storage, 1, (2, i), 2).0)
        .collect();
    let ids = |s: &CheckpointStorage| -> BTreeSet<u64> {
        list_completed(s)
            .unwrap()
            .iter()
            .map(|m| m.checkpoint_id)
            .collect()
    };
    write_round(&mut insts, &mut model, 2);
    checkpoint_all(&mut insts, 2);
    assert_eq!(ids(&storage), BTreeSet::from([1, 2]));
    assert_eq!(insts[0].ck.retained(), vec![1, 2]);
    write_round(&mut insts, &mut model, 3);
    checkpoint_all(&mut insts, 3);
    assert_eq!(ids(&storage), BTreeSet::from([2, 3]));
    assert_storage_exact(&storage);
    check_instances(&mut insts, &model);
}

#[test]
fn claim_mode_refuses_parts_of_two_checkpoints_and_a_claim_after_the_first_checkpoint() {
    let storage = Arc::new(CheckpointStorage::in_memory().unwrap());
    let mut a = fresh_on(Kind::Lsm, &storage, all(), 3);
    for k in 0..100 {
        a.put(k, k);
    }
    a.checkpoint(1);
    a.ck.notify_complete(1).unwrap();
    a.put(1, 2);
    a.checkpoint(2);
    a.ck.notify_complete(2).unwrap();
    let parts = list_completed(&storage).unwrap();
    let cfg = KeyedStateStore::config_for(&LongSerializer, MAX_P, all());
    let ck = Checkpointer::open(Arc::clone(&storage), &cfg, CheckpointOptions::default()).unwrap();
    let err = ck
        .restored_from(&parts, all(), RestoreMode::Claim)
        .unwrap_err();
    assert!(
        matches!(&err, keyed_state::Error::Checkpoint(CheckpointError::Invalid(t)) if t.contains("checkpoints 1 and 2")),
        "{err}"
    );
    let err =
        a.ck.restored_from(&parts[..1], all(), RestoreMode::Claim)
            .unwrap_err();
    assert!(
        matches!(&err, keyed_state::Error::Checkpoint(CheckpointError::Invalid(t)) if t.contains("before the first checkpoint")),
        "{err}"
    );
}

#[test]
fn heap_restore_in_claim_mode_references_the_restored_tables_until_they_change() {
    let storage = Arc::new(CheckpointStorage::in_memory().unwrap());
    let mut a = fresh_on(Kind::Heap, &storage, all(), 1);
    for k in 0..3000 {
        a.put(k, k);
    }
    a.checkpoint(1);
    a.ck.notify_complete(1).unwrap();
    a.ck.close();
    let mut b = claimed(Kind::Heap, &storage, 1);
    b.put(7, 70);
    let s = b.checkpoint(2);
    assert_eq!(
        (s.files_new, s.files_reused),
        (1, MAX_P as usize - 1),
        "{s:?}"
    );
    b.ck.notify_complete(2).unwrap();
    // Claimed: checkpoint 1 is subsumed and deleted; what checkpoint 2 references stays.
    let ids: Vec<u64> = list_completed(&storage)
        .unwrap()
        .iter()
        .map(|m| m.checkpoint_id)
        .collect();
    assert_eq!(ids, vec![2]);
    assert_storage_exact(&storage);
    let mut r = restore_on(Kind::Heap, &storage, 2, all());
    assert_eq!(r.get(7), Some(70));
    assert_eq!(r.get(8), Some(8));
}

#[test]
fn lsm_restore_in_claim_mode_references_the_restored_files_and_restores_them_right() {
    let storage = Arc::new(CheckpointStorage::in_memory().unwrap());
    let mut a = fresh_on(Kind::Lsm, &storage, all(), 1);
    let mut model = std::collections::BTreeMap::new();
    // Several checkpoints, so the engine's file numbers are not 1, 2, 3... any more.
    for (id, round) in (1..=3u64).zip(0i64..) {
        for k in 0..1500 {
            let v = k * 10 + round;
            a.put(k + round * 700, v);
            model.insert(k + round * 700, v);
        }
        if id == 3 {
            // The last checkpoint holds no compaction left pending: the restored engine would otherwise
            // run it first and replace every restored file before checkpoint 4 (whether it did depended on
            // the machine's load).
            a.engine
                .as_ref()
                .unwrap()
                .wait_for_background_work()
                .unwrap();
        }
        a.checkpoint(id);
        a.ck.notify_complete(id).unwrap();
    }
    a.ck.close();
    // The restored engine compacts nothing: a compaction of the flush before checkpoint 4 into the restored
    // files would replace them all before the capture, or not, depending on the machine's load.
    let no_compaction = keyed_state_lsm::Options {
        auto_compaction: false,
        ..options()
    };
    let mut b = claimed_instance_with(Kind::Lsm, &storage, 3, (1, 0), 1, no_compaction).0;
    b.put(7, 70);
    model.insert(7, 70);
    let s = b.checkpoint(4);
    assert!(
        s.files_reused > 0,
        "the claimed checkpoint's objects are the restored engine's files: {s:?}"
    );
    b.ck.notify_complete(4).unwrap();
    assert_storage_exact(&storage);
    let mut r = restore_on(Kind::Lsm, &storage, 4, all());
    for (k, v) in &model {
        assert_eq!(r.get(*k), Some(*v), "key {k}");
    }
}

#[test]
fn an_old_run_a_crash_left_objects_in_is_swept_by_its_owner_when_it_opens_again() {
    let storage = Arc::new(CheckpointStorage::in_memory().unwrap());
    let mut model = BTreeMap::new();
    let mut insts = vec![fresh_on(Kind::Lsm, &storage, all(), 1)];
    write_round(&mut insts, &mut model, 1);
    compact_and_checkpoint_all(&mut insts, 1);
    drop(insts);
    let (first, _) = claimed_instance(Kind::Lsm, &storage, 1, (2, 0), 1);
    let (second, _) = claimed_instance(Kind::Lsm, &storage, 1, (2, 1), 1);
    let mut insts = vec![first, second];
    // What a crash between a metadata deletion and its sweep leaves: an object of the old run that no
    // metadata references (a copy of a referenced one, under a name of its own).
    let old = storage
        .list(&format!("shared/{}/", instance_name(all())))
        .unwrap();
    let (path, _) = &old[0];
    let orphan = format!("{path}.left-by-a-crash");
    storage.put(&orphan, storage.get(path).unwrap()).unwrap();
    // Beside the live claimers, gc leaves the orphan to them: a claim marker names its run.
    let dry = tools::gc(&storage, 1, true).unwrap();
    assert!(dry.objects.is_empty(), "{dry:?}");
    assert_eq!(dry.spared, vec![orphan.clone()], "{dry:?}");
    // Offline (fencing), gc would take the orphan and keep the marker: its run still holds referenced
    // objects.
    let dry = tools::gc_fencing(&storage, 1, true).unwrap();
    assert_eq!(dry.objects, vec![orphan.clone()], "{dry:?}");
    assert!(!markers(&storage).is_empty());
    // The owner (instance 0, holding key group 0) runs again under its name: its sweep at open finds it.
    let owner = insts[0].ck.instance().to_string();
    let cfg = insts[0].store.config().clone();
    insts[0].ck.close();
    let again = Checkpointer::open(
        Arc::clone(&storage),
        &cfg,
        CheckpointOptions {
            instance: Some(owner),
            ..CheckpointOptions::default()
        },
    )
    .unwrap();
    let left: Vec<String> = storage
        .list("shared/")
        .unwrap()
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    assert!(!left.contains(&orphan), "{left:?}");
    assert!(
        left.contains(path),
        "a referenced object was deleted: {left:?}"
    );
    drop(again);
    assert_storage_exact(&storage);
    check_instances(&mut insts, &model);
}

#[test]
fn a_scan_that_sees_a_metadata_file_vanish_scans_again_before_anything_is_deleted() {
    use keyed_state::checkpoint::metadata_path;
    use keyed_state::internals::FaultStore;
    let fault = FaultStore::new(Arc::new(object_store::memory::InMemory::new()));
    let storage =
        Arc::new(CheckpointStorage::from_store(Arc::new(fault.clone()), "", "fault").unwrap());
    let mut model = BTreeMap::new();
    let mut insts = vec![fresh_on(Kind::Lsm, &storage, all(), 2)];
    write_round(&mut insts, &mut model, 1);
    checkpoint_all(&mut insts, 1);
    write_round(&mut insts, &mut model, 2);
    checkpoint_all(&mut insts, 2);
    let name = insts[0].ck.instance().to_string();
    let (older, newer) = (metadata_path(1, &name), metadata_path(2, &name));
    let newer_bytes = storage.get(&newer).unwrap();
    let wanted: BTreeSet<String> = list_completed(&storage).unwrap()[1]
        .objects
        .iter()
        .map(|o| o.path.clone())
        .collect();
    // Another writer between the scan's listing and its reads: the newer metadata appears (it is put
    // before the older goes, as every writer does), then the older is deleted.
    storage.delete(&newer).unwrap();
    fault.on_first_get(
        &older,
        vec![(newer.clone(), newer_bytes)],
        vec![older.clone()],
    );
    let live = tools::referenced_objects(&storage).unwrap().unwrap();
    assert!(
        wanted.is_subset(&live),
        "the scan missed objects of {newer}: {:?}",
        wanted.difference(&live).collect::<Vec<_>>()
    );
}

/// A claim restore 1 -> 2, checkpoint 2 on both instances and its confirmation, run on `storage` until a
/// request fails (as if the process died there). Returns whether both parts of checkpoint 2 were written
/// (then the host counts it complete, whatever failed after).
fn claim_and_checkpoint_until_a_failure(
    storage: &Arc<CheckpointStorage>,
    model: &mut BTreeMap<i64, i64>,
) -> bool {
    let mut insts = Vec::new();
    for i in 0..2 {
        let range = key_group_range_for_operator(MAX_P, 2, i).unwrap();
        let cfg = KeyedStateStore::config_for(&LongSerializer, MAX_P, range);
        let Ok((b, info)) = restore_lsm_temp(storage, 1, cfg.clone(), options()) else {
            return false;
        };
        let (store, counter) = store_on(Box::new(b));
        let Ok(ck) = Checkpointer::open(
            Arc::clone(storage),
            &cfg,
            CheckpointOptions {
                retain: 1,
                ..CheckpointOptions::default()
            },
        ) else {
            return false;
        };
        if ck
            .restored_from(&info.parts, range, RestoreMode::Claim)
            .is_err()
        {
            return false;
        }
        insts.push(Inst {
            store,
            counter,
            ck,
            engine: None,
        });
    }
    write_round(&mut insts, model, 2);
    let mut written = 0;
    for x in insts.iter_mut() {
        match x.ck.begin(2, x.store.backend_mut()).and_then(|p| p.run()) {
            Ok(_) => written += 1,
            Err(_) => return false,
        }
    }
    for x in &insts {
        if x.ck.notify_complete(2).is_err() {
            break;
        }
    }
    written == 2
}

#[test]
fn a_claim_rescale_failing_at_any_object_store_request_leaves_a_restorable_root_that_the_next_run_cleans(
) {
    use keyed_state::internals::FaultStore;
    let setup = || {
        let fault = FaultStore::new(Arc::new(object_store::memory::InMemory::new()));
        let storage =
            Arc::new(CheckpointStorage::from_store(Arc::new(fault.clone()), "", "fault").unwrap());
        let mut model = BTreeMap::new();
        let mut insts = vec![fresh_on(Kind::Lsm, &storage, all(), 1)];
        write_round(&mut insts, &mut model, 1);
        checkpoint_all(&mut insts, 1);
        drop(insts);
        (fault, storage, model)
    };
    let count = {
        let (fault, storage, mut model) = setup();
        let start = fault.requests();
        assert!(claim_and_checkpoint_until_a_failure(&storage, &mut model));
        fault.requests() - start
    };
    assert!(count > 10, "{count} requests");
    eprintln!("{count} requests in a claim rescale and its first checkpoint");
    for n in 1..=count {
        let (fault, storage, mut model) = setup();
        let at_one = model.clone();
        fault.fail_from(Some(fault.requests() + n));
        let complete = claim_and_checkpoint_until_a_failure(&storage, &mut model);
        fault.fail_from(None);
        // The host restarts the job (same parallelism, claim) from the last checkpoint it counts complete.
        let (last, mut model) = if complete { (2, model) } else { (1, at_one) };
        let mut insts: Vec<Inst> = (0..2)
            .map(|i| claimed_instance(Kind::Lsm, &storage, last, (2, i), 1).0)
            .collect();
        check_instances(&mut insts, &model);
        // Ids are never reused (as Flink's checkpoint counter): the failed run may have written id 2 for
        // some instance, and metadata is never overwritten (`CheckpointError::AlreadyExists`).
        for id in [last + 2, last + 3] {
            write_round(&mut insts, &mut model, id as i64 + 1);
            checkpoint_all(&mut insts, id);
        }
        let r = tools::verify(&storage, None).unwrap();
        assert!(r.problems.is_empty(), "request {n}: {r:?}");
        assert_storage_exact(&storage);
        let running: Vec<String> = insts.iter().map(|x| x.ck.instance().to_string()).collect();
        assert_every_object_has_a_sweeper(&storage, &running);
        drop(insts);
        let mut one = vec![restore_on(Kind::Lsm, &storage, last + 3, all())];
        check_instances(&mut one, &model);
    }
}
