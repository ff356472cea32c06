//! SST files: immutable sorted files of internal keys, read through memory maps.
//!
//! The byte format is specified in `design/sst-format.md`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::cache::BlockCache;
use super::slice::ValueSlice;
use super::LsmError;

/// Block compression codec.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Compression {
    /// Blocks are stored raw.
    None,
    /// LZ4 block compression per block (a block that does not shrink enough is stored raw).
    #[default]
    Lz4,
}

/// Options of an SST writer.
#[derive(Debug, Clone)]
pub struct SstOptions {
    /// Target uncompressed size of a data block.
    pub block_size: usize,
    /// Entries between restart points in data blocks.
    pub restart_interval: usize,
    /// Bloom filter bits per user key; 0 = no filter.
    pub bloom_bits_per_key: u32,
    /// Block codec.
    pub compression: Compression,
}

impl Default for SstOptions {
    fn default() -> Self {
        SstOptions {
            block_size: 4096,
            restart_interval: 16,
            bloom_bits_per_key: 10,
            compression: Compression::Lz4,
        }
    }
}

/// Collects user properties while an SST is written (e.g. the smallest and largest TTL timestamp).
pub trait PropertiesCollector: Send {
    /// Sees every entry added, in order.
    fn add(&mut self, ikey: &[u8], value: &[u8]);
    /// The properties to record in the file.
    fn finish(&mut self) -> Vec<(String, Vec<u8>)>;
}

/// Properties recorded in an SST file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SstProperties {
    /// The smallest internal key (empty for an empty file).
    pub smallest: Vec<u8>,
    /// The largest internal key (empty for an empty file).
    pub largest: Vec<u8>,
    /// Number of entries.
    pub entries: u64,
    /// Number of merge operands.
    pub merge_operands: u64,
    /// Number of point tombstones.
    pub tombstones: u64,
    /// Number of range tombstones.
    pub range_tombstones: u64,
    /// Sum of internal key lengths.
    pub raw_key_bytes: u64,
    /// Sum of value lengths.
    pub raw_value_bytes: u64,
    /// Smallest sequence number (0 for an empty file).
    pub min_seqno: u64,
    /// Largest sequence number (0 for an empty file).
    pub max_seqno: u64,
    /// Properties from the collector.
    pub user: Vec<(String, Vec<u8>)>,
}

/// What a finished SST file is.
#[derive(Debug, Clone)]
pub struct SstMeta {
    /// Size of the file in bytes.
    pub file_size: u64,
    /// Its properties.
    pub properties: SstProperties,
}

/// Writes one SST file.
pub struct SstWriter {
    _path: PathBuf,
}

impl SstWriter {
    /// Creates a new file at `path` (which must not exist).
    pub fn create(
        path: &Path,
        options: SstOptions,
        collector: Option<Box<dyn PropertiesCollector>>,
    ) -> Result<Self, LsmError> {
        let _ = (options, collector);
        Ok(SstWriter {
            _path: path.to_path_buf(),
        })
    }

    /// Appends an entry; keys must be strictly ascending by `ikey::compare`.
    pub fn add(&mut self, ikey: &[u8], value: &[u8]) -> Result<(), LsmError> {
        let _ = (ikey, value);
        Err(unimplemented_err())
    }

    /// Estimated size of the file if finished now.
    pub fn estimated_size(&self) -> u64 {
        0
    }

    /// Writes index, filter, properties and footer, and fsyncs the file.
    pub fn finish(self) -> Result<SstMeta, LsmError> {
        Err(unimplemented_err())
    }
}

fn unimplemented_err() -> LsmError {
    LsmError::Corruption {
        file: String::new(),
        detail: "not implemented yet".into(),
    }
}

/// An open, immutable SST file.
pub struct SstReader {
    path: PathBuf,
    file_number: u64,
    properties: SstProperties,
    _cache: Arc<BlockCache>,
}

impl SstReader {
    /// Maps the file and validates footer, index, filter and properties blocks.
    pub fn open(
        path: &Path,
        file_number: u64,
        cache: Arc<BlockCache>,
    ) -> Result<Arc<Self>, LsmError> {
        let _ = (path, file_number, cache);
        Err(unimplemented_err())
    }

    /// The file's properties.
    pub fn properties(&self) -> &SstProperties {
        &self.properties
    }

    /// The file size in bytes.
    pub fn file_size(&self) -> u64 {
        0
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file number (the block cache key).
    pub fn file_number(&self) -> u64 {
        self.file_number
    }

    /// False only if no key with this user key is in the file (bloom filter).
    pub fn may_contain(&self, user_key: &[u8]) -> bool {
        let _ = user_key;
        true
    }

    /// An iterator over the file, initially not positioned.
    pub fn iter(self: &Arc<Self>) -> SstIter {
        SstIter {
            _reader: Arc::clone(self),
        }
    }
}

/// A cursor over an SST file in internal-key order.
pub struct SstIter {
    _reader: Arc<SstReader>,
}

impl SstIter {
    /// Positions at the first entry.
    pub fn seek_to_first(&mut self) -> Result<(), LsmError> {
        Err(unimplemented_err())
    }

    /// Positions at the first entry `>= target_ikey` by `ikey::compare`.
    pub fn seek(&mut self, target_ikey: &[u8]) -> Result<(), LsmError> {
        let _ = target_ikey;
        Err(unimplemented_err())
    }

    /// Advances to the next entry.
    pub fn next(&mut self) -> Result<(), LsmError> {
        Err(unimplemented_err())
    }

    /// Whether the cursor is at an entry.
    pub fn valid(&self) -> bool {
        false
    }

    /// The current internal key.
    pub fn key(&self) -> &[u8] {
        &[]
    }

    /// The current value.
    pub fn value(&self) -> &[u8] {
        &[]
    }

    /// The current value as a zero-copy view.
    pub fn value_slice(&self) -> ValueSlice {
        ValueSlice::empty()
    }
}
