//! Reads and writes through the read-modify-write cache (`lsm_cache`) when the backend has one.

use crate::backend::lsm_cache::{Found, RmwCache, MAX_PENDING_LAYERS};
use crate::error::Result;
use keyed_state_lsm::Db;
use keyed_state_lsm::DbIter;

/// A read through the cache: a hit answers from the cache's slot (no copy); a miss reads the engine (into
/// `vbuf`) and keeps the answer, an absent one too, if the cache admits the key.
#[inline]
pub(super) fn cached_read<'a>(
    cache: &'a mut RmwCache,
    db: &Db,
    key: &[u8],
    vbuf: &'a mut Vec<u8>,
) -> Result<Option<&'a [u8]>> {
    let hash = match cache.probe(key) {
        Found::Slot(i) => return Ok(cache.value(i)),
        Found::Missing(hash) => hash,
    };
    read_missing(cache, db, key, hash, vbuf)
}

/// [`cached_read`] of a key the cache does not hold, of table hash `hash`.
#[inline]
fn read_missing<'a>(
    cache: &'a mut RmwCache,
    db: &Db,
    key: &[u8],
    hash: u64,
    vbuf: &'a mut Vec<u8>,
) -> Result<Option<&'a [u8]>> {
    let value = db.get_into(key, vbuf)?.then_some(vbuf.as_slice());
    if !cache.admit(hash, key.len() + value.map_or(0, <[u8]>::len)) {
        return Ok(value);
    }
    let i = cache.insert_clean(hash, key, value);
    cache.evict(Some(i), db)?;
    Ok(cache.value(i))
}

/// A write of a key the cache does not hold and has no room for (or whose hash table cannot grow) goes to
/// the engine (it is in no pending
/// layer: those hold only cached keys); `true` when it went there.
#[inline]
fn written_around(
    cache: &mut RmwCache,
    db: &Db,
    found: &Found,
    key: &[u8],
    value: Option<&[u8]>,
) -> Result<bool> {
    if !matches!(found, Found::Missing(_))
        || cache.admit_write(key.len() + value.map_or(0, <[u8]>::len))
    {
        return Ok(false);
    }
    match value {
        Some(v) => db.put(key, v)?,
        None => db.delete(key)?,
    }
    Ok(true)
}

/// A write through the cache (`value` `None`: a delete): the entry becomes dirty, unless the key is
/// [`written_around`] the cache.
#[inline]
pub(super) fn cached_write(
    cache: &mut RmwCache,
    db: &Db,
    key: &[u8],
    value: Option<&[u8]>,
) -> Result<()> {
    let found = cache.probe(key);
    if written_around(cache, db, &found, key, value)? {
        return Ok(());
    }
    cache.write_at(found, key, value);
    settle(cache, db)
}

/// [`cached_read`] of a map entry whose first `prefix_len` key bytes are its map's prefix: a key the cache
/// does not hold of a map the cache holds whole ([`RmwCache::is_map_complete`]) is absent, without an
/// engine read.
#[inline]
pub(super) fn cached_map_read<'a>(
    cache: &'a mut RmwCache,
    db: &Db,
    key: &[u8],
    prefix_len: usize,
    vbuf: &'a mut Vec<u8>,
) -> Result<Option<&'a [u8]>> {
    let hash = match cache.probe(key) {
        Found::Slot(i) => return Ok(cache.value(i)),
        Found::Missing(hash) => hash,
    };
    if cache.is_map_complete(key.get(..prefix_len).unwrap_or_default()) {
        return Ok(None);
    }
    read_missing(cache, db, key, hash, vbuf)
}

/// [`cached_write`] of a map entry whose first `prefix_len` key bytes are its map's prefix: a dirty entry is
/// listed under its map, which scans merge instead of writing the cache back. A write around the cache
/// drops the map's mark of being whole in the cache; a delete of a key the cache does not hold in a map it
/// holds whole deletes nothing and writes nothing.
#[inline]
pub(super) fn cached_map_write(
    cache: &mut RmwCache,
    db: &Db,
    key: &[u8],
    prefix_len: usize,
    value: Option<&[u8]>,
) -> Result<()> {
    let found = cache.probe(key);
    if value.is_none()
        && found.slot().is_none()
        && cache.is_map_complete(key.get(..prefix_len).unwrap_or_default())
    {
        return Ok(());
    }
    if written_around(cache, db, &found, key, value)? {
        cache.unmark_map(key.get(..prefix_len).unwrap_or_default());
        return Ok(());
    }
    cache.write_map_at(found, key, prefix_len, value);
    settle(cache, db)
}

/// A list append through the cache: a cached list gets `elements` appended in the cache (in place,
/// amortised), unless that would grow it past the capacity, or the append is large and would move a
/// shorter list into a new buffer: then it goes to the engine with them and leaves the cache
/// ([`RmwCache::append_around`]). An uncached one is read from the engine (its merge
/// operands folded) and taken in with the elements appended, dirty, while the cache has room for it, so
/// that its next appends and reads are answered by the cache; without room it gets a merge operand, never
/// a read (it is in no pending layer either: those hold only cached keys).
pub(super) fn cached_append(
    cache: &mut RmwCache,
    db: &Db,
    key: &[u8],
    elements: &[u8],
    vbuf: &mut Vec<u8>,
) -> Result<()> {
    let i = match cache.probe(key) {
        Found::Slot(i) => {
            if cache.append_around(i, key, elements, db, vbuf)? {
                return settle(cache, db);
            }
            i
        }
        Found::Missing(hash) => {
            if !cache.admit_write(key.len() + elements.len()) {
                return Ok(db.merge(key, elements)?);
            }
            let found = db.get_into(key, vbuf)?;
            cache.insert_clean(hash, key, found.then_some(vbuf.as_slice()))
        }
    };
    cache.append(i, elements);
    settle(cache, db)
}

/// Entries of a batch whose cache lookups are prefetched together.
const PUT_ALL_CHUNK: usize = 16;

/// [`cached_map_write`] of every `(user key, value)` of `entries` into the map `prefix` (`sid | KG | K |
/// NS`), in order: the keys are hashed and their buckets, slots and key bytes prefetched together (a chunk
/// at a time), so that the lookups of a batch wait for memory once rather than once each; evicts once at
/// the end. `keys`: a buffer for the engine keys.
pub(super) fn cached_map_put_all(
    cache: &mut RmwCache,
    db: &Db,
    prefix: &[u8],
    entries: &[(&[u8], &[u8])],
    keys: &mut Vec<u8>,
) -> Result<()> {
    for chunk in entries.chunks(PUT_ALL_CHUNK) {
        keys.clear();
        let mut ends = [0usize; PUT_ALL_CHUNK];
        let mut hashes = [0u64; PUT_ALL_CHUNK];
        for (n, (user_key, _)) in chunk.iter().enumerate() {
            let start = keys.len();
            keys.extend_from_slice(prefix);
            keys.extend_from_slice(user_key);
            ends[n] = keys.len();
            hashes[n] = cache.hash(&keys[start..]);
            cache.prefetch_bucket(hashes[n]);
        }
        let hashes = &hashes[..chunk.len()];
        for &h in hashes {
            cache.prefetch_slot(h);
        }
        for &h in hashes {
            cache.prefetch_key(h);
        }
        let mut start = 0;
        for (n, (_, value)) in chunk.iter().enumerate() {
            let key = &keys[start..ends[n]];
            start = ends[n];
            // Probed one by one, after the writes before: a batch may hold a user key twice.
            let found = cache.probe_hashed(key, hashes[n]);
            if written_around(cache, db, &found, key, Some(value))? {
                cache.unmark_map(prefix);
            } else {
                cache.write_map_at(found, key, prefix.len(), Some(value));
            }
        }
    }
    settle(cache, db)
}

/// Visits the engine's entries from `it` (positioned on its first key, bounded to one map; `None`: the engine
/// holds none) overlaid with the map's `dirty` entries (slots of `cache`, sorted by key; a delete hides the
/// engine's entry, a value replaces it), in key order, until `f` returns false. `from`: the first user key
/// visited of `dirty` (the key's bytes after `prefix`, the map's prefix).
pub(super) fn merged_scan(
    it: Option<DbIter>,
    cache: &RmwCache,
    dirty: &[u32],
    prefix: &[u8],
    from: &[u8],
    f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
) -> Result<()> {
    let start = if from.is_empty() {
        0
    } else {
        dirty.partition_point(|&i| {
            cache
                .map_entry(i, prefix)
                .0
                .get(prefix.len()..)
                .unwrap_or_default()
                < from
        })
    };
    let mut dirty = dirty[start..]
        .iter()
        .map(|&i| cache.map_entry(i, prefix))
        .peekable();
    let Some(mut it) = it else {
        for (k, v) in dirty {
            if let Some(v) = v {
                if !f(k, v) {
                    break;
                }
            }
        }
        return Ok(());
    };
    loop {
        // An engine iterator stopped by an error is not exhausted: the error is returned, not the rest of
        // the dirty entries (a caller stopping at a full batch would otherwise never see it).
        if !it.valid() {
            it.take_status()?;
        }
        let engine_key = it.valid().then(|| it.key());
        // The smaller of the engine's next key and the cache's; on a tie the cache's value wins.
        let take_dirty = match (engine_key, dirty.peek()) {
            (None, None) => break,
            (Some(k), Some((d, _))) if *d <= k => Some(*d == k),
            (None, Some(_)) => Some(false),
            (Some(_), _) => None,
        };
        match take_dirty {
            Some(tie) => {
                if let Some((k, Some(v))) = dirty.next() {
                    if !f(k, v) {
                        return Ok(());
                    }
                }
                if tie {
                    it.next();
                }
            }
            None => {
                if !f(it.key(), it.value()) {
                    return Ok(());
                }
                it.next();
            }
        }
    }
    Ok(())
}

/// After a write into the cache: retires the pending layers an adopted checkpoint capture put into the
/// engine, evicts down to the capacity, and writes back old pending layers.
#[inline]
pub(super) fn settle(cache: &mut RmwCache, db: &Db) -> Result<()> {
    if cache.has_adopted_layers() {
        cache.retire_adopted();
    }
    if cache.pending_layers() > MAX_PENDING_LAYERS {
        cache.drain_pending(db)?;
    }
    cache.evict(None, db)
}
