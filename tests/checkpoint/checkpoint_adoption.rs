//! Checkpoints of an LSM backend with the read-modify-write cache: the engine adopts a capture's files of
//! the cache's dirty entries as its own L0 files (`design/rmw-cache.md`, "Adoption of a capture's files"),
//! so a change is uploaded once; when the backend wrote those entries into the engine first (a write-back
//! between the two parts), the capture keeps its files and nothing is lost.

use std::collections::BTreeMap;
use std::sync::Arc;

use keyed_state::backend::lsm::LsmBackend;
use keyed_state::checkpoint::CheckpointStorage;
use keyed_state::state::KeyedStateStore;

use crate::common::*;

/// An instance whose LSM backend has a cache of `cache` bytes that takes every key in at once.
fn cached(storage: &Arc<CheckpointStorage>, cache: usize) -> Inst {
    cached_with(storage, cache, options())
}

/// [`cached`] on engine options `opts`.
fn cached_with(
    storage: &Arc<CheckpointStorage>,
    cache: usize,
    opts: keyed_state_lsm::Options,
) -> Inst {
    let cfg = KeyedStateStore::config_for(&keyed_state::serializer::LongSerializer, MAX_P, all());
    let mut b = LsmBackend::temp_with(cfg.clone(), opts)
        .and_then(|b| b.with_rmw_cache(cache))
        .unwrap();
    b.set_rmw_cache_admission(true).unwrap();
    let engine = Some(b.engine());
    inst_on(Box::new(b), engine, storage, &cfg, 3)
}

fn check(inst: &mut Inst, model: &BTreeMap<i64, i64>, keys: std::ops::Range<i64>, what: &str) {
    for k in keys {
        assert_eq!(inst.get(k), model.get(&k).copied(), "{what}: key {k}");
    }
}

fn put(inst: &mut Inst, model: &mut BTreeMap<i64, i64>, k: i64, v: i64) {
    assert!(inst.put(k, v));
    model.insert(k, v);
}

#[test]
fn a_change_is_uploaded_once_with_the_cache() {
    let storage = Arc::new(CheckpointStorage::in_memory().unwrap());
    let mut a = cached(&storage, 64 << 20);
    let mut model = BTreeMap::new();
    for k in 0..2000 {
        put(&mut a, &mut model, k, k);
    }
    let s1 = a.checkpoint(1);
    assert!(s1.files_new > 0, "{s1:?}");
    a.ck.notify_complete(1).unwrap();
    // Nothing changed: the dirty entries checkpoint 1 carried are the engine's files now, reused.
    let s2 = a.checkpoint(2);
    assert_eq!((s2.files_new, s2.bytes_new_files), (0, 0), "{s2:?}");
    a.ck.notify_complete(2).unwrap();
    for k in 0..20 {
        put(&mut a, &mut model, k, -k);
    }
    let s3 = a.checkpoint(3);
    assert!(s3.files_new > 0, "{s3:?}");
    assert!(
        s3.bytes_new_files * 4 < s1.bytes_new_files,
        "only the 20 changed entries are new: {s1:?} {s3:?}"
    );
    a.ck.notify_complete(3).unwrap();
    let s4 = a.checkpoint(4);
    assert_eq!((s4.files_new, s4.bytes_new_files), (0, 0), "{s4:?}");
    a.ck.notify_complete(4).unwrap();
    check(&mut a, &model, 0..2001, "live");
    let mut r = restore(&storage, 4, all());
    check(&mut r, &model, 0..2001, "restored");
}

#[test]
fn reads_after_adoption_see_the_cache_and_the_engine_agree() {
    let storage = Arc::new(CheckpointStorage::in_memory().unwrap());
    // Room for about 3,000 entries: the later writes evict the adopted ones.
    let mut a = cached(&storage, 300 << 10);
    let engine = a.engine.take().unwrap();
    let mut model = BTreeMap::new();
    for k in 0..1000 {
        put(&mut a, &mut model, k, k);
    }
    a.checkpoint(1);
    a.ck.notify_complete(1).unwrap();
    check(&mut a, &model, 0..1001, "after adoption");
    // Rewrites of adopted entries, deletes through the cache, then enough new keys to evict everything.
    for k in 0..100 {
        put(&mut a, &mut model, k, k + 7);
    }
    for k in 100..150 {
        a.store.set_current_key(&k).unwrap();
        a.store.value(&a.counter).unwrap().clear().unwrap();
        model.remove(&k);
    }
    for k in 10_000..20_000 {
        put(&mut a, &mut model, k, k);
    }
    engine.flush().unwrap();
    engine.compact_all().unwrap();
    check(&mut a, &model, 0..1001, "after evictions and compaction");
    check(
        &mut a,
        &model,
        10_000..20_000,
        "after evictions and compaction",
    );
    a.checkpoint(2);
    a.ck.notify_complete(2).unwrap();
    let mut r = restore(&storage, 2, all());
    check(&mut r, &model, 0..1001, "restored");
    check(&mut r, &model, 10_000..20_000, "restored");
}

#[test]
fn a_restore_after_adoption_and_a_crash_reads_each_checkpoints_state() {
    let storage = Arc::new(CheckpointStorage::in_memory().unwrap());
    let mut a = cached(&storage, 64 << 20);
    let mut model = BTreeMap::new();
    for k in 0..3000 {
        put(&mut a, &mut model, k, k);
    }
    a.checkpoint(1);
    a.ck.notify_complete(1).unwrap();
    let at1 = model.clone();
    for k in (0..3000).step_by(7) {
        put(&mut a, &mut model, k, -k);
    }
    // Checkpoint 2 reuses checkpoint 1's adopted files and adds its own.
    let s2 = a.checkpoint(2);
    assert!(s2.files_reused > 0, "{s2:?}");
    a.ck.notify_complete(2).unwrap();
    let at2 = model.clone();
    for k in 0..3000 {
        put(&mut a, &mut model, k, 1);
    }
    // A crash: the instance goes with its dirty cache and its engine.
    drop(a);
    let mut r2 = restore(&storage, 2, all());
    check(&mut r2, &at2, 0..3001, "checkpoint 2");
    let mut r1 = restore(&storage, 1, all());
    check(&mut r1, &at1, 0..3001, "checkpoint 1");
}

#[test]
fn evictions_between_the_two_parts_go_around_the_pending_layer_and_the_capture_is_adopted() {
    let storage = Arc::new(CheckpointStorage::in_memory().unwrap());
    // A memtable that holds every evicted write, so that no flush or compaction rewrites checkpoint 1's
    // file before checkpoint 2.
    let opts = keyed_state_lsm::Options {
        memtable_size: 64 << 20,
        ..options()
    };
    let mut a = cached_with(&storage, 256 << 10, opts);
    let mut model = BTreeMap::new();
    for k in 0..800 {
        put(&mut a, &mut model, k, k);
    }
    let p = a.ck.begin(1, a.store.backend_mut()).unwrap();
    let at1 = model.clone();
    // Rewrites of the pending layer's keys, then enough new keys to evict: the evictions take victims in
    // no pending layer and write them into the engine, the layer stays pending.
    for k in 0..800 {
        put(&mut a, &mut model, k, k + 1);
    }
    for k in 5000..10_000 {
        put(&mut a, &mut model, k, k);
    }
    let s1 = std::thread::spawn(move || p.run()).join().unwrap().unwrap();
    assert!(s1.files_new > 0);
    a.ck.notify_complete(1).unwrap();
    check(&mut a, &model, 0..801, "live");
    check(&mut a, &model, 5000..10_000, "live");
    let mut r = restore(&storage, 1, all());
    check(&mut r, &at1, 0..801, "checkpoint 1");
    check(&mut r, &at1, 5000..5100, "checkpoint 1");
    // Checkpoint 1's file is the engine's: checkpoint 2 reuses it.
    let s2 = a.checkpoint(2);
    assert!(s2.files_reused >= s1.files_new, "{s1:?} {s2:?}");
    a.ck.notify_complete(2).unwrap();
    let mut r = restore(&storage, 2, all());
    check(&mut r, &model, 0..801, "checkpoint 2");
    check(&mut r, &model, 5000..10_000, "checkpoint 2");
}

#[test]
fn a_write_back_between_the_two_parts_keeps_the_capture_exact_and_its_file_its_own() {
    let storage = Arc::new(CheckpointStorage::in_memory().unwrap());
    let mut a = cached(&storage, 64 << 20);
    let mut model = BTreeMap::new();
    for k in 0..800 {
        put(&mut a, &mut model, k, k);
    }
    let p = a.ck.begin(1, a.store.backend_mut()).unwrap();
    let at1 = model.clone();
    for k in 0..400 {
        put(&mut a, &mut model, k, k + 1);
    }
    // The pending layer goes into the engine before the asynchronous part: the capture is not adopted.
    a.store.backend_mut().write_back().unwrap();
    let s1 = std::thread::spawn(move || p.run()).join().unwrap().unwrap();
    assert!(s1.files_new > 0);
    a.ck.notify_complete(1).unwrap();
    check(&mut a, &model, 0..801, "live");
    let mut r = restore(&storage, 1, all());
    check(&mut r, &at1, 0..801, "checkpoint 1");
    let s2 = a.checkpoint(2);
    assert_eq!(
        s2.files_reused, 0,
        "checkpoint 1 was all the capture's own file: {s1:?} {s2:?}"
    );
    a.ck.notify_complete(2).unwrap();
    let mut r = restore(&storage, 2, all());
    check(&mut r, &model, 0..801, "checkpoint 2");
}

#[test]
fn flushes_compactions_and_evictions_racing_the_asynchronous_part_keep_every_state() {
    let storage = Arc::new(CheckpointStorage::in_memory().unwrap());
    // Small enough that some rounds evict while the asynchronous part runs, and some do not.
    let mut a = cached(&storage, 512 << 10);
    let engine = a.engine.take().unwrap();
    let mut model = BTreeMap::new();
    let mut taken = Vec::new();
    for round in 0..12i64 {
        for k in 0..600 {
            put(
                &mut a,
                &mut model,
                (k * 7 + round * 13) % 4000,
                round * 10_000 + k,
            );
        }
        let id = round as u64 + 1;
        let p = a.ck.begin(id, a.store.backend_mut()).unwrap();
        taken.push((id, model.clone()));
        let run = std::thread::spawn(move || p.run());
        // Meanwhile: writes (some evicting), engine flushes and compactions.
        let n = if round % 3 == 0 { 3000 } else { 200 };
        for k in 0..n {
            put(
                &mut a,
                &mut model,
                (k * 11 + round) % 6000,
                -(round * 10_000 + k),
            );
        }
        engine.flush().unwrap();
        if round % 2 == 0 {
            engine.compact_all().unwrap();
        }
        run.join().unwrap().unwrap();
        a.ck.notify_complete(id).unwrap();
        check(&mut a, &model, 0..6001, "live");
    }
    // The retained checkpoints each restore their own moment.
    for (id, at) in taken.iter().rev().take(3) {
        let mut r = restore(&storage, *id, all());
        check(&mut r, at, 0..6001, &format!("checkpoint {id}"));
    }
}

/// An instance whose LSM backend has a cache of `cache` bytes (0: none) admitting as by default, on
/// engine options without automatic compaction (L0's runs add up).
fn uncompacted(storage: &Arc<CheckpointStorage>, cache: usize) -> Inst {
    let cfg = KeyedStateStore::config_for(&keyed_state::serializer::LongSerializer, MAX_P, all());
    let opts = keyed_state_lsm::Options {
        auto_compaction: false,
        ..options()
    };
    let b = LsmBackend::temp_with(cfg.clone(), opts)
        .and_then(|b| b.with_rmw_cache(cache))
        .unwrap();
    let engine = Some(b.engine());
    inst_on(Box::new(b), engine, storage, &cfg, 3)
}

#[test]
fn a_checkpoint_with_the_cache_adds_one_l0_run_as_one_without_it() {
    let (on_storage, off_storage) = (
        Arc::new(CheckpointStorage::in_memory().unwrap()),
        Arc::new(CheckpointStorage::in_memory().unwrap()),
    );
    // Room for about 3,000 entries: the first keys stay in the cache, later new keys go to the engine.
    let mut on = uncompacted(&on_storage, 300 << 10);
    let mut off = uncompacted(&off_storage, 0);
    let mut model = BTreeMap::new();
    let mut write = |on: &mut Inst, off: &mut Inst, k: i64, v: i64| {
        put(on, &mut model, k, v);
        assert!(off.put(k, v));
    };
    for k in 0..5000 {
        write(&mut on, &mut off, k, k);
    }
    let runs = |i: &Inst| i.engine.as_ref().unwrap().stats().l0_sorted_runs;
    let l0_files = |i: &Inst| i.engine.as_ref().unwrap().stats().level_files[0];
    // The load's flushes differ (the cache holds a part of it); from the first checkpoint on, L0 grows alike.
    let mut at_first = (0, 0, 0);
    for id in 1..=6u64 {
        if id > 1 {
            // Cached keys (changed in the cache, carried by the capture's file) and new keys (written to
            // the engine, carried by its flush).
            for k in 0..50 {
                write(&mut on, &mut off, k, k * 10 + id as i64);
            }
            for k in 0..50 {
                let k = 10_000 * id as i64 + k;
                write(&mut on, &mut off, k, k);
            }
        }
        on.checkpoint(id);
        off.checkpoint(id);
        on.ck.notify_complete(id).unwrap();
        off.ck.notify_complete(id).unwrap();
        if id == 1 {
            at_first = (runs(&on), runs(&off), l0_files(&on));
            continue;
        }
        let added = id as usize - 1;
        assert_eq!(runs(&off) - at_first.1, added, "checkpoint {id}");
        assert_eq!(runs(&on) - at_first.0, added, "checkpoint {id}");
        // Both kinds of file are there: the engine's flush and the adopted file, one run.
        assert_eq!(l0_files(&on) - at_first.2, 2 * added, "checkpoint {id}");
    }
    check(&mut on, &model, 0..100, "live");
    let mut r = restore(&on_storage, 6, all());
    check(&mut r, &model, 0..5000, "restored");
    check(&mut r, &model, 60_000..60_050, "restored");
}
