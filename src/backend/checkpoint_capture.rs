//! What a backend hands to checkpoints: the synchronous part's capture and, once its asynchronous part
//! waited, the local files holding the state at the checkpoint (`design/checkpoints.md`).

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;

use crate::error::Result;

/// One immutable local file of a capture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapturedFile {
    /// The backend's file number (never reused: equal numbers mean identical files).
    pub number: u64,
    /// Its LSM level.
    pub level: usize,
    /// Size in bytes.
    pub size: u64,
    /// Where it is.
    pub path: PathBuf,
}

/// The files of the state at a checkpoint, kept on disk while this lives.
pub struct CapturedFiles {
    /// The files.
    pub files: Vec<CapturedFile>,
    /// The engine sequence number of the checkpoint.
    pub seqno: u64,
    /// Whatever keeps the files alive (a pinned version, the engine's directory).
    pub keep_alive: Box<dyn std::any::Any + Send>,
}

/// The synchronous part of a backend checkpoint ([`StateBackend::checkpoint_capture`](super::StateBackend::checkpoint_capture)).
pub trait CheckpointCapture: Send {
    /// The asynchronous part: waits (on any thread) until the files are there. Fails once `cancelled` is set.
    fn wait(self: Box<Self>, cancelled: &AtomicBool) -> Result<CapturedFiles>;
}
