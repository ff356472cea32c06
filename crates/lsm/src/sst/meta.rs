//! An open file's decoded index as one byte buffer, in the form the reader searches it, so that the reader
//! can keep it (resident) or leave it to the block cache as an evictable entry (see
//! [`MetadataPlacement`]).
//!
//! ```text
//! blob    := head: u64 LE | prefixes: [u64 BE; blocks] | handles | key_ends: [u32 LE; blocks] | keys: [u8]
//! head    := blocks (bits 0-62) | packed (bit 63)
//! handles := [(offset: u64 LE, size: u64 LE); blocks]     (not packed)
//!          | [end: u32 LE; blocks]                          (packed)
//! ```
//! Per data block: the 8-byte big-endian prefix of its last user key (the binary search runs over this
//! dense array; big-endian, so that comparing the bytes compares the numbers), its handle, and the end of
//! its last internal key in `keys`. Blocks written back to back from offset 0 (as the writer lays them
//! out) in a file below 4 GiB are *packed*: a block's handle is then the end of its payload alone, as it
//! starts after the previous block's trailer. 16 bytes plus the key per block packed, 28 otherwise. The
//! buffer is built in memory by [`encode`] from a verified index block and never read from disk.

use std::cmp::Ordering;

use super::format::{BlockHandle, BLOCK_TRAILER_LEN};
use crate::ikey;

const HEADER: usize = 8;
const PACKED: u64 = 1 << 63;

/// Whether `handles` follow each other from offset 0 (each after the previous one's trailer) and end below
/// 4 GiB.
fn packable(handles: &[BlockHandle]) -> bool {
    let mut next = 0u64;
    handles.iter().all(|h| {
        let ok = h.offset == next
            && h.offset
                .checked_add(h.size)
                .is_some_and(|e| e <= u64::from(u32::MAX));
        next = h.offset + h.size + BLOCK_TRAILER_LEN as u64;
        ok
    })
}

/// Builds the buffer from every block's last internal key (`keys`, ends in `key_ends`) and handle.
pub(crate) fn encode(keys: &[u8], key_ends: &[u32], handles: &[BlockHandle]) -> Vec<u8> {
    let n = handles.len();
    let packed = packable(handles);
    let per_handle = if packed { 4 } else { 16 };
    let mut out = Vec::with_capacity(HEADER + n * (12 + per_handle) + keys.len());
    let head = n as u64 | if packed { PACKED } else { 0 };
    out.extend_from_slice(&head.to_le_bytes());
    let mut start = 0usize;
    for &end in key_ends {
        let key = keys.get(start..end as usize).unwrap_or(&[]);
        out.extend_from_slice(&key_prefix(key).to_be_bytes());
        start = end as usize;
    }
    for h in handles {
        if packed {
            // Below 4 GiB: checked by `packable`.
            out.extend_from_slice(&((h.offset + h.size) as u32).to_le_bytes());
        } else {
            out.extend_from_slice(&h.offset.to_le_bytes());
            out.extend_from_slice(&h.size.to_le_bytes());
        }
    }
    for &end in key_ends {
        out.extend_from_slice(&end.to_le_bytes());
    }
    out.extend_from_slice(keys);
    out
}

/// A view of an index buffer.
#[derive(Clone, Copy)]
pub(crate) struct IndexView<'a> {
    blocks: usize,
    packed: bool,
    /// 8 bytes per block.
    prefixes: &'a [u8],
    /// 16 bytes per block, or 4 when packed.
    handles: &'a [u8],
    /// 4 bytes per block.
    key_ends: &'a [u8],
    keys: &'a [u8],
}

/// Element `i` of an array of `N`-byte elements.
#[inline]
fn element<const N: usize>(bytes: &[u8], i: usize) -> Option<[u8; N]> {
    bytes.get(i.checked_mul(N)?..)?.first_chunk::<N>().copied()
}

impl<'a> IndexView<'a> {
    /// The view of `blob` (built by [`encode`]); an empty index if it is malformed (never, for a buffer of
    /// [`encode`]).
    #[inline]
    pub(crate) fn new(blob: &'a [u8]) -> Self {
        Self::parse(blob).unwrap_or(IndexView {
            blocks: 0,
            packed: false,
            prefixes: &[],
            handles: &[],
            key_ends: &[],
            keys: &[],
        })
    }

    #[inline]
    fn parse(blob: &'a [u8]) -> Option<Self> {
        let (head, rest) = blob.split_first_chunk::<HEADER>()?;
        let head = u64::from_le_bytes(*head);
        let n = usize::try_from(head & !PACKED).ok()?;
        let packed = head & PACKED != 0;
        let (prefixes, rest) = rest.split_at_checked(n.checked_mul(8)?)?;
        let (handles, rest) =
            rest.split_at_checked(n.checked_mul(if packed { 4 } else { 16 })?)?;
        let (key_ends, keys) = rest.split_at_checked(n.checked_mul(4)?)?;
        Some(IndexView {
            blocks: n,
            packed,
            prefixes,
            handles,
            key_ends,
            keys,
        })
    }

    /// Number of data blocks.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.blocks
    }

    /// The key prefix of block `i` (big-endian bytes; all ones past the end).
    #[inline]
    fn prefix(&self, i: usize) -> [u8; 8] {
        element::<8>(self.prefixes, i).unwrap_or([0xFF; 8])
    }

    /// The first `i` in `lo..hi` for which `below(prefix(i))` is false (`hi` if none), for `below` true on a
    /// prefix of the array and false after it.
    #[inline]
    fn partition(&self, mut lo: usize, mut hi: usize, below: impl Fn([u8; 8]) -> bool) -> usize {
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if below(self.prefix(mid)) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// Bytes of the blocks' last keys.
    pub(crate) fn key_bytes(&self) -> usize {
        self.keys.len()
    }

    /// The last internal key of block `i`.
    #[inline]
    pub(crate) fn key(&self, i: usize) -> Option<&'a [u8]> {
        let end = u32::from_le_bytes(element::<4>(self.key_ends, i)?) as usize;
        let start = match i.checked_sub(1) {
            Some(p) => u32::from_le_bytes(element::<4>(self.key_ends, p)?) as usize,
            None => 0,
        };
        self.keys.get(start..end)
    }

    /// The handle of block `i`.
    #[inline]
    pub(crate) fn handle(&self, i: usize) -> Option<BlockHandle> {
        if self.packed {
            let end = u64::from(u32::from_le_bytes(element::<4>(self.handles, i)?));
            let offset = match i.checked_sub(1) {
                Some(p) => {
                    u64::from(u32::from_le_bytes(element::<4>(self.handles, p)?))
                        + BLOCK_TRAILER_LEN as u64
                }
                None => 0,
            };
            return Some(BlockHandle {
                offset,
                size: end.checked_sub(offset)?,
            });
        }
        let h = element::<16>(self.handles, i)?;
        let (o, s) = h.split_at(8);
        Some(BlockHandle {
            offset: u64::from_le_bytes(o.try_into().ok()?),
            size: u64::from_le_bytes(s.try_into().ok()?),
        })
    }

    /// The last key of the last block.
    pub(crate) fn last_key(&self) -> Option<&'a [u8]> {
        self.key(self.len().checked_sub(1)?)
    }

    /// Index of the first data block whose last internal key is `>= target_ikey` (`len()` if none).
    ///
    /// Binary search over the dense prefix array first; whole keys are compared only among the (usually zero
    /// or one) entries whose prefix equals the target's.
    #[inline]
    pub(crate) fn find_block(&self, target_ikey: &[u8]) -> usize {
        let tp = key_prefix(target_ikey).to_be_bytes();
        let n = self.len();
        let lo = self.partition(0, n, |p| p < tp);
        // Ties are rare (blocks whose last keys share the target's 8-byte prefix) and adjacent to `lo`:
        // look at a few neighbours before a second binary search (which cost ~14 more cache misses per
        // lookup at 10M keys).
        let near = n.min(lo + 8);
        let hi = match (lo..near).find(|&i| self.prefix(i) != tp) {
            Some(i) => i,
            None => self.partition(near, n, |p| p == tp),
        };
        // First of the ties whose last key is >= the target (binary search over `lo..hi`).
        let (mut a, mut b) = (lo, hi.min(self.len()));
        while a < b {
            let mid = a + (b - a) / 2;
            let below = self
                .key(mid)
                .is_some_and(|k| ikey::compare(k, target_ikey) == Ordering::Less);
            if below {
                a = mid + 1;
            } else {
                b = mid;
            }
        }
        a
    }
}

/// The first 8 bytes of an internal key's user key, zero-padded, as a big-endian integer. For internal keys
/// `a`, `b`: `key_prefix(a) < key_prefix(b)` implies `ikey::compare(a, b) == Less` (zero padding keeps the
/// bytewise order of user keys; equal prefixes decide nothing).
#[inline]
pub(crate) fn key_prefix(internal_key: &[u8]) -> u64 {
    let user = ikey::user_key(internal_key);
    let mut b = [0u8; 8];
    let n = user.len().min(8);
    if let (Some(dst), Some(src)) = (b.get_mut(..n), user.get(..n)) {
        dst.copy_from_slice(src);
    }
    u64::from_be_bytes(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The keys back to back, and where each ends (the index's `keys` and `key_ends`).
    fn concatenated(keys: &[Vec<u8>]) -> (Vec<u8>, Vec<u32>) {
        let mut all = Vec::new();
        let mut ends = Vec::new();
        for k in keys {
            all.extend_from_slice(k);
            ends.push(all.len() as u32);
        }
        (all, ends)
    }

    fn ikey_of(user: &[u8], seq: u64) -> Vec<u8> {
        let mut k = user.to_vec();
        k.extend_from_slice(&((seq << 8) | 1).to_be_bytes());
        k
    }

    #[test]
    fn the_index_buffer_returns_each_key_and_handle_and_finds_blocks() {
        let keys: Vec<Vec<u8>> = (0..100u64)
            .map(|i| ikey_of(format!("key{:04}", i * 10).as_bytes(), 7))
            .collect();
        let (all, ends) = concatenated(&keys);
        // Packed (back to back from 0, as the writer lays them out) and not (a gap after block 0).
        let mut next = 0;
        let packed: Vec<BlockHandle> = (0..100u64)
            .map(|i| {
                let h = BlockHandle {
                    offset: next,
                    size: 4096 + i,
                };
                next = h.offset + h.size + BLOCK_TRAILER_LEN as u64;
                h
            })
            .collect();
        let mut gapped = packed.clone();
        for h in gapped.iter_mut().skip(1) {
            h.offset += 7;
        }
        assert!(packable(&packed) && !packable(&gapped));
        for (handles, per_block) in [(packed, 16), (gapped, 28)] {
            let blob = encode(&all, &ends, &handles);
            assert_eq!(blob.len(), HEADER + 100 * per_block + all.len());
            let index = IndexView::new(&blob);
            assert_eq!(index.len(), 100);
            assert_eq!(index.key_bytes(), all.len());
            for (i, k) in keys.iter().enumerate() {
                assert_eq!(index.key(i), Some(&k[..]));
                assert_eq!(index.handle(i), Some(handles[i]));
                // The block holding a key is the first whose last key is >= it.
                assert_eq!(index.find_block(&ikey::lookup_key(&k[..k.len() - 8])), i);
            }
            // Between two blocks' last keys: the later block; past the last: none.
            assert_eq!(index.find_block(&ikey::lookup_key(b"key0005")), 1);
            assert_eq!(index.find_block(&ikey::lookup_key(b"zzz")), 100);
            assert_eq!(index.find_block(&ikey::lookup_key(b"")), 0);
            assert!(index.key(100).is_none());
            assert!(index.handle(100).is_none());
            assert_eq!(index.last_key(), Some(&keys[99][..]));
        }
        let empty = encode(&[], &[], &[]);
        assert_eq!(IndexView::new(&empty).len(), 0);
        assert!(IndexView::new(&empty).last_key().is_none());
        // A malformed buffer reads as empty (never built by `encode`).
        let blob = encode(&all, &ends, &[BlockHandle { offset: 0, size: 1 }; 100]);
        assert_eq!(IndexView::new(&blob[..20]).len(), 0);
    }

    #[test]
    fn ties_on_the_prefix_are_decided_by_whole_keys() {
        // Every key shares its first 8 bytes: the search falls back to comparing whole keys.
        let keys: Vec<Vec<u8>> = (0..40u64)
            .map(|i| ikey_of(format!("samepref{:04}", i * 2).as_bytes(), 3))
            .collect();
        let (all, ends) = concatenated(&keys);
        let handles: Vec<BlockHandle> = (0..40u64)
            .map(|i| BlockHandle {
                offset: i * 100,
                size: 90,
            })
            .collect();
        let blob = encode(&all, &ends, &handles);
        let index = IndexView::new(&blob);
        for i in 0..40u64 {
            let k = format!("samepref{:04}", i * 2);
            assert_eq!(
                index.find_block(&ikey::lookup_key(k.as_bytes())),
                i as usize
            );
            let between = format!("samepref{:04}", i * 2 + 1);
            assert_eq!(
                index.find_block(&ikey::lookup_key(between.as_bytes())),
                i as usize + 1
            );
        }
    }
}

/// Where an open SST file keeps its decoded index (every data block's last key and handle) and its bloom
/// filter: together about 23–26 MiB per GiB of state with 4 KiB blocks and 10 bits per key
/// (`design/lsm-engine.md`, "Table readers").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum MetadataPlacement {
    /// The reader keeps both for as long as the file is open: a read never waits for them, and with a memory
    /// budget they are charged to it as SST metadata, outside the cache, so they grow with the state.
    #[default]
    Resident,
    /// Both are entries of the block cache (RocksDB's `cache_index_and_filter_blocks`): decoded and
    /// inserted when the file opens, evictable like data blocks, loaded again from the file (one index
    /// block and one filter block) by the first read that misses them, and held by a read while it uses
    /// them. What the cache holds is bounded by its capacity (with a budget, what the others leave). An
    /// index or filter larger than a sixteenth of the cache's capacity, which the cache would not keep, is
    /// kept by the reader and charged as SST metadata.
    Cached,
}
