//! The native LSM engine: a sorted key-value store with merge operands, compaction filters, snapshots and
//! checkpoints. It knows nothing of state kinds or serializers; key groups reach it only as key prefixes.

pub mod cache;
pub mod ikey;
pub mod io;
pub mod slice;
pub mod sst;

/// Errors of the LSM engine.
#[derive(Debug, thiserror::Error)]
pub enum LsmError {
    /// An I/O operation failed.
    #[error("I/O error on {path}: {source}")]
    Io {
        /// The file or directory.
        path: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A file's bytes are damaged.
    #[error("corruption in {file}: {detail}")]
    Corruption {
        /// The file.
        file: String,
        /// What is wrong.
        detail: String,
    },
    /// An SST writer was used incorrectly (keys out of order, malformed internal key, ...).
    #[error("invalid SST input for {file}: {detail}")]
    SstInput {
        /// The file being written.
        file: String,
        /// What is wrong.
        detail: String,
    },
}
