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

/// Errors of the LSM engine. [`kind`](LsmError::kind) says what kind of failure each is; the corruption
/// variants carry the [`Location`] of the damaged bytes.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LsmError {
    /// A file-system operation failed: opening, reading, writing, syncing, renaming, listing or removing
    /// `path`. Opening a database whose directory does not exist, or holds no `CURRENT` and no engine file,
    /// with `create_if_missing` off, is this error with [`std::io::ErrorKind::NotFound`] (kind
    /// [`NotFound`](ErrorKind::NotFound)).
    #[error("I/O error on {}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// Stored bytes do not decode: an SST file (a block, its index, filter, properties or footer, a checksum
    /// mismatch), `CURRENT`, a manifest's content, or an internal key met while reading (`<iterator>`,
    /// `<memtable>`). Found when a file is opened or read.
    #[error("corruption in {at}: {detail}")]
    Corruption {
        /// The file (`<memtable>` or `<iterator>` for an entry in memory) and, where known, the byte offset.
        at: Location,
        /// What is wrong.
        detail: String,
    },
    /// A database directory without `CURRENT` holds engine files (SSTs, manifests or logs) that are not
    /// the leftovers of an interrupted creation: the database's root pointer is gone, so what the files
    /// hold is unknown. The open fails and deletes nothing, with or without
    /// [`create_if_missing`](crate::Options::create_if_missing). `at` names the directory.
    #[error("database directory {at} has no CURRENT but holds {} engine file(s) ({}): it is not a new database; nothing was deleted (restore CURRENT from a backup, or move the files away)", found.len(), list_names(found))]
    MissingCurrent {
        /// The directory.
        at: Location,
        /// The engine files found in it, sorted.
        found: Vec<String>,
    },
    /// A write-ahead log or manifest is damaged at an offset, found when the database is opened: a record
    /// (or the file header) that is neither whole nor a torn tail left by a crash, or a record that does not
    /// decode (`design/durability.md`). With [`WalRecovery::PointInTime`](crate::WalRecovery) a damaged WAL
    /// record ends recovery instead.
    #[error("damaged log {at}: {detail}")]
    DamagedLog {
        /// The file, and where the damaged record (or file header) starts.
        at: Location,
        /// What is wrong.
        detail: String,
    },
    /// Opening with [`WalRecovery::PointInTime`](crate::WalRecovery) cannot reach a consistent point: an SST
    /// file already holds writes newer than the last write recovered before a damaged log record, so
    /// dropping the rest would not give the state of any moment.
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
    /// An SST writer was given input it cannot write: keys out of order, a malformed internal key, an entry
    /// over the size limit.
    #[error("invalid SST input for {}: {detail}", file.display())]
    SstInput {
        /// The file being written.
        file: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// A merge operand for `key` and no merge operator in [`Options`](crate::Options): refused when written
    /// ([`Db::merge`](crate::Db::merge), or [`Db::write`](crate::Db::write) of a batch holding one, of which
    /// nothing is then applied); or, in a database that an earlier open wrote operands into with an operator,
    /// met by a read, an iterator or a compaction's merge.
    #[error("merge operand for key {key:?}, but no merge operator is configured")]
    NoMergeOperator {
        /// The key of the (first) operand.
        key: Vec<u8>,
    },
    /// The merge operator returned no value for `key` (it could not merge the operands it was given), in a
    /// read, an iterator or a compaction.
    #[error("merge operator {operator} failed for key {key:?}")]
    MergeFailed {
        /// The operator's name.
        operator: String,
        /// The key.
        key: Vec<u8>,
    },
    /// A background flush or compaction (or a write to the WAL or manifest) failed earlier: the database
    /// accepts no more writes until [`Db::resume`](crate::Db::resume) succeeds or it is opened again. The
    /// first failure is the source.
    #[error("background work failed: {0}")]
    Background(#[source] std::sync::Arc<LsmError>),
    /// The database is shutting down or closed (a write, a flush, a checkpoint waiting for its flush).
    #[error("database is closed")]
    Closed,
    /// The operation was cancelled by its caller (a [`PendingCheckpoint::wait`](crate::PendingCheckpoint::wait)
    /// whose flag was set).
    #[error("cancelled")]
    Cancelled,
    /// Another handle (in this process or another) holds the lock of the database directory `dir`, when
    /// opening it.
    #[error("database {} is locked by another handle", dir.display())]
    Locked {
        /// The database directory.
        dir: PathBuf,
    },
    /// A directory that must be empty or absent is not: a [`Db::checkpoint`](crate::Db::checkpoint) target.
    #[error("directory {} is not empty", dir.display())]
    DirectoryNotEmpty {
        /// The directory.
        dir: PathBuf,
    },
    /// Entries given to [`Db::ingest_sorted`](crate::Db::ingest_sorted) (or runs given to
    /// [`Db::ingest_sorted_runs`](crate::Db::ingest_sorted_runs)) are not strictly ascending: `key` is not
    /// after the key before it (the last key of the run before). Nothing is ingested.
    #[error("ingested keys must be strictly ascending: {key:?} is not after the key before it")]
    NotAscending {
        /// The first key out of order.
        key: Vec<u8>,
    },
    /// Two SST files given to [`adopt_sst_files`](crate::adopt_sst_files) for the same level 1 or deeper
    /// overlap in their key ranges.
    #[error("files {first} and {second} overlap at level {level}")]
    FilesOverlap {
        /// The level.
        level: usize,
        /// The file number of one of them.
        first: u64,
        /// The file number of the other.
        second: u64,
    },
    /// An argument or option is invalid: an option out of range (`num_levels` under 2), a file placed at a
    /// level the database does not have, empty key bounds, a thread of `ingest_sorted_runs` that panicked
    /// (reading its input).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The operating system refused to start a thread: the background threads of a
    /// [`SharedEnv`](crate::SharedEnv).
    #[error("starting thread {thread}: {source}")]
    Spawn {
        /// The thread's name.
        thread: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

/// Up to eight names, then how many more.
fn list_names(names: &[String]) -> String {
    let mut s = names
        .iter()
        .take(8)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > 8 {
        s.push_str(&format!(", and {} more", names.len() - 8));
    }
    s
}

impl LsmError {
    /// What kind of failure this is:
    ///
    /// * [`Io`](ErrorKind::Io) for [`LsmError::Io`] ([`NotFound`](ErrorKind::NotFound) when the OS error is
    ///   a missing file or directory) and [`Spawn`](LsmError::Spawn);
    /// * [`Corruption`](ErrorKind::Corruption) for [`Corruption`](LsmError::Corruption),
    ///   [`MissingCurrent`](LsmError::MissingCurrent), [`DamagedLog`](LsmError::DamagedLog) and
    ///   [`RecoveryPointBehindSst`](LsmError::RecoveryPointBehindSst);
    /// * [`InvalidInput`](ErrorKind::InvalidInput) for [`SstInput`](LsmError::SstInput),
    ///   [`NoMergeOperator`](LsmError::NoMergeOperator), [`MergeFailed`](LsmError::MergeFailed),
    ///   [`DirectoryNotEmpty`](LsmError::DirectoryNotEmpty), [`NotAscending`](LsmError::NotAscending),
    ///   [`FilesOverlap`](LsmError::FilesOverlap) and [`InvalidArgument`](LsmError::InvalidArgument);
    /// * [`Closed`](ErrorKind::Closed) for [`Closed`](LsmError::Closed), [`Cancelled`](LsmError::Cancelled)
    ///   and [`Background`](LsmError::Background) (the database stopped after an earlier failure; its
    ///   source says which);
    /// * [`Busy`](ErrorKind::Busy) for [`Locked`](LsmError::Locked).
    pub fn kind(&self) -> ErrorKind {
        match self {
            LsmError::Io { source, .. } => ErrorKind::of_io(source),
            LsmError::Spawn { .. } => ErrorKind::Io,
            LsmError::Corruption { .. }
            | LsmError::MissingCurrent { .. }
            | LsmError::DamagedLog { .. }
            | LsmError::RecoveryPointBehindSst { .. } => ErrorKind::Corruption,
            LsmError::SstInput { .. }
            | LsmError::NoMergeOperator { .. }
            | LsmError::MergeFailed { .. }
            | LsmError::DirectoryNotEmpty { .. }
            | LsmError::NotAscending { .. }
            | LsmError::FilesOverlap { .. }
            | LsmError::InvalidArgument(_) => ErrorKind::InvalidInput,
            LsmError::Background(_) | LsmError::Closed | LsmError::Cancelled => ErrorKind::Closed,
            LsmError::Locked { .. } => ErrorKind::Busy,
        }
    }

    /// The file and offset of damaged bytes, for corruption errors (also behind
    /// [`Background`](LsmError::Background)).
    pub fn location(&self) -> Option<&Location> {
        match self {
            LsmError::Corruption { at, .. }
            | LsmError::MissingCurrent { at, .. }
            | LsmError::DamagedLog { at, .. }
            | LsmError::RecoveryPointBehindSst { at, .. } => Some(at),
            LsmError::Background(e) => e.location(),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One error of every variant, with the kind its documentation promises.
    fn every_variant() -> Vec<(LsmError, ErrorKind)> {
        let io = |k| std::io::Error::from(k);
        vec![
            (
                LsmError::Io {
                    path: "f".into(),
                    source: io(std::io::ErrorKind::PermissionDenied),
                },
                ErrorKind::Io,
            ),
            (
                LsmError::Io {
                    path: "f".into(),
                    source: io(std::io::ErrorKind::NotFound),
                },
                ErrorKind::NotFound,
            ),
            (
                LsmError::Corruption {
                    at: Location::at("f", 3),
                    detail: "x".into(),
                },
                ErrorKind::Corruption,
            ),
            (
                LsmError::MissingCurrent {
                    at: Location::at("f", 3),
                    found: vec!["000001.sst".into()],
                },
                ErrorKind::Corruption,
            ),
            (
                LsmError::DamagedLog {
                    at: Location::at("f", 3),
                    detail: "x".into(),
                },
                ErrorKind::Corruption,
            ),
            (
                LsmError::RecoveryPointBehindSst {
                    at: Location::at("f", 3),
                    recovered: 1,
                    sst: 2,
                    sst_seqno: 3,
                },
                ErrorKind::Corruption,
            ),
            (
                LsmError::SstInput {
                    file: "f".into(),
                    detail: "x".into(),
                },
                ErrorKind::InvalidInput,
            ),
            (
                LsmError::NoMergeOperator { key: b"k".to_vec() },
                ErrorKind::InvalidInput,
            ),
            (
                LsmError::MergeFailed {
                    operator: "op".into(),
                    key: b"k".to_vec(),
                },
                ErrorKind::InvalidInput,
            ),
            (
                LsmError::Background(std::sync::Arc::new(LsmError::Io {
                    path: "f".into(),
                    source: io(std::io::ErrorKind::Other),
                })),
                ErrorKind::Closed,
            ),
            (LsmError::Closed, ErrorKind::Closed),
            (LsmError::Cancelled, ErrorKind::Closed),
            (LsmError::Locked { dir: "d".into() }, ErrorKind::Busy),
            (
                LsmError::DirectoryNotEmpty { dir: "d".into() },
                ErrorKind::InvalidInput,
            ),
            (
                LsmError::NotAscending { key: b"k".to_vec() },
                ErrorKind::InvalidInput,
            ),
            (
                LsmError::FilesOverlap {
                    level: 1,
                    first: 2,
                    second: 3,
                },
                ErrorKind::InvalidInput,
            ),
            (
                LsmError::InvalidArgument("x".into()),
                ErrorKind::InvalidInput,
            ),
        ]
    }

    #[test]
    fn every_variant_has_the_kind_its_documentation_names() {
        for (e, kind) in every_variant() {
            assert_eq!(e.kind(), kind, "{e:?}");
            assert!(!e.to_string().is_empty());
        }
    }

    #[test]
    fn corruption_errors_carry_their_location_also_behind_a_background_error() {
        for (e, _) in every_variant() {
            let expect = matches!(
                e,
                LsmError::Corruption { .. }
                    | LsmError::MissingCurrent { .. }
                    | LsmError::DamagedLog { .. }
                    | LsmError::RecoveryPointBehindSst { .. }
            );
            assert_eq!(e.location().is_some(), expect, "{e:?}");
            if expect {
                let wrapped = LsmError::Background(std::sync::Arc::new(e));
                assert_eq!(wrapped.location(), Some(&Location::at("f", 3)));
            }
        }
    }
}
