//! One worker of a process: its operator instances (fresh or restored), its dataflow, its run.

use std::rc::Rc;
use std::sync::{Arc, Mutex};

use keyed_state::checkpoint::CheckpointStorage;
use keyed_state::env::StateEnv;
use keyed_state::keygroup::key_group_range_for_operator;
use keyed_state::serializer::LongSerializer;
use keyed_state::state::KeyedStateStore;
use timely::dataflow::operators::Probe;
use timely::dataflow::ProbeHandle;
use timely::worker::Worker;

use crate::checkpoints::{self, JobCheckpoint, JobRoot};
use crate::context::{FailureHandler, WorkerCtx, WorkerStats};
use crate::error::{Error, Result};
use crate::keyed::Instance;
use crate::spec::{Backend, JobSpec};
use crate::{protocol, sink};

/// What every worker of a process shares.
pub struct ProcessShared {
    /// The job.
    pub spec: Arc<JobSpec>,
    /// The checkpoint root.
    pub root: Arc<JobRoot>,
    /// Each keyed operator's checkpoint root, in the query's order.
    pub storages: Vec<(String, Arc<CheckpointStorage>)>,
    /// The checkpoint this run continues from.
    pub restored: Option<JobCheckpoint>,
    /// The process's one state environment: every worker's LSM backends and checkpoint storages run on it
    /// (one memory budget, one background pool, one I/O runtime).
    pub env: StateEnv,
    /// Processes of the job.
    pub processes: usize,
    /// Workers per process.
    pub workers: usize,
    /// What a failed operator does.
    pub on_failure: FailureHandler,
}

/// Runs one worker to the end of the job.
pub fn run(worker: &mut Worker, shared: &ProcessShared) -> Result<WorkerStats> {
    let index = worker.index();
    let peers = worker.peers();
    let spec = &shared.spec;
    let max_p = spec.identity.max_parallelism;
    let range = key_group_range_for_operator(
        max_p,
        u32::try_from(peers).unwrap_or(u32::MAX),
        u32::try_from(index).unwrap_or(u32::MAX),
    )
    .map_err(|e| Error::Config(format!("worker {index} of {peers}: {e}")))?;
    let restore_id = shared.restored.as_ref().map(|r| r.id);
    let start_epoch = shared.restored.as_ref().map_or(0, |r| r.epoch + 1);
    let mut instances = Vec::new();
    let t = std::time::Instant::now();
    let mut restored_files = 0;
    let mut restored_bytes = 0;
    for (name, storage) in &shared.storages {
        let config = KeyedStateStore::config_for(&LongSerializer, max_p, range);
        let context = format!("operator {name}, worker {index} (key groups {range})");
        let (backend, checkpointer, restored) = checkpoints::open_instance(
            &shared.env,
            spec.identity.backend,
            storage,
            config,
            restore_id,
            &context,
        )?;
        let heap_memory = (spec.identity.backend == Backend::Heap).then(|| {
            let bytes = restored.as_ref().map_or(0, |r| r.bytes);
            Arc::new(Mutex::new(
                shared
                    .env
                    .memory()
                    .reserve(usize::try_from(bytes).unwrap_or(usize::MAX)),
            ))
        });
        restored_bytes += restored.as_ref().map_or(0, |r| r.bytes);
        restored_files += restored.map_or(0, |r| r.files);
        let store = KeyedStateStore::new(backend, LongSerializer).map_err(Error::state(context))?;
        instances.push(Instance {
            name: name.clone(),
            store,
            checkpointer,
            heap_memory,
        });
    }
    let (ctx, parts) = WorkerCtx::new(
        Arc::clone(spec),
        index,
        peers,
        start_epoch,
        Arc::clone(&shared.on_failure),
    );
    if restore_id.is_some() {
        let mut s = ctx.stats.borrow_mut();
        s.restore_micros = Some(u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX));
        s.restored_files = restored_files;
        s.restored_bytes = restored_bytes;
    }
    let ctx = Rc::new(ctx);
    let root = Arc::clone(&shared.root);
    let query = spec.identity.query;
    let (processes, workers) = (shared.processes, shared.workers);
    let built: Result<()> = worker.dataflow::<u64, _, _>(|scope| {
        let acks = protocol::acks(scope, &ctx, parts);
        let confirms = protocol::coordinate(acks, &ctx, root, processes, workers);
        protocol::commit(confirms, &ctx);
        let finished = ProbeHandle::new();
        let rows = query.build(scope, finished.clone(), instances, &ctx)?;
        sink::files(rows.probe_with(&finished), &ctx);
        Ok(())
    });
    built?;
    while worker.has_dataflows() {
        worker.step_or_park(None);
    }
    let stats = ctx.stats.borrow().clone();
    Ok(stats)
}
