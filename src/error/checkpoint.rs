//! [`CheckpointError`]: what is wrong with a checkpoint, its storage or the checkpoint protocol. A leaf, as
//! [`SavepointError`](super::SavepointError) is: the crate's `Error` wraps it
//! ([`Error::Checkpoint`](crate::Error::Checkpoint)), it wraps nothing. Failures of the backend, the engine,
//! local files and arguments that reach the checkpoint code stay what they are (`Error::Lsm`, `Error::Io`,
//! `Error::InvalidArgument`, ...).

use crate::keygroup::KeyGroupRange;
use keyed_state_lsm::{ErrorKind, Location};

/// Errors of checkpoints on object storage (`design/checkpoints.md`). Errors about damaged or missing bytes
/// carry the [`Location`]: the object or metadata file (relative to the storage root; `<memory>` for
/// metadata decoded from bytes) and, where known, the byte offset in it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckpointError {
    /// The object store failed an operation (unreachable, refused, timed out after the bounded retries).
    #[error("checkpoint storage {store}: {operation}{} failed: {detail}", object.as_deref().map(|o| format!(" {o}")).unwrap_or_default())]
    Store {
        /// The store's root as given (`s3://bucket/prefix`, a directory, ...).
        store: String,
        /// The operation (`put`, `get`, `list`, `delete`, `multipart put`, `configure`, ...).
        operation: &'static str,
        /// The object (or prefix) it was on, relative to the root.
        object: Option<String>,
        /// The store's error and its causes.
        detail: String,
    },
    /// An object that a checkpoint references, or that a read names, does not exist.
    #[error("checkpoint object {at} is missing")]
    MissingObject {
        /// The object, relative to the storage root.
        at: Location,
    },
    /// A metadata file is damaged or does not follow the format.
    #[error("checkpoint metadata {at}: {detail}")]
    Metadata {
        /// The metadata file and the offset of the offending field.
        at: Location,
        /// What is wrong.
        detail: String,
    },
    /// A metadata file of a format version this build does not read.
    #[error("checkpoint metadata {at}: unsupported format version {version} (this build reads {oldest} to {newest})")]
    UnsupportedVersion {
        /// The metadata file and the offset of the version field.
        at: Location,
        /// The version in the file.
        version: u16,
        /// The oldest version this build reads.
        oldest: u16,
        /// The newest version this build reads.
        newest: u16,
    },
    /// A file's bytes in an object do not match the checksum or size its metadata records.
    #[error("damaged checkpoint object {at}: {detail}")]
    Damaged {
        /// The object and the offset of the file in it.
        at: Location,
        /// Which file, and what does not match.
        detail: String,
    },
    /// Two instances' parts of one checkpoint hold the same key groups: they come from different runs that
    /// wrote the same checkpoint id, and either could hold a key group's state.
    #[error("checkpoint {id}: instances {first} (key groups {first_key_groups}) and {second} (key groups {second_key_groups}) both hold key groups {}; they come from different runs that wrote the same checkpoint id", first_key_groups.intersect(second_key_groups))]
    OverlappingParts {
        /// The checkpoint id.
        id: u64,
        /// One instance.
        first: String,
        /// Its key groups.
        first_key_groups: KeyGroupRange,
        /// The other instance.
        second: String,
        /// Its key groups.
        second_key_groups: KeyGroupRange,
    },
    /// The checkpoint was cancelled (aborted by the host, subsumed, or the checkpointer closed).
    #[error("checkpoint {id} was cancelled")]
    Cancelled {
        /// The checkpoint id.
        id: u64,
    },
    /// No completed checkpoint with this id covers what was asked.
    #[error("no completed checkpoint {id}: {detail}")]
    NotFound {
        /// The checkpoint id.
        id: u64,
        /// What is missing.
        detail: String,
    },
    /// A restore of one backend was given a checkpoint another backend took.
    #[error("checkpoint {id} of instance {instance} was taken by the {written_by} backend; a {restore} restore reads only its own backend's checkpoints (`to_savepoint` turns any checkpoint into a savepoint for every backend)")]
    WrongBackend {
        /// The checkpoint id.
        id: u64,
        /// The instance whose part it is.
        instance: String,
        /// The backend that took it.
        written_by: &'static str,
        /// The backend of the restore.
        restore: &'static str,
    },
    /// A newer writer of the same instance name opened in the root (its attempt marker exists): this one
    /// commits and deletes nothing more (`design/checkpoint-fencing.md`).
    #[error("checkpoint writer of instance {instance} (attempt {attempt}) is fenced: attempt {newer} of the same instance name opened in the root; this writer commits and deletes nothing more")]
    Fenced {
        /// The instance name.
        instance: String,
        /// This writer's attempt.
        attempt: u64,
        /// The newest attempt in the root.
        newer: u64,
    },
    /// The metadata of this checkpoint id and instance already exists in the root: another run wrote it
    /// (a rerun into a used root, or two jobs under one instance name). Nothing was overwritten.
    #[error("checkpoint {id} of instance {instance} already exists in the root ({path}, written by another run); nothing was overwritten: restore from the root's checkpoints and number new ones past them, or write into another root")]
    AlreadyExists {
        /// The checkpoint id.
        id: u64,
        /// The instance name.
        instance: String,
        /// The metadata object, relative to the root.
        path: String,
    },
    /// The root holds several jobs and the command needs one of them (which checkpoint is "the newest",
    /// which to collect): none is taken from another job (`design/checkpoint-fencing.md`, "Jobs").
    #[error("checkpoint root {root} holds several jobs ({}); name one (`--job NAME`)", jobs.join(", "))]
    AmbiguousJob {
        /// The root.
        root: String,
        /// The jobs it holds.
        jobs: Vec<String>,
    },
    /// The job named is not in the root (or has no checkpoint there).
    #[error("checkpoint root {root} holds no job {job} (it holds: {})", if jobs.is_empty() { "none".to_string() } else { jobs.join(", ") })]
    NoSuchJob {
        /// The root.
        root: String,
        /// The job asked for.
        job: String,
        /// The jobs it holds.
        jobs: Vec<String>,
    },
    /// A call that breaks the checkpoint protocol (an id twice, completing a checkpoint still running,
    /// claiming parts of different checkpoints, ...).
    #[error("checkpoint protocol: {0}")]
    Invalid(String),
}

impl CheckpointError {
    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            CheckpointError::Store { .. } => ErrorKind::Io,
            CheckpointError::MissingObject { .. }
            | CheckpointError::Metadata { .. }
            | CheckpointError::Damaged { .. }
            | CheckpointError::OverlappingParts { .. } => ErrorKind::Corruption,
            CheckpointError::UnsupportedVersion { .. } => ErrorKind::Unsupported,
            CheckpointError::Cancelled { .. } => ErrorKind::Closed,
            CheckpointError::NotFound { .. } | CheckpointError::NoSuchJob { .. } => {
                ErrorKind::NotFound
            }
            CheckpointError::Fenced { .. } | CheckpointError::AlreadyExists { .. } => {
                ErrorKind::Busy
            }
            CheckpointError::WrongBackend { .. }
            | CheckpointError::AmbiguousJob { .. }
            | CheckpointError::Invalid(_) => ErrorKind::InvalidInput,
        }
    }

    /// The object or metadata file (and offset) of a missing or damaged object or metadata file.
    pub fn location(&self) -> Option<&Location> {
        match self {
            CheckpointError::MissingObject { at }
            | CheckpointError::Metadata { at, .. }
            | CheckpointError::UnsupportedVersion { at, .. }
            | CheckpointError::Damaged { at, .. } => Some(at),
            _ => None,
        }
    }
}
