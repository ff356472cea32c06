//! Cursors over an SST file: [`SstIter`], which walks the file's entries in internal-key order block by block
//! (with read-ahead, module `cold`), and the backward search of [`SstReader::last_point_key_before`].

use std::cmp::Ordering;
use std::sync::Arc;

use super::block::BlockCursor;
use super::cold::Readahead;
use super::meta::IndexView;
use super::reader::SstReader;
use crate::coding::DecodeError;
use crate::ikey::{self, ValueKind};
use crate::slice::ValueSlice;
use crate::LsmError;

impl SstReader {
    /// An iterator over the file, initially not positioned.
    pub fn iter(self: &Arc<Self>) -> SstIter {
        SstIter {
            reader: Arc::clone(self),
            block_idx: 0,
            block_offset: 0,
            block: ValueSlice::empty(),
            cursor: BlockCursor::default(),
            valid: false,
            readahead: Readahead::default(),
            own_block: None,
        }
    }

    /// An iterator for a compaction: its block reads use cached blocks but do not insert the blocks they
    /// decompress into the block cache (RocksDB reads compaction inputs with `fill_cache = false`). The
    /// inputs are about to be deleted, so their blocks would only push out blocks that foreground reads use,
    /// and be dropped with the file; the iterator decompresses into one buffer of its own instead, reused
    /// from block to block when no value it handed out still holds it.
    pub fn iter_for_compaction(self: &Arc<Self>) -> SstIter {
        let mut it = self.iter();
        it.own_block = Some(None);
        it
    }

    /// The last internal key of a point entry (not a range tombstone) whose user key lies in `[lo, hi)`, if
    /// any. Reads the block where `hi` would be and walks back block by block only while a block holds no
    /// such entry (usually one or two blocks).
    pub fn last_point_key_before(
        self: &Arc<Self>,
        hi: &[u8],
        lo: &[u8],
    ) -> Result<Option<Vec<u8>>, LsmError> {
        let blocks = self.blocks;
        if blocks == 0 {
            return Ok(None);
        }
        let target = ikey::lookup_key(hi);
        let mut b = IndexView::new(&self.index()?)
            .find_block(&target)
            .min(blocks - 1);
        let mut it = self.iter();
        loop {
            if !it.load_block(b)? {
                return Ok(None);
            }
            it.cursor
                .seek_to_first(&it.block)
                .map_err(|e| it.block_err(e))?;
            let mut last = None;
            let mut first_below_lo = false;
            let mut first = true;
            while it.cursor.valid() {
                let k = it.cursor.key();
                if ikey::compare(k, &target) != Ordering::Less {
                    break;
                }
                let uk = ikey::user_key(k);
                if first {
                    first_below_lo = uk < lo;
                    first = false;
                }
                if uk >= lo && k.last() != Some(&(ValueKind::RangeDelete as u8)) {
                    last = Some(k.to_vec());
                }
                it.cursor.next(&it.block).map_err(|e| it.block_err(e))?;
            }
            if last.is_some() || first_below_lo || b == 0 {
                return Ok(last);
            }
            b -= 1;
        }
    }
}

/// A cursor over an SST file in internal-key order. Owns an `Arc` of its reader; scanning does not allocate
/// per entry (the key is rebuilt in a reused buffer, values are ranges of the current block).
pub struct SstIter {
    reader: Arc<SstReader>,
    block_idx: usize,
    /// The offset of that block in the file (for errors).
    block_offset: u64,
    block: ValueSlice,
    cursor: BlockCursor,
    valid: bool,
    readahead: Readahead,
    /// For a compaction's iterator ([`SstReader::iter_for_compaction`]): the buffer its last block read from
    /// the file was decompressed into (None: none yet), reused when only this field holds it. None for
    /// other iterators, whose blocks go to the cache.
    own_block: Option<Option<Arc<Vec<u8>>>>,
}

impl SstIter {
    fn load_block(&mut self, idx: usize) -> Result<bool, LsmError> {
        if idx >= self.reader.blocks {
            self.block = ValueSlice::empty();
            return Ok(false);
        }
        let pinned = self.reader.index()?;
        let index = IndexView::new(&pinned);
        self.reader.read_ahead(&mut self.readahead, &index, idx);
        self.block_offset = index.handle(idx).map_or(0, |h| h.offset);
        // The previous block's view goes first, so that its buffer can be reused.
        self.block = ValueSlice::empty();
        self.block = self
            .reader
            .data_block_into(&index, idx, self.own_block.as_mut())?;
        self.block_idx = idx;
        self.cursor
            .reset_versioned(&self.block, self.reader.hashed_blocks)
            .map_err(|e| self.block_err(e))?;
        Ok(true)
    }

    fn block_err(&self, e: DecodeError) -> LsmError {
        self.reader
            .corruption(format!("data block at offset {}: {e}", self.block_offset))
    }

    /// Moves forward over blocks until positioned at an entry or past the end.
    fn settle(&mut self) -> Result<(), LsmError> {
        while !self.cursor.valid() {
            if !self.load_block(self.block_idx + 1)? {
                self.valid = false;
                return Ok(());
            }
            self.cursor
                .seek_to_first(&self.block)
                .map_err(|e| self.block_err(e))?;
        }
        self.valid = true;
        Ok(())
    }

    fn guard(&mut self, r: Result<(), LsmError>) -> Result<(), LsmError> {
        if r.is_err() {
            self.valid = false;
        }
        r
    }

    /// Positions at the first entry.
    pub fn seek_to_first(&mut self) -> Result<(), LsmError> {
        let r = (|| {
            self.valid = false;
            if !self.load_block(0)? {
                return Ok(());
            }
            self.cursor
                .seek_to_first(&self.block)
                .map_err(|e| self.block_err(e))?;
            self.settle()
        })();
        self.guard(r)
    }

    /// Positions at the first entry `>= target_ikey` by `ikey::compare`.
    pub fn seek(&mut self, target_ikey: &[u8]) -> Result<(), LsmError> {
        let r = (|| {
            self.valid = false;
            let idx = IndexView::new(&self.reader.index()?).find_block(target_ikey);
            if !self.load_block(idx)? {
                return Ok(());
            }
            self.cursor
                .seek(&self.block, target_ikey)
                .map_err(|e| self.block_err(e))?;
            self.settle()
        })();
        self.guard(r)
    }

    /// Advances to the next entry (no-op when not valid).
    #[allow(clippy::should_implement_trait)] // fallible cursor step, not an Iterator
    pub fn next(&mut self) -> Result<(), LsmError> {
        if !self.valid {
            return Ok(());
        }
        let r = (|| {
            self.cursor
                .next(&self.block)
                .map_err(|e| self.block_err(e))?;
            self.settle()
        })();
        self.guard(r)
    }

    /// Whether the cursor is at an entry.
    #[inline]
    pub fn valid(&self) -> bool {
        self.valid
    }

    /// The current internal key (empty when not valid).
    #[inline]
    pub fn key(&self) -> &[u8] {
        if self.valid {
            self.cursor.key()
        } else {
            &[]
        }
    }

    /// The current value (empty when not valid).
    #[inline]
    pub fn value(&self) -> &[u8] {
        if self.valid {
            self.block.get(self.cursor.value_range()).unwrap_or(&[])
        } else {
            &[]
        }
    }

    /// The current value as a zero-copy view of the mapped file (raw block) or of the cached block.
    pub fn value_slice(&self) -> ValueSlice {
        if !self.valid {
            return ValueSlice::empty();
        }
        self.block
            .slice(self.cursor.value_range())
            .unwrap_or_default()
    }

    /// The reader this iterator reads.
    #[cfg(feature = "test-util")]
    pub fn reader(&self) -> &Arc<SstReader> {
        &self.reader
    }
}
