//! Incremental checkpoints (`design/checkpoints.md`): the two parts, the safe-deletion invariants (each its
//! own test), failure cases, restore and rescale by adoption, the tools.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use keyed_state::backend::heap::HeapBackend;
use keyed_state::backend::lsm::LsmBackend;
use keyed_state::checkpoint::tools::{self, list_completed};
use keyed_state::checkpoint::{
    restore_lsm, to_savepoint, CheckpointError, CheckpointOptions, CheckpointStorage, Checkpointer,
};
use keyed_state::keygroup::{key_group_range_for_operator, KeyGroupRange};
use keyed_state::lsm::Options;
use keyed_state::savepoint::SavepointReader;
use keyed_state::serializer::LongSerializer;
use keyed_state::state::{KeyedStateStore, ValueState, ValueStateDescriptor};

const MAX_P: u32 = 16;

struct Inst {
    store: KeyedStateStore<LongSerializer>,
    counter: ValueState<LongSerializer>,
    ck: Checkpointer,
}

fn options() -> Options {
    LsmBackend::small_options()
}

fn store_on(backend: LsmBackend) -> (KeyedStateStore<LongSerializer>, ValueState<LongSerializer>) {
    let mut store = KeyedStateStore::new(Box::new(backend), LongSerializer).unwrap();
    let counter = store
        .register_value(ValueStateDescriptor::new("counter", LongSerializer))
        .unwrap();
    (store, counter)
}

fn fresh(storage: &Arc<CheckpointStorage>, range: KeyGroupRange, retain: usize) -> Inst {
    let cfg = KeyedStateStore::config_for(&LongSerializer, MAX_P, range);
    let backend = LsmBackend::temp_with(cfg.clone(), options()).unwrap();
    let (store, counter) = store_on(backend);
    let ck = Checkpointer::open(
        Arc::clone(storage),
        &cfg,
        CheckpointOptions {
            retain,
            ..CheckpointOptions::default()
        },
    )
    .unwrap();
    Inst { store, counter, ck }
}

impl Inst {
    fn put(&mut self, k: i64, v: i64) -> bool {
        if self.store.set_current_key(&k).is_err() {
            return false;
        }
        match self.store.value(&self.counter) {
            Ok(mut s) => s.update(&v).is_ok(),
            Err(_) => false,
        }
    }
    fn get(&mut self, k: i64) -> Option<i64> {
        self.store.set_current_key(&k).unwrap();
        self.store.value(&self.counter).unwrap().get().unwrap()
    }
    fn owns(&self, k: i64) -> bool {
        let kg = self.store.key_group_of(&k).unwrap();
        self.store.config().key_group_range.contains(kg)
    }
    fn checkpoint(&mut self, id: u64) -> keyed_state::checkpoint::CheckpointSummary {
        let p = self.ck.begin(id, self.store.backend_mut()).unwrap();
        p.run().unwrap()
    }
}

fn restore(storage: &CheckpointStorage, id: u64, range: KeyGroupRange) -> Inst {
    let cfg = KeyedStateStore::config_for(&LongSerializer, MAX_P, range);
    let (backend, _) = restore_lsm(storage, id, cfg.clone(), options()).unwrap();
    let (store, counter) = store_on(backend);
    let ck = Checkpointer::open(
        Arc::new(CheckpointStorage::in_memory().unwrap()),
        &cfg,
        CheckpointOptions::default(),
    )
    .unwrap();
    Inst { store, counter, ck }
}

/// Objects under `shared/` and the set every metadata in the root references.
fn objects_and_references(storage: &CheckpointStorage) -> (BTreeSet<String>, BTreeSet<String>) {
    let objects = storage
        .list("shared/")
        .unwrap()
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    let refs = tools::referenced_objects(storage).unwrap().unwrap();
    (objects, refs)
}

fn assert_storage_exact(storage: &CheckpointStorage) {
    let (objects, refs) = objects_and_references(storage);
    assert_eq!(
        objects, refs,
        "storage holds exactly what metadata references"
    );
}

fn all() -> KeyGroupRange {
    KeyGroupRange::new(0, MAX_P as u16 - 1)
}

#[test]
fn a_checkpoint_holds_the_state_at_its_synchronous_part() {
    let storage = Arc::new(CheckpointStorage::in_memory().unwrap());
    let mut a = fresh(&storage, all(), 3);
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
    let mut r = restore(&storage, 1, all());
    for k in 0..2000 {
        assert_eq!(r.get(k), Some(k));
    }
    assert_eq!(r.get(5000), None);
}

#[test]
fn a_second_checkpoint_uploads_only_files_the_confirmed_one_lacks() {
    let storage = Arc::new(CheckpointStorage::in_memory().unwrap());
    let mut a = fresh(&storage, all(), 3);
    for k in 0..20_000 {
        a.put(k, k);
    }
    let s1 = a.checkpoint(1);
    a.ck.notify_complete(1).unwrap();
    for k in 0..50 {
        a.put(k, k + 1);
    }
    let s2 = a.checkpoint(2);
    assert!(s2.files_reused > 0, "{s2:?}");
    assert!(s2.bytes_new_files < s1.bytes_new_files / 2, "{s1:?} {s2:?}");
    a.ck.notify_complete(2).unwrap();
    let mut r = restore(&storage, 2, all());
    assert_eq!(r.get(3), Some(4));
    assert_eq!(r.get(19_999), Some(19_999));
}

#[test]
fn an_unconfirmed_checkpoint_is_never_the_incremental_base() {
    let storage = Arc::new(CheckpointStorage::in_memory().unwrap());
    let mut a = fresh(&storage, all(), 3);
    for k in 0..5000 {
        a.put(k, k);
    }
    a.checkpoint(1);
    let s2 = a.checkpoint(2);
    assert_eq!(s2.files_reused, 0, "checkpoint 1 was never confirmed");
}

#[test]
fn no_object_referenced_by_a_retained_checkpoint_is_deleted() {
    let storage = Arc::new(CheckpointStorage::in_memory().unwrap());
    let mut a = fresh(&storage, all(), 2);
    for round in 0..6u64 {
        for k in 0..3000 {
            a.put(k * 7 % 5000, k + round as i64);
        }
        a.checkpoint(round + 1);
        a.ck.notify_complete(round + 1).unwrap();
        let (objects, refs) = objects_and_references(&storage);
        assert!(refs.is_subset(&objects), "round {round}");
        let r = tools::verify(&storage, None).unwrap();
        assert!(r.problems.is_empty(), "{:?}", r.problems);
        assert_eq!(a.ck.retained().len(), (round as usize + 1).min(2));
    }
}

#[test]
fn subsumed_and_aborted_checkpoints_leave_nothing_orphaned() {
    let storage = Arc::new(CheckpointStorage::in_memory().unwrap());
    let mut a = fresh(&storage, all(), 1);
    for round in 0..4u64 {
        for k in 0..3000 {
            a.put(k + round as i64 * 1000, k);
        }
        let id = round * 2 + 1;
        a.checkpoint(id);
        a.ck.notify_complete(id).unwrap();
        assert_storage_exact(&storage);
        a.checkpoint(id + 1);
        a.ck.notify_aborted(id + 1).unwrap();
        assert_storage_exact(&storage);
        assert_eq!(list_completed(&storage).unwrap().len(), 1);
    }
}

#[test]
fn two_in_flight_checkpoints_uploading_the_same_file_keep_each_others_uploads() {
    for abort_first in [false, true] {
        let storage = Arc::new(CheckpointStorage::in_memory().unwrap());
        let mut a = fresh(&storage, all(), 3);
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
        assert_eq!(tools::verify(&storage, None).unwrap().problems, vec![]);
        a.ck.notify_complete(survivor).unwrap();
        assert_storage_exact(&storage);
        let mut r = restore(&storage, survivor, all());
        assert_eq!(r.get(2999), Some(2999));
    }
}

#[test]
fn an_upload_failing_midway_leaves_no_metadata_and_no_objects() {
    let storage = Arc::new(CheckpointStorage::in_memory().unwrap());
    let mut a = fresh(&storage, all(), 3);
    for k in 0..20_000 {
        a.put(k, k);
    }
    let p = a.ck.begin(1, a.store.backend_mut()).unwrap();
    storage.fail_puts_after(Some(1));
    let err = p.run().unwrap_err();
    storage.fail_puts_after(None);
    assert!(matches!(err, CheckpointError::Storage(_)), "{err}");
    assert!(list_completed(&storage).unwrap().is_empty());
    a.ck.sweep().unwrap();
    assert!(storage.list("").unwrap().is_empty());
    // The next checkpoint works.
    a.checkpoint(2);
    a.ck.notify_complete(2).unwrap();
    assert_storage_exact(&storage);
}

#[test]
fn a_cancelled_checkpoint_fails_and_leaves_nothing() {
    let storage = Arc::new(CheckpointStorage::in_memory().unwrap());
    let mut a = fresh(&storage, all(), 3);
    for k in 0..3000 {
        a.put(k, k);
    }
    let p = a.ck.begin(1, a.store.backend_mut()).unwrap();
    a.ck.notify_aborted(1).unwrap();
    assert!(matches!(p.run(), Err(CheckpointError::Cancelled(1))));
    assert!(storage.list("").unwrap().is_empty());
}

#[test]
fn closing_while_a_checkpoint_runs_cancels_it() {
    let storage = Arc::new(CheckpointStorage::in_memory().unwrap());
    let mut a = fresh(&storage, all(), 3);
    for k in 0..3000 {
        a.put(k, k);
    }
    let p = a.ck.begin(1, a.store.backend_mut()).unwrap();
    a.ck.close();
    assert!(matches!(p.run(), Err(CheckpointError::Cancelled(1))));
    assert!(storage.list("").unwrap().is_empty());
    assert!(a.ck.begin(2, a.store.backend_mut()).is_err());
}

#[test]
fn backends_without_checkpoints_say_so() {
    let cfg = KeyedStateStore::config_for(&LongSerializer, MAX_P, all());
    let mut store = KeyedStateStore::new(
        Box::new(HeapBackend::new(cfg.clone()).unwrap()),
        LongSerializer,
    )
    .unwrap();
    let ck = Checkpointer::open(
        Arc::new(CheckpointStorage::in_memory().unwrap()),
        &cfg,
        CheckpointOptions::default(),
    )
    .unwrap();
    let err = ck.begin(1, store.backend_mut()).unwrap_err();
    assert!(err.to_string().contains("heap"), "{err}");
    assert!(err.to_string().contains("checkpoints"), "{err}");
}

#[test]
fn fifty_checkpoints_of_one_tiny_flush_each_leave_few_objects() {
    let storage = Arc::new(CheckpointStorage::in_memory().unwrap());
    let mut a = fresh(&storage, all(), 1);
    for id in 1..=50u64 {
        a.put(id as i64, id as i64);
        a.checkpoint(id);
        a.ck.notify_complete(id).unwrap();
    }
    let (objects, _) = objects_and_references(&storage);
    let meta = list_completed(&storage).unwrap();
    assert_eq!(meta.len(), 1);
    assert!(objects.len() <= 25, "{} objects", objects.len());
    let mut r = restore(&storage, 50, all());
    for id in 1..=50 {
        assert_eq!(r.get(id), Some(id));
    }
}

#[test]
fn leftovers_of_a_crashed_run_go_when_the_instance_opens_again() {
    let dir = tempfile::tempdir().unwrap();
    let storage = Arc::new(CheckpointStorage::local(dir.path()).unwrap());
    let mut a = fresh(&storage, all(), 3);
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
        Checkpointer::open(Arc::clone(&storage), &cfg, CheckpointOptions::default()).unwrap();
    assert_storage_exact(&storage);
    let mut r = restore(&storage, 1, all());
    assert_eq!(r.get(7), Some(7));
}

#[test]
fn rescale_adopts_files_and_clips_foreign_key_groups() {
    let dir = tempfile::tempdir().unwrap();
    let storage = Arc::new(CheckpointStorage::local(dir.path()).unwrap());
    let mut model = BTreeMap::new();
    let mut a = fresh(&storage, all(), 3);
    for k in 0..4000 {
        a.put(k, k * 3);
        model.insert(k, k * 3);
    }
    a.checkpoint(1);
    a.ck.notify_complete(1).unwrap();
    // 1 -> 2
    let mut two: Vec<Inst> = (0..2)
        .map(|i| {
            let range = key_group_range_for_operator(MAX_P, 2, i).unwrap();
            let cfg = KeyedStateStore::config_for(&LongSerializer, MAX_P, range);
            let (backend, info) = restore_lsm(&storage, 1, cfg.clone(), options()).unwrap();
            assert_eq!(info.adopted.len(), 1);
            let (store, counter) = store_on(backend);
            let ck = Checkpointer::open(Arc::clone(&storage), &cfg, CheckpointOptions::default())
                .unwrap();
            Inst { store, counter, ck }
        })
        .collect();
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
    // 2 -> 1
    let cfg = KeyedStateStore::config_for(&LongSerializer, MAX_P, all());
    let (backend, info) = restore_lsm(&storage, 2, cfg, options()).unwrap();
    assert_eq!(info.adopted.len() + info.copied.len(), 2);
    // The instances restored from the 1 -> 2 rescale still hold the other's key groups under their clip
    // tombstones: the base is adopted, the other copied (design/checkpoints.md, "Restore").
    assert_eq!(info.adopted.len(), 1, "{info:?}");
    let (store, counter) = store_on(backend);
    let mut one = Inst {
        store,
        counter,
        ck: a.ck,
    };
    for (k, v) in &model {
        assert_eq!(one.get(*k), Some(*v), "key {k}");
    }
    assert_eq!(one.store.num_entries().unwrap(), model.len() as u64);
}

#[test]
fn verify_names_a_missing_or_damaged_object_and_to_savepoint_restores_anywhere() {
    let dir = tempfile::tempdir().unwrap();
    let storage = Arc::new(CheckpointStorage::local(dir.path()).unwrap());
    let mut a = fresh(&storage, all(), 3);
    for k in 0..3000 {
        a.put(k, k);
    }
    a.checkpoint(1);
    a.ck.notify_complete(1).unwrap();
    let out = dir.path().join("sp");
    to_savepoint(&storage, 1, &out).unwrap();
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

    let meta = &list_completed(&storage).unwrap()[0];
    let victim = &meta.objects[0].path;
    let p = storage.local_path(victim).unwrap();
    let mut bytes = std::fs::read(&p).unwrap();
    let n = bytes.len();
    bytes[n / 2] ^= 1;
    std::fs::remove_file(&p).unwrap();
    std::fs::write(&p, &bytes).unwrap();
    let r = tools::verify(&storage, Some(1)).unwrap();
    assert!(r.problems.iter().any(|x| &x.path == victim), "{r:?}");
    std::fs::remove_file(&p).unwrap();
    let r = tools::verify(&storage, None).unwrap();
    assert!(
        r.problems
            .iter()
            .any(|x| &x.path == victim && x.detail == "missing"),
        "{r:?}"
    );
}

#[test]
fn gc_keeps_the_newest_checkpoints_and_what_they_reference() {
    let storage = Arc::new(CheckpointStorage::in_memory().unwrap());
    let mut a = fresh(&storage, all(), 10);
    for id in 1..=5u64 {
        for k in 0..2000 {
            a.put(k + id as i64 * 500, k);
        }
        a.checkpoint(id);
        a.ck.notify_complete(id).unwrap();
    }
    let dry = tools::gc(&storage, 2, true).unwrap();
    assert_eq!(dry.kept, vec![4, 5]);
    assert_eq!(list_completed(&storage).unwrap().len(), 5);
    tools::gc(&storage, 2, false).unwrap();
    assert_eq!(list_completed(&storage).unwrap().len(), 2);
    assert_storage_exact(&storage);
    assert!(tools::verify(&storage, None).unwrap().problems.is_empty());
}

#[test]
fn instances_that_never_held_foreign_key_groups_are_all_adopted_on_rescale() {
    let storage = Arc::new(CheckpointStorage::in_memory().unwrap());
    let mut two: Vec<Inst> = (0..2)
        .map(|i| {
            fresh(
                &storage,
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
    let (backend, info) = restore_lsm(&storage, 1, cfg, options()).unwrap();
    assert_eq!(info.adopted.len(), 2, "{info:?}");
    assert!(info.copied.is_empty());
    let (store, counter) = store_on(backend);
    let mut one = Inst {
        store,
        counter,
        ck: two.pop().unwrap().ck,
    };
    for k in 0..6000 {
        assert_eq!(one.get(k), Some(k * 2), "key {k}");
    }
    assert_eq!(one.store.num_entries().unwrap(), 6000);
}
