//! Incremental checkpoints of every backend (`design/checkpoints.md`), printed as tables.
//!
//! Setup: `KS_CKPT_BENCH_KEYS` keys (default 1,000,000; `KS_CKPT_BENCH_KEYS=10000000` for the 10M run,
//! about 1.1 GB of entries) on the LSM backend and (built with `--features rocksdb`) the RocksDB variant,
//! and `KS_CKPT_BENCH_HEAP_KEYS` (default the smaller of 1,000,000 and the keys) on the heap backend; `i64`
//! keys (`LongSerializer`) with one 100-byte value each (`BytesSerializer`, random bytes of a 16-symbol
//! alphabet), max parallelism 128, default options, written through `KeyedStateStore` puts. Checkpoint
//! root: a local directory (objects holding one file are hard-linked on restore; packs are read by range).
//! `KS_CKPT_BENCH_BACKENDS` (comma-separated: `lsm,heap,rocksdb`) picks the backends.
//!
//! Per backend:
//! 1. Checkpoints: the first (full), then after 1 % and after 10 % of the keys changed since the last
//!    confirmed one: bytes written (data objects and metadata), as a ratio to the bytes of the files that
//!    are new since the last checkpoint and to the raw bytes of the changed entries; the synchronous part
//!    (`KeyedStateStore::checkpoint`); the asynchronous part (`PendingCheckpoint::run`).
//! 2. 50 checkpoints, each after 1 % of the keys changed, retain 3: objects and bytes in storage after them,
//!    median and largest synchronous part, median asynchronous part.
//! 3. Restore at the same parallelism; rescale 1 -> 2 and 2 -> 1. The LSM backend adopts files
//!    (`restore_lsm_temp`), and the same rescale is also done Flink's way on it (open each old instance, copy the
//!    new range's entries into a fresh store); the RocksDB variant restores as Flink's RocksDB backend does
//!    (`restore_rocksdb`: open the old database, clip it, copy the other instances' ranges in); the heap
//!    backend reads the tables of its key groups (`restore_heap`).
//!    The first checkpoint of the two halves of the 1 -> 2 rescale, restored in no-claim and in claim mode:
//!    files and bytes it uploads.
//!    On the LSM backend also 1 -> 2 -> 1: the halves of the first rescale, 1 % changed and checkpointed,
//!    restored into one instance (the second step timed; `instances copied` says whether `restore_lsm_temp`
//!    adopted both or copied one).
//! 4. The yardstick: LSM adoption against the RocksDB variant's Flink restore, same keys, same run.
//!
//! Times are wall-clock (`Instant`), one run each: the machine is shared, note its load beside the numbers.
//!
//! Run: `cargo bench --bench checkpoints` (with `--features rocksdb` for the RocksDB variant).

use std::sync::Arc;
use std::time::{Duration, Instant};

use keyed_state::backend::heap::HeapBackend;
use keyed_state::backend::lsm::LsmBackend;
use keyed_state::backend::{BackendConfig, EngineHandle, StateBackend};
use keyed_state::checkpoint::{
    restore_heap, restore_lsm_temp, CheckpointOptions, CheckpointStorage, CheckpointSummary,
    Checkpointer, RestoreInfo, RestoreMode,
};
use keyed_state::keygroup::{key_group_range_for_operator, KeyGroupRange};
use keyed_state::serializer::{BytesSerializer, LongSerializer};
use keyed_state::state::{KeyedStateStore, ValueState, ValueStateDescriptor};
use keyed_state_lsm::Options;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const MAX_P: u32 = 128;
const VALUE_LEN: usize = 100;
/// Raw bytes of one entry: 8-byte key, 100-byte value.
const ENTRY_BYTES: u64 = 8 + VALUE_LEN as u64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Lsm,
    Heap,
    #[cfg(feature = "rocksdb")]
    RocksDb,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Lsm => "lsm",
            Kind::Heap => "heap",
            #[cfg(feature = "rocksdb")]
            Kind::RocksDb => "rocksdb",
        }
    }
}

struct Instance {
    store: KeyedStateStore<LongSerializer>,
    state: ValueState<BytesSerializer>,
    engine: Option<Box<dyn EngineHandle>>,
    ck: Checkpointer,
    range: KeyGroupRange,
}

/// A fresh backend of `kind` and its engine handle.
fn backend(
    kind: Kind,
    cfg: BackendConfig,
) -> (Box<dyn StateBackend>, Option<Box<dyn EngineHandle>>) {
    match kind {
        Kind::Lsm => {
            let b = LsmBackend::temp_with(cfg, lsm_options()).expect("backend");
            let e: Box<dyn EngineHandle> = Box::new(b.engine());
            (Box::new(b), Some(e))
        }
        Kind::Heap => (Box::new(HeapBackend::new(cfg).expect("backend")), None),
        #[cfg(feature = "rocksdb")]
        Kind::RocksDb => {
            let b =
                keyed_state::backend::rocksdb::RocksDbBackend::temporary(cfg, Default::default())
                    .expect("backend");
            let e: Box<dyn EngineHandle> = Box::new(b.engine());
            (Box::new(b), Some(e))
        }
    }
}

/// Restores `target` of checkpoint `id` on `kind`: (backend, files taken: engine files or heap tables,
/// instances copied).
fn restore(
    kind: Kind,
    storage: &CheckpointStorage,
    id: u64,
    target: KeyGroupRange,
) -> (Box<dyn StateBackend>, usize, usize) {
    let (b, i) = restore_reported(kind, storage, id, target);
    (b, i.files_adopted + i.tables_read, i.copied.len())
}

/// Restores `target` of checkpoint `id` on `kind`, with the restore's report.
fn restore_reported(
    kind: Kind,
    storage: &CheckpointStorage,
    id: u64,
    target: KeyGroupRange,
) -> (Box<dyn StateBackend>, RestoreInfo) {
    match kind {
        Kind::Lsm => {
            let (b, i) =
                restore_lsm_temp(storage, id, config(target), lsm_options()).expect("restore");
            (Box::new(b), i)
        }
        Kind::Heap => {
            let (b, i) = restore_heap(storage, id, config(target)).expect("restore");
            (Box::new(b), i)
        }
        #[cfg(feature = "rocksdb")]
        Kind::RocksDb => {
            let (b, i) = keyed_state::checkpoint::restore_rocksdb(
                storage,
                id,
                config(target),
                Default::default(),
            )
            .expect("restore");
            (Box::new(b), i)
        }
    }
}

/// The first checkpoint of both halves restored from checkpoint `last` by a 1 -> 2 rescale, in each restore
/// mode, before any write: what it uploads. Aborted afterwards (checkpoint `last` stays, and the claim
/// markers are removed), so the steps after it see the root as before.
fn first_checkpoint_after_rescale_rows(
    kind: Kind,
    storage: &Arc<CheckpointStorage>,
    last: u64,
    halves: &[KeyGroupRange],
) {
    println!();
    println!("| first checkpoint after rescale 1 -> 2 (both halves) | files new | files reused | bytes written | state size | async ms |");
    println!("|---|---|---|---|---|---|");
    let id = last + 1000;
    for (label, mode) in [
        ("no-claim", RestoreMode::NoClaim),
        ("claim", RestoreMode::Claim),
    ] {
        let (mut new, mut reused, mut bytes, mut state, mut async_ms) = (0, 0, 0, 0, 0.0);
        for h in halves {
            let (mut b, info) = restore_reported(kind, storage, last, *h);
            let ck = Checkpointer::open(
                Arc::clone(storage),
                &config(*h),
                CheckpointOptions::default(),
            )
            .expect("checkpointer");
            ck.restored_from(&info.parts, *h, mode)
                .expect("restored from");
            let s = ck
                .begin(id, &mut *b)
                .expect("sync part")
                .run()
                .expect("async part");
            ck.notify_aborted(id).expect("abort");
            new += s.files_new;
            reused += s.files_reused;
            bytes += s.bytes_written;
            state += s.state_size;
            async_ms += s.async_micros as f64 / 1e3;
        }
        println!("| {label} | {new} | {reused} | {bytes} | {state} | {async_ms:.1} |");
    }
    for (marker, _) in storage.list("claimed/").expect("list") {
        storage.delete(&marker).expect("delete");
    }
}

fn config(range: KeyGroupRange) -> BackendConfig {
    KeyedStateStore::config_for(&LongSerializer, MAX_P, range)
}

fn instance(
    kind: Kind,
    storage: &Arc<CheckpointStorage>,
    range: KeyGroupRange,
    retain: usize,
) -> Instance {
    let cfg = config(range);
    let (backend, engine) = backend(kind, cfg.clone());
    let mut store = KeyedStateStore::new(backend, LongSerializer).expect("store");
    let state = store
        .register_value(ValueStateDescriptor::new("payload", BytesSerializer))
        .expect("state");
    let ck = Checkpointer::open(
        Arc::clone(storage),
        &cfg,
        CheckpointOptions {
            retain,
            ..CheckpointOptions::default()
        },
    )
    .expect("checkpointer");
    Instance {
        store,
        state,
        engine,
        ck,
        range,
    }
}

fn value(rng: &mut StdRng) -> Vec<u8> {
    (0..VALUE_LEN)
        .map(|_| b"abcdefghijklmnop"[rng.random_range(0..16)])
        .collect()
}

impl Instance {
    fn owns(&self, k: i64) -> bool {
        self.range
            .contains(self.store.key_group_of(&k).expect("key group"))
    }
    fn put(&mut self, k: i64, v: &[u8]) {
        self.store.set_current_key(&k).expect("key");
        self.store
            .value(&self.state)
            .expect("state")
            .update(&v.to_vec())
            .expect("put");
    }
    fn settle(&self) {
        if let Some(e) = &self.engine {
            e.wait_for_background_work().expect("settle");
        }
    }
    fn summary(&self) -> String {
        self.engine
            .as_ref()
            .map_or_else(|| "in memory".to_string(), |e| e.summary())
    }
    /// Checkpoint `id`: (summary, synchronous part). Confirmed.
    fn checkpoint(&mut self, id: u64) -> (CheckpointSummary, Duration) {
        self.checkpoint_cpu(id).0
    }
    /// [`checkpoint`](Self::checkpoint) and the synchronous part's thread CPU time and run-queue wait (ms).
    fn checkpoint_cpu(&mut self, id: u64) -> ((CheckpointSummary, Duration), (f64, f64)) {
        let q = thread_runqueue_ms();
        let c = thread_cpu_ms();
        let start = monotonic_ns();
        let t = Instant::now();
        let p = self.store.checkpoint(&self.ck, id).expect("sync part");
        let sync = t.elapsed();
        let cpu = thread_cpu_ms() - c;
        let runq = thread_runqueue_ms() - q;
        if std::env::var_os("KS_CKPT_BENCH_TRACE").is_some() {
            // For `perf sched record -k mono`: where each synchronous part sits on the trace's clock.
            eprintln!(
                "sync-window id={id} tid={} start_ns={start} end_ns={}",
                // SAFETY: gettid has no preconditions.
                unsafe { libc::syscall(libc::SYS_gettid) },
                monotonic_ns()
            );
        }
        let s = p.run().expect("async part");
        self.ck.notify_complete(id).expect("confirm");
        ((s, sync), (cpu, runq))
    }
}

/// The LSM engine's options: the defaults, but `KS_CKPT_BENCH_BG_BATCH=0` turns
/// `Options::background_batch_policy` off (the A/B of `design/bench-results/2026-12-02-sched-batch/`).
fn lsm_options() -> Options {
    Options {
        background_batch_policy: std::env::var("KS_CKPT_BENCH_BG_BATCH").map_or(true, |v| v != "0"),
        ..Options::default()
    }
}

/// CPU time of the calling thread in ms (`CLOCK_THREAD_CPUTIME_ID`): the synchronous part's own work,
/// without the time a loaded machine keeps the thread (or a lock holder) off the CPU.
fn thread_cpu_ms() -> f64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID) as f64 * 1e-6
}

/// `CLOCK_MONOTONIC` in ns (the clock `perf record -k mono` stamps events with).
fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// `clock` in ns.
fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Time the calling thread has spent runnable but waiting for a CPU, in ms (the second field of
/// `/proc/thread-self/schedstat`; 0 where the file is missing). Wall time minus CPU time minus this is the
/// time the thread was blocked (a lock, I/O).
fn thread_runqueue_ms() -> f64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<f64>().ok())
        .map_or(0.0, |ns| ns * 1e-6)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn row(label: &str, changed: u64, s: &CheckpointSummary, sync: Duration) {
    let changed_bytes = changed * ENTRY_BYTES;
    println!(
        "| {label} | {} | {} | {} | {:.3} | {} | {} | {:.3} | {:.1} |",
        s.files_new,
        s.files_reused,
        s.bytes_written,
        s.bytes_written as f64 / s.bytes_new_files.max(1) as f64,
        if changed == 0 {
            "-".to_string()
        } else {
            format!("{:.2}", s.bytes_written as f64 / changed_bytes as f64)
        },
        s.state_size,
        ms(sync),
        s.async_micros as f64 / 1e3,
    );
}

fn change(inst: &mut [&mut Instance], keys: i64, n: u64, rng: &mut StdRng) {
    for _ in 0..n {
        let k = rng.random_range(0..keys);
        let v = value(rng);
        if let Some(i) = inst.iter_mut().find(|i| i.owns(k)) {
            i.put(k, &v);
        }
    }
}

/// Flink's rescale: every old instance of checkpoint `id` whose range meets `target` is opened at its own
/// range, and its entries in `target` are copied into a fresh store.
fn copy_restore(
    storage: &CheckpointStorage,
    id: u64,
    old: &[KeyGroupRange],
    target: KeyGroupRange,
) -> LsmBackend {
    let mut dst = LsmBackend::temp_with(config(target), lsm_options()).expect("backend");
    let mut registered = false;
    for r in old {
        let part = r.intersect(&target);
        if part.is_empty() {
            continue;
        }
        let (mut src, _) =
            restore_lsm_temp(storage, id, config(*r), lsm_options()).expect("open old instance");
        if !registered {
            for m in src.states().to_vec() {
                dst.register_state(m).expect("register");
            }
            registered = true;
        }
        let snap = src.snapshot().expect("snapshot");
        for kg in part.iter() {
            snap.visit(0, kg, &mut |k, v| dst.load_entry(0, kg, k, v))
                .expect("copy");
        }
    }
    dst.finish_load().expect("finish load");
    dst
}

/// An LSM instance of `range` restored from checkpoint `id` (adopting the old instances' files).
fn restored_instance(storage: &Arc<CheckpointStorage>, id: u64, range: KeyGroupRange) -> Instance {
    let cfg = config(range);
    let (b, _) = restore_lsm_temp(storage, id, cfg.clone(), lsm_options()).expect("restore");
    let engine: Box<dyn EngineHandle> = Box::new(b.engine());
    let mut store = KeyedStateStore::new(Box::new(b), LongSerializer).expect("store");
    let state = store
        .register_value(ValueStateDescriptor::new("payload", BytesSerializer))
        .expect("state");
    let ck = Checkpointer::open(Arc::clone(storage), &cfg, CheckpointOptions::default())
        .expect("checkpointer");
    Instance {
        store,
        state,
        engine: Some(engine),
        ck,
        range,
    }
}

/// Rescale 1 -> 2 -> 1, the second step timed: the halves restored from checkpoint `last` of the single
/// instance take 1 % changed keys and checkpoint `last + 1`, then one instance is restored from it. An
/// instance restored by a rescale is adopted again when its files carry bounds, copied by `restore_lsm_temp`
/// otherwise; Flink's way (open each half, copy its entries) beside it.
fn two_step_row(
    storage: &Arc<CheckpointStorage>,
    last: u64,
    halves: &[KeyGroupRange],
    keys: i64,
    rng: &mut StdRng,
) {
    let mut step: Vec<Instance> = halves
        .iter()
        .map(|h| restored_instance(storage, last, *h))
        .collect();
    for k in (0..keys).step_by(100) {
        let v = value(rng);
        if let Some(i) = step.iter_mut().find(|i| i.owns(k)) {
            i.put(k, &v);
        }
    }
    for i in step.iter_mut() {
        i.settle();
        i.checkpoint(last + 1);
    }
    drop(step);
    let all = KeyGroupRange::all(MAX_P);
    let t = Instant::now();
    let (b, files, copied) = restore(Kind::Lsm, storage, last + 1, all);
    let adopt = t.elapsed();
    drop(b);
    let t = Instant::now();
    let b = copy_restore(storage, last + 1, halves, all);
    let copy = t.elapsed();
    drop(b);
    println!(
        "| rescale 1 -> 2 -> 1, the second step | {:.1} | {files} | {copied} | {:.1} | {:.1}x |",
        ms(adopt),
        ms(copy),
        copy.as_secs_f64() / adopt.as_secs_f64().max(1e-9)
    );
}

/// Restore and rescale times of one backend (ms): same, 1 -> 2 (both instances), 2 -> 1.
struct Restores {
    same: f64,
    one_to_two: f64,
    two_to_one: f64,
}

fn run_backend(kind: Kind, keys: i64, rng: &mut StdRng) -> Restores {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!();
    println!(
        "## {} backend, {keys} keys (load average {})",
        kind.name(),
        load.trim()
    );
    let dir = tempfile::tempdir().expect("tmp");
    let storage = Arc::new(CheckpointStorage::local(&dir.path().join("root")).expect("root"));
    let all = KeyGroupRange::all(MAX_P);
    let mut one = instance(kind, &storage, all, 3);
    let t = Instant::now();
    for k in 0..keys {
        let v = value(rng);
        one.put(k, &v);
    }
    one.settle();
    println!(
        "loaded in {:.1} s: {}",
        t.elapsed().as_secs_f64(),
        one.summary()
    );

    println!();
    println!("| checkpoint | files new | files reused | bytes written | / new file bytes | / changed entry bytes | state size | sync ms | async ms |");
    println!("|---|---|---|---|---|---|---|---|---|");
    let (s, sync) = one.checkpoint(1);
    row("first (full)", 0, &s, sync);
    let mut id = 1;
    for pct in [1u64, 10] {
        let n = keys as u64 * pct / 100;
        change(&mut [&mut one], keys, n, rng);
        id += 1;
        let (s, sync) = one.checkpoint(id);
        row(&format!("{pct} % changed"), n, &s, sync);
    }

    println!();
    let (mut syncs, mut asyncs, mut written) = (Vec::new(), Vec::new(), Vec::new());
    let (mut cpus, mut runqs, mut blocked) = (Vec::new(), Vec::new(), Vec::new());
    let n = keys as u64 / 100;
    for _ in 0..50 {
        change(&mut [&mut one], keys, n, rng);
        id += 1;
        let ((s, sync), (cpu, runq)) = one.checkpoint_cpu(id);
        cpus.push(cpu);
        runqs.push(runq);
        blocked.push((ms(sync) - cpu - runq).max(0.0));
        syncs.push(ms(sync));
        asyncs.push(s.async_micros as f64 / 1e3);
        written.push(s.bytes_written as f64);
    }
    let objects = storage.list("").expect("list");
    let bytes: u64 = objects.iter().map(|(_, s)| s).sum();
    let largest_sync = syncs.iter().copied().fold(0.0, f64::max);
    println!("| 50 checkpoints, 1 % changed before each, retain 3 | value |");
    println!("|---|---|");
    println!(
        "| objects in storage after them (metadata included) | {} |",
        objects.len()
    );
    println!("| bytes in storage | {bytes} |");
    println!(
        "| bytes written per checkpoint, median | {:.0} |",
        median(&mut written)
    );
    println!(
        "| sync part, median / largest (ms) | {:.3} / {:.3} |",
        median(&mut syncs),
        largest_sync
    );
    let largest_cpu = cpus.iter().copied().fold(0.0, f64::max);
    println!(
        "| sync part, thread CPU time, median / largest (ms) | {:.3} / {:.3} |",
        median(&mut cpus),
        largest_cpu
    );
    let largest_runq = runqs.iter().copied().fold(0.0, f64::max);
    println!(
        "| sync part, waiting for a CPU, median / largest (ms) | {:.3} / {:.3} |",
        median(&mut runqs),
        largest_runq
    );
    let largest_blocked = blocked.iter().copied().fold(0.0, f64::max);
    println!(
        "| sync part, blocked (wall - CPU - waiting), median / largest (ms) | {:.3} / {:.3} |",
        median(&mut blocked),
        largest_blocked
    );
    println!("| async part, median (ms) | {:.1} |", median(&mut asyncs));
    println!("| engine | {} |", one.summary());

    // Restores from the last checkpoint of the single instance.
    let last = id;
    println!();
    println!("| restore | ms | files taken | instances copied | copy (Flink's way on our LSM) ms | copy / adopt |");
    println!("|---|---|---|---|---|---|");
    let t = Instant::now();
    let (b, files, _) = restore(kind, &storage, last, all);
    let same = t.elapsed();
    drop(b);
    println!(
        "| same parallelism (1 -> 1) | {:.1} | {files} | 0 | - | - |",
        ms(same)
    );

    let halves: Vec<KeyGroupRange> = (0..2)
        .map(|i| key_group_range_for_operator(MAX_P, 2, i).expect("range"))
        .collect();
    let (mut adopt, mut files, mut copy) = (Duration::ZERO, 0, Duration::ZERO);
    for h in &halves {
        let t = Instant::now();
        let (b, f, _) = restore(kind, &storage, last, *h);
        adopt += t.elapsed();
        files += f;
        drop(b);
        if kind == Kind::Lsm {
            let t = Instant::now();
            let b = copy_restore(&storage, last, &[all], *h);
            copy += t.elapsed();
            drop(b);
        }
    }
    let flink = |copy: Duration, adopt: Duration| {
        if kind == Kind::Lsm {
            (
                format!("{:.1}", ms(copy)),
                format!("{:.1}x", copy.as_secs_f64() / adopt.as_secs_f64().max(1e-9)),
            )
        } else {
            ("-".to_string(), "-".to_string())
        }
    };
    let (c, r) = flink(copy, adopt);
    println!(
        "| rescale 1 -> 2 (both new instances) | {:.1} | {files} | 0 | {c} | {r} |",
        ms(adopt)
    );
    let one_to_two = ms(adopt);
    if kind == Kind::Lsm {
        two_step_row(&storage, last, &halves, keys, rng);
    }
    drop(one);

    // Two instances of a job, each holding only its own key groups, checkpointed once.
    let root2 = Arc::new(CheckpointStorage::local(&dir.path().join("root2")).expect("root2"));
    let mut two: Vec<Instance> = halves
        .iter()
        .map(|h| instance(kind, &root2, *h, 3))
        .collect();
    for k in 0..keys {
        let v = value(rng);
        if let Some(i) = two.iter_mut().find(|i| i.owns(k)) {
            i.put(k, &v);
        }
    }
    for i in two.iter_mut() {
        i.settle();
        i.checkpoint(1);
    }
    drop(two);
    let t = Instant::now();
    let (b, files, copied) = restore(kind, &root2, 1, all);
    let adopt = t.elapsed();
    drop(b);
    let mut copy = Duration::ZERO;
    if kind == Kind::Lsm {
        let t = Instant::now();
        let b = copy_restore(&root2, 1, &halves, all);
        copy = t.elapsed();
        drop(b);
    }
    let (c, r) = flink(copy, adopt);
    println!(
        "| rescale 2 -> 1 | {:.1} | {files} | {copied} | {c} | {r} |",
        ms(adopt)
    );
    first_checkpoint_after_rescale_rows(kind, &storage, last, &halves);
    Restores {
        same: ms(same),
        one_to_two,
        two_to_one: ms(adopt),
    }
}

fn main() {
    let keys: i64 = std::env::var("KS_CKPT_BENCH_KEYS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let heap_keys: i64 = std::env::var("KS_CKPT_BENCH_HEAP_KEYS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(keys.min(1_000_000));
    let wanted =
        std::env::var("KS_CKPT_BENCH_BACKENDS").unwrap_or_else(|_| "lsm,heap,rocksdb".into());
    let uptime = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "keys {keys} (heap {heap_keys}) x {VALUE_LEN}-byte values, max parallelism {MAX_P}, load average {}",
        uptime.trim()
    );
    let mut kinds = Vec::new();
    for w in wanted.split(',') {
        match w.trim() {
            "lsm" => kinds.push(Kind::Lsm),
            "heap" => kinds.push(Kind::Heap),
            #[cfg(feature = "rocksdb")]
            "rocksdb" => kinds.push(Kind::RocksDb),
            #[cfg(not(feature = "rocksdb"))]
            "rocksdb" => println!("(rocksdb skipped: built without the `rocksdb` feature)"),
            other => println!("(unknown backend {other} skipped)"),
        }
    }
    let mut results = Vec::new();
    for kind in kinds {
        let mut rng = StdRng::seed_from_u64(11);
        let n = if kind == Kind::Heap { heap_keys } else { keys };
        results.push((kind, run_backend(kind, n, &mut rng)));
    }
    let lsm = results
        .iter()
        .find(|(k, _)| *k == Kind::Lsm)
        .map(|(_, r)| r);
    #[cfg(feature = "rocksdb")]
    let rocks = results
        .iter()
        .find(|(k, _)| *k == Kind::RocksDb)
        .map(|(_, r)| r);
    #[cfg(not(feature = "rocksdb"))]
    let rocks: Option<&Restores> = None;
    if let (Some(l), Some(r)) = (lsm, rocks) {
        println!();
        println!("## The yardstick: LSM adoption against the RocksDB variant restoring as Flink does ({keys} keys)");
        println!();
        println!("| restore | LSM adopt ms | RocksDB (Flink's way) ms | RocksDB / LSM |");
        println!("|---|---|---|---|");
        for (label, a, b) in [
            ("same parallelism", l.same, r.same),
            ("rescale 1 -> 2", l.one_to_two, r.one_to_two),
            ("rescale 2 -> 1", l.two_to_one, r.two_to_one),
        ] {
            println!("| {label} | {a:.1} | {b:.1} | {:.1}x |", b / a.max(1e-9));
        }
    }
}
