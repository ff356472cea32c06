//! The read-modify-write cache's index of dirty map entries by map prefix, which map scans merge with the
//! engine instead of writing the cache back.

/// The hash builder of the cache's tables.
pub(super) type Hasher = foldhash::fast::RandomState;

/// Width of a state's map prefixes in the [`MapIndex`]: none indexed yet.
pub(super) const WIDTH_NONE: u32 = 0;
/// Width of a state's map prefixes in the [`MapIndex`]: two prefixes of different lengths (a prefix could
/// then be a prefix of another map's, and a scan of it must see both: the index is not used).
pub(super) const WIDTH_MIXED: u32 = u32::MAX;

/// The dirty entries of every map, by map prefix (`sid | KG | K | NS`): what a map scan merges with the
/// engine instead of writing the cache back. A slot is added when it turns dirty; entries that went clean
/// (written back) or whose slot was reused are dropped when their map is read, and the whole index is
/// rebuilt from the slots once it holds many more entries than the cache.
#[derive(Default)]
pub(super) struct MapIndex {
    pub(super) maps: hashbrown::HashMap<Box<[u8]>, Vec<u32>, Hasher>,
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
        match self.maps.get_mut(prefix) {
            Some(v) => v.push(slot),
            None => {
                self.maps.insert(Box::from(prefix), vec![slot]);
            }
        }
        self.len += 1;
    }

    /// The width every indexed prefix of `prefix`'s state has.
    pub(super) fn width(&self, prefix: &[u8]) -> u32 {
        let sid = prefix
            .get(..2)
            .map_or(0, |b| usize::from(u16::from_be_bytes([b[0], b[1]])));
        self.widths.get(sid).copied().unwrap_or(WIDTH_NONE)
    }
}
