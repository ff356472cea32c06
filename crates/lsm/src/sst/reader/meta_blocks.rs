//! The reader's metadata blocks, its index and its filter: how they are verified and decoded when the
//! file is opened (or loaded again), where the reader holds them ([`MetadataPlacement::Resident`]: kept by
//! the reader; [`MetadataPlacement::Cached`]: placed in the block cache), and what they cost
//! ([`ReaderMetadata`]).

use std::cell::RefCell;
use std::cmp::Ordering;
use std::sync::{Arc, OnceLock};

use super::super::block::BlockCursor;
use super::super::format::{
    checked_block, decompress_lz4, BlockHandle, Footer, CODEC_NONE, FORMAT_VERSION_PREFIX,
};
use super::super::{bloom, meta};
use super::{name_hash, SstReader};
use crate::coding::DecodeError;
use crate::env::MemoryReservation;
use crate::ikey;
#[cfg(doc)]
use crate::options::MetadataPlacement;
use crate::LsmError;

/// Where a reader's index or filter lies in the file, and the buffer the reader keeps of it (module
/// [`meta`] for the index; the filter's bloom bytes as they are in the file).
pub(super) struct MetaSlot {
    /// The block in the file (its offset is also the cache key's).
    handle: BlockHandle,
    /// The buffer, when the reader keeps it ([`MetadataPlacement::Resident`], or too large for the cache).
    kept: OnceLock<Arc<Vec<u8>>>,
    /// Its length.
    len: usize,
    /// The budget's charge for a buffer kept after the file was opened.
    late_charge: OnceLock<MemoryReservation>,
}

impl MetaSlot {
    pub(super) fn new(handle: BlockHandle, buf: &Arc<Vec<u8>>, keep: bool) -> Self {
        let kept = OnceLock::new();
        if keep {
            let _ = kept.set(Arc::clone(buf));
        }
        MetaSlot {
            handle,
            kept,
            len: buf.len(),
            late_charge: OnceLock::new(),
        }
    }
}

/// An index or filter buffer held for the length of a read: borrowed from the reader, or a reference to
/// the cache's entry (which keeps its bytes alive if the cache evicts it meanwhile).
pub(super) enum Pinned<'a> {
    Kept(&'a [u8]),
    Cached(Arc<Vec<u8>>),
}

impl std::ops::Deref for Pinned<'_> {
    type Target = [u8];

    #[inline]
    fn deref(&self) -> &[u8] {
        match self {
            Pinned::Kept(b) => b,
            Pinned::Cached(b) => b,
        }
    }
}

/// What an open reader's index and filter hold, and what it keeps in memory besides the cache.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReaderMetadata {
    /// Data blocks (index entries).
    pub data_blocks: u64,
    /// Bytes of the index entries' keys (every data block's last internal key).
    pub index_key_bytes: u64,
    /// Bytes of the decoded index (keys plus 28 bytes per block).
    pub index_bytes: u64,
    /// Bytes of the bloom filter.
    pub filter_bytes: u64,
    /// Bytes the reader holds outside the block cache (what the budget charges as SST metadata).
    pub resident_bytes: u64,
}

impl std::ops::AddAssign for ReaderMetadata {
    fn add_assign(&mut self, o: Self) {
        self.data_blocks += o.data_blocks;
        self.index_key_bytes += o.index_key_bytes;
        self.index_bytes += o.index_bytes;
        self.filter_bytes += o.filter_bytes;
        self.resident_bytes += o.resident_bytes;
    }
}

impl SstReader {
    /// Inserts a freshly loaded index or filter buffer into the cache; the reader keeps it instead (charged
    /// as metadata) when it is too large for the cache to keep (see [`MetadataPlacement::Cached`]).
    pub(super) fn place<'a>(&self, slot: &'a MetaSlot, buf: Arc<Vec<u8>>) -> Pinned<'a> {
        self.cache
            .insert(self.file_number, slot.handle.offset, Arc::clone(&buf));
        if buf.len().saturating_mul(16) >= self.cache.capacity()
            && !self.cache.contains(self.file_number, slot.handle.offset)
            && slot.kept.set(Arc::clone(&buf)).is_ok()
        {
            if let Some(b) = self.cache.budget() {
                let _ = slot.late_charge.set(b.charge_metadata(buf.len()));
            }
        }
        Pinned::Cached(buf)
    }

    /// The index or filter of `slot`: the reader's, the cache's, or loaded from the file by `load` (and
    /// placed).
    #[inline]
    fn pinned<'a>(
        &'a self,
        slot: &'a MetaSlot,
        load: impl FnOnce(&Self) -> Result<Vec<u8>, String>,
    ) -> Result<Pinned<'a>, LsmError> {
        if let Some(b) = slot.kept.get() {
            return Ok(Pinned::Kept(b));
        }
        if let Some(b) = self.cache.get(self.file_number, slot.handle.offset) {
            return Ok(Pinned::Cached(b));
        }
        let buf = Arc::new(load(self).map_err(|d| self.corruption(d))?);
        Ok(self.place(slot, buf))
    }

    /// The decoded index, held for the length of a read.
    #[inline]
    pub(super) fn index(&self) -> Result<Pinned<'_>, LsmError> {
        self.pinned(&self.index, |r| {
            load_index(r.backing.bytes(), r.index.handle, r.data_end as u64)
        })
    }

    /// The filter's bloom bytes, held for the length of a probe (`None` without a filter).
    #[inline]
    pub(super) fn filter(&self) -> Result<Option<Pinned<'_>>, LsmError> {
        let Some(slot) = &self.filter else {
            return Ok(None);
        };
        self.pinned(slot, |r| {
            let version = Footer::decode(r.backing.bytes())
                .map_err(|e| format!("footer: {e}"))?
                .version;
            filter_bits(r.backing.bytes(), slot.handle, version).map(|(_, _, b)| b.to_vec())
        })
        .map(Some)
    }

    /// What the reader's index and filter hold, and what it keeps in memory besides the cache.
    pub fn metadata(&self) -> ReaderMetadata {
        // Buffers of a reader whose metadata is cached, kept because the cache would not take them.
        let late = [Some(&self.index), self.filter.as_ref()]
            .into_iter()
            .flatten()
            .filter(|s| self.cached && s.kept.get().is_some())
            .map(|s| s.len)
            .sum::<usize>();
        ReaderMetadata {
            data_blocks: self.blocks as u64,
            index_key_bytes: self.index_key_bytes as u64,
            index_bytes: self.index.len as u64,
            filter_bytes: self.filter.as_ref().map_or(0, |f| f.len) as u64,
            resident_bytes: (self.resident_bytes + late) as u64,
        }
    }
}

/// Verifies a metadata block and hands its bytes to `f`: in place for a raw block, decompressed into a
/// per-thread buffer otherwise, reused by every file the thread opens (it grows to the largest index
/// block), so that opening a file allocates no copy of its index block.
fn with_block_bytes<R>(
    file: &[u8],
    handle: BlockHandle,
    f: impl FnOnce(&[u8]) -> R,
) -> Result<R, DecodeError> {
    thread_local! {
        static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    }
    let (codec, payload) = checked_block(file, handle)?;
    if codec == CODEC_NONE {
        return Ok(f(payload));
    }
    SCRATCH.with(|s| match s.try_borrow_mut() {
        Ok(mut buf) => {
            let out = decompress_lz4(payload, handle.offset, std::mem::take(&mut *buf))?;
            let r = f(&out);
            *buf = out;
            Ok(r)
        }
        // Re-entered (not done by the engine): a buffer of its own.
        Err(_) => Ok(f(&decompress_lz4(payload, handle.offset, Vec::new())?)),
    })
}

/// Verifies the index block at `handle` and decodes it into the buffer the reader searches (module [`meta`]).
pub(super) fn load_index(
    file: &[u8],
    handle: BlockHandle,
    data_end: u64,
) -> Result<Vec<u8>, String> {
    with_block_bytes(file, handle, |bytes| decode_index(bytes, data_end))
        .map_err(|e| format!("index {e}"))?
        .map_err(|e| format!("index block: {e}"))
}

/// Verifies the filter block at `handle` of a file of format `version` and splits it into (holds whole keys,
/// the hash of the extractor whose prefixes it holds, bloom bytes).
pub(super) fn filter_bits(
    file: &[u8],
    handle: BlockHandle,
    version: u32,
) -> Result<(bool, Option<u64>, &[u8]), String> {
    let (codec, payload) = checked_block(file, handle).map_err(|e| format!("filter {e}"))?;
    if codec != CODEC_NONE {
        return Err("filter block: unexpected codec".into());
    }
    if version >= FORMAT_VERSION_PREFIX {
        let (flags, name, bits) =
            bloom::parse_v3(payload).map_err(|e| format!("filter block: {e}"))?;
        let whole = flags & bloom::FILTER_WHOLE_KEYS != 0;
        let prefix = (flags & bloom::FILTER_PREFIXES != 0).then(|| name_hash(name));
        Ok((whole, prefix, bits))
    } else {
        bloom::validate(payload).map_err(|e| format!("filter block: {e}"))?;
        Ok((true, None, payload))
    }
}

/// Decodes the index block (last keys strictly ascending, handles ascending, non-overlapping, before
/// `data_end`) into the buffer of module [`meta`].
fn decode_index(bytes: &[u8], data_end: u64) -> Result<Vec<u8>, DecodeError> {
    let mut cursor = BlockCursor::default();
    cursor.reset(bytes)?;
    cursor.seek_to_first(bytes)?;
    let mut keys: Vec<u8> = Vec::new();
    let mut key_ends: Vec<u32> = Vec::new();
    let mut handles: Vec<BlockHandle> = Vec::new();
    let mut next_free = 0u64;
    let mut prev_start = 0usize;
    while cursor.valid() {
        let entry_err = |what| DecodeError::Entry {
            what,
            index: handles.len() as u64,
        };
        let key = cursor.key();
        if ikey::parse(key).is_none() {
            return Err(entry_err("malformed internal key"));
        }
        if !handles.is_empty()
            && keys
                .get(prev_start..)
                .is_some_and(|p| ikey::compare(p, key) != Ordering::Less)
        {
            return Err(entry_err("keys not ascending"));
        }
        let handle = bytes
            .get(cursor.value_range())
            .and_then(BlockHandle::decode_varint)
            .ok_or_else(|| entry_err("malformed block handle"))?;
        match handle.end() {
            Some(end) if handle.offset >= next_free && end <= data_end && handle.size > 0 => {
                next_free = end
            }
            _ => {
                return Err(entry_err(
                    "block handle overlaps another or lies outside the data area",
                ))
            }
        }
        prev_start = keys.len();
        keys.extend_from_slice(key);
        let end =
            u32::try_from(keys.len()).map_err(|_| entry_err("index keys exceed 4 GiB in all"))?;
        key_ends.push(end);
        handles.push(handle);
        cursor.next(bytes)?;
    }
    Ok(meta::encode(&keys, &key_ends, &handles))
}
