//! The row cache ([`Options::row_cache_size`]): hot keys answered from cached entries, keys read once
//! not taken in (a row is admitted on its second miss), and never an answer a read without the cache
//! would not give (snapshots, overwrites, merge operands under range tombstones, deletions, compaction).

use std::sync::Arc;

use keyed_state_lsm::{Db, ListAppendOperator, Options, SstOptions};

fn options(row_cache: usize) -> Options {
    Options {
        row_cache_size: Some(row_cache),
        sst: SstOptions {
            block_size: 256,
            ..SstOptions::default()
        },
        merge_operator: Some(Arc::new(ListAppendOperator)),
        auto_compaction: false,
        ..Options::default()
    }
}

fn get(db: &Db, k: &[u8]) -> Option<Vec<u8>> {
    db.get(k).unwrap().map(|v| v.to_vec())
}

#[test]
fn a_read_at_an_older_snapshot_is_not_answered_with_a_newer_cached_value() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), options(1 << 20)).unwrap();
    db.put(b"k", b"old").unwrap();
    let snap = db.snapshot();
    db.put(b"k", b"new").unwrap();
    // One file holds both versions (the snapshot keeps the old one).
    db.flush().unwrap();
    // The first read is remembered, the second admits the row, the third is a hit.
    for _ in 0..3 {
        assert_eq!(get(&db, b"k").as_deref(), Some(&b"new"[..]));
    }
    assert_eq!(db.stats().row_cache_hits, 1, "{:?}", db.stats());
    // The file's newest version is above the snapshot: the read bypasses the cache.
    assert_eq!(
        db.get_at(b"k", &snap)
            .unwrap()
            .map(|v| v.to_vec())
            .as_deref(),
        Some(&b"old"[..])
    );
    assert_eq!(
        db.multi_get_at(&[b"k"], &snap).unwrap()[0]
            .as_ref()
            .map(|v| v.to_vec())
            .as_deref(),
        Some(&b"old"[..])
    );
    // A read at a snapshot taken after the file was written may use (and fill) the cache.
    let later = db.snapshot();
    let hits = db.stats().row_cache_hits;
    assert_eq!(
        db.get_at(b"k", &later)
            .unwrap()
            .map(|v| v.to_vec())
            .as_deref(),
        Some(&b"new"[..])
    );
    assert_eq!(db.stats().row_cache_hits, hits + 1);
}

#[test]
fn writes_after_a_cached_read_are_seen_whatever_they_are() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), options(1 << 20)).unwrap();
    for i in 0..100u32 {
        db.put(format!("key{i:03}").as_bytes(), b"v1").unwrap();
    }
    db.compact_all().unwrap();
    for _ in 0..2 {
        for i in 0..100u32 {
            assert_eq!(
                get(&db, format!("key{i:03}").as_bytes()).as_deref(),
                Some(&b"v1"[..])
            );
        }
    }
    let s = db.stats();
    assert_eq!((s.row_cache_hits, s.row_cache_misses), (0, 200));
    assert!(s.row_cache_usage > 0);
    // Overwrite, delete, merge and range-delete over cached entries: in the memtable, then flushed, then
    // compacted into new files.
    db.put(b"key000", b"v2").unwrap();
    db.delete(b"key001").unwrap();
    db.merge(b"key002", b"x").unwrap();
    db.delete_range(b"key010", b"key020").unwrap();
    let check = |db: &Db| {
        assert_eq!(get(db, b"key000").as_deref(), Some(&b"v2"[..]));
        assert_eq!(get(db, b"key001"), None);
        assert_eq!(get(db, b"key002").as_deref(), Some(&b"v1,x"[..]));
        for i in 10..20u32 {
            assert_eq!(get(db, format!("key{i:03}").as_bytes()), None, "key{i:03}");
        }
        assert_eq!(get(db, b"key020").as_deref(), Some(&b"v1"[..]));
        assert_eq!(get(db, b"key099").as_deref(), Some(&b"v1"[..]));
    };
    check(&db);
    db.flush().unwrap();
    check(&db);
    check(&db);
    db.compact_all().unwrap();
    check(&db);
    check(&db);
    assert!(db.stats().row_cache_hits > 0);
}

#[test]
fn merge_operands_below_a_range_tombstone_are_not_cached_as_the_whole_answer() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), options(1 << 20)).unwrap();
    db.put(b"k", b"base").unwrap();
    db.merge(b"k", b"a").unwrap();
    db.delete_range(b"a", b"z").unwrap();
    db.merge(b"k", b"b").unwrap();
    db.flush().unwrap();
    assert_eq!(get(&db, b"k").as_deref(), Some(&b"b"[..]));
    assert_eq!(get(&db, b"k").as_deref(), Some(&b"b"[..]));
    db.merge(b"k", b"c").unwrap();
    assert_eq!(get(&db, b"k").as_deref(), Some(&b"b,c"[..]));
    db.flush().unwrap();
    assert_eq!(get(&db, b"k").as_deref(), Some(&b"b,c"[..]));
    db.compact_all().unwrap();
    assert_eq!(get(&db, b"k").as_deref(), Some(&b"b,c"[..]));
    assert_eq!(get(&db, b"k").as_deref(), Some(&b"b,c"[..]));
}

#[test]
fn a_lookup_cut_short_by_a_range_tombstone_does_not_hide_operands_from_a_snapshot_below_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), options(1 << 20)).unwrap();
    db.merge(b"k", b"a").unwrap();
    // Held so that the flush keeps the two operands apart (no partial merge across a snapshot).
    let _between = db.snapshot();
    db.merge(b"k", b"b").unwrap();
    db.flush().unwrap();
    let snap = db.snapshot();
    // The tombstone is newer than the file: a latest read stops at the file's first operand.
    db.delete_range(b"a", b"z").unwrap();
    assert_eq!(get(&db, b"k"), None);
    assert_eq!(get(&db, b"k"), None);
    // The snapshot is at or above the file's seqnos (it may use the cache) but below the tombstone: it
    // must see both operands.
    for _ in 0..2 {
        assert_eq!(
            db.get_at(b"k", &snap)
                .unwrap()
                .map(|v| v.to_vec())
                .as_deref(),
            Some(&b"a,b"[..])
        );
    }
}

#[test]
fn hot_keys_scattered_over_more_blocks_than_the_block_cache_holds_are_answered_from_the_row_cache()
{
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        block_cache_size: 0,
        ..options(1 << 20)
    };
    let db = Db::open(dir.path(), opts).unwrap();
    for i in 0..5_000u32 {
        db.put(format!("key{i:05}").as_bytes(), &[i as u8; 100])
            .unwrap();
    }
    db.compact_all().unwrap();
    let hot: Vec<Vec<u8>> = (0..5_000u32)
        .step_by(50)
        .map(|i| format!("key{i:05}").into_bytes())
        .collect();
    for _ in 0..10 {
        for k in &hot {
            assert_eq!(get(&db, k).map(|v| v.len()), Some(100));
        }
    }
    let s = db.stats();
    assert_eq!(s.row_cache_misses, 2 * hot.len() as u64);
    assert_eq!(s.row_cache_hits, 8 * hot.len() as u64);
    assert!(s.row_cache_usage > 0 && s.row_cache_usage <= 1 << 20);
    assert!(s
        .metrics()
        .iter()
        .any(|m| m.name == "rocksdb.row.cache.hit" && m.value == s.row_cache_hits));
}

#[test]
fn a_row_cache_too_small_for_any_entry_caches_nothing_and_reads_stay_right() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), options(16)).unwrap();
    db.put(b"k", b"v").unwrap();
    db.flush().unwrap();
    for _ in 0..3 {
        assert_eq!(get(&db, b"k").as_deref(), Some(&b"v"[..]));
    }
    let s = db.stats();
    assert_eq!((s.row_cache_hits, s.row_cache_usage), (0, 0));
}

/// 5,000 keys of 100 bytes in one compacted file, read through a 1 MiB row cache and no block cache.
fn loaded(dir: &std::path::Path) -> Db {
    let opts = Options {
        block_cache_size: 0,
        ..options(1 << 20)
    };
    let db = Db::open(dir, opts).unwrap();
    for i in 0..5_000u32 {
        db.put(format!("key{i:05}").as_bytes(), &[i as u8; 100])
            .unwrap();
    }
    db.compact_all().unwrap();
    db
}

#[test]
fn keys_read_once_are_not_cached() {
    let dir = tempfile::tempdir().unwrap();
    let db = loaded(dir.path());
    for i in 0..5_000u32 {
        assert_eq!(
            get(&db, format!("key{i:05}").as_bytes()).map(|v| v.len()),
            Some(100)
        );
    }
    let s = db.stats();
    assert_eq!((s.row_cache_hits, s.row_cache_usage), (0, 0), "{s:?}");
}

#[test]
fn a_multi_get_of_keys_read_once_does_not_fill_the_cache_and_a_repeated_one_is_answered_from_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = loaded(dir.path());
    let keys: Vec<Vec<u8>> = (0..5_000u32)
        .map(|i| format!("key{i:05}").into_bytes())
        .collect();
    for batch in keys.chunks(32) {
        let refs: Vec<&[u8]> = batch.iter().map(|k| &k[..]).collect();
        assert!(db.multi_get(&refs).unwrap().iter().all(|v| v.is_some()));
    }
    assert_eq!(db.stats().row_cache_usage, 0);
    let hot: Vec<&[u8]> = keys.iter().step_by(200).map(|k| &k[..]).collect();
    // Read twice more, every hot key has missed at least twice in a row since the doorkeeper last saw it:
    // the next batch is answered from the cache alone.
    for _ in 0..2 {
        let got = db.multi_get(&hot).unwrap();
        assert!(got.iter().all(|v| v.as_ref().map(|v| v.len()) == Some(100)));
    }
    let before = db.stats();
    let got = db.multi_get(&hot).unwrap();
    assert!(got.iter().all(|v| v.as_ref().map(|v| v.len()) == Some(100)));
    let s = db.stats();
    assert_eq!(
        (s.row_cache_hits - before.row_cache_hits, s.row_cache_misses),
        (hot.len() as u64, before.row_cache_misses),
        "{s:?}"
    );
    assert!(s.row_cache_usage > 0);
}

#[test]
fn a_key_read_between_other_keys_reads_is_admitted_while_the_doorkeeper_remembers_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = loaded(dir.path());
    // A 1 MiB cache's doorkeeper has 8,192 slots: a few other keys' misses between two reads of a key
    // rarely take its slot.
    for i in 0..50u32 {
        get(&db, format!("key{i:05}").as_bytes());
    }
    for i in 0..50u32 {
        get(&db, format!("key{i:05}").as_bytes());
    }
    for i in 0..50u32 {
        get(&db, format!("key{i:05}").as_bytes());
    }
    let s = db.stats();
    assert!(s.row_cache_hits >= 45, "{s:?}");
}

#[test]
fn a_compaction_that_deletes_a_file_gives_back_the_charge_of_its_cached_rows() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), options(1 << 20)).unwrap();
    let key = |i: u32| format!("key{i:03}");
    for i in 0..100u32 {
        db.put(key(i).as_bytes(), b"v1").unwrap();
    }
    db.flush().unwrap();
    // Read twice: every key's row in the flushed file is admitted.
    for _ in 0..2 {
        for i in 0..100u32 {
            assert_eq!(get(&db, key(i).as_bytes()).as_deref(), Some(&b"v1"[..]));
        }
    }
    let cached = db.stats().row_cache_usage;
    assert!(cached > 0);
    // The compaction writes the keys into a new file and deletes the flushed one: its rows can never be
    // read again, and their charge goes with them.
    db.put(b"other", b"v").unwrap();
    db.flush().unwrap();
    db.compact_all().unwrap();
    let s = db.stats();
    assert_eq!(s.row_cache_usage, 0, "{s:?}");
    // The new file's rows are cached as before (their sequence numbers, zeroed at the bottom, may be
    // shorter).
    for _ in 0..2 {
        for i in 0..100u32 {
            assert_eq!(get(&db, key(i).as_bytes()).as_deref(), Some(&b"v1"[..]));
        }
    }
    assert!(db.stats().row_cache_usage > 0);
}

#[test]
fn a_compaction_erases_its_deleted_files_rows_even_while_an_iterator_still_holds_the_files() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), options(1 << 20)).unwrap();
    let key = |i: u32| format!("key{i:03}");
    // Three flushed files whose rows are cached.
    for part in 0..3u32 {
        for i in part * 50..(part + 1) * 50 {
            db.put(key(i).as_bytes(), b"v1").unwrap();
        }
        db.flush().unwrap();
    }
    for _ in 0..2 {
        for i in 0..150u32 {
            assert_eq!(get(&db, key(i).as_bytes()).as_deref(), Some(&b"v1"[..]));
        }
    }
    assert!(db.stats().row_cache_usage > 0);
    // An iterator keeps the old version, and with it the three files, past the compaction.
    let it = db.iter(keyed_state_lsm::ReadOptions::default());
    db.compact_all().unwrap();
    // Their rows went with the compaction that deleted them, not when the iterator lets the files go.
    let s = db.stats();
    assert_eq!(s.row_cache_usage, 0, "{s:?}");
    drop(it);
    assert_eq!(db.stats().row_cache_usage, 0);
}
