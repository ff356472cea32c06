//! Model test: the engine against a `BTreeMap`, with flushes, compactions, snapshots and reopen interleaved.

use std::collections::BTreeMap;
use std::sync::Arc;

use keyed_state_lsm::{
    Compression, Db, EnvOptions, ListAppendOperator, Options, PrefixExtractor, ReadOptions,
    SharedEnv, Snapshot, SstOptions, WriteBatch,
};
use proptest::prelude::*;

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

#[derive(Debug, Clone)]
enum Op {
    Put(u8, u8),
    Delete(u8),
    Merge(u8, u8),
    DeleteRange(u8, u8),
    Batch(Vec<(u8, u8)>),
    Ingest(Vec<u8>, u8),
    Flush,
    CompactAll,
    CompactRange(u8, u8),
    TakeSnapshot,
    CheckSnapshot(usize),
    /// Close (or crash, with the WAL) and reopen; `true` also switches between dynamic and static level sizing.
    Reopen(bool),
    Get(u8),
    Scan(Option<u8>),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        10 => (any::<u8>(), any::<u8>()).prop_map(|(k, v)| Op::Put(k, v)),
        3 => any::<u8>().prop_map(Op::Delete),
        6 => (any::<u8>(), any::<u8>()).prop_map(|(k, v)| Op::Merge(k, v)),
        1 => (any::<u8>(), any::<u8>()).prop_map(|(a, b)| Op::DeleteRange(a, b)),
        2 => prop::collection::vec((any::<u8>(), any::<u8>()), 1..8).prop_map(Op::Batch),
        1 => (prop::collection::vec(any::<u8>(), 1..10), any::<u8>()).prop_map(|(k, v)| Op::Ingest(k, v)),
        1 => Just(Op::Flush),
        1 => Just(Op::CompactAll),
        1 => (any::<u8>(), any::<u8>()).prop_map(|(a, b)| Op::CompactRange(a, b)),
        1 => Just(Op::TakeSnapshot),
        1 => any::<usize>().prop_map(Op::CheckSnapshot),
        1 => any::<bool>().prop_map(Op::Reopen),
        3 => any::<u8>().prop_map(Op::Get),
        1 => prop::option::of(any::<u8>()).prop_map(Op::Scan),
    ]
}

const KEYS: u8 = 24;

fn key(k: u8) -> Vec<u8> {
    format!("k{:02}", k % KEYS).into_bytes()
}

fn value(v: u8) -> Vec<u8> {
    // Long enough that the tiny memtables fill up and flush.
    format!("v{v:03}-{}", "x".repeat(40)).into_bytes()
}

/// The twin's value for `v` (see [`Rows::Shared`]): as long as [`value`]'s, never equal to one.
fn twin_value(v: u8) -> Vec<u8> {
    format!("w{v:03}-{}", "y".repeat(40)).into_bytes()
}

/// The row cache a model run uses.
#[derive(Debug, Clone, Copy)]
enum Rows {
    /// `Some(0)`: none.
    Off,
    /// The engine's default.
    Default,
    /// A row cache of the engine's own of this many bytes.
    Own(usize),
    /// The row cache of an environment with a memory budget of this many bytes, shared with a twin engine
    /// that takes the same writes with other values and reads the same keys: same keys, file numbers
    /// counting from the same start, different rows.
    Shared(usize),
}

/// Two-byte prefixes (`k0`, `k1`, `k2`: the model's scan prefixes) of the keys `k0*` and `k1*`, and of
/// `k2*` once `grown` (an extractor's domain may grow: files written before must still read whole).
struct ModelPrefix {
    grown: bool,
}

impl PrefixExtractor for ModelPrefix {
    fn name(&self) -> &str {
        "model.two-bytes"
    }

    fn prefix_len(&self, key: &[u8]) -> Option<usize> {
        match key.get(..2)? {
            b"k0" | b"k1" => Some(2),
            b"k2" if self.grown => Some(2),
            _ => None,
        }
    }
}

/// `grown`: the prefix extractor maps `k2*` keys too (set from the first reopen on). With the WAL off,
/// files have no whole-key filter, so only prefixes rule files out.
/// `rows`: the row cache (an environment's for [`Rows::Shared`], given as `env`).
fn opts(
    wal: bool,
    dynamic_level_bytes: bool,
    grown: bool,
    rows: Rows,
    env: Option<&SharedEnv>,
) -> Options {
    Options {
        row_cache_size: match rows {
            Rows::Off => Some(0),
            Rows::Own(bytes) => Some(bytes),
            Rows::Default | Rows::Shared(_) => None,
        },
        env: env.cloned(),
        wal,
        dynamic_level_bytes,
        memtable_size: 2 << 10,
        max_immutable_memtables: 2,
        l0_compaction_trigger: 2,
        l0_stop_writes_trigger: 6,
        num_levels: 4,
        level_base_size: 8 << 10,
        level_multiplier: 2,
        target_file_size: 2 << 10,
        sst: SstOptions {
            block_size: 256,
            compression: Compression::Lz4,
            bloom_bits_per_key: if wal { 10 } else { 0 },
            prefix_extractor: Some(Arc::new(ModelPrefix { grown })),
            ..SstOptions::default()
        },
        block_cache_size: 256 << 10,
        merge_operator: Some(Arc::new(ListAppendOperator)),
        ..Options::default()
    }
}

fn model_merge(m: &mut Model, k: Vec<u8>, op: &[u8]) {
    let e = m.entry(k).or_default();
    if !e.is_empty() {
        e.push(b',');
    }
    e.extend_from_slice(op);
}

fn scan(db: &Db, snapshot: Option<&Snapshot>, prefix: Option<Vec<u8>>) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut it = db.iter(ReadOptions {
        snapshot,
        prefix,
        ..ReadOptions::default()
    });
    it.seek_to_first();
    let mut out = Vec::new();
    while it.valid() {
        out.push((it.key().to_vec(), it.value().to_vec()));
        it.next();
    }
    assert!(it.status().is_ok());
    out
}

fn run(ops: Vec<Op>, wal: bool, mut dynamic: bool, rows: Rows) {
    // tmpfs when available: the test exercises logic, not the disk's fsync latency.
    let shm = std::path::Path::new("/dev/shm");
    let dir = if shm.is_dir() {
        tempfile::tempdir_in(shm)
    } else {
        tempfile::tempdir()
    }
    .unwrap();
    let mut grown = false;
    let env = match rows {
        Rows::Shared(budget) => Some(
            SharedEnv::new(EnvOptions {
                memory_budget: Some(budget),
                ..EnvOptions::default()
            })
            .unwrap(),
        ),
        _ => None,
    };
    let open = |dir: &std::path::Path, dynamic: bool, grown: bool| {
        Db::open(dir, opts(wal, dynamic, grown, rows, env.as_ref())).unwrap()
    };
    let mut db = Some(open(dir.path(), dynamic, grown));
    let twin_dir = tempfile::tempdir().unwrap();
    let mut twin = env.as_ref().map(|_| open(twin_dir.path(), dynamic, grown));
    let mut model = Model::new();
    let mut snaps: Vec<(Snapshot, Model)> = Vec::new();
    for op in ops {
        if let Some(t) = &twin {
            twin_apply(t, &op);
        }
        let d = db.as_ref().unwrap();
        match op {
            Op::Put(k, v) => {
                d.put(&key(k), &value(v)).unwrap();
                model.insert(key(k), value(v));
            }
            Op::Delete(k) => {
                d.delete(&key(k)).unwrap();
                model.remove(&key(k));
            }
            Op::Merge(k, v) => {
                let o = format!("m{v}").into_bytes();
                d.merge(&key(k), &o).unwrap();
                model_merge(&mut model, key(k), &o);
            }
            Op::DeleteRange(a, b) => {
                let (a, b) = (key(a), key(b));
                d.delete_range(&a, &b).unwrap();
                if a < b {
                    let doomed: Vec<Vec<u8>> = model.range(a..b).map(|(k, _)| k.clone()).collect();
                    for k in doomed {
                        model.remove(&k);
                    }
                }
            }
            Op::Batch(items) => {
                let mut b = WriteBatch::new();
                for (k, v) in items {
                    if v % 3 == 0 {
                        b.delete(&key(k));
                        model.remove(&key(k));
                    } else if v % 3 == 1 {
                        b.merge(&key(k), b"b");
                        model_merge(&mut model, key(k), b"b");
                    } else {
                        b.put(&key(k), &value(v));
                        model.insert(key(k), value(v));
                    }
                }
                d.write(&b).unwrap();
            }
            Op::Ingest(keys, v) => {
                let keys: std::collections::BTreeSet<Vec<u8>> = keys.into_iter().map(key).collect();
                let keys: Vec<Vec<u8>> = keys.into_iter().collect();
                if v % 2 == 1 && keys.len() >= 2 {
                    // Two runs in key order, written by two threads.
                    let (a, b) = keys.split_at(keys.len() / 2);
                    let run = |ks: &[Vec<u8>]| -> Vec<(Vec<u8>, Vec<u8>)> {
                        ks.iter().map(|k| (k.clone(), value(v))).collect()
                    };
                    d.ingest_sorted_runs(vec![run(a), run(b)]).unwrap();
                } else {
                    d.ingest_sorted(keys.iter().map(|k| (k.clone(), value(v))))
                        .unwrap();
                }
                for k in keys {
                    model.insert(k, value(v));
                }
            }
            Op::Flush => d.flush().unwrap(),
            Op::CompactAll => d.compact_all().unwrap(),
            Op::CompactRange(a, b) => {
                let (a, b) = (key(a.min(b)), key(a.max(b)));
                d.compact_range(&a, &b).unwrap()
            }
            Op::TakeSnapshot => snaps.push((d.snapshot(), model.clone())),
            Op::CheckSnapshot(i) => {
                if !snaps.is_empty() {
                    let (s, m) = &snaps[i % snaps.len()];
                    let got = scan(d, Some(s), None);
                    assert_eq!(
                        got,
                        m.clone().into_iter().collect::<Vec<_>>(),
                        "snapshot {}",
                        s.seqno()
                    );
                    for k in 0..KEYS {
                        assert_eq!(
                            d.get_at(&key(k), s).unwrap().map(|v| v.to_vec()),
                            m.get(&key(k)).cloned()
                        );
                    }
                }
            }
            Op::Reopen(switch) => {
                snaps.clear();
                dynamic ^= switch;
                if wal {
                    // A crash: nothing is flushed, the WAL must bring back every write.
                    db.take().unwrap().abandon();
                } else {
                    db.take().unwrap().close().unwrap();
                }
                grown = true;
                db = Some(open(dir.path(), dynamic, grown));
                if let Some(t) = twin.take() {
                    t.close().unwrap();
                    twin = Some(open(twin_dir.path(), dynamic, grown));
                }
            }
            Op::Get(k) => {
                // Twice: the row cache admits a row on its second miss, so the next reads can hit it.
                for _ in 0..2 {
                    assert_eq!(
                        d.get(&key(k)).unwrap().map(|v| v.to_vec()),
                        model.get(&key(k)).cloned()
                    );
                }
            }
            Op::Scan(prefix) => {
                let p = prefix.map(|p| format!("k{}", p % 3).into_bytes());
                let got = scan(d, None, p.clone());
                let want: Vec<(Vec<u8>, Vec<u8>)> = model
                    .iter()
                    .filter(|(k, _)| p.as_ref().is_none_or(|p| k.starts_with(p)))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                assert_eq!(got, want);
            }
        }
    }
    let d = db.as_ref().unwrap();
    if std::env::var_os("LSM_MODEL_STATS").is_some() {
        eprintln!("{:?}", d.stats());
    }
    for (s, m) in &snaps {
        assert_eq!(
            scan(d, Some(s), None),
            m.clone().into_iter().collect::<Vec<_>>()
        );
    }
    assert_eq!(
        scan(d, None, None),
        model.clone().into_iter().collect::<Vec<_>>()
    );
    snaps.clear();
    db.take().unwrap().close().unwrap();
    let d = open(dir.path(), dynamic, true);
    assert_eq!(scan(&d, None, None), model.into_iter().collect::<Vec<_>>());
}

/// The twin of [`Rows::Shared`] takes `op`'s writes with [`twin_value`]s, its flushes and compactions, and
/// reads its keys twice (so that their rows are admitted into the shared cache); it is not checked.
fn twin_apply(t: &Db, op: &Op) {
    match op {
        Op::Put(k, v) => t.put(&key(*k), &twin_value(*v)).unwrap(),
        Op::Delete(k) => t.delete(&key(*k)).unwrap(),
        Op::Merge(k, v) => t.merge(&key(*k), format!("n{v}").as_bytes()).unwrap(),
        Op::Batch(items) => {
            let mut b = WriteBatch::new();
            for (k, v) in items {
                b.put(&key(*k), &twin_value(*v));
            }
            t.write(&b).unwrap();
        }
        Op::Flush => t.flush().unwrap(),
        Op::CompactAll => t.compact_all().unwrap(),
        Op::Get(k) => {
            for _ in 0..2 {
                t.get(&key(*k)).unwrap();
            }
        }
        Op::Scan(_) => {
            for k in 0..KEYS {
                for _ in 0..2 {
                    t.get(&key(k)).unwrap();
                }
            }
        }
        _ => {}
    }
}

proptest! {
    /// `dynamic`: the level sizing the database is opened with (dynamic or static targets).
    #[test]
    fn engine_matches_btreemap_model(ops in prop::collection::vec(op(), 1..80), dynamic in any::<bool>()) {
        run(ops, false, dynamic, Rows::Default);
    }

    /// Without a row cache (`row_cache_size` `Some(0)`).
    #[test]
    fn engine_matches_btreemap_model_without_a_row_cache(ops in prop::collection::vec(op(), 1..80), dynamic in any::<bool>()) {
        run(ops, false, dynamic, Rows::Off);
    }

    /// On an environment's shared row cache, beside a twin engine that writes other values under the same
    /// keys into files numbered from the same start and reads them: 1 MiB of budget gives a 64 KiB row
    /// cache (evicts constantly), 16 MiB a 1 MiB one. Fails if an engine can read the twin's rows.
    #[test]
    fn engine_matches_btreemap_model_on_a_shared_row_cache(
        ops in prop::collection::vec(op(), 1..80),
        dynamic in any::<bool>(),
        budget in prop_oneof![Just(1usize << 20), Just(16usize << 20)],
    ) {
        run(ops, false, dynamic, Rows::Shared(budget));
    }

    /// With a row cache: 1 KiB caches nothing (every entry is larger than an eighth of a shard), 48 KiB
    /// evicts constantly, 1 MiB holds every key of every file. Snapshot checks read every key at older
    /// seqnos (bypassing the cache for newer files, filling it from older ones) between latest reads.
    #[test]
    fn engine_matches_btreemap_model_with_a_row_cache(
        ops in prop::collection::vec(op(), 1..80),
        dynamic in any::<bool>(),
        row_cache in prop_oneof![Just(1usize << 10), Just(48usize << 10), Just(1usize << 20)],
    ) {
        run(ops, false, dynamic, Rows::Own(row_cache));
    }

    /// With the WAL on, `Reopen` is a crash (no flush) and every write must come back.
    #[test]
    fn engine_with_wal_survives_crashes(ops in prop::collection::vec(op(), 1..80), dynamic in any::<bool>()) {
        run(ops, true, dynamic, Rows::Default);
    }
}
