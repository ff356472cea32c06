//! Stress test of the LSM engine against a model: concurrent writers (puts, deletes, merges, range deletes,
//! batches, each in its own key space), readers taking snapshots, a flusher and a compactor, all at once on
//! a small memtable so that switches, flushes and compactions happen under the readers all the time.
//!
//! Every writer logs each write under a lock held across the write, and then publishes how many it did. A
//! reader reads that count (`before`), takes a snapshot, takes the log (`after` writes), and checks that the snapshot's
//! view of the writer's key space is exactly the model after some `j` of its writes, `before <= j <= after`
//! (a snapshot is atomic and sees everything acknowledged before it); then that the view is unchanged when
//! read again later under the same snapshot (after more flushes and compactions), and that point reads
//! agree with the scan. At the end the whole database equals the writers' models, before and after reopening.
//!
//! Sized for CI (about 3 s); `KEYED_STATE_STRESS_SECS` runs longer (scripts/long-checks.sh). Prints
//! `campaign stress:lsm ...` with what it did.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use keyed_state_lsm::{
    Compression, Db, ListAppendOperator, Options, ReadOptions, Snapshot, SstOptions, WriteBatch,
};

const WRITERS: usize = 3;
const READERS: usize = 2;
const KEYS: u32 = 64;

/// One acknowledged write of a writer, as the model applies it.
#[derive(Clone, Debug)]
enum Op {
    Put(u32, Vec<u8>),
    Delete(u32),
    Merge(u32, Vec<u8>),
    /// Deletes keys `[lo, hi)`.
    DeleteRange(u32, u32),
    Batch(Vec<Op>),
}

type Model = BTreeMap<u32, Vec<u8>>;

fn apply(m: &mut Model, op: &Op) {
    match op {
        Op::Put(k, v) => {
            m.insert(*k, v.clone());
        }
        Op::Delete(k) => {
            m.remove(k);
        }
        Op::Merge(k, v) => {
            let e = m.entry(*k).or_default();
            if !e.is_empty() {
                e.push(b',');
            }
            e.extend_from_slice(v);
        }
        Op::DeleteRange(lo, hi) => {
            let doomed: Vec<u32> = m.range(*lo..*hi).map(|(k, _)| *k).collect();
            for k in doomed {
                m.remove(&k);
            }
        }
        Op::Batch(ops) => ops.iter().for_each(|o| apply(m, o)),
    }
}

fn key(w: usize, k: u32) -> Vec<u8> {
    format!("w{w}/k{k:03}").into_bytes()
}

fn opts() -> Options {
    Options {
        memtable_size: 8 << 10,
        max_immutable_memtables: 2,
        l0_compaction_trigger: 2,
        l0_stop_writes_trigger: 12,
        num_levels: 4,
        level_base_size: 32 << 10,
        level_multiplier: 4,
        target_file_size: 8 << 10,
        sst: SstOptions {
            block_size: 512,
            compression: Compression::Lz4,
            ..SstOptions::default()
        },
        block_cache_size: 256 << 10,
        merge_operator: Some(Arc::new(ListAppendOperator)),
        ..Options::default()
    }
}

/// A small xorshift generator (deterministic per thread; the schedule is not).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn write_op(db: &Db, w: usize, op: &Op) {
    match op {
        Op::Put(k, v) => db.put(&key(w, *k), v).unwrap(),
        Op::Delete(k) => db.delete(&key(w, *k)).unwrap(),
        Op::Merge(k, v) => db.merge(&key(w, *k), v).unwrap(),
        Op::DeleteRange(lo, hi) => db.delete_range(&key(w, *lo), &key(w, *hi)).unwrap(),
        Op::Batch(ops) => {
            let mut b = WriteBatch::new();
            for o in ops {
                match o {
                    Op::Put(k, v) => b.put(&key(w, *k), v),
                    Op::Delete(k) => b.delete(&key(w, *k)),
                    Op::Merge(k, v) => b.merge(&key(w, *k), v),
                    Op::DeleteRange(lo, hi) => b.delete_range(&key(w, *lo), &key(w, *hi)),
                    Op::Batch(_) => unreachable!("batches are flat"),
                };
            }
            db.write(&b).unwrap();
        }
    }
}

fn random_op(rng: &mut Rng, i: u64, depth: u32) -> Op {
    let k = rng.below(u64::from(KEYS)) as u32;
    match rng.below(20) {
        0..=9 => Op::Put(k, format!("v{i}-{}", rng.below(1000)).into_bytes()),
        10..=12 => Op::Delete(k),
        13..=16 => Op::Merge(k, format!("m{i}").into_bytes()),
        17 => Op::DeleteRange(k, (k + 1 + rng.below(8) as u32).min(KEYS)),
        _ if depth == 0 => Op::Batch(
            (0..1 + rng.below(4))
                .map(|_| random_op(rng, i, 1))
                .collect(),
        ),
        _ => Op::Put(k, b"in-batch".to_vec()),
    }
}

/// A writer's view of the database (under `snap`, or the latest state), as the model's map.
fn view(db: &Db, w: usize, snap: Option<&Snapshot>) -> Model {
    let mut it = db.iter(ReadOptions {
        snapshot: snap,
        prefix: Some(format!("w{w}/").into_bytes()),
        ..ReadOptions::default()
    });
    it.seek_to_first();
    let mut out = Model::new();
    while it.valid() {
        let k = std::str::from_utf8(it.key()).unwrap();
        let n: u32 = k[k.len() - 3..].parse().unwrap();
        out.insert(n, it.value().to_vec());
        it.next();
    }
    assert!(it.status().is_ok(), "{:?}", it.status());
    out
}

struct Writer {
    log: Mutex<Vec<Op>>,
    done: AtomicUsize,
}

#[test]
fn concurrent_writers_readers_snapshots_flushes_and_compactions_match_the_model() {
    let secs: u64 = std::env::var("KEYED_STATE_STRESS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(Db::open(dir.path(), opts()).unwrap());
    let writers: Arc<Vec<Writer>> = Arc::new(
        (0..WRITERS)
            .map(|_| Writer {
                log: Mutex::new(Vec::new()),
                done: AtomicUsize::new(0),
            })
            .collect(),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let deadline = Instant::now() + Duration::from_secs(secs);
    let (snapshots, rereads, point_reads, flushes, compactions) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let mut handles = Vec::new();
    for w in 0..WRITERS {
        let (db, writers, stop) = (Arc::clone(&db), Arc::clone(&writers), Arc::clone(&stop));
        handles.push(thread::spawn(move || {
            let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ ((w as u64 + 1) * 0x1234_5678));
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let op = random_op(&mut rng, i, 0);
                // The log is held across the write: whoever locks it next sees every acknowledged write.
                let me = &writers[w];
                let mut log = me.log.lock().unwrap();
                write_op(&db, w, &op);
                log.push(op);
                me.done.store(log.len(), Ordering::Release);
                i += 1;
            }
        }));
    }
    for r in 0..READERS {
        let (db, writers, stop) = (Arc::clone(&db), Arc::clone(&writers), Arc::clone(&stop));
        let (snapshots, rereads, point_reads) = (
            Arc::clone(&snapshots),
            Arc::clone(&rereads),
            Arc::clone(&point_reads),
        );
        handles.push(thread::spawn(move || {
            let mut rng = Rng(0xDEAD_BEEF ^ (r as u64 + 7));
            let mut held: Vec<(usize, Snapshot, Model)> = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let w = rng.below(WRITERS as u64) as usize;
                let before = writers[w].done.load(Ordering::Acquire);
                let snap = db.snapshot();
                // Every write acknowledged before the snapshot is in the log once its lock is taken.
                let log: Vec<Op> = writers[w].log.lock().unwrap().clone();
                let after = log.len();
                let seen = view(&db, w, Some(&snap));
                let mut model = Model::new();
                log[..before].iter().for_each(|o| apply(&mut model, o));
                let mut matched = model == seen;
                for op in &log[before..after] {
                    if matched {
                        break;
                    }
                    apply(&mut model, op);
                    matched = model == seen;
                }
                assert!(
                    matched,
                    "writer {w}: the snapshot taken between writes {before} and {after} is no prefix of them"
                );
                for _ in 0..4 {
                    let k = rng.below(u64::from(KEYS)) as u32;
                    let got = db.get_at(&key(w, k), &snap).unwrap().map(|v| v.to_vec());
                    assert_eq!(got.as_ref(), seen.get(&k), "point read under a snapshot");
                    point_reads.fetch_add(1, Ordering::Relaxed);
                }
                snapshots.fetch_add(1, Ordering::Relaxed);
                held.push((w, snap, seen));
                if held.len() > 4 {
                    let (w, snap, seen) = held.remove(rng.below(held.len() as u64) as usize);
                    assert_eq!(view(&db, w, Some(&snap)), seen, "a snapshot's view changed");
                    rereads.fetch_add(1, Ordering::Relaxed);
                }
            }
            for (w, snap, seen) in held {
                assert_eq!(view(&db, w, Some(&snap)), seen, "a snapshot's view changed");
                rereads.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    {
        let (db, stop, flushes) = (Arc::clone(&db), Arc::clone(&stop), Arc::clone(&flushes));
        handles.push(thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                db.flush().unwrap();
                flushes.fetch_add(1, Ordering::Relaxed);
                thread::sleep(Duration::from_millis(20));
            }
        }));
    }
    {
        let (db, stop, compactions) =
            (Arc::clone(&db), Arc::clone(&stop), Arc::clone(&compactions));
        handles.push(thread::spawn(move || {
            let mut rng = Rng(42);
            while !stop.load(Ordering::Relaxed) {
                if rng.below(4) == 0 {
                    db.compact_all().unwrap();
                } else {
                    let w = rng.below(WRITERS as u64) as usize;
                    let lo = rng.below(u64::from(KEYS)) as u32;
                    db.compact_range(&key(w, lo), &key(w, lo + 16)).unwrap();
                }
                compactions.fetch_add(1, Ordering::Relaxed);
                thread::sleep(Duration::from_millis(50));
            }
        }));
    }
    while Instant::now() < deadline && !handles.iter().any(|h| h.is_finished()) {
        thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.join().expect("a stress thread failed");
    }

    let models: Vec<Model> = writers
        .iter()
        .map(|wr| {
            let mut m = Model::new();
            wr.log.lock().unwrap().iter().for_each(|o| apply(&mut m, o));
            m
        })
        .collect();
    for (w, m) in models.iter().enumerate() {
        assert_eq!(&view(&db, w, None), m, "writer {w}: final state");
    }
    let writes: usize = writers.iter().map(|w| w.log.lock().unwrap().len()).sum();
    let db = Arc::into_inner(db).unwrap();
    db.close().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    for (w, m) in models.iter().enumerate() {
        assert_eq!(&view(&db, w, None), m, "writer {w}: after reopening");
    }
    println!(
        "campaign stress:lsm secs={secs} writes={writes} snapshots={} snapshot_rereads={} point_reads={} \
         flushes={} compactions={} failures=0",
        snapshots.load(Ordering::Relaxed),
        rereads.load(Ordering::Relaxed),
        point_reads.load(Ordering::Relaxed),
        flushes.load(Ordering::Relaxed),
        compactions.load(Ordering::Relaxed),
    );
}
