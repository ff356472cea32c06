//! Level shapes of the LSM engine: dynamic level sizing (L0 into the base level, the base level moving up as
//! the tree grows and down after it shrank), the static mode, and reads staying correct through all of it.

use std::collections::BTreeMap;
use std::sync::Arc;

use keyed_state_lsm::{
    CompactionPriority, Compression, Db, DbStats, ListAppendOperator, Options, ReadOptions,
    SstOptions,
};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// Tiny memtables, files and levels: 5 levels (L4 is the last), base size 16 KiB, multiplier 4.
fn opts(dynamic: bool) -> Options {
    Options {
        memtable_size: 8 << 10,
        max_immutable_memtables: 2,
        l0_compaction_trigger: 2,
        l0_stop_writes_trigger: 8,
        num_levels: 5,
        level_base_size: 16 << 10,
        level_multiplier: 4,
        target_file_size: 8 << 10,
        dynamic_level_bytes: dynamic,
        sst: SstOptions {
            block_size: 1024,
            compression: Compression::None,
            ..SstOptions::default()
        },
        block_cache_size: 1 << 20,
        merge_operator: Some(Arc::new(ListAppendOperator)),
        ..Options::default()
    }
}

const LAST: usize = 4;

fn key(i: u32) -> Vec<u8> {
    format!("k{i:06}").into_bytes()
}

fn value(i: u32, tag: &str) -> Vec<u8> {
    format!("{tag}-{i}-{}", "x".repeat(90)).into_bytes()
}

/// Key `i` of `n`, in a scattered order (7919 is prime, so this is a permutation when `n` is not a multiple).
fn scattered(i: u32, n: u32) -> u32 {
    (i as u64 * 7919 % n as u64) as u32
}

fn scan(db: &Db) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut it = db.iter(ReadOptions::default());
    it.seek_to_first();
    let mut out = Vec::new();
    while it.valid() {
        out.push((it.key().to_vec(), it.value().to_vec()));
        it.next();
    }
    assert!(it.status().is_ok(), "{:?}", it.status());
    out
}

/// Every key of `keys` reads as the model says, and a full scan equals the model.
fn check(db: &Db, model: &Model, keys: impl Iterator<Item = Vec<u8>>) {
    for k in keys {
        assert_eq!(
            db.get(&k).unwrap().map(|v| v.to_vec()),
            model.get(&k).cloned(),
            "{}",
            String::from_utf8_lossy(&k)
        );
    }
    assert_eq!(scan(db), model.clone().into_iter().collect::<Vec<_>>());
}

/// Puts keys `0..n` in a scattered order with `tag`, flushing and waiting for compactions every `chunk`
/// keys; returns the stats after each chunk.
fn grow(db: &Db, model: &mut Model, n: u32, chunk: u32, tag: &str) -> Vec<DbStats> {
    let mut seen = Vec::new();
    for i in 0..n {
        let k = scattered(i, n);
        db.put(&key(k), &value(k, tag)).unwrap();
        model.insert(key(k), value(k, tag));
        if (i + 1) % chunk == 0 {
            db.flush().unwrap();
            db.wait_for_background_work().unwrap();
            seen.push(db.stats());
        }
    }
    seen
}

/// The deepest level L1+ holding data (0 if none).
fn deepest(s: &DbStats) -> usize {
    (1..s.level_files.len())
        .rev()
        .find(|l| s.level_files[*l] > 0)
        .unwrap_or(0)
}

#[test]
fn l0_compacts_into_the_last_level_while_the_tree_is_small() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts(true)).unwrap();
    let mut model = Model::new();
    assert_eq!(db.stats().base_level, LAST);
    for round in 0..3u32 {
        for i in 0..30 {
            let k = round * 30 + i;
            db.put(&key(k), &value(k, "a")).unwrap();
            model.insert(key(k), value(k, "a"));
        }
        db.flush().unwrap();
        // Each flush's compaction (if due) ends before the next flush, so L0 ends with the third file.
        db.wait_for_background_work().unwrap();
    }
    let s = db.stats();
    // Two flushes reached the L0 trigger; their compaction went straight to the last level.
    assert!(s.compactions + s.trivial_moves > 0, "{s:?}");
    assert_eq!(s.base_level, LAST, "{s:?}");
    assert_eq!(&s.level_files[1..LAST], &[0, 0, 0], "{s:?}");
    assert!(s.level_files[LAST] > 0, "{s:?}");
    assert_eq!(s.level_files[0], 1, "{s:?}");
    check(&db, &model, (0..90).map(key));
}

#[test]
fn base_level_moves_up_as_the_tree_grows() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts(true)).unwrap();
    let mut model = Model::new();
    let seen = grow(&db, &mut model, 4000, 100, "a");
    let bases: Vec<usize> = seen.iter().map(|s| s.base_level).collect();
    for s in &seen {
        // L0 compacts into the base level; the levels above it stay empty.
        assert!(
            s.level_files[1..s.base_level].iter().all(|n| *n == 0),
            "{s:?}"
        );
    }
    // Only growing: the base level moves up, never down, from the last level to L1 or L2.
    assert!(bases.windows(2).all(|w| w[1] <= w[0]), "{bases:?}");
    assert_eq!(bases[0], LAST, "{bases:?}");
    assert!(*bases.last().unwrap() <= 2, "{bases:?}");
    // Most data sits in the last level.
    let s = seen.last().unwrap();
    assert!(
        s.level_bytes[1..LAST]
            .iter()
            .all(|b| *b <= s.level_bytes[LAST]),
        "{s:?}"
    );
    check(&db, &model, (0..4000).step_by(7).map(key));
}

#[test]
fn newer_data_stays_above_older_data_with_dynamic_levels() {
    let dir = tempfile::tempdir().unwrap();
    let mut db = Db::open(dir.path(), opts(true)).unwrap();
    let mut model = Model::new();
    // splitmix64: deterministic and dependency-free.
    let mut state = 0x5EED_u64;
    let mut rand = move || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    const KEYS: u64 = 600;
    let mut snapshot = None;
    for step in 0..8000u32 {
        let k = key((rand() % KEYS) as u32);
        match rand() % 20 {
            0..=10 => {
                let v = value(step, "p");
                db.put(&k, &v).unwrap();
                model.insert(k, v);
            }
            11..=16 => {
                let op = format!("m{step}").into_bytes();
                db.merge(&k, &op).unwrap();
                let e = model.entry(k).or_default();
                if !e.is_empty() {
                    e.push(b',');
                }
                e.extend_from_slice(&op);
            }
            17..=18 => {
                db.delete(&k).unwrap();
                model.remove(&k);
            }
            19 if step % 4 == 0 => {
                let a = (rand() % KEYS) as u32;
                let (lo, hi) = (key(a), key(a + (rand() % 60) as u32));
                db.delete_range(&lo, &hi).unwrap();
                let doomed: Vec<Vec<u8>> = model.range(lo..hi).map(|(k, _)| k.clone()).collect();
                for d in doomed {
                    model.remove(&d);
                }
            }
            _ => {}
        }
        if step % 1000 == 999 {
            db.wait_for_background_work().unwrap();
            let s = db.stats();
            assert!(
                s.level_files[1..s.base_level].iter().all(|n| *n == 0),
                "{s:?}"
            );
            check(&db, &model, (0..KEYS as u32).map(key));
        }
        if step == 4000 {
            snapshot = Some((db.snapshot(), model.clone()));
        }
    }
    let s = db.stats();
    assert!(
        s.compactions > 20 && s.level_files[1..].iter().sum::<usize>() > 0,
        "{s:?}"
    );
    let (snap, old) = snapshot.unwrap();
    let mut it = db.iter(ReadOptions {
        snapshot: Some(&snap),
        ..ReadOptions::default()
    });
    it.seek_to_first();
    let mut at_snapshot = Vec::new();
    while it.valid() {
        at_snapshot.push((it.key().to_vec(), it.value().to_vec()));
        it.next();
    }
    drop(it);
    drop(snap);
    assert_eq!(at_snapshot, old.into_iter().collect::<Vec<_>>());
    db.compact_range(&key(100), &key(300)).unwrap();
    check(&db, &model, (0..KEYS as u32).map(key));
    db.compact_all().unwrap();
    let s = db.stats();
    assert_eq!(deepest(&s), LAST, "{s:?}");
    assert_eq!(s.level_files[..LAST].iter().sum::<usize>(), 0, "{s:?}");
    check(&db, &model, (0..KEYS as u32).map(key));
    db.close().unwrap();
    db = Db::open(dir.path(), opts(true)).unwrap();
    check(&db, &model, (0..KEYS as u32).map(key));
}

#[test]
fn base_level_moves_down_after_range_deletes_shrink_the_tree() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts(true)).unwrap();
    let mut model = Model::new();
    grow(&db, &mut model, 4000, 500, "old");
    // Newer versions of the last keys sit in the upper levels.
    for i in 3990..4000 {
        db.put(&key(i), &value(i, "new")).unwrap();
        model.insert(key(i), value(i, "new"));
    }
    db.flush().unwrap();
    db.wait_for_background_work().unwrap();
    let grown = db.stats();
    assert!(grown.base_level <= 2, "{grown:?}");
    // Drop the bulk of the tree: whole files inside the range go at once.
    db.delete_range(&key(0), &key(3990)).unwrap();
    for i in 0..3990 {
        model.remove(&key(i));
    }
    let dropped = db.stats();
    assert!(dropped.files_dropped_by_range_delete > 0, "{dropped:?}");
    // The levels the small tree no longer needs drain downwards; the base level follows.
    db.wait_for_background_work().unwrap();
    let shrunk = db.stats();
    assert!(
        shrunk.base_level > grown.base_level,
        "{grown:?}\n{shrunk:?}"
    );
    assert!(
        shrunk.level_files[1..shrunk.base_level]
            .iter()
            .all(|n| *n == 0),
        "{shrunk:?}"
    );
    check(&db, &model, (3980..4000).map(key));
    // Data written now goes into the new base level, above the older versions still deeper down.
    for round in 0..3 {
        for i in 3990..4000 {
            let tag = format!("newer{round}");
            db.put(&key(i), &value(i, &tag)).unwrap();
            model.insert(key(i), value(i, &tag));
        }
        db.flush().unwrap();
        db.wait_for_background_work().unwrap();
        check(&db, &model, (3980..4000).map(key));
    }
    db.compact_all().unwrap();
    check(&db, &model, (3980..4000).map(key));
}

#[test]
fn static_level_mode_still_compacts_level_by_level() {
    for priority in [
        CompactionPriority::MinOverlappingRatio,
        CompactionPriority::RoundRobin,
    ] {
        let dir = tempfile::tempdir().unwrap();
        let o = Options {
            compaction_priority: priority,
            ..opts(false)
        };
        let db = Db::open(dir.path(), o).unwrap();
        let mut model = Model::new();
        let seen = grow(&db, &mut model, 4000, 250, "a");
        for s in &seen {
            assert_eq!(s.base_level, 1);
            // L0 compacts into L1 and each level into the next: no hole between L1 and the deepest level.
            assert!(
                s.level_files[1..=deepest(s)].iter().all(|n| *n > 0),
                "{s:?}"
            );
        }
        let s = seen.last().unwrap();
        assert!(deepest(s) >= 3, "{s:?}");
        // Every level within its static target: 16 KiB, 64 KiB, 256 KiB.
        for (l, target) in [(1, 16u64 << 10), (2, 64 << 10), (3, 256 << 10)] {
            assert!(s.level_bytes[l] <= target, "L{l} {s:?}");
        }
        check(&db, &model, (0..4000).step_by(7).map(key));
    }
}

#[test]
fn a_static_tree_reopened_with_dynamic_levels_keeps_newer_data_above_older() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts(false)).unwrap();
    let mut model = Model::new();
    grow(&db, &mut model, 3000, 500, "old");
    // Newer versions of every third key, in L0 and L1.
    for i in (0..3000).step_by(3) {
        db.put(&key(i), &value(i, "new")).unwrap();
        model.insert(key(i), value(i, "new"));
    }
    db.close().unwrap();
    let s_static = {
        let db = Db::open(dir.path(), opts(false)).unwrap();
        let s = db.stats();
        db.close().unwrap();
        s
    };
    assert!(s_static.level_files[1] > 0, "{s_static:?}");
    let db = Db::open(dir.path(), opts(true)).unwrap();
    db.wait_for_background_work().unwrap();
    let s = db.stats();
    assert!(
        s.level_files[1..s.base_level].iter().all(|n| *n == 0),
        "{s:?}"
    );
    check(&db, &model, (0..3000).map(key));
    // And back: a dynamic tree opened with static targets.
    db.close().unwrap();
    let db = Db::open(dir.path(), opts(false)).unwrap();
    for i in (1..3000).step_by(3) {
        db.put(&key(i), &value(i, "newest")).unwrap();
        model.insert(key(i), value(i, "newest"));
    }
    db.flush().unwrap();
    db.wait_for_background_work().unwrap();
    check(&db, &model, (0..3000).map(key));
}
