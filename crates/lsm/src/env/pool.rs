//! The background pool: a fixed set of threads running the flush and compaction jobs of every engine of an
//! environment ([`SharedEnv`](super::SharedEnv)).
//!
//! Scheduling: an engine asks for a job of a kind ([`JobKind`]) whenever it may have work of that kind; a
//! request for a job already queued is a no-op, so requests coalesce. Workers take flushes before
//! compactions, each kind in request order; an engine whose job finds more work is queued again at the back,
//! so engines take turns: one busy engine gets one job per turn and cannot starve the others, except that a
//! compaction whose engine's writes wait for it (L0 at its stop trigger) is taken first. At most one job
//! of each kind runs per engine at a time (a flush installs memtables oldest first; compactions of one engine
//! are serialized by its compaction lock anyway). With two threads or more, compactions occupy at most all
//! threads but one, so a flush never waits for a compaction to end (RocksDB keeps flushes in a pool of their
//! own, `Env::Priority::HIGH`, for the same reason). And a flush does not wait for that one thread either:
//! a running compaction looks at the flush queue every few thousand entries it merges and, when a flush
//! is queued, runs it there and then on its own thread ([`PoolShared::run_queued_flushes`]) before it goes
//! on, so that flushes, which free memory writers may be waiting for, take every thread when they need it.
//!
//! A job runs [`BackgroundWork`], which the engine implements: the pool knows nothing of databases. The pool
//! holds engines weakly; [`Pool::deregister`] removes one and waits for its running jobs.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Instant;

use hashbrown::HashMap;
use parking_lot::{Condvar, Mutex};

/// A job taken from the queues: the engine's id, the kind and the engine.
type Job = (u64, JobKind, Arc<dyn BackgroundWork>);

/// The two kinds of background job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum JobKind {
    /// Write the oldest immutable memtable to L0.
    Flush,
    /// Run one automatic compaction.
    Compaction,
}

/// What an engine does on a pool thread. Each call does one unit of work and returns whether more of the
/// same kind is waiting (the engine is then queued again, behind the others).
pub(crate) trait BackgroundWork: Send + Sync {
    /// Flushes one immutable memtable, if any.
    fn flush_job(&self) -> bool;
    /// Runs one automatic compaction, if one is due.
    fn compaction_job(&self) -> bool;
    /// Whether the engine's writer waits for a compaction (L0 at its stop trigger): its compaction is then
    /// taken before those of engines whose writers still write. Read under the pool's lock: no locking.
    fn writes_wait_for_compaction(&self) -> bool {
        false
    }
    /// Bytes of the memtable taking writes (for the write-buffer manager's choice of the largest), or 0
    /// when switching it would not help (empty, or its engine's flushes are behind).
    fn active_memtable_bytes(&self) -> usize;
    /// Switches the memtable taking writes out, to free memory: at once when its writer is idle, else by
    /// asking the writer (its next write does it).
    fn switch_for_memory(&self);
}

/// An engine's registration, by id.
struct Slot {
    work: Weak<dyn BackgroundWork>,
    /// Queued or running, per kind ([`JobKind`] as index).
    queued: [bool; 2],
    running: [bool; 2],
    /// Being deregistered: no job of it is queued or started again.
    closing: bool,
}

#[derive(Default)]
struct Sched {
    slots: HashMap<u64, Slot>,
    queues: [VecDeque<u64>; 2],
    running_compactions: usize,
    shutdown: bool,
}

/// Job counts and times, for the environment's statistics.
#[derive(Default)]
pub(crate) struct PoolCounters {
    /// Flush jobs run.
    pub flush_jobs: AtomicU64,
    /// Compaction jobs run.
    pub compaction_jobs: AtomicU64,
    /// Microseconds the pool's threads spent in jobs.
    pub busy_micros: AtomicU64,
    /// Microseconds requests waited in the flush queue before a thread took them (summed).
    pub flush_queue_micros: AtomicU64,
    /// Flush jobs run by a thread in the middle of a compaction ([`PoolShared::run_queued_flushes`]).
    pub flushes_in_compactions: AtomicU64,
}

pub(crate) struct PoolShared {
    sched: Mutex<Sched>,
    /// Workers wait here for requests; `deregister` waits here for running jobs to end.
    cv: Condvar,
    /// Compactions running at once, at most.
    max_compactions: usize,
    next_id: AtomicU64,
    pub counters: PoolCounters,
    /// When each queued flush was requested (for `flush_queue_micros`).
    flush_requested_at: Mutex<HashMap<u64, Instant>>,
    /// Engines in the flush queue (its length, kept beside it so that compactions read it without the lock).
    queued_flushes: AtomicUsize,
}

impl JobKind {
    fn index(self) -> usize {
        match self {
            JobKind::Flush => 0,
            JobKind::Compaction => 1,
        }
    }
}

/// How the pool's threads run: count, nice increment, `SCHED_BATCH`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PoolConfig {
    pub threads: usize,
    pub nice: i32,
    pub batch_policy: bool,
}

/// The pool: its shared scheduling state and its threads (joined on drop).
pub(crate) struct Pool {
    shared: Arc<PoolShared>,
    threads: Vec<JoinHandle<()>>,
    config: PoolConfig,
}

impl Pool {
    /// Starts `config.threads` (at least 1) threads named `lsm-bg-<n>`.
    pub fn start(config: PoolConfig) -> std::io::Result<Pool> {
        let threads = config.threads.max(1);
        let shared = Arc::new(PoolShared {
            sched: Mutex::new(Sched::default()),
            cv: Condvar::new(),
            max_compactions: threads.saturating_sub(1).max(1),
            next_id: AtomicU64::new(1),
            counters: PoolCounters::default(),
            flush_requested_at: Mutex::new(HashMap::new()),
            queued_flushes: AtomicUsize::new(0),
        });
        let mut pool = Pool {
            shared,
            threads: Vec::with_capacity(threads),
            config: PoolConfig { threads, ..config },
        };
        for n in 0..threads {
            let shared = Arc::clone(&pool.shared);
            let handle = std::thread::Builder::new()
                .name(format!("lsm-bg-{n}"))
                .spawn(move || {
                    if config.batch_policy {
                        use_batch_policy();
                    }
                    lower_thread_priority(config.nice);
                    shared.work_loop()
                })?;
            pool.threads.push(handle);
        }
        Ok(pool)
    }

    /// The shared state engines keep to ask for jobs.
    pub fn shared(&self) -> &Arc<PoolShared> {
        &self.shared
    }

    /// How the threads run.
    pub fn config(&self) -> PoolConfig {
        self.config
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shared.sched.lock().shutdown = true;
        self.shared.cv.notify_all();
        let me = std::thread::current().id();
        for t in self.threads.drain(..) {
            // Never join oneself (the last handle dropped by a job: not expected, but never a deadlock).
            if t.thread().id() != me {
                let _ = t.join();
            }
        }
    }
}

impl PoolShared {
    /// Registers an engine; returns its id for [`request`](Self::request) and
    /// [`deregister`](Self::deregister).
    pub fn register(&self, work: Weak<dyn BackgroundWork>) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.sched.lock().slots.insert(
            id,
            Slot {
                work,
                queued: [false; 2],
                running: [false; 2],
                closing: false,
            },
        );
        id
    }

    /// Asks for a job of `kind` for engine `id` (nothing if one is queued already, or the engine is gone).
    pub fn request(&self, id: u64, kind: JobKind) {
        let k = kind.index();
        {
            let mut s = self.sched.lock();
            let Some(slot) = s.slots.get_mut(&id) else {
                return;
            };
            if slot.queued[k] || slot.closing {
                return;
            }
            slot.queued[k] = true;
            s.queues[k].push_back(id);
            self.note_queues(&s);
        }
        if kind == JobKind::Flush {
            self.flush_requested_at
                .lock()
                .entry(id)
                .or_insert_with(Instant::now);
        }
        self.cv.notify_one();
    }

    /// Removes engine `id`: no job of it starts from now on, and this returns once its running jobs ended.
    pub fn deregister(&self, id: u64) {
        let mut s = self.sched.lock();
        for q in s.queues.iter_mut() {
            q.retain(|x| *x != id);
        }
        self.note_queues(&s);
        if let Some(slot) = s.slots.get_mut(&id) {
            slot.closing = true;
            slot.queued = [false; 2];
        }
        while s
            .slots
            .get(&id)
            .is_some_and(|slot| slot.running.iter().any(|r| *r))
        {
            self.cv.wait(&mut s);
        }
        s.slots.remove(&id);
        drop(s);
        self.flush_requested_at.lock().remove(&id);
    }

    /// Records the flush queue's length for [`run_queued_flushes`](Self::run_queued_flushes).
    fn note_queues(&self, s: &Sched) {
        self.queued_flushes
            .store(s.queues[JobKind::Flush.index()].len(), Ordering::Relaxed);
    }

    /// Takes the next job of `kinds`, in that order: a flush of the first queued engine not flushing, a
    /// compaction (below the compaction limit) of the first queued engine not compacting. Marks it running.
    fn next_job(&self, s: &mut Sched, kinds: &[JobKind]) -> Option<Job> {
        let job = self.take_job(s, kinds);
        self.note_queues(s);
        job
    }

    fn take_job(&self, s: &mut Sched, kinds: &[JobKind]) -> Option<Job> {
        for &kind in kinds {
            let k = kind.index();
            if kind == JobKind::Compaction && s.running_compactions >= self.max_compactions {
                continue;
            }
            // A compaction whose engine's writes wait for it goes first (then the queue's order). The
            // engine reference taken here is never the last: a registered engine's handle lives until its
            // `deregister`, which waits for this lock.
            if kind == JobKind::Compaction {
                let stopped = s.queues[k].iter().position(|id| {
                    s.slots.get(id).is_some_and(|slot| {
                        !slot.running[k]
                            && slot
                                .work
                                .upgrade()
                                .is_some_and(|w| w.writes_wait_for_compaction())
                    })
                });
                if let Some(i) = stopped {
                    if let Some(id) = s.queues[k].remove(i) {
                        s.queues[k].push_front(id);
                    }
                }
            }
            let mut i = 0;
            while i < s.queues[k].len() {
                let id = s.queues[k][i];
                let Some(slot) = s.slots.get_mut(&id) else {
                    s.queues[k].remove(i);
                    continue;
                };
                if slot.running[k] {
                    i += 1;
                    continue;
                }
                s.queues[k].remove(i);
                slot.queued[k] = false;
                let Some(work) = slot.work.upgrade() else {
                    continue;
                };
                slot.running[k] = true;
                if kind == JobKind::Compaction {
                    s.running_compactions += 1;
                }
                return Some((id, kind, work));
            }
        }
        None
    }

    fn work_loop(&self) {
        let mut s = self.sched.lock();
        loop {
            if s.shutdown {
                return;
            }
            let Some(job) = self.next_job(&mut s, &[JobKind::Flush, JobKind::Compaction]) else {
                self.cv.wait(&mut s);
                continue;
            };
            drop(s);
            s = self.run_job(job);
        }
    }

    /// Runs the queued flushes that no thread runs yet, one after another, on the calling thread: what a
    /// compaction job calls between the entries it merges, so that a flush never waits for a compaction to
    /// end (see the module documentation). Cheap when none is queued (one atomic load). Returns how many ran.
    pub fn run_queued_flushes(&self) -> usize {
        if self.queued_flushes.load(Ordering::Relaxed) == 0 {
            return 0;
        }
        let mut ran = 0;
        let start = Instant::now();
        let mut s = self.sched.lock();
        while !s.shutdown {
            let Some(job) = self.next_job(&mut s, &[JobKind::Flush]) else {
                break;
            };
            drop(s);
            s = self.run_job(job);
            ran += 1;
        }
        drop(s);
        if ran > 0 {
            self.counters
                .flushes_in_compactions
                .fetch_add(ran as u64, Ordering::Relaxed);
            // The calling job counts this time as its own when it ends; the flushes counted it already.
            let nested = u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX);
            let _ =
                self.counters
                    .busy_micros
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| {
                        Some(b.saturating_sub(nested))
                    });
        }
        ran
    }

    /// Runs a job taken by [`next_job`](Self::next_job), then takes the lock again and records its end
    /// (queueing its engine again when the job found more work); returns the lock.
    fn run_job(&self, (id, kind, work): Job) -> parking_lot::MutexGuard<'_, Sched> {
        if kind == JobKind::Flush {
            if let Some(t) = self.flush_requested_at.lock().remove(&id) {
                let waited = u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX);
                self.counters
                    .flush_queue_micros
                    .fetch_add(waited, Ordering::Relaxed);
            }
        }
        let start = Instant::now();
        let more = match kind {
            JobKind::Flush => work.flush_job(),
            JobKind::Compaction => work.compaction_job(),
        };
        let busy = u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.counters.busy_micros.fetch_add(busy, Ordering::Relaxed);
        match kind {
            JobKind::Flush => &self.counters.flush_jobs,
            JobKind::Compaction => &self.counters.compaction_jobs,
        }
        .fetch_add(1, Ordering::Relaxed);
        // The job's engine reference goes before the lock is taken again: it may be the last one.
        drop(work);
        let mut s = self.sched.lock();
        let k = kind.index();
        if kind == JobKind::Compaction {
            s.running_compactions -= 1;
        }
        let requeue = match s.slots.get_mut(&id) {
            Some(slot) => {
                slot.running[k] = false;
                more && !slot.queued[k] && !slot.closing
            }
            None => false,
        };
        if requeue {
            if let Some(slot) = s.slots.get_mut(&id) {
                slot.queued[k] = true;
            }
            s.queues[k].push_back(id);
            self.note_queues(&s);
        }
        // Wakes `deregister` waiting for this job, and a worker for the job requeued or left waiting
        // behind the compaction limit.
        self.cv.notify_all();
        s
    }

    /// The engines registered and still alive, with their ids.
    pub fn engines(&self) -> Vec<(u64, Arc<dyn BackgroundWork>)> {
        let s = self.sched.lock();
        s.slots
            .iter()
            .filter(|(_, slot)| !slot.closing)
            .filter_map(|(id, slot)| slot.work.upgrade().map(|w| (*id, w)))
            .collect()
    }

    /// Jobs queued now (flushes, compactions).
    pub fn queued(&self) -> (usize, usize) {
        let s = self.sched.lock();
        (s.queues[0].len(), s.queues[1].len())
    }
}

/// Moves the calling thread to `SCHED_BATCH`, keeping its nice value (Linux; elsewhere, or if the kernel
/// refuses, the thread keeps its policy: this only affects scheduling, never correctness). The scheduler
/// does not let a waking batch thread preempt the running one.
fn use_batch_policy() {
    #[cfg(target_os = "linux")]
    {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: `param` is a valid sched_param for the duration of the call; pid 0 is the calling thread.
        unsafe {
            libc::sched_setscheduler(0, libc::SCHED_BATCH, &param);
        }
    }
}

/// Raises the calling thread's nice value by `increment` (Linux; elsewhere, or if the kernel refuses, the
/// thread keeps its priority: this only affects scheduling, never correctness).
fn lower_thread_priority(increment: i32) {
    #[cfg(target_os = "linux")]
    if increment > 0 {
        // SAFETY: plain system calls on the calling thread, with no pointers.
        unsafe {
            let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
            let current = libc::getpriority(libc::PRIO_PROCESS, tid);
            libc::setpriority(
                libc::PRIO_PROCESS,
                tid,
                current.saturating_add(increment).min(19),
            );
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = increment;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    /// An engine whose jobs are logged; `busy` flush jobs always find more work.
    struct Fake {
        name: u8,
        busy: bool,
        /// What `writes_wait_for_compaction` says.
        stalled: std::sync::atomic::AtomicBool,
        flushes: AtomicUsize,
        compactions: AtomicUsize,
        log: Arc<Mutex<Vec<(u8, JobKind)>>>,
    }

    impl BackgroundWork for Fake {
        fn flush_job(&self) -> bool {
            self.log.lock().push((self.name, JobKind::Flush));
            std::thread::sleep(Duration::from_millis(1));
            self.flushes.fetch_add(1, Ordering::SeqCst) < 50 && self.busy
        }
        fn compaction_job(&self) -> bool {
            self.log.lock().push((self.name, JobKind::Compaction));
            std::thread::sleep(Duration::from_millis(1));
            self.compactions.fetch_add(1, Ordering::SeqCst) < 50 && self.busy
        }
        fn writes_wait_for_compaction(&self) -> bool {
            self.stalled.load(Ordering::SeqCst)
        }
        fn active_memtable_bytes(&self) -> usize {
            0
        }
        fn switch_for_memory(&self) {}
    }

    fn fake(name: u8, busy: bool, log: &Arc<Mutex<Vec<(u8, JobKind)>>>) -> Arc<Fake> {
        Arc::new(Fake {
            name,
            busy,
            stalled: std::sync::atomic::AtomicBool::new(false),
            flushes: AtomicUsize::new(0),
            compactions: AtomicUsize::new(0),
            log: Arc::clone(log),
        })
    }

    fn register(pool: &Pool, f: &Arc<Fake>) -> u64 {
        let weak: Weak<Fake> = Arc::downgrade(f);
        let work: Weak<dyn BackgroundWork> = weak;
        pool.shared().register(work)
    }

    fn wait_until(cond: impl Fn() -> bool) {
        for _ in 0..2000 {
            if cond() {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        panic!("condition not reached in 10 s");
    }

    #[test]
    fn a_busy_engine_takes_turns_so_another_engines_flush_runs_next() {
        let pool = Pool::start(PoolConfig {
            threads: 1,
            nice: 0,
            batch_policy: false,
        })
        .unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let (busy, quiet) = (fake(1, true, &log), fake(2, false, &log));
        let (b, q) = (register(&pool, &busy), register(&pool, &quiet));
        pool.shared().request(b, JobKind::Flush);
        wait_until(|| busy.flushes.load(Ordering::SeqCst) >= 3);
        let at_request = log.lock().iter().filter(|e| e.0 == 1).count();
        pool.shared().request(q, JobKind::Flush);
        wait_until(|| quiet.flushes.load(Ordering::SeqCst) == 1);
        // The quiet engine's flush ran at the busy engine's next turn: at most the busy job running at the
        // request started between the request and it.
        let log = log.lock().clone();
        let at = log.iter().position(|e| *e == (2, JobKind::Flush)).unwrap();
        let busy_before = log[..at].iter().filter(|e| e.0 == 1).count();
        assert!(busy_before <= at_request + 1, "{log:?}");
        pool.shared().deregister(b);
        pool.shared().deregister(q);
    }

    #[test]
    fn flushes_go_before_compactions_and_one_thread_stays_free_for_them() {
        let pool = Pool::start(PoolConfig {
            threads: 2,
            nice: 0,
            batch_policy: false,
        })
        .unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let engines: Vec<_> = (0..4).map(|n| fake(n, true, &log)).collect();
        let ids: Vec<u64> = engines.iter().map(|e| register(&pool, e)).collect();
        // Compactions of every engine, then one flush: the flush runs before the queued compactions end.
        for id in &ids {
            pool.shared().request(*id, JobKind::Compaction);
        }
        wait_until(|| engines[0].compactions.load(Ordering::SeqCst) >= 2);
        let before = log.lock().len();
        pool.shared().request(ids[3], JobKind::Flush);
        wait_until(|| engines[3].flushes.load(Ordering::SeqCst) >= 1);
        let log_now = log.lock().clone();
        let at = log_now.iter().position(|e| e.1 == JobKind::Flush).unwrap();
        assert!(
            at <= before + 2,
            "flush waited behind compactions: {log_now:?}"
        );
        // Never more than one compaction at a time with two threads (one kept for flushes).
        assert_eq!(pool.shared().max_compactions, 1);
        for id in ids {
            pool.shared().deregister(id);
        }
    }

    /// An engine whose compaction job lasts until `stop`, looking at the flush queue every millisecond as
    /// the engine's compactions do.
    struct LongCompaction {
        pool: Arc<PoolShared>,
        stop: std::sync::atomic::AtomicBool,
        flushes_seen_inside: AtomicUsize,
    }

    impl BackgroundWork for LongCompaction {
        fn flush_job(&self) -> bool {
            false
        }
        fn compaction_job(&self) -> bool {
            for _ in 0..10_000 {
                if self.stop.load(Ordering::SeqCst) {
                    break;
                }
                let ran = self.pool.run_queued_flushes();
                self.flushes_seen_inside.fetch_add(ran, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(1));
            }
            false
        }
        fn active_memtable_bytes(&self) -> usize {
            0
        }
        fn switch_for_memory(&self) {}
    }

    #[test]
    fn a_flush_queued_behind_a_running_compaction_runs_on_the_compactions_thread() {
        let pool = Pool::start(PoolConfig {
            threads: 1,
            nice: 0,
            batch_policy: false,
        })
        .unwrap();
        let long = Arc::new(LongCompaction {
            pool: Arc::clone(pool.shared()),
            stop: std::sync::atomic::AtomicBool::new(false),
            flushes_seen_inside: AtomicUsize::new(0),
        });
        let weak: Weak<LongCompaction> = Arc::downgrade(&long);
        let work: Weak<dyn BackgroundWork> = weak;
        let c = pool.shared().register(work);
        let log = Arc::new(Mutex::new(Vec::new()));
        let other = fake(2, false, &log);
        let o = register(&pool, &other);
        pool.shared().request(c, JobKind::Compaction);
        wait_until(|| pool.shared().queued() == (0, 0));
        // The only thread is in the compaction; the flush runs there, before the compaction ends.
        pool.shared().request(o, JobKind::Flush);
        wait_until(|| other.flushes.load(Ordering::SeqCst) == 1);
        wait_until(|| long.flushes_seen_inside.load(Ordering::SeqCst) == 1);
        let counters = &pool.shared().counters;
        wait_until(|| counters.flushes_in_compactions.load(Ordering::SeqCst) == 1);
        assert_eq!(
            counters.compaction_jobs.load(Ordering::SeqCst),
            0,
            "still compacting"
        );
        long.stop.store(true, Ordering::SeqCst);
        pool.shared().deregister(c);
        pool.shared().deregister(o);
    }

    #[test]
    fn the_compaction_of_an_engine_whose_writes_wait_for_it_goes_first() {
        let pool = Pool::start(PoolConfig {
            threads: 1,
            nice: 0,
            batch_policy: false,
        })
        .unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let engines: Vec<_> = (0..4).map(|n| fake(n, false, &log)).collect();
        let ids: Vec<u64> = engines.iter().map(|e| register(&pool, e)).collect();
        // Hold the only thread with engine 0's flush while compactions of 1, 2 and 3 queue, in that order;
        // engine 3's writes wait for its compaction.
        let hold = Arc::new(Mutex::new(()));
        let guard = hold.lock();
        let blocker = Arc::new(Blocker(Arc::clone(&hold)));
        let weak: Weak<Blocker> = Arc::downgrade(&blocker);
        let work: Weak<dyn BackgroundWork> = weak;
        let b = pool.shared().register(work);
        pool.shared().request(b, JobKind::Flush);
        wait_until(|| pool.shared().queued() == (0, 0));
        engines[3].stalled.store(true, Ordering::SeqCst);
        for id in &ids[1..] {
            pool.shared().request(*id, JobKind::Compaction);
        }
        drop(guard);
        wait_until(|| log.lock().len() == 3);
        let order: Vec<u8> = log.lock().iter().map(|e| e.0).collect();
        assert_eq!(order, vec![3, 1, 2]);
        pool.shared().deregister(b);
        for id in ids {
            pool.shared().deregister(id);
        }
    }

    /// A flush job that lasts until its lock is free.
    struct Blocker(Arc<Mutex<()>>);

    impl BackgroundWork for Blocker {
        fn flush_job(&self) -> bool {
            drop(self.0.lock());
            false
        }
        fn compaction_job(&self) -> bool {
            false
        }
        fn active_memtable_bytes(&self) -> usize {
            0
        }
        fn switch_for_memory(&self) {}
    }

    #[test]
    fn deregister_waits_for_running_jobs_and_nothing_of_the_engine_runs_after() {
        let pool = Pool::start(PoolConfig {
            threads: 2,
            nice: 0,
            batch_policy: false,
        })
        .unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let e = fake(7, true, &log);
        let id = register(&pool, &e);
        pool.shared().request(id, JobKind::Flush);
        pool.shared().request(id, JobKind::Compaction);
        wait_until(|| e.flushes.load(Ordering::SeqCst) >= 2);
        pool.shared().deregister(id);
        let n = log.lock().len();
        pool.shared().request(id, JobKind::Flush);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(log.lock().len(), n, "a job ran after deregister");
    }
}
