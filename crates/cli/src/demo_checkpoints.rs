//! The demo as a checkpointing host (`demo --checkpoint-dir DIR_OR_URL --checkpoint-every EVENTS --retain N`):
//! every EVENTS events it takes the synchronous part of a checkpoint, runs the asynchronous part on its own
//! thread while the events keep flowing, and confirms each checkpoint once it completes (oldest first, as a
//! stream processor's coordinator does), printing one line per checkpoint.

use std::collections::VecDeque;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use keyed_state::checkpoint::{
    CheckpointOptions, CheckpointStorage, CheckpointSummary, Checkpointer, PendingCheckpoint,
};
use keyed_state::serializer::LongSerializer;
use keyed_state::state::KeyedStateStore;
use keyed_state::{Error, Result};

/// What the checkpointing flags asked for.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The checkpoint root (a directory or a URL such as `s3://bucket/prefix`).
    pub root: String,
    /// Events between two checkpoints.
    pub every: u64,
    /// Confirmed checkpoints retained.
    pub retain: usize,
    /// The job in the root (`None`: the default job, the root's top level).
    pub job: Option<String>,
}

struct Running {
    id: u64,
    sync_micros: u64,
    handle: JoinHandle<Result<CheckpointSummary>>,
}

/// The host: takes, runs and confirms checkpoints.
pub struct Host {
    ck: Checkpointer,
    every: u64,
    next_id: u64,
    running: VecDeque<Running>,
    completed: u64,
    bytes: u64,
}

impl Host {
    /// Opens the root and checks that the store's backend takes checkpoints (a backend that does not
    /// fails here, naming itself, before any event is processed).
    pub fn start(plan: &Plan, store: &mut KeyedStateStore<LongSerializer>) -> Result<Self> {
        if plan.every == 0 {
            return Err(Error::InvalidArgument(
                "--checkpoint-every must be at least 1".into(),
            ));
        }
        // The probe: a capture of the empty store, dropped at once.
        drop(store.backend_mut().checkpoint_capture()?);
        let mut storage = CheckpointStorage::open(&plan.root)?;
        if let Some(job) = &plan.job {
            storage = storage.job(job)?;
        }
        let storage = Arc::new(storage);
        let ck = Checkpointer::open(
            storage,
            store.config(),
            CheckpointOptions {
                retain: plan.retain,
                ..CheckpointOptions::default()
            },
        )?;
        Ok(Host {
            ck,
            every: plan.every,
            next_id: 1,
            running: VecDeque::new(),
            completed: 0,
            bytes: 0,
        })
    }

    /// Called after event number `done` (1-based): takes a checkpoint every `every` events and confirms
    /// those that completed. Lines go through `print`.
    pub fn after_event(
        &mut self,
        done: u64,
        store: &mut KeyedStateStore<LongSerializer>,
        print: &mut dyn FnMut(String),
    ) -> Result<()> {
        if done % self.every == 0 {
            let id = self.next_id;
            self.next_id += 1;
            let t = Instant::now();
            let pending: PendingCheckpoint = store.checkpoint(&self.ck, id)?;
            let sync_micros = u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX);
            let handle = std::thread::Builder::new()
                .name(format!("checkpoint-{id}"))
                .spawn(move || pending.run())
                .map_err(|e| {
                    Error::io(
                        "spawning the checkpoint thread",
                        format!("checkpoint-{id}"),
                        e,
                    )
                })?;
            self.running.push_back(Running {
                id,
                sync_micros,
                handle,
            });
        }
        self.confirm(false, print)
    }

    /// Confirms the finished checkpoints, oldest first; with `wait`, waits for every one in flight.
    pub fn confirm(&mut self, wait: bool, print: &mut dyn FnMut(String)) -> Result<()> {
        while let Some(front) = self.running.front() {
            if !wait && !front.handle.is_finished() {
                break;
            }
            let Some(r) = self.running.pop_front() else {
                break;
            };
            let result = r
                .handle
                .join()
                .map_err(|_| Error::Closed("a checkpoint thread after a panic"))?;
            match result {
                Ok(s) => {
                    self.ck.notify_complete(s.id)?;
                    self.completed += 1;
                    self.bytes += s.bytes_written;
                    print(format!(
                        "checkpoint {}: {} bytes written, {} files new, {} reused, sync {:.3} ms, async {:.1} ms",
                        s.id,
                        s.bytes_written,
                        s.files_new,
                        s.files_reused,
                        r.sync_micros as f64 / 1e3,
                        s.async_micros as f64 / 1e3
                    ));
                }
                Err(e) => {
                    self.ck.notify_aborted(r.id)?;
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Waits for the checkpoints in flight, confirms them, and says what stayed.
    pub fn finish(mut self, print: &mut dyn FnMut(String)) -> Result<String> {
        self.confirm(true, print)?;
        let retained = self.ck.retained();
        Ok(format!(
            "{} completed into {}, {} bytes written, retained {:?}",
            self.completed,
            self.ck.storage().root_name(),
            self.bytes,
            retained
        ))
    }
}
