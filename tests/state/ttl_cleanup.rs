//! TTL cleanup inside backends: the LSM engine's and (with `--features rocksdb`) the RocksDB variant's
//! compaction filters with compactions forced at Flink's times (`RocksDBTtlStateTestBase.testCompactFilter*`),
//! and the heap backend's incremental cleanup (`testIncrementalCleanupWholeState`).

use crate::conformance;

use std::sync::Arc;

use keyed_state::backend::heap::HeapBackend;
use keyed_state::backend::lsm::{LsmBackend, LsmEngine};
use keyed_state::keygroup::KeyGroupRange;
use keyed_state::serializer::{LongSerializer, StringSerializer};
use keyed_state::state::*;
use keyed_state::ttl::{split_list, ManualClock};

use conformance::savepoint_of;

type Store = KeyedStateStore<LongSerializer>;

const MAX_P: u32 = 20;
const KEYS: i64 = 200;

fn relaxed() -> StateTtlConfig {
    StateTtlConfig::new(100)
        .with_visibility(TtlVisibility::ReturnExpiredIfNotCleanedUp)
        .cleanup_in_compaction_filter(1)
}

struct Handles {
    value: ValueState<LongSerializer>,
    list: ListState<LongSerializer>,
    strings: ListState<StringSerializer>,
    map: MapState<LongSerializer, LongSerializer>,
}

fn register(s: &mut Store) -> Handles {
    Handles {
        value: s
            .register_value(ValueStateDescriptor::new("value", LongSerializer).with_ttl(relaxed()))
            .unwrap(),
        list: s
            .register_list(ListStateDescriptor::new("list", LongSerializer).with_ttl(relaxed()))
            .unwrap(),
        strings: s
            .register_list(
                ListStateDescriptor::new("strings", StringSerializer).with_ttl(relaxed()),
            )
            .unwrap(),
        map: s
            .register_map(
                MapStateDescriptor::new("map", LongSerializer, LongSerializer).with_ttl(relaxed()),
            )
            .unwrap(),
    }
}

fn lsm_store(range: KeyGroupRange, clock: &Arc<ManualClock>) -> (Store, LsmEngine) {
    let cfg = KeyedStateStore::config_for(&LongSerializer, MAX_P, range);
    // Without the read-modify-write cache: the tests watch the compaction filter, which sees what reached
    // the engine.
    let b = LsmBackend::temp_with(cfg, LsmBackend::small_options())
        .unwrap()
        .with_rmw_cache(0)
        .unwrap();
    let engine = b.engine();
    let mut s = KeyedStateStore::new(Box::new(b), LongSerializer).unwrap();
    s.set_ttl_time_provider(clock.clone());
    (s, engine)
}

/// Forces flushes and full compactions on a backend's engine.
trait Forcer {
    /// Writes the memtables out as files.
    fn flush(&self);
    /// Flushes, then compacts everything (every entry passes the compaction filter).
    fn compact(&self);
}

impl Forcer for LsmEngine {
    fn flush(&self) {
        LsmEngine::flush(self).unwrap();
    }
    fn compact(&self) {
        LsmEngine::compact_all(self).unwrap();
    }
}

#[cfg(feature = "rocksdb")]
impl Forcer for keyed_state::backend::rocksdb::RocksDbEngine {
    fn flush(&self) {
        self.flush_all().unwrap();
    }
    fn compact(&self) {
        self.compact_all().unwrap();
    }
}

/// A store on a fresh backend of one kind, with its engine.
type MakeStore = fn(KeyGroupRange, &Arc<ManualClock>) -> (Store, Box<dyn Forcer>);

fn lsm_forced(range: KeyGroupRange, clock: &Arc<ManualClock>) -> (Store, Box<dyn Forcer>) {
    let (s, e) = lsm_store(range, clock);
    (s, Box::new(e))
}

#[cfg(feature = "rocksdb")]
fn rocksdb_forced(range: KeyGroupRange, clock: &Arc<ManualClock>) -> (Store, Box<dyn Forcer>) {
    use keyed_state::backend::rocksdb::{RocksDbBackend, RocksDbOptions};
    let cfg = KeyedStateStore::config_for(&LongSerializer, MAX_P, range);
    let b = RocksDbBackend::temporary(cfg, RocksDbOptions::default()).unwrap();
    let engine = b.engine();
    let mut s = KeyedStateStore::new(Box::new(b), LongSerializer).unwrap();
    s.set_ttl_time_provider(clock.clone());
    (s, Box::new(engine))
}

/// The keys of key groups 0..=9 (the first instance's range).
fn keys(s: &Store) -> Vec<i64> {
    (0..KEYS * 4)
        .filter(|k| s.key_group_of(k).unwrap() < 10)
        .take(KEYS as usize)
        .collect()
}

/// Every raw stored value of `state` (after merging operands), read below the TTL layer.
fn raw(s: &mut Store, state: usize) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    s.backend_mut()
        .scan_state(state, &mut |_, _, v| {
            out.push(v.to_vec());
            true
        })
        .unwrap();
    out
}

/// The timestamps of the elements of every stored list of `state`.
fn raw_list_timestamps(s: &mut Store, state: usize, fixed: Option<usize>) -> Vec<Vec<i64>> {
    let len: keyed_state::ttl::ElementLength = match fixed {
        Some(n) => Arc::new(move |b: &[u8]| (b.len() >= n).then_some(n)),
        None => Arc::new(|b: &[u8]| {
            // i64 timestamp, then Flink's String: a length varint (short strings: one byte) and chars.
            let n = *b.get(8)? as usize;
            Some(8 + 1 + n.checked_sub(1)?)
        }),
    };
    raw(s, state)
        .iter()
        .map(|v| {
            split_list(v, &len)
                .expect("a TTL list")
                .iter()
                .map(|e| i64::from_be_bytes(e[..8].try_into().unwrap()))
                .collect()
        })
        .collect()
}

fn write(s: &mut Store, h: &Handles, keys: &[i64], tag: i64) {
    for &k in keys {
        s.set_current_key(&k).unwrap();
        s.value(&h.value).unwrap().update(&tag).unwrap();
        s.list(&h.list).unwrap().add(&tag).unwrap();
        s.list(&h.strings).unwrap().add(&format!("s{tag}")).unwrap();
        s.map(&h.map).unwrap().put(&tag, &k).unwrap();
    }
}

fn compact(engine: &LsmEngine) {
    engine.compact_all().unwrap();
}

fn compact_filter_timeline(make: MakeStore, snapshot_and_rescale: bool) {
    let clock = ManualClock::new(0);
    let (mut s, mut engine) = make(KeyGroupRange::new(0, 9), &clock);
    let mut h = register(&mut s);
    let keys = keys(&s);
    let n = keys.len();
    write(&mut s, &h, &keys, 0);
    engine.flush();
    engine.compact();
    assert_eq!(
        s.num_entries().unwrap() as usize,
        4 * n,
        "t0: nothing expired"
    );

    clock.set(50);
    // Second list elements and map entries at t50 (separate merge operands in their own files).
    write(&mut s, &h, &keys, 50);
    engine.flush();
    if snapshot_and_rescale {
        // Restore into an instance owning twice the key groups (0..=19).
        let sp = savepoint_of(&mut s);
        let (mut t, e) = make(KeyGroupRange::new(0, 19), &clock);
        h = register(&mut t);
        t.restore(&[sp]).unwrap();
        s = t;
        engine = e;
    }

    clock.set(80);
    engine.compact();
    // value + 2 lists + 2 map entries per key: compaction removed nothing unexpired.
    assert_eq!(s.num_entries().unwrap() as usize, 5 * n, "t80");
    for ts in raw_list_timestamps(&mut s, 1, Some(16)) {
        assert_eq!(ts, [0, 50]);
    }

    clock.set(120);
    engine.compact();
    // The map entries and list elements written at t0 are gone; the t50 ones stay.
    assert_eq!(s.num_entries().unwrap() as usize, 4 * n, "t120");
    for ts in raw_list_timestamps(&mut s, 1, Some(16)) {
        assert_eq!(ts, [50], "fixed-length list: only the t0 element dropped");
    }
    for ts in raw_list_timestamps(&mut s, 2, None) {
        assert_eq!(
            ts,
            [50],
            "variable-length list: only the t0 element dropped"
        );
    }
    assert!(raw(&mut s, 0).iter().all(|v| v[..8] == 50i64.to_be_bytes()));
    // Reads after the filter see what is left (nothing expired has been returned yet).
    s.set_current_key(&keys[0]).unwrap();
    assert_eq!(s.list(&h.list).unwrap().get().unwrap(), Some(vec![50]));
    assert_eq!(
        s.map(&h.map)
            .unwrap()
            .entries()
            .collect::<keyed_state::Result<Vec<_>>>()
            .unwrap(),
        vec![(50, keys[0])]
    );

    clock.set(170);
    engine.compact();
    assert_eq!(s.num_entries().unwrap(), 0, "t170: every raw entry is gone");
}

#[test]
fn compaction_filter_drops_expired_values_entries_and_list_elements() {
    compact_filter_timeline(lsm_forced, false);
}

#[test]
fn compaction_filter_after_savepoint_and_rescale_to_twice_the_key_groups() {
    compact_filter_timeline(lsm_forced, true);
}

#[cfg(feature = "rocksdb")]
#[test]
fn rocksdb_compaction_filter_drops_expired_values_entries_and_list_elements() {
    compact_filter_timeline(rocksdb_forced, false);
}

#[cfg(feature = "rocksdb")]
#[test]
fn rocksdb_compaction_filter_after_savepoint_and_rescale_to_twice_the_key_groups() {
    compact_filter_timeline(rocksdb_forced, true);
}

#[test]
fn compaction_filter_drops_expired_elements_inside_single_operands() {
    // One merge operand holding elements of two timestamps (list `update` then `add` in one memtable run
    // cannot do it; `merge_list_namespaces` moves timestamped bytes as one operand).
    let clock = ManualClock::new(0);
    let (mut s, engine) = lsm_store(KeyGroupRange::new(0, 19), &clock);
    let l = s
        .register_list(
            ListStateDescriptor::new("l", LongSerializer)
                .with_namespace(LongSerializer)
                .with_ttl(relaxed()),
        )
        .unwrap();
    s.set_current_key(&1).unwrap();
    s.list_in(&l, &1).unwrap().add(&1).unwrap();
    clock.set(50);
    s.list_in(&l, &1).unwrap().add(&2).unwrap();
    s.list_in(&l, &2).unwrap().add(&3).unwrap();
    // Target 3 gets one operand `ts0 1 , ts50 2 , ts50 3`.
    s.merge_list_namespaces(&l, &3, &[1, 2]).unwrap();
    engine.flush().unwrap();
    clock.set(120);
    compact(&engine);
    assert_eq!(raw_list_timestamps(&mut s, 0, Some(16)), vec![vec![50, 50]]);
    assert_eq!(s.list_in(&l, &3).unwrap().get().unwrap(), Some(vec![2, 3]));
}

#[test]
fn compaction_without_ttl_states_leaves_operands_merged_at_flush() {
    // No TTL state: the filter factory is inactive, so plain lists keep the engine's flush-time merge.
    let clock = ManualClock::new(0);
    let (mut s, engine) = lsm_store(KeyGroupRange::new(0, 19), &clock);
    let l = s
        .register_list(ListStateDescriptor::new("l", LongSerializer))
        .unwrap();
    s.set_current_key(&1).unwrap();
    for i in 0..10 {
        s.list(&l).unwrap().add(&i).unwrap();
    }
    engine.flush().unwrap();
    clock.set(1_000_000);
    compact(&engine);
    assert_eq!(
        s.list(&l).unwrap().get().unwrap(),
        Some((0..10).collect::<Vec<_>>())
    );
}

#[test]
fn heap_incremental_cleanup_removes_every_expired_entry_on_access() {
    // testIncrementalCleanupWholeState: cleanupIncrementally(5, true); every key expires; touching keys
    // removes every expired entry.
    let clock = ManualClock::new(0);
    let cfg = KeyedStateStore::config_for(&LongSerializer, 128, KeyGroupRange::all(128));
    let mut s =
        KeyedStateStore::new(Box::new(HeapBackend::new(cfg).unwrap()), LongSerializer).unwrap();
    s.set_ttl_time_provider(clock.clone());
    let ttl = StateTtlConfig::new(100)
        .disable_cleanup_in_background()
        .cleanup_incrementally(5, true);
    let v = s
        .register_value(ValueStateDescriptor::new("v", LongSerializer).with_ttl(ttl.clone()))
        .unwrap();
    let m = s
        .register_map(MapStateDescriptor::new("m", LongSerializer, LongSerializer).with_ttl(ttl))
        .unwrap();
    for k in 0..1000i64 {
        s.set_current_key(&k).unwrap();
        s.value(&v).unwrap().update(&k).unwrap();
        s.map(&m).unwrap().put(&k, &k).unwrap();
    }
    assert_eq!(s.num_entries().unwrap(), 2000);
    clock.set(50);
    // Nothing has expired: the cleanup keeps everything.
    for k in 0..500i64 {
        s.set_current_key(&k).unwrap();
    }
    assert_eq!(s.num_entries().unwrap(), 2000);
    clock.set(200);
    // 5 entries per state per record: 1000 records visit every entry of both states.
    for k in 0..1000i64 {
        s.set_current_key(&(k + 5000)).unwrap();
    }
    assert_eq!(s.num_entries().unwrap(), 0);
}

#[test]
fn heap_incremental_cleanup_on_access_keeps_live_entries() {
    let clock = ManualClock::new(0);
    let cfg = KeyedStateStore::config_for(&LongSerializer, 128, KeyGroupRange::all(128));
    let mut s =
        KeyedStateStore::new(Box::new(HeapBackend::new(cfg).unwrap()), LongSerializer).unwrap();
    s.set_ttl_time_provider(clock.clone());
    let ttl = StateTtlConfig::new(100).cleanup_incrementally(10, false);
    let l = s
        .register_list(ListStateDescriptor::new("l", LongSerializer).with_ttl(ttl))
        .unwrap();
    for k in 0..100i64 {
        clock.set(if k % 2 == 0 { 0 } else { 60 });
        s.set_current_key(&k).unwrap();
        s.list(&l).unwrap().add(&k).unwrap();
    }
    clock.set(60);
    for k in 0..100i64 {
        s.set_current_key(&k).unwrap();
        s.list(&l).unwrap().add(&(k + 1000)).unwrap();
    }
    clock.set(130);
    // Access without reading: every access judges 10 entries; 20 accesses cover all 100 lists.
    s.set_current_key(&0).unwrap();
    for _ in 0..20 {
        let _ = s.list(&l).unwrap();
    }
    let mut counts = Vec::new();
    s.backend_mut()
        .scan_state(0, &mut |_, _, v| {
            counts.push(v.len());
            true
        })
        .unwrap();
    // Even keys lost their t0 element (one element of 16 bytes left); odd keys keep both.
    assert_eq!(counts.iter().filter(|&&n| n == 16).count(), 50);
    assert_eq!(counts.iter().filter(|&&n| n == 33).count(), 50);
}

#[test]
fn heap_incremental_cleanup_does_not_touch_an_open_snapshot() {
    // testIncrementalCleanup: cleanup runs while a snapshot is open; the snapshot keeps what it saw.
    let clock = ManualClock::new(0);
    let cfg = KeyedStateStore::config_for(&LongSerializer, 128, KeyGroupRange::all(128));
    let mut s = KeyedStateStore::new(
        Box::new(HeapBackend::new(cfg.clone()).unwrap()),
        LongSerializer,
    )
    .unwrap();
    s.set_ttl_time_provider(clock.clone());
    let ttl = StateTtlConfig::new(100).cleanup_incrementally(50, true);
    let v = s
        .register_value(ValueStateDescriptor::new("v", LongSerializer).with_ttl(ttl.clone()))
        .unwrap();
    for k in 0..300i64 {
        s.set_current_key(&k).unwrap();
        s.value(&v).unwrap().update(&k).unwrap();
    }
    let snap = s.snapshot().unwrap();
    clock.set(200);
    for k in 0..300i64 {
        s.set_current_key(&(k + 1000)).unwrap();
    }
    assert_eq!(s.num_entries().unwrap(), 0, "the live state is cleaned up");
    let sp = conformance::savepoint_of_snapshot(&*snap);
    let mut t =
        KeyedStateStore::new(Box::new(HeapBackend::new(cfg).unwrap()), LongSerializer).unwrap();
    t.set_ttl_time_provider(ManualClock::new(50));
    let v = t
        .register_value(ValueStateDescriptor::new("v", LongSerializer).with_ttl(ttl))
        .unwrap();
    t.restore(&[sp]).unwrap();
    assert_eq!(
        t.num_entries().unwrap(),
        300,
        "the snapshot kept every entry"
    );
    t.set_current_key(&7).unwrap();
    assert_eq!(t.value(&v).unwrap().get().unwrap(), Some(7));
}

#[test]
fn heap_incremental_cleanup_of_map_state_leaves_an_open_snapshot_untouched() {
    // Map states in the heap's map table: small maps and trees, half of every map expired, cleaned up
    // record by record while a snapshot is open; then the same on a restore whose maps nobody touched.
    let clock = ManualClock::new(0);
    let cfg = KeyedStateStore::config_for(&LongSerializer, 128, KeyGroupRange::all(128));
    let new_store = || {
        let mut s = KeyedStateStore::new(
            Box::new(HeapBackend::new(cfg.clone()).unwrap()),
            LongSerializer,
        )
        .unwrap();
        let ttl = StateTtlConfig::new(100).cleanup_incrementally(50, true);
        let m = s
            .register_map(
                MapStateDescriptor::new("m", LongSerializer, LongSerializer).with_ttl(ttl),
            )
            .unwrap();
        (s, m)
    };
    let (mut s, m) = new_store();
    s.set_ttl_time_provider(clock.clone());
    let size = |k: i64| if k % 5 == 0 { 40 } else { 3 };
    let (mut all, mut live) = (0u64, 0u64);
    for k in 0..200i64 {
        s.set_current_key(&k).unwrap();
        for uk in 0..size(k) {
            // Even user keys at t = 0 (expired at 130), odd ones at t = 60 (live until 160).
            clock.set(if uk % 2 == 0 { 0 } else { 60 });
            s.map(&m).unwrap().put(&uk, &(k * 100 + uk)).unwrap();
            all += 1;
            live += (uk % 2) as u64;
        }
    }
    assert_eq!(s.num_entries().unwrap(), all);
    let snap = s.snapshot().unwrap();
    clock.set(130);
    for k in 0..200i64 {
        s.set_current_key(&(k + 1000)).unwrap();
    }
    assert_eq!(s.num_entries().unwrap(), live, "expired entries cleaned up");
    let sp = conformance::savepoint_of_snapshot(&*snap);
    assert_eq!(
        snap_entries(&*snap),
        all,
        "the open snapshot kept every entry"
    );

    let (mut t, m) = new_store();
    let late = ManualClock::new(130);
    t.set_ttl_time_provider(late.clone());
    t.restore(&[sp]).unwrap();
    assert_eq!(t.num_entries().unwrap(), all);
    // Restored entries not yet touched by any map operation are cleaned up too.
    for k in 0..200i64 {
        t.set_current_key(&(k + 1000)).unwrap();
    }
    assert_eq!(t.num_entries().unwrap(), live);
    t.set_current_key(&5).unwrap();
    let mut map = t.map(&m).unwrap();
    assert_eq!(map.get(&1).unwrap(), Some(501));
    assert_eq!(map.get(&0).unwrap(), None);
    assert_eq!(
        map.entries()
            .collect::<keyed_state::Result<Vec<_>>>()
            .unwrap()
            .len(),
        20
    );
}

/// Number of entries in a snapshot, over every state and key group.
fn snap_entries(snap: &dyn keyed_state::backend::BackendSnapshot) -> u64 {
    let mut n = 0;
    let range = snap.config().key_group_range;
    for state in 0..snap.states().len() {
        for kg in range.iter() {
            snap.visit(state, kg, &mut |_, _| {
                n += 1;
                Ok(())
            })
            .unwrap();
        }
    }
    n
}

#[test]
fn lsm_wholly_expired_files_are_compacted_from_their_ttl_range_property() {
    // Files record their TTL range; once the latest expiry in a file has passed, background compaction
    // picks it without being asked (no manual compaction after the clock moves).
    let clock = ManualClock::new(0);
    let (mut s, engine) = lsm_store(KeyGroupRange::new(0, 19), &clock);
    let v = s
        .register_value(
            ValueStateDescriptor::new("v", LongSerializer)
                .with_ttl(StateTtlConfig::new(100).cleanup_in_compaction_filter(1)),
        )
        .unwrap();
    for k in 0..5000i64 {
        s.set_current_key(&k).unwrap();
        s.value(&v).unwrap().update(&k).unwrap();
    }
    compact(&engine);
    engine.wait_for_background_work().unwrap();
    assert_eq!(s.num_entries().unwrap(), 5000);
    clock.set(99);
    s.set_current_key(&1_000_000).unwrap();
    s.value(&v).unwrap().update(&1).unwrap();
    engine.flush().unwrap();
    engine.wait_for_background_work().unwrap();
    assert_eq!(s.num_entries().unwrap(), 5001, "nothing has expired yet");
    clock.set(150);
    // A flush wakes the background work, which finds the expired files from their properties.
    s.set_current_key(&1_000_001).unwrap();
    s.value(&v).unwrap().update(&1).unwrap();
    engine.flush().unwrap();
    engine.wait_for_background_work().unwrap();
    assert_eq!(
        s.num_entries().unwrap(),
        2,
        "the files written at t0 were compacted away"
    );
}

#[cfg(feature = "rocksdb")]
#[test]
fn rocksdb_compaction_filter_drops_expired_elements_of_a_merged_list_one_compaction_later() {
    // What RocksDB's filter API cannot do: it never shows merge operands, nor a list merged in the same
    // compaction. The compaction that merges the operand into a value keeps every element; the next one
    // judges the merged value and drops the expired element. Reads never see it.
    let clock = ManualClock::new(0);
    let (mut s, engine) = rocksdb_forced(KeyGroupRange::new(0, 19), &clock);
    let l = s
        .register_list(
            ListStateDescriptor::new("l", LongSerializer)
                .with_namespace(LongSerializer)
                .with_ttl(relaxed()),
        )
        .unwrap();
    s.set_current_key(&1).unwrap();
    s.list_in(&l, &1).unwrap().add(&1).unwrap();
    clock.set(50);
    s.list_in(&l, &1).unwrap().add(&2).unwrap();
    s.list_in(&l, &2).unwrap().add(&3).unwrap();
    // Target 3 gets one operand `ts0 1 , ts50 2 , ts50 3`.
    s.merge_list_namespaces(&l, &3, &[1, 2]).unwrap();
    engine.flush();
    clock.set(120);
    engine.compact();
    assert_eq!(
        raw_list_timestamps(&mut s, 0, Some(16)),
        vec![vec![0, 50, 50]],
        "merged in this compaction: not shown to the filter"
    );
    engine.compact();
    assert_eq!(raw_list_timestamps(&mut s, 0, Some(16)), vec![vec![50, 50]]);
    assert_eq!(s.list_in(&l, &3).unwrap().get().unwrap(), Some(vec![2, 3]));
}

#[cfg(feature = "rocksdb")]
#[test]
fn rocksdb_compaction_filter_leaves_states_without_compaction_cleanup_alone() {
    // A TTL state whose cleanup is not the compaction filter, and a state without TTL: compaction at a
    // time when everything has expired keeps every entry.
    let clock = ManualClock::new(0);
    let (mut s, engine) = rocksdb_forced(KeyGroupRange::new(0, 19), &clock);
    let no_filter = s
        .register_value(
            ValueStateDescriptor::new("no_filter", LongSerializer).with_ttl(
                StateTtlConfig::new(100)
                    .disable_cleanup_in_background()
                    .with_visibility(TtlVisibility::ReturnExpiredIfNotCleanedUp),
            ),
        )
        .unwrap();
    let plain = s
        .register_value(ValueStateDescriptor::new("plain", LongSerializer))
        .unwrap();
    for k in 0..100i64 {
        s.set_current_key(&k).unwrap();
        s.value(&no_filter).unwrap().update(&k).unwrap();
        s.value(&plain).unwrap().update(&k).unwrap();
    }
    clock.set(1_000);
    engine.compact();
    assert_eq!(s.num_entries().unwrap(), 200);
}

/// A store on the LSM backend with one value state of TTL 100 ms (relaxed visibility, compaction-filter
/// cleanup, the given periodic bound) and a plain value state: `keys` keys written in both at t0, then, if
/// `late` is set, one more TTL key at that time, and everything compacted out of L0 at the time of the last
/// write.
fn lsm_ttl_and_plain(
    clock: &Arc<ManualClock>,
    periodic: Option<std::time::Duration>,
    keys: i64,
    late: Option<i64>,
) -> (Store, LsmEngine, ValueState<LongSerializer>) {
    let (mut s, engine) = lsm_store(KeyGroupRange::new(0, 19), clock);
    let v = s
        .register_value(
            ValueStateDescriptor::new("v", LongSerializer).with_ttl(
                StateTtlConfig::new(100)
                    .with_visibility(TtlVisibility::ReturnExpiredIfNotCleanedUp)
                    .cleanup_in_compaction_filter(1)
                    .with_periodic_compaction(periodic),
            ),
        )
        .unwrap();
    let plain = s
        .register_value(ValueStateDescriptor::new("plain", LongSerializer))
        .unwrap();
    for k in 0..keys {
        s.set_current_key(&k).unwrap();
        s.value(&v).unwrap().update(&k).unwrap();
        s.value(&plain).unwrap().update(&k).unwrap();
    }
    if let Some(t) = late {
        clock.set(t);
        s.set_current_key(&keys).unwrap();
        s.value(&v).unwrap().update(&keys).unwrap();
    }
    compact(&engine);
    engine.wait_for_background_work().unwrap();
    (s, engine, v)
}

/// Wakes the background work at clock time `now` with one flushed write of a new key, and waits for it.
fn wake_at(s: &mut Store, engine: &LsmEngine, v: &ValueState<LongSerializer>, now: i64) {
    s.set_current_key(&(1_000_000 + now)).unwrap();
    s.value(v).unwrap().update(&1).unwrap();
    engine.flush().unwrap();
    engine.wait_for_background_work().unwrap();
}

#[test]
fn lsm_wholly_expired_file_with_nothing_below_is_dropped_without_reading() {
    let clock = ManualClock::new(0);
    let (mut s, engine, v) = lsm_ttl_and_plain(&clock, None, 5000, None);
    assert_eq!(s.num_entries().unwrap(), 10_000);
    let before = engine.stats();
    clock.set(150);
    wake_at(&mut s, &engine, &v, 150);
    let after = engine.stats();
    assert!(
        after.expired_files_dropped > before.expired_files_dropped,
        "the expired file left the version"
    );
    assert_eq!(
        after.compaction_bytes_read, before.compaction_bytes_read,
        "dropped without being read"
    );
    assert_eq!(
        s.num_entries().unwrap(),
        5001,
        "the plain state's entries and the t150 write are left"
    );
}

#[test]
fn lsm_wholly_expired_file_is_rewritten_not_dropped_while_a_snapshot_is_open() {
    let clock = ManualClock::new(0);
    let (mut s, engine, v) = lsm_ttl_and_plain(&clock, None, 5000, None);
    let snap = s.snapshot().unwrap();
    let before = engine.stats();
    clock.set(150);
    wake_at(&mut s, &engine, &v, 150);
    let after = engine.stats();
    assert_eq!(after.expired_files_dropped, before.expired_files_dropped);
    assert!(
        after.compaction_bytes_read > before.compaction_bytes_read,
        "the filter rewrote the expired file instead"
    );
    drop(snap);
}

#[test]
fn lsm_files_older_than_the_periodic_bound_are_rewritten_so_untouched_keys_expire() {
    // One key written at t60 keeps the file from being wholly expired at t150: only the periodic rewrite
    // (the file was written at t60, the bound is 50 ms: due from t110) brings the filter to the untouched
    // t0 keys, expired since t100.
    let clock = ManualClock::new(0);
    let bound = Some(std::time::Duration::from_millis(50));
    let (mut s, engine, v) = lsm_ttl_and_plain(&clock, bound, 2000, Some(60));
    assert_eq!(s.num_entries().unwrap(), 4001);
    clock.set(105);
    wake_at(&mut s, &engine, &v, 105);
    assert_eq!(
        s.num_entries().unwrap(),
        4002,
        "not yet due: nothing rewritten"
    );
    clock.set(150);
    wake_at(&mut s, &engine, &v, 150);
    // The plain entries, the t60 key and the two wake-up writes are left.
    assert_eq!(
        s.num_entries().unwrap(),
        2003,
        "the t0 TTL entries are gone"
    );
    s.set_current_key(&7).unwrap();
    assert_eq!(s.value(&v).unwrap().get().unwrap(), None);
    s.set_current_key(&2000).unwrap();
    assert_eq!(s.value(&v).unwrap().get().unwrap(), Some(2000));
}

#[test]
fn lsm_without_a_periodic_bound_untouched_keys_stay_until_a_compaction_reaches_them() {
    let clock = ManualClock::new(0);
    let (mut s, engine, v) = lsm_ttl_and_plain(&clock, None, 2000, Some(60));
    clock.set(150);
    wake_at(&mut s, &engine, &v, 150);
    assert_eq!(
        s.num_entries().unwrap(),
        4002,
        "no rewrite: the expired entries are still stored"
    );
    s.set_current_key(&7).unwrap();
    assert_eq!(
        s.value(&v).unwrap().get().unwrap(),
        Some(7),
        "relaxed visibility returns the stale value not yet cleaned up"
    );
}
