//! The unified savepoint format v1: one encoder and one decoder for every backend.
//!
//! A savepoint is one file: a checksummed header (key serializer, max parallelism, key-group range and the
//! meta information of every state), then one block per key group that holds data, each a sequence of
//! checksummed frames of at most 64 KiB raw (optionally LZ4-compressed) carrying the sorted entries of every
//! state with end marks, then a key-group offset index and a fixed-size footer. The entry bytes are exactly
//! the `(key, value)` pairs [`BackendSnapshot::visit`](crate::backend::BackendSnapshot::visit) yields, i.e.
//! Flink's canonical entry bytes; only the framing differs. The byte layout is specified in
//! `design/savepoint-format.md`.
//!
//! - [`write_savepoint`] writes a file atomically (temp file, fsync, rename, directory fsync); [`encode`]
//!   streams into any [`std::io::Write`]. Memory use is bounded (one 64 KiB frame) whatever the key-group
//!   size.
//! - [`SavepointReader`] opens a file (memory-mapped) or bytes, validates header, index and footer, and
//!   decodes key groups ([`SavepointReader::read_key_group`]) or checks everything
//!   ([`SavepointReader::verify`]). Bad input gives a [`SavepointError`] (inside
//!   [`Error::Savepoint`](crate::Error::Savepoint)) naming what and where (file and byte offset), never a
//!   panic.

mod format;
mod reader;
mod writer;

pub use crate::error::SavepointError;

pub use reader::{EntryVisitor, SavepointReader};
pub use writer::{encode, write_savepoint, write_savepoint_on};

use crate::keygroup::{KeyGroup, KeyGroupRange};
use crate::meta::StateMetaInfo;
use crate::serializer::SerializerSnapshot;

/// The 8 bytes every savepoint file starts with.
pub const MAGIC: [u8; 8] = *b"\x89KSSAVE\n";
/// The 8 bytes every complete savepoint file ends with.
pub const FOOTER_MAGIC: [u8; 8] = *b"KSSPEND\n";
/// The format version this crate writes and the only one it reads.
pub const FORMAT_VERSION: u32 = 1;
/// Required-feature flags this reader understands (none in v1); any other bit makes a reader reject the file.
pub const KNOWN_FLAGS: u64 = 0;
/// The largest number of raw (uncompressed) record-stream bytes in one frame; every frame of a key-group
/// block except the last holds exactly this many.
pub const MAX_FRAME_RAW_LEN: usize = 64 * 1024;

/// How frames are compressed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Compression {
    /// Frames are stored raw.
    #[default]
    None,
    /// Each frame is LZ4-block-compressed (lz4_flex), kept raw when compression does not shrink it.
    Lz4,
}

impl Compression {
    /// The code written in the header (and, per frame, the codec byte): 0 = none, 1 = LZ4.
    pub fn code(self) -> u8 {
        match self {
            Compression::None => 0,
            Compression::Lz4 => 1,
        }
    }

    /// The compression for a code, if known.
    pub fn from_code(code: u8) -> Option<Self> {
        match code {
            0 => Some(Compression::None),
            1 => Some(Compression::Lz4),
            _ => None,
        }
    }
}

/// Options for writing a savepoint.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteOptions {
    /// Frame compression.
    pub compression: Compression,
}

/// What a finished write produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavepointSummary {
    /// Total bytes of the savepoint.
    pub bytes_written: u64,
    /// Entries written per state, in header order.
    pub entries_per_state: Vec<u64>,
    /// Number of key groups with data (blocks written).
    pub key_groups_written: usize,
}

impl SavepointSummary {
    /// Entries over all states.
    pub fn total_entries(&self) -> u64 {
        self.entries_per_state.iter().sum()
    }
}

/// The decoded header of a savepoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavepointHeader {
    /// The format version (1).
    pub format_version: u32,
    /// Required-feature flags (0 in v1).
    pub flags: u64,
    /// The compression the writer was asked for (frames may still be raw where LZ4 did not shrink them).
    pub compression: Compression,
    /// The job's max parallelism (number of key groups).
    pub max_parallelism: u32,
    /// The key groups the writing backend owned.
    pub key_group_range: KeyGroupRange,
    /// Snapshot of the key serializer.
    pub key_serializer: SerializerSnapshot,
    /// Every state, in the writing backend's id order; the position is the state index used in the data.
    pub states: Vec<StateMetaInfo>,
}

impl SavepointHeader {
    /// The backend configuration the savepoint was written from.
    pub fn backend_config(&self) -> crate::backend::BackendConfig {
        crate::backend::BackendConfig {
            max_parallelism: self.max_parallelism,
            key_group_range: self.key_group_range,
            key_serializer: self.key_serializer.clone(),
        }
    }
}

/// One entry of the key-group offset index: where a key group's block lies and how many entries it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyGroupBlock {
    /// The key group.
    pub key_group: KeyGroup,
    /// File offset of the block's first frame.
    pub offset: u64,
    /// Length of the block in bytes (all its frames).
    pub length: u64,
    /// Entries in the block, over all states.
    pub entries: u64,
}

/// The result of [`SavepointReader::verify`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyReport {
    /// Key groups with data.
    pub key_groups: usize,
    /// Frames checked.
    pub frames: u64,
    /// Raw record-stream bytes decoded (after decompression).
    pub raw_bytes: u64,
    /// Entries per state, in header order.
    pub entries_per_state: Vec<u64>,
    /// File length in bytes.
    pub file_bytes: u64,
}

impl VerifyReport {
    /// Entries over all states.
    pub fn total_entries(&self) -> u64 {
        self.entries_per_state.iter().sum()
    }
}
