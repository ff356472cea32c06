//! The entries of one RocksDB block (`table/block_based/block.cc`, `block_builder.cc`):
//!
//! ```text
//! entry*  = varint32 shared | varint32 non_shared | varint32 value_len | key[shared..] (non_shared) | value
//!           (index blocks with delta-encoded values: no value_len; the value is a block handle, or, when
//!           shared > 0, a zig-zag varint size delta from the previous handle)
//! u32 LE restart offsets × n | u32 LE packed footer: n in the low bits, bit 31 = data-block hash index
//! ```
//!
//! A key's first `shared` bytes are the previous key's; the entry at a restart point shares nothing.

use super::coding::{fixed32, BlockHandle, Cursor};
use crate::FlinkError;

/// The restart-point footer bits RocksDB defines beyond the restart count.
const HASH_INDEX_BIT: u32 = 1 << 31;
const OTHER_FEATURE_BITS: u32 = 0x7000_0000;
/// The 5-byte trailer (compression type, checksum) after every block.
pub const BLOCK_TRAILER: u64 = 5;

/// Where a block came from, for messages.
#[derive(Debug, Clone, Copy)]
pub struct BlockContext<'a> {
    /// The file.
    pub file: &'a str,
    /// The block's offset in the file.
    pub offset: u64,
    /// Which block (data, index, metaindex, properties, range deletions).
    pub what: &'static str,
}

impl BlockContext<'_> {
    /// A [`FlinkError::SstCorrupt`] for this block.
    pub fn corrupt(&self, detail: impl Into<String>) -> FlinkError {
        FlinkError::SstCorrupt {
            at: keyed_state::Location::at(self.file, self.offset),
            what: self.what,
            detail: detail.into(),
        }
    }
}

/// Iterates the entries of a block whose entries carry a value length (data, metaindex, properties,
/// range-deletion and plain index blocks).
pub struct BlockIter<'a> {
    data: &'a [u8],
    /// Where the restart array starts (the entries end there).
    limit: usize,
    pos: usize,
    key: Vec<u8>,
    ctx: BlockContext<'a>,
}

/// Checks the footer and restart array of `block`; returns where the entries end.
fn entries_end(block: &[u8], ctx: &BlockContext<'_>) -> Result<usize, FlinkError> {
    if block.len() < 4 {
        return Err(ctx.corrupt(format!(
            "{} bytes, too short for a block footer",
            block.len()
        )));
    }
    let packed = fixed32(&block[block.len() - 4..]).unwrap_or(0);
    if packed & HASH_INDEX_BIT != 0 {
        return Err(FlinkError::SstUnsupported {
            file: ctx.file.to_string(),
            feature: format!(
                "a data block hash index (kDataBlockBinaryAndHash) in the {} block at byte {}",
                ctx.what, ctx.offset
            ),
        });
    }
    if packed & OTHER_FEATURE_BITS != 0 {
        return Err(FlinkError::SstUnsupported {
            file: ctx.file.to_string(),
            feature: format!(
                "block footer feature bits {:#010x} in the {} block at byte {}",
                packed & OTHER_FEATURE_BITS,
                ctx.what,
                ctx.offset
            ),
        });
    }
    let n = packed as usize;
    let restarts_bytes = n
        .checked_mul(4)
        .filter(|b| *b <= block.len() - 4)
        .ok_or_else(|| {
            ctx.corrupt(format!(
                "{n} restart points do not fit in a {}-byte block",
                block.len()
            ))
        })?;
    let limit = block.len() - 4 - restarts_bytes;
    if n == 0 && limit > 0 {
        return Err(ctx.corrupt("entries but no restart point"));
    }
    let mut prev = None;
    for i in 0..n {
        let r = fixed32(&block[limit + 4 * i..]).unwrap_or(u32::MAX) as usize;
        let ok = match prev {
            None => r == 0,
            Some(p) => r > p && r < limit,
        };
        if !ok {
            return Err(ctx.corrupt(format!("restart point {i} at byte {r} is out of order")));
        }
        prev = Some(r);
    }
    Ok(limit)
}

impl<'a> BlockIter<'a> {
    /// Checks `block`'s footer and restart points and starts at its first entry.
    pub fn new(block: &'a [u8], ctx: BlockContext<'a>) -> Result<Self, FlinkError> {
        let limit = entries_end(block, &ctx)?;
        Ok(BlockIter {
            data: block,
            limit,
            pos: 0,
            key: Vec::new(),
            ctx,
        })
    }

    /// Reads the shared-prefix key of the entry at the cursor; returns the cursor after the key and, if
    /// `with_value_len`, the value length.
    fn key_at(&mut self, with_value_len: bool) -> Result<(usize, usize), FlinkError> {
        let at = self.pos;
        let mut c = Cursor::new(&self.data[at..self.limit]);
        let bad = |what: &str| {
            self.ctx
                .corrupt(format!("entry at byte {at} of the block: {what}"))
        };
        let shared = c.varint32().ok_or_else(|| bad("bad shared length"))? as usize;
        let non_shared = c.varint32().ok_or_else(|| bad("bad key length"))? as usize;
        let value_len = if with_value_len {
            c.varint32().ok_or_else(|| bad("bad value length"))? as usize
        } else {
            0
        };
        if shared > self.key.len() || (at == 0 && shared != 0) {
            return Err(bad(&format!(
                "shares {shared} bytes with a previous key of {}",
                self.key.len()
            )));
        }
        let delta = c
            .bytes(non_shared)
            .ok_or_else(|| bad("key runs past the entries"))?;
        self.key.truncate(shared);
        self.key.extend_from_slice(delta);
        Ok((at + c.pos(), value_len))
    }

    /// The next `(key, value)`, or `None` at the end of the entries.
    pub fn next_entry(&mut self) -> Result<Option<(&[u8], &'a [u8])>, FlinkError> {
        if self.pos >= self.limit {
            return Ok(None);
        }
        let (vstart, vlen) = self.key_at(true)?;
        let vend = vstart
            .checked_add(vlen)
            .filter(|e| *e <= self.limit)
            .ok_or_else(|| {
                self.ctx.corrupt(format!(
                    "value of {vlen} bytes at byte {vstart} runs past the entries"
                ))
            })?;
        self.pos = vend;
        let data: &'a [u8] = self.data;
        Ok(Some((&self.key, &data[vstart..vend])))
    }
}

/// The data-block handles of an index block, in order. `delta_encoded`: values are delta-encoded and
/// entries carry no value length (`rocksdb.index.value.is.delta.encoded`, format_version ≥ 4);
/// `first_key`: each value is followed by the block's first key (`kBinarySearchWithFirstKey`).
pub(crate) fn index_handles(
    block: &[u8],
    ctx: BlockContext<'_>,
    delta_encoded: bool,
    first_key: bool,
) -> Result<Vec<BlockHandle>, FlinkError> {
    let mut it = BlockIter::new(block, ctx)?;
    let mut out: Vec<BlockHandle> = Vec::new();
    while it.pos < it.limit {
        let at = it.pos;
        let (vstart, vlen) = it.key_at(!delta_encoded)?;
        let shared = {
            // Re-read the shared length: delta values are used exactly when the key shares bytes.
            let mut c = Cursor::new(&block[at..it.limit]);
            c.varint32().unwrap_or(0)
        };
        let vend_limit = if delta_encoded {
            it.limit
        } else {
            vstart
                .checked_add(vlen)
                .filter(|e| *e <= it.limit)
                .ok_or_else(|| {
                    ctx.corrupt(format!(
                        "index value at byte {vstart} runs past the entries"
                    ))
                })?
        };
        let mut c = Cursor::new(&block[vstart..vend_limit]);
        let bad = || ctx.corrupt(format!("bad index value at byte {vstart} of the block"));
        let handle = match (delta_encoded && shared > 0, out.last()) {
            (true, Some(prev)) => {
                let delta = c.varsigned64().ok_or_else(bad)?;
                let size = (prev.size as i64)
                    .checked_add(delta)
                    .filter(|s| *s >= 0)
                    .ok_or_else(bad)? as u64;
                let offset = prev
                    .offset
                    .checked_add(prev.size)
                    .and_then(|o| o.checked_add(BLOCK_TRAILER))
                    .ok_or_else(bad)?;
                BlockHandle { offset, size }
            }
            (true, None) => {
                return Err(ctx.corrupt("the first index entry is delta-encoded"));
            }
            (false, _) => c.handle().ok_or_else(bad)?,
        };
        if first_key {
            let n = c.varint32().ok_or_else(bad)? as usize;
            c.bytes(n).ok_or_else(bad)?;
        }
        it.pos = if delta_encoded {
            vstart + c.pos()
        } else {
            vend_limit
        };
        out.push(handle);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> BlockContext<'static> {
        BlockContext {
            file: "t",
            offset: 0,
            what: "data block",
        }
    }

    /// A block as RocksDB's BlockBuilder writes it, restart interval `interval`.
    fn build(entries: &[(&[u8], &[u8])], interval: usize) -> Vec<u8> {
        let mut out = Vec::new();
        let mut restarts = Vec::new();
        let mut prev: &[u8] = &[];
        for (i, (k, v)) in entries.iter().enumerate() {
            let shared = if i % interval == 0 {
                restarts.push(out.len() as u32);
                0
            } else {
                prev.iter()
                    .zip(k.iter())
                    .take_while(|(a, b)| a == b)
                    .count()
            };
            out.push(shared as u8);
            out.push((k.len() - shared) as u8);
            out.push(v.len() as u8);
            out.extend_from_slice(&k[shared..]);
            out.extend_from_slice(v);
            prev = k;
        }
        if restarts.is_empty() {
            restarts.push(0);
        }
        for r in &restarts {
            out.extend_from_slice(&r.to_le_bytes());
        }
        out.extend_from_slice(&(restarts.len() as u32).to_le_bytes());
        out
    }

    #[test]
    fn shared_prefix_keys_and_restart_points_decode() {
        let entries: Vec<(&[u8], &[u8])> = vec![
            (b"apple", b"1"),
            (b"applesauce", b"22"),
            (b"apply", b""),
            (b"banana", b"4444"),
        ];
        for interval in [1, 2, 16] {
            let b = build(&entries, interval);
            let mut it = BlockIter::new(&b, ctx()).unwrap();
            let mut got = Vec::new();
            while let Some((k, v)) = it.next_entry().unwrap() {
                got.push((k.to_vec(), v.to_vec()));
            }
            let want: Vec<(Vec<u8>, Vec<u8>)> = entries
                .iter()
                .map(|(k, v)| (k.to_vec(), v.to_vec()))
                .collect();
            assert_eq!(got, want, "interval {interval}");
        }
        let empty = build(&[], 16);
        assert!(BlockIter::new(&empty, ctx())
            .unwrap()
            .next_entry()
            .unwrap()
            .is_none());
    }

    #[test]
    fn damaged_blocks_are_errors() {
        let b = build(&[(b"apple", b"1"), (b"applesauce", b"22")], 16);
        for cut in 0..b.len() {
            let r = BlockIter::new(&b[..cut], ctx()).and_then(|mut it| {
                while it.next_entry()?.is_some() {}
                Ok(())
            });
            let _ = r;
        }
        let mut hashed = b.clone();
        let n = hashed.len();
        hashed[n - 1] |= 0x80;
        assert!(matches!(
            BlockIter::new(&hashed, ctx()),
            Err(FlinkError::SstUnsupported { .. })
        ));
        let mut shared_first = b.clone();
        shared_first[0] = 1;
        let mut it = BlockIter::new(&shared_first, ctx()).unwrap();
        assert!(matches!(
            it.next_entry(),
            Err(FlinkError::SstCorrupt { .. })
        ));
    }

    #[test]
    fn delta_encoded_index_values_follow_the_previous_handle() {
        // Three entries at restart interval 2: a full handle, a size delta, a full handle.
        let mut b = Vec::new();
        // key "a", full handle (0, 100)
        b.extend_from_slice(&[0, 1, b'a', 0, 100]);
        // key "ab" shares 1 byte: size delta -10 (zig-zag 19)
        b.extend_from_slice(&[1, 1, b'b', 19]);
        let third = b.len() as u32;
        // key "c", full handle (300, 7)
        b.extend_from_slice(&[0, 1, b'c', 0xac, 0x02, 7]);
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&third.to_le_bytes());
        b.extend_from_slice(&2u32.to_le_bytes());
        let h = index_handles(&b, ctx(), true, false).unwrap();
        assert_eq!(
            h,
            vec![
                BlockHandle {
                    offset: 0,
                    size: 100
                },
                BlockHandle {
                    offset: 105,
                    size: 90
                },
                BlockHandle {
                    offset: 300,
                    size: 7
                },
            ]
        );
    }
}
