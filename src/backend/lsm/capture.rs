//! The synchronous part of an LSM backend's checkpoint: the engine files it captured.

use std::sync::Arc;

use crate::error::Result;

use crate::backend::lsm::engine::Shared;

/// The synchronous part of an LSM checkpoint: the engine's pending checkpoint and the engine it belongs to.
pub(super) struct LsmCapture {
    pub(super) pending: keyed_state_lsm::PendingCheckpoint,
    pub(super) shared: Arc<Shared>,
}

impl crate::backend::CheckpointCapture for LsmCapture {
    fn wait(
        self: Box<Self>,
        cancelled: &std::sync::atomic::AtomicBool,
    ) -> Result<crate::backend::CapturedFiles> {
        let LsmCapture { pending, shared } = *self;
        let captured = pending.wait(cancelled)?;
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
