//! The crate's one error type, [`Error`], with the detail types it wraps: [`SavepointError`] (savepoint
//! files) and [`CheckpointError`] (checkpoints on object storage). The policy is in `design/errors.md`:
//! every error answers [`Error::kind`]; errors about damaged bytes carry a typed [`Location`]; an I/O
//! failure is one [`Error::Io`] naming the path (or object) and what was being done; errors of the engine
//! (`keyed_state_lsm::LsmError`) are wrapped, never re-described; code above this crate reaches it only as
//! [`Error::External`]. The detail types wrap nothing of this crate: the wrapping goes one way.

#[cfg(feature = "checkpoints")]
mod checkpoint;
mod savepoint;

use std::path::PathBuf;

use crate::keygroup::{KeyGroup, KeyGroupError, KeyGroupRange};
use crate::meta::StateKind;
use crate::serializer::{SerializerError, SerializerSnapshot};
#[cfg(feature = "checkpoints")]
pub use checkpoint::CheckpointError;
pub use keyed_state_lsm::{ErrorKind, Location};
pub use savepoint::SavepointError;
pub(crate) use savepoint::{in_memory, IN_MEMORY};

/// Result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in keyed state, each variant naming what is wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An I/O operation on a file, a directory or a stream failed.
    #[error("I/O error {op} {}: {source}", path.display())]
    Io {
        /// What was being done, as a verb phrase that the path completes (`"reading"`, `"creating the
        /// directory"`, `"renaming the temporary file to"`).
        op: &'static str,
        /// The file, directory or stream (`<stdout>`) it was done on.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A value could not be (de)serialized.
    #[error("state '{state}': {source}")]
    Serializer {
        /// The state (or `<key>` / `<namespace>`).
        state: String,
        /// The underlying error.
        #[source]
        source: SerializerError,
    },
    /// Key-group arithmetic on invalid arguments.
    #[error(transparent)]
    KeyGroup(#[from] KeyGroupError),
    /// A state name is registered twice with a different kind or type.
    #[error(
        "state '{name}' is already registered as {existing}, cannot register it as {requested}"
    )]
    StateKindMismatch {
        /// The state name.
        name: String,
        /// The kind it has.
        existing: StateKind,
        /// The kind requested.
        requested: StateKind,
    },
    /// A state name is registered twice with different serializers in one backend.
    #[error(
        "state '{name}' is already registered with {role} serializer {existing}, not {requested}"
    )]
    StateTypeMismatch {
        /// The state name.
        name: String,
        /// Which serializer differs (value, namespace).
        role: &'static str,
        /// The serializer it has.
        existing: Box<SerializerSnapshot>,
        /// The serializer requested.
        requested: Box<SerializerSnapshot>,
    },
    /// A serializer cannot read what the previous serializer wrote.
    #[error("state '{state}': incompatible {role} serializer: restored data was written by {previous}, the new serializer is {new}: {reason}")]
    IncompatibleSerializer {
        /// The state (or `<key>`).
        state: String,
        /// Which serializer (key, namespace, value).
        role: &'static str,
        /// The serializer that wrote the data.
        previous: Box<SerializerSnapshot>,
        /// The serializer given now.
        new: Box<SerializerSnapshot>,
        /// Why they are incompatible.
        reason: String,
    },
    /// A restored state is registered with TTL switched on or off (Flink's heap backend refuses this too:
    /// the stored bytes carry timestamps, or do not).
    #[error("state '{name}': {}", if *restored_with_ttl { "it was written with TTL and is registered without TTL; TTL cannot be switched off across a restore" } else { "it was written without TTL and is registered with TTL; TTL cannot be switched on across a restore" })]
    TtlToggled {
        /// The state.
        name: String,
        /// Whether the restored state has TTL (and the registration not).
        restored_with_ttl: bool,
    },
    /// The max parallelism of a savepoint differs from the backend's.
    #[error("max parallelism mismatch: the savepoint was written with max parallelism {savepoint}, the backend uses {backend}")]
    MaxParallelismMismatch {
        /// The savepoint's.
        savepoint: u32,
        /// The backend's.
        backend: u32,
    },
    /// A key falls in a key group outside the backend's range.
    #[error("key group {key_group} is outside this backend's key-group range {range}")]
    KeyGroupOutOfRange {
        /// The key group.
        key_group: KeyGroup,
        /// The backend's range.
        range: KeyGroupRange,
    },
    /// A state operation was used before setting a current key.
    #[error("no current key is set")]
    NoCurrentKey,
    /// No state of this name is registered or restored.
    #[error("unknown state '{0}'")]
    UnknownState(String),
    /// No state has this id (a backend used directly with an id it never gave out).
    #[error("unknown state id {0}")]
    UnknownStateId(usize),
    /// A state operation does not apply to the state's kind.
    #[error("state '{name}' is a {kind} state; {operation} does not apply")]
    WrongKind {
        /// The state.
        name: String,
        /// Its kind.
        kind: StateKind,
        /// The operation attempted.
        operation: &'static str,
    },
    /// A file's bytes are damaged or do not follow the format.
    #[error("corrupt data in {at}: {detail}")]
    Corruption {
        /// The file and, where known, the byte offset.
        at: Location,
        /// What is wrong.
        detail: String,
    },
    /// A stored entry of a state does not follow the state's format (a list without its delimiters, a map
    /// value without its null flag, a TTL value without its timestamp, a key its serializers cannot read).
    #[error("corrupt entry of state '{state}': {detail}")]
    CorruptState {
        /// The state.
        state: String,
        /// What is wrong.
        detail: String,
    },
    /// A savepoint could not be read or written.
    #[error(transparent)]
    Savepoint(#[from] SavepointError),
    /// A checkpoint could not be taken, read or restored.
    #[cfg(feature = "checkpoints")]
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// The LSM engine failed.
    #[error(transparent)]
    Lsm(#[from] keyed_state_lsm::LsmError),
    /// The RocksDB library reported an error (RocksDB backend).
    #[cfg(feature = "rocksdb")]
    #[error("RocksDB error during {context}: {detail}")]
    RocksDb {
        /// What was being done.
        context: String,
        /// RocksDB's message.
        detail: String,
    },
    /// A snapshot or backend was used after it was closed or cancelled.
    #[error("{0} was closed or cancelled")]
    Closed(&'static str),
    /// An invalid argument.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The backend does not support the operation.
    #[error("the {backend} backend does not support {what}")]
    Unsupported {
        /// The backend's name.
        backend: &'static str,
        /// The operation.
        what: &'static str,
    },
    /// An error of code above this crate that reached it through one of its traits (a
    /// [`BackendSnapshot`](crate::backend::BackendSnapshot) that reads a Flink savepoint, say), with its kind.
    /// The source can be downcast to the caller's own error type.
    #[error("{source}")]
    External {
        /// What kind of failure it is.
        kind: ErrorKind,
        /// The error.
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
}

impl Error {
    /// What kind of failure this is: the question a caller asks to decide what to do
    /// (`design/errors.md`).
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Io { source, .. } => ErrorKind::of_io(source),
            Error::Serializer { source, .. } => source.kind(),
            Error::KeyGroup(e) => e.kind(),
            Error::StateKindMismatch { .. }
            | Error::StateTypeMismatch { .. }
            | Error::IncompatibleSerializer { .. }
            | Error::TtlToggled { .. }
            | Error::MaxParallelismMismatch { .. }
            | Error::KeyGroupOutOfRange { .. }
            | Error::NoCurrentKey
            | Error::WrongKind { .. }
            | Error::InvalidArgument(_) => ErrorKind::InvalidInput,
            Error::UnknownState(_) | Error::UnknownStateId(_) => ErrorKind::NotFound,
            Error::Corruption { .. } | Error::CorruptState { .. } => ErrorKind::Corruption,
            Error::Savepoint(e) => e.kind(),
            #[cfg(feature = "checkpoints")]
            Error::Checkpoint(e) => e.kind(),
            Error::Lsm(e) => e.kind(),
            #[cfg(feature = "rocksdb")]
            Error::RocksDb { .. } => ErrorKind::Io,
            Error::Closed(_) => ErrorKind::Closed,
            Error::Unsupported { .. } => ErrorKind::Unsupported,
            Error::External { kind, .. } => *kind,
        }
    }

    /// Where damaged bytes are (file and, where known, byte offset), for the errors that know it: corruption
    /// of a file, of a savepoint, of a checkpoint, or of the engine's files.
    pub fn location(&self) -> Option<&Location> {
        match self {
            Error::Corruption { at, .. } => Some(at),
            Error::Savepoint(e) => e.location(),
            #[cfg(feature = "checkpoints")]
            Error::Checkpoint(e) => e.location(),
            Error::Lsm(e) => e.location(),
            _ => None,
        }
    }

    /// An I/O error: `op` is what was being done (`"reading"`), `path` what it was done on.
    pub fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            op,
            path: path.into(),
            source,
        }
    }

    /// [`Error::io`] as a closure for `map_err`.
    pub(crate) fn io_at(
        op: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| Error::Io { op, path, source }
    }

    /// A serializer error for a state.
    pub fn serializer(state: impl Into<String>, source: SerializerError) -> Self {
        Error::Serializer {
            state: state.into(),
            source,
        }
    }
}
