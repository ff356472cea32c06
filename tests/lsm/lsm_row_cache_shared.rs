//! The row cache by default: one per environment with a memory budget, shared by its engines (their rows
//! keyed by owner tag, file number and key) and charged to the budget once for what it holds; one of its
//! own for an engine with a block cache of its own; none when `row_cache_size` is `Some(0)`.

use keyed_state_lsm::{Compression, Db, EnvOptions, Options, SharedEnv, SstOptions};

const MIB: usize = 1 << 20;

fn env(budget: usize) -> SharedEnv {
    SharedEnv::new(EnvOptions {
        memory_budget: Some(budget),
        ..EnvOptions::default()
    })
    .unwrap()
}

/// Engine options of these tests: 256-byte blocks (many blocks from few rows), no compaction.
fn small_blocks() -> Options {
    Options {
        sst: SstOptions {
            block_size: 256,
            ..SstOptions::default()
        },
        auto_compaction: false,
        ..Options::default()
    }
}

fn opts_on(env: &SharedEnv) -> Options {
    Options {
        env: Some(env.clone()),
        ..small_blocks()
    }
}

/// `n` engines opened on `env`, each in a temporary directory (returned with them: keep it while they live).
fn engines_on(env: &SharedEnv, n: usize) -> (Vec<tempfile::TempDir>, Vec<Db>) {
    let dirs: Vec<_> = (0..n).map(|_| tempfile::tempdir().unwrap()).collect();
    let dbs = dirs
        .iter()
        .map(|d| Db::open(d.path(), opts_on(env)).unwrap())
        .collect();
    (dirs, dbs)
}

fn key(i: u32) -> Vec<u8> {
    format!("key{i:05}").into_bytes()
}

fn value(engine: &str, i: u32) -> Vec<u8> {
    format!("{engine}-{i:05}-{}", "v".repeat(60)).into_bytes()
}

/// Writes `n` keys with `engine`'s values and flushes them into one file.
fn load(db: &Db, engine: &str, n: u32) {
    for i in 0..n {
        db.put(&key(i), &value(engine, i)).unwrap();
    }
    db.flush().unwrap();
}

/// Reads every key `times` times, checking `engine`'s values.
fn read(db: &Db, engine: &str, n: u32, times: usize) {
    for i in 0..n {
        for _ in 0..times {
            assert_eq!(
                db.get(&key(i)).unwrap().map(|v| v.to_vec()),
                Some(value(engine, i)),
                "key {i} of {engine}"
            );
        }
    }
}

fn sst_names(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".sst"))
        .collect();
    names.sort();
    names
}

#[test]
fn two_engines_on_one_environment_do_not_see_each_others_rows() {
    let env = env(64 * MIB);
    let (da, db_) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = Db::open(da.path(), opts_on(&env)).unwrap();
    let b = Db::open(db_.path(), opts_on(&env)).unwrap();
    load(&a, "a", 200);
    load(&b, "b", 200);
    // Same keys in files of the same numbers: only the owner tag tells their rows apart.
    assert_eq!(sst_names(da.path()), sst_names(db_.path()));
    assert!(!sst_names(da.path()).is_empty());
    // A's rows admitted (second miss) and hit (third read).
    read(&a, "a", 200, 3);
    assert_eq!(a.stats().row_cache_hits, 200, "{:?}", a.stats());
    assert!(env.stats().row_cache_entries > 0);
    // B reads its own values: every first read misses, whatever A cached.
    read(&b, "b", 200, 1);
    assert_eq!(b.stats().row_cache_hits, 0, "{:?}", b.stats());
    read(&b, "b", 200, 2);
    assert_eq!(b.stats().row_cache_hits, 200);
    // Both engines' rows now live side by side; each reads its own.
    read(&a, "a", 200, 1);
    read(&b, "b", 200, 1);
    assert_eq!(a.stats().row_cache_hits, 400);
    assert_eq!(b.stats().row_cache_hits, 400);
}

#[test]
fn a_compaction_erases_its_engines_rows_of_the_deleted_files_only() {
    let env = env(64 * MIB);
    let (da, db_) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = Db::open(da.path(), opts_on(&env)).unwrap();
    let b = Db::open(db_.path(), opts_on(&env)).unwrap();
    // Enough rows for several segments per shard, so that A's own segments are freed.
    let n = 8_000;
    load(&a, "a", n);
    load(&b, "b", n);
    // Same keys in files of the same numbers: only the owner tag tells their rows apart.
    assert_eq!(sst_names(da.path()), sst_names(db_.path()));
    read(&a, "a", n, 2);
    let rows_a = a.stats().row_cache_rows;
    read(&b, "b", n, 2);
    assert_eq!(b.stats().row_cache_rows, 2 * rows_a);
    let held = env.stats().memory.row_cache;
    // A compacts its file into a new one (with one more key): A's rows of the deleted file go, and their
    // memory is given back to the budget; B's rows of its file of the same number stay and still answer B.
    a.put(b"zz", b"v").unwrap();
    a.flush().unwrap();
    a.compact_all().unwrap();
    assert_eq!(a.stats().row_cache_rows, rows_a);
    let s = env.stats();
    assert!(s.memory.row_cache < held, "{held} {s:?}");
    assert_eq!(
        s.memory.row_cache,
        s.row_cache_capacity.unwrap_or(0) / 32 + s.row_cache_entries
    );
    let hits = b.stats().row_cache_hits;
    read(&b, "b", n, 1);
    assert_eq!(b.stats().row_cache_hits, hits + u64::from(n));
    read(&a, "a", n, 1);
}

#[test]
fn the_row_cache_is_charged_once_however_many_engines_open() {
    let budget = 64 * MIB;
    let env = env(budget);
    let s = env.stats();
    assert_eq!(s.row_cache_capacity, Some(budget / 16));
    // Before any engine reads, nothing is charged; the doorkeeper's table (1/32 of the capacity) is
    // allocated and charged at the first miss.
    assert_eq!(s.memory.row_cache, 0);
    let door = budget / 16 / 32;
    let (_dirs, dbs) = engines_on(&env, 8);
    let s = env.stats();
    assert_eq!(s.memory.row_cache, 0, "opening engines charges nothing");
    assert_eq!(s.memory.reserved, 0);
    for (e, db) in dbs.iter().enumerate() {
        load(db, &format!("e{e}"), 100);
        read(db, &format!("e{e}"), 100, 3);
    }
    // The entries are charged as they come, once, within the capacity; the block cache gets what is left.
    // A flush or compaction still running lets go of memory between the figures of one read: wait for the
    // engines, then take figures that agree (the block cache's bound follows the budget a step later).
    for db in &dbs {
        db.wait_for_background_work().unwrap();
    }
    let parts = |s: &keyed_state_lsm::EnvStats| {
        let others = s.memory.memtables() + s.memory.sst_metadata + s.memory.reserved;
        s.block_cache_capacity.unwrap() + s.memory.row_cache + others
    };
    let mut s = env.stats();
    for _ in 0..200 {
        if parts(&s) <= budget && parts(&s) + 16 > budget {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
        s = env.stats();
    }
    assert_eq!(s.memory.row_cache, door + s.row_cache_entries);
    assert!(s.row_cache_entries > 8 * 100 * 100, "{s:?}");
    assert!(s.memory.row_cache <= budget / 16);
    assert!(parts(&s) <= budget && parts(&s) + 16 > budget, "{s:?}");
    assert_eq!(s.memory.total(), env.memory().usage());
    drop(dbs);
    // The cache is the environment's and stays, but a closed engine's rows go with it: only the
    // doorkeeper's table is left charged.
    let s = env.stats();
    assert_eq!(
        (s.memory.row_cache, s.row_cache_entries),
        (door, 0),
        "{s:?}"
    );
}

#[test]
fn closing_an_engine_does_not_leave_its_rows_serving_another() {
    let env = env(64 * MIB);
    let da = tempfile::tempdir().unwrap();
    let a = Db::open(da.path(), opts_on(&env)).unwrap();
    load(&a, "a", 100);
    read(&a, "a", 100, 3);
    assert_eq!(a.stats().row_cache_hits, 100);
    let a_files = sst_names(da.path());
    a.close().unwrap();
    // A new engine whose files have the numbers A's had, with other values under the same keys.
    let db_ = tempfile::tempdir().unwrap();
    let b = Db::open(db_.path(), opts_on(&env)).unwrap();
    load(&b, "b", 100);
    assert_eq!(sst_names(db_.path()), a_files);
    read(&b, "b", 100, 1);
    assert_eq!(b.stats().row_cache_hits, 0, "{:?}", b.stats());
    // A reopened reads its own files again, under a new tag: misses first, then its own rows.
    let a = Db::open(da.path(), opts_on(&env)).unwrap();
    read(&a, "a", 100, 1);
    assert_eq!(a.stats().row_cache_hits, 0);
    read(&a, "a", 100, 2);
    assert_eq!(a.stats().row_cache_hits, 100);
    read(&b, "b", 100, 2);
}

#[test]
fn an_engine_can_turn_the_row_cache_off_or_keep_one_of_its_own() {
    let env = env(64 * MIB);
    let (d0, d1) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let off = Db::open(
        d0.path(),
        Options {
            row_cache_size: Some(0),
            ..opts_on(&env)
        },
    )
    .unwrap();
    let own = Db::open(
        d1.path(),
        Options {
            row_cache_size: Some(MIB),
            ..opts_on(&env)
        },
    )
    .unwrap();
    load(&off, "off", 100);
    load(&own, "own", 100);
    read(&off, "off", 100, 3);
    read(&own, "own", 100, 3);
    let (so, sw) = (off.stats(), own.stats());
    assert_eq!(
        (so.row_cache_hits, so.row_cache_misses, so.row_cache_usage),
        (0, 0, 0)
    );
    assert_eq!(sw.row_cache_hits, 100);
    // The private cache's rows are not in the environment's, and it charges the budget what it holds.
    let s = env.stats();
    assert_eq!(s.row_cache_entries, 0);
    assert_eq!(s.memory.row_cache, MIB / 32 + sw.row_cache_usage, "{s:?}");
    drop(own);
    // The environment's cache was never asked: not even its doorkeeper is allocated.
    assert_eq!(env.stats().memory.row_cache, 0);
}

#[test]
fn an_environment_without_a_row_cache_share_gives_its_engines_none() {
    let env = SharedEnv::new(EnvOptions {
        memory_budget: Some(64 * MIB),
        row_cache_ratio: 0.0,
        ..EnvOptions::default()
    })
    .unwrap();
    let d = tempfile::tempdir().unwrap();
    let db = Db::open(d.path(), opts_on(&env)).unwrap();
    load(&db, "x", 50);
    read(&db, "x", 50, 3);
    assert_eq!(db.stats().row_cache_hits, 0);
    assert_eq!(env.stats().memory.row_cache, 0);
    assert!(SharedEnv::new(EnvOptions {
        row_cache_ratio: 1.0,
        ..EnvOptions::default()
    })
    .is_err());
}

#[test]
fn an_engine_on_its_own_has_a_row_cache_by_default() {
    let d = tempfile::tempdir().unwrap();
    let db = Db::open(d.path(), small_blocks()).unwrap();
    load(&db, "x", 100);
    read(&db, "x", 100, 3);
    let s = db.stats();
    assert_eq!((s.row_cache_hits, s.row_cache_misses), (100, 200), "{s:?}");
    assert!(s.row_cache_usage > 100 * 60);
}

#[test]
fn a_row_cache_share_below_the_doorkeeper_or_above_the_whole_capacity_is_refused_at_open() {
    for share in [0.0, 0.01, -0.5, 1.5, f64::NAN] {
        let d = tempfile::tempdir().unwrap();
        let err = Db::open(
            d.path(),
            Options {
                row_cache_min_share: share,
                ..small_blocks()
            },
        )
        .err()
        .unwrap_or_else(|| panic!("{share} accepted"));
        assert!(
            matches!(err, keyed_state_lsm::LsmError::InvalidArgument(_)),
            "{share}: {err:?}"
        );
    }
    for share in [1.0 / 32.0, 0.125, 1.0] {
        let d = tempfile::tempdir().unwrap();
        let opts = Options {
            row_cache_min_share: share,
            ..small_blocks()
        };
        assert!(Db::open(d.path(), opts).is_ok(), "{share}");
    }
}

#[test]
fn an_engine_on_its_own_shares_its_block_cache_capacity_with_its_row_cache() {
    let default_share = Options::default().row_cache_min_share;
    for (compression, share) in [
        (Compression::None, default_share),
        (Compression::Lz4, default_share),
        (Compression::Lz4, 0.5),
    ] {
        let d = tempfile::tempdir().unwrap();
        let base = small_blocks();
        let db = Db::open(
            d.path(),
            Options {
                block_cache_size: MIB,
                row_cache_min_share: share,
                sst: SstOptions {
                    compression,
                    ..base.sst.clone()
                },
                ..base
            },
        )
        .unwrap();
        // 20,000 rows of about 160 bytes each: three times the capacity.
        load(&db, "x", 20_000);
        read(&db, "x", 20_000, 2);
        let s = db.stats();
        let door = MIB / 32;
        // Together within the capacity, the doorkeeper included (one thread: the other cache evicts
        // before an insert returns).
        assert!(
            s.block_cache_usage + s.row_cache_usage + door <= MIB,
            "{compression:?}: {s:?}"
        );
        if compression == Compression::None {
            // Raw blocks are read from the map, never cached: the rows have the whole capacity, more
            // than the share of it they always get.
            assert_eq!(s.block_cache_usage, 0, "{s:?}");
            assert!(s.row_cache_usage > MIB * 7 / 8, "{s:?}");
        } else {
            // Both want more than they hold: each keeps its share, less what one eviction frees per
            // shard (rows go a segment at a time: a sixteenth of a shard's part of the rows' share, a
            // power of two of at least 512 bytes; blocks one of about 4,400 bytes).
            let rows_min = (MIB as f64 * share) as usize;
            let segment = 1usize << (rows_min / 16 / 16).clamp(512, 32 << 10).ilog2();
            assert!(
                s.row_cache_usage + door >= rows_min.saturating_sub(16 * segment),
                "{share}: {s:?}"
            );
            assert!(
                s.block_cache_usage >= MIB - rows_min - 16 * 4400,
                "{share}: {s:?}"
            );
        }
    }
}

/// A value of `engine` for key `i` whose length varies with `i` (20 to 219 bytes).
fn varied_value(engine: usize, i: u32) -> Vec<u8> {
    format!("e{engine}-{i:05}-{}", "v".repeat(10 + (i % 200) as usize)).into_bytes()
}

#[test]
fn engines_admitting_rows_from_threads_at_once_leave_the_charge_equal_to_what_the_cache_holds() {
    // More rows than the 4 MiB cache holds, of varied sizes: an admission may evict more than it adds.
    const N: u32 = 15_000;
    let env = env(64 * MIB);
    let (_dirs, dbs) = engines_on(&env, 2);
    for (e, db) in dbs.iter().enumerate() {
        for i in 0..N {
            db.put(&key(i), &varied_value(e, i)).unwrap();
        }
        db.flush().unwrap();
    }
    // Two threads per engine read its keys at once, in opposite orders: rows of both engines are admitted,
    // replaced and evicted in the same shards concurrently.
    std::thread::scope(|s| {
        for (e, db) in dbs.iter().enumerate() {
            for reverse in [false, true] {
                s.spawn(move || {
                    for round in 0..3 {
                        for j in 0..N {
                            let i = if reverse { N - 1 - j } else { j };
                            let got = db.get(&key(i)).unwrap().map(|v| v.to_vec());
                            assert_eq!(got, Some(varied_value(e, i)), "key {i} round {round}");
                        }
                    }
                });
            }
        }
    });
    let s = env.stats();
    let door = 64 * MIB / 16 / 32;
    assert!(s.row_cache_entries > 3 * MIB, "{s:?}");
    assert_eq!(s.memory.row_cache, door + s.row_cache_entries, "{s:?}");
    assert!(dbs.iter().all(|db| db.stats().row_cache_hits > 0));
}

#[test]
fn a_budget_handle_kept_after_the_environment_and_its_engines_are_dropped_reads_no_row_cache() {
    let env = env(64 * MIB);
    let budget = std::sync::Arc::clone(env.memory());
    let (_dirs, dbs) = engines_on(&env, 2);
    for (e, db) in dbs.iter().enumerate() {
        load(db, &format!("e{e}"), 200);
        read(db, &format!("e{e}"), 200, 3);
    }
    assert!(budget.row_cache_bytes() > 64 * MIB / 16 / 32);
    drop(dbs);
    drop(env);
    assert_eq!(budget.row_cache_bytes(), 0);
}
