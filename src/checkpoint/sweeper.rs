//! The sweep, and the process's background sweeper (`design/checkpoints.md`, "Confirmation and the sweep").
//!
//! A confirmation or an abort only changes the checkpointer's registry and queues a sweep; one thread per
//! process (started at the first request) runs the queued sweeps. Sweeps queued for checkpointers that share
//! one [`CheckpointStorage`] run together, on one scan of the root's metadata. A failed sweep is recorded in
//! the checkpointer's [`SweepStatus`] and retried later with a growing delay (up to 30 s) while the
//! checkpointer is in use; a fenced writer's sweep is not retried.
//!
//! The sweep never holds the registry's lock while it waits on storage, so [`Checkpointer::begin`] never
//! waits on it. What it must keep alive it learns under the lock, *before* it scans the root: the objects
//! of every checkpoint in flight (and of a background materialization), the objects of the last confirmed
//! checkpoint, and the number of the next object the run will upload (objects of this run numbered from
//! there on are newer than the snapshot and kept). A checkpoint in flight at the snapshot has its objects
//! in it; one begun after it holds newer objects and objects reused from the last confirmed checkpoint
//! (the snapshot's, whose metadata a confirmation may delete before the scan, or a later one, kept by the
//! same argument); one whose metadata was written before the scan is in the scan.
//!
//! [`Checkpointer::begin`]: super::Checkpointer::begin

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::fence::{claims_prefix, run_of};
use super::registry::{Inner, SWEEP_RETRY_FIRST, SWEEP_RETRY_MAX};
use super::storage::CheckpointStorage;
use crate::error::{CheckpointError, Error, Result};

/// One instance's sweep, ready for the scan of the root.
struct Prepared<'a> {
    inner: &'a Inner,
    /// Old runs to sweep besides the claimed ones.
    runs: BTreeSet<String>,
    /// Objects of checkpoints in flight (and of a materialization) and of the last confirmed checkpoint
    /// when the snapshot was taken.
    protect: BTreeSet<String>,
    /// This run's objects numbered from here on were uploaded after the snapshot.
    next_object: u64,
}

/// Deletes the metadata the registry retired (after a fence check), then takes the snapshot of what the
/// sweep must keep.
fn prepare(inner: &Inner) -> Result<Prepared<'_>> {
    let storage = &inner.storage;
    let (retire, runs) = {
        let reg = inner.reg.lock();
        (reg.retire.clone(), reg.sweep_runs.clone())
    };
    if !retire.is_empty() {
        // A fenced writer deletes nothing (subsumed or retired metadata included).
        inner.check_fenced()?;
        for p in &retire {
            storage.delete(p)?;
        }
        inner.reg.lock().retire.retain(|p| !retire.contains(p));
    }
    let reg = inner.reg.lock();
    let protect = reg
        .in_flight
        .values()
        .flat_map(|f| f.protect.iter().cloned())
        .chain(reg.mat.iter().flat_map(|m| m.protect.iter().cloned()))
        // The last confirmed checkpoint's objects: a checkpoint may take them into its protection after
        // this snapshot (its references, or the fallback of `reuse.rs`), while a confirmation retires and
        // deletes that metadata before the listing below reads the root; kept here, they outlive this
        // sweep. What a later base references is, by the same rule, in this snapshot or numbered after it.
        .chain(
            reg.base
                .iter()
                .flat_map(|m| m.objects.iter().map(|o| o.path.clone())),
        )
        .collect();
    Ok(Prepared {
        inner,
        runs,
        protect,
        next_object: inner.next_object.load(std::sync::atomic::Ordering::Acquire),
    })
}

/// The number `n` of an object `<id>-<n>.<ext>` of a run.
fn object_number(name: &str) -> Option<u64> {
    let (_, rest) = name.split_once('-')?;
    rest.split('.').next()?.parse().ok()
}

/// Deletes every object under the instance's `shared/<instance>/`, and under the old runs it claimed or
/// was told of, that neither `live` (every object some metadata references) nor the snapshot keeps; a
/// claimed run left empty loses its markers.
fn finish(p: &Prepared<'_>, live: &BTreeSet<String>) -> Result<()> {
    let inner = p.inner;
    let storage = &inner.storage;
    let keep = |path: &str| live.contains(path) || p.protect.contains(path);
    let own_run = super::fence::run_dir(&inner.instance, inner.run, inner.attempt);
    // Everything is listed first and deleted after one fence check: an object in these listings was
    // uploaded after its writer's attempt marker existed, so if the check finds no newer attempt, no
    // object listed belongs to one (design/checkpoint-fencing.md, "Sweeps").
    let mut doomed: Vec<String> = Vec::new();
    // Runs swept here, with the objects left in each: a run left empty needs no sweeper any more.
    let mut left_in: BTreeMap<String, usize> = BTreeMap::new();
    let prefix = format!("shared/{}/", inner.instance);
    for (path, _) in storage.list(&prefix)? {
        let newer = path
            .strip_prefix(&own_run)
            .and_then(object_number)
            .is_some_and(|n| n >= p.next_object);
        let kept = newer || keep(&path);
        if let Some(run) = run_of(&path) {
            *left_in.entry(run.to_string()).or_default() += usize::from(kept);
        }
        if !kept {
            doomed.push(path);
        }
    }
    // Old runs: those this instance holds markers of, and those the metadata deleted referenced.
    let claims = claims_prefix(&inner.instance);
    let mut old_runs: BTreeSet<&str> = p.runs.iter().map(String::as_str).collect();
    let marked = storage.list(&claims)?;
    old_runs.extend(marked.iter().filter_map(|(m, _)| m.strip_prefix(&claims)));
    let mut emptied: Vec<String> = left_in
        .into_iter()
        .filter(|(_, n)| *n == 0)
        .map(|(run, _)| run)
        .collect();
    for run in old_runs {
        let mut left = 0usize;
        for (path, _) in storage.list(&format!("shared/{run}/"))? {
            if keep(&path) {
                left += 1;
            } else {
                doomed.push(path);
            }
        }
        if left == 0 {
            emptied.push(run.to_string());
        }
    }
    // A run this sweep emptied needs no sweeper any more: its markers (of any owner) go.
    if !emptied.is_empty() {
        for (marker, _) in storage.list("claimed/")? {
            if emptied.iter().any(|r| marker.ends_with(&format!("/{r}"))) {
                doomed.push(marker);
            }
        }
    }
    inner.check_fenced()?;
    for path in &doomed {
        storage.delete(path)?;
    }
    let mut reg = inner.reg.lock();
    reg.sweep_runs.retain(|r| !p.runs.contains(r));
    Ok(())
}

/// Sweeps the instances `group` (sharing `storage`) with one scan of the root's metadata; returns each
/// one's result in order. Holds each instance's sweep lock throughout.
fn sweep_group(storage: &CheckpointStorage, group: &[&Inner]) -> Vec<Result<()>> {
    let _held: Vec<_> = group.iter().map(|i| i.sweep_lock.lock()).collect();
    let _span = tracing::debug_span!("checkpoint_sweep", instances = group.len()).entered();
    let mut results: Vec<Option<Result<()>>> = group.iter().map(|_| None).collect();
    let mut prepared = Vec::new();
    for (i, inner) in group.iter().enumerate() {
        match prepare(inner) {
            Ok(p) => prepared.push((i, p)),
            Err(e) => results[i] = Some(Err(e)),
        }
    }
    if !prepared.is_empty() {
        match super::scan::referenced_objects(storage) {
            // A metadata file that does not decode: what it references is unknown, so nothing is deleted.
            Ok(None) => {
                for (i, _) in &prepared {
                    results[*i] = Some(Ok(()));
                }
            }
            Ok(Some(live)) => {
                for (i, p) in &prepared {
                    results[*i] = Some(finish(p, &live));
                }
            }
            Err(e) => {
                let msg = e.to_string();
                let mut first = Some(e);
                for (i, _) in &prepared {
                    results[*i] = Some(Err(first
                        .take()
                        .unwrap_or_else(|| Error::from(CheckpointError::Invalid(msg.clone())))));
                }
            }
        }
    }
    let out: Vec<Result<()>> = results.into_iter().map(|r| r.unwrap_or(Ok(()))).collect();
    for (inner, r) in group.iter().zip(&out) {
        inner.sweep.lock().record(r);
        if let Err(e) = r {
            tracing::warn!(instance = %inner.instance, "checkpoint sweep failed: {e}");
        }
    }
    out
}

/// Runs one instance's sweep now, on the calling thread.
pub(super) fn sweep_now(inner: &Inner) -> Result<()> {
    inner.sweep.lock().status.requested += 1;
    let mut r = sweep_group(&inner.storage, &[inner]);
    r.pop().unwrap_or(Ok(()))
}

/// A queued sweep.
struct Job {
    inner: Arc<Inner>,
    due: Instant,
}

#[derive(Default)]
struct Queue {
    jobs: Vec<Job>,
    /// The sweeper thread is running.
    started: bool,
    /// The storages (by address) whose sweeps are running.
    running: Vec<usize>,
}

struct Sweeper {
    queue: Mutex<Queue>,
    wake: Condvar,
    /// Signalled whenever sweeps finish.
    done: Condvar,
}

/// The address of a storage, to tell storages apart.
fn addr(s: &CheckpointStorage) -> usize {
    std::ptr::from_ref(s) as usize
}

/// Waits until no sweep of a checkpointer on `storage` is running or due: every sweep that confirmations
/// and aborts queued so far has run (or failed; failed ones are retried later, not waited for here). For
/// a host that stops, and for tests.
pub fn wait_for_sweeps(storage: &CheckpointStorage) {
    let s = sweeper();
    let me = addr(storage);
    let mut q = s.queue.lock();
    loop {
        let now = Instant::now();
        let busy = q.running.contains(&me)
            || q.jobs
                .iter()
                .any(|j| addr(&j.inner.storage) == me && j.due <= now);
        if !busy {
            return;
        }
        s.done.wait_for(&mut q, Duration::from_millis(50));
    }
}

fn sweeper() -> &'static Sweeper {
    static S: OnceLock<Sweeper> = OnceLock::new();
    S.get_or_init(|| Sweeper {
        queue: Mutex::new(Queue::default()),
        wake: Condvar::new(),
        done: Condvar::new(),
    })
}

/// Queues a sweep of `inner` for the process's sweeper (now), starting the sweeper if needed. If the
/// sweeper thread cannot start, the sweep runs on the calling thread.
pub(super) fn request(inner: &Arc<Inner>) {
    {
        let mut st = inner.sweep.lock();
        st.status.requested += 1;
        st.status.pending = true;
    }
    enqueue(inner, Instant::now());
}

fn enqueue(inner: &Arc<Inner>, due: Instant) {
    let s = sweeper();
    let mut q = s.queue.lock();
    {
        let mut st = inner.sweep.lock();
        if st.queued {
            if let Some(j) = q.jobs.iter_mut().find(|j| Arc::ptr_eq(&j.inner, inner)) {
                j.due = j.due.min(due);
            }
            drop(st);
            s.wake.notify_one();
            return;
        }
        st.queued = true;
    }
    q.jobs.push(Job {
        inner: Arc::clone(inner),
        due,
    });
    if !q.started {
        let spawned = std::thread::Builder::new()
            .name("ckpt-sweep".into())
            .spawn(run_sweeper);
        match spawned {
            Ok(_) => q.started = true,
            Err(e) => {
                tracing::warn!(
                    "the checkpoint sweeper thread did not start ({e}): sweeping inline"
                );
                let jobs = std::mem::take(&mut q.jobs);
                drop(q);
                run_jobs(jobs);
                return;
            }
        }
    }
    drop(q);
    s.wake.notify_one();
}

fn run_sweeper() {
    let s = sweeper();
    loop {
        let due = {
            let mut q = s.queue.lock();
            loop {
                let now = Instant::now();
                if q.jobs.iter().any(|j| j.due <= now) {
                    break;
                }
                match q.jobs.iter().map(|j| j.due).min() {
                    Some(next) => {
                        s.wake.wait_until(&mut q, next);
                    }
                    None => s.wake.wait(&mut q),
                }
            }
            let now = Instant::now();
            let (due, later): (Vec<Job>, Vec<Job>) = std::mem::take(&mut q.jobs)
                .into_iter()
                .partition(|j| j.due <= now);
            q.jobs = later;
            for j in &due {
                j.inner.sweep.lock().queued = false;
                q.running.push(addr(&j.inner.storage));
            }
            due
        };
        let ran: Vec<usize> = due.iter().map(|j| addr(&j.inner.storage)).collect();
        run_jobs(due);
        let mut q = s.queue.lock();
        for a in ran {
            if let Some(i) = q.running.iter().position(|r| *r == a) {
                q.running.swap_remove(i);
            }
        }
        drop(q);
        s.done.notify_all();
    }
}

/// Runs `jobs`, those sharing a storage on one scan; failures of checkpointers still in use are queued
/// again after a delay.
fn run_jobs(jobs: Vec<Job>) {
    let mut groups: Vec<(Arc<CheckpointStorage>, Vec<Arc<Inner>>)> = Vec::new();
    for j in jobs {
        match groups
            .iter_mut()
            .find(|(s, _)| Arc::ptr_eq(s, &j.inner.storage))
        {
            Some((_, g)) => g.push(j.inner),
            None => groups.push((Arc::clone(&j.inner.storage), vec![j.inner])),
        }
    }
    for (storage, group) in groups {
        let refs: Vec<&Inner> = group.iter().map(|i| &**i).collect();
        let results = sweep_group(&storage, &refs);
        for (inner, r) in group.iter().zip(results) {
            let retry = {
                let mut st = inner.sweep.lock();
                // Retried while the checkpointer (or a checkpoint of it) is in use, unless fenced.
                let retry = r.is_err() && !st.status.fenced && Arc::strong_count(inner) > 1;
                st.status.pending = st.queued || retry;
                retry.then_some(st.status.consecutive_failures)
            };
            if let Some(n) = retry {
                let shift = u32::try_from(n.saturating_sub(1).min(16)).unwrap_or(16);
                let delay = SWEEP_RETRY_FIRST
                    .saturating_mul(1u32 << shift)
                    .min(SWEEP_RETRY_MAX);
                enqueue(inner, Instant::now() + delay);
            }
        }
    }
}
