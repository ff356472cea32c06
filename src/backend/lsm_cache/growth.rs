//! Appends that do not fit: a list append that would grow its cached entry past the capacity goes to the
//! engine with the entry, instead of pushing other entries out there (`design/rmw-cache.md`, "Growth into a
//! full cache"); so does a large append that would move a short list into a new buffer ("Large appends").

use keyed_state_lsm::Db;

use super::{keyed_state_lsm_list_delimiter, Bytes, RmwCache};
use crate::error::Result;

/// Appends of at least this many bytes that would move a list no longer than them into a new buffer go to
/// the engine ([`RmwCache::append_around`]).
const LARGE_APPEND: usize = 256;

impl RmwCache {
    /// Appends list `elements` to the entry of `key` in slot `i` in the engine rather than in the cache, and
    /// removes the entry, when the append would grow it past the capacity, or when it is large (at least
    /// [`LARGE_APPEND`] bytes, and no shorter than the list) and would move the list into a new buffer: a
    /// clean entry gets the elements as a merge operand (the engine holds its value), a dirty one is written
    /// whole with them (one put, at most twice the elements' bytes for a large append). An eviction would
    /// instead write back other entries, each dirty one an engine write of its own; a new buffer costs the
    /// cache fresh memory and a copy of the list and the elements, more than the engine's write. `false`,
    /// nothing done, when the append fits and is not such a large one, when the cache takes every key in
    /// at once (no doorkeeper: it evicts to make room), or when a pending layer may hold the key (that
    /// layer's value must reach the engine first). `buf`: scratch space for the joined value.
    pub(crate) fn append_around(
        &mut self,
        i: u32,
        key: &[u8],
        elements: &[u8],
        db: &Db,
        buf: &mut Vec<u8>,
    ) -> Result<bool> {
        if self.door.is_empty() || !self.pending.is_empty() {
            return Ok(false);
        }
        let s = self.slot(i);
        let held = s.value.as_ref().map_or(0, Bytes::heap_bytes);
        let add = elements.len() + usize::from(s.value.is_some());
        let after = Bytes::heap_bytes_extended(s.value.as_ref(), add);
        let len = s.value.as_ref().map_or(0, Bytes::len);
        let large = elements.len() >= LARGE_APPEND && elements.len() >= len && after > held;
        if self.used - held + after <= self.capacity && !large {
            return Ok(false);
        }
        if s.dirty {
            // No pending layer: its value is in the current log, which lets go of it below.
            buf.clear();
            if let Some(v) = &s.value {
                buf.extend_from_slice(v.as_slice());
                buf.push(keyed_state_lsm_list_delimiter());
            }
            buf.extend_from_slice(elements);
            db.put(key, buf)?;
            let log = s.log;
            if let Some(e) = self.log.get_mut(log as usize) {
                if e.valid && e.slot == i {
                    e.valid = false;
                    self.log_valid -= 1;
                }
            }
        } else {
            db.merge(key, elements)?;
        }
        self.remove_slot(i);
        if self.log_valid == 0 {
            self.log.clear();
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg_attr(miri, ignore)] // opens an engine: scheduling calls, SST file maps (Miri runs neither)
    fn a_large_append_to_a_short_list_goes_to_the_engine_and_a_small_one_stays() -> Result<()> {
        let dir = tempfile::tempdir().map_err(crate::Error::io_at("tempdir", "/tmp"))?;
        let db = Db::open(dir.path(), keyed_state_lsm::Options::default())?;
        // With the doorkeeper, and room for everything: only the append's size decides.
        let mut c = RmwCache::new(64 << 20, false);
        let mut buf = Vec::new();
        let delim = keyed_state_lsm_list_delimiter();
        for (key, add) in [(b"small".as_slice(), 9usize), (b"large", LARGE_APPEND)] {
            let i = c.write(None, key, Some(&[1u8; 8]));
            let elements = vec![2u8; add];
            let around = c.append_around(i, key, &elements, &db, &mut buf)?;
            assert_eq!(around, key == b"large", "{key:?}");
            if !around {
                c.append(i, &elements);
            }
        }
        // The large one is in the engine, joined, and no longer cached; the small one is cached, dirty.
        let joined = [&[1u8; 8][..], &[delim], &[2u8; LARGE_APPEND]].concat();
        assert_eq!(db.get(b"large")?.as_deref(), Some(&joined[..]));
        assert!(c.lookup(b"large").is_none());
        let small = c.lookup(b"small");
        assert_eq!(
            small.and_then(|i| c.value(i)),
            Some(&[&[1u8; 8][..], &[delim], &[2u8; 9]].concat()[..])
        );
        assert_eq!(db.get(b"small")?, None);
        // A large append no longer than a cached list stays in the cache.
        let long = vec![3u8; 4 * LARGE_APPEND];
        let i = c.write(None, b"long", Some(&long));
        assert!(!c.append_around(i, b"long", &[4u8; LARGE_APPEND], &db, &mut buf)?);
        Ok(())
    }

    #[test]
    #[cfg_attr(miri, ignore)] // opens an engine: scheduling calls, SST file maps (Miri runs neither)
    fn a_large_append_to_a_clean_list_is_a_merge_operand_and_one_held_by_a_pending_layer_stays(
    ) -> Result<()> {
        let dir = tempfile::tempdir().map_err(crate::Error::io_at("tempdir", "/tmp"))?;
        let db = Db::open(
            dir.path(),
            keyed_state_lsm::Options {
                merge_operator: Some(std::sync::Arc::new(keyed_state_lsm::ListAppendOperator)),
                ..keyed_state_lsm::Options::default()
            },
        )?;
        let mut c = RmwCache::new(64 << 20, false);
        let mut buf = Vec::new();
        let delim = keyed_state_lsm_list_delimiter();
        // A clean entry: the engine holds its value; the append joins it there as an operand.
        db.put(b"clean", &[1u8; 8])?;
        let h = c.hash(b"clean");
        let i = c.insert_clean(h, b"clean", Some(&[1u8; 8]));
        assert!(c.append_around(i, b"clean", &[2u8; LARGE_APPEND], &db, &mut buf)?);
        assert!(c.lookup(b"clean").is_none());
        let joined = [&[1u8; 8][..], &[delim], &[2u8; LARGE_APPEND]].concat();
        assert_eq!(db.get(b"clean")?.as_deref(), Some(&joined[..]));
        // A cleared list (a dirty deletion): the elements alone.
        let i = c.write(None, b"cleared", None);
        db.put(b"cleared", &[9u8; 8])?;
        assert!(c.append_around(i, b"cleared", &[3u8; LARGE_APPEND], &db, &mut buf)?);
        assert_eq!(
            db.get(b"cleared")?.as_deref(),
            Some(&[3u8; LARGE_APPEND][..])
        );
        // With a layer pending (a snapshot's or checkpoint's hand-off) the append stays in the cache.
        let i = c.write(None, b"held", Some(&[5u8; 8]));
        let layers = c.hand_off();
        assert!(!layers.is_empty());
        assert!(!c.append_around(i, b"held", &[6u8; LARGE_APPEND], &db, &mut buf)?);
        assert_eq!(db.get(b"held")?, None);
        Ok(())
    }
}
