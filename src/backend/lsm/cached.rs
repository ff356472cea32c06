//! Reads and writes through the read-modify-write cache (`lsm_cache`) when the backend has one.

use crate::backend::lsm_cache::{RmwCache, MAX_PENDING_LAYERS};
use crate::error::Result;
use keyed_state_lsm::Db;

/// A read through the cache: a hit answers from it; a miss reads the engine (into `vbuf`) and keeps the
/// answer, an absent one too.
#[inline]
pub(super) fn cached_read<'a>(
    cache: &'a mut RmwCache,
    db: &Db,
    key: &[u8],
    vbuf: &'a mut Vec<u8>,
) -> Result<Option<&'a [u8]>> {
    let slot = match cache.lookup(key) {
        Some(i) => i,
        None => {
            let found = db.get_into(key, vbuf)?;
            if !cache.admit(key) {
                return Ok(found.then_some(vbuf.as_slice()));
            }
            let i = cache.insert_clean(key, found.then_some(vbuf.as_slice()));
            cache.evict(Some(i), db)?;
            i
        }
    };
    Ok(cache.value(slot))
}

/// A write through the cache (`value` `None`: a delete): the entry becomes dirty. A key the cache does not
/// hold and does not admit yet is written to the engine (it is in no pending layer: those hold only cached
/// keys).
#[inline]
pub(super) fn cached_write(
    cache: &mut RmwCache,
    db: &Db,
    key: &[u8],
    value: Option<&[u8]>,
) -> Result<()> {
    let slot = cache.lookup(key);
    if slot.is_none() && !cache.admit(key) {
        match value {
            Some(v) => db.put(key, v)?,
            None => db.delete(key)?,
        }
        return Ok(());
    }
    cache.write(slot, key, value);
    settle(cache, db)
}

/// After a write into the cache: evicts down to the capacity, and writes back old pending layers.
#[inline]
pub(super) fn settle(cache: &mut RmwCache, db: &Db) -> Result<()> {
    if cache.pending_layers() > MAX_PENDING_LAYERS {
        cache.drain_pending(db)?;
    }
    cache.evict(None, db)
}
