//! An LSM backend's checkpoint capture: the engine files of its synchronous part, and the read-modify-write
//! cache's dirty layers handed over with them, written into files by its asynchronous part, which the
//! engine then adopts as its own L0 files unless the backend wrote one of those layers into the engine
//! first (`design/rmw-cache.md`, "Adoption of a capture's files").

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use crate::backend::lsm_cache::{Layer, LayerLedger, Overlay};
use crate::error::Result;

use crate::backend::lsm::engine::Shared;

/// The synchronous part of an LSM checkpoint: the engine's pending checkpoint, the engine it belongs to,
/// and the read-modify-write cache's dirty layers of the moment (not in the engine at the pending
/// checkpoint's seqno; oldest first), with the ledger they are claimed through.
pub(super) struct LsmCapture {
    pub(super) pending: keyed_state_lsm::PendingCheckpoint,
    pub(super) shared: Arc<Shared>,
    pub(super) layers: Vec<Arc<Layer>>,
    /// The cache's ledger (`None`: no cache).
    pub(super) ledger: Option<Arc<LayerLedger>>,
}

impl crate::backend::CheckpointCapture for LsmCapture {
    fn wait(
        self: Box<Self>,
        cancelled: &std::sync::atomic::AtomicBool,
    ) -> Result<crate::backend::CapturedFiles> {
        let LsmCapture {
            pending,
            shared,
            layers,
            ledger,
        } = *self;
        // The dirty layers, merged and sorted here (the asynchronous part), are written into SST files above
        // the engine's files.
        let overlay = Overlay::build(&layers);
        let mut captured = pending.wait_with_overlay(cancelled, overlay.range(&[], None))?;
        drop(overlay);
        if let (Some(ledger), Some(first), Some(last)) = (&ledger, layers.first(), layers.last()) {
            if !cancelled.load(Ordering::Acquire) {
                adopt(&mut captured, ledger, first.epoch(), last.epoch());
            }
        }
        let files = captured.files.iter().map(captured_file).collect();
        Ok(crate::backend::CapturedFiles {
            backend: crate::backend::BackendKind::Lsm,
            files,
            storage: shared.db.storage().clone(),
            seqno: captured.seqno,
            view: captured.view,
            tables: None,
            keep_alive: Box::new((captured, shared)),
        })
    }
}

/// Makes the capture's files of the layers of epochs `first..=last` the engine's own L0 files, if the
/// backend wrote none of those layers into the engine since the synchronous part (the ledger's claim); the
/// layers then count as written back. Otherwise, or when the engine declines or fails, the files stay the
/// capture's and the layers are written back as before.
fn adopt(
    captured: &mut keyed_state_lsm::CapturedCheckpoint,
    ledger: &LayerLedger,
    first: u64,
    last: u64,
) {
    match captured.adopt_overlay(|| ledger.claim(first)) {
        Ok(Some(claim)) => ledger.adopted(claim, last + 1),
        Ok(None) => {}
        // The checkpoint's files are whole either way; the engine reports its failure to the next write.
        Err(e) => tracing::warn!(error = %e, "checkpoint files not adopted by the engine"),
    }
}

fn captured_file(f: &keyed_state_lsm::CapturedFile) -> crate::backend::CapturedFile {
    crate::backend::CapturedFile {
        number: f.number,
        level: f.level,
        size: f.size,
        source: match &f.bounds {
            None => crate::backend::FileSource::Sst(f.path.clone()),
            Some(b) => crate::backend::FileSource::BoundedSst {
                path: f.path.clone(),
                bounds: b.clone(),
            },
        },
    }
}

/// A background materialization of the engine's checkpoint view: its version's files, pinned. It does not
/// keep the backend open: a backend dropped meanwhile closes its engine (releasing its directory) on its own
/// thread, and the advance is refused.
struct LsmMaterialization {
    /// Holds what its advance replaced until this is dropped (outside the registry's lock).
    m: keyed_state_lsm::ViewMaterialization,
    files: Vec<crate::backend::CapturedFile>,
    storage: keyed_state_lsm::storage::StorageHandle,
    shared: Weak<Shared>,
}

/// The engine's version for a background materialization, when its checkpoint view is past a background
/// trigger (`design/checkpoint-view.md`, "In the background").
pub(super) fn view_materialization(
    shared: &Arc<Shared>,
) -> Option<Box<dyn crate::backend::MaterializationCapture>> {
    if !shared.db.checkpoint_view_due() {
        return None;
    }
    let m = shared.db.begin_view_materialization()?;
    let files = m.files.iter().map(captured_file).collect();
    Some(Box::new(LsmMaterialization {
        m,
        files,
        storage: shared.db.storage().clone(),
        shared: Arc::downgrade(shared),
    }))
}

impl crate::backend::MaterializationCapture for LsmMaterialization {
    fn files(&self) -> &[crate::backend::CapturedFile] {
        &self.files
    }

    fn storage(&self) -> keyed_state_lsm::storage::StorageHandle {
        self.storage.clone()
    }

    fn advance(&mut self) -> std::result::Result<(), keyed_state_lsm::AdvanceRefused> {
        // Not upgraded: the last reference to the backend is never dropped here.
        if self.shared.strong_count() == 0 {
            return Err(keyed_state_lsm::AdvanceRefused::Closed);
        }
        self.m.advance()
    }

    fn is_current(&self) -> bool {
        self.shared.strong_count() > 0 && self.m.is_current()
    }
}
