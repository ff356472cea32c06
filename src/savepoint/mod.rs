//! The unified savepoint format v1: one encoder and one decoder for every backend.

/// Errors reading or writing a savepoint.
#[derive(Debug, thiserror::Error)]
pub enum SavepointError {
    /// An I/O operation failed.
    #[error("I/O error on {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}
