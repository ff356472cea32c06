//! What every operator of one worker shares: the job, the worker's place, the checkpoint book-keeping
//! (parts finished per checkpoint, the sink's files awaiting commit) and the worker's figures.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Instant;

use keyed_state::checkpoint::Checkpointer;
use timely::scheduling::SyncActivator;

use crate::checkpoints::PartStats;
use crate::error::{Error, Result};
use crate::spec::JobSpec;

/// One finished part of a worker's checkpoint: a keyed operator's upload or the sink's flushed file.
#[derive(Debug)]
pub struct PartDone {
    /// The checkpoint's epoch.
    pub epoch: u64,
    /// The part's figures (`None` for the sink), or why it failed.
    pub result: Result<Option<PartStats>>,
}

/// A worker's figures, summed into the process's end-of-run line.
#[derive(Debug, Clone, Default)]
pub struct WorkerStats {
    /// Events this worker's source emitted.
    pub events: u64,
    /// Microseconds of each synchronous part (one per keyed operator instance and checkpoint).
    pub sync_micros: Vec<u64>,
    /// Microseconds of each asynchronous part.
    pub async_micros: Vec<u64>,
    /// Microseconds from each checkpoint's first synchronous part on this worker to its confirmation here.
    pub confirm_micros: Vec<u64>,
    /// Checkpoints confirmed on this worker.
    pub checkpoints: u64,
    /// Bytes of this worker's state in its last checkpoint (all its operators).
    pub state_bytes: u64,
    /// The largest `state_bytes` of any of this run's checkpoints.
    pub state_bytes_peak: u64,
    /// Bytes uploaded by this worker's checkpoints.
    pub bytes_uploaded: u64,
    /// Microseconds this worker's restore took (all its operators), if it restored.
    pub restore_micros: Option<u64>,
    /// Files (LSM) or tables (heap) restored.
    pub restored_files: usize,
    /// Bytes the restore fetched or linked (LSM: the adopted files; heap: the tables read).
    pub restored_bytes: u64,
    /// Output rows written.
    pub rows: u64,
    /// Microseconds from the start of the run to the first committed output of this worker.
    pub first_commit_micros: Option<u64>,
    /// State bytes of the parts seen so far, by checkpoint epoch (summed into `state_bytes`).
    pub state_by_epoch: std::collections::BTreeMap<u64, u64>,
}

/// What a failed operator does: by default print the error and end the process (the peers then see the
/// connection drop and stop too).
pub type FailureHandler = Arc<dyn Fn(&Error) + Send + Sync>;

/// The state one worker's operators share.
pub struct WorkerCtx {
    /// The job.
    pub spec: Arc<JobSpec>,
    /// This worker's index among all workers.
    pub worker: usize,
    /// All workers of the job.
    pub peers: usize,
    /// The first epoch this run processes (the restored checkpoint's epoch + 1, or 0).
    pub start_epoch: u64,
    /// Parts of each of this worker's checkpoints (keyed operators and the sink).
    pub parts_expected: RefCell<usize>,
    /// Where finished parts are announced (upload threads and the sink).
    pub parts_tx: mpsc::Sender<PartDone>,
    /// Wakes the acknowledging operator when a part finished.
    pub ack_activator: RefCell<Option<SyncActivator>>,
    /// Every keyed operator instance's checkpointer, with its operator's name.
    pub checkpointers: RefCell<Vec<(String, Checkpointer)>>,
    /// The sink's flushed in-progress file of each checkpoint epoch (absent when it wrote nothing).
    pub sink_pending: RefCell<BTreeMap<u64, (PathBuf, PathBuf)>>,
    /// When each checkpoint's first synchronous part ran on this worker.
    pub started: RefCell<BTreeMap<u64, Instant>>,
    /// When this run started.
    pub run_started: Instant,
    /// The worker's figures.
    pub stats: RefCell<WorkerStats>,
    on_failure: FailureHandler,
}

impl WorkerCtx {
    /// A worker's shared state; the receiver of its finished parts goes to the acknowledging operator.
    pub fn new(
        spec: Arc<JobSpec>,
        worker: usize,
        peers: usize,
        start_epoch: u64,
        on_failure: FailureHandler,
    ) -> (Self, mpsc::Receiver<PartDone>) {
        let (tx, rx) = mpsc::channel();
        (
            WorkerCtx {
                spec,
                worker,
                peers,
                start_epoch,
                parts_expected: RefCell::new(1),
                parts_tx: tx,
                ack_activator: RefCell::new(None),
                checkpointers: RefCell::new(Vec::new()),
                sink_pending: RefCell::new(BTreeMap::new()),
                started: RefCell::new(BTreeMap::new()),
                run_started: Instant::now(),
                stats: RefCell::new(WorkerStats::default()),
                on_failure,
            },
            rx,
        )
    }

    /// Reports a failure (by default the process ends).
    pub fn fail(&self, e: &Error) {
        (self.on_failure)(e);
    }

    /// Announces a finished part and wakes the acknowledging operator.
    pub fn part_done(&self, done: PartDone) {
        // The receiver lives as long as the dataflow; a send after it is gone has nobody to tell.
        let _ = self.parts_tx.send(done);
        if let Some(a) = self.ack_activator.borrow().as_ref() {
            let _ = a.activate();
        }
    }

    /// The worker's name in messages.
    pub fn name(&self) -> String {
        format!("worker {}", self.worker)
    }
}
