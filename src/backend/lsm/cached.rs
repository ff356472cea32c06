//! Reads and writes through the read-modify-write cache (`lsm_cache`) when the backend has one.

use crate::backend::lsm_cache::{Found, MapDirty, RmwCache, MAX_PENDING_LAYERS};
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
    let value = db.get_into(key, vbuf)?.then_some(vbuf.as_slice());
    if !cache.admit(hash, key.len() + value.map_or(0, <[u8]>::len)) {
        return Ok(value);
    }
    let i = cache.insert_clean(hash, key, value);
    cache.evict(Some(i), db)?;
    Ok(cache.value(i))
}

/// A write of a key the cache does not hold and has no room for goes to the engine (it is in no pending
/// layer: those hold only cached keys); `true` when it went there.
#[inline]
fn written_around(
    cache: &RmwCache,
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

/// [`cached_write`] of a map entry whose first `prefix_len` key bytes are its map's prefix: a dirty entry is
/// listed under its map, which scans merge instead of writing the cache back.
#[inline]
pub(super) fn cached_map_write(
    cache: &mut RmwCache,
    db: &Db,
    key: &[u8],
    prefix_len: usize,
    value: Option<&[u8]>,
) -> Result<()> {
    let found = cache.probe(key);
    if written_around(cache, db, &found, key, value)? {
        return Ok(());
    }
    cache.write_map_at(found, key, prefix_len, value);
    settle(cache, db)
}

/// Visits the engine's entries from `it` (positioned on its first key, bounded to one map) overlaid with the
/// map's `dirty` entries (sorted; `None` hides the engine's entry, a value replaces it), in key order, until
/// `f` returns false. `from`: the first key visited of `dirty`.
pub(super) fn merged_scan(
    mut it: DbIter,
    dirty: &MapDirty,
    from: &[u8],
    f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
) -> Result<()> {
    let start = dirty.partition_point(|(k, _)| k.as_slice() < from);
    let mut dirty = dirty[start..].iter().peekable();
    loop {
        let engine_key = it.valid().then(|| it.key());
        // The smaller of the engine's next key and the cache's; on a tie the cache's value wins.
        let take_dirty = match (engine_key, dirty.peek()) {
            (None, None) => break,
            (Some(k), Some((d, _))) if d.as_slice() <= k => Some(d.as_slice() == k),
            (None, Some(_)) => Some(false),
            (Some(_), _) => None,
        };
        match take_dirty {
            Some(tie) => {
                if let Some((k, Some(v))) = dirty.next() {
                    if !f(k.as_slice(), v.as_slice()) {
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
    Ok(it.take_status()?)
}

/// After a write into the cache: evicts down to the capacity, and writes back old pending layers.
#[inline]
pub(super) fn settle(cache: &mut RmwCache, db: &Db) -> Result<()> {
    if cache.pending_layers() > MAX_PENDING_LAYERS {
        cache.drain_pending(db)?;
    }
    cache.evict(None, db)
}
