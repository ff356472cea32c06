//! The host's view of checkpoints: how a stream processor drives them across the parallel instances of a
//! keyed operator, and rescales from one (`design/checkpoints.md`).
//!
//! Two instances of a click-counting job write checkpoints into one root. For every checkpoint the host
//! (the job's coordinator) takes the synchronous part on each instance between two events, lets the
//! asynchronous parts upload on their own threads while the instances keep processing, and once *every*
//! instance has finished confirms the checkpoint on each (`notify_complete`): only then is it the base of
//! the next incremental checkpoint and does retention delete what the older ones alone referenced. Then
//! the job "fails" and restarts at parallelism 3 from the last confirmed checkpoint: each new instance
//! adopts the old instances' files for its key groups, without rewriting data, and every count is intact.
//! The restart claims the restored checkpoint: the new instances' first checkpoints reference the files
//! they adopted instead of uploading them again, and retention deletes the old checkpoint like any other.
//!
//! `cargo run --release --example checkpointing_host [ROOT]` (ROOT: a directory or `s3://bucket/prefix`
//! with the `AWS_*` variables set; default a temporary directory).

use std::collections::BTreeMap;
use std::sync::Arc;

use keyed_state::backend::lsm::LsmBackend;
use keyed_state::checkpoint::list_completed;
use keyed_state::checkpoint::{
    restore_lsm, CheckpointOptions, CheckpointStorage, Checkpointer, PendingCheckpoint, RestoreMode,
};
use keyed_state::keygroup::{key_group_range_for_operator, KeyGroupRange};
use keyed_state::serializer::LongSerializer;
use keyed_state::state::{KeyedStateStore, ValueState, ValueStateDescriptor};
use keyed_state_lsm::Options;

type Error = Box<dyn std::error::Error + Send + Sync>;

/// The job's max parallelism: the number of key groups, fixed for the job's lifetime.
const MAX_PARALLELISM: u32 = 128;
/// Events between two checkpoints.
const EVENTS_PER_CHECKPOINT: u64 = 50_000;
/// Checkpoints the root keeps.
const RETAIN: usize = 2;

/// One parallel instance of the operator: its store, its state handle and its checkpointer.
struct Instance {
    range: KeyGroupRange,
    store: KeyedStateStore<LongSerializer>,
    clicks: ValueState<LongSerializer>,
    checkpointer: Checkpointer,
}

impl Instance {
    /// An instance over `backend` (fresh or restored), checkpointing into `storage`.
    fn new(backend: LsmBackend, storage: &Arc<CheckpointStorage>) -> Result<Self, Error> {
        let config = keyed_state::backend::StateBackend::config(&backend).clone();
        let mut store = KeyedStateStore::new(Box::new(backend), LongSerializer)?;
        let clicks = store.register_value(ValueStateDescriptor::new("clicks", LongSerializer))?;
        let checkpointer = Checkpointer::open(
            Arc::clone(storage),
            &config,
            CheckpointOptions {
                retain: RETAIN,
                ..CheckpointOptions::default()
            },
        )?;
        Ok(Instance {
            range: config.key_group_range,
            store,
            clicks,
            checkpointer,
        })
    }

    fn owns(&self, user: i64) -> Result<bool, Error> {
        Ok(self.range.contains(self.store.key_group_of(&user)?))
    }

    fn count(&mut self, user: i64) -> Result<(), Error> {
        self.store.set_current_key(&user)?;
        let mut v = self.store.value(&self.clicks)?;
        let n = v.get()?.unwrap_or(0);
        v.update(&(n + 1))?;
        Ok(())
    }

    fn get(&mut self, user: i64) -> Result<Option<i64>, Error> {
        self.store.set_current_key(&user)?;
        Ok(self.store.value(&self.clicks)?.get()?)
    }
}

/// The user of event `i` (a fixed pseudo-random stream over 20,000 users).
fn user(i: u64) -> i64 {
    (i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40) as i64 % 20_000
}

fn config(range: KeyGroupRange) -> keyed_state::backend::BackendConfig {
    KeyedStateStore::config_for(&LongSerializer, MAX_PARALLELISM, range)
}

/// Runs events `from..to` through the instances (each event to the instance owning its key) and counts
/// them in `model`.
fn process(
    instances: &mut [Instance],
    from: u64,
    to: u64,
    model: &mut BTreeMap<i64, i64>,
) -> Result<(), Error> {
    for i in from..to {
        let u = user(i);
        for inst in instances.iter_mut() {
            if inst.owns(u)? {
                inst.count(u)?;
            }
        }
        *model.entry(u).or_insert(0) += 1;
    }
    Ok(())
}

/// One checkpoint of the whole job, as the host drives it: the synchronous part on every instance, the
/// asynchronous parts on threads while the next events are processed, then confirmation on every instance.
fn checkpoint(
    id: u64,
    instances: &mut [Instance],
    next_events: (u64, u64),
    model: &mut BTreeMap<i64, i64>,
) -> Result<BTreeMap<i64, i64>, Error> {
    let at_checkpoint = model.clone();
    let mut running = Vec::new();
    for inst in instances.iter_mut() {
        let pending: PendingCheckpoint = inst.store.checkpoint(&inst.checkpointer, id)?;
        running.push(std::thread::spawn(move || pending.run()));
    }
    // The instances keep processing while their checkpoints upload.
    process(instances, next_events.0, next_events.1, model)?;
    let mut summaries = Vec::new();
    for r in running {
        summaries.push(r.join().map_err(|_| "a checkpoint thread panicked")??);
    }
    // Every instance finished: the checkpoint is complete for the job; confirm it everywhere.
    for (inst, s) in instances.iter().zip(&summaries) {
        inst.checkpointer.notify_complete(id)?;
        println!(
            "  checkpoint {id}, instance {}: {} files new, {} reused, {} bytes written",
            inst.checkpointer.instance(),
            s.files_new,
            s.files_reused,
            s.bytes_written
        );
    }
    Ok(at_checkpoint)
}

fn main() -> Result<(), Error> {
    let tmp = tempfile::tempdir()?;
    let root = std::env::args()
        .nth(1)
        .unwrap_or_else(|| tmp.path().join("checkpoints").display().to_string());
    let storage = Arc::new(CheckpointStorage::open(&root)?);
    println!("checkpoint root: {root}");

    // Parallelism 2.
    let mut instances = Vec::new();
    for i in 0..2 {
        let range = key_group_range_for_operator(MAX_PARALLELISM, 2, i)?;
        instances.push(Instance::new(
            LsmBackend::temp_with(config(range), Options::default())?,
            &storage,
        )?);
    }
    let mut model = BTreeMap::new();
    let mut event = 0;
    process(&mut instances, 0, EVENTS_PER_CHECKPOINT, &mut model)?;
    event += EVENTS_PER_CHECKPOINT;
    let mut last = (0, BTreeMap::new());
    for id in 1..=4 {
        let next = (event, event + EVENTS_PER_CHECKPOINT);
        last = (id, checkpoint(id, &mut instances, next, &mut model)?);
        event = next.1;
    }
    for m in list_completed(&storage)? {
        let (new, referenced) = m.files_new_and_referenced();
        println!(
            "  retained: checkpoint {} of {} ({} files new, {} referenced)",
            m.checkpoint_id, m.instance, new, referenced
        );
    }

    // The job fails; the events after the last confirmed checkpoint are replayed from the source.
    drop(instances);
    let (id, state) = last;
    println!("failure; restart at parallelism 3 from checkpoint {id}");
    let mut instances = Vec::new();
    for i in 0..3 {
        let range = key_group_range_for_operator(MAX_PARALLELISM, 3, i)?;
        // Each new instance's engine lives in a directory the host chooses (its local disk).
        let dir = tmp.path().join(format!("instance-{i}"));
        let (backend, info) = restore_lsm(&storage, id, &dir, config(range), Options::default())?;
        println!(
            "  instance {range}: adopted {} files of {:?}, copied {:?}, {} bytes fetched",
            info.files_adopted, info.adopted, info.copied, info.bytes_fetched
        );
        let inst = Instance::new(backend, &storage)?;
        // Claim: the restored checkpoint becomes this instance's incremental base and is deleted once
        // subsumed (its part of instance I by the new instance holding I's first key group).
        inst.checkpointer
            .restored_from(&info.parts, range, RestoreMode::Claim)?;
        instances.push(inst);
    }
    let mut checked = 0;
    for (u, n) in &state {
        for inst in instances.iter_mut() {
            if inst.owns(*u)? {
                assert_eq!(inst.get(*u)?, Some(*n), "user {u}");
                checked += 1;
            }
        }
    }
    println!("  every one of {checked} counts as of checkpoint {id} is intact");

    // Replay from the checkpoint on, and keep checkpointing at the new parallelism. The first checkpoint's
    // synchronous part comes before the replay: it holds exactly the restored files, and claim mode
    // references every one of them (nothing uploaded but the metadata).
    let mut model = state;
    let replay_from = EVENTS_PER_CHECKPOINT * id;
    for (next, events) in [
        (id + 1, (replay_from, event)),
        (id + 2, (event, event + 1000)),
    ] {
        checkpoint(next, &mut instances, events, &mut model)?;
        let ids: std::collections::BTreeSet<u64> = list_completed(&storage)?
            .iter()
            .map(|m| m.checkpoint_id)
            .collect();
        println!("checkpoint {next} taken at parallelism 3; checkpoints in the root: {ids:?}");
    }
    // Checkpoint 4 went once two newer ones were confirmed. Older checkpoints of the job before the restart
    // are not claimed (as in Flink): `keyed-state checkpoint gc` removes them.
    Ok(())
}
