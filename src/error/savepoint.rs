//! [`SavepointError`]: what is wrong with a savepoint file, or with what was handed to the encoder. A leaf:
//! it depends on key-group types and the engine's `ErrorKind` and `Location` only, so that the crate's
//! `Error` can wrap it without depending on the encoder and the decoder. I/O failures are
//! [`Error::Io`](crate::Error::Io), not variants of this type.

use std::path::Path;

use crate::keygroup::{KeyGroup, KeyGroupRange};
use keyed_state_lsm::{ErrorKind, Location};

/// The file name a [`Location`] gets when the bytes were not read from a file
/// ([`SavepointReader::from_bytes`](crate::savepoint::SavepointReader::from_bytes), or the decoder before
/// the reader names the file).
pub(crate) const IN_MEMORY: &str = "<memory>";

/// Errors decoding a savepoint, or encoding one from a snapshot that breaks the contract. Every decoding
/// error carries the [`Location`] (the file, `<memory>` for bytes, and the byte offset) and names the
/// region (header, index, footer, or key group and frame).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SavepointError {
    /// The file is shorter than the smallest savepoint.
    #[error("savepoint {at} is {len} bytes, shorter than the minimum {min}: truncated or not a savepoint")]
    TooShort {
        /// The file (no offset).
        at: Location,
        /// The file length.
        len: u64,
        /// The minimum length.
        min: u64,
    },
    /// The file does not start with [`MAGIC`](crate::savepoint::MAGIC).
    #[error("bad magic in {at}: {found:02x?} is not a keyed-state savepoint")]
    BadMagic {
        /// The file, at offset 0.
        at: Location,
        /// The first 8 bytes.
        found: [u8; 8],
    },
    /// The file does not end with [`FOOTER_MAGIC`](crate::savepoint::FOOTER_MAGIC): the write never finished
    /// or the file was cut.
    #[error("bad footer magic in {at}: {found:02x?}: the savepoint is truncated or incomplete")]
    BadFooterMagic {
        /// The file and the offset of the footer magic.
        at: Location,
        /// The bytes found there.
        found: [u8; 8],
    },
    /// The format version is not one this reader knows.
    #[error(
        "unsupported savepoint format version {version} in {at} (this reader supports {supported})"
    )]
    UnsupportedVersion {
        /// The file and the offset of the version field.
        at: Location,
        /// The version in the file.
        version: u32,
        /// The version this reader supports.
        supported: u32,
    },
    /// Required-feature flags this reader does not know are set.
    #[error("unsupported savepoint feature flags {unknown:#x} (of {flags:#x}) in {at}; written by a newer version")]
    UnknownFlags {
        /// The file and the offset of the flags field.
        at: Location,
        /// All flags in the file.
        flags: u64,
        /// The unknown ones.
        unknown: u64,
    },
    /// The checksum of the header, index or footer does not match.
    #[error(
        "{region} checksum mismatch in {at}: stored {stored:#018x}, computed {computed:#018x}"
    )]
    ChecksumMismatch {
        /// `header`, `index` or `footer`.
        region: &'static str,
        /// The file and the offset of the region.
        at: Location,
        /// The checksum in the file.
        stored: u64,
        /// The checksum of the bytes.
        computed: u64,
    },
    /// The header is damaged or does not follow the format.
    #[error("malformed savepoint header in {at}: {detail}")]
    MalformedHeader {
        /// The file and the offset of the offending field.
        at: Location,
        /// What is wrong.
        detail: String,
    },
    /// The footer or key-group index is damaged or does not follow the format.
    #[error("malformed savepoint index in {at}: {detail}")]
    MalformedIndex {
        /// The file and the offset of the offending field.
        at: Location,
        /// What is wrong.
        detail: String,
    },
    /// A frame's checksum does not match.
    #[error("key group {key_group}: frame {frame} in {at}: checksum mismatch: stored {stored:#018x}, computed {computed:#018x}")]
    FrameChecksum {
        /// The key group of the block.
        key_group: KeyGroup,
        /// Frame number within the block (0-based).
        frame: u32,
        /// The file and the offset of the frame.
        at: Location,
        /// The checksum in the file.
        stored: u64,
        /// The checksum of the bytes.
        computed: u64,
    },
    /// A key-group block is damaged or does not follow the format.
    #[error("key group {key_group}: block at offset {block_offset}, frame in {at}: {detail}")]
    MalformedBlock {
        /// The key group of the block.
        key_group: KeyGroup,
        /// File offset of the block.
        block_offset: u64,
        /// The file and the offset of the frame being decoded.
        at: Location,
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
    pub fn kind(&self) -> ErrorKind {
        match self {
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

    /// The file and byte offset a decoding error is located at.
    pub fn location(&self) -> Option<&Location> {
        match self {
            SavepointError::TooShort { at, .. }
            | SavepointError::BadMagic { at, .. }
            | SavepointError::BadFooterMagic { at, .. }
            | SavepointError::UnsupportedVersion { at, .. }
            | SavepointError::UnknownFlags { at, .. }
            | SavepointError::ChecksumMismatch { at, .. }
            | SavepointError::MalformedHeader { at, .. }
            | SavepointError::MalformedIndex { at, .. }
            | SavepointError::FrameChecksum { at, .. }
            | SavepointError::MalformedBlock { at, .. } => Some(at),
            SavepointError::KeyGroupNotInRange { .. }
            | SavepointError::InvalidSnapshot { .. }
            | SavepointError::Unrepresentable(_) => None,
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
        self.location().and_then(|at| at.offset)
    }

    /// The error with its location's file set to `file` (the decoder names `<memory>` until the reader,
    /// which knows the path, names the file).
    pub(crate) fn in_file(mut self, file: &Path) -> Self {
        match &mut self {
            SavepointError::TooShort { at, .. }
            | SavepointError::BadMagic { at, .. }
            | SavepointError::BadFooterMagic { at, .. }
            | SavepointError::UnsupportedVersion { at, .. }
            | SavepointError::UnknownFlags { at, .. }
            | SavepointError::ChecksumMismatch { at, .. }
            | SavepointError::MalformedHeader { at, .. }
            | SavepointError::MalformedIndex { at, .. }
            | SavepointError::FrameChecksum { at, .. }
            | SavepointError::MalformedBlock { at, .. } => at.file = file.to_path_buf(),
            SavepointError::KeyGroupNotInRange { .. }
            | SavepointError::InvalidSnapshot { .. }
            | SavepointError::Unrepresentable(_) => {}
        }
        self
    }
}

/// A location in bytes not (yet) tied to a file.
pub(crate) fn in_memory(offset: u64) -> Location {
    Location::at(IN_MEMORY, offset)
}
