//! Data and index blocks: prefix-compressed entries with restart points.
//!
//! ```text
//! entry   := shared: varint | unshared: varint | value_len: varint | key[shared..] | value
//! block   := entry* | restart: u32 LE * num_restarts | num_restarts: u32 LE
//! ```
//! Every `restart_interval`-th entry is a restart point: it stores its key whole (`shared == 0`) and its offset
//! is listed in the restart array, so a seek binary-searches the restarts and then scans at most one interval.

use std::cmp::Ordering;
use std::ops::Range;

use super::format::{get_u32, get_varint_usize, put_varint};
use crate::lsm::ikey;

/// Builds one block.
#[derive(Debug)]
pub struct BlockBuilder {
    buf: Vec<u8>,
    restarts: Vec<u32>,
    counter: usize,
    interval: usize,
    last_key: Vec<u8>,
    entries: usize,
}

impl BlockBuilder {
    /// A builder with a restart point every `restart_interval` entries (at least 1).
    pub fn new(restart_interval: usize) -> Self {
        BlockBuilder {
            buf: Vec::new(),
            restarts: vec![0],
            counter: 0,
            interval: restart_interval.max(1),
            last_key: Vec::new(),
            entries: 0,
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
        let unshared = key.get(shared..).unwrap_or(&[]);
        put_varint(&mut self.buf, shared as u64);
        put_varint(&mut self.buf, unshared.len() as u64);
        put_varint(&mut self.buf, value.len() as u64);
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

    /// Size of the block if finished now.
    pub fn estimated_size(&self) -> usize {
        self.buf.len() + self.restarts.len() * 4 + 4
    }

    /// Appends the restart array and returns the finished block bytes.
    pub fn finish(&mut self) -> &[u8] {
        for r in &self.restarts {
            self.buf.extend_from_slice(&r.to_le_bytes());
        }
        self.buf
            .extend_from_slice(&(self.restarts.len() as u32).to_le_bytes());
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
    }
}

/// The position state of a cursor over one block. It does not borrow the block: every method takes the block
/// bytes, so an owner (the SST iterator) can keep block and cursor side by side. All decoding is bounds-checked
/// and reports malformed bytes as an error string.
#[derive(Debug, Default, Clone)]
pub(crate) struct BlockCursor {
    restarts_off: usize,
    num_restarts: usize,
    /// Offset of the entry after the current one.
    next: usize,
    key: Vec<u8>,
    value: Range<usize>,
    valid: bool,
}

impl BlockCursor {
    /// Prepares to iterate over `data`, validating the restart array's framing.
    pub(crate) fn reset(&mut self, data: &[u8]) -> Result<(), String> {
        self.valid = false;
        self.key.clear();
        let n_off = data
            .len()
            .checked_sub(4)
            .ok_or("block shorter than its restart count")?;
        let n = get_u32(data, n_off).ok_or("block shorter than its restart count")? as usize;
        let restarts_len = n.checked_mul(4).ok_or("restart count overflows")?;
        let restarts_off = n_off
            .checked_sub(restarts_len)
            .ok_or_else(|| format!("restart count {n} exceeds the block ({} bytes)", data.len()))?;
        if n == 0 && restarts_off != 0 {
            return Err("block has entries but no restart point".into());
        }
        self.restarts_off = restarts_off;
        self.num_restarts = n;
        self.next = 0;
        Ok(())
    }

    #[inline]
    pub(crate) fn valid(&self) -> bool {
        self.valid
    }

    #[inline]
    pub(crate) fn key(&self) -> &[u8] {
        &self.key
    }

    #[inline]
    pub(crate) fn value_range(&self) -> Range<usize> {
        self.value.clone()
    }

    fn restart(&self, data: &[u8], i: usize) -> Result<usize, String> {
        let off =
            get_u32(data, self.restarts_off + i * 4).ok_or("restart array out of bounds")? as usize;
        if off >= self.restarts_off {
            return Err(format!("restart point {i} at {off} is past the entries"));
        }
        Ok(off)
    }

    /// Decodes the entry header at `pos`: `(shared, key suffix range, value range)`.
    #[inline]
    fn header(
        &self,
        data: &[u8],
        pos: usize,
    ) -> Result<(usize, Range<usize>, Range<usize>), String> {
        let bad = || format!("malformed entry at block offset {pos}");
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
            return Err(format!(
                "entry at block offset {pos} overruns the entries area"
            ));
        }
        Ok((shared, p..key_end, key_end..val_end))
    }

    /// Decodes the entry at `self.next` into the cursor; invalid at the end of the entries.
    #[inline]
    fn parse_next(&mut self, data: &[u8]) -> Result<(), String> {
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
            return Err(format!(
                "entry at block offset {pos} shares {shared} bytes with a shorter key"
            ));
        }
        self.key.truncate(shared);
        self.key.extend_from_slice(data.get(suffix).unwrap_or(&[]));
        self.next = value.end;
        self.value = value;
        self.valid = true;
        Ok(())
    }

    /// Positions at the first entry.
    pub(crate) fn seek_to_first(&mut self, data: &[u8]) -> Result<(), String> {
        self.valid = false;
        self.key.clear();
        self.next = 0;
        self.parse_next(data)
    }

    /// Advances to the next entry.
    #[inline]
    pub(crate) fn next(&mut self, data: &[u8]) -> Result<(), String> {
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
    ) -> Result<(), String> {
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
                return Err(format!(
                    "restart entry at block offset {pos} has shared bytes"
                ));
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
    pub(crate) fn seek(&mut self, data: &[u8], target: &[u8]) -> Result<(), String> {
        self.seek_by(data, target, ikey::compare)
    }
}

/// A borrowing iterator over one block (used by tests and the block fuzzer).
#[derive(Debug)]
pub struct BlockIter<'a> {
    data: &'a [u8],
    cursor: BlockCursor,
}

impl<'a> BlockIter<'a> {
    /// Opens a block, validating its restart array framing.
    pub fn new(data: &'a [u8]) -> Result<Self, String> {
        let mut cursor = BlockCursor::default();
        cursor.reset(data)?;
        Ok(BlockIter { data, cursor })
    }

    /// Positions at the first entry.
    pub fn seek_to_first(&mut self) -> Result<(), String> {
        self.cursor.seek_to_first(self.data)
    }

    /// Positions at the first entry `>= target` (internal-key order).
    pub fn seek(&mut self, target: &[u8]) -> Result<(), String> {
        self.cursor.seek(self.data, target)
    }

    /// Positions at the first entry `>= target` (bytewise order).
    pub fn seek_bytewise(&mut self, target: &[u8]) -> Result<(), String> {
        self.cursor.seek_by(self.data, target, |a, b| a.cmp(b))
    }

    /// Advances.
    #[allow(clippy::should_implement_trait)] // fallible cursor step, not an Iterator
    pub fn next(&mut self) -> Result<(), String> {
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
        }
    }
}
