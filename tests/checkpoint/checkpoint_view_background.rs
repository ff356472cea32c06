//! The background materialization of the checkpoint view (`design/checkpoint-view.md`, "In the
//! background"): its uploads are outside every checkpoint's path, the next checkpoints reference them, a
//! sweep keeps them while they are in flight, and an abandoned or crashed one leaves only objects no metadata
//! references, which the next sweep deletes. Restores of checkpoints after an advance equal the model.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::common::*;

use keyed_state::backend::lsm::LsmBackend;
use keyed_state::checkpoint::tools::referenced_objects;
use keyed_state::checkpoint::{
    restore_lsm_temp, CheckpointStorage, CheckpointSummary, RestoreMode,
};
use keyed_state::keygroup::key_group_range_for_operator;
use keyed_state::serializer::LongSerializer;
use keyed_state::state::KeyedStateStore;
use keyed_state_lsm::Options;

fn view_options() -> Options {
    Options {
        checkpoint_view: true,
        checkpoint_view_max_pinned_ratio: 10.0,
        // Any compaction since the view's moment makes a background materialization due.
        checkpoint_view_background_pinned_ratio: 0.0,
        auto_compaction: false,
        ..options()
    }
}

fn instance(storage: &Arc<CheckpointStorage>) -> Inst {
    let cfg = KeyedStateStore::config_for(&LongSerializer, MAX_P, all());
    let b = LsmBackend::temp_with(cfg.clone(), view_options()).unwrap();
    let engine = Some(b.engine());
    inst_on(Box::new(b), engine, storage, &cfg, 2)
}

fn objects(storage: &CheckpointStorage) -> BTreeSet<String> {
    storage
        .list("shared/")
        .unwrap()
        .into_iter()
        .map(|(p, _)| p)
        .collect()
}

/// Writes `keys` keys (from `from`) with value `v` into `a` and the model.
fn write(a: &mut Inst, model: &mut BTreeMap<i64, i64>, from: i64, keys: i64, v: i64) {
    for k in from..from + keys {
        assert!(a.put(k, v));
        model.insert(k, v);
    }
}

fn confirm(a: &mut Inst, id: u64) -> CheckpointSummary {
    let s = a.checkpoint(id);
    a.ck.notify_complete(id).unwrap();
    s
}

/// Checkpoint 1, then writes, a flush and a compaction (which the view does not take): the next
/// checkpoint's synchronous part starts a background materialization.
fn to_a_due_materialization(a: &mut Inst, model: &mut BTreeMap<i64, i64>) {
    write(a, model, 0, 3000, 1);
    confirm(a, 1);
    write(a, model, 0, 300, 2);
    let engine = a.engine.clone().unwrap();
    engine.flush().unwrap();
    engine.compact_all().unwrap();
    write(a, model, 300, 50, 3);
}

fn check_restores(storage: &Arc<CheckpointStorage>, id: u64, model: &BTreeMap<i64, i64>) {
    for p in [1u32, 2] {
        for mode in [RestoreMode::NoClaim, RestoreMode::Claim] {
            let mut seen = 0u64;
            for i in 0..p {
                let range = key_group_range_for_operator(MAX_P, p, i).unwrap();
                let cfg = KeyedStateStore::config_for(&LongSerializer, MAX_P, range);
                let (b, info) = restore_lsm_temp(storage, id, cfg.clone(), view_options()).unwrap();
                let mut r = inst_on(Box::new(b), None, storage, &cfg, 2);
                r.ck.restored_from(&info.parts, range, mode).unwrap();
                for (k, v) in model {
                    if r.owns(*k) {
                        assert_eq!(r.get(*k), Some(*v), "p {p}, {mode:?}, key {k}");
                    }
                }
                seen += r.store.num_entries().unwrap();
                r.ck.close();
            }
            assert_eq!(seen, model.len() as u64, "p {p}, {mode:?}");
        }
    }
}

#[test]
fn a_background_materialization_uploads_outside_the_path_and_the_next_checkpoint_references_it() {
    let storage = Arc::new(CheckpointStorage::in_memory().unwrap());
    let mut a = instance(&storage);
    let mut model = BTreeMap::new();
    to_a_due_materialization(&mut a, &mut model);
    let second = confirm(&mut a, 2);
    assert!(!second.view_materialized, "{second:?}");
    let status = a.ck.wait_for_materialization();
    assert_eq!((status.started, status.advanced), (1, 1), "{status:?}");
    assert!(status.bytes_written > 0);
    let bytes = status
        .metrics()
        .into_iter()
        .find(|m| m.name == "keyed-state.checkpoint.materialization-bytes");
    assert_eq!(bytes.map(|m| m.value), Some(status.bytes_written));
    assert!(!a.ck.materialization_objects().is_empty());
    write(&mut a, &mut model, 400, 50, 4);
    let third = confirm(&mut a, 3);
    // The second checkpoint references the uploads too when the view advanced before its flush.
    assert!(
        second.files_from_materialization + third.files_from_materialization > 0,
        "{second:?} {third:?}"
    );
    assert!(!third.view_materialized);
    // Their paths: their flushes, not the compaction's output.
    for s in [&second, &third] {
        assert!(
            s.bytes_new_files * 4 < status.bytes_written,
            "{s:?} {status:?}"
        );
    }
    assert!(
        a.ck.materialization_objects().is_empty(),
        "a confirmed checkpoint that began after the uploads ends their protection"
    );
    a.ck.wait_for_sweeps();
    assert_eq!(
        objects(&storage),
        referenced_objects(&storage).unwrap().unwrap()
    );
    check_restores(&storage, 3, &model);
}

#[test]
fn a_sweep_while_materializing_keeps_its_objects() {
    use keyed_state::checkpoint::{CheckpointOptions, Checkpointer};
    use keyed_state::internals::FaultStore;
    let fault = FaultStore::new(Arc::new(object_store::memory::InMemory::new()));
    let storage =
        Arc::new(CheckpointStorage::from_store(Arc::new(fault.clone()), "", "fault").unwrap());
    let cfg = KeyedStateStore::config_for(&LongSerializer, MAX_P, all());
    let b = LsmBackend::temp_with(cfg.clone(), view_options()).unwrap();
    let engine = Some(b.engine());
    let (store, counter) = store_on(Box::new(b));
    // Every file its own object: the materialization uploads several.
    let ck = Checkpointer::open(
        Arc::clone(&storage),
        &cfg,
        CheckpointOptions {
            retain: 2,
            pack_threshold: 0,
            ..CheckpointOptions::default()
        },
    )
    .unwrap();
    let mut a = Inst {
        store,
        counter,
        ck,
        engine,
    };
    let mut model = BTreeMap::new();
    to_a_due_materialization(&mut a, &mut model);
    // The engine's version: the compaction's output and a flush.
    a.engine.clone().unwrap().flush().unwrap();
    // The materialization's first object is stored, the others wait until released: it is in flight
    // across the sweep, with objects on storage that no metadata references.
    fault.gather_puts_after("/m1-", 1, usize::MAX);
    confirm(&mut a, 2);
    assert!(a.ck.materialization_status().in_flight);
    // Its objects are numbered and protected before their upload, by its task: wait for the first stored.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let (protected, stored) = loop {
        let protected = a.ck.materialization_objects();
        let stored: Vec<String> = objects(&storage)
            .into_iter()
            .filter(|o| protected.contains(o))
            .collect();
        if !stored.is_empty() {
            break (protected, stored);
        }
        // (Without the protection, the sweep queued by the confirmation deletes it as it lands.)
        assert!(
            std::time::Instant::now() < deadline,
            "none of {protected:?} on storage"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    assert!(stored.len() < protected.len());
    a.ck.sweep().unwrap();
    let held = objects(&storage);
    assert!(
        stored.iter().all(|o| held.contains(o)),
        "{stored:?} {held:?}"
    );
    fault.gather_puts("no such object", 1);
    let status = a.ck.wait_for_materialization();
    assert_eq!(status.advanced, 1, "{status:?}");
    // Uploaded, referenced by no metadata yet: a sweep keeps them too.
    a.ck.sweep().unwrap();
    let held = objects(&storage);
    assert!(
        protected.iter().all(|o| held.contains(o)),
        "{protected:?} {held:?}"
    );
    write(&mut a, &mut model, 400, 50, 4);
    let third = confirm(&mut a, 3);
    assert!(third.files_from_materialization > 0, "{third:?}");
    a.ck.wait_for_sweeps();
    assert_eq!(
        objects(&storage),
        referenced_objects(&storage).unwrap().unwrap()
    );
    check_restores(&storage, 3, &model);
}

#[test]
fn an_abandoned_or_crashed_materialization_leaves_only_objects_the_next_sweep_deletes() {
    use keyed_state::internals::FaultStore;
    for crash in [false, true] {
        let fault = FaultStore::new(Arc::new(object_store::memory::InMemory::new()));
        let storage =
            Arc::new(CheckpointStorage::from_store(Arc::new(fault.clone()), "", "fault").unwrap());
        let mut a = instance(&storage);
        let mut model = BTreeMap::new();
        to_a_due_materialization(&mut a, &mut model);
        if crash {
            // Uploaded after the second checkpoint ran, never referenced; the process stops before
            // another checkpoint.
            fault.gather_puts("/m1-", usize::MAX);
            confirm(&mut a, 2);
            fault.gather_puts("no such object", 1);
            assert_eq!(a.ck.wait_for_materialization().advanced, 1);
            assert!(!a.ck.materialization_objects().is_empty());
            let held = objects(&storage);
            assert_ne!(held, referenced_objects(&storage).unwrap().unwrap());
            drop(a);
            // The next run of the instance: its open sweeps.
            let a2 = instance(&storage);
            a2.ck.wait_for_sweeps();
        } else {
            fault.gather_puts("/m1-", usize::MAX);
            confirm(&mut a, 2);
            assert!(a.ck.materialization_status().in_flight);
            a.ck.close();
            fault.gather_puts("no such object", 1);
            let status = a.ck.wait_for_materialization();
            assert_eq!((status.abandoned, status.advanced), (1, 0), "{status:?}");
            a.ck.wait_for_sweeps();
        }
        assert_eq!(
            objects(&storage),
            referenced_objects(&storage).unwrap().unwrap(),
            "crash {crash}"
        );
        check_restores(&storage, 2, &model);
    }
}

#[test]
fn a_backend_dropped_while_materializing_closes_its_engine_at_once() {
    use keyed_state::internals::FaultStore;
    let fault = FaultStore::new(Arc::new(object_store::memory::InMemory::new()));
    let storage =
        Arc::new(CheckpointStorage::from_store(Arc::new(fault.clone()), "", "fault").unwrap());
    let dir = tempfile::tempdir().unwrap();
    let cfg = KeyedStateStore::config_for(&LongSerializer, MAX_P, all());
    let b = LsmBackend::open(dir.path(), cfg.clone(), view_options()).unwrap();
    let engine = Some(b.engine());
    let mut a = inst_on(Box::new(b), engine, &storage, &cfg, 2);
    let mut model = BTreeMap::new();
    to_a_due_materialization(&mut a, &mut model);
    fault.gather_puts("/m1-", usize::MAX);
    confirm(&mut a, 2);
    assert!(a.ck.materialization_status().in_flight);
    let Inst {
        store,
        counter,
        ck,
        engine,
    } = a;
    drop((store, counter, engine));
    // The engine closed with its backend: its directory opens again while the uploads are held.
    let reopened = LsmBackend::open(dir.path(), cfg, view_options());
    fault.gather_puts("no such object", 1);
    let status = ck.wait_for_materialization();
    assert!(reopened.is_ok(), "{:?}", reopened.err());
    assert_eq!(status.advanced, 0, "{status:?}");
}

#[test]
fn a_checkpoint_begun_before_the_materializations_protection_ended_references_its_uploads_from_the_newer_base(
) {
    use keyed_state::internals::FaultStore;
    let fault = FaultStore::new(Arc::new(object_store::memory::InMemory::new()));
    let storage =
        Arc::new(CheckpointStorage::from_store(Arc::new(fault.clone()), "", "fault").unwrap());
    let mut a = instance(&storage);
    let mut model = BTreeMap::new();
    to_a_due_materialization(&mut a, &mut model);
    // The uploads end after checkpoint 2 ran: it does not reference them.
    fault.gather_puts("/m1-", usize::MAX);
    let second = confirm(&mut a, 2);
    assert_eq!(second.files_from_materialization, 0, "{second:?}");
    fault.gather_puts("no such object", 1);
    let status = a.ck.wait_for_materialization();
    assert_eq!(status.advanced, 1, "{status:?}");
    // Checkpoint 3 is the first after the uploads; 4 begins (its base checkpoint 2) before 3 is confirmed,
    // which ends the materialization's protection: 4's asynchronous part no longer finds its references.
    write(&mut a, &mut model, 400, 50, 4);
    let p3 = a.ck.begin(3, a.store.backend_mut()).unwrap();
    let third = p3.run().unwrap();
    assert!(third.files_from_materialization > 0, "{third:?}");
    write(&mut a, &mut model, 500, 50, 5);
    let p4 = a.ck.begin(4, a.store.backend_mut()).unwrap();
    a.ck.notify_complete(3).unwrap();
    assert!(a.ck.materialization_objects().is_empty());
    let fourth = p4.run().unwrap();
    a.ck.notify_complete(4).unwrap();
    // Its flush (and checkpoint 3's, which its base lacks), not the materialization's files again.
    assert!(
        fourth.bytes_written * 4 < status.bytes_written,
        "{fourth:?} {status:?}"
    );
    assert!(!fourth.view_materialized, "{fourth:?}");
    a.ck.wait_for_sweeps();
    assert_eq!(
        objects(&storage),
        referenced_objects(&storage).unwrap().unwrap()
    );
    check_restores(&storage, 4, &model);
}
