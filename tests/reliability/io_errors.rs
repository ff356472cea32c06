//! I/O errors are survived: a full disk during a flush or a compaction, failed fsyncs of the WAL, an SST and
//! the manifest, a short WAL write, a failed savepoint and failed checkpoints — each over the
//! fault-injecting storage ([`FaultFs`]) or object store ([`FaultStore`]). Writes stop with a typed error
//! naming the file, reads keep working, a failed file is never written to again, and `Db::resume` (or
//! reopening after a crash) continues with everything acknowledged.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use keyed_state::backend::heap::HeapBackend;
use keyed_state::backend::lsm::LsmBackend;
use keyed_state::checkpoint::list_completed;
use keyed_state::checkpoint::tools::verify;
use keyed_state::checkpoint::{
    restore_lsm_temp, CheckpointOptions, CheckpointStorage, Checkpointer,
};
use keyed_state::internals::FaultStore;
use keyed_state::keygroup::KeyGroupRange;
use keyed_state::savepoint::{write_savepoint_on, SavepointReader, WriteOptions};
use keyed_state::serializer::LongSerializer;
use keyed_state::state::{KeyedStateStore, ValueStateDescriptor};
use keyed_state_lsm::storage::fault::{Effect, Fault, FaultFs, Op};
use keyed_state_lsm::storage::{Storage, StorageHandle};
use keyed_state_lsm::LsmError;
use keyed_state_lsm::{Db, Options, ReadOptions};

fn opts(fs: &FaultFs, wal: bool) -> Options {
    Options {
        memtable_size: 1 << 20,
        wal,
        wal_sync: wal,
        auto_compaction: false,
        background_nice: 0,
        storage: StorageHandle::from(Arc::new(fs.clone())),
        ..Options::default()
    }
}

fn dir() -> PathBuf {
    PathBuf::from("/db")
}

fn key(i: u32) -> Vec<u8> {
    format!("key{i:06}").into_bytes()
}

fn val(i: u32) -> Vec<u8> {
    format!("value-{i}-{}", "v".repeat(40)).into_bytes()
}

fn put_range(db: &Db, r: std::ops::Range<u32>) {
    for i in r {
        db.put(&key(i), &val(i)).unwrap();
    }
}

fn contents(db: &Db) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut it = db.iter(ReadOptions::default());
    it.seek_to_first();
    let mut out = BTreeMap::new();
    while it.valid() {
        out.insert(it.key().to_vec(), it.value().to_vec());
        it.next();
    }
    it.take_status().unwrap();
    out
}

fn expect(r: std::ops::Range<u32>) -> BTreeMap<Vec<u8>, Vec<u8>> {
    r.map(|i| (key(i), val(i))).collect()
}

/// The error names a file whose name contains `part`, and it stops writes.
fn assert_names(e: &LsmError, part: &str) {
    let text = e.to_string();
    assert!(
        text.contains(part),
        "error does not name a {part} file: {text}"
    );
}

fn files_with(fs: &FaultFs, part: &str) -> Vec<PathBuf> {
    fs.listing()
        .into_iter()
        .map(|(p, _)| p)
        .filter(|p| p.to_string_lossy().contains(part))
        .collect()
}

/// Crash (drop every unsynced byte), reopen and return the contents.
fn crash_and_reopen(fs: &FaultFs, db: Db, wal: bool) -> BTreeMap<Vec<u8>, Vec<u8>> {
    fs.crash();
    drop(db);
    fs.reboot();
    let db = Db::open(dir(), opts(fs, wal)).unwrap();
    let c = contents(&db);
    db.close().unwrap();
    c
}

#[test]
fn a_full_disk_during_a_flush_stops_writes_naming_the_file_keeps_reads_and_resume_continues() {
    let fs = FaultFs::new();
    let db = Db::open(dir(), opts(&fs, false)).unwrap();
    put_range(&db, 0..500);
    db.flush().unwrap();
    put_range(&db, 500..1000);
    fs.set_capacity(Some(fs.used_bytes() + 1024));
    let e = db.flush().unwrap_err();
    assert_names(&e, ".sst");
    let e = db.put(&key(5000), b"x").unwrap_err();
    assert!(matches!(e, LsmError::Background(_)), "{e}");
    assert_names(&e, ".sst");
    // Reads: the flushed file and the memtable that could not be flushed.
    assert_eq!(db.get(&key(10)).unwrap().as_deref(), Some(&val(10)[..]));
    assert_eq!(db.get(&key(900)).unwrap().as_deref(), Some(&val(900)[..]));
    assert_eq!(contents(&db), expect(0..1000));
    // Still full: resume fails again, writes stay stopped.
    assert!(db.resume().is_err());
    assert!(db.put(&key(5000), b"x").is_err());
    fs.set_capacity(None);
    db.resume().unwrap();
    put_range(&db, 1000..1100);
    db.flush().unwrap();
    assert_eq!(crash_and_reopen(&fs, db, false), expect(0..1100));
}

#[test]
fn a_full_disk_during_a_compaction_stops_writes_keeps_reads_and_resume_continues() {
    let fs = FaultFs::new();
    let db = Db::open(dir(), opts(&fs, true)).unwrap();
    for r in 0..3 {
        put_range(&db, r * 300..(r + 1) * 300);
        db.flush().unwrap();
    }
    fs.inject(Fault::always(Op::Write, ".sst", Effect::NoSpace));
    let e = db.compact_all().unwrap_err();
    assert_names(&e, ".sst");
    assert!(matches!(
        db.put(&key(9999), b"x"),
        Err(LsmError::Background(_))
    ));
    assert_eq!(contents(&db), expect(0..900));
    fs.clear_faults();
    db.resume().unwrap();
    db.compact_all().unwrap();
    put_range(&db, 900..950);
    assert_eq!(db.stats().level_files.iter().sum::<usize>(), 1);
    assert_eq!(crash_and_reopen(&fs, db, true), expect(0..950));
}

#[test]
fn after_a_failed_wal_fsync_writes_are_refused_until_resume_rolls_to_a_new_log() {
    let fs = FaultFs::new();
    let db = Db::open(dir(), opts(&fs, true)).unwrap();
    put_range(&db, 0..100);
    let logs = files_with(&fs, ".log");
    assert_eq!(logs.len(), 1);
    let log = logs[0].clone();
    fs.inject(Fault::once(Op::Sync, ".log", Effect::Eio));
    let e = db.put(&key(100), &val(100)).unwrap_err();
    assert_names(&e, ".log");
    let len = fs.peek(&log).unwrap().len();
    // Refused, and nothing more goes into the log whose fsync failed.
    let e = db.put(&key(101), &val(101)).unwrap_err();
    assert!(matches!(e, LsmError::Background(_)), "{e}");
    assert_eq!(fs.peek(&log).unwrap().len(), len);
    assert_eq!(db.get(&key(99)).unwrap().as_deref(), Some(&val(99)[..]));
    db.resume().unwrap();
    // Writes go on into a new log; the failed one gets nothing more (the flush retires it: it is deleted
    // just after the flush is installed, and at the next open in any case).
    put_range(&db, 200..300);
    let fresh: Vec<PathBuf> = files_with(&fs, ".log")
        .into_iter()
        .filter(|p| *p != log)
        .collect();
    assert_eq!(fresh.len(), 1);
    assert!(fs.peek(&log).is_none_or(|b| b.len() == len));
    let mut want = expect(0..100);
    want.extend(expect(200..300));
    assert_eq!(crash_and_reopen(&fs, db, true), want);
}

#[test]
fn a_failed_sync_of_the_closed_log_at_a_memtable_switch_stops_writes_until_resume() {
    let fs = FaultFs::new();
    // Per-write sync off: the closed log's sync at the switch is the only fsync of its records.
    let db = Db::open(
        dir(),
        Options {
            wal_sync: false,
            ..opts(&fs, true)
        },
    )
    .unwrap();
    put_range(&db, 0..100);
    fs.inject(Fault::once(Op::Sync, ".log", Effect::Eio));
    // Writes fill the memtable until a writer's switch syncs the closed log and fails.
    let big = vec![7u8; 4096];
    let mut written = 0u32;
    let e = loop {
        match db.put(&key(1000 + written), &big) {
            Ok(()) => written += 1,
            Err(e) => break e,
        }
        assert!(written < 10_000, "no memtable switch");
    };
    assert_names(&e, ".log");
    // Recorded as the error that stops writes (not retried on the same log), so resume can clear it.
    let e = db.put(&key(100), &val(100)).unwrap_err();
    assert!(matches!(e, LsmError::Background(_)), "{e}");
    assert_eq!(db.get(&key(99)).unwrap().as_deref(), Some(&val(99)[..]));
    db.resume().unwrap();
    put_range(&db, 200..300);
    let mut want = expect(0..100);
    want.extend((0..written).map(|i| (key(1000 + i), big.clone())));
    want.extend(expect(200..300));
    assert_eq!(contents(&db), want);
    db.flush().unwrap();
    assert_eq!(crash_and_reopen(&fs, db, true), want);
}

#[test]
fn after_a_short_wal_write_the_log_is_not_appended_to_and_a_crash_keeps_every_acknowledged_write() {
    let fs = FaultFs::new();
    let db = Db::open(dir(), opts(&fs, true)).unwrap();
    put_range(&db, 0..50);
    fs.inject(Fault::once(Op::Write, ".log", Effect::ShortWrite));
    assert_names(&db.put(&key(50), &val(50)).unwrap_err(), ".log");
    db.resume().unwrap();
    put_range(&db, 60..70);
    let mut want = expect(0..50);
    want.extend(expect(60..70));
    assert_eq!(crash_and_reopen(&fs, db, true), want);
}

#[test]
fn after_a_failed_sst_fsync_the_file_is_abandoned_and_the_flush_retried_under_a_new_number() {
    let fs = FaultFs::new();
    let db = Db::open(dir(), opts(&fs, false)).unwrap();
    put_range(&db, 0..300);
    let before = files_with(&fs, ".sst");
    fs.inject(Fault::once(Op::Sync, ".sst", Effect::Eio));
    assert_names(&db.flush().unwrap_err(), ".sst");
    assert_eq!(
        files_with(&fs, ".sst"),
        before,
        "the failed file was removed"
    );
    db.resume().unwrap();
    let after = files_with(&fs, ".sst");
    assert_eq!(after.len(), 1);
    assert_eq!(crash_and_reopen(&fs, db, false), expect(0..300));
}

#[test]
fn a_failed_manifest_fsync_stops_writes_and_resume_rolls_to_a_fresh_manifest() {
    let fs = FaultFs::new();
    let db = Db::open(dir(), opts(&fs, true)).unwrap();
    put_range(&db, 0..200);
    let manifests = files_with(&fs, "MANIFEST-");
    assert_eq!(manifests.len(), 1);
    fs.inject(Fault::once(Op::Sync, "MANIFEST-", Effect::Eio));
    assert_names(&db.flush().unwrap_err(), "MANIFEST-");
    assert!(matches!(db.put(b"x", b"y"), Err(LsmError::Background(_))));
    assert_eq!(contents(&db), expect(0..200));
    db.resume().unwrap();
    let now = files_with(&fs, "MANIFEST-");
    assert_eq!(now.len(), 1);
    assert_ne!(now, manifests, "resume wrote a fresh manifest");
    put_range(&db, 200..250);
    assert_eq!(crash_and_reopen(&fs, db, true), expect(0..250));
}

#[test]
fn a_failed_lsm_checkpoint_leaves_no_current_and_the_previous_one_opens() {
    let fs = FaultFs::new();
    let db = Db::open(dir(), opts(&fs, false)).unwrap();
    put_range(&db, 0..100);
    db.checkpoint("/ck1").unwrap();
    put_range(&db, 100..200);
    fs.inject(Fault::once(Op::Rename, "/ck2/CURRENT", Effect::Eio));
    assert!(db.checkpoint("/ck2").is_err());
    assert!(!fs.exists(Path::new("/ck2/CURRENT")));
    drop(db);
    let c = Db::open("/ck1", opts(&fs, false)).unwrap();
    assert_eq!(contents(&c), expect(0..100));
}

fn heap_store() -> KeyedStateStore<LongSerializer> {
    let cfg = KeyedStateStore::config_for(&LongSerializer, 16, KeyGroupRange::new(0, 15));
    KeyedStateStore::new(Box::new(HeapBackend::new(cfg).unwrap()), LongSerializer).unwrap()
}

#[test]
fn a_failed_savepoint_leaves_the_previous_one_intact_and_no_file_that_looks_complete() {
    let fs = FaultFs::new();
    fs.create_dir_all(Path::new("/sp")).unwrap();
    let path = Path::new("/sp/savepoint");
    let mut store = heap_store();
    let st = store
        .register_value(ValueStateDescriptor::new("v", LongSerializer))
        .unwrap();
    for k in 0..200i64 {
        store.set_current_key(&k).unwrap();
        store.value(&st).unwrap().update(&k).unwrap();
    }
    let snap = store.snapshot().unwrap();
    write_savepoint_on(&fs, path, &*snap, &WriteOptions::default()).unwrap();
    let first = fs.peek(path).unwrap();
    for k in 0..200i64 {
        store.set_current_key(&k).unwrap();
        store.value(&st).unwrap().update(&(k + 1)).unwrap();
    }
    let snap = store.snapshot().unwrap();
    for fault in [
        Fault::once(Op::Write, "/sp/", Effect::NoSpace),
        Fault::once(Op::Sync, "/sp/", Effect::Eio),
        Fault::once(Op::Rename, "/sp/", Effect::Eio),
    ] {
        fs.inject(fault.clone());
        let e = write_savepoint_on(&fs, path, &*snap, &WriteOptions::default()).unwrap_err();
        assert!(e.to_string().contains("/sp/"), "{fault:?}: {e}");
        if matches!(fault.effect, Effect::NoSpace) {
            // A full disk names the savepoint being written, not only its temporary file.
            assert!(e.to_string().contains("/sp/savepoint:"), "{e}");
        }
        assert_eq!(fs.peek(path).unwrap(), first, "{fault:?}");
        assert_eq!(
            fs.list(Path::new("/sp")).unwrap(),
            vec!["savepoint".to_string()],
            "{fault:?} left a file behind"
        );
        SavepointReader::from_bytes(first.clone())
            .unwrap()
            .verify()
            .unwrap();
    }
    write_savepoint_on(&fs, path, &*snap, &WriteOptions::default()).unwrap();
    assert_ne!(fs.peek(path).unwrap(), first);
}

fn lsm_instance(
    storage: &Arc<CheckpointStorage>,
) -> (
    KeyedStateStore<LongSerializer>,
    keyed_state::state::ValueState<LongSerializer>,
    Checkpointer,
) {
    let cfg = KeyedStateStore::config_for(&LongSerializer, 16, KeyGroupRange::new(0, 15));
    let backend = LsmBackend::temp_with(cfg.clone(), LsmBackend::small_options()).unwrap();
    let mut store = KeyedStateStore::new(Box::new(backend), LongSerializer).unwrap();
    let v = store
        .register_value(ValueStateDescriptor::new("v", LongSerializer))
        .unwrap();
    let ck = Checkpointer::open(Arc::clone(storage), &cfg, CheckpointOptions::default()).unwrap();
    (store, v, ck)
}

#[test]
fn a_checkpoint_failing_at_any_object_store_request_leaves_the_previous_one_complete_and_restorable(
) {
    // How many requests a second checkpoint makes, from a run without faults.
    let count = {
        let fault = FaultStore::new(Arc::new(object_store::memory::InMemory::new()));
        let storage =
            Arc::new(CheckpointStorage::from_store(Arc::new(fault.clone()), "", "fault").unwrap());
        let (mut store, v, ck) = lsm_instance(&storage);
        for k in 0..300i64 {
            store.set_current_key(&k).unwrap();
            store.value(&v).unwrap().update(&k).unwrap();
        }
        ck.begin(1, store.backend_mut()).unwrap().run().unwrap();
        ck.notify_complete(1).unwrap();
        for k in 0..300i64 {
            store.set_current_key(&k).unwrap();
            store.value(&v).unwrap().update(&(k * 2)).unwrap();
        }
        let start = fault.requests();
        ck.begin(2, store.backend_mut()).unwrap().run().unwrap();
        ck.notify_complete(2).unwrap();
        fault.requests() - start
    };
    assert!(count >= 2, "{count} requests");
    let (mut failed, mut incomplete) = (0, 0);
    for n in 1..=count {
        let fault = FaultStore::new(Arc::new(object_store::memory::InMemory::new()));
        let storage =
            Arc::new(CheckpointStorage::from_store(Arc::new(fault.clone()), "", "fault").unwrap());
        let (mut store, v, ck) = lsm_instance(&storage);
        for k in 0..300i64 {
            store.set_current_key(&k).unwrap();
            store.value(&v).unwrap().update(&k).unwrap();
        }
        ck.begin(1, store.backend_mut()).unwrap().run().unwrap();
        ck.notify_complete(1).unwrap();
        for k in 0..300i64 {
            store.set_current_key(&k).unwrap();
            store.value(&v).unwrap().update(&(k * 2)).unwrap();
        }
        fault.fail_from(Some(fault.requests() + n));
        let second = ck
            .begin(2, store.backend_mut())
            .and_then(|p| p.run())
            .and_then(|_| ck.notify_complete(2));
        fault.fail_from(None);
        let completed: Vec<u64> = list_completed(&storage)
            .unwrap()
            .iter()
            .map(|m| m.checkpoint_id)
            .collect();
        if second.is_err() {
            failed += 1;
        }
        // Checkpoint 2 is complete (its metadata was written; a later cleanup request may have failed) or
        // absent, and then checkpoint 1 is still complete. Every completed one verifies and restores to its
        // own state.
        assert!(
            completed == vec![1] || completed.contains(&2),
            "failing at request {n}: completed {completed:?}"
        );
        if second.is_err() && !completed.contains(&2) {
            incomplete += 1;
        }
        for &id in &completed {
            let report = verify(&storage, Some(id)).unwrap();
            assert!(
                report.problems.is_empty(),
                "request {n}: {:?}",
                report.problems
            );
            let cfg = KeyedStateStore::config_for(&LongSerializer, 16, KeyGroupRange::new(0, 15));
            let (backend, _) =
                restore_lsm_temp(&storage, id, cfg, LsmBackend::small_options()).unwrap();
            let mut r = KeyedStateStore::new(Box::new(backend), LongSerializer).unwrap();
            let rv = r
                .register_value(ValueStateDescriptor::new("v", LongSerializer))
                .unwrap();
            for k in [0i64, 150, 299] {
                r.set_current_key(&k).unwrap();
                let want = if id == 1 { k } else { k * 2 };
                assert_eq!(
                    r.value(&rv).unwrap().get().unwrap(),
                    Some(want),
                    "request {n}"
                );
            }
        }
    }
    assert!(
        incomplete > 0,
        "no request failure left checkpoint 2 incomplete"
    );
    eprintln!(
        "checkpoint 2: {count} requests; failing at each, {failed} runs failed, {incomplete} left it \
         incomplete with checkpoint 1 intact"
    );
}
