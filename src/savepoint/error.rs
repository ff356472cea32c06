//! The savepoint error type: a leaf module (it depends only on key-group types and the format version), so
//! that the crate's `Error` can wrap it without depending on the encoder and the decoder.

use super::FORMAT_VERSION;
use crate::keygroup::{KeyGroup, KeyGroupRange};

/// Errors reading or writing a savepoint. Decoding errors name the region (header, index, footer, or key
/// group and frame) and the file offset.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SavepointError {
    /// An I/O operation failed.
    #[error("I/O error while {context}: {source}")]
    Io {
        /// What was being done (and on which file).
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The file is shorter than the smallest savepoint.
    #[error(
        "savepoint is {len} bytes, shorter than the minimum {min}: truncated or not a savepoint"
    )]
    TooShort {
        /// The file length.
        len: u64,
        /// The minimum length.
        min: u64,
    },
    /// The file does not start with [`MAGIC`](super::MAGIC).
    #[error("bad magic at offset 0: {found:02x?} is not a keyed-state savepoint")]
    BadMagic {
        /// The first 8 bytes.
        found: [u8; 8],
    },
    /// The file does not end with [`FOOTER_MAGIC`](super::FOOTER_MAGIC): the write never finished or the file was cut.
    #[error("bad footer magic at offset {offset}: {found:02x?}: the savepoint is truncated or incomplete")]
    BadFooterMagic {
        /// Offset of the footer magic.
        offset: u64,
        /// The bytes found there.
        found: [u8; 8],
    },
    /// The format version is not one this reader knows.
    #[error(
        "unsupported savepoint format version {version} (this reader supports {FORMAT_VERSION})"
    )]
    UnsupportedVersion {
        /// The version in the file.
        version: u32,
    },
    /// Required-feature flags this reader does not know are set.
    #[error("unsupported savepoint feature flags {unknown:#x} (of {flags:#x}); written by a newer version")]
    UnknownFlags {
        /// All flags in the file.
        flags: u64,
        /// The unknown ones.
        unknown: u64,
    },
    /// The checksum of the header, index or footer does not match.
    #[error("{region} checksum mismatch at offset {offset}: stored {stored:#018x}, computed {computed:#018x}")]
    ChecksumMismatch {
        /// `header`, `index` or `footer`.
        region: &'static str,
        /// Offset of the region.
        offset: u64,
        /// The checksum in the file.
        stored: u64,
        /// The checksum of the bytes.
        computed: u64,
    },
    /// The header is damaged or does not follow the format.
    #[error("malformed header at offset {offset}: {detail}")]
    MalformedHeader {
        /// Offset of the offending field.
        offset: u64,
        /// What is wrong.
        detail: String,
    },
    /// The footer or key-group index is damaged or does not follow the format.
    #[error("malformed index at offset {offset}: {detail}")]
    MalformedIndex {
        /// Offset of the offending field.
        offset: u64,
        /// What is wrong.
        detail: String,
    },
    /// A frame's checksum does not match.
    #[error("key group {key_group}: frame {frame} at offset {offset}: checksum mismatch: stored {stored:#018x}, computed {computed:#018x}")]
    FrameChecksum {
        /// The key group of the block.
        key_group: KeyGroup,
        /// Frame number within the block (0-based).
        frame: u32,
        /// File offset of the frame.
        offset: u64,
        /// The checksum in the file.
        stored: u64,
        /// The checksum of the bytes.
        computed: u64,
    },
    /// A key-group block is damaged or does not follow the format.
    #[error(
        "key group {key_group}: block at offset {block_offset}, frame at offset {offset}: {detail}"
    )]
    MalformedBlock {
        /// The key group of the block.
        key_group: KeyGroup,
        /// File offset of the block.
        block_offset: u64,
        /// File offset of the frame being decoded.
        offset: u64,
        /// What is wrong.
        detail: String,
    },
    /// A key group outside the savepoint's key-group range was requested.
    #[error("key group {key_group} is outside the savepoint's key-group range {range}")]
    KeyGroupNotInRange {
        /// The key group asked for.
        key_group: KeyGroup,
        /// The savepoint's range.
        range: KeyGroupRange,
    },
    /// The backend snapshot handed to the encoder breaks the contract (unsorted keys, wrong key group...).
    #[error("invalid backend snapshot: state {state} ('{name}'), key group {key_group}: {detail}")]
    InvalidSnapshot {
        /// The state index.
        state: usize,
        /// The state name.
        name: String,
        /// The key group.
        key_group: KeyGroup,
        /// What is wrong.
        detail: String,
    },
    /// A configuration or header value cannot be written in this format.
    #[error("cannot write savepoint: {0}")]
    Unrepresentable(String),
}

impl SavepointError {
    /// What kind of failure this is.
    pub fn kind(&self) -> crate::ErrorKind {
        use crate::ErrorKind;
        match self {
            SavepointError::Io { source, .. } => ErrorKind::of_io(source),
            SavepointError::TooShort { .. }
            | SavepointError::BadMagic { .. }
            | SavepointError::BadFooterMagic { .. }
            | SavepointError::ChecksumMismatch { .. }
            | SavepointError::MalformedHeader { .. }
            | SavepointError::MalformedIndex { .. }
            | SavepointError::FrameChecksum { .. }
            | SavepointError::MalformedBlock { .. } => ErrorKind::Corruption,
            SavepointError::UnsupportedVersion { .. } | SavepointError::UnknownFlags { .. } => {
                ErrorKind::Unsupported
            }
            SavepointError::KeyGroupNotInRange { .. }
            | SavepointError::InvalidSnapshot { .. }
            | SavepointError::Unrepresentable(_) => ErrorKind::InvalidInput,
        }
    }

    /// The key group a decoding error is located in, if any.
    pub fn key_group(&self) -> Option<KeyGroup> {
        match self {
            SavepointError::FrameChecksum { key_group, .. }
            | SavepointError::MalformedBlock { key_group, .. }
            | SavepointError::KeyGroupNotInRange { key_group, .. }
            | SavepointError::InvalidSnapshot { key_group, .. } => Some(*key_group),
            _ => None,
        }
    }

    /// The file offset a decoding error is located at, if any.
    pub fn offset(&self) -> Option<u64> {
        match self {
            SavepointError::BadFooterMagic { offset, .. }
            | SavepointError::ChecksumMismatch { offset, .. }
            | SavepointError::MalformedHeader { offset, .. }
            | SavepointError::MalformedIndex { offset, .. }
            | SavepointError::FrameChecksum { offset, .. }
            | SavepointError::MalformedBlock { offset, .. } => Some(*offset),
            SavepointError::BadMagic { .. } => Some(0),
            _ => None,
        }
    }
}
