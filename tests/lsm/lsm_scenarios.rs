//! Behavioural scenarios of the LSM engine core.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use keyed_state_lsm::storage::OsStorage;
use keyed_state_lsm::{
    adopt_sst_files, AdoptFile, CompactionFilter, CompactionFilterContext, CompactionFilterFactory,
    Compression, Db, ErrorKind, FilterDecision, FilterEntryKind, FixedPrefix, KeyBounds,
    ListAppendOperator, LsmError, Options, PrefixExtractor, ReadOptions, SstOptions, WriteBatch,
};

fn small_opts() -> Options {
    Options {
        memtable_size: 16 << 10,
        max_immutable_memtables: 2,
        l0_compaction_trigger: 2,
        l0_stop_writes_trigger: 8,
        num_levels: 4,
        level_base_size: 64 << 10,
        level_multiplier: 4,
        target_file_size: 16 << 10,
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

fn get(db: &Db, k: &[u8]) -> Option<Vec<u8>> {
    db.get(k).unwrap().map(|v| v.to_vec())
}

fn scan(db: &Db, ro: ReadOptions<'_>) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut it = db.iter(ro);
    it.seek_to_first();
    let mut out = Vec::new();
    while it.valid() {
        out.push((it.key().to_vec(), it.value().to_vec()));
        it.next();
    }
    assert!(it.status().is_ok(), "{:?}", it.status());
    out
}

fn sst_count(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "sst")
        })
        .count()
}

#[test]
fn put_get_delete_and_overwrite_in_memtable() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small_opts()).unwrap();
    db.put(b"a", b"1").unwrap();
    db.put(b"a", b"2").unwrap();
    db.put(b"b", b"3").unwrap();
    db.delete(b"b").unwrap();
    assert_eq!(get(&db, b"a").as_deref(), Some(&b"2"[..]));
    assert_eq!(get(&db, b"b"), None);
    assert_eq!(get(&db, b"c"), None);
}

#[test]
fn write_batch_becomes_visible_atomically() {
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(Db::open(dir.path(), small_opts()).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (db, stop) = (Arc::clone(&db), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut checks = 0;
            while !stop.load(Ordering::Relaxed) {
                let all = scan(&db, ReadOptions::default());
                if let Some((_, first)) = all.first() {
                    assert_eq!(all.len(), 20);
                    assert!(all.iter().all(|(_, v)| v == first), "torn batch");
                }
                checks += 1;
            }
            checks
        })
    };
    for round in 0..300u32 {
        let mut b = WriteBatch::new();
        for i in 0..20u32 {
            b.put(format!("key{i:02}").as_bytes(), &round.to_be_bytes());
        }
        db.write(&b).unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    assert!(reader.join().unwrap() > 0);
}

#[test]
fn merge_operands_survive_flush_and_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small_opts()).unwrap();
    db.merge(b"list", b"a").unwrap();
    db.flush().unwrap();
    db.merge(b"list", b"b").unwrap();
    db.flush().unwrap();
    db.merge(b"list", b"c").unwrap();
    assert_eq!(get(&db, b"list").as_deref(), Some(&b"a,b,c"[..]));
    db.compact_all().unwrap();
    assert_eq!(get(&db, b"list").as_deref(), Some(&b"a,b,c"[..]));
    db.put(b"list", b"x").unwrap();
    db.merge(b"list", b"y").unwrap();
    db.compact_all().unwrap();
    assert_eq!(get(&db, b"list").as_deref(), Some(&b"x,y"[..]));
    assert_eq!(
        scan(&db, ReadOptions::default()),
        vec![(b"list".to_vec(), b"x,y".to_vec())]
    );
}

#[test]
fn list_with_many_operands_reads_linearly() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(
        dir.path(),
        Options {
            memtable_size: 64 << 20,
            ..small_opts()
        },
    )
    .unwrap();
    let n = 20_000;
    for i in 0..n {
        db.merge(b"l", format!("{i}").as_bytes()).unwrap();
    }
    let t = std::time::Instant::now();
    let v = get(&db, b"l").unwrap();
    let elapsed = t.elapsed();
    assert_eq!(v.split(|b| *b == b',').count(), n);
    assert!(elapsed < std::time::Duration::from_secs(2), "{elapsed:?}");
}

/// Drops list elements (and operands) starting with "old", as a TTL filter drops expired elements.
struct DropOld;
impl CompactionFilter for DropOld {
    fn filter(&mut self, _key: &[u8], kind: FilterEntryKind, value: &[u8]) -> FilterDecision {
        match kind {
            FilterEntryKind::MergeOperand if value.starts_with(b"old") => FilterDecision::Remove,
            FilterEntryKind::MergeOperand => FilterDecision::Keep,
            FilterEntryKind::Value => {
                let kept: Vec<&[u8]> = value
                    .split(|b| *b == b',')
                    .filter(|e| !e.starts_with(b"old"))
                    .collect();
                if kept.is_empty() {
                    FilterDecision::Remove
                } else {
                    FilterDecision::Replace(kept.join(&b","[..]))
                }
            }
        }
    }
}
/// Makes every compaction slow (30 ms before it starts), so L0 fills up faster than it drains.
struct SlowFactory;
impl CompactionFilterFactory for SlowFactory {
    fn name(&self) -> &str {
        "slow"
    }
    fn create(&self, _ctx: &CompactionFilterContext) -> Box<dyn CompactionFilter> {
        std::thread::sleep(std::time::Duration::from_millis(30));
        Box::new(DropOld)
    }
}

/// Tiny memtables, L0 stopping writes at 3 files, and slow compactions: writes stall.
fn stalling_opts() -> Options {
    Options {
        memtable_size: 4 << 10,
        l0_compaction_trigger: 2,
        l0_stop_writes_trigger: 3,
        compaction_filter_factory: Some(Arc::new(SlowFactory)),
        ..small_opts()
    }
}

struct DropOldFactory;
impl CompactionFilterFactory for DropOldFactory {
    fn name(&self) -> &str {
        "drop-old"
    }
    fn create(&self, _ctx: &CompactionFilterContext) -> Box<dyn CompactionFilter> {
        Box::new(DropOld)
    }
}

#[test]
fn compaction_filter_drops_expired_list_elements() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        compaction_filter_factory: Some(Arc::new(DropOldFactory)),
        ..small_opts()
    };
    let db = Db::open(dir.path(), opts).unwrap();
    // A merged value holding expired elements, plus separate operands (expired and live).
    db.put(b"l", b"old0,new0").unwrap();
    db.merge(b"l", b"old1").unwrap();
    db.merge(b"l", b"new1").unwrap();
    db.flush().unwrap();
    db.merge(b"m", b"old2").unwrap();
    db.merge(b"m", b"new2").unwrap();
    db.merge(b"gone", b"old3").unwrap();
    db.put(b"p", b"old4").unwrap();
    assert_eq!(get(&db, b"l").as_deref(), Some(&b"old0,new0,old1,new1"[..]));
    db.compact_all().unwrap();
    assert_eq!(get(&db, b"l").as_deref(), Some(&b"new0,new1"[..]));
    assert_eq!(get(&db, b"m").as_deref(), Some(&b"new2"[..]));
    assert_eq!(get(&db, b"gone"), None);
    assert_eq!(get(&db, b"p"), None);
}

#[test]
fn range_delete_hides_older_data_across_levels() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small_opts()).unwrap();
    for i in 0..500u32 {
        db.put(format!("k{i:04}").as_bytes(), b"deep").unwrap();
    }
    db.compact_all().unwrap();
    for i in 0..500u32 {
        if i % 2 == 0 {
            db.put(format!("k{i:04}").as_bytes(), b"l0").unwrap();
        }
    }
    db.flush().unwrap();
    db.merge(b"k0150", b"m").unwrap();
    db.delete_range(b"k0100", b"k0200").unwrap();
    db.put(b"k0150", b"after").unwrap();
    let check = |db: &Db| {
        for i in 0..500u32 {
            let k = format!("k{i:04}");
            let want: Option<&[u8]> = if i == 150 {
                Some(b"after")
            } else if (100..200).contains(&i) {
                None
            } else if i % 2 == 0 {
                Some(b"l0")
            } else {
                Some(b"deep")
            };
            assert_eq!(get(db, k.as_bytes()).as_deref(), want, "{k}");
        }
        let all = scan(db, ReadOptions::default());
        assert_eq!(all.len(), 500 - 100 + 1);
    };
    check(&db);
    db.flush().unwrap();
    check(&db);
    db.compact_all().unwrap();
    check(&db);
    db.close().unwrap();
    let db = Db::open(dir.path(), small_opts()).unwrap();
    check(&db);
}

#[test]
fn a_compaction_reads_its_inputs_without_filling_the_block_cache() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        auto_compaction: false,
        sst: SstOptions {
            block_size: 1024,
            compression: Compression::Lz4,
            ..SstOptions::default()
        },
        ..small_opts()
    };
    let db = Db::open(dir.path(), opts).unwrap();
    // Compressible values: every block is LZ4, so every block read decompresses (and may be cached).
    for round in 0..3u8 {
        for i in 0..300u32 {
            db.put(format!("k{i:04}").as_bytes(), &[b'a' + round; 100])
                .unwrap();
        }
        db.flush().unwrap();
    }
    // An open iterator keeps the compaction's inputs (and any block of theirs in the cache) alive.
    let it = db.iter(ReadOptions::default());
    let before = db.stats().block_cache_usage;
    db.compact_all().unwrap();
    assert_eq!(
        db.stats().block_cache_usage,
        before,
        "the compaction's reads put its inputs' blocks in the cache"
    );
    drop(it);
    // A read still fills it.
    assert_eq!(get(&db, b"k0007"), Some(vec![b'c'; 100]));
    assert!(db.stats().block_cache_usage > before);
}

#[test]
fn obsolete_files_kept_while_iterator_open() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        auto_compaction: false,
        ..small_opts()
    };
    let db = Db::open(dir.path(), opts).unwrap();
    for i in 0..200u32 {
        db.put(format!("k{i:04}").as_bytes(), b"v1").unwrap();
    }
    db.flush().unwrap();
    let before = sst_count(dir.path());
    assert!(before > 0);
    let mut it = db.iter(ReadOptions::default());
    for i in 0..200u32 {
        db.put(format!("k{i:04}").as_bytes(), b"v2").unwrap();
    }
    db.compact_all().unwrap();
    // The iterator's files are still on disk and readable.
    assert!(sst_count(dir.path()) > db.stats().level_files.iter().sum::<usize>());
    it.seek_to_first();
    let mut n = 0;
    while it.valid() {
        assert_eq!(it.value(), b"v1");
        n += 1;
        it.next();
    }
    assert_eq!(n, 200);
    drop(it);
    assert_eq!(
        sst_count(dir.path()),
        db.stats().level_files.iter().sum::<usize>()
    );
}

#[test]
fn snapshot_reads_survive_flush_and_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small_opts()).unwrap();
    db.put(b"a", b"1").unwrap();
    db.merge(b"l", b"x").unwrap();
    let snap = db.snapshot();
    db.put(b"a", b"2").unwrap();
    db.merge(b"l", b"y").unwrap();
    db.delete_range(b"a", b"b").unwrap();
    db.compact_all().unwrap();
    assert_eq!(db.get_at(b"a", &snap).unwrap().as_deref(), Some(&b"1"[..]));
    assert_eq!(db.get_at(b"l", &snap).unwrap().as_deref(), Some(&b"x"[..]));
    assert_eq!(get(&db, b"a"), None);
    assert_eq!(get(&db, b"l").as_deref(), Some(&b"x,y"[..]));
    let at = scan(
        &db,
        ReadOptions {
            snapshot: Some(&snap),
            ..ReadOptions::default()
        },
    );
    assert_eq!(
        at,
        vec![
            (b"a".to_vec(), b"1".to_vec()),
            (b"l".to_vec(), b"x".to_vec())
        ]
    );
}

#[test]
fn prefix_scan_and_bounds() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small_opts()).unwrap();
    for k in ["a1", "b1", "b2", "b3", "c1"] {
        db.put(k.as_bytes(), k.as_bytes()).unwrap();
    }
    db.flush().unwrap();
    db.put(b"b4", b"b4").unwrap();
    let keys = |ro| {
        scan(&db, ro)
            .into_iter()
            .map(|(k, _)| String::from_utf8(k).unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        keys(ReadOptions {
            prefix: Some(b"b".to_vec()),
            ..Default::default()
        }),
        ["b1", "b2", "b3", "b4"]
    );
    assert_eq!(
        keys(ReadOptions {
            lower_bound: Some(b"b2".to_vec()),
            upper_bound: Some(b"c".to_vec()),
            ..Default::default()
        }),
        ["b2", "b3", "b4"]
    );
    let mut it = db.iter(ReadOptions::default());
    it.seek(b"b25");
    assert_eq!(it.key(), b"b3");
}

#[test]
fn get_from_uncompressed_sst_is_zero_copy() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small_opts()).unwrap();
    db.put(b"k", &[7u8; 100]).unwrap();
    db.flush().unwrap();
    let v = db.get(b"k").unwrap().unwrap();
    assert_eq!(&*v, &[7u8; 100][..]);
    assert!(v.is_mapped());
}

#[test]
fn checkpoint_opens_as_db() {
    let dir = tempfile::tempdir().unwrap();
    let cp = dir.path().join("cp");
    let db = Db::open(dir.path().join("db"), small_opts()).unwrap();
    for i in 0..1000u32 {
        db.put(format!("k{i:04}").as_bytes(), format!("v{i}").as_bytes())
            .unwrap();
    }
    db.merge(b"l", b"a").unwrap();
    let info = db.checkpoint(&cp).unwrap();
    assert!(!info.files.is_empty());
    assert!(info.manifest.exists());
    // Writes after the checkpoint are not in it; compaction of the source does not disturb it.
    db.put(b"k0000", b"changed").unwrap();
    db.compact_all().unwrap();
    let c = Db::open(&cp, small_opts()).unwrap();
    assert_eq!(get(&c, b"k0000").as_deref(), Some(&b"v0"[..]));
    assert_eq!(get(&c, b"k0999").as_deref(), Some(&b"v999"[..]));
    assert_eq!(get(&c, b"l").as_deref(), Some(&b"a"[..]));
    assert_eq!(scan(&c, ReadOptions::default()).len(), 1001);
    assert_eq!(c.stats().last_seqno, info.seqno);
}

#[test]
fn write_stall_when_l0_deep() {
    let dir = tempfile::tempdir().unwrap();
    let opts = stalling_opts();
    let db = Db::open(dir.path(), opts).unwrap();
    for i in 0..5000u32 {
        db.put(format!("k{:05}", i % 1500).as_bytes(), &[b'x'; 64])
            .unwrap();
    }
    let s = db.stats();
    assert!(s.write_stalls > 0, "{s:?}");
    // Each stall waits at least for one slow (30 ms) compaction to start and finish.
    assert!(s.write_stall_micros >= 10_000, "{s:?}");
    // Reported by cause: waits for compaction on a deep L0, and for flushes of the immutable memtables.
    assert!(s.write_stall_l0_micros > 0, "{s:?}");
    assert!(
        s.write_stall_l0_micros + s.write_stall_memtables_micros <= s.write_stall_micros,
        "{s:?}"
    );
    assert_eq!(s.write_stall_memory_micros, 0, "no budget: {s:?}");
    let metric = |name: &str| {
        s.metrics()
            .into_iter()
            .find(|m| m.name == name)
            .map(|m| m.value)
    };
    assert_eq!(
        metric("rocksdb.l0.num.files.stall.micros"),
        Some(s.write_stall_l0_micros)
    );
    assert_eq!(metric("rocksdb.stall.micros"), Some(s.write_stall_micros));
    // Writes stop at 3 L0 files; the (at most 2) memtables already queued may still land.
    assert!(s.level_files[0] <= 3 + 2, "{s:?}");
    assert_eq!(get(&db, b"k01499").as_deref(), Some(&[b'x'; 64][..]));
}

#[test]
fn leveled_compaction_keeps_levels_non_overlapping() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small_opts()).unwrap();
    let mut model = std::collections::BTreeMap::new();
    for round in 0..4u32 {
        for i in 0..2000u32 {
            let k = format!("k{:05}", (i * 7919 + round) % 3000).into_bytes();
            let v = format!("{round}-{i}").into_bytes();
            db.put(&k, &v).unwrap();
            model.insert(k, v);
        }
    }
    db.flush().unwrap();
    let s = db.stats();
    assert!(s.compactions > 0, "{s:?}");
    assert!(s.level_files[1..].iter().sum::<usize>() > 0, "{s:?}");
    assert!(s.write_amplification() > 1.0);
    assert_eq!(
        scan(&db, ReadOptions::default()),
        model.into_iter().collect::<Vec<_>>()
    );
}

#[test]
fn reopen_after_close_keeps_data_and_never_reuses_file_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small_opts()).unwrap();
    db.put(b"a", b"1").unwrap();
    db.flush().unwrap();
    db.put(b"b", b"2").unwrap();
    db.close().unwrap();
    let names = |p: &std::path::Path| {
        std::fs::read_dir(p)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect::<std::collections::BTreeSet<_>>()
    };
    let before = names(dir.path());
    let db = Db::open(dir.path(), small_opts()).unwrap();
    assert_eq!(get(&db, b"a").as_deref(), Some(&b"1"[..]));
    assert_eq!(get(&db, b"b").as_deref(), Some(&b"2"[..]));
    db.put(b"c", b"3").unwrap();
    db.flush().unwrap();
    let max_before = before
        .iter()
        .filter_map(|n| n.strip_suffix(".sst").and_then(|n| n.parse::<u64>().ok()))
        .max()
        .unwrap();
    let after = names(dir.path());
    let new_max = after
        .iter()
        .filter_map(|n| n.strip_suffix(".sst").and_then(|n| n.parse::<u64>().ok()))
        .max()
        .unwrap();
    assert!(new_max > max_before);
}

#[test]
fn wal_replays_unflushed_writes() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        wal: true,
        ..small_opts()
    };
    {
        let db = Db::open(dir.path(), opts.clone()).unwrap();
        db.put(b"a", b"1").unwrap();
        db.merge(b"l", b"x").unwrap();
        db.delete_range(b"q", b"r").unwrap();
        // A second handle is refused while the first is open.
        let second = Db::open(dir.path(), opts.clone());
        assert!(
            matches!(&second, Err(e @ LsmError::Locked { dir: d }) if d == dir.path() && e.kind() == ErrorKind::Busy),
            "{:?}",
            second.as_ref().err()
        );
        // Simulate a crash: no flush on close.
        db.abandon();
    }
    // A torn tail record is ignored.
    let log = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "log"))
        .unwrap();
    let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    std::io::Write::write_all(&mut f, &[9, 0, 0, 0, 1, 2, 3]).unwrap();
    drop(f);
    let db = Db::open(dir.path(), opts).unwrap();
    assert_eq!(get(&db, b"a").as_deref(), Some(&b"1"[..]));
    assert_eq!(get(&db, b"l").as_deref(), Some(&b"x"[..]));
}

#[test]
fn manifest_corruption_is_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small_opts()).unwrap();
    db.put(b"a", b"1").unwrap();
    db.close().unwrap();
    let man = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("MANIFEST-")
        })
        .unwrap();
    let mut bytes = std::fs::read(&man).unwrap();
    bytes[14] ^= 0xFF;
    std::fs::write(&man, &bytes).unwrap();
    match Db::open(dir.path(), small_opts()) {
        Err(LsmError::DamagedLog { at, .. }) => {
            assert!(at.file.to_string_lossy().contains("MANIFEST-"), "{at}")
        }
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("opened a corrupt manifest"),
    }
    std::fs::write(dir.path().join("CURRENT"), b"garbage").unwrap();
    assert!(matches!(
        Db::open(dir.path(), small_opts()),
        Err(LsmError::Corruption { .. })
    ));
}

fn no_merge_operator(key: &[u8]) -> impl Fn(&Result<(), LsmError>) -> bool + '_ {
    move |r| matches!(r, Err(e @ LsmError::NoMergeOperator { key: k }) if k == key && e.kind() == ErrorKind::InvalidInput)
}

#[test]
fn merge_without_operator_is_typed_error() {
    for wal in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let opts = Options {
            merge_operator: None,
            wal,
            ..small_opts()
        };
        let db = Db::open(dir.path(), opts.clone()).unwrap();
        db.put(b"k", b"base").unwrap();
        // Refused at write, typed, naming the key: nothing is written, the database goes on.
        let r = db.merge(b"k", b"v");
        assert!(no_merge_operator(b"k")(&r), "{r:?}");
        assert_eq!(get(&db, b"k").as_deref(), Some(&b"base"[..]));
        assert_eq!(db.stats().last_seqno, 1);
        db.put(b"other", b"1").unwrap();
        db.close().unwrap();
        // Nothing of the refused operand reached the log either.
        let db = Db::open(dir.path(), opts).unwrap();
        assert_eq!(get(&db, b"k").as_deref(), Some(&b"base"[..]));
        assert_eq!(get(&db, b"other").as_deref(), Some(&b"1"[..]));
    }
}

#[test]
fn a_batch_holding_a_merge_operand_is_refused_whole_without_an_operator() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(
        dir.path(),
        Options {
            merge_operator: None,
            wal: true,
            ..small_opts()
        },
    )
    .unwrap();
    let mut batch = WriteBatch::new();
    batch
        .put(b"a", b"1")
        .merge(b"list", b"x")
        .merge(b"other", b"y")
        .delete(b"b");
    let r = db.write(&batch);
    assert!(no_merge_operator(b"list")(&r), "{r:?}");
    assert_eq!(get(&db, b"a"), None, "no update of a refused batch applies");
    assert_eq!(db.stats().last_seqno, 0);
    // The same batch without its operands goes through; a cleared batch forgets them.
    batch.clear();
    batch.put(b"a", b"1").delete(b"b");
    db.write(&batch).unwrap();
    assert_eq!(get(&db, b"a").as_deref(), Some(&b"1"[..]));
}

#[test]
fn reopened_without_its_merge_operator_a_database_reports_the_operands_it_holds() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small_opts()).unwrap();
    db.put(b"a", b"1").unwrap();
    db.merge(b"l", b"x").unwrap();
    db.merge(b"l", b"y").unwrap();
    db.put(b"z", b"9").unwrap();
    db.close().unwrap();
    let without = Options {
        merge_operator: None,
        ..small_opts()
    };
    let db = Db::open(dir.path(), without.clone()).unwrap();
    assert!(matches!(db.get(b"l"), Err(LsmError::NoMergeOperator { key }) if key == b"l"));
    assert_eq!(get(&db, b"a").as_deref(), Some(&b"1"[..]));
    // The iterator yields the entries before the operands, then the error as its last item.
    let entries: Vec<_> = db.iter(ReadOptions::default()).into_iter().collect();
    assert_eq!(entries.len(), 2, "{entries:?}");
    assert_eq!(entries[0].as_ref().unwrap().0, b"a");
    assert!(matches!(&entries[1], Err(LsmError::NoMergeOperator { key }) if key == b"l"));
    // Compaction keeps the operands instead of failing the database.
    db.compact_all().unwrap();
    assert!(matches!(
        db.get(b"l"),
        Err(LsmError::NoMergeOperator { .. })
    ));
    db.close().unwrap();
    let db = Db::open(dir.path(), small_opts()).unwrap();
    assert_eq!(get(&db, b"l").as_deref(), Some(&b"x,y"[..]));
}

#[test]
fn the_iterator_of_owned_entries_yields_what_the_cursor_shows() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small_opts()).unwrap();
    for i in 0..600u32 {
        db.put(format!("k{i:04}").as_bytes(), format!("v{i}").as_bytes())
            .unwrap();
    }
    db.flush().unwrap();
    // Newer values in the memtable over older ones in files, a deleted key, a merged list.
    for i in (0..600u32).step_by(7) {
        db.put(format!("k{i:04}").as_bytes(), b"new").unwrap();
    }
    db.delete(b"k0001").unwrap();
    db.merge(b"k0002", b"x").unwrap();
    for ro in [
        ReadOptions::default(),
        ReadOptions {
            lower_bound: Some(b"k0100".to_vec()),
            upper_bound: Some(b"k0200".to_vec()),
            ..ReadOptions::default()
        },
        ReadOptions {
            prefix: Some(b"k05".to_vec()),
            ..ReadOptions::default()
        },
    ] {
        let cursor = scan(&db, ro.clone());
        let owned: Vec<(Vec<u8>, Vec<u8>)> = db
            .iter(ro)
            .into_iter()
            .map(|e| e.map(|(k, v)| (k, v.to_vec())))
            .collect::<Result<_, _>>()
            .unwrap();
        assert!(!owned.is_empty());
        assert_eq!(owned, cursor);
    }
    // From a positioned cursor the entries start where it is; the cursor comes back where they stopped.
    let mut it = db.iter(ReadOptions::default());
    it.seek(b"k0590");
    let mut entries = it.entries();
    let first: Vec<Vec<u8>> = entries.by_ref().take(3).map(|e| e.unwrap().0).collect();
    assert_eq!(first, [&b"k0590"[..], b"k0591", b"k0592"]);
    let it = entries.into_cursor();
    assert_eq!(it.key(), b"k0593");
    assert_eq!(it.entries().count(), 599 - 593 + 1);
}

#[test]
fn adopting_overlapping_files_into_one_level_names_the_files_and_the_level() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        auto_compaction: false,
        ..small_opts()
    };
    let db = Db::open(dir.path().join("db"), opts).unwrap();
    for round in 0..2 {
        for i in 0..50u32 {
            db.put(format!("k{i:03}").as_bytes(), &[round]).unwrap();
        }
        db.flush().unwrap();
    }
    let dst = dir.path().join("adopted");
    let info = db.checkpoint(&dst).unwrap();
    db.close().unwrap();
    std::fs::remove_file(&info.manifest).unwrap();
    assert_eq!(info.files.len(), 2, "{info:?}");
    let files: Vec<AdoptFile> = info
        .files
        .iter()
        .map(|f| AdoptFile {
            level: 1,
            number: f.number,
            bounds: None,
        })
        .collect();
    let r = adopt_sst_files(&OsStorage, &dst, &files, info.seqno, 4);
    let mut numbers: Vec<u64> = info.files.iter().map(|f| f.number).collect();
    numbers.sort_unstable();
    assert!(
        matches!(&r, Err(e @ LsmError::FilesOverlap { level: 1, first, second })
        if e.kind() == ErrorKind::InvalidInput && {
            let mut got = [*first, *second];
            got.sort_unstable();
            got[..] == numbers[..]
        }),
        "{r:?}"
    );
    // At levels 0 and 1 they may: L0 files overlap.
    let files: Vec<AdoptFile> = files
        .into_iter()
        .enumerate()
        .map(|(i, f)| AdoptFile { level: i, ..f })
        .collect();
    assert_eq!(
        adopt_sst_files(&OsStorage, &dst, &files, info.seqno, 4).unwrap(),
        2
    );
}

#[test]
fn a_checkpoint_into_a_directory_that_is_not_empty_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path().join("db"), small_opts()).unwrap();
    db.put(b"a", b"1").unwrap();
    let target = dir.path().join("cp");
    std::fs::create_dir_all(&target).unwrap();
    std::fs::write(target.join("someone-elses"), b"x").unwrap();
    let r = db.checkpoint(&target);
    assert!(
        matches!(&r, Err(e @ LsmError::DirectoryNotEmpty { dir }) if *dir == target && e.kind() == ErrorKind::InvalidInput),
        "{r:?}"
    );
    assert_eq!(std::fs::read_dir(&target).unwrap().count(), 1);
}

#[test]
fn delete_range_drops_whole_files_inside_the_range() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        auto_compaction: false,
        ..small_opts()
    };
    let db = Db::open(dir.path(), opts).unwrap();
    for i in 0..3000u32 {
        db.put(format!("k{i:05}").as_bytes(), &[b'v'; 32]).unwrap();
    }
    db.compact_all().unwrap();
    let before = db.stats();
    let files_before: usize = before.level_files.iter().sum();
    assert!(files_before > 4, "{before:?}");
    db.delete_range(b"k00100", b"k02900").unwrap();
    let after = db.stats();
    assert!(after.files_dropped_by_range_delete > 0, "{after:?}");
    assert!(after.level_files.iter().sum::<usize>() < files_before);
    assert_eq!(get(&db, b"k00099").as_deref(), Some(&[b'v'; 32][..]));
    assert_eq!(get(&db, b"k00100"), None);
    assert_eq!(get(&db, b"k02899"), None);
    assert_eq!(get(&db, b"k02900").as_deref(), Some(&[b'v'; 32][..]));
    assert_eq!(scan(&db, ReadOptions::default()).len(), 200);
    db.compact_all().unwrap();
    assert_eq!(scan(&db, ReadOptions::default()).len(), 200);
}

#[test]
fn delete_range_keeps_files_a_snapshot_still_reads() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small_opts()).unwrap();
    for i in 0..3000u32 {
        db.put(format!("k{i:05}").as_bytes(), b"v").unwrap();
    }
    db.compact_all().unwrap();
    let snap = db.snapshot();
    db.delete_range(b"k00000", b"k99999").unwrap();
    assert_eq!(db.stats().files_dropped_by_range_delete, 0);
    db.compact_all().unwrap();
    assert_eq!(scan(&db, ReadOptions::default()).len(), 0);
    let old = scan(
        &db,
        ReadOptions {
            snapshot: Some(&snap),
            ..ReadOptions::default()
        },
    );
    assert_eq!(old.len(), 3000);
}

#[test]
fn ingest_sorted_places_non_overlapping_files_in_last_level() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small_opts()).unwrap();
    db.put(b"a", b"memtable").unwrap();
    let info = db
        .ingest_sorted(
            (0..2000u32).map(|i| (format!("k{i:05}").into_bytes(), b"ingested".to_vec())),
        )
        .unwrap();
    assert_eq!(info.entries, 2000);
    assert!(info.files > 1);
    assert_eq!(info.level, 3);
    assert_eq!(get(&db, b"k01999").as_deref(), Some(&b"ingested"[..]));
    assert_eq!(get(&db, b"a").as_deref(), Some(&b"memtable"[..]));
    // Overlapping ingestion goes to L0 and shadows older values.
    db.put(b"k00005", b"old").unwrap();
    let info = db
        .ingest_sorted(vec![
            (b"k00005".to_vec(), b"new".to_vec()),
            (b"k00006".to_vec(), b"new".to_vec()),
        ])
        .unwrap();
    assert_eq!(info.level, 0);
    assert_eq!(get(&db, b"k00005").as_deref(), Some(&b"new"[..]));
    db.compact_all().unwrap();
    assert_eq!(get(&db, b"k00005").as_deref(), Some(&b"new"[..]));
    assert_eq!(scan(&db, ReadOptions::default()).len(), 2001);
    let err = db.ingest_sorted(vec![(b"b".to_vec(), vec![]), (b"a".to_vec(), vec![])]);
    assert!(
        matches!(&err, Err(LsmError::NotAscending { key }) if key == b"a"),
        "{err:?}"
    );
    db.close().unwrap();
    let db = Db::open(dir.path(), small_opts()).unwrap();
    assert_eq!(get(&db, b"k00006").as_deref(), Some(&b"new"[..]));
}

#[test]
fn ingest_sorted_runs_writes_runs_in_parallel_and_rejects_runs_out_of_order() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small_opts()).unwrap();
    let run = |r: std::ops::Range<u32>| {
        r.map(|i| {
            (
                format!("k{i:05}").into_bytes(),
                format!("v{i}").into_bytes(),
            )
        })
        .collect::<Vec<_>>()
    };
    let info = db
        .ingest_sorted_runs(vec![run(0..1500), run(1500..3000), run(3000..3001)])
        .unwrap();
    assert_eq!(info.entries, 3001);
    assert!(info.files >= 3, "{} files", info.files);
    assert_eq!(info.level, 3);
    for i in [0u32, 1499, 1500, 2999, 3000] {
        assert_eq!(
            get(&db, format!("k{i:05}").as_bytes()),
            Some(format!("v{i}").into_bytes())
        );
    }
    assert_eq!(scan(&db, ReadOptions::default()).len(), 3001);
    // Runs that overlap, or come in the wrong order: an error, nothing installed, no file left behind.
    let files = sst_count(dir.path());
    for (runs, first_out_of_order) in [
        (vec![run(5000..5010), run(4000..4010)], b"k04000"),
        (vec![run(6000..6010), run(6005..6020)], b"k06005"),
    ] {
        let err = db.ingest_sorted_runs(runs);
        assert!(
            matches!(&err, Err(LsmError::NotAscending { key }) if key == first_out_of_order),
            "{err:?}"
        );
    }
    assert_eq!(sst_count(dir.path()), files);
    assert_eq!(get(&db, b"k04000"), None);
    assert_eq!(scan(&db, ReadOptions::default()).len(), 3001);
    // Empty runs are fine.
    let info = db
        .ingest_sorted_runs(vec![run(0..0), run(7000..7002)])
        .unwrap();
    assert_eq!(info.entries, 2);
    db.close().unwrap();
    let db = Db::open(dir.path(), small_opts()).unwrap();
    assert_eq!(scan(&db, ReadOptions::default()).len(), 3003);
}

#[test]
fn a_panic_while_ingesting_runs_installs_nothing_and_leaves_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small_opts()).unwrap();
    db.put(b"a", b"1").unwrap();
    db.flush().unwrap();
    let files = sst_count(dir.path());
    // A run that panics half way, once in a writer thread and once in the caller's own run.
    let panicking = |from: u32| {
        (from..from + 2000).map(move |i| {
            assert!(i < from + 1000, "the input broke");
            (format!("k{i:05}").into_bytes(), vec![7u8; 100])
        })
    };
    let fine = |from: u32| {
        (from..from + 2000)
            .map(|i| (format!("k{i:05}").into_bytes(), vec![7u8; 100]))
            .collect::<Vec<_>>()
            .into_iter()
    };
    let err = db
        .ingest_sorted_runs(vec![
            Box::new(fine(0)) as Box<dyn Iterator<Item = (Vec<u8>, Vec<u8>)> + Send>,
            Box::new(panicking(10_000)),
        ])
        .unwrap_err();
    assert!(err.to_string().contains("the input broke"), "{err}");
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        db.ingest_sorted_runs(vec![
            Box::new(panicking(20_000)) as Box<dyn Iterator<Item = (Vec<u8>, Vec<u8>)> + Send>,
            Box::new(fine(30_000)),
        ])
    }));
    assert!(caught.is_err());
    assert_eq!(sst_count(dir.path()), files);
    assert_eq!(scan(&db, ReadOptions::default()).len(), 1);
    // The engine goes on.
    db.ingest_sorted_runs(vec![fine(0), fine(2000)]).unwrap();
    assert_eq!(scan(&db, ReadOptions::default()).len(), 4001);
}

#[test]
fn db_and_iterators_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Db>();
    send_sync::<keyed_state_lsm::Snapshot>();
    send::<keyed_state_lsm::DbIter>();
}

/// Throughput smoke test; run with `cargo test --release --test lsm_scenarios perf_smoke -- --ignored --nocapture`.
#[test]
#[ignore]
fn perf_smoke() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        memtable_size: 4 << 20,
        target_file_size: 4 << 20,
        level_base_size: 16 << 20,
        sst: SstOptions::default(),
        ..small_opts()
    };
    let db = Db::open(dir.path(), opts).unwrap();
    let n = 500_000u64;
    let key = |i: u64| format!("key{:012}", (i * 2_654_435_761) % n).into_bytes();
    let t = std::time::Instant::now();
    for i in 0..n {
        db.put(&key(i), &[b'v'; 100]).unwrap();
    }
    db.flush().unwrap();
    let w = t.elapsed();
    let t = std::time::Instant::now();
    for i in 0..n {
        assert!(db.get(&key(i)).unwrap().is_some());
    }
    let r = t.elapsed();
    let t = std::time::Instant::now();
    let count = scan(&db, ReadOptions::default()).len();
    let s = t.elapsed();
    assert_eq!(count as u64, n);
    for i in 0..n / 10 {
        db.merge(b"list", &i.to_le_bytes()).unwrap();
    }
    let t = std::time::Instant::now();
    let l = db.get(b"list").unwrap().unwrap().len();
    let m = t.elapsed();
    let st = db.stats();
    eprintln!(
        "puts {:.0}/s, gets {:.0}/s, scan {:.0}/s, list of {} operands ({l} B) read in {m:?}, write amp {:.2}, levels {:?}",
        n as f64 / w.as_secs_f64(),
        n as f64 / r.as_secs_f64(),
        n as f64 / s.as_secs_f64(),
        n / 10,
        st.write_amplification(),
        st.level_files
    );
}

#[test]
fn background_error_surfaces_on_next_write() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let db = Db::open(&path, small_opts()).unwrap();
    db.put(b"a", b"1").unwrap();
    // The flush thread cannot create its SST any more.
    std::fs::remove_dir_all(&path).unwrap();
    assert!(matches!(db.flush(), Err(LsmError::Background(_))));
    assert!(matches!(db.put(b"b", b"2"), Err(LsmError::Background(_))));
    // Reads of what is in memory still work.
    assert_eq!(get(&db, b"a").as_deref(), Some(&b"1"[..]));
}

#[test]
fn concurrent_writers_readers_and_background_work_agree() {
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(Db::open(dir.path(), small_opts()).unwrap());
    let writers: Vec<_> = (0..3u32)
        .map(|t| {
            let db = Arc::clone(&db);
            std::thread::spawn(move || {
                for round in 0..40u32 {
                    for i in 0..50u32 {
                        let k = format!("t{t}-k{i:03}");
                        db.put(k.as_bytes(), &round.to_be_bytes()).unwrap();
                    }
                    db.merge(
                        format!("t{t}-list").as_bytes(),
                        round.to_string().as_bytes(),
                    )
                    .unwrap();
                }
            })
        })
        .collect();
    let reader = {
        let db = Arc::clone(&db);
        std::thread::spawn(move || {
            let mut last = [0u32; 3];
            for _ in 0..200 {
                for (t, l) in last.iter_mut().enumerate() {
                    if let Some(v) = db.get(format!("t{t}-k000").as_bytes()).unwrap() {
                        let r = u32::from_be_bytes(v[..4].try_into().unwrap());
                        assert!(r >= *l, "value went back in time");
                        *l = r;
                    }
                }
            }
        })
    };
    for w in writers {
        w.join().unwrap();
    }
    reader.join().unwrap();
    db.compact_all().unwrap();
    for t in 0..3 {
        for i in 0..50u32 {
            let v = get(&db, format!("t{t}-k{i:03}").as_bytes()).unwrap();
            assert_eq!(v, 39u32.to_be_bytes());
        }
        let want: Vec<String> = (0..40).map(|r: u32| r.to_string()).collect();
        assert_eq!(
            get(&db, format!("t{t}-list").as_bytes()).unwrap(),
            want.join(",").into_bytes()
        );
    }
}

#[test]
fn checkpoint_copies_when_hard_links_fail() {
    // Across filesystems hard links fail (EXDEV) and files are copied instead.
    let shm = std::path::Path::new("/dev/shm");
    if !shm.is_dir() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let target = tempfile::tempdir_in(shm).unwrap();
    let db = Db::open(dir.path(), small_opts()).unwrap();
    db.put(b"k", b"v").unwrap();
    let info = db.checkpoint(target.path().join("cp")).unwrap();
    assert_eq!(info.files.len(), 1);
    let same_fs = {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(dir.path()).unwrap().dev()
            == std::fs::metadata(target.path()).unwrap().dev()
    };
    assert_eq!(info.files[0].linked, same_fs);
    let c = Db::open(target.path().join("cp"), small_opts()).unwrap();
    assert_eq!(get(&c, b"k").as_deref(), Some(&b"v"[..]));
}

#[test]
fn missing_sst_named_by_manifest_is_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small_opts()).unwrap();
    db.put(b"a", b"1").unwrap();
    db.close().unwrap();
    let sst = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "sst"))
        .unwrap();
    std::fs::remove_file(&sst).unwrap();
    match Db::open(dir.path(), small_opts()) {
        Err(e) => assert!(
            e.to_string()
                .contains(&*sst.file_name().unwrap().to_string_lossy()),
            "{e}"
        ),
        Ok(_) => panic!("opened without a live file"),
    }
}

/// `get_into` agrees with `get` for values in the memtable, in immutable memtables, in SSTs, for merges
/// across all three, deletes and range tombstones; the buffer is reused (cleared on a miss).
#[test]
fn get_into_matches_get_across_memtables_and_files() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small_opts()).unwrap();
    let mut buf = b"stale".to_vec();
    for i in 0..300u32 {
        db.put(format!("k{i:04}").as_bytes(), &[b'a'; 40]).unwrap();
    }
    db.flush().unwrap();
    for i in (0..300u32).step_by(3) {
        db.merge(format!("k{i:04}").as_bytes(), b"m1").unwrap();
    }
    for i in (0..300u32).step_by(5) {
        db.delete(format!("k{i:04}").as_bytes()).unwrap();
    }
    db.delete_range(b"k0100", b"k0120").unwrap();
    for i in (0..300u32).step_by(7) {
        db.merge(format!("k{i:04}").as_bytes(), b"m2").unwrap();
    }
    // A long key and a long value (stored outside the skiplist node).
    db.put(&[b'z'; 100], &[b'v'; 500]).unwrap();
    for i in 0..300u32 {
        let k = format!("k{i:04}");
        let want = get(&db, k.as_bytes());
        let found = db.get_into(k.as_bytes(), &mut buf).unwrap();
        assert_eq!(found.then(|| buf.clone()), want, "{k}");
        if !found {
            assert!(buf.is_empty());
        }
    }
    assert!(db.get_into(&[b'z'; 100], &mut buf).unwrap());
    assert_eq!(buf, vec![b'v'; 500]);
    assert_eq!(
        get(&db, b"k0003"),
        Some(b"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa,m1".to_vec())
    );
    assert_eq!(get(&db, b"k0101"), None);
    assert_eq!(get(&db, b"k0105"), Some(b"m2".to_vec()));
    assert_eq!(
        get(&db, b"k0007"),
        Some(b"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa,m2".to_vec())
    );
    assert_eq!(get(&db, b"k0005"), None);
    assert_eq!(get(&db, b"k0035"), Some(b"m2".to_vec()));
}

/// An iterator created before more writes switch (and flush) the memtables it reads keeps reading its
/// view: the memtable cursors hold their tables, and entries inserted later are filtered by seqno.
#[test]
fn iterator_keeps_its_view_across_memtable_switches() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small_opts()).unwrap();
    for i in 0..100u32 {
        db.put(format!("k{i:04}").as_bytes(), b"old").unwrap();
    }
    db.delete(b"k0050").unwrap();
    let mut it = db.iter(ReadOptions::default());
    it.seek(b"k0040");
    assert_eq!(it.key(), b"k0040");
    // Interleaved inside the iterator's range, and far more than one memtable holds.
    for round in 0..20u32 {
        for i in 0..100u32 {
            db.put(
                format!("k{i:04}").as_bytes(),
                format!("new{round}").as_bytes(),
            )
            .unwrap();
            db.put(format!("k{i:04}x").as_bytes(), b"inserted").unwrap();
        }
    }
    assert!(db.stats().flushes > 0, "the test must switch memtables");
    let mut seen = Vec::new();
    while it.valid() {
        assert_eq!(it.value(), b"old", "{:?}", it.key());
        seen.push(it.key().to_vec());
        it.next();
    }
    assert!(it.status().is_ok());
    let want: Vec<Vec<u8>> = (40..100u32)
        .filter(|&i| i != 50)
        .map(|i| format!("k{i:04}").into_bytes())
        .collect();
    assert_eq!(seen, want);
    // A fresh iterator sees the new state.
    let now = scan(&db, ReadOptions::default());
    assert_eq!(now.len(), 200);
    assert!(now.iter().all(|(k, v)| if k.ends_with(b"x") {
        v == b"inserted"
    } else {
        v == b"new19"
    }));
}

/// Reading one entry and dropping the iterator (an emptiness check) gives the same first entry as a full
/// scan, with every kind of version behind it in memtables: overwrites, deletes, merges, range tombstones.
#[test]
fn first_entry_and_full_scan_agree_over_memtable_versions() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small_opts()).unwrap();
    for round in 0..3u8 {
        for i in 0..50u32 {
            let k = format!("p{:02}/{i:02}", i % 5);
            match (i + u32::from(round)) % 4 {
                0 => db.put(k.as_bytes(), &[round]).unwrap(),
                1 => db.merge(k.as_bytes(), &[b'0' + round]).unwrap(),
                2 => db.delete(k.as_bytes()).unwrap(),
                _ => db.put(k.as_bytes(), &[round; 60]).unwrap(),
            }
        }
    }
    db.delete_range(b"p03/", b"p03/30").unwrap();
    for p in 0..5u32 {
        let prefix = format!("p{p:02}/").into_bytes();
        let ro = || ReadOptions {
            prefix: Some(prefix.clone()),
            ..ReadOptions::default()
        };
        let all = scan(&db, ro());
        let mut it = db.iter(ro());
        it.seek_to_first();
        let first = it.valid().then(|| (it.key().to_vec(), it.value().to_vec()));
        assert_eq!(first.as_ref(), all.first(), "prefix {p}");
        for (k, v) in &all {
            assert_eq!(get(&db, k).as_ref(), Some(v), "{k:?}");
        }
    }
}

/// Merge operands per SST file in the database directory.
fn operands_per_file(dir: &std::path::Path) -> Vec<u64> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "sst") {
            let r = keyed_state_lsm::internals::sst::SstReader::open(
                &p,
                u64::MAX,
                keyed_state_lsm::internals::BlockCache::new(1 << 20),
            )
            .unwrap();
            out.push(r.properties().merge_operands);
        }
    }
    out
}

#[test]
fn flush_partial_merges_operand_runs_but_not_across_snapshots_or_range_tombstones() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        merge_operator: Some(Arc::new(ListAppendOperator)),
        ..Options::default()
    };
    let db = Db::open(dir.path(), opts).unwrap();
    db.merge(b"l", b"a").unwrap();
    db.merge(b"l", b"b").unwrap();
    let snap = db.snapshot();
    db.merge(b"l", b"c").unwrap();
    db.merge(b"l", b"d").unwrap();
    for i in 0..10u8 {
        db.merge(b"m", &[b'0' + i]).unwrap();
    }
    db.flush().unwrap();
    // Runs {a,b} and {c,d} of "l" (split by the snapshot) and one run of "m": three operands.
    assert_eq!(operands_per_file(dir.path()), vec![3]);
    assert_eq!(get(&db, b"l").as_deref(), Some(&b"a,b,c,d"[..]));
    assert_eq!(
        db.get_at(b"l", &snap).unwrap().as_deref(),
        Some(&b"a,b"[..])
    );
    assert_eq!(get(&db, b"m").as_deref(), Some(&b"0,1,2,3,4,5,6,7,8,9"[..]));
    drop(snap);

    // A range tombstone in the memtable: operands are written as they are, and it hides only the older ones.
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        merge_operator: Some(Arc::new(ListAppendOperator)),
        ..Options::default()
    };
    let db = Db::open(dir.path(), opts).unwrap();
    db.merge(b"r", b"x").unwrap();
    db.delete_range(b"r", b"s").unwrap();
    db.merge(b"r", b"y").unwrap();
    db.merge(b"r", b"z").unwrap();
    db.flush().unwrap();
    assert_eq!(operands_per_file(dir.path()), vec![3]);
    assert_eq!(get(&db, b"r").as_deref(), Some(&b"y,z"[..]));
}

/// `Db::wait_for_background_work` in a thread of its own: Some(result) once it returned within `limit`,
/// None if it did not (a picker that finds work it never finishes would keep it waiting forever).
fn wait_within(db: &Arc<Db>, limit: std::time::Duration) -> Option<Result<(), LsmError>> {
    let (tx, rx) = std::sync::mpsc::channel();
    let db = Arc::clone(db);
    std::thread::spawn(move || {
        let _ = tx.send(db.wait_for_background_work());
    });
    rx.recv_timeout(limit).ok()
}

#[test]
fn waiting_for_background_work_leaves_no_pending_flush_or_compaction() {
    // Ascending keys (each flush a run of its own keys and sequence numbers), L0 held back from the base
    // level (the default `l0_base_ratio`) and with the leveled rule.
    for ratio in [Options::default().l0_base_ratio, 0.0] {
        let dir = tempfile::tempdir().unwrap();
        let opts = Options {
            l0_base_ratio: ratio,
            ..small_opts()
        };
        let db = Arc::new(Db::open(dir.path(), opts).unwrap());
        let value = [7u8; 100];
        for i in 0..20_000u32 {
            db.put(&i.to_be_bytes(), &value).unwrap();
        }
        wait_within(&db, std::time::Duration::from_secs(120))
            .expect("wait_for_background_work returned")
            .unwrap();
        let s = db.stats();
        assert_eq!(s.immutable_memtables, 0, "{s:?}");
        assert!(s.flushes > 0, "the writes filled several memtables: {s:?}");
        assert!(!s.compaction_pending, "ratio {ratio}: {s:?}");
        // Held back, L0 stays under the run count at which it goes down anyway (half the stop trigger);
        // with the leveled rule, under its compaction trigger.
        let bound = if ratio > 0.0 {
            small_opts().l0_stop_writes_trigger / 2
        } else {
            small_opts().l0_compaction_trigger
        };
        assert!(s.l0_sorted_runs < bound, "ratio {ratio}: {s:?}");
        assert_eq!(get(&db, &19_999u32.to_be_bytes()), Some(value.to_vec()));
    }
}

#[test]
fn compact_all_runs_alone_without_automatic_compactions_in_between() {
    for round in 0..5u32 {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), small_opts()).unwrap();
        // 80 keys fill most of one memtable.
        for i in 0..80u32 {
            db.put(format!("k{i:04}").as_bytes(), &[b'a'; 64]).unwrap();
        }
        db.flush().unwrap();
        db.wait_for_background_work().unwrap();
        let before = db.stats();
        assert_eq!(before.level_files[0], 1, "{before:?}");
        // compact_all's own flush brings L0 to its trigger; that L0 compaction would only rewrite what the
        // manual one rewrites anyway, so it must not start first.
        for i in 0..80u32 {
            db.put(format!("k{i:04}").as_bytes(), &[b'b'; 64]).unwrap();
        }
        db.compact_all().unwrap();
        let after = db.stats();
        assert_eq!(
            after.compactions - before.compactions,
            1,
            "round {round}: {after:?}"
        );
        assert_eq!(after.trivial_moves, before.trivial_moves, "{after:?}");
        assert_eq!(
            after.level_files.iter().sum::<usize>(),
            after.level_files[3]
        );
        assert_eq!(get(&db, b"k0042").as_deref(), Some(&[b'b'; 64][..]));
    }
}

/// (nice, scheduling policy) of this process's threads named `name` (`/proc/self/task/*/stat`, fields 19
/// and 41, counted after the parenthesised command name from field 3).
#[cfg(target_os = "linux")]
fn thread_sched(name: &str) -> Vec<(i64, i64)> {
    let mut out = Vec::new();
    for t in std::fs::read_dir("/proc/self/task").unwrap() {
        let dir = t.unwrap().path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if comm.trim() != name {
            continue;
        }
        let stat = std::fs::read_to_string(dir.join("stat")).unwrap_or_default();
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        out.push((f[16].parse().unwrap(), f[38].parse().unwrap()));
    }
    out
}

/// The calling thread's nice value.
#[cfg(target_os = "linux")]
fn own_nice() -> i64 {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    rest.split_whitespace().nth(16).unwrap().parse().unwrap()
}

#[cfg(target_os = "linux")]
#[test]
fn background_threads_run_at_the_configured_lower_priority() {
    let nice_of = |name: &str| -> Vec<i64> { thread_sched(name).iter().map(|t| t.0).collect() };
    let base = own_nice();
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(
        dir.path(),
        Options {
            background_nice: 3,
            ..small_opts()
        },
    )
    .unwrap();
    // The threads set their priority first thing; give them a moment to start. Tests running in parallel
    // have background threads of their own, at the default increment (5), so look for one at +3.
    let expected = (base + 3).min(19);
    let found = |name: &str| nice_of(name).contains(&expected);
    for _ in 0..100 {
        if found("lsm-bg-0") && found("lsm-bg-1") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(found("lsm-bg-0"), "{:?} (base {base})", nice_of("lsm-bg-0"));
    assert!(found("lsm-bg-1"), "{:?} (base {base})", nice_of("lsm-bg-1"));
    db.put(b"k", b"v").unwrap();
    assert_eq!(get(&db, b"k").as_deref(), Some(&b"v"[..]));
}

#[cfg(target_os = "linux")]
#[test]
fn background_threads_run_under_sched_batch_unless_told_not_to() {
    let base = own_nice();
    const SCHED_OTHER: i64 = 0;
    const SCHED_BATCH: i64 = 3;
    // Other tests' engines run at the default increment (5); these two are told apart by theirs.
    let (batch_dir, other_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let batch = Db::open(
        batch_dir.path(),
        Options {
            background_nice: 2,
            ..small_opts()
        },
    )
    .unwrap();
    let other = Db::open(
        other_dir.path(),
        Options {
            background_nice: 1,
            background_batch_policy: false,
            ..small_opts()
        },
    )
    .unwrap();
    let want = |inc: i64, policy: i64| {
        move |name: &str| thread_sched(name).contains(&((base + inc).min(19), policy))
    };
    for _ in 0..100 {
        if ["lsm-bg-0", "lsm-bg-1"]
            .iter()
            .all(|n| want(2, SCHED_BATCH)(n) && want(1, SCHED_OTHER)(n))
        {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    for name in ["lsm-bg-0", "lsm-bg-1"] {
        assert!(
            want(2, SCHED_BATCH)(name),
            "{name}: {:?} (base {base})",
            thread_sched(name)
        );
        assert!(
            want(1, SCHED_OTHER)(name),
            "{name}: {:?} (base {base})",
            thread_sched(name)
        );
    }
    batch.put(b"k", b"v").unwrap();
    other.put(b"k", b"v").unwrap();
    assert_eq!(get(&batch, b"k").as_deref(), Some(&b"v"[..]));
}

#[test]
fn a_manual_compaction_started_while_writes_are_stopped_by_a_deep_l0_does_not_deadlock() {
    let dir = tempfile::tempdir().unwrap();
    let opts = stalling_opts();
    let db = Arc::new(Db::open(dir.path(), opts).unwrap());
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let writer = {
        let (db, tx) = (Arc::clone(&db), done_tx.clone());
        std::thread::spawn(move || {
            for i in 0..3000u32 {
                db.put(format!("k{:05}", i % 1500).as_bytes(), &[b'x'; 64])
                    .unwrap();
            }
            tx.send("writer").unwrap();
        })
    };
    let compactor = {
        let (db, tx) = (Arc::clone(&db), done_tx);
        std::thread::spawn(move || {
            for _ in 0..20 {
                db.compact_range(b"k00000", b"k01499").unwrap();
            }
            tx.send("compactor").unwrap();
        })
    };
    // Before automatic compactions could override a waiting manual one, the stalled writer (holding the
    // write lock) and the manual compaction (waiting for it to flush) waited for each other for good.
    let timeout = std::time::Duration::from_secs(120);
    for _ in 0..2 {
        done_rx
            .recv_timeout(timeout)
            .expect("writer and manual compaction finish");
    }
    writer.join().unwrap();
    compactor.join().unwrap();
    assert!(db.stats().write_stalls > 0, "the scenario stalled writes");
    assert_eq!(get(&db, b"k01499").as_deref(), Some(&[b'x'; 64][..]));
}

#[test]
fn a_zero_level_base_size_neither_spins_nor_hangs_the_compaction_thread() {
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(
        Db::open(
            dir.path(),
            Options {
                level_base_size: 0,
                ..small_opts()
            },
        )
        .unwrap(),
    );
    for i in 0..2000u32 {
        db.put(&i.to_be_bytes(), &[1u8; 32]).unwrap();
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = {
        let db = Arc::clone(&db);
        std::thread::spawn(move || tx.send(db.wait_for_background_work()).unwrap())
    };
    // Before, an empty L0 scored above 1 with a zero base size: the thread looped picking nothing, and
    // waiting for it never returned.
    rx.recv_timeout(std::time::Duration::from_secs(60))
        .expect("background work settles")
        .unwrap();
    waiter.join().unwrap();
    assert_eq!(get(&db, &1999u32.to_be_bytes()), Some(vec![1u8; 32]));
}

#[test]
fn memtables_after_an_oversized_batch_start_with_an_index_within_their_budget() {
    // One batch of 20,000 distinct keys lands in one 16 KiB memtable (a batch is never split), whose point
    // index grows to tens of thousands of slots. Its successors inherit the index size, capped at a quarter
    // of the budget: without the cap each would be full at its first write, and every write would switch
    // memtables (and soon stall behind the flushes).
    let dir = tempfile::tempdir().unwrap();
    let opts = small_opts();
    let budget = opts.memtable_size;
    let db = Db::open(dir.path(), opts).unwrap();
    let mut batch = WriteBatch::new();
    for i in 0..20_000u32 {
        batch.put(&i.to_be_bytes(), b"v");
    }
    db.write(&batch).unwrap();
    db.put(b"after", b"1").unwrap(); // switches away from the oversized memtable
    let flushes_before = db.stats().flushes;
    for i in 0..50u32 {
        db.put(format!("small{i:02}").as_bytes(), b"v").unwrap();
    }
    db.wait_for_background_work().unwrap();
    let s = db.stats();
    assert!(s.memtable_bytes <= budget / 4 + (8 << 10), "{s:?}");
    assert!(
        s.flushes - flushes_before <= 2,
        "50 small puts fit one memtable: {s:?}"
    );
    assert_eq!(get(&db, b"small49").as_deref(), Some(&b"v"[..]));
    assert_eq!(
        get(&db, &19_999u32.to_be_bytes()).as_deref(),
        Some(&b"v"[..])
    );
}

/// Options with a prefix extractor and no whole-key filter: only prefixes can rule a file out.
fn prefix_opts(extractor: Arc<dyn PrefixExtractor>) -> Options {
    let mut o = small_opts();
    o.auto_compaction = false;
    o.memtable_size = 1 << 20;
    o.target_file_size = 1 << 20;
    o.sst.bloom_bits_per_key = 0;
    o.sst.prefix_extractor = Some(extractor);
    o
}

/// Key `i` of group `g`: a 4-byte prefix `g` then `i`.
fn pkey(g: u32, i: u32) -> Vec<u8> {
    [g.to_be_bytes(), i.to_be_bytes()].concat()
}

/// Writes groups `groups` (20 keys each) and flushes them into one file.
fn write_groups_as_one_file(db: &Db, groups: impl Iterator<Item = u32>) {
    for g in groups {
        for i in 0..20 {
            db.put(&pkey(g, i), format!("v{g}-{i}").as_bytes()).unwrap();
        }
    }
    db.flush().unwrap();
}

fn group_scan(db: &Db, g: u32) -> Vec<(Vec<u8>, Vec<u8>)> {
    scan(
        db,
        ReadOptions {
            lower_bound: Some(g.to_be_bytes().to_vec()),
            upper_bound: Some((g + 1).to_be_bytes().to_vec()),
            ..ReadOptions::default()
        },
    )
}

#[test]
fn gets_and_scans_within_one_prefix_skip_files_without_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), prefix_opts(Arc::new(FixedPrefix::new(4)))).unwrap();
    // Four files holding groups f + 1, f + 5, f + 9, ... each, and each spanning the whole key range (one
    // key of group 0 and one of group 1000 in every file), so that only the filters tell them apart.
    for f in 0..4 {
        db.put(&pkey(0, f), b"low").unwrap();
        db.put(&pkey(1000, f), b"high").unwrap();
        write_groups_as_one_file(&db, (1..=40).filter(|g| g % 4 == f));
    }
    assert_eq!(db.stats().level_files.first(), Some(&4));
    let before = db.stats().prefix_filter_skips;
    for g in 1..=40 {
        assert_eq!(get(&db, &pkey(g, 7)), Some(format!("v{g}-7").into_bytes()));
        let got = group_scan(&db, g);
        assert_eq!(got.len(), 20, "group {g}");
        assert_eq!(got[3], (pkey(g, 3), format!("v{g}-3").into_bytes()));
    }
    // Each group lives in one of the four files: a scan skips (almost always) the other three, a get the
    // newer ones it passes before finding the key (on average 1.5).
    let skips = db.stats().prefix_filter_skips - before;
    assert!(
        skips >= (40 * 3 + 60) * 9 / 10,
        "only {skips} files skipped"
    );
    // Absent groups and keys.
    assert_eq!(get(&db, &pkey(99, 1)), None);
    assert!(group_scan(&db, 99).is_empty());
    // A scan reaching past one prefix reads every file.
    let before = db.stats().prefix_filter_skips;
    let wide = scan(
        &db,
        ReadOptions {
            lower_bound: Some(pkey(3, 0)),
            upper_bound: Some(pkey(5, 0)),
            ..ReadOptions::default()
        },
    );
    assert_eq!(wide.len(), 40);
    assert_eq!(db.stats().prefix_filter_skips, before);
}

/// Maps 4-byte prefixes of keys whose first byte is 0; of the others only once `grown` is set (allowed:
/// an extractor's domain may grow, never shrink).
struct GrowingPrefix {
    grown: Arc<AtomicBool>,
}

impl PrefixExtractor for GrowingPrefix {
    fn name(&self) -> &str {
        "test.growing"
    }

    fn prefix_len(&self, key: &[u8]) -> Option<usize> {
        let mapped = key.first() == Some(&0) || self.grown.load(Ordering::SeqCst);
        (mapped && key.len() >= 4).then_some(4)
    }
}

#[test]
fn a_file_with_keys_outside_the_extractors_domain_is_never_filtered_by_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let grown = Arc::new(AtomicBool::new(false));
    let x = Arc::new(GrowingPrefix {
        grown: Arc::clone(&grown),
    });
    let db = Db::open(dir.path(), prefix_opts(x)).unwrap();
    // File 1: groups 0..10 and 0x00FF_FFFF (mapped). File 2: groups 0x0100_0000.. (not mapped yet) and
    // 0..20.
    db.put(&pkey(0x00FF_FFFF, 0), b"high").unwrap();
    write_groups_as_one_file(&db, 0..10);
    for i in 0..20 {
        db.put(&pkey(0x0100_0000, i), b"late").unwrap();
    }
    write_groups_as_one_file(&db, 0..20);
    grown.store(true, Ordering::SeqCst);
    // Now the late group is mapped, but file 2 recorded no prefixes: it must still be read.
    assert_eq!(get(&db, &pkey(0x0100_0000, 5)), Some(b"late".to_vec()));
    assert_eq!(group_scan(&db, 0x0100_0000).len(), 20);
    assert_eq!(group_scan(&db, 15).len(), 20);
    // File 1 recorded every prefix: its filter rules group 15 out (the late group lies above its key range).
    assert_eq!(db.stats().prefix_filter_skips, 1);
}

#[test]
fn filters_written_by_another_extractor_are_ignored() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Db::open(dir.path(), prefix_opts(Arc::new(FixedPrefix::new(4)))).unwrap();
        write_groups_as_one_file(&db, 0..20);
        write_groups_as_one_file(&db, (0..20).step_by(2));
        db.close().unwrap();
    }
    // 8-byte prefixes (whole keys here): under the old filters every probe would miss.
    let db = Db::open(dir.path(), prefix_opts(Arc::new(FixedPrefix::new(8)))).unwrap();
    for g in 0..20 {
        assert_eq!(get(&db, &pkey(g, 4)), Some(format!("v{g}-4").into_bytes()));
    }
    assert_eq!(db.stats().prefix_filter_skips, 0);
    // And without an extractor.
    db.close().unwrap();
    let mut o = small_opts();
    o.sst.bloom_bits_per_key = 0;
    let db = Db::open(dir.path(), o).unwrap();
    assert_eq!(group_scan(&db, 12).len(), 20);
}

// ---- Files with bounds: read and compacted as if they held only the keys inside ----

/// Small files (several per level) with a 4-byte prefix filter.
fn bounded_opts() -> Options {
    let mut o = prefix_opts(Arc::new(FixedPrefix::new(4)));
    o.target_file_size = 2 << 10;
    o
}

/// Key `i` as 4-byte group `i / 100` then `i`, so that a prefix of 4 bytes selects one hundred keys.
fn bkey(i: u32) -> Vec<u8> {
    pkey(i / 100, i)
}

/// A database in `src` with puts of keys 0..500 (several files and levels), list appends to keys 140..160
/// in a later file, and range tombstones [50, 170) and [190, 260) in files of their own; returns the model
/// of what it holds.
fn bounded_source(src: &std::path::Path) -> std::collections::BTreeMap<Vec<u8>, Vec<u8>> {
    let mut model = std::collections::BTreeMap::new();
    let db = Db::open(src, bounded_opts()).unwrap();
    for i in 0..500u32 {
        let v = format!("v{i}").into_bytes();
        db.put(&bkey(i), &v).unwrap();
        model.insert(bkey(i), v);
        if i % 125 == 124 {
            db.flush().unwrap();
        }
    }
    db.compact_all().unwrap();
    for i in 140..160u32 {
        db.merge(&bkey(i), b"m").unwrap();
        let e = model.get_mut(&bkey(i)).unwrap();
        e.extend_from_slice(b",m");
    }
    db.flush().unwrap();
    db.delete_range(&bkey(50), &bkey(170)).unwrap();
    db.put(&bkey(165), b"after").unwrap();
    db.flush().unwrap();
    db.delete_range(&bkey(190), &bkey(260)).unwrap();
    db.flush().unwrap();
    for i in (50..170).chain(190..260) {
        model.remove(&bkey(i));
    }
    model.insert(bkey(165), b"after".to_vec());
    db.close().unwrap();
    model
}

/// Copies `src` as a checkpoint into `dst` and rewrites its manifest so that every file carries `bounds`.
fn adopt_bounded(src: &std::path::Path, dst: &std::path::Path, bounds: &KeyBounds) -> usize {
    let db = Db::open(src, bounded_opts()).unwrap();
    let info = db.checkpoint(dst).unwrap();
    db.close().unwrap();
    std::fs::remove_file(&info.manifest).unwrap();
    let files: Vec<AdoptFile> = info
        .files
        .iter()
        .map(|f| AdoptFile {
            level: f.level,
            number: f.number,
            bounds: Some(bounds.clone()),
        })
        .collect();
    assert!(files.len() >= 6, "{files:?}");
    adopt_sst_files(&OsStorage, dst, &files, info.seqno, 4).unwrap()
}

fn model_in(
    model: &std::collections::BTreeMap<Vec<u8>, Vec<u8>>,
    lo: &[u8],
    hi: &[u8],
) -> Vec<(Vec<u8>, Vec<u8>)> {
    model
        .range(lo.to_vec()..hi.to_vec())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn check_bounded_reads(db: &Db, model: &std::collections::BTreeMap<Vec<u8>, Vec<u8>>) {
    let (lo, hi) = (bkey(100), bkey(200));
    let want = model_in(model, &lo, &hi);
    assert!(want.len() > 20, "{}", want.len());
    // Point reads: inside as the model, outside nothing.
    for i in 0..500u32 {
        let k = bkey(i);
        let expect = if (100..200).contains(&i) {
            model.get(&k).cloned()
        } else {
            None
        };
        assert_eq!(get(db, &k), expect, "key {i}");
    }
    // Full scans, scans with bounds, seeks below the bounds, prefix scans.
    assert_eq!(scan(db, ReadOptions::default()), want);
    let ro = ReadOptions {
        lower_bound: Some(bkey(20)),
        upper_bound: Some(bkey(180)),
        ..ReadOptions::default()
    };
    assert_eq!(scan(db, ro), model_in(model, &lo, &bkey(180)));
    let mut it = db.iter(ReadOptions::default());
    it.seek(&bkey(3));
    assert_eq!(it.key(), want[0].0.as_slice());
    let last = &want[want.len() - 1].0;
    it.seek(last);
    assert!(it.valid() && it.key() == last.as_slice());
    it.next();
    assert!(!it.valid());
    for (g, expect) in [(0u32, vec![]), (1, want.clone()), (2, vec![]), (4, vec![])] {
        let ro = ReadOptions {
            prefix: Some(g.to_be_bytes().to_vec()),
            ..ReadOptions::default()
        };
        assert_eq!(scan(db, ro), expect, "prefix {g}");
    }
    // Snapshot reads see the same, and not the writes after them.
    let snap = db.snapshot();
    db.put(&bkey(180), b"later").unwrap();
    assert_eq!(
        db.get_at(&bkey(180), &snap).unwrap().map(|v| v.to_vec()),
        model.get(&bkey(180)).cloned()
    );
    assert_eq!(db.get_at(&bkey(20), &snap).unwrap(), None);
    let ro = ReadOptions {
        snapshot: Some(&snap),
        ..ReadOptions::default()
    };
    assert_eq!(scan(db, ro), want);
    db.put(&bkey(180), &model[&bkey(180)]).unwrap();
}

#[test]
fn bounded_files_read_and_scan_only_inside_their_bounds_and_survive_reopen() {
    let src = tempfile::tempdir().unwrap();
    let dst = tempfile::tempdir().unwrap();
    let dst = dst.path().join("db");
    let model = bounded_source(src.path());
    let bounds = KeyBounds::new(bkey(100), bkey(200));
    let named = adopt_bounded(src.path(), &dst, &bounds);
    let db = Db::open(&dst, bounded_opts()).unwrap();
    check_bounded_reads(&db, &model);
    // The files keep their bounds in the manifest and in checkpoints.
    let ck = tempfile::tempdir().unwrap();
    let info = db.checkpoint(ck.path().join("c")).unwrap();
    // The adopted files and the flush of the reads' writes.
    assert_eq!(info.files.len(), named + 1);
    assert!(info
        .files
        .iter()
        .any(|f| f.bounds.as_ref() == Some(&bounds)));
    assert!(info
        .files
        .iter()
        .all(|f| f.bounds.is_none() || f.bounds.as_ref() == Some(&bounds)));
    db.close().unwrap();
    let db = Db::open(&dst, bounded_opts()).unwrap();
    check_bounded_reads(&db, &model);
    db.close().unwrap();
    // So does the checkpoint of the bounded database.
    let db = Db::open(ck.path().join("c"), bounded_opts()).unwrap();
    check_bounded_reads(&db, &model);
}

#[test]
fn bounded_files_compact_into_unbounded_files_without_the_keys_outside() {
    let src = tempfile::tempdir().unwrap();
    let dst = tempfile::tempdir().unwrap();
    let dst = dst.path().join("db");
    let model = bounded_source(src.path());
    adopt_bounded(src.path(), &dst, &KeyBounds::new(bkey(100), bkey(200)));
    let db = Db::open(&dst, bounded_opts()).unwrap();
    // Keys written outside the bounds after the adoption are the database's own: compaction keeps them.
    db.put(&bkey(300), b"new").unwrap();
    let mut model = model;
    model.retain(|k, _| k >= &bkey(100) && k < &bkey(200));
    model.insert(bkey(300), b"new".to_vec());
    db.compact_all().unwrap();
    let ck = tempfile::tempdir().unwrap();
    let info = db.checkpoint(ck.path().join("c")).unwrap();
    assert!(!info.files.is_empty());
    assert!(info.files.iter().all(|f| f.bounds.is_none()), "{info:?}");
    assert_eq!(
        scan(&db, ReadOptions::default()),
        model_in(&model, &[], &[0xFF; 9])
    );
    db.close().unwrap();
    // What the compacted files hold, read without any bounds: nothing outside (and the clipped tombstones
    // still delete inside).
    let plain = tempfile::tempdir().unwrap();
    let plain = plain.path().join("db");
    std::fs::create_dir_all(&plain).unwrap();
    let mut files = Vec::new();
    for f in &info.files {
        std::fs::copy(&f.path, plain.join(f.path.file_name().unwrap())).unwrap();
        files.push(AdoptFile {
            level: f.level,
            number: f.number,
            bounds: None,
        });
    }
    adopt_sst_files(&OsStorage, &plain, &files, info.seqno, 4).unwrap();
    let db = Db::open(&plain, bounded_opts()).unwrap();
    assert_eq!(
        scan(&db, ReadOptions::default()),
        model_in(&model, &[], &[0xFF; 9])
    );
    for i in (0..100u32).chain(200..300).chain(301..500) {
        assert_eq!(get(&db, &bkey(i)), None, "key {i}");
    }
}

#[test]
fn a_bounded_file_with_nothing_inside_its_bounds_is_left_out() {
    let src = tempfile::tempdir().unwrap();
    let dst = tempfile::tempdir().unwrap();
    let dst = dst.path().join("db");
    bounded_source(src.path());
    // Keys 600.. are in no file; the tombstones end before.
    let named = adopt_bounded(src.path(), &dst, &KeyBounds::new(bkey(600), bkey(700)));
    assert_eq!(named, 0);
    let db = Db::open(&dst, bounded_opts()).unwrap();
    assert_eq!(scan(&db, ReadOptions::default()), vec![]);
    assert_eq!(db.stats().level_files.iter().sum::<usize>(), 0);
}
