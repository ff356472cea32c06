//! The engine's error type, and the error kinds and file locations that every crate of keyed-state shares.
//!
//! Policy (`design/errors.md`): every public error has a [`kind`](LsmError::kind) that says what a caller can
//! do about it, and errors about damaged bytes carry the [`Location`] (file and byte offset) as typed fields.

use std::fmt;
use std::path::PathBuf;

/// What kind of failure an error is: the question a caller asks to decide what to do (retry, give up,
/// repair, report a bug in its own input). Every public error of keyed-state answers it with `kind()`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Stored bytes are damaged or do not follow their format: a checksum mismatch, a truncated file, a
    /// field out of range. Retrying does not help; the data must be restored from elsewhere.
    Corruption,
    /// The operating system or the object store failed an operation (a full disk, a refused or timed-out
    /// request, a permission). Retrying may help once the cause is gone.
    Io,
    /// The caller's input is wrong: an argument, an option, a serializer that does not match, a protocol
    /// step out of order. Fix the call.
    InvalidInput,
    /// Valid input that this build or version does not support (a format version, a feature flag, an
    /// operation a backend does not have).
    Unsupported,
    /// The object was closed, cancelled, or stopped after an earlier failure; open it again.
    Closed,
    /// Something else holds what the call needs: a lock held by another handle, a writer fenced by a
    /// newer one, a conflicting concurrent operation.
    Busy,
    /// What the call names does not exist: a file, a checkpoint, a state.
    NotFound,
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ErrorKind::Corruption => "corruption",
            ErrorKind::Io => "I/O error",
            ErrorKind::InvalidInput => "invalid input",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::Closed => "closed",
            ErrorKind::Busy => "busy",
            ErrorKind::NotFound => "not found",
        })
    }
}

impl ErrorKind {
    /// The kind of an I/O error: [`NotFound`](ErrorKind::NotFound) for a missing file, [`Io`](ErrorKind::Io)
    /// otherwise.
    pub fn of_io(e: &std::io::Error) -> ErrorKind {
        match e.kind() {
            std::io::ErrorKind::NotFound => ErrorKind::NotFound,
            _ => ErrorKind::Io,
        }
    }
}

/// Where bytes are: a file (or object) and, where known, the byte offset in it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Location {
    /// The file's path, or the object's name.
    pub file: PathBuf,
    /// The byte offset in the file, where the error is tied to one.
    pub offset: Option<u64>,
}

impl Location {
    /// A whole file.
    pub fn file(file: impl Into<PathBuf>) -> Location {
        Location {
            file: file.into(),
            offset: None,
        }
    }

    /// A byte offset in a file.
    pub fn at(file: impl Into<PathBuf>, offset: u64) -> Location {
        Location {
            file: file.into(),
            offset: Some(offset),
        }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.offset {
            Some(o) => write!(f, "{} at byte {o}", self.file.display()),
            None => write!(f, "{}", self.file.display()),
        }
    }
}

/// Errors of the LSM engine.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LsmError {
    /// An I/O operation failed.
    #[error("I/O error on {}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A file's bytes are damaged.
    #[error("corruption in {at}: {detail}")]
    Corruption {
        /// The file (`<memtable>` for an entry in memory) and, where known, the byte offset.
        at: Location,
        /// What is wrong.
        detail: String,
    },
    /// A write-ahead log or manifest is damaged at `offset`: a record (or the file header) that is neither
    /// whole nor a torn tail left by a crash, or a record that does not decode (`design/durability.md`).
    #[error("damaged log {at}: {detail}")]
    DamagedLog {
        /// The file, and where the damaged record (or file header) starts.
        at: Location,
        /// What is wrong.
        detail: String,
    },
    /// Point-in-time WAL recovery cannot reach a consistent point: an SST file already holds writes newer
    /// than the last write recovered before a damaged log record, so dropping the rest would not give the
    /// state of any moment.
    #[error("WAL recovery stopped at {at} (after seqno {recovered}), but SST {sst} holds seqno {sst_seqno}")]
    RecoveryPointBehindSst {
        /// The damaged WAL, and where recovery stopped in it.
        at: Location,
        /// The last seqno recovered.
        recovered: u64,
        /// The SST file number.
        sst: u64,
        /// The largest seqno in that SST.
        sst_seqno: u64,
    },
    /// An SST writer was used incorrectly (keys out of order, malformed internal key, ...).
    #[error("invalid SST input for {}: {detail}", file.display())]
    SstInput {
        /// The file being written.
        file: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// Merge operands were found but no merge operator is configured.
    #[error("merge operands for a key but no merge operator is configured")]
    NoMergeOperator,
    /// The merge operator failed for a key.
    #[error("merge operator {operator} failed for key {key:?}")]
    MergeFailed {
        /// The operator's name.
        operator: String,
        /// The key.
        key: Vec<u8>,
    },
    /// A background flush or compaction failed earlier; the database no longer accepts writes.
    #[error("background work failed: {0}")]
    Background(#[source] std::sync::Arc<LsmError>),
    /// The database is closed.
    #[error("database is closed")]
    Closed,
    /// The operation was cancelled by its caller.
    #[error("cancelled")]
    Cancelled,
    /// Another handle holds the database's `LOCK` file.
    #[error("database is locked by another handle: {0}")]
    Locked(String),
    /// An argument or option is invalid.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

impl LsmError {
    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            LsmError::Io { source, .. } => ErrorKind::of_io(source),
            LsmError::Corruption { .. }
            | LsmError::DamagedLog { .. }
            | LsmError::RecoveryPointBehindSst { .. } => ErrorKind::Corruption,
            LsmError::SstInput { .. }
            | LsmError::InvalidArgument(_)
            | LsmError::NoMergeOperator => ErrorKind::InvalidInput,
            LsmError::MergeFailed { .. } => ErrorKind::InvalidInput,
            LsmError::Background(e) => e.kind(),
            LsmError::Closed | LsmError::Cancelled => ErrorKind::Closed,
            LsmError::Locked(_) => ErrorKind::Busy,
        }
    }

    /// The file and offset of damaged bytes, for corruption errors.
    pub fn location(&self) -> Option<&Location> {
        match self {
            LsmError::Corruption { at, .. }
            | LsmError::DamagedLog { at, .. }
            | LsmError::RecoveryPointBehindSst { at, .. } => Some(at),
            LsmError::Background(e) => e.location(),
            _ => None,
        }
    }
}
