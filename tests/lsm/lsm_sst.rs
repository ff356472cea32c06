//! SST file layer: round trips, bloom filter, properties, zero-copy reads, corruption and truncation handling,
//! block cache bound, and both I/O paths.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use keyed_state_lsm::internals::ikey::{self, ValueKind};
use keyed_state_lsm::internals::sst::format::{Footer, BLOCK_TRAILER_LEN, FOOTER_LEN};
use keyed_state_lsm::internals::sst::{PrefixProbe, SstMeta, SstReader, SstWriter};
use keyed_state_lsm::internals::{copy_file, BlockCache};
use keyed_state_lsm::storage::OsStorage;
use keyed_state_lsm::{
    Compression, FixedPrefix, LsmError, MetadataPlacement, PrefixExtractor, PropertiesCollector,
    SstOptions,
};
use proptest::prelude::*;

/// An internal key ordered by `ikey::compare`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct IKey(Vec<u8>);
impl Ord for IKey {
    fn cmp(&self, o: &Self) -> Ordering {
        ikey::compare(&self.0, &o.0)
    }
}
impl PartialOrd for IKey {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

fn ik(user: &[u8], seqno: u64, kind: ValueKind) -> Vec<u8> {
    let mut v = Vec::new();
    ikey::encode(&mut v, user, seqno, kind);
    v
}

fn kind_of(i: u8) -> ValueKind {
    ValueKind::from_u8(i % 4).unwrap_or(ValueKind::Put)
}

fn write(path: &Path, opts: SstOptions, model: &BTreeMap<IKey, Vec<u8>>) -> SstMeta {
    let mut w = SstWriter::create(path, opts, None).unwrap();
    for (k, v) in model {
        w.add(&k.0, v).unwrap();
    }
    w.finish().unwrap()
}

fn scan_all(r: &Arc<SstReader>) -> Result<Vec<(Vec<u8>, Vec<u8>)>, LsmError> {
    let mut it = r.iter();
    it.seek_to_first()?;
    let mut out = Vec::new();
    while it.valid() {
        out.push((it.key().to_vec(), it.value().to_vec()));
        it.next()?;
    }
    Ok(out)
}

fn sample_model(n: u32, value_len: usize) -> BTreeMap<IKey, Vec<u8>> {
    let mut m = BTreeMap::new();
    for i in 0..n {
        let user = format!("user-{:05}", i / 2).into_bytes();
        let kind = kind_of(i as u8);
        let v = format!("value {i} ").repeat(value_len / 8 + 1).into_bytes();
        m.insert(IKey(ik(&user, u64::from(1000 - i % 7), kind)), v);
    }
    m
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, .. ProptestConfig::default() })]

    #[test]
    fn round_trip_and_seek(
        entries in prop::collection::vec(
            (prop::collection::vec(0u8..4, 0..6), 0u64..50, 0u8..4, prop::collection::vec(0u8..3, 0..60)),
            0..300),
        targets in prop::collection::vec((prop::collection::vec(0u8..4, 0..7), 0u64..55, 0u8..4), 1..40),
        block_size in 64usize..1024,
        restart in 1usize..8,
        lz4 in any::<bool>(),
        bloom_bits in prop_oneof![Just(0u32), Just(10u32)],
    ) {
        let mut model = BTreeMap::new();
        for (u, s, k, v) in entries {
            model.insert(IKey(ik(&u, s, kind_of(k))), v);
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("1.sst");
        let opts = SstOptions {
            block_size,
            restart_interval: restart,
            bloom_bits_per_key: bloom_bits,
            compression: if lz4 { Compression::Lz4 } else { Compression::None },
            ..SstOptions::default()
        };
        let meta = write(&path, opts, &model);
        prop_assert_eq!(meta.file_size, std::fs::metadata(&path).unwrap().len());
        let r = SstReader::open(&path, 1, BlockCache::new(1 << 20)).unwrap();
        prop_assert_eq!(r.properties(), &meta.properties);
        prop_assert_eq!(r.properties().entries, model.len() as u64);
        let got = scan_all(&r).unwrap();
        let want: Vec<_> = model.iter().map(|(k, v)| (k.0.clone(), v.clone())).collect();
        prop_assert_eq!(got, want);
        for k in model.keys() {
            prop_assert!(r.may_contain(ikey::user_key(&k.0)));
        }
        let mut it = r.iter();
        for (u, s, k) in targets {
            let t = IKey(ik(&u, s, kind_of(k)));
            it.seek(&t.0).unwrap();
            let want = model.range(t..).next();
            match want {
                None => prop_assert!(!it.valid()),
                Some((k, v)) => {
                    prop_assert!(it.valid());
                    prop_assert_eq!(it.key(), &k.0[..]);
                    prop_assert_eq!(it.value(), &v[..]);
                    prop_assert_eq!(&*it.value_slice(), &v[..]);
                    // The next entry agrees too.
                    it.next().unwrap();
                    let after = model.range((std::ops::Bound::Excluded(k.clone()), std::ops::Bound::Unbounded)).next();
                    prop_assert_eq!(it.valid().then(|| it.key().to_vec()), after.map(|(k, _)| k.0.clone()));
                }
            }
        }
    }
}

/// All versions of `user` with seqno `<= seqno` through the point-lookup path, newest first; `stop_after`
/// ends the walk early (the visitor returns false) and the result records whether it did.
fn point_lookup(
    r: &SstReader,
    user: &[u8],
    seqno: u64,
    stop_after: usize,
) -> Result<(Vec<(u64, ValueKind, Vec<u8>)>, bool), LsmError> {
    let mut lk = user.to_vec();
    lk.extend_from_slice(&((seqno.min(ikey::MAX_SEQNO) << 8) | 0xFF).to_be_bytes());
    let mut out = Vec::new();
    let more = r.get(user, &lk, seqno, &mut |s, k, v| {
        out.push((s, k, v().to_vec()));
        out.len() < stop_after
    })?;
    Ok((out, more))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, .. ProptestConfig::default() })]

    /// The point-lookup path (`SstReader::get`: prefix-array index search, one block, restart binary search)
    /// finds exactly the versions an iterator seek + scan finds, across blocks, prefix ties and early stops.
    #[test]
    fn point_lookup_agrees_with_iterator(
        entries in prop::collection::vec(
            (0usize..3, prop::collection::vec(0u8..3, 0..5), 0u64..40, 0u8..4, prop::collection::vec(0u8..3, 0..40)),
            0..400),
        targets in prop::collection::vec((0usize..3, prop::collection::vec(0u8..3, 0..5), 0u64..45, 1usize..6), 1..60),
        block_size in 48usize..700,
        restart in 1usize..17,
        lz4 in any::<bool>(),
        cached in any::<bool>(),
        cache_bytes in prop::sample::select(vec![1usize << 10, 16 << 10, 1 << 20]),
    ) {
        // Three key families: short keys, keys sharing a long prefix (prefix-array ties), 10-byte keys.
        let prefixes: [&[u8]; 3] = [b"", b"keygroup", b"\x00\x07abcdef"];
        let user = |p: usize, s: &[u8]| [prefixes[p], s].concat();
        let mut model = BTreeMap::new();
        for (p, u, s, k, v) in entries {
            model.insert(IKey(ik(&user(p, &u), s, kind_of(k))), v);
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("1.sst");
        let opts = SstOptions {
            block_size,
            restart_interval: restart,
            bloom_bits_per_key: 10,
            compression: if lz4 { Compression::Lz4 } else { Compression::None },
            ..SstOptions::default()
        };
        write(&path, opts, &model);
        // Index and filter kept by the reader or placed in a cache that holds them, evicts them (reloaded by
        // the next read) or is too small to take them (kept by the reader).
        let placement = if cached { MetadataPlacement::Cached } else { MetadataPlacement::Resident };
        let r = SstReader::open_placed(&OsStorage, &path, 1, BlockCache::new(cache_bytes), placement).unwrap();
        let mut candidates: Vec<(Vec<u8>, u64, usize)> = targets
            .into_iter()
            .map(|(p, u, s, stop)| (user(p, &u), s, stop))
            .collect();
        candidates.extend(model.keys().take(20).map(|k| (ikey::user_key(&k.0).to_vec(), 50, usize::MAX)));
        for (u, seqno, stop) in candidates {
            let (got, more) = point_lookup(&r, &u, seqno, stop).unwrap();
            let all: Vec<(u64, ValueKind, Vec<u8>)> = model
                .iter()
                .filter_map(|(k, v)| {
                    let p = ikey::parse(&k.0).unwrap();
                    (p.user_key == u.as_slice() && p.seqno <= seqno).then(|| (p.seqno, p.kind, v.clone()))
                })
                .collect();
            let want: Vec<_> = all.iter().take(stop).cloned().collect();
            prop_assert_eq!(&got, &want);
            prop_assert_eq!(more, all.len() < stop);
        }
    }
}

#[test]
fn writer_rejects_unsorted_and_malformed_keys() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = SstWriter::create(&dir.path().join("1.sst"), SstOptions::default(), None).unwrap();
    w.add(&ik(b"b", 5, ValueKind::Put), b"x").unwrap();
    // Same user key, newer seqno sorts before: rejected.
    assert!(matches!(
        w.add(&ik(b"b", 6, ValueKind::Put), b"x"),
        Err(LsmError::SstInput { .. })
    ));
    assert!(matches!(
        w.add(&ik(b"b", 5, ValueKind::Put), b"x"),
        Err(LsmError::SstInput { .. })
    ));
    assert!(matches!(
        w.add(b"short", b"x"),
        Err(LsmError::SstInput { .. })
    ));
    w.add(&ik(b"b", 4, ValueKind::Put), b"x").unwrap();
    w.add(&ik(b"ba", 9, ValueKind::Put), b"x").unwrap();
    // Names are never reused.
    assert!(SstWriter::create(&dir.path().join("1.sst"), SstOptions::default(), None).is_err());
    assert_eq!(w.finish().unwrap().properties.entries, 3);
}

#[test]
fn empty_file_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("1.sst");
    let meta = write(&path, SstOptions::default(), &BTreeMap::new());
    assert_eq!(meta.properties.entries, 0);
    let r = SstReader::open(&path, 1, BlockCache::new(1 << 20)).unwrap();
    assert!(scan_all(&r).unwrap().is_empty());
    let mut it = r.iter();
    it.seek(&ik(b"a", 1, ValueKind::Put)).unwrap();
    assert!(!it.valid());
}

#[test]
fn bloom_no_false_negatives_and_sane_fp_rate() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("1.sst");
    let mut model = BTreeMap::new();
    for i in 0..20_000u32 {
        model.insert(IKey(ik(&i.to_be_bytes(), 1, ValueKind::Put)), vec![]);
    }
    write(&path, SstOptions::default(), &model);
    let r = SstReader::open(&path, 1, BlockCache::new(1 << 20)).unwrap();
    for i in 0..20_000u32 {
        assert!(r.may_contain(&i.to_be_bytes()));
    }
    let fp = (20_000u32..220_000)
        .filter(|i| r.may_contain(&i.to_be_bytes()))
        .count();
    let rate = fp as f64 / 200_000.0;
    println!(
        "bloom false-positive rate at 10 bits/key: {:.3}%",
        rate * 100.0
    );
    assert!(rate < 0.02, "false-positive rate {rate}");
    // No filter: everything may be contained.
    let p2 = dir.path().join("2.sst");
    write(
        &p2,
        SstOptions {
            bloom_bits_per_key: 0,
            ..SstOptions::default()
        },
        &model,
    );
    let r2 = SstReader::open(&p2, 2, BlockCache::new(1 << 20)).unwrap();
    assert!(r2.may_contain(b"anything"));
}

/// Records the smallest and largest TTL timestamp (first 8 value bytes, big-endian).
struct TtlCollector {
    min: u64,
    max: u64,
}
impl PropertiesCollector for TtlCollector {
    fn add(&mut self, _ikey: &[u8], value: &[u8]) {
        if let Some(ts) = value
            .get(..8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_be_bytes)
        {
            self.min = self.min.min(ts);
            self.max = self.max.max(ts);
        }
    }
    fn finish(&mut self) -> Vec<(String, Vec<u8>)> {
        vec![
            ("ttl.min".into(), self.min.to_be_bytes().to_vec()),
            ("ttl.max".into(), self.max.to_be_bytes().to_vec()),
        ]
    }
}

#[test]
fn properties_and_collector_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("7.sst");
    let c = TtlCollector {
        min: u64::MAX,
        max: 0,
    };
    let mut w = SstWriter::create(&path, SstOptions::default(), Some(Box::new(c))).unwrap();
    let rows = [
        (ik(b"a", 10, ValueKind::Put), 500u64),
        (ik(b"a", 9, ValueKind::Merge), 300),
        (ik(b"b", 3, ValueKind::Delete), 0),
        (ik(b"c", 12, ValueKind::RangeDelete), 900),
        (ik(b"d", 1, ValueKind::Merge), 700),
    ];
    for (k, ts) in &rows {
        let mut v = ts.to_be_bytes().to_vec();
        v.extend_from_slice(b"payload");
        w.add(k, &v).unwrap();
    }
    let meta = w.finish().unwrap();
    let r = SstReader::open(&path, 7, BlockCache::new(1 << 20)).unwrap();
    let p = r.properties();
    assert_eq!(p, &meta.properties);
    assert_eq!(p.smallest, rows[0].0);
    assert_eq!(p.largest, rows[4].0);
    assert_eq!(
        (
            p.entries,
            p.merge_operands,
            p.tombstones,
            p.range_tombstones
        ),
        (5, 2, 1, 1)
    );
    assert_eq!((p.min_seqno, p.max_seqno), (1, 12));
    assert_eq!(
        p.raw_key_bytes,
        rows.iter().map(|r| r.0.len() as u64).sum::<u64>()
    );
    assert_eq!(p.raw_value_bytes, 5 * 15);
    assert_eq!(
        p.user,
        vec![
            ("ttl.min".to_string(), 0u64.to_be_bytes().to_vec()),
            ("ttl.max".to_string(), 900u64.to_be_bytes().to_vec())
        ]
    );
    assert_eq!(r.file_number(), 7);
    assert_eq!(r.path(), path);
    assert_eq!(r.file_size(), meta.file_size);
}

#[test]
fn value_slice_of_raw_block_points_into_the_map() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("1.sst");
    let model = sample_model(200, 40);
    write(
        &path,
        SstOptions {
            compression: Compression::None,
            ..SstOptions::default()
        },
        &model,
    );
    let cache = BlockCache::new(1 << 20);
    let r = SstReader::open(&path, 1, cache.clone()).unwrap();
    let mapped = r.mapped_range();
    let mut it = r.iter();
    it.seek_to_first().unwrap();
    let mut n = 0;
    while it.valid() {
        let v = it.value_slice();
        assert!(v.is_mapped());
        let p = v.as_ptr() as usize;
        assert!(mapped.contains(&p) && p + v.len() <= mapped.end);
        assert_eq!(v.as_ptr(), it.value().as_ptr());
        n += 1;
        it.next().unwrap();
    }
    assert_eq!(n, 200);
    assert_eq!(cache.usage(), 0, "raw blocks never go through the cache");
    // Compressed blocks: the slice is a view of the cached block, still without a copy.
    let p2 = dir.path().join("2.sst");
    write(&p2, SstOptions::default(), &model);
    let r2 = SstReader::open(&p2, 2, cache.clone()).unwrap();
    let mut it = r2.iter();
    it.seek_to_first().unwrap();
    let v = it.value_slice();
    assert!(!v.is_mapped());
    assert_eq!(v.as_ptr(), it.value().as_ptr());
    assert!(cache.usage() > 0);
    // The view outlives the iterator and the reader.
    let keep = v.to_vec();
    drop(it);
    drop(r2);
    assert_eq!(&*v, &keep[..]);
}

/// Byte ranges of a file's regions, from its footer.
struct Layout {
    data: std::ops::Range<usize>,
    filter: std::ops::Range<usize>,
    properties: std::ops::Range<usize>,
    index: std::ops::Range<usize>,
    footer: std::ops::Range<usize>,
}

fn layout(bytes: &[u8]) -> Layout {
    let f = Footer::decode(bytes).unwrap();
    let r = |h: keyed_state_lsm::internals::sst::format::BlockHandle| {
        h.offset as usize..(h.offset + h.size) as usize + BLOCK_TRAILER_LEN
    };
    Layout {
        data: 0..f.filter.offset as usize,
        filter: r(f.filter),
        properties: r(f.properties),
        index: r(f.index),
        footer: bytes.len() - FOOTER_LEN..bytes.len(),
    }
}

fn expect_corruption(e: LsmError, path: &Path) {
    match e {
        LsmError::Corruption { at, detail } => {
            assert_eq!(at.file, path, "{detail}");
            assert!(!detail.is_empty());
        }
        other => panic!("expected corruption, got {other}"),
    }
}

fn corruption_case(compression: Compression) {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.sst");
    let model = sample_model(120, 24);
    write(
        &good,
        SstOptions {
            block_size: 512,
            compression,
            ..SstOptions::default()
        },
        &model,
    );
    let bytes = std::fs::read(&good).unwrap();
    let l = layout(&bytes);
    let want: Vec<_> = model
        .iter()
        .map(|(k, v)| (k.0.clone(), v.clone()))
        .collect();
    let regions = [
        ("data", l.data),
        ("filter", l.filter),
        ("properties", l.properties),
        ("index", l.index),
        ("footer", l.footer),
    ];
    let mut n = 0u32;
    for (name, range) in regions {
        assert!(!range.is_empty(), "{name}");
        let step = (range.len() / 97).max(1);
        for pos in range.clone().step_by(step) {
            n += 1;
            let path: PathBuf = dir.path().join(format!("{n}.sst"));
            let mut b = bytes.clone();
            b[pos] ^= 1 << (pos % 8);
            std::fs::write(&path, &b).unwrap();
            match SstReader::open(&path, u64::from(n), BlockCache::new(1 << 20)) {
                Err(e) => {
                    assert_ne!(name, "data", "open does not read data blocks");
                    expect_corruption(e, &path);
                }
                Ok(r) => {
                    assert_eq!(
                        name, "data",
                        "a flipped bit in {name} at {pos} went unnoticed at open"
                    );
                    match scan_all(&r) {
                        Err(e) => expect_corruption(e, &path),
                        Ok(got) => panic!(
                            "flipped bit at {pos} gave {} entries, equal={}",
                            got.len(),
                            got == want
                        ),
                    }
                    // The point-lookup path never returns wrong data: each lookup either errors naming the
                    // file or returns exactly the model's versions; at least one lookup hits the damage.
                    let fresh =
                        SstReader::open(&path, u64::from(n) + 100_000, BlockCache::new(1 << 20))
                            .unwrap();
                    let mut errors = 0;
                    for k in model.keys() {
                        let u = ikey::user_key(&k.0);
                        match point_lookup(&fresh, u, u64::MAX >> 8, usize::MAX) {
                            Err(e) => {
                                expect_corruption(e, &path);
                                errors += 1;
                            }
                            Ok((got, _)) => {
                                let want: Vec<_> = model
                                    .iter()
                                    .filter(|(k2, _)| ikey::user_key(&k2.0) == u)
                                    .map(|(k2, v)| {
                                        let p = ikey::parse(&k2.0).unwrap();
                                        (p.seqno, p.kind, v.clone())
                                    })
                                    .collect();
                                assert_eq!(got, want, "flipped bit at {pos}: wrong data for {u:?}");
                            }
                        }
                    }
                    assert!(
                        errors > 0,
                        "flipped bit at {pos} unnoticed by point lookups"
                    );
                }
            }
        }
    }
}

#[test]
fn flipped_bits_are_detected_raw() {
    corruption_case(Compression::None);
}

#[test]
fn flipped_bits_are_detected_lz4() {
    corruption_case(Compression::Lz4);
}

#[test]
fn every_truncation_errors_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.sst");
    write(
        &good,
        SstOptions {
            block_size: 256,
            ..SstOptions::default()
        },
        &sample_model(40, 16),
    );
    let bytes = std::fs::read(&good).unwrap();
    let path = dir.path().join("t.sst");
    for len in 0..bytes.len() {
        std::fs::write(&path, &bytes[..len]).unwrap();
        match SstReader::open(&path, 1, BlockCache::new(1 << 20)) {
            Ok(_) => panic!("truncation to {len} of {} bytes opened", bytes.len()),
            Err(e) => expect_corruption(e, &path),
        }
        // In-memory images behave the same.
        let img: Arc<[u8]> = Arc::from(&bytes[..len]);
        assert!(SstReader::open_bytes(img, &path, 1, BlockCache::new(1 << 20)).is_err());
    }
}

#[test]
fn block_cache_stays_within_its_bound() {
    let dir = tempfile::tempdir().unwrap();
    let cache = BlockCache::new(64 * 1024);
    let model = sample_model(3000, 64);
    let mut readers = Vec::new();
    for f in 0..4u64 {
        let path = dir.path().join(format!("{f}.sst"));
        write(&path, SstOptions::default(), &model);
        readers.push(SstReader::open(&path, f, cache.clone()).unwrap());
    }
    let want: Vec<_> = model
        .iter()
        .map(|(k, v)| (k.0.clone(), v.clone()))
        .collect();
    for r in &readers {
        assert!(r.data_blocks() > 16);
        assert_eq!(scan_all(r).unwrap(), want);
        assert!(
            cache.usage() <= cache.capacity(),
            "{} > {}",
            cache.usage(),
            cache.capacity()
        );
    }
    assert!(cache.usage() > cache.capacity() / 2);
}

#[test]
fn an_sst_written_and_copied_reads_back_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("1.sst");
    let model = sample_model(2000, 100);
    let mut w = SstWriter::create(&path, SstOptions::default(), None).unwrap();
    for (k, v) in &model {
        w.add(&k.0, v).unwrap();
    }
    let est = w.estimated_size();
    let meta = w.finish().unwrap();
    assert!(
        est >= meta.file_size / 2 && est <= meta.file_size * 2,
        "{est} vs {}",
        meta.file_size
    );
    let copy = dir.path().join("2.sst");
    assert_eq!(copy_file(&path, &copy).unwrap(), meta.file_size);
    let want: Vec<_> = model
        .iter()
        .map(|(k, v)| (k.0.clone(), v.clone()))
        .collect();
    for (n, p) in [(1, &path), (2, &copy)] {
        let r = SstReader::open(p, n, BlockCache::new(1 << 20)).unwrap();
        assert_eq!(scan_all(&r).unwrap(), want);
    }
}

/// Rough throughput numbers; run with `cargo test --release --test lsm_sst -- --ignored --nocapture`.
#[test]
#[ignore]
fn perf_smoke() {
    use std::time::Instant;
    let dir = tempfile::tempdir().unwrap();
    let n = 500_000u32;
    for (name, compression) in [("raw", Compression::None), ("lz4", Compression::Lz4)] {
        let path = dir.path().join(format!("{name}.sst"));
        let t = Instant::now();
        let opts = SstOptions {
            compression,
            ..SstOptions::default()
        };
        let mut w = SstWriter::create(&path, opts, None).unwrap();
        let mut key = Vec::new();
        for i in 0..n {
            key.clear();
            ikey::encode(
                &mut key,
                format!("key{:012}", u64::from(i) * 7919).as_bytes(),
                1,
                ValueKind::Put,
            );
            w.add(&key, format!("value-{i:08}-{}", "x".repeat(100)).as_bytes())
                .unwrap();
        }
        let meta = w.finish().unwrap();
        let write = t.elapsed();
        let r = SstReader::open(&path, 1, BlockCache::new(256 << 20)).unwrap();
        let t = Instant::now();
        let mut it = r.iter();
        it.seek_to_first().unwrap();
        let mut c = 0u64;
        while it.valid() {
            c += it.value().len() as u64;
            it.next().unwrap();
        }
        let scan = t.elapsed();
        assert!(c > 0);
        let t = Instant::now();
        let lookups = 200_000u64;
        let mut found = 0;
        for j in 0..lookups {
            let i = (j * 2_654_435_761) % u64::from(n);
            key.clear();
            ikey::encode(
                &mut key,
                format!("key{:012}", i * 7919).as_bytes(),
                u64::MAX,
                ValueKind::Put,
            );
            it.seek(&key).unwrap();
            found += usize::from(it.valid());
        }
        let seek = t.elapsed();
        assert_eq!(found as u64, lookups);
        println!(
            "{name}: {n} entries, {} bytes; write {:.0} ns/entry, scan {:.0} ns/entry, random seek {:.0} ns",
            meta.file_size,
            write.as_nanos() as f64 / f64::from(n),
            scan.as_nanos() as f64 / f64::from(n),
            seek.as_nanos() as f64 / lookups as f64
        );
    }
}

/// The entries of `tests/fixtures/sst_v1.sst`, written by the format-version-1 writer (commit 2c71e10) with
/// block size 512, restart interval 4, bloom 10 bits/key, LZ4.
fn v1_fixture_model() -> BTreeMap<IKey, Vec<u8>> {
    let mut m = BTreeMap::new();
    for i in 0..300u64 {
        let user = format!("k{:04}-ab", i / 3).into_bytes();
        let seq = 1000 - (i % 3) * 10;
        let kind = match i % 5 {
            0 => ValueKind::Merge,
            1 => ValueKind::Delete,
            _ => ValueKind::Put,
        };
        let v = format!("value-{i}-")
            .repeat((i % 7) as usize + 1)
            .into_bytes();
        m.insert(IKey(ik(&user, seq, kind)), v);
    }
    m
}

#[test]
fn reads_format_version_1_fixture() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sst_v1.sst");
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(Footer::decode(&bytes).unwrap().version, 1);
    let model = v1_fixture_model();
    let r = SstReader::open(&path, 1, BlockCache::new(1 << 20)).unwrap();
    assert!(r.data_blocks() > 10);
    let want: Vec<_> = model
        .iter()
        .map(|(k, v)| (k.0.clone(), v.clone()))
        .collect();
    assert_eq!(scan_all(&r).unwrap(), want);
    // The version-1 (whole-file) bloom filter: no false negatives, and it rejects most absent keys.
    assert!(model.keys().all(|k| r.may_contain(ikey::user_key(&k.0))));
    let fp = (0..1000u32)
        .filter(|i| r.may_contain(format!("absent-{i}").as_bytes()))
        .count();
    assert!(fp < 100, "{fp} of 1000 absent keys pass the v1 filter");
    // Point lookups (binary search path: version-1 blocks have no hash index) agree with the model.
    for i in 0..101u64 {
        let user = format!("k{i:04}-ab").into_bytes();
        for seqno in [985, 995, 1000] {
            let (got, _) = point_lookup(&r, &user, seqno, usize::MAX).unwrap();
            let want: Vec<_> = model
                .iter()
                .filter_map(|(k, v)| {
                    let p = ikey::parse(&k.0).unwrap();
                    (p.user_key == &user[..] && p.seqno <= seqno)
                        .then(|| (p.seqno, p.kind, v.clone()))
                })
                .collect();
            assert_eq!(got, want, "{i} {seqno}");
        }
    }
    // The same entries written now produce a version-2 file that reads back identically.
    let dir = tempfile::tempdir().unwrap();
    let p2 = dir.path().join("v2.sst");
    let opts = SstOptions {
        block_size: 512,
        restart_interval: 4,
        bloom_bits_per_key: 10,
        compression: Compression::Lz4,
        ..SstOptions::default()
    };
    write(&p2, opts, &model);
    assert_eq!(
        Footer::decode(&std::fs::read(&p2).unwrap())
            .unwrap()
            .version,
        2
    );
    let r2 = SstReader::open(&p2, 2, BlockCache::new(1 << 20)).unwrap();
    assert_eq!(scan_all(&r2).unwrap(), want);
}

#[test]
fn lz4_blocks_decompressed_again_after_eviction_read_back_unchanged() {
    // A cache of one small block: every block read after the first scan is a miss, so the second and third
    // scans decompress blocks whose checksums were already verified (and are not hashed again).
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.sst");
    let model = sample_model(400, 24);
    write(
        &path,
        SstOptions {
            block_size: 512,
            compression: Compression::Lz4,
            ..SstOptions::default()
        },
        &model,
    );
    let r = SstReader::open(&path, 1, BlockCache::new(1024)).unwrap();
    assert!(r.data_blocks() > 10, "{}", r.data_blocks());
    let want: Vec<_> = model
        .iter()
        .map(|(k, v)| (k.0.clone(), v.clone()))
        .collect();
    for _ in 0..3 {
        assert_eq!(scan_all(&r).unwrap(), want);
    }
}

/// With `MetadataPlacement::Cached` the reader keeps neither index nor filter: they are cache entries,
/// loaded again by the first read after they were evicted, and every read finds what a resident reader finds.
#[test]
fn cached_index_and_filter_are_evictable_and_reloaded() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.sst");
    let model = sample_model(2000, 24);
    write(
        &path,
        SstOptions {
            block_size: 512,
            compression: Compression::None,
            ..SstOptions::default()
        },
        &model,
    );
    let resident = SstReader::open(&path, 1, BlockCache::new(1 << 20)).unwrap();
    let cache = BlockCache::new(4 << 20);
    let cached = SstReader::open_placed(
        &OsStorage,
        &path,
        1,
        Arc::clone(&cache),
        MetadataPlacement::Cached,
    )
    .unwrap();
    let (rm, cm) = (resident.metadata(), cached.metadata());
    assert_eq!(
        (rm.data_blocks, rm.index_bytes, rm.filter_bytes),
        (cm.data_blocks, cm.index_bytes, cm.filter_bytes)
    );
    assert!(rm.index_bytes > 0 && rm.filter_bytes > 0);
    // The resident reader holds index and filter; the cached one neither, and the cache holds both (raw data
    // blocks are read from the map, never cached).
    assert!(rm.resident_bytes >= rm.index_bytes + rm.filter_bytes);
    assert!(cm.resident_bytes + rm.index_bytes + rm.filter_bytes <= rm.resident_bytes);
    let warm = cache.usage();
    assert!(warm as u64 >= cm.index_bytes + cm.filter_bytes, "{warm}");
    let want = scan_all(&resident).unwrap();
    for round in 0..3 {
        if round > 0 {
            cache.erase_file(1);
            assert_eq!(cache.usage(), 0);
        }
        for (k, _) in model.iter().step_by(37) {
            let user = ikey::user_key(&k.0);
            assert!(cached.may_contain(user));
            assert_eq!(
                point_lookup(&cached, user, 2000, usize::MAX).unwrap(),
                point_lookup(&resident, user, 2000, usize::MAX).unwrap()
            );
        }
        assert_eq!(
            cache.usage(),
            warm,
            "index and filter loaded again into the cache"
        );
        assert_eq!(scan_all(&cached).unwrap(), want);
    }
    // A cache too small to take them: the reader keeps them.
    let tiny = SstReader::open_placed(
        &OsStorage,
        &path,
        1,
        BlockCache::new(1 << 10),
        MetadataPlacement::Cached,
    )
    .unwrap();
    assert!(tiny.metadata().resident_bytes >= rm.index_bytes + rm.filter_bytes);
    assert_eq!(scan_all(&tiny).unwrap(), want);
}

/// `tests/fixtures/sst_v3.sst`: the v1 fixture's entries written with a prefix extractor (5-byte prefixes,
/// `k0001` of `k0001-ab`), block size 512, restart interval 4, bloom 10 bits per key and per prefix, LZ4.
fn v3_fixture_options() -> SstOptions {
    SstOptions {
        block_size: 512,
        restart_interval: 4,
        bloom_bits_per_key: 10,
        compression: Compression::Lz4,
        prefix_extractor: Some(Arc::new(FixedPrefix::new(5))),
        prefix_bloom_bits_per_key: 10,
    }
}

#[test]
fn reads_format_version_3_fixture_and_writes_it_byte_for_byte() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sst_v3.sst");
    let model = v1_fixture_model();
    let dir = tempfile::tempdir().unwrap();
    let fresh = dir.path().join("v3.sst");
    write(&fresh, v3_fixture_options(), &model);
    if std::env::var_os("KS_WRITE_FIXTURES").is_some() {
        std::fs::copy(&fresh, &path).unwrap();
    }
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(Footer::decode(&bytes).unwrap().version, 3);
    // The format is pinned: today's writer produces the fixture exactly.
    assert!(
        std::fs::read(&fresh).unwrap() == bytes,
        "the v3 writer's bytes changed"
    );
    let r = SstReader::open(&path, 1, BlockCache::new(1 << 20)).unwrap();
    let want: Vec<_> = model
        .iter()
        .map(|(k, v)| (k.0.clone(), v.clone()))
        .collect();
    assert_eq!(scan_all(&r).unwrap(), want);
    let name = FixedPrefix::new(5).name().to_string();
    assert!(r.filters_prefixes_of(&name));
    assert!(!r.filters_prefixes_of("another extractor"));
    // Whole keys and prefixes: no false negatives, most absent ones ruled out.
    assert!(model.keys().all(|k| r.may_contain(ikey::user_key(&k.0))));
    assert!(model
        .keys()
        .all(|k| r.may_contain_prefix(&PrefixProbe::new(&name, &ikey::user_key(&k.0)[..5]))));
    let fp = (0..1000u32)
        .filter(|i| r.may_contain_prefix(&PrefixProbe::new(&name, format!("x{i:04}").as_bytes())))
        .count();
    assert!(fp < 100, "{fp} of 1000 absent prefixes pass");
    // A probe under another extractor's name is never ruled out.
    assert!(r.may_contain_prefix(&PrefixProbe::new("another extractor", b"x0001")));
}

#[test]
fn a_file_with_a_key_shorter_than_the_prefix_records_no_prefixes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.sst");
    let mut model = v1_fixture_model();
    model.insert(IKey(ik(b"k0", 5, ValueKind::Put)), b"short".to_vec());
    let mut opts = v3_fixture_options();
    opts.bloom_bits_per_key = 0;
    write(&path, opts, &model);
    let r = SstReader::open(&path, 1, BlockCache::new(1 << 20)).unwrap();
    let name = FixedPrefix::new(5).name().to_string();
    assert!(!r.filters_prefixes_of(&name));
    assert!(r.may_contain_prefix(&PrefixProbe::new(&name, b"x0001")));
    assert_eq!(scan_all(&r).unwrap().len(), model.len());
}

#[test]
fn a_prefix_that_is_the_whole_key_is_not_counted_twice_in_the_filter() {
    // Keys of exactly the prefix width (as value and list state keys are): with the whole-key filter on, the
    // filter is no larger than a whole-key-only one (plus its header), and both probes still pass.
    let dir = tempfile::tempdir().unwrap();
    let mut model = BTreeMap::new();
    for i in 0..2000u32 {
        model.insert(
            IKey(ik(format!("k{i:04}").as_bytes(), 7, ValueKind::Put)),
            b"v".to_vec(),
        );
    }
    let whole_only = dir.path().join("whole.sst");
    write(&whole_only, SstOptions::default(), &model);
    let both = dir.path().join("both.sst");
    let x = FixedPrefix::new(5);
    write(
        &both,
        SstOptions {
            prefix_extractor: Some(Arc::new(x.clone())),
            ..SstOptions::default()
        },
        &model,
    );
    let size = |p: &Path| {
        Footer::decode(&std::fs::read(p).unwrap())
            .unwrap()
            .filter
            .size
    };
    let header = 2 + x.name().len() as u64;
    assert_eq!(size(&both), size(&whole_only) + header);
    let r = SstReader::open(&both, 1, BlockCache::new(1 << 20)).unwrap();
    assert!(r.filters_prefixes_of(x.name()));
    for i in 0..2000u32 {
        let k = format!("k{i:04}");
        assert!(r.may_contain(k.as_bytes()));
        assert!(r.may_contain_prefix(&PrefixProbe::new(x.name(), k.as_bytes())));
    }
}
