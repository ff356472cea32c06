//! What a backend hands to checkpoints: the synchronous part's capture and, once its asynchronous part
//! waited, the files holding the state at the checkpoint (`design/checkpoints.md`).

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;

use crate::error::Result;
use crate::keygroup::KeyGroup;

/// The backend that wrote a checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BackendKind {
    /// The LSM backend: every file is an engine SST.
    Lsm,
    /// The heap backend: every file is one serialized (state, key group) table.
    Heap,
    /// The RocksDB variant: RocksDB's SST files and its named files (MANIFEST, OPTIONS, CURRENT).
    RocksDb,
}

impl BackendKind {
    /// The backend's name, as `StateBackend::backend_name` says it.
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Lsm => "lsm",
            BackendKind::Heap => "heap",
            BackendKind::RocksDb => "rocksdb",
        }
    }
}

/// Where the bytes of a captured file are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileSource {
    /// An immutable local SST file (`NNNNNN.sst` on restore).
    Sst(PathBuf),
    /// An immutable local SST file that the engine reads only inside `bounds` (LSM).
    BoundedSst {
        /// Where it is.
        path: PathBuf,
        /// The user keys read of it.
        bounds: keyed_state_lsm::KeyBounds,
    },
    /// The table of one (state, key group), serialized on demand by [`CapturedFiles::tables`].
    Table {
        /// The state id.
        state: u32,
        /// The key group.
        key_group: KeyGroup,
    },
    /// A local file restored under its own name, uploaded by every checkpoint (RocksDB's MANIFEST,
    /// OPTIONS and CURRENT).
    Named {
        /// The name in the backend's directory.
        name: String,
        /// Where it is.
        path: PathBuf,
    },
}

/// One immutable file of a capture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapturedFile {
    /// The backend's file number (never reused within a backend's lineage: equal numbers of SSTs or tables
    /// mean identical bytes).
    pub number: u64,
    /// Its LSM level (0 for tables and named files).
    pub level: usize,
    /// Size in bytes (0 for tables: known once serialized).
    pub size: u64,
    /// Where its bytes are.
    pub source: FileSource,
}

/// Serializes the captured (state, key group) tables of a backend without files (the heap backend).
pub trait TableSource: Send {
    /// Appends the serialized table of (`state`, `key_group`) (`checkpoint::heap_table`) to `out`.
    fn render(&self, state: u32, key_group: KeyGroup, out: &mut Vec<u8>) -> Result<()>;
}

/// The files of the state at a checkpoint, kept available while this lives.
pub struct CapturedFiles {
    /// The backend that captured them.
    pub backend: BackendKind,
    /// The files.
    pub files: Vec<CapturedFile>,
    /// The storage the files' paths are on (the engine's, for the LSM backend).
    pub storage: keyed_state_lsm::storage::StorageHandle,
    /// The engine sequence number of the checkpoint (0 where the backend has none).
    pub seqno: u64,
    /// Whether the LSM engine's files are its whole version or its checkpoint view
    /// (`design/checkpoint-view.md`; [`CaptureView::Off`](keyed_state_lsm::CaptureView::Off) for the other
    /// backends).
    pub view: keyed_state_lsm::CaptureView,
    /// The tables of [`FileSource::Table`] files.
    pub tables: Option<Box<dyn TableSource>>,
    /// Whatever keeps the files alive (a pinned version, the engine's directory).
    pub keep_alive: Box<dyn std::any::Any + Send>,
}

/// The synchronous part of a backend checkpoint ([`StateBackend::checkpoint_capture`](super::StateBackend::checkpoint_capture)).
pub trait CheckpointCapture: Send {
    /// The asynchronous part: waits (on any thread) until the files are there. Fails once `cancelled` is set.
    fn wait(self: Box<Self>, cancelled: &AtomicBool) -> Result<CapturedFiles>;
}

/// A background materialization of the LSM engine's checkpoint view (`design/checkpoint-view.md`, "In the
/// background"): the engine's files of one moment, kept on disk while this lives, which the checkpointer
/// uploads outside any checkpoint's path before [`advance`](Self::advance) makes the view take them.
pub trait MaterializationCapture: Send + Sync {
    /// The files (SSTs, as a capture lists them).
    fn files(&self) -> &[CapturedFile];
    /// The storage the files' paths are on.
    fn storage(&self) -> keyed_state_lsm::storage::StorageHandle;
    /// Advances the engine's view to the files (call once every file is uploaded; once): an error says why
    /// the view stayed as it was. Takes only the engine's state lock, briefly; the files are released when
    /// this is dropped.
    fn advance(&mut self) -> std::result::Result<(), keyed_state_lsm::AdvanceRefused>;
    /// Whether the advance can still be made (the engine's view was not replaced since): polled between
    /// upload batches, to stop early.
    fn is_current(&self) -> bool;
}
