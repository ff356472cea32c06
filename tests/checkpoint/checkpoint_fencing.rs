//! Two writers into one root (`design/checkpoint-fencing.md`): the older attempt of an instance name is
//! fenced (`CheckpointError::Fenced`) and commits and deletes nothing, metadata is never overwritten
//! (`CheckpointError::AlreadyExists`), and neither writer reports a checkpoint complete whose objects are
//! gone. On every store; the interleaving at every request of a checkpoint on `FaultStore`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::common as checkpoint_common;
#[cfg(feature = "s3")]
use crate::s3 as common_s3;

use checkpoint_common::*;

use keyed_state::checkpoint::{tools, CheckpointError, CheckpointOptions, CheckpointStorage};
use keyed_state::internals::FaultStore;
use keyed_state::serializer::LongSerializer;
use keyed_state::state::KeyedStateStore;

/// Writes keys `0..n` with value `round * 1000 + k` into `inst` and `model`.
fn round(inst: &mut Inst, model: &mut BTreeMap<i64, i64>, round: i64, n: i64) {
    for k in 0..n {
        let v = round * 1000 + k;
        assert!(inst.put(k, v));
        model.insert(k, v);
    }
}

fn is_fenced(e: &keyed_state::Error) -> bool {
    matches!(
        e,
        keyed_state::Error::Checkpoint(CheckpointError::Fenced { .. })
    ) && e.kind() == keyed_state::ErrorKind::Busy
}

/// Every checkpoint in the root verifies, and checkpoint `id` restores to `model`.
fn assert_whole_and_restores(storage: &CheckpointStorage, id: u64, model: &BTreeMap<i64, i64>) {
    let r = tools::verify(storage, None).unwrap();
    assert!(r.problems.is_empty(), "{r:?}");
    let mut one = vec![restore(storage, id, all())];
    check_instances(&mut one, model);
}

/// A successor of the same instance name restored from checkpoint `id`, checkpointing into `storage`.
fn successor(storage: &Arc<CheckpointStorage>, id: u64) -> Inst {
    let cfg = KeyedStateStore::config_for(&LongSerializer, MAX_P, all());
    let (backend, _) = restored(Kind::Lsm, storage, id, cfg.clone());
    inst_on(backend, None, storage, &cfg, 2)
}

fn two_writers_of_one_instance_name_the_older_is_fenced_and_nothing_is_lost(
    storage: &Arc<CheckpointStorage>,
) {
    let mut a = fresh(storage, all(), 2);
    let mut model_a = BTreeMap::new();
    for id in 1..=2 {
        round(&mut a, &mut model_a, id as i64, 300);
        a.checkpoint(id);
        a.ck.notify_complete(id).unwrap();
    }
    round(&mut a, &mut model_a, 3, 300);
    let pending = a.ck.begin(3, a.store.backend_mut()).unwrap();
    // A second job at the same parallelism: the same default instance name, in the same root.
    let mut b = fresh(storage, all(), 2);
    assert_eq!(b.ck.instance(), a.ck.instance());
    assert!(b.ck.attempt() > a.ck.attempt());
    let mut model_b = BTreeMap::new();
    for id in 101..=103 {
        round(&mut b, &mut model_b, id as i64, 200);
        b.checkpoint(id);
        b.ck.notify_complete(id).unwrap();
    }
    let e = pending.run().unwrap_err();
    assert!(is_fenced(&e), "{e}");
    assert!(e.to_string().contains(a.ck.instance()), "{e}");
    assert!(storage.list(&format!("chk-{:020}/", 3)).unwrap().is_empty());
    assert!(is_fenced(&a.ck.sweep().unwrap_err()));
    // The abort takes effect; its sweep, in the background, is fenced and deletes nothing.
    a.ck.notify_aborted(2).unwrap();
    let status = a.ck.wait_for_sweeps();
    assert!(status.fenced && status.last_error.is_some(), "{status:?}");
    // A's confirmed checkpoint 2 and B's retained ones are whole and restore to their models.
    assert_whole_and_restores(
        storage,
        2,
        &model_a.iter().map(|(k, v)| (*k, v - 1000)).collect(),
    );
    assert_whole_and_restores(storage, 103, &model_b);
    assert_eq!(b.ck.retained(), vec![102, 103]);
}

fn a_zombie_that_commits_after_its_successor_opened_is_fenced_and_its_successor_restores(
    storage: &Arc<CheckpointStorage>,
) {
    let mut zombie = fresh(storage, all(), 2);
    let mut model = BTreeMap::new();
    round(&mut zombie, &mut model, 1, 300);
    zombie.checkpoint(1);
    zombie.ck.notify_complete(1).unwrap();
    let at_one = model.clone();
    let mut zombie_model = model.clone();
    round(&mut zombie, &mut zombie_model, 2, 300);
    let pending = zombie.ck.begin(2, zombie.store.backend_mut()).unwrap();
    // The host fails over: the successor restores checkpoint 1 and checkpoints on.
    let mut next = successor(storage, 1);
    let mut model = at_one.clone();
    round(&mut next, &mut model, 5, 200);
    next.checkpoint(5);
    next.ck.notify_complete(5).unwrap();
    // The zombie finishes its upload only now: fenced, nothing committed.
    let e = pending.run().unwrap_err();
    assert!(is_fenced(&e), "{e}");
    assert!(storage.list(&format!("chk-{:020}/", 2)).unwrap().is_empty());
    zombie.ck.notify_aborted(2).unwrap();
    let status = zombie.ck.wait_for_sweeps();
    assert!(status.fenced, "{status:?}");
    assert_whole_and_restores(storage, 5, &model);
    assert_whole_and_restores(storage, 1, &at_one);
    // The successor's next sweep leaves exactly what metadata references: the zombie's uploads are gone.
    next.ck.sweep().unwrap();
    assert_storage_exact(storage);
}

fn a_rerun_into_a_used_root_is_refused_and_overwrites_nothing(storage: &Arc<CheckpointStorage>) {
    let mut first = fresh(storage, all(), 3);
    let mut model = BTreeMap::new();
    for id in 1..=4 {
        round(&mut first, &mut model, id as i64, 200);
        first.checkpoint(id);
        first.ck.notify_complete(id).unwrap();
    }
    drop(first);
    let before: Vec<Vec<u8>> = (2..=4)
        .map(|id| {
            storage
                .get(&keyed_state::checkpoint::metadata_path(id, "kg00000-00015"))
                .unwrap()
        })
        .collect();
    let mut rerun = fresh(storage, all(), 3);
    let mut other = BTreeMap::new();
    round(&mut rerun, &mut other, 7, 100);
    // Ids at or below the root's newest of this instance name are refused at once, free or not.
    for id in [1, 3, 4] {
        let Err(e) = rerun.ck.begin(id, rerun.store.backend_mut()) else {
            panic!("checkpoint {id} begun below the root's newest");
        };
        assert_eq!(e.kind(), keyed_state::ErrorKind::InvalidInput, "{e}");
        assert!(e.to_string().contains("up to id 4"), "{e}");
    }
    // A metadata object that appears after the open (another writer's put racing the open's listing)
    // is never overwritten: the create-only put refuses.
    let planted = storage
        .get(&keyed_state::checkpoint::metadata_path(4, "kg00000-00015"))
        .unwrap();
    let five = keyed_state::checkpoint::metadata_path(5, "kg00000-00015");
    storage.put(&five, planted.clone()).unwrap();
    let e = rerun
        .ck
        .begin(5, rerun.store.backend_mut())
        .unwrap()
        .run()
        .unwrap_err();
    match &e {
        keyed_state::Error::Checkpoint(CheckpointError::AlreadyExists { id: 5, path, .. }) => {
            assert!(path.contains("chk-00000000000000000005"), "{e}")
        }
        _ => panic!("{e}"),
    }
    assert_eq!(e.kind(), keyed_state::ErrorKind::Busy);
    assert_eq!(storage.get(&five).unwrap(), planted);
    let after: Vec<Vec<u8>> = (2..=4)
        .map(|id| {
            storage
                .get(&keyed_state::checkpoint::metadata_path(id, "kg00000-00015"))
                .unwrap()
        })
        .collect();
    assert_eq!(before, after, "metadata was overwritten");
    assert_whole_and_restores(storage, 4, &model);
    // Past every id the root holds, the rerun checkpoints.
    rerun.checkpoint(6);
    rerun.ck.notify_complete(6).unwrap();
    assert_whole_and_restores(storage, 6, &other);
}

fn an_attempt_older_than_the_newest_is_fenced_at_open(storage: &Arc<CheckpointStorage>) {
    let cfg = KeyedStateStore::config_for(&LongSerializer, MAX_P, all());
    let open = |attempt| {
        keyed_state::checkpoint::Checkpointer::open(
            Arc::clone(storage),
            &cfg,
            CheckpointOptions {
                attempt: Some(attempt),
                ..CheckpointOptions::default()
            },
        )
    };
    assert_eq!(open(3).unwrap().attempt(), 3);
    for stale in [3, 2] {
        let e = open(stale).unwrap_err();
        assert!(is_fenced(&e), "{e}");
        assert!(e.to_string().contains("attempt 3"), "{e}");
    }
    assert_eq!(open(4).unwrap().attempt(), 4);
}

on_every_store!(
    two_writers_of_one_instance_name_the_older_is_fenced_and_nothing_is_lost,
    a_zombie_that_commits_after_its_successor_opened_is_fenced_and_its_successor_restores,
    a_rerun_into_a_used_root_is_refused_and_overwrites_nothing,
    an_attempt_older_than_the_newest_is_fenced_at_open,
);

/// One interleaving: the zombie's checkpoint 2 stops before its `n`-th request (counted from its begin),
/// the successor restores checkpoint 1, takes and confirms checkpoint 5, then the zombie resumes. Returns
/// whether the zombie reached request `n`, the requests it made, and whether it was fenced.
/// With `crash`, the zombie dies at request `n` instead of resuming: that request and every later one fail.
fn interleave((inner, prefix): Root, n: Option<u64>, crash: bool) -> (bool, u64, bool) {
    let fault = FaultStore::new(Arc::clone(&inner));
    let zstore = Arc::new(
        CheckpointStorage::from_store(Arc::new(fault.clone()), &prefix, "zombie").unwrap(),
    );
    let sstore = Arc::new(CheckpointStorage::from_store(inner, &prefix, "successor").unwrap());
    let mut zombie = fresh(&zstore, all(), 2);
    let mut model = BTreeMap::new();
    round(&mut zombie, &mut model, 1, 300);
    zombie.checkpoint(1);
    zombie.ck.notify_complete(1).unwrap();
    zombie.ck.wait_for_sweeps();
    let at_one = model.clone();
    let mut zombie_model = model.clone();
    round(&mut zombie, &mut zombie_model, 2, 400);
    let start = fault.requests();
    let gate = n.map(|n| fault.pause_at(start + n));
    let pending = zombie.ck.begin(2, zombie.store.backend_mut()).unwrap();
    let ck = zombie.ck.clone();
    let task = std::thread::spawn(move || {
        let r = pending.run();
        let confirmed = r.and_then(|_| ck.notify_complete(2));
        // The sweep the confirmation queued counts among the zombie's requests.
        ck.wait_for_sweeps();
        (confirmed, ck)
    });
    let mut reached = false;
    if let Some((arrived, _)) = &gate {
        while !task.is_finished() {
            if arrived.recv_timeout(Duration::from_millis(20)).is_ok() {
                reached = true;
                break;
            }
        }
    }
    let mut model = at_one.clone();
    let mut next = None;
    if reached {
        let mut s = successor(&sstore, 1);
        round(&mut s, &mut model, 5, 200);
        s.checkpoint(5);
        s.ck.notify_complete(5).unwrap();
        next = Some(s);
    }
    if crash {
        if let Some(n) = n {
            fault.fail_from(Some(start + n));
        }
    }
    drop(gate);
    let (confirmed, _ck) = task.join().unwrap();
    fault.fail_from(None);
    let requests = fault.requests() - start;
    let r = tools::verify(&sstore, None).unwrap();
    assert!(r.problems.is_empty(), "request {n:?}: {r:?}");
    let fenced = match confirmed {
        // A zombie that reports success has a whole checkpoint 2 holding its state.
        Ok(()) => {
            assert_whole_and_restores(&sstore, 2, &zombie_model);
            false
        }
        Err(e) => {
            assert!(reached && (crash || is_fenced(&e)), "request {n:?}: {e}");
            // Whatever the zombie left of checkpoint 2 is withdrawn or whole (verify above).
            true
        }
    };
    if let Some(s) = next {
        assert_whole_and_restores(&sstore, 5, &model);
        s.ck.sweep().unwrap();
        assert_whole_and_restores(&sstore, 5, &model);
    }
    (reached, requests, fenced)
}

/// A store and the prefix of a fresh root in it.
type Root = (Arc<dyn object_store::ObjectStore>, String);

fn interleave_at_every_request(store: &str, make: impl Fn() -> Root) {
    let (_, count, _) = interleave(make(), None, false);
    assert!(count >= 5, "{count} requests");
    let (mut reached_all, mut fenced) = (0u64, 0u64);
    for n in 1..=count {
        let (reached, _, was_fenced) = interleave(make(), Some(n), false);
        reached_all += u64::from(reached);
        fenced += u64::from(was_fenced);
        // The same interleaving, with the zombie dying where it stopped.
        let (reached, _, _) = interleave(make(), Some(n), true);
        assert!(reached);
    }
    assert_eq!(
        reached_all, count,
        "interleavings that reached their request"
    );
    assert!(fenced > 0, "no interleaving fenced the zombie");
    println!(
        "campaign fencing:interleaved_attempts store={store} interleavings={count} zombie_fenced={fenced} \
         zombie_completed={} zombie_crashed={count} losses=0",
        count - fenced
    );
}

#[test]
fn a_successor_interleaved_at_every_request_of_a_zombie_checkpoint_loses_nothing_in_memory() {
    interleave_at_every_request("memory", || {
        (
            Arc::new(object_store::memory::InMemory::new()),
            String::new(),
        )
    });
}

#[test]
fn a_successor_interleaved_at_every_request_of_a_zombie_checkpoint_loses_nothing_on_a_local_root() {
    let dirs: std::cell::RefCell<Vec<tempfile::TempDir>> = Default::default();
    interleave_at_every_request("local", || {
        let d = tempfile::tempdir().unwrap();
        let fs = object_store::local::LocalFileSystem::new_with_prefix(d.path())
            .unwrap()
            .with_fsync(true);
        dirs.borrow_mut().push(d);
        (Arc::new(fs), String::new())
    });
}

#[cfg(feature = "s3")]
#[test]
fn a_successor_interleaved_at_every_request_of_a_zombie_checkpoint_loses_nothing_on_s3() {
    let Some(endpoint) = common_s3::endpoint("interleaving on S3") else {
        return;
    };
    let mut b = object_store::aws::AmazonS3Builder::new().with_bucket_name(common_s3::bucket());
    for (k, v) in common_s3::settings(&endpoint) {
        b = b.with_config(k.parse().unwrap(), v);
    }
    let store: Arc<dyn object_store::ObjectStore> = Arc::new(b.build().unwrap());
    let n = std::cell::Cell::new(0u32);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    interleave_at_every_request("s3", || {
        n.set(n.get() + 1);
        (
            Arc::clone(&store),
            format!("interleave-{nanos}-{}", n.get()),
        )
    });
}
