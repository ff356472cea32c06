//! The state one checkpointer shares with its asynchronous parts and the process's sweeper: the options,
//! the registry of checkpoints in flight and retained, and the sweep status. A module of its own so that
//! the checkpointer, the asynchronous part (`pending`) and the sweeper depend on it and not on each other.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use super::fence::newest_attempt_async;
use super::format::{CheckpointMetadata, FileRef, ObjectRef};
use super::storage::CheckpointStorage;
use crate::error::{CheckpointError, Error, Result};

/// How a checkpointer treats the checkpoint its backend was restored from (Flink's restore modes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RestoreMode {
    /// The restored checkpoint's metadata and objects are never deleted by this run; its first checkpoint
    /// uploads every file.
    #[default]
    NoClaim,
    /// This run owns the restored checkpoint: it is the incremental base, counts as retained and is deleted
    /// once subsumed, also after a rescale (each old part by the new instance holding its first key group).
    Claim,
}

/// Options of a [`Checkpointer`](super::Checkpointer).
#[derive(Debug, Clone)]
pub struct CheckpointOptions {
    /// Confirmed checkpoints kept (default 3, at least 1).
    pub retain: usize,
    /// The instance name; default [`instance_name`](super::instance_name) of the backend's key-group range.
    pub instance: Option<String>,
    /// Files smaller than this are packed together (default 1 MiB).
    pub pack_threshold: u64,
    /// Largest pack (default 8 MiB).
    pub pack_max: u64,
    /// This writer's attempt for its instance name (Flink's restart attempt, the same in every process
    /// of one attempt). Default: the next one after every attempt the root holds for the instance name.
    /// Opening an attempt the root already holds, or one older than its newest, is
    /// [`CheckpointError::Fenced`] (`design/checkpoint-fencing.md`).
    pub attempt: Option<u64>,
}

impl Default for CheckpointOptions {
    fn default() -> Self {
        CheckpointOptions {
            retain: 3,
            instance: None,
            pack_threshold: 1 << 20,
            pack_max: 8 << 20,
            attempt: None,
        }
    }
}

/// What one finished checkpoint wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointSummary {
    /// The checkpoint id.
    pub id: u64,
    /// Files uploaded by this checkpoint.
    pub files_new: usize,
    /// Files referenced from the incremental base.
    pub files_reused: usize,
    /// Objects written (data objects and the metadata).
    pub objects_written: usize,
    /// Bytes written to storage (data objects and the metadata).
    pub bytes_written: u64,
    /// Bytes of local files uploaded.
    pub bytes_new_files: u64,
    /// Bytes of every file of the checkpoint.
    pub state_size: u64,
    /// Whether the LSM engine's checkpoint view advanced to its whole version at this checkpoint (an
    /// in-band materialization, `design/checkpoint-view.md`); false without a view.
    pub view_materialized: bool,
    /// Of [`bytes_new_files`](Self::bytes_new_files), the bytes of the engine's files the materialization
    /// took beyond the view and its flushes: what this checkpoint uploaded beyond its changes (0 without a
    /// materialization). Without a view, every checkpoint uploads the compactions since the last one and
    /// this is 0.
    pub bytes_materialization: u64,
    /// Files referenced from the objects a background materialization uploaded (outside any checkpoint's
    /// path, `design/checkpoint-view.md`, "In the background"): counted in
    /// [`files_reused`](Self::files_reused), not uploaded by this checkpoint.
    pub files_from_materialization: usize,
    /// Bytes of those files.
    pub bytes_from_materialization: u64,
    /// Microseconds of the asynchronous part.
    pub async_micros: u64,
}

pub(super) struct InFlight {
    pub(super) cancel: Arc<AtomicBool>,
    /// Objects the checkpoint may reference or is uploading: live for the sweep until its metadata exists.
    pub(super) protect: BTreeSet<String>,
    /// The metadata once written (complete on storage, not yet confirmed by the host).
    pub(super) written: Option<CheckpointMetadata>,
    /// Its capture was an in-band materialization of the checkpoint view (set with `written`).
    pub(super) materialized: bool,
}

/// A confirmed checkpoint while retained.
pub(super) struct Retained {
    pub(super) id: u64,
    /// The metadata files this run deletes when it leaves retention: its own; after a claim, those of the
    /// restored parts this instance owns.
    pub(super) delete: Vec<String>,
    /// The old runs (`<instance>/<run>`, not this instance's) whose objects those files reference: swept
    /// right after the deletion.
    pub(super) runs: BTreeSet<String>,
}

pub(super) struct Registry {
    pub(super) base: Option<CheckpointMetadata>,
    /// Confirmed checkpoints, oldest first.
    pub(super) retained: VecDeque<Retained>,
    pub(super) in_flight: BTreeMap<u64, InFlight>,
    pub(super) last_confirmed: Option<u64>,
    /// After a no-claim restore nothing is reused until the first own confirmation.
    pub(super) reuse_restored: bool,
    /// The highest id of this instance name in the root at open: new ids must be above it (a rerun
    /// never writes below or over an earlier run's checkpoints).
    pub(super) floor: Option<u64>,
    /// Metadata files retired (subsumed, aborted or out of retention) that the next sweep deletes.
    pub(super) retire: Vec<String>,
    /// Old runs (`<instance>/<run>`) the retired metadata referenced: the next sweep looks at them.
    pub(super) sweep_runs: BTreeSet<String>,
    /// The background materialization in flight or uploaded, until a checkpoint that began after its
    /// uploads ended is confirmed (`design/checkpoint-view.md`, "In the background").
    pub(super) mat: Option<Materializing>,
    /// What the background materializations did.
    pub(super) mat_status: MaterializationStatus,
}

pub(super) struct Inner {
    pub(super) storage: Arc<CheckpointStorage>,
    pub(super) instance: String,
    /// This writer's attempt (its marker `attempts/<instance>/<attempt>` exists in the root).
    pub(super) attempt: u64,
    pub(super) run: u64,
    pub(super) opts: CheckpointOptions,
    pub(super) reg: Mutex<Registry>,
    pub(super) closed: AtomicBool,
    /// The number of the next object this run uploads (taken under `reg`'s lock).
    pub(super) next_object: AtomicU64,
    /// What the sweeps did.
    pub(super) sweep: Mutex<SweepState>,
    /// Held by a running sweep: one sweep of the instance at a time.
    pub(super) sweep_lock: Mutex<()>,
    /// Notified when a background materialization's uploads end.
    pub(super) mat_idle: parking_lot::Condvar,
}

impl Inner {
    /// [`CheckpointError::Fenced`] if a newer attempt of the instance name is in the root.
    pub(super) fn check_fenced(&self) -> Result<()> {
        self.storage.io().block_on(|| self.check_fenced_async())?
    }

    /// [`check_fenced`](Self::check_fenced), awaited.
    pub(super) async fn check_fenced_async(&self) -> Result<()> {
        let newest = newest_attempt_async(&self.storage, &self.instance).await?;
        if newest > self.attempt {
            return Err(CheckpointError::Fenced {
                instance: self.instance.clone(),
                attempt: self.attempt,
                newer: newest,
            }
            .into());
        }
        Ok(())
    }
}

/// The longest delay before a failed sweep is retried.
pub const SWEEP_RETRY_MAX: Duration = Duration::from_secs(30);
/// The delay before the first retry of a failed sweep (doubled at every further failure).
pub const SWEEP_RETRY_FIRST: Duration = Duration::from_millis(100);

/// What the sweeps of one [`Checkpointer`](super::Checkpointer) did: failures of the background sweep are
/// reported here (and logged through `tracing`), never in the confirmation's result.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SweepStatus {
    /// Sweeps queued (by confirmations and aborts) or run on request.
    pub requested: u64,
    /// Sweeps that finished without error.
    pub succeeded: u64,
    /// Sweeps that failed.
    pub failed: u64,
    /// Failures since the last sweep that finished without error.
    pub consecutive_failures: u64,
    /// The last failure, until a sweep finishes without error.
    pub last_error: Option<String>,
    /// Whether the last failure was [`CheckpointError::Fenced`] (then the sweep is not retried).
    pub fenced: bool,
    /// Whether a sweep is queued or running.
    pub pending: bool,
}

/// The sweep state of one checkpointer.
#[derive(Default)]
pub(super) struct SweepState {
    pub(super) status: SweepStatus,
    /// Queued in the process's sweeper.
    pub(super) queued: bool,
}

impl SweepState {
    pub(super) fn record(&mut self, r: &Result<()>) {
        match r {
            Ok(()) => {
                self.status.succeeded += 1;
                self.status.consecutive_failures = 0;
                self.status.last_error = None;
                self.status.fenced = false;
            }
            Err(e) => {
                self.status.failed += 1;
                self.status.consecutive_failures += 1;
                self.status.last_error = Some(e.to_string());
                self.status.fenced = is_fenced(e);
            }
        }
    }
}

pub(super) fn is_fenced(e: &Error) -> bool {
    matches!(e, Error::Checkpoint(CheckpointError::Fenced { .. }))
}

/// What the background materializations of one [`Checkpointer`](super::Checkpointer) did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MaterializationStatus {
    /// Materializations started.
    pub started: u64,
    /// Uploaded, and the engine's view advanced to them.
    pub advanced: u64,
    /// Uploaded, and the engine left its view as it was (replaced since; a spanning L0 file).
    pub refused: u64,
    /// Abandoned before their uploads ended (failure, close, made moot): their objects deleted.
    pub abandoned: u64,
    /// Objects uploaded by the materializations that ended their uploads.
    pub objects_written: u64,
    /// Bytes of those objects: written outside every checkpoint's path.
    pub bytes_written: u64,
    /// Whether one is uploading now.
    pub in_flight: bool,
}

impl MaterializationStatus {
    /// The figures as metrics (the `metrics` feature's `env::publish_metrics` publishes them):
    /// `keyed-state.checkpoint.materializations-{started,advanced,refused,abandoned}`,
    /// `keyed-state.checkpoint.materialization-objects` and `-bytes` (written outside every checkpoint's
    /// path), `keyed-state.checkpoint.materialization-in-flight` (0 or 1).
    pub fn metrics(&self) -> Vec<keyed_state_lsm::Metric> {
        let m = |name: &str, value: u64| keyed_state_lsm::Metric {
            name: format!("keyed-state.checkpoint.{name}"),
            value,
        };
        vec![
            m("materializations-started", self.started),
            m("materializations-advanced", self.advanced),
            m("materializations-refused", self.refused),
            m("materializations-abandoned", self.abandoned),
            m("materialization-objects", self.objects_written),
            m("materialization-bytes", self.bytes_written),
            m("materialization-in-flight", u64::from(self.in_flight)),
        ]
    }
}

/// The uploaded files of a materialization, as a checkpoint references them.
pub(super) struct Refs {
    pub(super) objects: Vec<ObjectRef>,
    pub(super) files: Vec<FileRef>,
}

/// A materialization in the registry (not a checkpoint: no id, no metadata).
pub(super) struct Materializing {
    pub(super) seq: u64,
    pub(super) cancel: Arc<AtomicBool>,
    /// Objects it uploads or uploaded: live for the sweep while it is in the registry.
    pub(super) protect: BTreeSet<String>,
    /// Set once the uploads ended (after the engine's answer to the advance).
    pub(super) refs: Option<Arc<Refs>>,
    /// The first checkpoint that began after `refs` was set: its confirmation ends the protection.
    pub(super) first_after: Option<u64>,
}
