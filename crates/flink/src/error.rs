//! [`FlinkError`]: everything that can go wrong reading or writing Flink's savepoint files.

use keyed_state::ErrorKind;

/// Why a Flink savepoint, checkpoint or keyed-state stream could not be read or written. Every variant names
/// the file (`_metadata`, a keyed-state file, or an inline handle) and, where it applies, the byte offset.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FlinkError {
    /// A file could not be read or written.
    #[error("I/O error on {path}: {source}")]
    Io {
        /// The file or directory.
        path: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The bytes end before a field is complete.
    #[error("{file}: truncated at byte {offset} while reading {what}")]
    Truncated {
        /// The file or handle.
        file: String,
        /// Where the missing field starts.
        offset: u64,
        /// The field.
        what: &'static str,
    },
    /// `_metadata` does not start with Flink's magic number `0x4960672d`.
    #[error(
        "{file}: not a Flink checkpoint metadata file (magic {found:#010x}, expected 0x4960672d)"
    )]
    BadMagic {
        /// The file.
        file: String,
        /// The first four bytes.
        found: u32,
    },
    /// A metadata version this reader does not know.
    #[error("{file}: checkpoint metadata version {version} is not supported (supported: 3 to 7, Flink 1.15 to 2.x)")]
    UnsupportedMetadataVersion {
        /// The file.
        file: String,
        /// The version found.
        version: i32,
    },
    /// A field holds a value that the format does not allow.
    #[error("{file}: malformed {what} at byte {offset}: {detail}")]
    Malformed {
        /// The file or handle.
        file: String,
        /// Where the field starts.
        offset: u64,
        /// The field.
        what: &'static str,
        /// What is wrong with it.
        detail: String,
    },
    /// A state handle tag this reader does not know.
    #[error("{file}: unknown {kind} handle type {tag} at byte {offset}")]
    UnknownHandleType {
        /// The file.
        file: String,
        /// Where the tag is.
        offset: u64,
        /// Which handle family (keyed, stream, operator, channel).
        kind: &'static str,
        /// The tag byte.
        tag: u8,
    },
    /// A handle type that is read but cannot be imported (e.g. changelog, RocksDB native SST files).
    #[error("operator {operator} subtask {subtask}: cannot import a {handle}: {detail}")]
    UnsupportedHandle {
        /// The operator (uid or id).
        operator: String,
        /// The subtask index.
        subtask: u32,
        /// The handle type, as Flink names it.
        handle: &'static str,
        /// Why, and what to do instead.
        detail: String,
    },
    /// The requested operator is not in the savepoint.
    #[error(
        "operator '{wanted}' is not in this savepoint; operators present (uid / id): {available}"
    )]
    OperatorNotFound {
        /// The uid or hex id asked for.
        wanted: String,
        /// Every operator present.
        available: String,
    },
    /// The operator has no keyed state to import.
    #[error("operator '{operator}' has no keyed state")]
    NoKeyedState {
        /// The operator (uid or id).
        operator: String,
    },
    /// A stream handle points to a location this reader cannot open.
    #[error("cannot open state file {uri}: {detail}")]
    UnsupportedLocation {
        /// The URI or path as written in `_metadata`.
        uri: String,
        /// Why.
        detail: String,
    },
    /// A keyed-state stream's serialization proxy version this reader does not know.
    #[error(
        "{file}: keyed-state serialization proxy version {version} is not supported (supported: 6)"
    )]
    UnsupportedProxyVersion {
        /// The file.
        file: String,
        /// The version found.
        version: i32,
    },
    /// A state whose type or serializers cannot be imported.
    #[error("{file}: state '{state}': {detail}")]
    UnsupportedState {
        /// The file.
        file: String,
        /// The state name.
        state: String,
        /// What is not supported.
        detail: String,
    },
    /// Two handles describe the same state differently.
    #[error("state '{state}' is described differently in {first} and {second}")]
    StateMismatch {
        /// The state name.
        state: String,
        /// The first file.
        first: String,
        /// The other file.
        second: String,
    },
    /// Damaged Snappy framing (Flink's `SnappyFramedOutputStream`).
    #[error("{file}: bad Snappy frame at byte {offset}: {detail}")]
    Snappy {
        /// The file or handle.
        file: String,
        /// Where the chunk starts.
        offset: u64,
        /// What is wrong.
        detail: String,
    },
    /// An entry or key group that breaks the canonical stream's rules.
    #[error("{file}: key group {key_group}: {detail}")]
    BadKeyGroup {
        /// The file or handle.
        file: String,
        /// The key group.
        key_group: keyed_state::keygroup::KeyGroup,
        /// What is wrong.
        detail: String,
    },
    /// A RocksDB SST file (native savepoint, incremental checkpoint) that is damaged or breaks the format.
    #[error("{file}: corrupt RocksDB SST file: {what} (block at byte {offset}): {detail}")]
    SstCorrupt {
        /// The file (its local RocksDB name and the file holding it).
        file: String,
        /// The file offset of the block (or footer) concerned.
        offset: u64,
        /// The structure being read.
        what: &'static str,
        /// What is wrong.
        detail: String,
    },
    /// A RocksDB SST file using a feature this reader does not implement.
    #[error("{file}: RocksDB SST file uses {feature}, which this reader does not support")]
    SstUnsupported {
        /// The file.
        file: String,
        /// The feature, as RocksDB names it.
        feature: String,
    },
    /// Handles or arguments that do not fit together (max parallelism, overlapping key groups, ...).
    #[error("{0}")]
    Inconsistent(String),
    /// keyed-state failed (reading or writing one of our savepoints, a serializer, a backend).
    #[error(transparent)]
    State(keyed_state::Error),
}

impl FlinkError {
    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            FlinkError::Io { source, .. } => ErrorKind::of_io(source),
            FlinkError::Truncated { .. }
            | FlinkError::BadMagic { .. }
            | FlinkError::Malformed { .. }
            | FlinkError::UnknownHandleType { .. }
            | FlinkError::Snappy { .. }
            | FlinkError::BadKeyGroup { .. }
            | FlinkError::SstCorrupt { .. }
            | FlinkError::StateMismatch { .. } => ErrorKind::Corruption,
            FlinkError::UnsupportedMetadataVersion { .. }
            | FlinkError::UnsupportedHandle { .. }
            | FlinkError::UnsupportedLocation { .. }
            | FlinkError::UnsupportedProxyVersion { .. }
            | FlinkError::UnsupportedState { .. }
            | FlinkError::SstUnsupported { .. } => ErrorKind::Unsupported,
            FlinkError::OperatorNotFound { .. } | FlinkError::NoKeyedState { .. } => {
                ErrorKind::NotFound
            }
            FlinkError::Inconsistent(_) => ErrorKind::InvalidInput,
            FlinkError::State(e) => e.kind(),
        }
    }
}

impl From<keyed_state::Error> for FlinkError {
    /// A keyed-state error, unwrapped when it carries a [`FlinkError`] that crossed a keyed-state trait.
    fn from(e: keyed_state::Error) -> Self {
        match e {
            keyed_state::Error::External { kind, source } => {
                match source.downcast::<FlinkError>() {
                    Ok(f) => *f,
                    Err(source) => FlinkError::State(keyed_state::Error::External { kind, source }),
                }
            }
            e => FlinkError::State(e),
        }
    }
}

impl From<FlinkError> for keyed_state::Error {
    /// A Flink error crossing a keyed-state trait (the import's
    /// [`BackendSnapshot`](keyed_state::backend::BackendSnapshot)): a keyed-state error is passed on as it
    /// is, any other keeps its kind as [`keyed_state::Error::External`].
    fn from(e: FlinkError) -> Self {
        match e {
            FlinkError::State(e) => e,
            e => keyed_state::Error::External {
                kind: e.kind(),
                source: Box::new(e),
            },
        }
    }
}

impl FlinkError {
    /// An I/O error on `path`.
    pub fn io(path: impl std::fmt::Display, source: std::io::Error) -> Self {
        FlinkError::Io {
            path: path.to_string(),
            source,
        }
    }
}
