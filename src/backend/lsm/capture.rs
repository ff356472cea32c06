//! An LSM backend's checkpoint capture: the engine files of its synchronous part, and the read-modify-write
//! cache's dirty layers handed over with them, written into files of the capture's own by its asynchronous
//! part.

use std::sync::Arc;

use crate::backend::lsm_cache::{Layer, Overlay};
use crate::error::Result;

use crate::backend::lsm::engine::Shared;

/// The synchronous part of an LSM checkpoint: the engine's pending checkpoint, the engine it belongs to,
/// and the read-modify-write cache's dirty layers of the moment (not in the engine at the pending
/// checkpoint's seqno; oldest first).
pub(super) struct LsmCapture {
    pub(super) pending: keyed_state_lsm::PendingCheckpoint,
    pub(super) shared: Arc<Shared>,
    pub(super) layers: Vec<Arc<Layer>>,
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
        } = *self;
        // The dirty layers, merged and sorted here (the asynchronous part), are written into SST files of
        // the capture's own, above the engine's files.
        let overlay = Overlay::build(&layers);
        let captured = pending.wait_with_overlay(cancelled, overlay.range(&[], None))?;
        drop(overlay);
        let files = captured
            .files
            .iter()
            .map(|f| crate::backend::CapturedFile {
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
            })
            .collect();
        Ok(crate::backend::CapturedFiles {
            backend: crate::backend::BackendKind::Lsm,
            files,
            storage: shared.db.storage().clone(),
            seqno: captured.seqno,
            tables: None,
            keep_alive: Box::new((captured, shared)),
        })
    }
}
