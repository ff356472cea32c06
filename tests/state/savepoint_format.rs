//! The unified savepoint format v1: round trips, determinism, damaged input, atomic writes.

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};

use keyed_state::backend::{BackendConfig, BackendSnapshot, StateId};
use keyed_state::keygroup::{
    java_long_hash, key_group_for_hash, key_group_prefix_len, KeyGroup, KeyGroupRange,
};
use keyed_state::layout::{list_append, timer_key, CompositeKeyBuilder, MAP_VALUE_PRESENT};
use keyed_state::meta::{StateKind, StateMetaInfo, TtlConfig};
use keyed_state::savepoint::{
    encode, write_savepoint, Compression, SavepointError, SavepointReader, WriteOptions,
    MAX_FRAME_RAW_LEN,
};
use keyed_state::serializer::{
    to_bytes, LongSerializer, StringSerializer, TypeSerializer, VoidNamespace,
    VoidNamespaceSerializer,
};

type Entries = BTreeMap<Vec<u8>, Vec<u8>>;
/// `(state index, key, value)` in savepoint order.
type Decoded = Vec<(usize, Vec<u8>, Vec<u8>)>;

/// A `BackendSnapshot` over a map `(state, kg) -> sorted entries`.
struct MapSnapshot {
    config: BackendConfig,
    states: Vec<StateMetaInfo>,
    data: BTreeMap<(StateId, KeyGroup), Entries>,
    /// Fail `visit` after this many entries in total (atomicity tests).
    fail_after: Option<usize>,
    visited: AtomicUsize,
}

impl MapSnapshot {
    fn new(max_parallelism: u32, range: KeyGroupRange, states: Vec<StateMetaInfo>) -> Self {
        MapSnapshot {
            config: BackendConfig {
                max_parallelism,
                key_group_range: range,
                key_serializer: LongSerializer.snapshot(),
            },
            states,
            data: BTreeMap::new(),
            fail_after: None,
            visited: AtomicUsize::new(0),
        }
    }

    fn prefix_len(&self) -> usize {
        key_group_prefix_len(self.config.max_parallelism)
    }

    fn kg_of(&self, key: i64) -> KeyGroup {
        key_group_for_hash(java_long_hash(key), self.config.max_parallelism)
    }

    fn insert(&mut self, state: StateId, key: Vec<u8>, value: Vec<u8>) {
        let kg = u16::from_be_bytes(if self.prefix_len() == 2 {
            [key[0], key[1]]
        } else {
            [0, key[0]]
        });
        self.data.entry((state, kg)).or_default().insert(key, value);
    }

    /// `KG | K | NS` for a long key and the void namespace.
    fn value_key(&self, key: i64) -> Vec<u8> {
        let mut b = CompositeKeyBuilder::new(self.prefix_len(), false);
        b.set_key(self.kg_of(key), &to_bytes(&LongSerializer, &key).unwrap());
        b.set_namespace(&to_bytes(&VoidNamespaceSerializer, &VoidNamespace).unwrap())
            .to_vec()
    }

    fn map_key(&self, key: i64, user_key: &str) -> Vec<u8> {
        let mut b = CompositeKeyBuilder::new(self.prefix_len(), false);
        b.set_key(self.kg_of(key), &to_bytes(&LongSerializer, &key).unwrap());
        b.set_namespace(&to_bytes(&VoidNamespaceSerializer, &VoidNamespace).unwrap());
        b.with_user_key(&to_bytes(&StringSerializer, &user_key.to_string()).unwrap())
            .to_vec()
    }

    fn timer_key(&self, key: i64, ts: i64) -> Vec<u8> {
        let mut out = Vec::new();
        let k = to_bytes(&LongSerializer, &key).unwrap();
        timer_key(&mut out, self.kg_of(key), self.prefix_len(), ts, &k, &[0]);
        out
    }

    /// Every entry as `(state, key, value)` in savepoint order.
    fn expected(&self) -> Decoded {
        let mut by_kg: BTreeMap<(KeyGroup, StateId), &Entries> = BTreeMap::new();
        for ((s, kg), e) in &self.data {
            by_kg.insert((*kg, *s), e);
        }
        by_kg
            .into_iter()
            .flat_map(|((_, s), e)| e.iter().map(move |(k, v)| (s, k.clone(), v.clone())))
            .collect()
    }
}

impl BackendSnapshot for MapSnapshot {
    fn config(&self) -> &BackendConfig {
        &self.config
    }

    fn states(&self) -> &[StateMetaInfo] {
        &self.states
    }

    fn visit(
        &self,
        state: StateId,
        kg: KeyGroup,
        f: &mut dyn FnMut(&[u8], &[u8]) -> keyed_state::Result<()>,
    ) -> keyed_state::Result<()> {
        if let Some(entries) = self.data.get(&(state, kg)) {
            for (k, v) in entries {
                let n = self.visited.fetch_add(1, Ordering::Relaxed);
                if self.fail_after.is_some_and(|limit| n >= limit) {
                    return Err(keyed_state::Error::InvalidArgument(
                        "backend failed mid-snapshot".into(),
                    ));
                }
                f(k, v)?;
            }
        }
        Ok(())
    }
}

fn meta(
    name: &str,
    kind: StateKind,
    value: &dyn Fn() -> keyed_state::serializer::SerializerSnapshot,
) -> StateMetaInfo {
    StateMetaInfo {
        name: name.into(),
        kind,
        namespace_serializer: VoidNamespaceSerializer.snapshot(),
        value_serializer: value(),
        ttl: None,
    }
}

fn states() -> Vec<StateMetaInfo> {
    let mut with_ttl = meta("counts", StateKind::Value, &|| LongSerializer.snapshot());
    with_ttl.ttl = Some(TtlConfig::new(60_000));
    vec![
        with_ttl,
        meta("names", StateKind::Map, &|| StringSerializer.snapshot()),
        meta("unused", StateKind::Reducing, &|| LongSerializer.snapshot()),
        meta("lists", StateKind::List, &|| LongSerializer.snapshot()),
        meta("timers", StateKind::Timers, &|| LongSerializer.snapshot()),
    ]
}

/// A small savepoint source: `keys` keys spread over the key groups, values in four states.
fn small_snapshot(max_parallelism: u32, keys: i64) -> MapSnapshot {
    let mut s = MapSnapshot::new(
        max_parallelism,
        KeyGroupRange::all(max_parallelism),
        states(),
    );
    for k in 0..keys {
        let key = s.value_key(k);
        s.insert(0, key, to_bytes(&LongSerializer, &(k * 1000)).unwrap());
        for uk in ["a", "bb", "ccc"].iter().take((k % 3 + 1) as usize) {
            let mut v = vec![MAP_VALUE_PRESENT];
            StringSerializer
                .serialize(&format!("value of {k}/{uk}"), &mut v)
                .unwrap();
            let key = s.map_key(k, uk);
            s.insert(1, key, v);
        }
        if k % 2 == 0 {
            let mut list = Vec::new();
            for e in 0..(k % 5 + 1) {
                list_append(&mut list, &to_bytes(&LongSerializer, &e).unwrap());
            }
            let key = s.value_key(k);
            s.insert(3, key, list);
        }
        let key = s.timer_key(k, 1_000_000 + k);
        s.insert(4, key, Vec::new());
    }
    s
}

fn lz4() -> WriteOptions {
    WriteOptions {
        compression: Compression::Lz4,
    }
}

fn encode_bytes(s: &MapSnapshot, options: &WriteOptions) -> Vec<u8> {
    let mut out = Vec::new();
    let summary = encode(s, options, &mut out).unwrap();
    assert_eq!(summary.bytes_written, out.len() as u64);
    out
}

/// Reads every entry of every key group, in savepoint order.
fn read_all(r: &SavepointReader) -> keyed_state::Result<Decoded> {
    let mut out = Vec::new();
    for kg in r.header().key_group_range.iter() {
        r.read_key_group(kg, &mut |s, k, v| {
            out.push((s, k.to_vec(), v.to_vec()));
            Ok(())
        })?;
    }
    Ok(out)
}

fn check_round_trip(s: &MapSnapshot, options: &WriteOptions) -> Vec<u8> {
    let bytes = encode_bytes(s, options);
    let r = SavepointReader::from_bytes(bytes.clone()).unwrap();
    let h = r.header();
    assert_eq!(h.format_version, 1);
    assert_eq!(h.compression, options.compression);
    assert_eq!(h.backend_config(), s.config);
    assert_eq!(h.states, s.states);
    let expected = s.expected();
    assert_eq!(read_all(&r).unwrap(), expected);
    let report = r.verify().unwrap();
    assert_eq!(report.total_entries(), expected.len() as u64);
    let kgs: std::collections::BTreeSet<KeyGroup> = s.data.keys().map(|(_, kg)| *kg).collect();
    assert_eq!(
        r.key_groups()
            .iter()
            .map(|b| b.key_group)
            .collect::<Vec<_>>(),
        kgs.into_iter().collect::<Vec<_>>()
    );
    for b in r.key_groups() {
        let n: usize = s
            .data
            .iter()
            .filter(|((_, kg), _)| *kg == b.key_group)
            .map(|(_, e)| e.len())
            .sum();
        assert_eq!(b.entries, n as u64);
    }
    bytes
}

#[test]
fn round_trip_both_codecs_and_prefix_lengths() {
    for maxp in [128, 4096] {
        let s = small_snapshot(maxp, 300);
        let raw = check_round_trip(&s, &WriteOptions::default());
        let compressed = check_round_trip(&s, &lz4());
        assert!(
            compressed.len() < raw.len(),
            "LZ4 should shrink repetitive data"
        );
    }
}

#[test]
fn round_trip_sub_range_and_summary() {
    let mut s = small_snapshot(256, 200);
    let range = KeyGroupRange::new(64, 127);
    s.config.key_group_range = range;
    s.data.retain(|(_, kg), _| range.contains(*kg));
    check_round_trip(&s, &WriteOptions::default());
    let mut out = Vec::new();
    let summary = encode(&s, &WriteOptions::default(), &mut out).unwrap();
    let per_state: Vec<u64> = (0..s.states.len())
        .map(|i| {
            s.data
                .iter()
                .filter(|((st, _), _)| *st == i)
                .map(|(_, e)| e.len() as u64)
                .sum()
        })
        .collect();
    assert_eq!(summary.entries_per_state, per_state);
    assert_eq!(summary.entries_per_state[2], 0, "a state without entries");
    let r = SavepointReader::from_bytes(out).unwrap();
    assert_eq!(summary.key_groups_written, r.key_groups().len());
    // Key groups outside the range are refused; in range without data give nothing.
    assert!(r.read_key_group(10, &mut |_, _, _| Ok(())).is_err());
}

#[test]
fn empty_backend_and_empty_range() {
    for range in [KeyGroupRange::all(128), KeyGroupRange::EMPTY] {
        let mut s = MapSnapshot::new(128, range, states());
        check_round_trip(&s, &WriteOptions::default());
        check_round_trip(&s, &lz4());
        s.states.clear();
        let bytes = check_round_trip(&s, &WriteOptions::default());
        assert!(SavepointReader::from_bytes(bytes)
            .unwrap()
            .key_groups()
            .is_empty());
    }
}

#[test]
fn entries_larger_than_a_frame() {
    let mut s = MapSnapshot::new(128, KeyGroupRange::all(128), states());
    let mut seed = 0x1234_5678_u64;
    let mut noise = |n: usize| -> Vec<u8> {
        (0..n)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed as u8
            })
            .collect()
    };
    for k in 0..40 {
        let key = s.value_key(k);
        let len = match k % 4 {
            0 => 3 * MAX_FRAME_RAW_LEN + 17,
            1 => MAX_FRAME_RAW_LEN - 5,
            2 => 10,
            _ => 100_000,
        };
        let value = if k % 2 == 0 {
            noise(len)
        } else {
            vec![b'x'; len]
        };
        s.insert(0, key, value);
        // A map entry with a long user key spanning frames, too.
        let user_key = "u".repeat(MAX_FRAME_RAW_LEN + 3 + k as usize);
        let key = s.map_key(k, &user_key);
        s.insert(1, key, vec![MAP_VALUE_PRESENT, 0, 1, b'z']);
    }
    // A key group with many small entries over several frames.
    let kg7: Vec<i64> = (0..200_000)
        .filter(|k| s.kg_of(*k) == 7)
        .take(5000)
        .collect();
    for k in kg7 {
        let key = s.value_key(k);
        s.insert(3, key, vec![b'e'; 40]);
    }
    check_round_trip(&s, &WriteOptions::default());
    check_round_trip(&s, &lz4());
}

#[test]
fn deterministic_bytes_regardless_of_insertion_order() {
    let a = small_snapshot(128, 150);
    // Same content, inserted in reverse order of states and keys.
    let mut b = MapSnapshot::new(128, KeyGroupRange::all(128), states());
    let mut all: Vec<(usize, Vec<u8>, Vec<u8>)> = a.expected();
    all.reverse();
    for (st, k, v) in all {
        b.insert(st, k, v);
    }
    for options in [WriteOptions::default(), lz4()] {
        let x = encode_bytes(&a, &options);
        assert_eq!(x, encode_bytes(&a, &options), "same snapshot twice");
        assert_eq!(x, encode_bytes(&b, &options), "different insertion order");
    }
}

/// Runs damaged bytes through open, read of every key group and verify; returns whether any of them failed.
/// A panic fails the test, and so does success with different data.
fn damaged_input_is_rejected(bytes: Vec<u8>, expected: &[(usize, Vec<u8>, Vec<u8>)], what: &str) {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let r = match SavepointReader::from_bytes(bytes) {
            Ok(r) => r,
            Err(_) => return true,
        };
        let read = read_all(&r);
        let verified = r.verify();
        match (read, verified) {
            (Ok(entries), Ok(_)) => {
                assert_ne!(entries, expected, "{what}: accepted");
                panic!("{what}: decoded silently different data");
            }
            _ => true,
        }
    }));
    match outcome {
        Ok(errored) => assert!(errored, "{what}: no error"),
        Err(_) => panic!("{what}: panicked"),
    }
}

/// Every prefix, every single-byte flip (with each of `masks`) and an appended byte of a small savepoint.
fn exhaust_damage(s: &MapSnapshot, options: &WriteOptions, masks: &[u8]) {
    let bytes = encode_bytes(s, options);
    assert!(
        bytes.len() < 12_000,
        "test savepoint is {} bytes",
        bytes.len()
    );
    let expected = s.expected();
    let r = SavepointReader::from_bytes(bytes.clone()).unwrap();
    assert_eq!(read_all(&r).unwrap(), expected);
    let label = format!("{:?}", options.compression);
    for cut in 0..bytes.len() {
        damaged_input_is_rejected(
            bytes[..cut].to_vec(),
            &expected,
            &format!("{label}: truncation to {cut}"),
        );
    }
    for pos in 0..bytes.len() {
        for &mask in masks {
            let mut b = bytes.clone();
            b[pos] ^= mask;
            damaged_input_is_rejected(b, &expected, &format!("{label}: flip {mask:#x} at {pos}"));
        }
    }
    let mut b = bytes;
    b.push(0);
    damaged_input_is_rejected(b, &expected, &format!("{label}: appended byte"));
}

const MASKS: [u8; 3] = [0x01, 0x80, 0xff];

#[test]
fn every_truncation_and_byte_flip_is_rejected_raw() {
    exhaust_damage(&small_snapshot(128, 24), &WriteOptions::default(), &MASKS);
}

#[test]
fn every_truncation_and_byte_flip_is_rejected_lz4() {
    exhaust_damage(&small_snapshot(128, 24), &lz4(), &MASKS);
}

#[test]
fn every_truncation_and_bit_flip_is_rejected_lz4_multi_frame() {
    // A long compressible value makes a multi-frame block and keeps the file small. Each damaged copy
    // decompresses a 64 KiB frame (slow in debug builds), so one mask only.
    let mut s = small_snapshot(128, 24);
    let key = s.value_key(1000);
    s.insert(0, key, vec![7u8; MAX_FRAME_RAW_LEN + 100]);
    exhaust_damage(&s, &lz4(), &[0x01]);
}

#[test]
fn verify_names_the_damaged_key_group() {
    let s = small_snapshot(128, 100);
    let bytes = encode_bytes(&s, &WriteOptions::default());
    let r = SavepointReader::from_bytes(bytes.clone()).unwrap();
    let victim = r.key_groups()[r.key_groups().len() / 2];
    let mut b = bytes;
    b[(victim.offset + victim.length / 2) as usize] ^= 0x10;
    let r = SavepointReader::from_bytes(b.clone()).unwrap();
    let err = r.verify().unwrap_err();
    assert_eq!(err.kind(), keyed_state::ErrorKind::Corruption);
    let keyed_state::Error::Savepoint(sp) = &err else {
        panic!("not a savepoint error: {err}");
    };
    assert_eq!(sp.key_group(), Some(victim.key_group), "{err}");
    let at = err.location().unwrap();
    assert_eq!(at.file, std::path::Path::new("<memory>"), "{err}");
    assert!(at.offset.unwrap() >= victim.offset, "{err}");
    assert!(err
        .to_string()
        .contains(&format!("key group {}", victim.key_group)));
    // Other key groups still read.
    let other = r.key_groups()[0].key_group;
    r.read_key_group(other, &mut |_, _, _| Ok(())).unwrap();
    // Read from a file, the error names the file, at the same offset.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("damaged.sp");
    std::fs::write(&path, &b).unwrap();
    let from_file = SavepointReader::open(&path).unwrap().verify().unwrap_err();
    let file_at = from_file.location().unwrap();
    assert_eq!(file_at.file, path, "{from_file}");
    assert_eq!(file_at.offset, at.offset, "{from_file}");
    assert!(from_file.to_string().contains("damaged.sp"), "{from_file}");
}

fn rechecksum_header(b: &mut [u8]) {
    let body_len = u32::from_be_bytes(b[20..24].try_into().unwrap()) as usize;
    let end = 24 + body_len;
    let sum = xxhash_rust::xxh3::xxh3_64(&b[..end]);
    b[end..end + 8].copy_from_slice(&sum.to_be_bytes());
}

#[test]
fn unknown_versions_flags_and_kinds_are_rejected() {
    let s = small_snapshot(128, 10);
    let bytes = encode_bytes(&s, &WriteOptions::default());
    let mut b = bytes.clone();
    b[11] = 2; // version 2
    assert!(matches!(
        SavepointReader::from_bytes(b).unwrap_err(),
        keyed_state::Error::Savepoint(SavepointError::UnsupportedVersion {
            version: 2,
            supported: 1,
            ..
        })
    ));
    let mut b = bytes.clone();
    b[19] = 0x04; // an unknown required-feature flag, with a valid checksum
    rechecksum_header(&mut b);
    assert!(matches!(
        SavepointReader::from_bytes(b).unwrap_err(),
        keyed_state::Error::Savepoint(SavepointError::UnknownFlags { unknown: 4, .. })
    ));
    let mut b = bytes.clone();
    b[..8].copy_from_slice(b"NOTASAVE");
    assert!(matches!(
        SavepointReader::from_bytes(b).unwrap_err(),
        keyed_state::Error::Savepoint(SavepointError::BadMagic { .. })
    ));
    // An unknown state kind code (with a valid checksum) is rejected by name.
    let mut b = bytes;
    let name = b"counts";
    let pos = b.windows(name.len()).position(|w| w == name).unwrap() + name.len();
    b[pos] = 200;
    rechecksum_header(&mut b);
    let err = SavepointReader::from_bytes(b).unwrap_err();
    assert!(err.to_string().contains("unknown kind code 200"), "{err}");
}

#[test]
fn encoder_rejects_broken_snapshots() {
    let mut s = small_snapshot(128, 10);
    // A key in the wrong key group.
    let kg = s.kg_of(3);
    let mut wrong = s.value_key(3);
    wrong[0] = (kg as u8 + 1) % 128;
    s.data.get_mut(&(0, kg)).unwrap().insert(wrong, vec![1]);
    let err = encode(&s, &WriteOptions::default(), &mut Vec::new()).unwrap_err();
    assert!(
        matches!(
            &err,
            keyed_state::Error::Savepoint(SavepointError::InvalidSnapshot { state: 0, .. })
        ),
        "{err}"
    );
    // Timers with values.
    let mut s = small_snapshot(128, 10);
    let key = s.timer_key(1, 5);
    s.insert(4, key, vec![1]);
    assert!(encode(&s, &WriteOptions::default(), &mut Vec::new()).is_err());
    // Duplicate state names.
    let mut s = small_snapshot(128, 1);
    s.states[1].name = "counts".into();
    assert!(encode(&s, &WriteOptions::default(), &mut Vec::new()).is_err());
}

/// A writer that fails after `limit` bytes (a full disk).
struct FailingWriter {
    written: usize,
    limit: usize,
}

impl std::io::Write for FailingWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.written + buf.len() > self.limit {
            return Err(std::io::Error::new(
                std::io::ErrorKind::StorageFull,
                "disk full",
            ));
        }
        self.written += buf.len();
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn output_errors_are_returned() {
    let s = small_snapshot(128, 3000);
    let full = encode_bytes(&s, &WriteOptions::default()).len();
    for limit in [0, 100, full / 2, full - 1] {
        let err = encode(
            &s,
            &WriteOptions::default(),
            FailingWriter { written: 0, limit },
        )
        .unwrap_err();
        assert!(err.to_string().contains("disk full"), "{err}");
    }
}

fn dir_entries(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn write_savepoint_is_atomic() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("savepoint-1");
    let mut s = small_snapshot(128, 500);
    s.fail_after = Some(700);
    let err = write_savepoint(&path, &s, &WriteOptions::default()).unwrap_err();
    assert!(
        err.to_string().contains("backend failed mid-snapshot"),
        "{err}"
    );
    assert!(
        dir_entries(dir.path()).is_empty(),
        "{:?}",
        dir_entries(dir.path())
    );

    s.fail_after = None;
    s.visited.store(0, Ordering::Relaxed);
    let summary = write_savepoint(&path, &s, &lz4()).unwrap();
    assert_eq!(dir_entries(dir.path()), vec!["savepoint-1".to_string()]);
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        summary.bytes_written
    );
    let r = SavepointReader::open(&path).unwrap();
    assert_eq!(read_all(&r).unwrap(), s.expected());
    assert_eq!(r.verify().unwrap().total_entries(), summary.total_entries());
    // A failing rewrite leaves the previous savepoint in place.
    s.fail_after = Some(10);
    s.visited.store(0, Ordering::Relaxed);
    assert!(write_savepoint(&path, &s, &lz4()).is_err());
    assert_eq!(dir_entries(dir.path()), vec!["savepoint-1".to_string()]);
    SavepointReader::open(&path).unwrap().verify().unwrap();
    // A missing directory is an error, not a panic.
    assert!(write_savepoint(&dir.path().join("no/such/dir/sp"), &s, &lz4()).is_err());
    // A truncated file on disk is rejected at open.
    let bytes = std::fs::read(&path).unwrap();
    let cut = dir.path().join("cut");
    std::fs::write(&cut, &bytes[..bytes.len() - 1]).unwrap();
    assert!(SavepointReader::open(&cut).is_err());
}

/// CPU time of the calling thread in seconds (the machine is shared: wall time would measure the neighbours).
fn thread_cpu_secs() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant the kernel knows.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

type FlatGroup = (Vec<u8>, Vec<(usize, usize, usize)>);

/// A snapshot whose entries lie in one contiguous arena per key group (like an LSM block), so that the
/// throughput test measures the encoder rather than cache misses on scattered heap allocations.
struct FlatSnapshot {
    config: BackendConfig,
    states: Vec<StateMetaInfo>,
    /// Per key group: arena and `(key start, key end, value end)` per entry, sorted.
    groups: Vec<FlatGroup>,
}

impl BackendSnapshot for FlatSnapshot {
    fn config(&self) -> &BackendConfig {
        &self.config
    }
    fn states(&self) -> &[StateMetaInfo] {
        &self.states
    }
    fn visit(
        &self,
        _state: StateId,
        kg: KeyGroup,
        f: &mut dyn FnMut(&[u8], &[u8]) -> keyed_state::Result<()>,
    ) -> keyed_state::Result<()> {
        if let Some((arena, entries)) = self.groups.get(kg as usize) {
            for &(ks, ke, ve) in entries {
                f(&arena[ks..ke], &arena[ke..ve])?;
            }
        }
        Ok(())
    }
}

/// `cargo test --release --test savepoint_format -- --ignored --nocapture throughput` (thread CPU time).
#[test]
#[ignore]
fn throughput() {
    let n: i64 = 1_000_000;
    let mut s = MapSnapshot::new(
        128,
        KeyGroupRange::all(128),
        vec![meta("v", StateKind::Value, &|| LongSerializer.snapshot())],
    );
    for k in 0..n {
        let key = s.value_key(k);
        let mut value = vec![0u8; 100];
        value[..8].copy_from_slice(&k.to_be_bytes());
        s.insert(0, key, value);
    }
    let mut flat = FlatSnapshot {
        config: s.config.clone(),
        states: s.states.clone(),
        groups: (0..128).map(|_| (Vec::new(), Vec::new())).collect(),
    };
    for ((_, kg), entries) in std::mem::take(&mut s.data) {
        let (arena, idx) = &mut flat.groups[kg as usize];
        for (k, v) in entries {
            let ks = arena.len();
            arena.extend_from_slice(&k);
            let ke = arena.len();
            arena.extend_from_slice(&v);
            idx.push((ks, ke, arena.len()));
        }
    }
    let s = flat;
    let payload: usize = s.groups.iter().map(|(a, _)| a.len()).sum();
    for options in [WriteOptions::default(), lz4()] {
        // Baseline: the backend's own walk, touching every byte (included in encode below).
        let t = thread_cpu_secs();
        let mut touched = 0u64;
        for kg in s.config.key_group_range.iter() {
            s.visit(0, kg, &mut |k, v| {
                touched += k.iter().chain(v).map(|b| *b as u64).sum::<u64>();
                Ok(())
            })
            .unwrap();
        }
        let visit = thread_cpu_secs() - t;
        assert!(touched > 0);
        // Encode into a sink (no page faults of a fresh output buffer), best of three.
        let mut enc = f64::MAX;
        for _ in 0..3 {
            let t = thread_cpu_secs();
            encode(&s, &options, std::io::sink()).unwrap();
            enc = enc.min(thread_cpu_secs() - t);
        }
        let mut out = Vec::with_capacity(payload * 2);
        encode(&s, &options, &mut out).unwrap();
        let r = SavepointReader::from_bytes(out).unwrap();
        let mut dec = f64::MAX;
        for _ in 0..3 {
            let t = thread_cpu_secs();
            let mut sum = 0usize;
            for kg in r.header().key_group_range.iter() {
                r.read_key_group(kg, &mut |_, k, v| {
                    sum += k.len() + v.len();
                    Ok(())
                })
                .unwrap();
            }
            dec = dec.min(thread_cpu_secs() - t);
            assert_eq!(sum, payload);
        }
        let t = thread_cpu_secs();
        r.verify().unwrap();
        let ver = thread_cpu_secs() - t;
        let mb = payload as f64 / 1e6;
        println!(
            "{:?}: {} entries, payload {:.1} MB, file {:.1} MB: backend walk alone {:.0} MB/s, encode {:.0} MB/s, decode {:.0} MB/s, verify {:.0} MB/s",
            options.compression,
            n,
            mb,
            r.len() as f64 / 1e6,
            mb / visit,
            mb / enc,
            mb / dec,
            mb / ver
        );
    }
}

/// Writes seed savepoints for the fuzzer:
/// `SAVEPOINT_FUZZ_SEEDS=fuzz/corpus/savepoint_decode cargo test --test savepoint_format -- --ignored fuzz_seeds`
#[test]
#[ignore]
fn fuzz_seeds() {
    let Some(dir) = std::env::var_os("SAVEPOINT_FUZZ_SEEDS") else {
        return;
    };
    let dir = std::path::PathBuf::from(dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut long = small_snapshot(128, 6);
    let key = long.value_key(99);
    long.insert(0, key, vec![3u8; MAX_FRAME_RAW_LEN + 10]);
    let seeds = [
        (
            "empty",
            MapSnapshot::new(128, KeyGroupRange::all(128), states()),
        ),
        ("small128", small_snapshot(128, 8)),
        ("small4096", small_snapshot(4096, 8)),
        ("long", long),
    ];
    for (name, s) in &seeds {
        for (codec, options) in [("raw", WriteOptions::default()), ("lz4", lz4())] {
            std::fs::write(
                dir.join(format!("{name}-{codec}")),
                encode_bytes(s, &options),
            )
            .unwrap();
        }
    }
}

/// A savepoint truncated, then replaced by other bytes, while a reader has it open: the reader keeps the
/// bytes it read at open and restores them all (with a mapped file the first read past the cut was a
/// SIGBUS that killed the process).
#[test]
fn a_savepoint_truncated_or_replaced_under_an_open_reader_reads_what_it_opened() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sp");
    let s = small_snapshot(128, 2000);
    write_savepoint(&path, &s, &lz4()).unwrap();
    let r = SavepointReader::open(&path).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(64)
        .unwrap();
    assert_eq!(read_all(&r).unwrap(), s.expected());
    std::fs::write(&path, vec![0xA5; 1 << 16]).unwrap();
    assert_eq!(read_all(&r).unwrap(), s.expected());
    assert_eq!(
        r.verify().unwrap().total_entries(),
        s.expected().len() as u64
    );
    // Opened now, the replaced file is an error naming it.
    let e = SavepointReader::open(&path).unwrap_err();
    assert!(e.to_string().contains(&path.display().to_string()), "{e}");
}
