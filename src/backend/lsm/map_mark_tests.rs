//! Scenario tests of maps the read-modify-write cache holds whole (`lsm_cache/map_complete.rs`): when the
//! mark is set, what drops it, and that a scan answered from the cache alone equals the map.

use super::*;
use crate::backend::lsm_cache::ENTRY_OVERHEAD;
use crate::keygroup::KeyGroupRange;
use crate::serializer::{IntSerializer, LongSerializer, TypeSerializer};
use std::collections::BTreeMap;

fn backend(capacity: usize, first_touch: bool) -> Result<(LsmBackend, StateId)> {
    let config = BackendConfig {
        max_parallelism: 8,
        key_group_range: KeyGroupRange::all(8),
        key_serializer: LongSerializer.snapshot(),
    };
    let mut b = LsmBackend::temp_with(config, LsmBackend::small_options())?;
    b.set_rmw_cache_capacity(capacity)?;
    b.set_rmw_cache_admission(first_touch)?;
    let s = b.register_state(StateMetaInfo {
        name: "m".into(),
        kind: StateKind::Map,
        namespace_serializer: IntSerializer.snapshot(),
        value_serializer: LongSerializer.snapshot(),
        ttl: None,
    })?;
    Ok((b, s))
}

type Entries = Vec<(Vec<u8>, Vec<u8>)>;

fn scan(b: &mut LsmBackend, s: StateId, key_ns: &[u8]) -> Result<Entries> {
    let mut got = Vec::new();
    b.map_scan(s, 1, key_ns, &mut |k, v| {
        got.push((k.to_vec(), v.to_vec()));
        true
    })?;
    Ok(got)
}

fn complete_maps(b: &LsmBackend) -> usize {
    b.cache.as_ref().map_or(0, |c| c.complete_maps())
}

/// Puts an entry into the engine behind the cache, as no operation of the backend does: a scan that reads
/// the cache alone does not see it, one that reads the engine does.
fn put_behind(b: &LsmBackend, s: StateId, key_ns: &[u8], uk: &[u8]) -> Result<()> {
    let key = [&(s as u16).to_be_bytes()[..], key_ns, uk].concat();
    Ok(b.shared.db.put(&key, b"behind")?)
}

fn entries(uks: &[u8]) -> Entries {
    uks.iter().map(|&k| (vec![k], vec![k, k])).collect()
}

/// A map of clean entries (written back), scanned once: marked whole in the cache.
fn written_back_and_scanned(b: &mut LsmBackend, s: StateId, key_ns: &[u8]) -> Result<()> {
    for k in [1u8, 2, 3] {
        b.map_put(s, 1, key_ns, &[k], &[k, k])?;
    }
    b.write_back()?;
    assert_eq!(complete_maps(b), 0);
    assert_eq!(scan(b, s, key_ns)?, entries(&[1, 2, 3]));
    assert_eq!(complete_maps(b), 1, "the scan took the map in whole");
    Ok(())
}

/// The map prefix of the cache-level tests, and its entry `k`.
const MAP: &[u8] = b"\0\0\x01\x07";
fn map_key(k: u8) -> Vec<u8> {
    [MAP, &[k]].concat()
}

/// An engine in a temporary directory, and a cache of `capacity` bytes ([`RmwCache::new`]'s
/// `admit_on_first_touch`: without the doorkeeper) holding entries 1, 2 and 3 of the map [`MAP`], taken
/// in and marked complete (their slot list given as `sorted`).
fn engine_and_marked_cache(
    capacity: usize,
    admit_on_first_touch: bool,
    sorted: bool,
) -> Result<(tempfile::TempDir, keyed_state_lsm::Db, RmwCache)> {
    let dir = tempfile::tempdir().map_err(crate::Error::io_at("tempdir", "/tmp"))?;
    let db = keyed_state_lsm::Db::open(dir.path(), keyed_state_lsm::Options::default())?;
    let mut c = RmwCache::new(capacity, admit_on_first_touch);
    let mut slots = Vec::new();
    let mut budget = usize::MAX;
    for k in 1..=3u8 {
        slots.extend(c.fill_entry(&map_key(k), &[k], MAP.len(), &mut budget));
    }
    assert!(c.mark_complete(MAP, &slots, sorted));
    Ok((dir, db, c))
}

#[test]
fn a_full_scan_marks_a_map_complete_and_later_reads_use_the_cache_alone() -> Result<()> {
    let (mut b, s) = backend(64 << 20, true)?;
    let map = [1u8, 7];
    written_back_and_scanned(&mut b, s, &map)?;
    put_behind(&b, s, &map, &[9])?;
    assert_eq!(scan(&mut b, s, &map)?, entries(&[1, 2, 3]));
    let mut from = Vec::new();
    b.map_scan_from(s, 1, &map, &[2], &mut |k, v| {
        from.push((k.to_vec(), v.to_vec()));
        true
    })?;
    assert_eq!(from, entries(&[2, 3]));
    assert_eq!(b.map_get(s, 1, &map, &[9])?, None, "absent: no engine read");
    assert_eq!(b.map_get(s, 1, &map, &[2])?, Some(&[2u8, 2][..]));
    assert!(!b.map_is_empty(s, 1, &map)?);
    // Removed through the cache: the map is empty without asking the engine.
    for k in [1u8, 2, 3] {
        b.map_remove(s, 1, &map, &[k])?;
    }
    assert!(b.map_is_empty(s, 1, &map)?);
    Ok(())
}

#[test]
fn evicting_one_entry_of_a_complete_map_drops_its_mark() -> Result<()> {
    let (mut b, s) = backend(64 << 20, true)?;
    let map = [1u8, 7];
    written_back_and_scanned(&mut b, s, &map)?;
    put_behind(&b, s, &map, &[9])?;
    // One byte less than the cache holds: one entry goes (the mark's bytes with it).
    let used = b.cache.as_ref().map_or(0, RmwCache::used);
    b.set_rmw_cache_capacity(used - 1)?;
    assert_eq!(complete_maps(&b), 0);
    let held = b.cache.as_ref().map_or(0, RmwCache::used);
    assert!(
        held + 2 * ENTRY_OVERHEAD >= used,
        "only one entry left: {held} of {used}"
    );
    let mut want = entries(&[1, 2, 3]);
    want.push((vec![9], b"behind".to_vec()));
    assert_eq!(scan(&mut b, s, &map)?, want, "the engine is read again");
    Ok(())
}

#[test]
fn a_write_around_the_cache_drops_the_maps_mark() -> Result<()> {
    // With a doorkeeper: a blind write into a full cache goes to the engine.
    let (_dir, db, mut c) = engine_and_marked_cache(400, false, false)?;
    let (prefix, key) = (MAP, map_key);
    assert!(c.is_map_complete(prefix));
    cached::cached_map_write(&mut c, &db, &key(4), prefix.len(), Some(b"v"))?;
    assert!(c.lookup(&key(4)).is_none(), "written around the cache");
    assert_eq!(db.get(&key(4))?.as_deref(), Some(&b"v"[..]));
    assert!(!c.is_map_complete(prefix));
    Ok(())
}

/// A delete of a key a complete map does not hold, into a cache too full to take it: nothing to delete,
/// so nothing goes around the cache and the map stays marked.
#[test]
fn deleting_an_absent_key_of_a_complete_map_keeps_its_mark() -> Result<()> {
    let (_dir, db, mut c) = engine_and_marked_cache(400, false, false)?;
    let (prefix, key) = (MAP, map_key);
    cached::cached_map_write(&mut c, &db, &key(4), prefix.len(), None)?;
    assert!(c.is_map_complete(prefix));
    assert!(c.lookup(&key(4)).is_none());
    Ok(())
}

/// Entries taken in by a scan are referenced: an eviction sweep that starts on them passes them once and
/// takes an unreferenced entry cached after them, so the map stays marked.
#[test]
fn an_eviction_takes_other_entries_before_those_a_scan_took_in() -> Result<()> {
    let (_dir, db, mut c) = engine_and_marked_cache(1 << 20, true, true)?;
    let prefix = MAP;
    let other = b"\0\0\x02\x09other".as_slice();
    if let crate::backend::lsm_cache::Found::Missing(hash) = c.probe(other) {
        c.insert_clean(hash, other, Some(b"v"));
    }
    c.set_capacity(c.used() - 1);
    c.evict(None, &db)?;
    assert!(c.lookup(other).is_none(), "the other entry went");
    assert!(c.is_map_complete(prefix));
    Ok(())
}

#[test]
fn write_back_and_checkpoints_keep_a_complete_maps_mark() -> Result<()> {
    let (mut b, s) = backend(64 << 20, true)?;
    let map = [1u8, 7];
    written_back_and_scanned(&mut b, s, &map)?;
    // A new entry and a removal, dirty; a checkpoint's hand-off; a write-back.
    b.map_put(s, 1, &map, &[5], &[5, 5])?;
    b.map_remove(s, 1, &map, &[1])?;
    let capture = b.checkpoint_capture()?;
    drop(capture);
    let snap = b.snapshot()?;
    b.map_put(s, 1, &map, &[6], &[6, 6])?;
    b.write_back()?;
    drop(snap);
    assert_eq!(complete_maps(&b), 1);
    put_behind(&b, s, &map, &[9])?;
    assert_eq!(scan(&mut b, s, &map)?, entries(&[2, 3, 5, 6]));
    Ok(())
}

/// The engine drops an entry of a complete map behind the cache (as a TTL compaction filter drops an
/// expired one) while the map's other entries are dirty; a clear then empties the map for scans, reads and
/// emptiness checks: the entry the cache still held is deleted too.
#[test]
fn clearing_a_complete_map_deletes_an_entry_the_engine_dropped_behind_the_cache() -> Result<()> {
    let (mut b, s) = backend(64 << 20, true)?;
    let map = [1u8, 7];
    written_back_and_scanned(&mut b, s, &map)?;
    let key = [&(s as u16).to_be_bytes()[..], &map[..], &[2]].concat();
    b.shared.db.delete(&key)?;
    b.map_put(s, 1, &map, &[1], &[1, 1])?;
    b.map_put(s, 1, &map, &[3], &[3, 3])?;
    b.map_clear(s, 1, &map)?;
    assert_eq!(scan(&mut b, s, &map)?, entries(&[]));
    assert!(b.map_is_empty(s, 1, &map)?);
    assert_eq!(b.map_get(s, 1, &map, &[2])?, None);
    b.write_back()?;
    assert_eq!(scan(&mut b, s, &map)?, entries(&[]));
    Ok(())
}

#[test]
fn a_map_whose_prefix_hashes_like_a_complete_ones_reads_the_engine() -> Result<()> {
    let (mut b, s) = backend(64 << 20, true)?;
    if let Some(c) = b.cache.as_mut() {
        c.set_all_alike_prefix_hashes();
    }
    let (map, other) = ([1u8, 7], [1u8, 8]);
    b.map_put(s, 1, &other, &[1], &[1, 1])?;
    written_back_and_scanned(&mut b, s, &map)?;
    // `other`'s entries only in the engine (one of them never in the cache).
    put_behind(&b, s, &other, &[9])?;
    assert_eq!(b.map_get(s, 1, &other, &[9])?, Some(&b"behind"[..]));
    let mut want = entries(&[1]);
    want.push((vec![9], b"behind".to_vec()));
    assert_eq!(scan(&mut b, s, &other)?, want);
    assert_eq!(
        complete_maps(&b),
        2,
        "both maps whole, each by its own prefix"
    );
    assert_eq!(scan(&mut b, s, &map)?, entries(&[1, 2, 3]));
    Ok(())
}

/// Random operations on maps of two prefix widths in one state, with write-backs (so that maps are taken
/// in whole) and checkpoints, under caches from one that evicts constantly to one that holds everything:
/// every scan, read and emptiness check equals a model.
#[test]
fn maps_taken_in_whole_read_like_a_model_in_tiny_and_large_caches() -> Result<()> {
    for (capacity, first_touch) in [
        (1usize << 10, true),
        (4 << 10, true),
        (4 << 10, false),
        (64 << 20, true),
    ] {
        let (mut b, s) = backend(capacity, first_touch)?;
        // By engine key after the state id (`key_ns | user key`): a map's scan sees every key under its
        // prefix, those of longer maps too.
        let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let mut marked = 0usize;
        for step in 0..4000u32 {
            let m = next(10);
            // Maps 8 and 9 have a longer prefix: `[1, m, 0]`, whose keys `[1, m]`'s scans see.
            let key_ns = if m < 8 {
                vec![1, m as u8]
            } else {
                vec![1, (m - 8) as u8, 0]
            };
            let uk = vec![next(8) as u8];
            match next(24) {
                0..=6 => {
                    let v = vec![step as u8, (step >> 8) as u8];
                    b.map_put(s, 1, &key_ns, &uk, &v)?;
                    model.insert([&key_ns[..], &uk[..]].concat(), v);
                }
                7..=9 => {
                    b.map_remove(s, 1, &key_ns, &uk)?;
                    model.remove(&[&key_ns[..], &uk[..]].concat());
                }
                10 => {
                    b.map_clear(s, 1, &key_ns)?;
                    model.retain(|k, _| !k.starts_with(&key_ns));
                }
                11 | 12 => b.write_back()?,
                13 => drop(b.checkpoint_capture()?),
                14 => b.db().flush()?,
                15 | 16 => {
                    let want = model.get(&[&key_ns[..], &uk[..]].concat()).cloned();
                    let got = b.map_get(s, 1, &key_ns, &uk)?.map(<[u8]>::to_vec);
                    assert_eq!(got, want, "get, step {step}, map {key_ns:?} {uk:?}");
                }
                17 | 18 => {
                    let mut got = Vec::new();
                    b.map_scan_from(s, 1, &key_ns, &uk, &mut |k, v| {
                        got.push((k.to_vec(), v.to_vec()));
                        true
                    })?;
                    let want: Entries = scan_model(&model, &key_ns)
                        .into_iter()
                        .filter(|(k, _)| k >= &uk)
                        .collect();
                    assert_eq!(got, want, "scan from, step {step}, map {key_ns:?}");
                }
                _ => {
                    let want = scan_model(&model, &key_ns);
                    assert_eq!(
                        scan(&mut b, s, &key_ns)?,
                        want,
                        "scan, step {step}, map {key_ns:?}"
                    );
                    assert_eq!(
                        b.map_is_empty(s, 1, &key_ns)?,
                        want.is_empty(),
                        "is empty, step {step}, map {key_ns:?}"
                    );
                }
            }
            marked = marked.max(complete_maps(&b));
        }
        assert!(
            marked > 0,
            "maps were taken in whole, capacity {capacity}, first touch {first_touch}"
        );
    }
    Ok(())
}

/// The model's view of a scan of `key_ns`: the user keys (after `key_ns`) and values of the keys under it.
fn scan_model(model: &BTreeMap<Vec<u8>, Vec<u8>>, key_ns: &[u8]) -> Entries {
    model
        .range(key_ns.to_vec()..)
        .take_while(|(k, _)| k.starts_with(key_ns))
        .map(|(k, v)| (k[key_ns.len()..].to_vec(), v.clone()))
        .collect()
}
