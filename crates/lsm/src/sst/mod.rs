//! SST files: immutable sorted files of internal keys, read through memory maps.
//!
//! An SST file is a sequence of data blocks (prefix-compressed internal keys with restart points, LZ4 per
//! block), a bloom filter over user keys, a properties block, an index block and a fixed footer; every block
//! carries an xxh3 checksum verified before decompression. The byte format is specified in
//! `design/sst-format.md`. Files are read through memory maps; see [`SstReader`] for the soundness invariant.

mod backing;
#[doc(hidden)]
pub mod block;
#[doc(hidden)]
pub mod bloom;
pub(crate) mod cold;
#[doc(hidden)]
pub mod format;
mod iter;
mod meta;
mod meta_load;
mod meta_slot;
mod probe;
#[doc(hidden)]
pub mod properties;
mod reader;
mod writer;

#[cfg(feature = "test-util")]
pub use cold::force_pre_read;
pub use iter::SstIter;
#[doc(hidden)]
pub use meta::MetadataPlacement;
pub use probe::PrefixProbe;
pub use reader::{ReaderMetadata, SstReader};
#[doc(hidden)]
pub use writer::SstWriter;

use std::sync::Arc;

use super::prefix::PrefixExtractor;

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
    /// Records key prefixes in the filter (format version 3), so lookups and scans within one prefix skip
    /// files without it (default: none; format version 2 files).
    pub prefix_extractor: Option<Arc<dyn PrefixExtractor>>,
    /// Filter bits per distinct prefix when a prefix extractor is set (default 10; 0 = no prefixes).
    pub prefix_bloom_bits_per_key: u32,
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
            prefix_extractor: None,
            prefix_bloom_bits_per_key: 10,
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
    #[cfg_attr(not(feature = "test-util"), allow(dead_code))]
    pub properties: SstProperties,
}
