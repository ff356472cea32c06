//! Crash consistency by enumeration, over the fault-injecting storage ([`FaultFs`]): a workload of puts,
//! merges, deletes, range deletes, flushes, compactions and checkpoints (and, separately, savepoints) runs
//! once to count its storage operations and record the database's contents after every step; then, for
//! each crash point `n` (every one for the small workloads, a random sample for the large one), it runs
//! again with a crash at operation `n`, the unsynced bytes and directory entries are dropped, and the
//! database is reopened:
//!
//! * with the WAL on and synced, it holds exactly the acknowledged steps (the step in flight at the crash
//!   may be there or not, atomically);
//! * without the WAL, it holds the contents as of some step between the last completed flush and the
//!   crash, never a mix;
//! * every completed checkpoint opens (so no file it references is missing) and holds the contents as of
//!   its step; a checkpoint in flight either has no `CURRENT` or is complete;
//! * the last completed savepoint reads back byte for byte.
//!
//! `KEYED_STATE_CRASH_POINTS` sets the random crash points of the large workload (default 40);
//! `KEYED_STATE_CRASH_STEPS` its steps (default 300). `scripts/long-checks.sh` runs it longer.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use keyed_state_lsm::storage::fault::FaultFs;
use keyed_state_lsm::storage::{Storage, StorageHandle};
use keyed_state_lsm::{Db, ListAppendOperator, Options, ReadOptions, SstOptions};
use rand::{Rng, SeedableRng};

type Contents = BTreeMap<Vec<u8>, Vec<u8>>;

#[derive(Debug, Clone)]
enum Step {
    Put(u32, u32),
    Merge(u32, u32),
    Delete(u32),
    DeleteRange(u32, u32),
    /// Several updates in one batch (atomic).
    Batch(Vec<(u32, u32)>),
    Flush,
    Compact,
    Checkpoint,
}

fn key(k: u32) -> Vec<u8> {
    format!("key{k:05}").into_bytes()
}

fn value(k: u32, v: u32) -> Vec<u8> {
    format!("v{v}-{}", "x".repeat((k % 13) as usize * 7)).into_bytes()
}

fn db_dir() -> PathBuf {
    PathBuf::from("/db")
}

fn ckpt_dir(step: usize) -> PathBuf {
    PathBuf::from(format!("/ckpt/{step:04}"))
}

#[derive(Clone, Copy)]
struct Config {
    wal: bool,
    /// A small memtable and automatic compaction: switches, flushes and compactions in the background.
    busy: bool,
}

fn opts(fs: &FaultFs, cfg: Config) -> Options {
    Options {
        memtable_size: if cfg.busy { 6 << 10 } else { 1 << 20 },
        l0_compaction_trigger: if cfg.busy { 3 } else { 100 },
        l0_stop_writes_trigger: 200,
        num_levels: 4,
        level_base_size: 32 << 10,
        level_multiplier: 4,
        target_file_size: 8 << 10,
        sst: SstOptions {
            block_size: 512,
            ..SstOptions::default()
        },
        block_cache_size: 1 << 20,
        wal: cfg.wal,
        wal_sync: cfg.wal,
        merge_operator: Some(Arc::new(ListAppendOperator)),
        auto_compaction: cfg.busy,
        background_nice: 0,
        storage: StorageHandle::from(Arc::new(fs.clone())),
        ..Options::default()
    }
}

fn contents(db: &Db) -> Result<Contents, String> {
    let mut it = db.iter(ReadOptions::default());
    it.seek_to_first();
    let mut out = Contents::new();
    while it.valid() {
        out.insert(it.key().to_vec(), it.value().to_vec());
        it.next();
    }
    it.take_status().map_err(|e| e.to_string())?;
    Ok(out)
}

fn apply(db: &Db, step: &Step, index: usize) -> Result<(), String> {
    let r = match step {
        Step::Put(k, v) => db.put(&key(*k), &value(*k, *v)),
        Step::Merge(k, v) => db.merge(&key(*k), format!("m{v}").as_bytes()),
        Step::Delete(k) => db.delete(&key(*k)),
        Step::DeleteRange(a, b) => db.delete_range(&key(*a), &key(*b)),
        Step::Batch(ops) => {
            let mut b = keyed_state_lsm::WriteBatch::new();
            for (k, v) in ops {
                if v % 3 == 0 {
                    b.merge(&key(*k), format!("b{v}").as_bytes());
                } else {
                    b.put(&key(*k), &value(*k, *v));
                }
            }
            db.write(&b)
        }
        Step::Flush => db.flush(),
        Step::Compact => db.compact_all(),
        Step::Checkpoint => db.checkpoint(ckpt_dir(index)).map(|_| ()),
    };
    r.map_err(|e| e.to_string())
}

/// Whether a completed `step` makes every earlier write durable without the WAL.
fn persists(step: &Step) -> bool {
    matches!(step, Step::Flush | Step::Compact | Step::Checkpoint)
}

fn new_fs() -> FaultFs {
    let fs = FaultFs::new();
    fs.create_dir_all(Path::new("/ckpt")).unwrap();
    fs
}

/// The clean run: the contents after each step (`[0]` before the first) and the storage operations used.
fn clean_run(steps: &[Step], cfg: Config) -> (Vec<Contents>, u64) {
    let fs = new_fs();
    let db = Db::open(db_dir(), opts(&fs, cfg)).unwrap();
    let mut snaps = vec![contents(&db).unwrap()];
    for (i, s) in steps.iter().enumerate() {
        apply(&db, s, i).unwrap_or_else(|e| panic!("clean run, step {i} {s:?}: {e}"));
        snaps.push(contents(&db).unwrap());
    }
    db.close().unwrap();
    (snaps, fs.ops())
}

/// A run crashing at operation `n`; returns how many steps were acknowledged.
fn crashed_run(fs: &FaultFs, steps: &[Step], cfg: Config, n: u64) -> usize {
    fs.crash_at(n);
    let Ok(db) = Db::open(db_dir(), opts(fs, cfg)) else {
        return 0;
    };
    let mut acked = steps.len();
    for (i, s) in steps.iter().enumerate() {
        if apply(&db, s, i).is_err() {
            acked = i;
            break;
        }
    }
    drop(db);
    acked
}

/// Reopens after the crash and checks everything the module docs promise; `Err` says what broke.
fn check(
    fs: &FaultFs,
    steps: &[Step],
    snaps: &[Contents],
    cfg: Config,
    acked: usize,
) -> Result<(), String> {
    fs.reboot();
    let db = Db::open(db_dir(), opts(fs, cfg)).map_err(|e| format!("reopen failed: {e}"))?;
    let got = contents(&db)?;
    let inflight = (acked < steps.len()).then_some(acked + 1);
    if cfg.wal {
        let ok = got == snaps[acked] || inflight.is_some_and(|j| got == snaps[j]);
        if !ok {
            return Err(format!(
                "{} keys after reopen; {acked} steps acknowledged ({} keys), not a step's contents",
                got.len(),
                snaps[acked].len()
            ));
        }
    } else {
        let floor = steps[..acked]
            .iter()
            .rposition(persists)
            .map_or(0, |p| p + 1);
        let top = inflight.unwrap_or(acked);
        if !(floor..=top).any(|j| got == snaps[j]) {
            return Err(format!(
                "{} keys after reopen: not the contents of any step in {floor}..={top}",
                got.len()
            ));
        }
    }
    db.close().map_err(|e| format!("close after reopen: {e}"))?;
    for (i, s) in steps.iter().enumerate().take(acked + 1) {
        if !matches!(s, Step::Checkpoint) {
            continue;
        }
        let dir = ckpt_dir(i);
        let complete = fs.exists(&dir.join("CURRENT"));
        if i < acked && !complete {
            return Err(format!("completed checkpoint of step {i} has no CURRENT"));
        }
        if !complete {
            continue;
        }
        let c = Db::open(&dir, opts(fs, Config { wal: false, ..cfg }))
            .map_err(|e| format!("checkpoint of step {i} does not open: {e}"))?;
        let held = contents(&c)?;
        if held != snaps[i] {
            return Err(format!(
                "checkpoint of step {i} holds {} keys, {} expected",
                held.len(),
                snaps[i].len()
            ));
        }
        c.close().map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Crashes at each of `points`, checks, and panics with every failure found.
fn enumerate(name: &str, steps: &[Step], cfg: Config, points: impl Iterator<Item = u64>) -> usize {
    let (snaps, _) = clean_run(steps, cfg);
    let mut failures = Vec::new();
    let mut tried = 0;
    for n in points {
        tried += 1;
        let fs = new_fs();
        let acked = crashed_run(&fs, steps, cfg, n);
        if let Err(e) = check(&fs, steps, &snaps, cfg, acked) {
            failures.push(format!("crash at op {n} ({acked} steps acked): {e}"));
        }
    }
    eprintln!(
        "{name}: {tried} crash points, {} inconsistencies",
        failures.len()
    );
    eprintln!(
        "campaign crash:{} crash_points={tried} inconsistencies={}",
        name.replace(' ', "_"),
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{name}: {} of {tried} crash points inconsistent:\n{}",
        failures.len(),
        failures
            .iter()
            .take(10)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    tried
}

fn small_workload() -> Vec<Step> {
    use Step::*;
    vec![
        Put(1, 1),
        Merge(2, 1),
        Batch(vec![(3, 1), (4, 3), (5, 2)]),
        Flush,
        Put(1, 2),
        Merge(2, 2),
        DeleteRange(3, 5),
        Checkpoint,
        Put(6, 1),
        Delete(1),
        Flush,
        Compact,
        Merge(2, 3),
        Put(7, 1),
        Checkpoint,
        Put(8, 1),
    ]
}

fn every_point(steps: &[Step], cfg: Config) -> impl Iterator<Item = u64> {
    let (_, total) = clean_run(steps, cfg);
    1..=total
}

#[test]
fn with_the_wal_synced_exactly_the_acknowledged_writes_survive_a_crash_at_every_storage_operation()
{
    let cfg = Config {
        wal: true,
        busy: false,
    };
    let steps = small_workload();
    let n = enumerate("wal", &steps, cfg, every_point(&steps, cfg));
    assert!(n > 100, "only {n} storage operations");
}

#[test]
fn without_the_wal_a_crash_at_every_storage_operation_leaves_a_flushed_state_and_whole_checkpoints()
{
    let cfg = Config {
        wal: false,
        busy: false,
    };
    let steps = small_workload();
    enumerate("no wal", &steps, cfg, every_point(&steps, cfg));
}

fn large_workload(n: usize, seed: u64) -> Vec<Step> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..n)
        .map(|i| match rng.random_range(0..100) {
            0..=44 => Step::Put(rng.random_range(0..400), i as u32),
            45..=64 => Step::Merge(rng.random_range(0..50), i as u32),
            65..=72 => Step::Delete(rng.random_range(0..400)),
            73..=75 => {
                let a = rng.random_range(0..390);
                Step::DeleteRange(a, a + rng.random_range(1..10))
            }
            76..=90 => Step::Batch(
                (0..rng.random_range(2..6))
                    .map(|j| (rng.random_range(0..400), (i * 10 + j) as u32))
                    .collect(),
            ),
            91..=94 => Step::Flush,
            95..=97 => Step::Compact,
            _ => Step::Checkpoint,
        })
        .collect()
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn a_large_busy_workload_survives_crashes_at_random_storage_operations() {
    let steps = large_workload(env("KEYED_STATE_CRASH_STEPS", 300) as usize, 7);
    let points = env("KEYED_STATE_CRASH_POINTS", 40);
    for wal in [true, false] {
        let cfg = Config { wal, busy: true };
        let (_, total) = clean_run(&steps, cfg);
        let mut rng = rand::rngs::StdRng::seed_from_u64(11 + wal as u64);
        let sample: Vec<u64> = (0..points).map(|_| rng.random_range(1..=total)).collect();
        enumerate(
            if wal { "large, wal" } else { "large, no wal" },
            &steps,
            cfg,
            sample.into_iter(),
        );
    }
}

/// Three savepoints of a growing heap store, written one after the other to the same path.
fn savepoint_rounds() -> Vec<Box<dyn keyed_state::backend::BackendSnapshot>> {
    use keyed_state::backend::heap::HeapBackend;
    use keyed_state::keygroup::KeyGroupRange;
    use keyed_state::serializer::LongSerializer;
    use keyed_state::state::{KeyedStateStore, ValueStateDescriptor};
    let cfg = KeyedStateStore::config_for(&LongSerializer, 16, KeyGroupRange::new(0, 15));
    let mut store =
        KeyedStateStore::new(Box::new(HeapBackend::new(cfg).unwrap()), LongSerializer).unwrap();
    let v = store
        .register_value(ValueStateDescriptor::new("v", LongSerializer))
        .unwrap();
    (0..3i64)
        .map(|round| {
            for k in 0..(100 + 100 * round) {
                store.set_current_key(&k).unwrap();
                store.value(&v).unwrap().update(&(k * 10 + round)).unwrap();
            }
            store.snapshot().unwrap()
        })
        .collect()
}

#[test]
fn a_crash_at_every_storage_operation_of_savepoints_leaves_the_last_completed_one_whole() {
    use keyed_state::savepoint::{write_savepoint_on, SavepointReader, WriteOptions};
    let rounds = savepoint_rounds();
    let dir = Path::new("/sp");
    let path = dir.join("savepoint");
    let write_all = |fs: &FaultFs| -> usize {
        for (i, s) in rounds.iter().enumerate() {
            if write_savepoint_on(fs, &path, &**s, &WriteOptions::default()).is_err() {
                return i;
            }
        }
        rounds.len()
    };
    // The bytes of each round, and the operations the three writes take.
    let mut want = Vec::new();
    let fs = new_fs();
    fs.create_dir_all(dir).unwrap();
    let start = fs.ops();
    for s in &rounds {
        write_savepoint_on(&fs, &path, &**s, &WriteOptions::default()).unwrap();
        want.push(fs.peek(&path).unwrap());
    }
    let total = fs.ops() - start;
    let mut bad = Vec::new();
    for n in 1..=total {
        let fs = new_fs();
        fs.create_dir_all(dir).unwrap();
        fs.crash_at(fs.ops() + n);
        let acked = write_all(&fs);
        fs.reboot();
        let got = fs.exists(&path).then(|| fs.peek(&path).unwrap_or_default());
        let ok = match (&got, acked) {
            (None, 0) => true,
            (Some(b), a) => (a > 0 && *b == want[a - 1]) || (a < rounds.len() && *b == want[a]),
            (None, _) => false,
        };
        let whole = got.as_ref().is_none_or(|b| {
            SavepointReader::from_bytes(b.clone())
                .and_then(|r| r.verify())
                .is_ok()
        });
        let strays: Vec<String> = fs
            .list(dir)
            .unwrap()
            .into_iter()
            .filter(|f| f != "savepoint" && !f.ends_with(".tmp"))
            .collect();
        if !ok || !whole || !strays.is_empty() {
            bad.push(format!(
                "crash at op {n} ({acked} savepoints acked): ok {ok}, whole {whole}, strays {strays:?}"
            ));
        }
    }
    eprintln!(
        "savepoints: {total} crash points, {} inconsistencies",
        bad.len()
    );
    eprintln!(
        "campaign crash:savepoints crash_points={total} inconsistencies={}",
        bad.len()
    );
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}
