//! Data and index blocks: prefix-compressed entries with restart points.
//!
//! ```text
//! entry   := shared: varint | unshared: varint | value_len: varint | key[shared..] | value
//! block   := entry* | restart: u32 LE * num_restarts | num_restarts: u32 LE
//! ```
//! Every `restart_interval`-th entry is a restart point: it stores its key whole (`shared == 0`) and its offset
//! is listed in the restart array, so a seek binary-searches the restarts and then scans at most one interval.
//!
//! Format version 2 data blocks may end with a hash index over user keys (see `design/sst-format.md`):
//! ```text
//! block_v2 := entry* | restart: u32 LE * n | bucket: u8 * m | m: u16 LE | n | HASH_INDEX_FLAG: u32 LE
//! ```
//! Bucket `fastrange32(hash >> 32, m)` of a user key's `xxh3_64` holds the restart index of the interval where
//! the key's first entry lies, [`BUCKET_EMPTY`] if no key maps there, [`BUCKET_COLLISION`] if several keys in
//! different intervals do. A point lookup then scans from that restart point instead of binary-searching.

use std::cmp::Ordering;
use std::ops::Range;

use crate::coding::{get_u32, get_varint_usize, put_u32, put_varint64, DecodeError};
use crate::ikey;

/// Bit 31 of a version-2 block's trailing `u32`: the block carries a hash index.
pub const HASH_INDEX_FLAG: u32 = 1 << 31;
/// Bucket value: no user key of the block hashes here.
pub const BUCKET_EMPTY: u8 = 0xFF;
/// Bucket value: user keys in different restart intervals hash here (fall back to binary search).
pub const BUCKET_COLLISION: u8 = 0xFE;
/// A hash index is written only for blocks with at most this many restart points (indices fit a bucket byte).
pub const MAX_HASHED_RESTARTS: usize = 0xFD;
/// Target buckets per distinct user key (RocksDB's default utilisation ratio 0.75).
const BUCKETS_PER_KEY: f64 = 1.0 / 0.75;

/// The hash of a user key used by block hash indexes and bloom filters (`xxh3_64`).
#[inline]
pub fn user_key_hash(user_key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(user_key)
}

/// The bucket of hash `h` among `m` buckets.
#[inline]
fn bucket_of(h: u64, m: usize) -> usize {
    (((h >> 32) * m as u64) >> 32) as usize
}

/// What a block's hash index says about a user key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HashLookup {
    /// The block has no hash index, or the bucket is shared by keys of several intervals.
    Unknown,
    /// No entry of the block has this user key.
    Absent,
    /// The key's first entry lies in the interval starting at this restart point.
    Restart(usize),
}

/// Builds one block.
#[derive(Debug)]
pub struct BlockBuilder {
    buf: Vec<u8>,
    restarts: Vec<u32>,
    counter: usize,
    interval: usize,
    last_key: Vec<u8>,
    entries: usize,
    /// `Some` for data blocks with a hash index: `(user-key hash, restart index)` per distinct user key.
    hashed: Option<Vec<(u64, usize)>>,
}

impl BlockBuilder {
    /// A builder with a restart point every `restart_interval` entries (at least 1), without hash index
    /// (index blocks, and every block of format version 1).
    pub fn new(restart_interval: usize) -> Self {
        BlockBuilder {
            buf: Vec::new(),
            restarts: vec![0],
            counter: 0,
            interval: restart_interval.max(1),
            last_key: Vec::new(),
            entries: 0,
            hashed: None,
        }
    }

    /// A builder of version-2 data blocks: keys are internal keys, and a block with at most
    /// [`MAX_HASHED_RESTARTS`] restart points gets a hash index over its user keys.
    pub fn with_hash_index(restart_interval: usize) -> Self {
        BlockBuilder {
            hashed: Some(Vec::new()),
            ..Self::new(restart_interval)
        }
    }

    /// Appends an entry; the caller guarantees key order and that the block stays below 4 GiB.
    pub fn add(&mut self, key: &[u8], value: &[u8]) {
        let shared = if self.counter >= self.interval {
            self.restarts.push(self.buf.len() as u32);
            self.counter = 0;
            0
        } else if self.entries == 0 {
            0
        } else {
            self.last_key
                .iter()
                .zip(key)
                .take_while(|(a, b)| a == b)
                .count()
        };
        if let Some(h) = &mut self.hashed {
            let user = ikey::user_key(key);
            if self.entries == 0 || ikey::user_key(&self.last_key) != user {
                h.push((user_key_hash(user), self.restarts.len() - 1));
            }
        }
        let unshared = key.get(shared..).unwrap_or(&[]);
        put_varint64(&mut self.buf, shared as u64);
        put_varint64(&mut self.buf, unshared.len() as u64);
        put_varint64(&mut self.buf, value.len() as u64);
        self.buf.extend_from_slice(unshared);
        self.buf.extend_from_slice(value);
        self.last_key.clear();
        self.last_key.extend_from_slice(key);
        self.counter += 1;
        self.entries += 1;
    }

    /// Whether no entry was added since the last reset.
    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }

    /// The last key added.
    pub fn last_key(&self) -> &[u8] {
        &self.last_key
    }

    /// Number of hash buckets the block would get if finished now (0 = no hash index).
    fn num_buckets(&self) -> usize {
        match &self.hashed {
            Some(h) if !h.is_empty() && self.restarts.len() <= MAX_HASHED_RESTARTS => {
                ((h.len() as f64 * BUCKETS_PER_KEY).ceil() as usize).clamp(1, u16::MAX as usize)
            }
            _ => 0,
        }
    }

    /// Size of the block if finished now.
    pub fn estimated_size(&self) -> usize {
        let m = self.num_buckets();
        self.buf.len() + self.restarts.len() * 4 + 4 + if m > 0 { m + 2 } else { 0 }
    }

    /// Appends the restart array (and the hash index, if any) and returns the finished block bytes.
    pub fn finish(&mut self) -> &[u8] {
        for &r in &self.restarts {
            put_u32(&mut self.buf, r);
        }
        let m = self.num_buckets();
        let mut n = self.restarts.len() as u32;
        if let (Some(h), true) = (&self.hashed, m > 0) {
            let mut buckets = vec![BUCKET_EMPTY; m];
            for &(hash, restart) in h {
                if let Some(b) = buckets.get_mut(bucket_of(hash, m)) {
                    *b = if *b == BUCKET_EMPTY || *b == restart as u8 {
                        restart as u8
                    } else {
                        BUCKET_COLLISION
                    };
                }
            }
            self.buf.extend_from_slice(&buckets);
            self.buf.extend_from_slice(&(m as u16).to_le_bytes());
            n |= HASH_INDEX_FLAG;
        }
        put_u32(&mut self.buf, n);
        &self.buf
    }

    /// Clears the builder for the next block.
    pub fn reset(&mut self) {
        self.buf.clear();
        self.restarts.clear();
        self.restarts.push(0);
        self.counter = 0;
        self.entries = 0;
        self.last_key.clear();
        if let Some(h) = &mut self.hashed {
            h.clear();
        }
    }
}

/// The position state of a cursor over one block. It does not borrow the block: every method takes the block
/// bytes, so an owner (the SST iterator) can keep block and cursor side by side. All decoding is bounds-checked
/// and reports malformed bytes as a [`DecodeError`] (offsets are within the block).
#[derive(Debug, Default, Clone)]
pub(crate) struct BlockCursor {
    restarts_off: usize,
    num_restarts: usize,
    /// Offset and count of the hash buckets (count 0 = no hash index).
    buckets_off: usize,
    num_buckets: usize,
    /// Offset of the entry after the current one.
    next: usize,
    key: Vec<u8>,
    value: Range<usize>,
    valid: bool,
}

impl BlockCursor {
    /// Prepares to iterate over `data`, validating the restart array's framing (format version 1: no hash
    /// index; the flag bit is an error).
    pub(crate) fn reset(&mut self, data: &[u8]) -> Result<(), DecodeError> {
        self.reset_versioned(data, false)
    }

    /// Prepares to iterate over `data`; `hash_index_allowed` (format version 2 data blocks) accepts a hash
    /// index, whose framing is validated too.
    pub(crate) fn reset_versioned(
        &mut self,
        data: &[u8],
        hash_index_allowed: bool,
    ) -> Result<(), DecodeError> {
        self.valid = false;
        self.key.clear();
        let short = DecodeError::Invalid("block shorter than its restart count");
        let n_off = data.len().checked_sub(4).ok_or(short)?;
        let mut n = get_u32(data, n_off).ok_or(short)?;
        let mut restarts_end = n_off;
        self.num_buckets = 0;
        self.buckets_off = 0;
        if hash_index_allowed && n & HASH_INDEX_FLAG != 0 {
            n &= !HASH_INDEX_FLAG;
            let short = DecodeError::Invalid("block shorter than its hash index");
            let m_off = n_off.checked_sub(2).ok_or(short)?;
            let m = data
                .get(m_off..n_off)
                .and_then(|b| b.try_into().ok())
                .map(u16::from_le_bytes)
                .ok_or(short)? as usize;
            let b_off = m_off.checked_sub(m).ok_or(DecodeError::TooLarge {
                what: "hash index bucket count",
                value: m as u64,
                limit: m_off as u64,
            })?;
            if m == 0 {
                return Err(DecodeError::Invalid("hash index of 0 buckets"));
            }
            if n as usize > MAX_HASHED_RESTARTS {
                return Err(DecodeError::TooLarge {
                    what: "restart count of a hashed block",
                    value: u64::from(n),
                    limit: MAX_HASHED_RESTARTS as u64,
                });
            }
            self.num_buckets = m;
            self.buckets_off = b_off;
            restarts_end = b_off;
        }
        let n = n as usize;
        let too_many = DecodeError::TooLarge {
            what: "restart count",
            value: n as u64,
            limit: (restarts_end / 4) as u64,
        };
        let restarts_len = n.checked_mul(4).ok_or(too_many)?;
        let restarts_off = restarts_end.checked_sub(restarts_len).ok_or(too_many)?;
        if n == 0 && restarts_off != 0 {
            return Err(DecodeError::Invalid(
                "block has entries but no restart point",
            ));
        }
        self.restarts_off = restarts_off;
        self.num_restarts = n;
        self.next = 0;
        Ok(())
    }

    /// What the block's hash index says about the user key with hash `h` (see [`user_key_hash`]).
    #[inline]
    pub(crate) fn hash_lookup(&self, data: &[u8], h: u64) -> Result<HashLookup, DecodeError> {
        if self.num_buckets == 0 {
            return Ok(HashLookup::Unknown);
        }
        let b = data
            .get(self.buckets_off + bucket_of(h, self.num_buckets))
            .copied()
            .ok_or(DecodeError::Invalid("hash bucket out of bounds"))?;
        match b {
            BUCKET_EMPTY => Ok(HashLookup::Absent),
            BUCKET_COLLISION => Ok(HashLookup::Unknown),
            r if (r as usize) < self.num_restarts => Ok(HashLookup::Restart(r as usize)),
            r => Err(DecodeError::TooLarge {
                what: "restart point named by a hash bucket",
                value: u64::from(r),
                limit: self.num_restarts as u64,
            }),
        }
    }

    /// Positions at the first entry `>= target` (internal-key order) at or after restart point `r`, which the
    /// caller knows to be at or before that entry (from [`BlockCursor::hash_lookup`]).
    pub(crate) fn seek_from_restart(
        &mut self,
        data: &[u8],
        r: usize,
        target: &[u8],
    ) -> Result<(), DecodeError> {
        self.valid = false;
        self.key.clear();
        self.next = self.restart(data, r)?;
        self.parse_next(data)?;
        while self.valid && ikey::compare(&self.key, target) == Ordering::Less {
            self.parse_next(data)?;
        }
        Ok(())
    }

    /// Whether positioned at an entry.
    #[inline]
    pub(crate) fn valid(&self) -> bool {
        self.valid
    }

    /// The current key.
    #[inline]
    pub(crate) fn key(&self) -> &[u8] {
        &self.key
    }

    /// Where the current value lies in the block.
    #[inline]
    pub(crate) fn value_range(&self) -> Range<usize> {
        self.value.clone()
    }

    fn restart(&self, data: &[u8], i: usize) -> Result<usize, DecodeError> {
        let off = get_u32(data, self.restarts_off + i * 4)
            .ok_or(DecodeError::Invalid("restart array out of bounds"))? as usize;
        if off >= self.restarts_off {
            return Err(DecodeError::Malformed {
                what: "restart point past the entries",
                offset: off as u64,
            });
        }
        Ok(off)
    }

    /// Decodes the entry header at `pos`: `(shared, key suffix range, value range)`.
    #[inline]
    fn header(
        &self,
        data: &[u8],
        pos: usize,
    ) -> Result<(usize, Range<usize>, Range<usize>), DecodeError> {
        let bad = || DecodeError::Malformed {
            what: "malformed entry",
            offset: pos as u64,
        };
        let (shared, unshared, vlen, p) = match data.get(pos..).and_then(|d| d.first_chunk::<3>()) {
            // Fast path: all three lengths are one-byte varints (short keys and values).
            Some(&[a, b, c]) if (a | b | c) < 0x80 => (a as usize, b as usize, c as usize, pos + 3),
            _ => {
                let (shared, p) = get_varint_usize(data, pos).ok_or_else(bad)?;
                let (unshared, p) = get_varint_usize(data, p).ok_or_else(bad)?;
                let (vlen, p) = get_varint_usize(data, p).ok_or_else(bad)?;
                (shared, unshared, vlen, p)
            }
        };
        let key_end = p.checked_add(unshared).ok_or_else(bad)?;
        let val_end = key_end.checked_add(vlen).ok_or_else(bad)?;
        if val_end > self.restarts_off {
            return Err(DecodeError::Malformed {
                what: "entry overruns the entries area",
                offset: pos as u64,
            });
        }
        Ok((shared, p..key_end, key_end..val_end))
    }

    /// Decodes the entry at `self.next` into the cursor; invalid at the end of the entries.
    #[inline]
    fn parse_next(&mut self, data: &[u8]) -> Result<(), DecodeError> {
        let pos = self.next;
        if pos >= self.restarts_off {
            self.valid = false;
            return Ok(());
        }
        let (shared, suffix, value) = match self.header(data, pos) {
            Ok(h) => h,
            Err(e) => {
                self.valid = false;
                return Err(e);
            }
        };
        if shared > self.key.len() || (!self.valid && shared != 0) {
            self.valid = false;
            return Err(DecodeError::Malformed {
                what: "entry shares more bytes than the previous key has",
                offset: pos as u64,
            });
        }
        self.key.truncate(shared);
        self.key.extend_from_slice(data.get(suffix).unwrap_or(&[]));
        self.next = value.end;
        self.value = value;
        self.valid = true;
        Ok(())
    }

    /// Positions at the first entry.
    pub(crate) fn seek_to_first(&mut self, data: &[u8]) -> Result<(), DecodeError> {
        self.valid = false;
        self.key.clear();
        self.next = 0;
        self.parse_next(data)
    }

    /// Advances to the next entry.
    #[inline]
    pub(crate) fn next(&mut self, data: &[u8]) -> Result<(), DecodeError> {
        if !self.valid {
            return Ok(());
        }
        self.parse_next(data)
    }

    /// Positions at the first entry `>= target` under `cmp`.
    pub(crate) fn seek_by(
        &mut self,
        data: &[u8],
        target: &[u8],
        cmp: impl Fn(&[u8], &[u8]) -> Ordering,
    ) -> Result<(), DecodeError> {
        self.valid = false;
        self.key.clear();
        if self.num_restarts == 0 {
            return Ok(());
        }
        // Last restart point whose key is < target (or the first one).
        let (mut lo, mut hi) = (0usize, self.num_restarts - 1);
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            let pos = self.restart(data, mid)?;
            let (shared, suffix, _) = self.header(data, pos)?;
            if shared != 0 {
                return Err(DecodeError::Malformed {
                    what: "restart entry has shared bytes",
                    offset: pos as u64,
                });
            }
            if cmp(data.get(suffix).unwrap_or(&[]), target) == Ordering::Less {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        self.next = self.restart(data, lo)?;
        self.parse_next(data)?;
        while self.valid && cmp(&self.key, target) == Ordering::Less {
            self.parse_next(data)?;
        }
        Ok(())
    }

    /// Positions at the first entry `>= target` in internal-key order.
    #[inline]
    pub(crate) fn seek(&mut self, data: &[u8], target: &[u8]) -> Result<(), DecodeError> {
        self.seek_by(data, target, ikey::compare)
    }
}

/// A borrowing iterator over one block (used by tests and the block fuzzer).
#[cfg(any(test, feature = "test-util"))]
#[derive(Debug)]
pub struct BlockIter<'a> {
    data: &'a [u8],
    cursor: BlockCursor,
}

#[cfg(any(test, feature = "test-util"))]
impl<'a> BlockIter<'a> {
    /// Opens a block, validating its restart array framing.
    pub fn new(data: &'a [u8]) -> Result<Self, DecodeError> {
        let mut cursor = BlockCursor::default();
        cursor.reset(data)?;
        Ok(BlockIter { data, cursor })
    }

    /// Opens a format-version-2 data block (which may carry a hash index), validating its framing.
    pub fn new_v2(data: &'a [u8]) -> Result<Self, DecodeError> {
        let mut cursor = BlockCursor::default();
        cursor.reset_versioned(data, true)?;
        Ok(BlockIter { data, cursor })
    }

    /// Positions at the first entry.
    pub fn seek_to_first(&mut self) -> Result<(), DecodeError> {
        self.cursor.seek_to_first(self.data)
    }

    /// Point-lookup seek: positions at the first entry `>= target` (an internal key) when the block holds
    /// the target's user key, using the hash index when there is one; returns false (position unspecified)
    /// when the hash index proves the user key absent. Equivalent to [`BlockIter::seek`] for every entry of
    /// that user key.
    pub fn seek_for_get(&mut self, target: &[u8]) -> Result<bool, DecodeError> {
        let h = user_key_hash(ikey::user_key(target));
        match self.cursor.hash_lookup(self.data, h)? {
            HashLookup::Absent => Ok(false),
            HashLookup::Restart(r) => {
                self.cursor.seek_from_restart(self.data, r, target)?;
                Ok(true)
            }
            HashLookup::Unknown => {
                self.cursor.seek(self.data, target)?;
                Ok(true)
            }
        }
    }

    /// Positions at the first entry `>= target` (internal-key order).
    pub fn seek(&mut self, target: &[u8]) -> Result<(), DecodeError> {
        self.cursor.seek(self.data, target)
    }

    /// Positions at the first entry `>= target` (bytewise order).
    pub fn seek_bytewise(&mut self, target: &[u8]) -> Result<(), DecodeError> {
        self.cursor.seek_by(self.data, target, |a, b| a.cmp(b))
    }

    /// Advances.
    #[allow(clippy::should_implement_trait)] // fallible cursor step, not an Iterator
    pub fn next(&mut self) -> Result<(), DecodeError> {
        self.cursor.next(self.data)
    }

    /// Whether positioned at an entry.
    pub fn valid(&self) -> bool {
        self.cursor.valid()
    }

    /// The current key.
    pub fn key(&self) -> &[u8] {
        self.cursor.key()
    }

    /// The current value.
    pub fn value(&self) -> &'a [u8] {
        self.data.get(self.cursor.value_range()).unwrap_or(&[])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_and_seek() {
        let mut b = BlockBuilder::new(3);
        let keys: Vec<Vec<u8>> = (0..50u32)
            .map(|i| format!("key{:04}", i * 2).into_bytes())
            .collect();
        for k in &keys {
            b.add(k, k);
        }
        let data = b.finish().to_vec();
        let mut it = BlockIter::new(&data).unwrap();
        it.seek_to_first().unwrap();
        let mut n = 0;
        while it.valid() {
            assert_eq!(it.key(), &keys[n][..]);
            assert_eq!(it.value(), &keys[n][..]);
            it.next().unwrap();
            n += 1;
        }
        assert_eq!(n, keys.len());
        for i in 0..101u32 {
            let t = format!("key{:04}", i).into_bytes();
            it.seek_bytewise(&t).unwrap();
            let want = keys.iter().find(|k| k.as_slice() >= t.as_slice());
            assert_eq!(it.valid().then(|| it.key().to_vec()).as_ref(), want);
        }
    }

    fn ik(user: &[u8], seqno: u64) -> Vec<u8> {
        let mut v = Vec::new();
        ikey::encode(&mut v, user, seqno, ikey::ValueKind::Put);
        v
    }

    #[test]
    fn hash_index_point_seeks_agree_with_binary_search() {
        for interval in [1usize, 2, 3, 16] {
            // User keys with 1..=4 versions each, so versions span restart intervals.
            let mut b = BlockBuilder::with_hash_index(interval);
            let mut keys = Vec::new();
            for u in 0..60u32 {
                let user = format!("user{:03}", u * 2).into_bytes();
                for v in 0..(u % 4 + 1) {
                    let k = ik(&user, u64::from(100 - v * 10));
                    b.add(&k, b"v");
                    keys.push(k);
                }
            }
            let data = b.finish().to_vec();
            let n = get_u32(&data, data.len() - 4).unwrap();
            assert!(
                n & HASH_INDEX_FLAG != 0,
                "interval {interval}: no hash index"
            );
            // A version-1 reader rejects the flagged block; a version-2 reader reads every entry.
            assert!(BlockIter::new(&data).is_err());
            let mut it = BlockIter::new_v2(&data).unwrap();
            it.seek_to_first().unwrap();
            for k in &keys {
                assert_eq!(it.key(), &k[..]);
                it.next().unwrap();
            }
            assert!(!it.valid());
            let mut bin = BlockIter::new_v2(&data).unwrap();
            for u in 0..121u32 {
                let user = format!("user{u:03}").into_bytes();
                for s in [5u64, 75, 95, 100, 200] {
                    let target = ik(&user, s);
                    bin.seek(&target).unwrap();
                    let present = it.seek_for_get(&target).unwrap();
                    let want_hit = bin.valid() && ikey::user_key(bin.key()) == &user[..];
                    if want_hit {
                        assert!(present, "{u} {s}: hash index lost the key");
                    }
                    if present && want_hit {
                        assert_eq!(it.key(), bin.key(), "{u} {s}");
                    }
                    if present && !want_hit {
                        assert!(!it.valid() || ikey::user_key(it.key()) != &user[..]);
                    }
                    if u % 2 == 1 {
                        // Absent keys: mostly proven absent by an empty bucket (never a false hit).
                        assert!(!bin.valid() || ikey::user_key(bin.key()) != &user[..]);
                    }
                }
            }
        }
        // Blocks with too many restart points carry no hash index and stay version-1 compatible.
        let mut b = BlockBuilder::with_hash_index(1);
        for u in 0..(MAX_HASHED_RESTARTS as u32 + 1) {
            b.add(&ik(&u.to_be_bytes(), 1), b"");
        }
        let data = b.finish().to_vec();
        assert!(BlockIter::new(&data).is_ok());
    }

    #[test]
    fn garbage_never_panics() {
        for len in 0..64usize {
            let data: Vec<u8> = (0..len).map(|i| (i * 37 + len) as u8).collect();
            if let Ok(mut it) = BlockIter::new(&data) {
                let _ = it.seek_to_first();
                for _ in 0..10 {
                    let _ = it.next();
                }
                let _ = it.seek(b"abcdefghijkl");
            }
            let mut flagged = data.clone();
            if let Some(last) = flagged.last_mut() {
                *last |= 0x80;
            }
            if let Ok(mut it) = BlockIter::new_v2(&flagged) {
                let _ = it.seek_to_first();
                let _ = it.seek_for_get(b"abcdefghijkl");
                let _ = it.seek_for_get(b"abc");
            }
        }
    }
}
