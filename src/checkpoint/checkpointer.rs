//! One instance's checkpoints: the two parts, the host's confirmations, retention and the sweep
//! (`design/checkpoints.md`, "Shared-file registry and deletion protocol").

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::fence::{claims_prefix, run_of, take_attempt};
use super::format::{CheckpointMetadata, FileRef};
use super::pending::PendingCheckpoint;
use super::registry::{
    CheckpointOptions, InFlight, Inner, Registry, RestoreMode, Retained, SweepState, SweepStatus,
};
use super::storage::CheckpointStorage;
use super::{instance_name, metadata_path};
use crate::backend::{BackendConfig, StateBackend};
use crate::error::{CheckpointError, Error, Result};

/// The old runs (`<instance>/<run>`) whose objects `m` references, other than `instance`'s own.
fn foreign_runs(m: &CheckpointMetadata, instance: &str) -> BTreeSet<String> {
    m.objects
        .iter()
        .filter_map(|o| run_of(&o.path))
        .filter(|run| run.split('/').next() != Some(instance))
        .map(str::to_string)
        .collect()
}

/// One instance's checkpoints into one storage root. Cheap to clone (shared).
#[derive(Clone)]
pub struct Checkpointer {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Checkpointer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checkpointer")
            .field("instance", &self.inner.instance)
            .field("attempt", &self.inner.attempt)
            .field("run", &format_args!("{:016x}", self.inner.run))
            .finish()
    }
}

fn new_run_id() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let mut b = Vec::with_capacity(32);
    b.extend_from_slice(&nanos.to_le_bytes());
    b.extend_from_slice(&std::process::id().to_le_bytes());
    b.extend_from_slice(&COUNTER.fetch_add(1, Ordering::Relaxed).to_le_bytes());
    xxhash_rust::xxh3::xxh3_64(&b)
}

pub(super) fn now_millis() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl Checkpointer {
    /// A checkpointer for an instance owning `config`'s key groups, writing into `storage`. Takes an
    /// attempt for the instance name (a create-only marker `attempts/<instance>/<attempt>`), which fences
    /// every older writer of the name, then runs the sweep once: leftovers of an earlier run of the same
    /// instance name (uploads without metadata) go.
    pub fn open(
        storage: Arc<CheckpointStorage>,
        config: &BackendConfig,
        opts: CheckpointOptions,
    ) -> Result<Self> {
        if opts.retain == 0 {
            return Err(Error::InvalidArgument(
                "checkpoint options: retain must be at least 1".into(),
            ));
        }
        let instance = opts
            .instance
            .clone()
            .unwrap_or_else(|| instance_name(config.key_group_range));
        if instance.is_empty() || instance.contains('/') || instance.len() > 200 {
            return Err(Error::InvalidArgument(format!(
                "checkpoint instance name {instance:?} must be 1..200 bytes without '/'"
            )));
        }
        let attempt = take_attempt(&storage, &instance, opts.attempt)?;
        let floor = super::scan::newest_id_of(&storage, &instance)?;
        let c = Checkpointer {
            inner: Arc::new(Inner {
                storage,
                instance,
                attempt,
                run: new_run_id(),
                opts,
                reg: Mutex::new(Registry {
                    base: None,
                    retained: VecDeque::new(),
                    in_flight: BTreeMap::new(),
                    last_confirmed: None,
                    reuse_restored: false,
                    floor,
                    retire: Vec::new(),
                    sweep_runs: BTreeSet::new(),
                    mat: None,
                    mat_status: Default::default(),
                }),
                closed: AtomicBool::new(false),
                next_object: AtomicU64::new(0),
                sweep: Mutex::new(SweepState::default()),
                sweep_lock: Mutex::new(()),
                mat_idle: parking_lot::Condvar::new(),
            }),
        };
        c.sweep()?;
        Ok(c)
    }

    /// The instance name.
    pub fn instance(&self) -> &str {
        &self.inner.instance
    }

    /// The storage.
    pub fn storage(&self) -> &Arc<CheckpointStorage> {
        &self.inner.storage
    }

    /// This writer's attempt for its instance name.
    pub fn attempt(&self) -> u64 {
        self.inner.attempt
    }

    /// [`CheckpointError::Fenced`] if a newer attempt of this instance name opened in the root (one
    /// listing of `attempts/<instance>/`).
    pub fn check_fenced(&self) -> Result<()> {
        self.inner.check_fenced()
    }

    /// Tells the checkpointer which checkpoint its backend was restored from: `metas` are the
    /// [`RestoreInfo::parts`](super::RestoreInfo::parts) of the restore, `range` the backend's key groups.
    /// In [`RestoreMode::Claim`] the files the backend holds of them become the incremental base (the
    /// first checkpoint uploads only what changed since), the restored checkpoint counts as retained, and
    /// this instance *owns* every part whose first key group it holds: it deletes that part's metadata when
    /// the restored checkpoint leaves retention and sweeps the old runs' objects the part references
    /// (`design/checkpoints.md`, "Claim across a rescale"). Call it before the first [`begin`](Self::begin).
    pub fn restored_from(
        &self,
        metas: &[CheckpointMetadata],
        range: crate::keygroup::KeyGroupRange,
        mode: RestoreMode,
    ) -> Result<()> {
        if mode == RestoreMode::NoClaim {
            return Ok(());
        }
        let Some(first) = metas.first() else {
            return Err(CheckpointError::Invalid(
                "claim mode needs the parts of the restored checkpoint".into(),
            )
            .into());
        };
        let id = first.checkpoint_id;
        if let Some(m) = metas.iter().find(|m| m.checkpoint_id != id) {
            return Err(CheckpointError::Invalid(format!(
                "claim mode: the restored parts come from checkpoints {id} and {} ({})",
                m.checkpoint_id, m.instance
            ))
            .into());
        }
        if let Some(m) = metas
            .iter()
            .find(|m| m.key_group_range.intersect(&range).is_empty())
        {
            return Err(CheckpointError::Invalid(format!(
                "claim mode: restored part {} (key groups {}) holds none of key groups {range}",
                m.instance, m.key_group_range
            ))
            .into());
        }
        super::fence::check_parts_in_root(&self.inner.storage, metas)?;
        let owned: Vec<&CheckpointMetadata> = metas
            .iter()
            .filter(|m| range.contains(m.key_group_range.start()))
            .collect();
        let base = claimed_base(metas);
        {
            let reg = self.inner.reg.lock();
            if reg.last_confirmed.is_some() || !reg.in_flight.is_empty() {
                return Err(CheckpointError::Invalid(
                    "restored_from must come before the first checkpoint".into(),
                )
                .into());
            }
        }
        for m in &owned {
            self.take_over_claims(m)?;
        }
        // The claimed files' objects that a writer of the old job deleted before it was fenced are not
        // reused: the files are uploaded again by the first checkpoint (the backend holds them).
        let base = self.without_missing_objects(base)?;
        let mut reg = self.inner.reg.lock();
        reg.base = Some(base);
        reg.reuse_restored = true;
        reg.last_confirmed = Some(id);
        let me = &self.inner.instance;
        reg.retained.push_back(Retained {
            id,
            delete: owned
                .iter()
                .map(|m| metadata_path(id, &m.instance))
                .collect(),
            runs: owned.iter().flat_map(|m| foreign_runs(m, me)).collect(),
        });
        Ok(())
    }

    /// `base` without the files whose object is gone from the root (one listing per run it references).
    fn without_missing_objects(&self, mut base: CheckpointMetadata) -> Result<CheckpointMetadata> {
        let mut present: BTreeSet<String> = BTreeSet::new();
        let runs: BTreeSet<&str> = base
            .objects
            .iter()
            .filter_map(|o| run_of(&o.path))
            .collect();
        for run in runs {
            let listed = self.inner.storage.list(&format!("shared/{run}/"))?;
            present.extend(listed.into_iter().map(|(p, _)| p));
        }
        let objects = &base.objects;
        base.files.retain(|f| {
            objects
                .get(f.object as usize)
                .is_some_and(|o| present.contains(&o.path))
        });
        Ok(base)
    }

    /// Makes this instance a sweeper of every old run whose objects part `m` references (a marker
    /// `claimed/<instance>/<old instance>/<old run>` each), and of the runs part `m`'s instance swept for
    /// its own earlier claims.
    fn take_over_claims(&self, m: &CheckpointMetadata) -> Result<()> {
        let storage = &self.inner.storage;
        let me = &self.inner.instance;
        if &m.instance != me {
            // Claim is the host's statement that the old job no longer runs: a writer of it still alive
            // (a zombie) is fenced from here on, so it deletes nothing this instance now owns.
            take_attempt(storage, &m.instance, None)?;
        }
        let mut runs = foreign_runs(m, me);
        let prefix = claims_prefix(&m.instance);
        let theirs = if &m.instance == me {
            Vec::new()
        } else {
            storage.list(&prefix)?
        };
        for (path, _) in &theirs {
            if let Some(run) = path.strip_prefix(&prefix) {
                if run.split('/').next() != Some(me.as_str()) {
                    runs.insert(run.to_string());
                }
            }
        }
        for run in &runs {
            storage.put(&format!("{}{run}", claims_prefix(me)), Vec::new())?;
        }
        // The old owner's markers stay: a claim abandoned before its first confirmation (or a crash here)
        // leaves them for the next claim of the same part. Every marker of a run goes when a sweep empties it.
        Ok(())
    }

    /// The synchronous part of checkpoint `id`: captures the backend's state (no cost in its size) and
    /// returns the asynchronous part. Ids must grow.
    pub fn begin(&self, id: u64, backend: &mut dyn StateBackend) -> Result<PendingCheckpoint> {
        let _span =
            tracing::debug_span!("checkpoint_begin", id, instance = %self.inner.instance).entered();
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(Error::Closed("the checkpointer"));
        }
        let mut reg = self.inner.reg.lock();
        if let Some(floor) = reg.floor.filter(|&f| id <= f) {
            return Err(CheckpointError::Invalid(format!(
                "checkpoint id {id} of instance {}: the root already holds checkpoints of this instance up to \
                 id {floor}; number new checkpoints past them (as Flink's checkpoint counter does), or write \
                 into another root",
                self.inner.instance
            ))
            .into());
        }
        if reg.in_flight.contains_key(&id)
            || reg.last_confirmed.is_some_and(|c| id <= c)
            || reg.in_flight.keys().next_back().is_some_and(|&l| id <= l)
        {
            return Err(CheckpointError::Invalid(format!(
                "checkpoint id {id} is not larger than every earlier one"
            ))
            .into());
        }
        let capture = backend.checkpoint_capture()?;
        let base = if reg.last_confirmed.is_some() || reg.reuse_restored {
            reg.base.clone()
        } else {
            None
        };
        let protect = base
            .iter()
            .flat_map(|b| b.objects.iter().map(|o| o.path.clone()))
            .collect();
        let cancel = Arc::new(AtomicBool::new(false));
        reg.in_flight.insert(
            id,
            InFlight {
                cancel: Arc::clone(&cancel),
                protect,
                written: None,
                materialized: false,
            },
        );
        super::materialize::at_begin(&self.inner, &mut reg, id, backend);
        Ok(PendingCheckpoint {
            inner: Arc::clone(&self.inner),
            id,
            capture: parking_lot::Mutex::new(Some(capture)),
            config: backend.config().clone(),
            states: backend.states().to_vec(),
            created_millis: now_millis(),
            base,
            cancel,
        })
    }

    /// The host confirms checkpoint `id` (every instance finished it): it becomes the incremental base,
    /// older checkpoints in flight are subsumed, retention drops the oldest beyond `retain`. `Ok` means the
    /// confirmation took effect; an error (`id` not finished, or [`CheckpointError::Fenced`], from one
    /// listing of the attempt markers) means it did not. The subsumed and retired metadata is deleted
    /// next, and the sweep of what no retained checkpoint references runs in the background; neither
    /// holds what [`begin`](Self::begin) needs while storage answers, and their failures go to
    /// [`sweep_status`](Self::sweep_status) and are retried.
    ///
    /// [`notify_complete_async`](Self::notify_complete_async) on the storage's I/O runtime, waited for
    /// (from a plain thread or from inside a tokio runtime).
    pub fn notify_complete(&self, id: u64) -> Result<()> {
        self.inner
            .storage
            .io()
            .block_on(|| self.notify_complete_async(id))?
    }

    /// [`notify_complete`](Self::notify_complete), awaited: its listing and deletions are tasks of the
    /// storage's I/O runtime; the awaiting task blocks no thread of its executor.
    pub async fn notify_complete_async(&self, id: u64) -> Result<()> {
        self.written(id)?;
        // A fenced writer's confirmation takes no effect (and its sweeps delete nothing).
        self.inner.check_fenced_async().await?;
        let me = &self.inner.instance;
        // The registry's lock is released before anything is awaited.
        {
            let mut reg = self.inner.reg.lock();
            // Checked again: another call may have confirmed or aborted it meanwhile.
            let meta = match reg.in_flight.get(&id).map(|f| f.written.clone()) {
                Some(Some(meta)) => meta,
                _ => {
                    return Err(CheckpointError::Invalid(format!(
                        "checkpoint {id} is not in flight"
                    ))
                    .into())
                }
            };
            let moot = reg.in_flight.remove(&id).is_some_and(|f| f.materialized);
            super::materialize::at_confirm(&mut reg, id, moot);
            let mut runs = BTreeSet::new();
            let mut retire = Vec::new();
            let older: Vec<u64> = reg.in_flight.range(..id).map(|(k, _)| *k).collect();
            for o in older {
                if let Some(f) = reg.in_flight.remove(&o) {
                    f.cancel.store(true, Ordering::Release);
                    if let Some(m) = &f.written {
                        retire.push(metadata_path(o, me));
                        runs.extend(foreign_runs(m, me));
                    }
                }
            }
            reg.retained.push_back(Retained {
                id,
                delete: vec![metadata_path(id, me)],
                runs: foreign_runs(&meta, me),
            });
            reg.base = Some(meta);
            reg.reuse_restored = false;
            reg.last_confirmed = Some(id);
            while reg.retained.len() > self.inner.opts.retain {
                if let Some(r) = reg.retained.pop_front() {
                    retire.extend(r.delete);
                    runs.extend(r.runs);
                }
            }
            reg.retire.extend(retire);
            reg.sweep_runs.extend(runs);
        }
        // The fence was checked above: the retired metadata goes now (retried by the sweep if this fails).
        self.delete_retired().await;
        super::sweeper::request(&self.inner);
        Ok(())
    }

    /// Deletes the metadata the registry retired, without holding its lock; a failure is the sweep's
    /// (reported in [`sweep_status`](Self::sweep_status)), and the background sweep tries again.
    async fn delete_retired(&self) {
        let retire = self.inner.reg.lock().retire.clone();
        let mut gone = Vec::new();
        for p in &retire {
            match self.inner.storage.delete_async(p).await {
                Ok(()) => gone.push(p.as_str()),
                Err(e) => {
                    tracing::warn!(instance = %self.inner.instance, "deleting retired checkpoint metadata {p} failed: {e}");
                    self.inner.sweep.lock().record(&Err(e));
                    break;
                }
            }
        }
        self.inner
            .reg
            .lock()
            .retire
            .retain(|p| !gone.contains(&p.as_str()));
    }

    /// An error unless checkpoint `id` is in flight with its metadata written.
    fn written(&self, id: u64) -> Result<()> {
        let reg = self.inner.reg.lock();
        match reg.in_flight.get(&id) {
            None => {
                Err(CheckpointError::Invalid(format!("checkpoint {id} is not in flight")).into())
            }
            Some(f) if f.written.is_none() => Err(CheckpointError::Invalid(format!(
                "checkpoint {id} has not finished writing"
            ))
            .into()),
            Some(_) => Ok(()),
        }
    }

    /// The host aborts checkpoint `id`: a running one is cancelled; a finished one's metadata is deleted
    /// (after a fence check, without holding what [`begin`](Self::begin) needs). Unknown ids are ignored
    /// (as Flink ignores late aborts). `Ok` means the abort took effect; a failed deletion is the sweep's
    /// ([`sweep_status`](Self::sweep_status)), which runs in the background and retries it.
    ///
    /// [`notify_aborted_async`](Self::notify_aborted_async) on the storage's I/O runtime, waited for (from
    /// a plain thread or from inside a tokio runtime).
    pub fn notify_aborted(&self, id: u64) -> Result<()> {
        self.inner
            .storage
            .io()
            .block_on(|| self.notify_aborted_async(id))?
    }

    /// [`notify_aborted`](Self::notify_aborted), awaited: the fence check and the deletion of a finished
    /// checkpoint's metadata are tasks of the storage's I/O runtime; the awaiting task blocks no thread of
    /// its executor.
    pub async fn notify_aborted_async(&self, id: u64) -> Result<()> {
        let mut retired = false;
        {
            let mut reg = self.inner.reg.lock();
            if let Some(f) = reg.in_flight.remove(&id) {
                f.cancel.store(true, Ordering::Release);
                if let Some(m) = &f.written {
                    let me = &self.inner.instance;
                    reg.retire.push(metadata_path(id, me));
                    let runs = foreign_runs(m, me);
                    reg.sweep_runs.extend(runs);
                    retired = true;
                }
            }
        }
        if retired {
            // A fenced writer deletes nothing.
            match self.inner.check_fenced_async().await {
                Ok(()) => self.delete_retired().await,
                Err(e) => self.inner.sweep.lock().record(&Err(e)),
            }
        }
        super::sweeper::request(&self.inner);
        Ok(())
    }

    /// Cancels every checkpoint in flight and a background materialization (whose objects no metadata
    /// references go with the sweep it queues); later [`begin`](Self::begin)s fail.
    pub fn close(&self) {
        self.inner.closed.store(true, Ordering::Release);
        let had_mat = {
            let mut reg = self.inner.reg.lock();
            for f in reg.in_flight.values() {
                f.cancel.store(true, Ordering::Release);
            }
            // A materialization's protection ends (a checkpoint still running protects what it
            // references itself); its objects no metadata references go with the sweep.
            let mat = reg.mat.take();
            if let Some(m) = &mat {
                m.cancel.store(true, Ordering::Release);
            }
            mat.is_some()
        };
        if had_mat {
            super::sweeper::request(&self.inner);
        }
    }

    /// The objects a background materialization keeps from the sweep now (uploading or uploaded, not yet
    /// in a confirmed checkpoint).
    pub fn materialization_objects(&self) -> BTreeSet<String> {
        self.inner
            .reg
            .lock()
            .mat
            .as_ref()
            .map(|m| m.protect.clone())
            .unwrap_or_default()
    }

    /// What the background materializations of the checkpoint view did (`design/checkpoint-view.md`, "In
    /// the background"): their objects and bytes are written outside every checkpoint's path.
    pub fn materialization_status(&self) -> super::MaterializationStatus {
        self.inner.reg.lock().mat_status.clone()
    }

    #[cfg(test)]
    pub(super) fn inner(&self) -> &Arc<Inner> {
        &self.inner
    }

    /// Waits until no background materialization is uploading; then
    /// [`materialization_status`](Self::materialization_status). Blocks the calling thread (the uploads
    /// run on the storage's I/O runtime).
    pub fn wait_for_materialization(&self) -> super::MaterializationStatus {
        let mut reg = self.inner.reg.lock();
        while reg.mat_status.in_flight {
            self.inner.mat_idle.wait(&mut reg);
        }
        reg.mat_status.clone()
    }

    /// Confirmed checkpoints still retained, oldest first.
    pub fn retained(&self) -> Vec<u64> {
        self.inner
            .reg
            .lock()
            .retained
            .iter()
            .map(|r| r.id)
            .collect()
    }

    /// Runs the sweep now, on the calling thread, and returns its result: first the metadata that
    /// confirmations and aborts retired is deleted, then every object under this instance's
    /// `shared/<instance>/`, and under the old runs it claimed (`claimed/<instance>/…`), that no metadata in
    /// the root and no checkpoint in flight references; a claimed run left empty loses its marker.
    /// Confirmations and aborts queue the same sweep for the background ([`sweep_status`](Self::sweep_status)).
    pub fn sweep(&self) -> Result<()> {
        super::sweeper::sweep_now(&self.inner)
    }

    /// Waits until the sweeps queued so far for checkpointers on this one's storage have run
    /// ([`wait_for_sweeps`](super::wait_for_sweeps)); then [`sweep_status`](Self::sweep_status).
    pub fn wait_for_sweeps(&self) -> SweepStatus {
        super::sweeper::wait_for_sweeps(&self.inner.storage);
        self.sweep_status()
    }

    /// What the sweeps of this checkpointer did, the background ones' failures included.
    pub fn sweep_status(&self) -> SweepStatus {
        self.inner.sweep.lock().status.clone()
    }
}

/// holding its bytes.
fn claimed_base(metas: &[CheckpointMetadata]) -> CheckpointMetadata {
    let mut base = metas[0].clone();
    base.objects.clear();
    base.files.clear();
    let mut index: BTreeMap<String, u32> = BTreeMap::new();
    for m in metas {
        for f in &m.files {
            let Some(o) = m.objects.get(f.object as usize) else {
                continue;
            };
            let i = *index.entry(o.path.clone()).or_insert_with(|| {
                base.objects.push(o.clone());
                (base.objects.len() - 1) as u32
            });
            base.files.push(FileRef {
                object: i,
                ..f.clone()
            });
        }
    }
    base
}
