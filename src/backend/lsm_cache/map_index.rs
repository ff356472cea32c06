//! The read-modify-write cache's index of dirty map entries by map prefix, which map scans merge with the
//! engine instead of writing the cache back.

use std::hash::BuildHasher;

/// The hash builder of the cache's tables.
pub(super) type Hasher = foldhash::fast::RandomState;

/// The hashes map lists are kept under.
#[derive(Clone, Default)]
pub(super) struct Keys {
    hasher: Hasher,
    /// Tests: every prefix hashes alike (0), so that every map shares one list.
    #[cfg(test)]
    pub(super) all_alike: bool,
}

impl Keys {
    /// The hash `prefix`'s list is kept under.
    #[inline]
    pub(super) fn key(&self, prefix: &[u8]) -> u64 {
        #[cfg(test)]
        if self.all_alike {
            return 0;
        }
        self.hasher.hash_one(prefix)
    }
}

/// Width of a state's map prefixes in the [`MapIndex`]: none indexed yet.
pub(super) const WIDTH_NONE: u32 = 0;
/// Width of a state's map prefixes in the [`MapIndex`]: two prefixes of different lengths (a prefix could
/// then be a prefix of another map's, and a scan of it must see both: the index is not used).
pub(super) const WIDTH_MIXED: u32 = u32::MAX;

/// The dirty entries of every map, by the hash of its map prefix (`sid | KG | K | NS`): what a map scan
/// merges with the engine instead of writing the cache back. A slot is added when it turns dirty; entries
/// that went clean (written back) or whose slot was reused are dropped when their map is read, and the whole
/// index is rebuilt from the slots once it holds many more entries than the cache. Keyed by the hash, not
/// the prefix, so that a new map costs no key copy: two maps whose prefixes hash alike share a list, and
/// its readers keep only the entries of their own prefix.
#[derive(Default)]
pub(super) struct MapIndex {
    maps: hashbrown::HashMap<u64, Vec<u32>, Hasher>,
    keys: Keys,
    /// Slots listed, stale ones included.
    pub(super) len: usize,
    /// Per state id: the length every indexed prefix of the state has ([`WIDTH_NONE`], [`WIDTH_MIXED`]).
    widths: Vec<u32>,
}

impl MapIndex {
    pub(super) fn clear(&mut self) {
        self.maps.clear();
        self.len = 0;
        self.widths.clear();
    }

    pub(super) fn add(&mut self, prefix: &[u8], slot: u32) {
        let sid = prefix
            .get(..2)
            .map_or(0, |b| usize::from(u16::from_be_bytes([b[0], b[1]])));
        if self.widths.len() <= sid {
            self.widths.resize(sid + 1, WIDTH_NONE);
        }
        let w = &mut self.widths[sid];
        let len = prefix.len() as u32;
        if *w == WIDTH_NONE {
            *w = len;
        } else if *w != len {
            *w = WIDTH_MIXED;
        }
        self.maps
            .entry(self.keys.key(prefix))
            .or_default()
            .push(slot);
        self.len += 1;
    }

    /// How [`key`](Self::key) hashes prefixes.
    pub(super) fn keys(&self) -> Keys {
        self.keys.clone()
    }

    /// The hash a map's list is kept under.
    pub(super) fn key(&self, prefix: &[u8]) -> u64 {
        self.keys.key(prefix)
    }

    /// The list of `prefix`'s map (with those of maps whose prefixes hash alike).
    pub(super) fn list(&self, prefix: &[u8]) -> Option<&Vec<u32>> {
        self.maps.get(&self.key(prefix))
    }

    /// The list kept under hash `key` ([`key`](Self::key)).
    pub(super) fn list_mut(&mut self, key: u64) -> Option<&mut Vec<u32>> {
        self.maps.get_mut(&key)
    }

    /// Forgets the list kept under hash `key`.
    pub(super) fn remove(&mut self, key: u64) {
        self.maps.remove(&key);
    }

    /// Tests: every prefix hashes alike from now on (the index must be empty).
    #[cfg(test)]
    pub(super) fn set_all_alike(&mut self) {
        self.keys.all_alike = true;
    }

    /// The width every indexed prefix of `prefix`'s state has.
    pub(super) fn width(&self, prefix: &[u8]) -> u32 {
        let sid = prefix
            .get(..2)
            .map_or(0, |b| usize::from(u16::from_be_bytes([b[0], b[1]])));
        self.widths.get(sid).copied().unwrap_or(WIDTH_NONE)
    }
}
