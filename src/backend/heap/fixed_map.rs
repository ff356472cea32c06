//! [`FixedMap`]: the packed representation of a heap table whose entries all have one shape, and the
//! bucket-by-bucket draining that moves its entries out when the table stops fitting it
//! ([`FixedMap::drain_buckets`]).

use std::hash::BuildHasher;

pub(super) type FastHasher = foldhash::fast::RandomState;

/// Entries whose keys all have one length and share every byte after their first 8 (the *tail*, at most 8
/// bytes), and whose values all have one length of at most 8 bytes, packed into 16-byte hash-table slots:
/// the first 8 key bytes and the value. `i64` keys in the void namespace (`K | 0x00`: the tail is the
/// namespace byte) with `i64`, `i32`, `f64` or `bool` values, Flink's counters, are stored this way. Half
/// the slot size of a bytes table, which is what decides the speed of a point access once the table
/// outgrows the CPU caches (`design/decisions/0002-heap-tables.md`).
#[derive(Clone)]
pub struct FixedMap {
    /// Length of the varying part of the keys (0..=8): the first `head` bytes.
    head: u8,
    /// Length of the shared tail (0..=8); non-zero only when `head == 8`.
    tail_len: u8,
    /// The shared tail, packed like a key head.
    tail: u64,
    /// Value length in bytes (0..=8), the same for every value.
    vlen: u8,
    /// `(packed head, value)`: key heads left-aligned in a big-endian `u64` (zero padded), so `u64` order is
    /// key-byte order (all keys have one length and one tail). A `HashTable` rather than a `HashMap` for
    /// its bucket indices, which [`drain_buckets`](Self::drain_buckets) walks.
    map: hashbrown::HashTable<(u64, [u8; 8])>,
    hasher: FastHasher,
}

impl FixedMap {
    /// An empty map for entries shaped like (`key`, `value length`), if they can be packed.
    pub fn for_shape(key: &[u8], vlen: usize) -> Option<FixedMap> {
        let head = key.len().min(8);
        let tail = &key[head..];
        (tail.len() <= 8 && vlen <= 8).then(|| FixedMap {
            head: head as u8,
            tail_len: tail.len() as u8,
            tail: pack(tail),
            vlen: vlen as u8,
            map: hashbrown::HashTable::new(),
            hasher: FastHasher::default(),
        })
    }

    /// Number of entries.
    #[inline]
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Entries the table holds without growing.
    pub fn capacity(&self) -> usize {
        self.map.capacity()
    }

    /// The value length of every entry.
    #[inline]
    pub fn vlen(&self) -> usize {
        self.vlen as usize
    }

    /// Whether entries shaped like (`key`, `value length`) fit this map.
    #[inline]
    pub fn fits(&self, key: &[u8], vlen: usize) -> bool {
        self.pack_key(key).is_some() && vlen == self.vlen as usize
    }

    /// The packed head of `key`, when `key` has this map's length and tail.
    #[inline]
    pub fn pack_key(&self, key: &[u8]) -> Option<u64> {
        let head = self.head as usize;
        if key.len() != head + self.tail_len as usize {
            return None;
        }
        let (h, t) = key.split_at(head);
        (self.tail_len == 0 || pack(t) == self.tail).then(|| pack(h))
    }

    /// The whole key of a packed head: `head | tail`.
    #[inline]
    pub fn key_bytes(&self, k: u64) -> ([u8; 16], usize) {
        join_key(k, self.head, self.tail_len, self.tail)
    }

    #[inline]
    fn hash(&self, k: u64) -> u64 {
        self.hasher.hash_one(k)
    }

    /// The value of `key`.
    #[inline]
    pub fn get(&self, key: &[u8]) -> Option<&[u8]> {
        let k = self.pack_key(key)?;
        self.map
            .find(self.hash(k), |e| e.0 == k)
            .map(|e| &e.1[..self.vlen as usize])
    }

    /// Inserts or replaces packed head `k`; the value must have this map's value length.
    #[inline]
    pub fn insert(&mut self, k: u64, value: &[u8]) {
        let v = pack_value(value);
        let hasher = &self.hasher;
        match self
            .map
            .entry(hasher.hash_one(k), |e| e.0 == k, |e| hasher.hash_one(e.0))
        {
            hashbrown::hash_table::Entry::Occupied(mut e) => e.get_mut().1 = v,
            hashbrown::hash_table::Entry::Vacant(e) => {
                e.insert((k, v));
            }
        }
    }

    /// Removes `key`, returning its value bytes (padded to 8; the first [`vlen`](Self::vlen) are the value).
    #[inline]
    pub fn remove(&mut self, key: &[u8]) -> Option<[u8; 8]> {
        let k = self.pack_key(key)?;
        match self.map.find_entry(self.hash(k), |e| e.0 == k) {
            Ok(e) => Some(e.remove().0 .1),
            Err(_) => None,
        }
    }

    /// Every entry as (packed head, padded value), in unspecified order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &[u8; 8])> {
        self.map.iter().map(|e| (e.0, &e.1))
    }

    /// Keeps the entries for which `f(key, value)` is true.
    pub fn retain(&mut self, mut f: impl FnMut(&[u8], &[u8]) -> bool) {
        let (head, tail_len, tail, vl) = (self.head, self.tail_len, self.tail, self.vlen as usize);
        self.map.retain(|e| {
            let (kb, kl) = join_key(e.0, head, tail_len, tail);
            f(&kb[..kl], &e.1[..vl])
        });
    }

    /// Number of buckets: the range of the indices [`drain_buckets`](Self::drain_buckets) walks. Constant
    /// while the map is only read and drained (removals never move entries; only inserts resize).
    pub fn num_buckets(&self) -> usize {
        self.map.num_buckets()
    }

    /// Removes the entries of buckets `from..to` (clamped to [`num_buckets`](Self::num_buckets)), handing
    /// each to `out` as (whole key, value); the number moved, at most `to - from`.
    pub fn drain_buckets(
        &mut self,
        from: usize,
        to: usize,
        out: &mut dyn FnMut(&[u8], &[u8]),
    ) -> usize {
        let (head, tail_len, tail, vl) = (self.head, self.tail_len, self.tail, self.vlen as usize);
        let mut moved = 0;
        for i in from..to.min(self.map.num_buckets()) {
            if let Ok(e) = self.map.get_bucket_entry(i) {
                let ((k, v), _) = e.remove();
                let (kb, kl) = join_key(k, head, tail_len, tail);
                out(&kb[..kl], &v[..vl]);
                moved += 1;
            }
        }
        moved
    }
}

/// `head | tail` of a [`FixedMap`] key: the first `head` bytes of packed head `k`, then the packed tail.
#[inline]
pub fn join_key(k: u64, head: u8, tail_len: u8, tail: u64) -> ([u8; 16], usize) {
    let (head, tail_len) = (head as usize, tail_len as usize);
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&k.to_be_bytes());
    b[head..head + tail_len].copy_from_slice(&tail.to_be_bytes()[..tail_len]);
    (b, head + tail_len)
}

/// `bytes` (at most 8) left-aligned in a big-endian `u64`, zero padded.
#[inline]
fn pack(bytes: &[u8]) -> u64 {
    if let Ok(a) = <[u8; 8]>::try_from(bytes) {
        return u64::from_be_bytes(a);
    }
    // Short keys and tails: a few shifts beat a `memcpy` call.
    let mut v = 0u64;
    for (i, b) in bytes.iter().take(8).enumerate() {
        v |= (*b as u64) << (56 - 8 * i);
    }
    v
}

/// `bytes` (at most 8) in an 8-byte array, zero padded.
#[inline]
fn pack_value(bytes: &[u8]) -> [u8; 8] {
    match <[u8; 8]>::try_from(bytes) {
        Ok(a) => a,
        Err(_) => pack(bytes).to_be_bytes(),
    }
}
