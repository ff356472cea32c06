//! The host's errors: one enum with kinds, wrapping keyed-state's.

use std::path::PathBuf;

pub use keyed_state::ErrorKind;

/// An error of the host.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// keyed-state failed (state access, backend, checkpoint, restore).
    #[error("{context}: {source}")]
    State {
        /// What the host was doing (operator, worker, checkpoint).
        context: String,
        /// keyed-state's error.
        #[source]
        source: keyed_state::Error,
    },
    /// A file operation failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// The operation.
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The job's flags or the directories it was given do not fit together.
    #[error("{0}")]
    Config(String),
    /// A job checkpoint's record in the root is damaged or from another job.
    #[error("checkpoint record {path}: {detail}")]
    Record {
        /// The record's path in the root.
        path: String,
        /// What is wrong.
        detail: String,
    },
    /// The cluster failed: a peer process died, the connections could not be made, a worker panicked.
    #[error("{0}")]
    Cluster(String),
}

impl Error {
    /// The kind of the error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::State { source, .. } => source.kind(),
            Error::Io { source, .. } => ErrorKind::of_io(source),
            Error::Config(_) => ErrorKind::InvalidInput,
            Error::Record { .. } => ErrorKind::Corruption,
            Error::Cluster(_) => ErrorKind::Closed,
        }
    }

    /// A keyed-state error with what the host was doing.
    pub fn state(context: impl Into<String>) -> impl FnOnce(keyed_state::Error) -> Error {
        let context = context.into();
        move |source| Error::State { context, source }
    }

    /// A file error naming the operation and the path.
    pub fn io(op: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.into();
        move |source| Error::Io { op, path, source }
    }
}

/// The host's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;
