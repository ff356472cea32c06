//! **Not API.** The engine's file formats and the pieces below [`Db`](crate::Db), for the tests and the fuzz
//! targets only (feature `test-util`): internal keys, SST blocks, footers, readers and writers, the record
//! log framing of the WAL and the manifest, write-batch and range-tombstone encodings, and the block cache.
//! Anything here may change or go in any release; an embedding user has no reason to reach it.

/// Internal keys: a user key and its `(seqno, kind)` trailer.
pub mod ikey {
    pub use crate::ikey::*;
}

/// SST files: reader, writer, blocks and the footer.
pub mod sst {
    pub use crate::sst::{
        block, bloom, force_pre_read, format, properties, PrefixProbe, SstIter, SstMeta, SstReader,
        SstWriter,
    };
}

/// The framing of the WAL and the manifest: file header, checksummed records.
pub mod record_log {
    pub use crate::record_log::*;
}

/// Range tombstones and their encoding in an SST property.
pub mod rangedel {
    pub use crate::rangedel::*;
}

pub use crate::cache::BlockCache;
pub use crate::coding::DecodeError;
pub use crate::io::{copy_file, FileWriter};
pub use crate::manifest::validate_manifest;

use crate::WriteBatch;

/// A batch as a WAL record's payload: its first sequence number, then its updates.
pub fn encode_write_batch(batch: &WriteBatch, seqno: u64) -> Vec<u8> {
    batch.encode(seqno)
}

/// Decodes a WAL record's payload into its first sequence number and the batch.
pub fn decode_write_batch(bytes: &[u8]) -> Result<(u64, WriteBatch), DecodeError> {
    WriteBatch::decode(bytes)
}

/// A row cache filled and erased directly, for the bench of the cost of erasing a deleted file's rows
/// (`benches/row_cache_erase.rs`).
pub struct RowCacheProbe(crate::row_cache::RowCache);

impl RowCacheProbe {
    /// A row cache of `capacity_bytes` without a budget.
    pub fn new(capacity_bytes: usize) -> Self {
        RowCacheProbe(crate::row_cache::RowCache::new(capacity_bytes, None))
    }

    /// Caches one put of `value` at `seqno` for `key` in file `file` of the engine tagged `owner`.
    pub fn insert(&self, owner: u64, file: u64, key: &[u8], seqno: u64, value: &[u8]) {
        let mut rec = crate::row_cache::RowRecorder::new(key);
        rec.push(seqno, crate::ikey::ValueKind::Put, value);
        self.0.insert(owner, file, rec);
    }

    /// Whether the rows of `key` in file `file` of the engine tagged `owner` are cached: a lookup, which
    /// copies them out under the shard's lock as an engine's hit does.
    pub fn hit(&self, owner: u64, file: u64, key: &[u8]) -> bool {
        matches!(
            self.0.lookup(owner, file, key),
            crate::row_cache::Lookup::Hit(_)
        )
    }

    /// [`RowCache::erase_files`](crate::row_cache::RowCache::erase_files): one pass for all of `files`.
    pub fn erase_files(&self, owner: u64, files: &[u64]) {
        self.0.erase_files(owner, files);
    }

    /// [`RowCache::erase_owner`](crate::row_cache::RowCache::erase_owner).
    pub fn erase_owner(&self, owner: u64) {
        self.0.erase_owner(owner);
    }

    /// Bytes charged by the entries, and their count.
    pub fn usage_and_rows(&self) -> (usize, usize) {
        (self.0.usage(), self.0.rows())
    }
}
