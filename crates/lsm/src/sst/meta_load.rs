//! Loading an SST file's index and filter blocks: verified (checksum, codec, structure) and decoded into
//! what the reader keeps or places in the block cache (module [`meta`] for the index; the filter's bloom
//! bytes as they are in the file). Used when the file opens and when a cached copy was evicted.

use std::cell::RefCell;
use std::cmp::Ordering;

use super::block::BlockCursor;
use super::bloom;
use super::format::{
    checked_block, decompress_lz4, BlockHandle, CODEC_NONE, FORMAT_VERSION_PREFIX,
};
use super::meta;
use super::probe::name_hash;
use crate::coding::DecodeError;
use crate::ikey;

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
