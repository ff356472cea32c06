//! Small flushes against a large base level (one flush per checkpoint, many states): L0's sorted runs merge
//! within L0 until L0 holds `l0_base_ratio` of the base level (`design/lsm-many-states.md`).

use std::collections::BTreeMap;
use std::sync::Arc;

use keyed_state_lsm::{
    Compression, Db, ListAppendOperator, Options, ReadOptions, Snapshot, SstOptions,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

const KEYS: u32 = 4000;

fn key(i: u32) -> Vec<u8> {
    // Keys hashed over the key space, as key groups spread a state's keys: every flush overlaps every
    // base-level file.
    format!("k{:05}", (i.wrapping_mul(2_654_435_761)) % 100_000).into_bytes()
}

fn value(rng: &mut StdRng) -> Vec<u8> {
    (0..60).map(|_| b'a' + rng.random_range(0..16u8)).collect()
}

fn opts() -> Options {
    Options {
        merge_operator: Some(Arc::new(ListAppendOperator)),
        target_file_size: 64 << 10,
        sst: SstOptions {
            compression: Compression::None,
            ..SstOptions::default()
        },
        ..Options::default()
    }
}

fn scan(db: &Db, snapshot: Option<&Snapshot>) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut it = db.iter(ReadOptions {
        snapshot,
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

fn model_merge(m: &mut Model, k: Vec<u8>, op: &[u8]) {
    let e = m.entry(k).or_default();
    if !e.is_empty() {
        e.push(b',');
    }
    e.extend_from_slice(op);
}

/// The bytes of the last level and the L0 runs.
fn shape(db: &Db) -> (u64, usize) {
    let s = db.stats();
    (*s.level_bytes.last().unwrap(), s.l0_sorted_runs)
}

#[test]
fn small_flushes_merge_within_l0_and_every_read_matches_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    let mut rng = StdRng::seed_from_u64(30);
    let mut model = Model::new();
    for i in 0..KEYS {
        let v = value(&mut rng);
        db.put(&key(i), &v).unwrap();
        model.insert(key(i), v);
    }
    db.compact_all().unwrap();
    let mut snapshots: Vec<(Snapshot, Model)> = Vec::new();
    let (mut merges_within_l0, mut went_to_base) = (0, 0);
    for round in 0..48 {
        // 1 % of the keys per flush, with deletes, merge operands and now and then a range delete.
        for _ in 0..KEYS / 100 {
            let k = key(rng.random_range(0..KEYS));
            match rng.random_range(0..10) {
                0 => {
                    db.delete(&k).unwrap();
                    model.remove(&k);
                }
                1..=3 => {
                    let op = format!("m{round}").into_bytes();
                    db.merge(&k, &op).unwrap();
                    model_merge(&mut model, k, &op);
                }
                _ => {
                    let v = value(&mut rng);
                    db.put(&k, &v).unwrap();
                    model.insert(k, v);
                }
            }
        }
        if round % 11 == 5 {
            let n = rng.random_range(0..99_500u32);
            let (a, b) = (
                format!("k{n:05}").into_bytes(),
                format!("k{:05}", n + 500).into_bytes(),
            );
            db.delete_range(&a, &b).unwrap();
            model.retain(|k, _| k.as_slice() < a.as_slice() || k.as_slice() >= b.as_slice());
        }
        if round % 7 == 3 {
            snapshots.push((db.snapshot(), model.clone()));
        }
        if round % 13 == 12 && !snapshots.is_empty() {
            snapshots.remove(0);
        }
        let before = shape(&db);
        db.flush().unwrap();
        db.wait_for_background_work().unwrap();
        let after = shape(&db);
        if after.0 == before.0 && after.1 < before.1 + 1 {
            merges_within_l0 += 1;
        }
        if after.0 != before.0 {
            went_to_base += 1;
        }
        assert!(after.1 <= 10, "round {round}: {} L0 runs", after.1);
        let want: Vec<(Vec<u8>, Vec<u8>)> =
            model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        assert_eq!(scan(&db, None), want, "round {round}");
        for _ in 0..50 {
            let k = key(rng.random_range(0..KEYS));
            assert_eq!(
                db.get(&k).unwrap().map(|v| v.to_vec()),
                model.get(&k).cloned(),
                "round {round}"
            );
        }
        for (s, m) in &snapshots {
            let want: Vec<(Vec<u8>, Vec<u8>)> =
                m.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            assert_eq!(scan(&db, Some(s)), want, "snapshot, round {round}");
        }
    }
    assert!(merges_within_l0 >= 4, "{merges_within_l0} merges within L0");
    assert!(went_to_base >= 1, "L0 never went into the base level");
    drop(snapshots);
    drop(db);
    let db = Db::open(dir.path(), opts()).unwrap();
    let want: Vec<(Vec<u8>, Vec<u8>)> = model.into_iter().collect();
    assert_eq!(scan(&db, None), want, "after reopen");
}

#[test]
fn with_l0_base_ratio_zero_every_l0_compaction_goes_to_the_base_level() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(
        dir.path(),
        Options {
            l0_base_ratio: 0.0,
            ..opts()
        },
    )
    .unwrap();
    let mut rng = StdRng::seed_from_u64(1);
    for i in 0..KEYS {
        db.put(&key(i), &value(&mut rng)).unwrap();
    }
    db.compact_all().unwrap();
    for _ in 0..4 {
        for _ in 0..KEYS / 100 {
            db.put(&key(rng.random_range(0..KEYS)), &value(&mut rng))
                .unwrap();
        }
        db.flush().unwrap();
        db.wait_for_background_work().unwrap();
    }
    let s = db.stats();
    assert_eq!(
        s.l0_sorted_runs, 0,
        "the 4th flush sent L0 to the base level"
    );
}

/// What 30 checkpoints of 24 value states (2,000 keys each, 1 % of the keys changed before each, background
/// work settled) did on an LSM backend with `options`: (checkpoints that uploaded only their flush, bytes
/// uploaded by them, the state's bytes at the end, the engine's write stall count and time, the most L0
/// sorted runs seen).
fn thirty_small_checkpoints_of_24_states(options: Options) -> (u64, u64, u64, (u64, u64), usize) {
    use keyed_state::backend::lsm::LsmBackend;
    use keyed_state::checkpoint::{CheckpointOptions, CheckpointStorage, Checkpointer};
    use keyed_state::keygroup::KeyGroupRange;
    use keyed_state::serializer::{BytesSerializer, LongSerializer};
    use keyed_state::state::{KeyedStateStore, ValueStateDescriptor};

    const STATES: usize = 24;
    const STATE_KEYS: i64 = 2000;
    let cfg = KeyedStateStore::config_for(&LongSerializer, 128, KeyGroupRange::new(0, 127));
    let root = tempfile::tempdir().unwrap();
    let storage = Arc::new(CheckpointStorage::local(root.path()).unwrap());
    // The engine's flushes and L0 alone: without the read-modify-write cache, which would hold the whole
    // state dirty and hand it to the checkpoints as files of their own.
    let backend = LsmBackend::temp_with(cfg.clone(), options)
        .and_then(|b| b.with_rmw_cache(0))
        .unwrap();
    let engine = backend.engine();
    let mut store = KeyedStateStore::new(Box::new(backend), LongSerializer).unwrap();
    let states: Vec<_> = (0..STATES)
        .map(|i| {
            store
                .register_value(ValueStateDescriptor::new(format!("s{i}"), BytesSerializer))
                .unwrap()
        })
        .collect();
    let ck = Checkpointer::open(Arc::clone(&storage), &cfg, CheckpointOptions::default()).unwrap();
    let mut rng = StdRng::seed_from_u64(24);
    let write = |store: &mut KeyedStateStore<LongSerializer>, k: i64, rng: &mut StdRng| {
        store.set_current_key(&k).unwrap();
        for s in &states {
            store.value(s).unwrap().update(&value(rng)).unwrap();
        }
    };
    for k in 0..STATE_KEYS {
        write(&mut store, k, &mut rng);
    }
    let (mut flush_only, mut uploaded, mut state_size, mut max_runs) = (0u64, 0u64, 0u64, 0);
    for id in 1..=31 {
        if id > 1 {
            for _ in 0..STATE_KEYS / 100 {
                write(&mut store, rng.random_range(0..STATE_KEYS), &mut rng);
            }
        }
        engine.wait_for_background_work().unwrap();
        let s = store.checkpoint(&ck, id).unwrap().run().unwrap();
        ck.notify_complete(id).unwrap();
        if id > 1 {
            uploaded += s.bytes_written;
            flush_only += u64::from(s.files_new == 1);
        }
        state_size = s.state_size;
        max_runs = max_runs.max(engine.stats().l0_sorted_runs);
    }
    let st = engine.stats();
    (
        flush_only,
        uploaded,
        state_size,
        (st.write_stalls, st.write_stall_micros),
        max_runs,
    )
}

#[test]
fn twenty_four_value_states_at_the_defaults_never_stall_and_thirty_small_checkpoints_upload_less_than_three_states(
) {
    let (flush_only, uploaded, state_size, stalls, max_runs) =
        thirty_small_checkpoints_of_24_states(Options {
            // What the compaction rule leaves to upload when every capture is the whole version.
            checkpoint_view: false,
            ..Options::default()
        });
    assert_eq!(stalls, (0, 0));
    assert!(max_runs <= 10, "{max_runs} L0 runs");
    // Most checkpoints upload only their flush, and L0 goes into the base level (the last level: the whole
    // state) about once in 30 checkpoints.
    assert!(
        flush_only > 15,
        "{flush_only} of 30 checkpoints uploaded only their flush"
    );
    assert!(
        uploaded < 3 * state_size,
        "{uploaded} bytes uploaded by 30 checkpoints, state {state_size} bytes"
    );
}

#[test]
fn with_the_leveled_rule_alone_every_fourth_small_checkpoint_uploads_the_whole_state() {
    let (_, uploaded, state_size, stalls, _) = thirty_small_checkpoints_of_24_states(Options {
        l0_base_ratio: 0.0,
        checkpoint_view: false,
        ..Options::default()
    });
    assert_eq!(stalls, (0, 0));
    assert!(
        uploaded > 6 * state_size,
        "{uploaded} bytes uploaded by 30 checkpoints, state {state_size} bytes"
    );
}
