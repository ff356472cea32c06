//! The entries of one key group of an import, per state: keys and values in one buffer, sorted by key.

/// One state's entries of one key group: the bytes of every key and value, and per entry
/// `(key offset, key length, value length)` (the value follows its key), sorted by key.
#[derive(Debug, Default, Clone)]
pub struct StateEntries {
    data: Vec<u8>,
    index: Vec<(usize, u32, u32)>,
}

impl StateEntries {
    pub(super) fn clear(&mut self) {
        self.data.clear();
        self.index.clear();
    }

    pub(super) fn push(&mut self, key: &[u8], value: &[u8]) {
        self.index
            .push((self.data.len(), key.len() as u32, value.len() as u32));
        self.data.extend_from_slice(key);
        self.data.extend_from_slice(value);
    }

    fn key(&self, e: &(usize, u32, u32)) -> &[u8] {
        &self.data[e.0..e.0 + e.1 as usize]
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// The entries as `(key, value)`, in key order once decoded.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        self.index.iter().map(|&(at, kl, vl)| {
            let k_end = at + kl as usize;
            (
                &self.data[at..k_end],
                &self.data[k_end..k_end + vl as usize],
            )
        })
    }

    /// Sorts by key (a no-op for the sorted key groups Flink's RocksDB backend writes); returns a key
    /// that occurs twice, if any.
    pub(super) fn sort_and_find_duplicate(&mut self) -> Option<Vec<u8>> {
        let sorted = self
            .index
            .windows(2)
            .all(|w| self.key(&w[0]) < self.key(&w[1]));
        if !sorted {
            let mut index = std::mem::take(&mut self.index);
            index.sort_unstable_by(|a, b| self.key(a).cmp(self.key(b)));
            self.index = index;
        }
        self.index
            .windows(2)
            .find(|w| self.key(&w[0]) == self.key(&w[1]))
            .map(|w| self.key(&w[0]).to_vec())
    }
}

/// Per our state index, its entries of one key group.
pub type Entries = Vec<StateEntries>;
