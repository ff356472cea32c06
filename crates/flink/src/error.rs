//! [`FlinkError`]: everything that can go wrong reading or writing Flink's savepoint files.

use keyed_state::{ErrorKind, Location};

/// Why a Flink savepoint, checkpoint or keyed-state stream could not be read or written. Damage is named by
/// a typed [`Location`] (the file: `_metadata`, a keyed-state file, an SST file with the file holding it,
/// or an inline handle; and the byte offset where the error is tied to one); an error met while reading
/// one operator's keyed state is wrapped in [`FlinkError::InHandle`], which names the operator, the subtask
/// and the handle.
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
    #[error("{at}: truncated while reading {what}")]
    Truncated {
        /// The file and where the missing field starts.
        at: Location,
        /// The field.
        what: &'static str,
    },
    /// `_metadata` does not start with Flink's magic number `0x4960672d`.
    #[error(
        "{at}: not a Flink checkpoint metadata file (magic {found:#010x}, expected 0x4960672d)"
    )]
    BadMagic {
        /// The file.
        at: Location,
        /// The first four bytes.
        found: u32,
    },
    /// A metadata version this reader does not know.
    #[error("{at}: checkpoint metadata version {version} is not supported (supported: 3 to 7, Flink 1.15 to 2.x)")]
    UnsupportedMetadataVersion {
        /// The file.
        at: Location,
        /// The version found.
        version: i32,
    },
    /// A field holds a value that the format does not allow.
    #[error("{at}: malformed {what}: {detail}")]
    Malformed {
        /// The file and where the field starts.
        at: Location,
        /// The field.
        what: &'static str,
        /// What is wrong with it.
        detail: String,
    },
    /// A state handle tag this reader does not know.
    #[error("{at}: unknown {kind} handle type {tag}")]
    UnknownHandleType {
        /// The file and where the tag is.
        at: Location,
        /// Which handle family (keyed, stream, operator, channel).
        kind: &'static str,
        /// The tag byte.
        tag: u8,
    },
    /// A handle type that is read but cannot be imported (e.g. changelog handles, raw keyed state).
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
        "{at}: keyed-state serialization proxy version {version} is not supported (supported: 6)"
    )]
    UnsupportedProxyVersion {
        /// The file.
        at: Location,
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
    #[error("{at}: bad Snappy frame: {detail}")]
    Snappy {
        /// The file and where the chunk starts.
        at: Location,
        /// What is wrong.
        detail: String,
    },
    /// An entry or key group that breaks the canonical stream's rules.
    #[error("{at}: key group {key_group}: {detail}")]
    BadKeyGroup {
        /// The file (and, where known, the key group's offset).
        at: Location,
        /// The key group.
        key_group: keyed_state::keygroup::KeyGroup,
        /// What is wrong.
        detail: String,
    },
    /// A RocksDB SST file (native savepoint, incremental checkpoint) that is damaged or breaks the format.
    #[error("{at}: corrupt RocksDB SST file: {what}: {detail}")]
    SstCorrupt {
        /// The file (its local RocksDB name and the file holding it) and the offset of the block (or
        /// footer) concerned.
        at: Location,
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
    /// A RocksDB `MANIFEST` (or `CURRENT`) that is damaged or breaks the format.
    #[error("{at}: corrupt RocksDB MANIFEST: {detail}")]
    ManifestCorrupt {
        /// The file (its local RocksDB name and the file holding it) and the offset of the record.
        at: Location,
        /// What is wrong.
        detail: String,
    },
    /// A RocksDB `MANIFEST` using a feature this reader does not implement.
    #[error("{file}: RocksDB MANIFEST uses {feature}, which this reader does not support")]
    ManifestUnsupported {
        /// The file.
        file: String,
        /// The feature.
        feature: String,
    },
    /// A file that a handle or a RocksDB `MANIFEST` names is not there.
    #[error("{file}: {detail}")]
    MissingFile {
        /// The file, as its referrer names it.
        file: String,
        /// Who names it and where it was looked for.
        detail: String,
    },
    /// Data that an import would leave unread: bytes of a keyed-state stream in no key group, an SST file
    /// that is not among the live files, a key group that was never read. An import never succeeds with
    /// fewer entries than its files hold.
    #[error("{file}: {detail}")]
    UnreadData {
        /// The file holding the data.
        file: String,
        /// What is left unread, and why.
        detail: String,
    },
    /// Handles or arguments that do not fit together (max parallelism, overlapping key groups, ...).
    #[error("{0}")]
    Inconsistent(String),
    /// An error met while reading one subtask's keyed-state handle: names the operator, the subtask and the
    /// handle type; the error inside names the file.
    #[error("operator '{operator}' subtask {subtask} ({handle}): {source}")]
    InHandle {
        /// The operator (uid, or hex id without one).
        operator: String,
        /// The subtask index.
        subtask: u32,
        /// The handle type, as Flink names it.
        handle: &'static str,
        /// What went wrong.
        #[source]
        source: Box<FlinkError>,
    },
    /// An error concerning one operator of a job being written or carried over.
    #[error("operator '{operator}': {source}")]
    Operator {
        /// The operator (uid, or hex id without one).
        operator: String,
        /// What went wrong.
        #[source]
        source: Box<FlinkError>,
    },
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
            | FlinkError::ManifestCorrupt { .. }
            | FlinkError::UnreadData { .. }
            | FlinkError::StateMismatch { .. } => ErrorKind::Corruption,
            FlinkError::UnsupportedMetadataVersion { .. }
            | FlinkError::UnsupportedHandle { .. }
            | FlinkError::UnsupportedLocation { .. }
            | FlinkError::UnsupportedProxyVersion { .. }
            | FlinkError::UnsupportedState { .. }
            | FlinkError::SstUnsupported { .. }
            | FlinkError::ManifestUnsupported { .. } => ErrorKind::Unsupported,
            FlinkError::OperatorNotFound { .. }
            | FlinkError::NoKeyedState { .. }
            | FlinkError::MissingFile { .. } => ErrorKind::NotFound,
            FlinkError::Inconsistent(_) => ErrorKind::InvalidInput,
            FlinkError::InHandle { source, .. } | FlinkError::Operator { source, .. } => {
                source.kind()
            }
            FlinkError::State(e) => e.kind(),
        }
    }

    /// The file and offset of a damaged or unsupported structure, where the error names one (looking
    /// through [`FlinkError::InHandle`]).
    pub fn location(&self) -> Option<&Location> {
        match self {
            FlinkError::Truncated { at, .. }
            | FlinkError::BadMagic { at, .. }
            | FlinkError::UnsupportedMetadataVersion { at, .. }
            | FlinkError::Malformed { at, .. }
            | FlinkError::UnknownHandleType { at, .. }
            | FlinkError::UnsupportedProxyVersion { at, .. }
            | FlinkError::Snappy { at, .. }
            | FlinkError::BadKeyGroup { at, .. }
            | FlinkError::SstCorrupt { at, .. }
            | FlinkError::ManifestCorrupt { at, .. } => Some(at),
            FlinkError::InHandle { source, .. } | FlinkError::Operator { source, .. } => {
                source.location()
            }
            _ => None,
        }
    }

    /// This error as met in `handle` of `operator`'s subtask `subtask` (an error already naming them is
    /// kept as it is).
    pub fn in_handle(self, operator: &str, subtask: u32, handle: &'static str) -> FlinkError {
        match self {
            e @ (FlinkError::InHandle { .. } | FlinkError::UnsupportedHandle { .. }) => e,
            e => FlinkError::InHandle {
                operator: operator.to_string(),
                subtask,
                handle,
                source: Box::new(e),
            },
        }
    }

    /// This error as met for `operator` of a job (an error already naming it is kept as it is).
    pub fn for_operator(self, operator: &str) -> FlinkError {
        match self {
            e @ (FlinkError::Operator { .. }
            | FlinkError::InHandle { .. }
            | FlinkError::UnsupportedHandle { .. }) => e,
            e => FlinkError::Operator {
                operator: operator.to_string(),
                source: Box::new(e),
            },
        }
    }

    /// An I/O error on `path`.
    pub fn io(path: impl std::fmt::Display, source: std::io::Error) -> Self {
        FlinkError::Io {
            path: path.to_string(),
            source,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handle_context_names_operator_handle_and_file_and_keeps_the_kind() {
        let e = FlinkError::SstCorrupt {
            at: Location::at("000023.sst (0560438e)", 100),
            what: "data block",
            detail: "checksum mismatch".into(),
        }
        .in_handle("state-op", 1, "IncrementalRemoteKeyedStateHandle");
        let msg = e.to_string();
        for want in [
            "operator 'state-op' subtask 1 (IncrementalRemoteKeyedStateHandle)",
            "000023.sst (0560438e) at byte 100",
            "checksum mismatch",
        ] {
            assert!(msg.contains(want), "{msg}");
        }
        assert_eq!(e.kind(), ErrorKind::Corruption);
        assert_eq!(e.location().and_then(|l| l.offset), Some(100));
        // Wrapping twice keeps the first context.
        let again = e.in_handle("other", 0, "KeyGroupsStateHandle");
        assert!(again.to_string().starts_with("operator 'state-op'"));
        // Through keyed-state and back.
        let ks: keyed_state::Error = again.into();
        assert_eq!(ks.kind(), ErrorKind::Corruption);
        assert!(matches!(
            FlinkError::from(ks),
            FlinkError::InHandle { subtask: 1, .. }
        ));
    }
}
