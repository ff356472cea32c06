//! Bit flips in every file kind: one bit of one file flipped per trial, then everything opened and read
//! through the public API. Each trial is *detected* (an error naming the file or the offset), *detected
//! without a place* (an error that names neither), *harmless* (every value right), *wrong* (a wrong value or a
//! missing key with no error) or a *panic*. The test fails on any wrong or panicking trial.
//!
//! File kinds: SST data, index, filter, properties and footer blocks (located from the SST's own footer),
//! MANIFEST, CURRENT, WAL (opened strictly, and with point-in-time recovery, where a trial is detected when
//! the recovered writes are a prefix and the recovery report names the file and offset), a savepoint, and
//! checkpoint metadata. By default a sample that runs in seconds;
//! `KEYED_STATE_BITFLIP_FULL=1` flips every bit of every file or block up to 4 KiB and 10,000 random bits of
//! larger ones, and prints the table recorded in `design/bench-results/2026-12-02-bitflips/`.

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use keyed_state::backend::heap::HeapBackend;
use keyed_state::backend::lsm::LsmBackend;
use keyed_state::checkpoint::{
    restore_lsm_temp, CheckpointOptions, CheckpointStorage, Checkpointer,
};
use keyed_state::keygroup::KeyGroupRange;
use keyed_state::savepoint::{write_savepoint, SavepointReader, WriteOptions};
use keyed_state::serializer::LongSerializer;
use keyed_state::state::{KeyedStateStore, ValueState, ValueStateDescriptor};
use keyed_state_lsm::{Db, Options, ReadOptions, WalRecovery};

const LSM_KEYS: usize = 5_000;
const WAL_KEYS: usize = 300;
const STATE_KEYS: i64 = 400;
const MAX_P: u32 = 16;

fn full() -> bool {
    std::env::var("KEYED_STATE_BITFLIP_FULL").is_ok_and(|v| v == "1")
}

/// The outcome of one trial.
enum Outcome {
    /// An error; its message.
    Error(String),
    /// Every value right.
    Harmless,
    /// What was wrong.
    Wrong(String),
}

#[derive(Default)]
struct Counts {
    trials: usize,
    detected: usize,
    /// The message of the first detected trial.
    example: Option<String>,
    unplaced: Vec<String>,
    harmless: usize,
    wrong: Vec<String>,
    panics: Vec<String>,
}

/// Bit positions to flip in `range` of a file: all of them when the campaign is full and the range is at
/// most 4 KiB, else a deterministic sample of distinct bits (`sample` in the quick run, 10,000 in the full one).
fn positions(range: std::ops::Range<usize>, sample: usize, seed: u64) -> Vec<(usize, u8)> {
    let bits = (range.end - range.start) * 8;
    let all = full() && range.len() <= 4 << 10;
    if all || bits <= sample {
        return (0..bits)
            .map(|b| (range.start + b / 8, (b % 8) as u8))
            .collect();
    }
    let n = if full() { 10_000.min(bits) } else { sample };
    let mut x = seed | 1;
    let mut chosen = std::collections::BTreeSet::new();
    while chosen.len() < n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        chosen.insert((x % bits as u64) as usize);
    }
    chosen
        .into_iter()
        .map(|b| (range.start + b / 8, (b % 8) as u8))
        .collect()
}

/// Runs one trial per position: flips that bit of `pristine`, hands the bytes to `run`, classifies.
/// `place` are strings any one of which an error message must contain to count as placed.
fn campaign(
    kind: &str,
    pristine: &[u8],
    positions: &[(usize, u8)],
    place: &[&str],
    table: &mut BTreeMap<String, Counts>,
    mut run: impl FnMut(&[u8]) -> Outcome,
) {
    let c = table.entry(kind.to_string()).or_default();
    for &(byte, bit) in positions {
        let mut b = pristine.to_vec();
        b[byte] ^= 1 << bit;
        c.trials += 1;
        let at = format!("byte {byte} bit {bit}");
        match catch_unwind(AssertUnwindSafe(|| run(&b))) {
            Ok(Outcome::Error(msg)) => {
                if place.iter().any(|p| msg.contains(p)) {
                    c.detected += 1;
                    c.example.get_or_insert(format!("{at}: {msg}"));
                } else {
                    c.unplaced.push(format!("{at}: {msg}"));
                }
            }
            Ok(Outcome::Harmless) => c.harmless += 1,
            Ok(Outcome::Wrong(w)) => c.wrong.push(format!("{at}: {w}")),
            Err(p) => {
                let msg = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                c.panics.push(format!("{at}: {msg}"));
            }
        }
    }
}

// ---- LSM databases -------------------------------------------------------------------------------------

fn key(i: usize) -> Vec<u8> {
    format!("key{i:06}").into_bytes()
}

fn value(i: usize) -> Vec<u8> {
    format!("value-{i}-{}", i * 7919 % 100_003).into_bytes()
}

/// Options of a trial's open: no automatic compaction, and background threads at the caller's priority (a
/// trial waits for them to stop, which at a lowered priority on a loaded machine takes seconds).
fn reopen_opts() -> Options {
    Options {
        auto_compaction: false,
        background_nice: 0,
        ..Options::default()
    }
}

fn file_starting(dir: &Path, prefix: &str) -> PathBuf {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(prefix))
        .collect();
    v.sort();
    v.pop().unwrap()
}

fn file_ending(dir: &Path, suffix: &str) -> PathBuf {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with(suffix))
        .unwrap()
}

/// A copy of database `src` with file `name` replaced by `bytes` (SSTs otherwise hard-linked: opening
/// never writes them).
fn trial_dir(src: &Path, name: &str, bytes: &[u8]) -> tempfile::TempDir {
    let dst = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let p = e.unwrap().path();
        let file = p.file_name().unwrap().to_string_lossy().into_owned();
        let to = dst.path().join(&file);
        if file == "LOCK" {
            continue;
        } else if file == name {
            std::fs::write(&to, bytes).unwrap();
        } else if file.ends_with(".sst") {
            std::fs::hard_link(&p, &to).unwrap();
        } else {
            std::fs::copy(&p, &to).unwrap();
        }
    }
    dst
}

/// Opens `dir` and reads keys `0..n` one by one and by a scan, checking every value.
fn check_db(dir: &Path, n: usize) -> Outcome {
    let db = match Db::open(dir, reopen_opts()) {
        Ok(db) => db,
        Err(e) => return Outcome::Error(e.to_string()),
    };
    let mut missing = 0;
    for i in 0..n {
        match db.get(&key(i)) {
            Ok(Some(v)) if v.as_ref() == value(i).as_slice() => {}
            Ok(Some(_)) => return Outcome::Wrong(format!("wrong value for key {i}")),
            Ok(None) => missing += 1,
            Err(e) => return Outcome::Error(e.to_string()),
        }
    }
    if missing > 0 {
        return Outcome::Wrong(format!("{missing} keys missing"));
    }
    let mut it = db.iter(ReadOptions::default());
    it.seek_to_first();
    let mut i = 0;
    while it.valid() {
        if i >= n || it.key() != key(i).as_slice() || it.value() != value(i).as_slice() {
            return Outcome::Wrong(format!("scan differs at entry {i}"));
        }
        i += 1;
        it.next();
    }
    if let Err(e) = it.status() {
        return Outcome::Error(e.to_string());
    }
    if i != n {
        return Outcome::Wrong(format!("scan returned {i} of {n} entries"));
    }
    Outcome::Harmless
}

/// Opens `dir` with point-in-time WAL recovery: the keys present must be exactly `0..m` for some `m` (writes
/// were acknowledged in key order), all of them unless the recovery report names the damaged file and offset.
fn check_db_point_in_time(dir: &Path, n: usize) -> Outcome {
    let opts = Options {
        wal_recovery: WalRecovery::PointInTime,
        ..reopen_opts()
    };
    let db = match Db::open(dir, opts) {
        Ok(db) => db,
        Err(e) => return Outcome::Error(e.to_string()),
    };
    let mut present = Vec::new();
    for i in 0..n {
        match db.get(&key(i)) {
            Ok(Some(v)) if v.as_ref() == value(i).as_slice() => present.push(i),
            Ok(Some(_)) => return Outcome::Wrong(format!("wrong value for key {i}")),
            Ok(None) => {}
            Err(e) => return Outcome::Error(e.to_string()),
        }
    }
    let m = present.len();
    if present.iter().enumerate().any(|(j, &i)| i != j) {
        return Outcome::Wrong(format!(
            "recovered {m} keys that are not a prefix of the writes"
        ));
    }
    match &db.recovery_report().dropped {
        None if m == n => Outcome::Harmless,
        None => Outcome::Wrong(format!("{} keys missing and no drop reported", n - m)),
        Some(d) => Outcome::Error(format!(
            "recovered {m} of {n} writes; dropped from {} at offset {}: {}",
            d.file.display(),
            d.offset,
            d.detail
        )),
    }
}

/// `LSM_KEYS` keys flushed and fully compacted into one SST, closed.
fn compacted_db() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    for i in 0..LSM_KEYS {
        db.put(&key(i), &value(i)).unwrap();
    }
    db.compact_all().unwrap();
    db.close().unwrap();
    dir
}

/// `WAL_KEYS` keys written with the WAL synced and never flushed (the handle abandoned, as in a crash).
fn wal_db() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        wal: true,
        wal_sync: true,
        ..Options::default()
    };
    let db = Db::open(dir.path(), opts).unwrap();
    for i in 0..WAL_KEYS {
        db.put(&key(i), &value(i)).unwrap();
    }
    db.abandon();
    dir
}

fn u64_at(b: &[u8], at: usize) -> usize {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap()) as usize
}

/// The block regions of an SST (payload and trailer), from its footer (`design/sst-format.md`).
fn sst_regions(sst: &[u8]) -> Vec<(&'static str, std::ops::Range<usize>)> {
    const TRAILER: usize = 9;
    let f = sst.len() - 72;
    let (filter, filter_size) = (u64_at(sst, f), u64_at(sst, f + 8));
    let (props, props_size) = (u64_at(sst, f + 16), u64_at(sst, f + 24));
    let (index, index_size) = (u64_at(sst, f + 32), u64_at(sst, f + 40));
    let data_end = if filter_size > 0 { filter } else { props };
    let mut out = vec![("SST data blocks", 0..data_end)];
    if filter_size > 0 {
        out.push(("SST filter block", filter..filter + filter_size + TRAILER));
    }
    out.push(("SST properties block", props..props + props_size + TRAILER));
    out.push(("SST index block", index..index + index_size + TRAILER));
    out.push(("SST footer", f..sst.len()));
    out
}

fn lsm_campaigns(table: &mut BTreeMap<String, Counts>) {
    let base = compacted_db();
    let n = LSM_KEYS;

    let sst_path = file_ending(base.path(), ".sst");
    let sst_name = sst_path.file_name().unwrap().to_string_lossy().into_owned();
    let sst = std::fs::read(&sst_path).unwrap();
    let regions = sst_regions(&sst);
    assert!(
        regions.iter().any(|(k, _)| *k == "SST filter block"),
        "the SST has a filter block"
    );
    for (i, (kind, range)) in regions.into_iter().enumerate() {
        let sample = if kind == "SST data blocks" { 24 } else { 16 };
        let pos = positions(range, sample, 0x9E37_79B9 + i as u64);
        campaign(kind, &sst, &pos, &[&sst_name], table, |b| {
            let t = trial_dir(base.path(), &sst_name, b);
            check_db(t.path(), n)
        });
    }

    let man_path = file_starting(base.path(), "MANIFEST-");
    let man_name = man_path.file_name().unwrap().to_string_lossy().into_owned();
    let man = std::fs::read(&man_path).unwrap();
    let pos = positions(0..man.len(), 48, 0xA5A5);
    campaign("MANIFEST", &man, &pos, &[&man_name], table, |b| {
        let t = trial_dir(base.path(), &man_name, b);
        check_db(t.path(), n)
    });

    let current = std::fs::read(base.path().join("CURRENT")).unwrap();
    let pos = positions(0..current.len(), usize::MAX, 0);
    campaign(
        "CURRENT",
        &current,
        &pos,
        &["CURRENT", "MANIFEST-"],
        table,
        |b| {
            let t = trial_dir(base.path(), "CURRENT", b);
            check_db(t.path(), n)
        },
    );

    let wal = wal_db();
    let log_path = file_ending(wal.path(), ".log");
    let log_name = log_path.file_name().unwrap().to_string_lossy().into_owned();
    let log = std::fs::read(&log_path).unwrap();
    let pos = positions(0..log.len(), 32, 0x5EED);
    campaign("WAL", &log, &pos, &[&log_name], table, |b| {
        let t = trial_dir(wal.path(), &log_name, b);
        check_db(t.path(), WAL_KEYS)
    });
    campaign(
        "WAL, point-in-time recovery",
        &log,
        &pos,
        &[&log_name],
        table,
        |b| {
            let t = trial_dir(wal.path(), &log_name, b);
            check_db_point_in_time(t.path(), WAL_KEYS)
        },
    );
}

// ---- savepoints and checkpoints ------------------------------------------------------------------------

fn all_groups() -> KeyGroupRange {
    KeyGroupRange::new(0, MAX_P as u16 - 1)
}

fn register(
    store: &mut KeyedStateStore<LongSerializer>,
) -> keyed_state::Result<ValueState<LongSerializer>> {
    store.register_value(ValueStateDescriptor::new("counter", LongSerializer))
}

fn fill(store: &mut KeyedStateStore<LongSerializer>, s: &ValueState<LongSerializer>) {
    for k in 0..STATE_KEYS {
        store.set_current_key(&k).unwrap();
        store.value(s).unwrap().update(&(k * 31 + 7)).unwrap();
    }
}

/// Reads every key of `store`; the first error, a wrong value, or harmless.
fn check_store(
    store: &mut KeyedStateStore<LongSerializer>,
    s: &ValueState<LongSerializer>,
) -> Outcome {
    for k in 0..STATE_KEYS {
        if let Err(e) = store.set_current_key(&k) {
            return Outcome::Error(e.to_string());
        }
        let got = match store.value(s).and_then(|mut v| v.get()) {
            Ok(v) => v,
            Err(e) => return Outcome::Error(e.to_string()),
        };
        if got != Some(k * 31 + 7) {
            return Outcome::Wrong(format!("key {k}: {got:?}"));
        }
    }
    Outcome::Harmless
}

fn savepoint_campaign(table: &mut BTreeMap<String, Counts>) {
    let cfg = KeyedStateStore::config_for(&LongSerializer, MAX_P, all_groups());
    let mut store = KeyedStateStore::new(
        Box::new(HeapBackend::new(cfg.clone()).unwrap()),
        LongSerializer,
    )
    .unwrap();
    let s = register(&mut store).unwrap();
    fill(&mut store, &s);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("savepoint");
    write_savepoint(&path, &*store.snapshot().unwrap(), &WriteOptions::default()).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let pos = positions(0..bytes.len(), 32, 0xC0FFEE);
    campaign(
        "savepoint",
        &bytes,
        &pos,
        &["offset", "savepoint"],
        table,
        |b| {
            let t = tempfile::tempdir().unwrap();
            let p = t.path().join("savepoint");
            std::fs::write(&p, b).unwrap();
            let sp = match SavepointReader::open(&p) {
                Ok(sp) => sp,
                Err(e) => return Outcome::Error(e.to_string()),
            };
            let mut st = KeyedStateStore::new(
                Box::new(HeapBackend::new(cfg.clone()).unwrap()),
                LongSerializer,
            )
            .unwrap();
            let s = match register(&mut st) {
                Ok(s) => s,
                Err(e) => return Outcome::Error(e.to_string()),
            };
            if let Err(e) = st.restore(&[sp]) {
                return Outcome::Error(e.to_string());
            }
            check_store(&mut st, &s)
        },
    );
}

/// The LSM backend's small options, background threads at the caller's priority (see [`reopen_opts`]).
fn backend_opts() -> Options {
    Options {
        background_nice: 0,
        ..LsmBackend::small_options()
    }
}

fn checkpoint_metadata_campaign(table: &mut BTreeMap<String, Counts>) {
    let cfg = KeyedStateStore::config_for(&LongSerializer, MAX_P, all_groups());
    let root = tempfile::tempdir().unwrap();
    let storage = Arc::new(CheckpointStorage::local(root.path()).unwrap());
    {
        let backend = LsmBackend::temp_with(cfg.clone(), backend_opts()).unwrap();
        let mut store = KeyedStateStore::new(Box::new(backend), LongSerializer).unwrap();
        let s = register(&mut store).unwrap();
        fill(&mut store, &s);
        let ck =
            Checkpointer::open(Arc::clone(&storage), &cfg, CheckpointOptions::default()).unwrap();
        store.checkpoint(&ck, 1).unwrap().run().unwrap();
        ck.notify_complete(1).unwrap();
    }
    let meta_path = find_metadata(root.path()).unwrap();
    let rel = meta_path.strip_prefix(root.path()).unwrap().to_path_buf();
    let bytes = std::fs::read(&meta_path).unwrap();
    let pos = positions(0..bytes.len(), 32, 0xFACE);
    campaign(
        "checkpoint metadata",
        &bytes,
        &pos,
        &["_metadata", "offset"],
        table,
        |b| {
            let t = tempfile::tempdir().unwrap();
            copy_tree(root.path(), t.path());
            std::fs::write(t.path().join(&rel), b).unwrap();
            let storage = CheckpointStorage::local(t.path()).unwrap();
            let backend = match restore_lsm_temp(&storage, 1, cfg.clone(), backend_opts()) {
                Ok((b, _)) => b,
                Err(e) => return Outcome::Error(e.to_string()),
            };
            let mut st = KeyedStateStore::new(Box::new(backend), LongSerializer).unwrap();
            let s = match register(&mut st) {
                Ok(s) => s,
                Err(e) => return Outcome::Error(e.to_string()),
            };
            check_store(&mut st, &s)
        },
    );
}

fn find_metadata(dir: &Path) -> Option<PathBuf> {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            if let Some(found) = find_metadata(&p) {
                return Some(found);
            }
        } else if p.file_name().unwrap() == "_metadata" {
            return Some(p);
        }
    }
    None
}

fn copy_tree(from: &Path, to: &Path) {
    for e in std::fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        let dst = to.join(p.file_name().unwrap());
        if p.is_dir() {
            std::fs::create_dir_all(&dst).unwrap();
            copy_tree(&p, &dst);
        } else {
            std::fs::copy(&p, &dst).unwrap();
        }
    }
}

// ---- the campaign --------------------------------------------------------------------------------------

#[test]
fn no_single_bit_flip_in_any_file_kind_reads_a_wrong_value_or_panics() {
    let mut table = BTreeMap::new();
    // Panics are caught and counted; keep their messages out of the test output.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    lsm_campaigns(&mut table);
    savepoint_campaign(&mut table);
    checkpoint_metadata_campaign(&mut table);
    std::panic::set_hook(hook);

    println!(
        "| file kind | trials | detected (file or offset named) | detected, no place named | harmless | wrong | panics |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (kind, c) in &table {
        println!(
            "| {kind} | {} | {} | {} | {} | {} | {} |",
            c.trials,
            c.detected,
            c.unplaced.len(),
            c.harmless,
            c.wrong.len(),
            c.panics.len()
        );
    }
    for (kind, c) in &table {
        println!(
            "campaign bitflips:{} trials={} detected={} harmless={} failures={}",
            kind.replace([' ', ','], "_"),
            c.trials,
            c.detected + c.unplaced.len(),
            c.harmless,
            c.wrong.len() + c.panics.len()
        );
    }
    for (kind, c) in &table {
        if let Some(e) = &c.example {
            println!("{kind}, e.g. {e}");
        }
    }
    let mut failures = Vec::new();
    for (kind, c) in &table {
        for u in c.unplaced.iter().take(3) {
            println!("{kind}: error without a place: {u}");
        }
        for w in c.wrong.iter().chain(&c.panics).take(10) {
            failures.push(format!("{kind}: {w}"));
        }
    }
    assert!(
        failures.is_empty(),
        "wrong values or panics:\n{}",
        failures.join("\n")
    );
}
