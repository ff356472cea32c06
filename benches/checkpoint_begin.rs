//! The synchronous part of a checkpoint (`Checkpointer::begin`) while the sweeps after confirmations run,
//! printed as a table of its wall-clock latency (p50, p99, max) per checkpoint root.
//!
//! Setup: `KS_BEGIN_BENCH_INSTANCES` instances (default 4) in one process, each an LSM backend
//! (`LsmBackend::small_options`, one value state, i64 keys, 100-byte values) with its own checkpointer on
//! one shared `CheckpointStorage`, retain 2. Per instance a task thread writes `KS_BEGIN_BENCH_KEYS`
//! changed keys (default 2,000) and calls `begin`, timed; an uploader thread runs the checkpoint
//! (`PendingCheckpoint::run`), tells the task thread it may take the next one, and then confirms it
//! (`notify_complete`). So every `begin` but the first is called while the previous checkpoint's
//! confirmation, and the sweep it causes (a listing of the root, a read of every metadata file, deletions),
//! runs. `KS_BEGIN_BENCH_CHECKPOINTS` checkpoints per instance (default 40).
//!
//! Roots: a local directory; S3 when `KEYED_STATE_S3_ENDPOINT` is set (as `.ci/run` sets it for moto on
//! loopback; bucket `KEYED_STATE_S3_BUCKET`, default `keyed-state-test`). `KS_BEGIN_BENCH_ROOTS`
//! (comma-separated `local,s3`) picks them.
//!
//! Times are wall-clock (`begin` waits on a lock, not on the CPU): note the load average printed beside them.
//! Beside them, per `begin`, the calling thread's CPU time and whether it blocked (a voluntary context
//! switch: it waited on a lock or on I/O) or was preempted (an involuntary one: another thread had the
//! core) during the call, counted over the run, and the p99 and max of the `begin`s that did neither.
//!
//! Run: `cargo bench --features s3 --bench checkpoint_begin`.

use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use keyed_state::backend::lsm::LsmBackend;
use keyed_state::checkpoint::{CheckpointOptions, CheckpointStorage, Checkpointer};
use keyed_state::keygroup::KeyGroupRange;
use keyed_state::serializer::{BytesSerializer, LongSerializer};
use keyed_state::state::{KeyedStateStore, ValueStateDescriptor};

const MAX_P: u32 = 128;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// The process's CPU time (user + system).
fn cpu_time() -> Duration {
    // SAFETY: rusage is plain data; all zeros is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let t = |tv: libc::timeval| {
        Duration::from_secs(tv.tv_sec as u64) + Duration::from_micros(tv.tv_usec as u64)
    };
    t(ru.ru_utime) + t(ru.ru_stime)
}

/// The calling thread's CPU time and its voluntary and involuntary context switches so far.
fn thread_usage() -> (Duration, i64, i64) {
    // SAFETY: rusage is plain data; all zeros is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    let t = |tv: libc::timeval| {
        Duration::from_secs(tv.tv_sec as u64) + Duration::from_micros(tv.tv_usec as u64)
    };
    (t(ru.ru_utime) + t(ru.ru_stime), ru.ru_nvcsw, ru.ru_nivcsw)
}

/// One `begin`: wall-clock time, CPU time of the calling thread (getrusage: microsecond resolution, ticks
/// of the scheduler on some kernels), and whether the thread blocked (a voluntary context switch: a lock
/// or I/O) or was preempted (an involuntary one) meanwhile.
#[derive(Clone, Copy)]
struct Begin {
    wall: Duration,
    cpu: Duration,
    blocked: bool,
    preempted: bool,
}

/// What one root's run measured.
struct Run {
    begins: Vec<Begin>,
    confirms: Vec<Duration>,
    wall: Duration,
    cpu: Duration,
}

/// The longest wall-clock time of the `begin`s `pick` chooses (0 if none).
fn max_of(begins: &[Begin], pick: impl Fn(&Begin) -> bool) -> Duration {
    begins
        .iter()
        .filter(|b| pick(b))
        .map(|b| b.wall)
        .max()
        .unwrap_or_default()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn run(storage: Arc<CheckpointStorage>, instances: usize, checkpoints: u64, keys: i64) -> Run {
    let cpu0 = cpu_time();
    let t0 = Instant::now();
    let per = (MAX_P as usize / instances) as u16;
    let mut threads = Vec::new();
    for i in 0..instances {
        let storage = Arc::clone(&storage);
        let range = KeyGroupRange::new(
            i as u16 * per,
            if i + 1 == instances {
                MAX_P as u16 - 1
            } else {
                (i as u16 + 1) * per - 1
            },
        );
        threads.push(std::thread::spawn(move || {
            let cfg = KeyedStateStore::config_for(&LongSerializer, MAX_P, range);
            let backend = LsmBackend::temp_with(cfg.clone(), LsmBackend::small_options()).unwrap();
            let mut store = KeyedStateStore::new(Box::new(backend), LongSerializer).unwrap();
            let value = store
                .register_value(ValueStateDescriptor::new("v", BytesSerializer))
                .unwrap();
            let ck = Checkpointer::open(
                storage,
                &cfg,
                CheckpointOptions {
                    retain: 2,
                    ..CheckpointOptions::default()
                },
            )
            .unwrap();
            let (to_upload, uploads) =
                mpsc::channel::<keyed_state::checkpoint::PendingCheckpoint>();
            let (uploaded_tx, uploaded) = mpsc::channel::<()>();
            let uploader = {
                let ck = ck.clone();
                std::thread::spawn(move || {
                    let mut confirms = Vec::new();
                    for p in uploads {
                        let id = p.id();
                        p.run().unwrap();
                        let _ = uploaded_tx.send(());
                        let t = Instant::now();
                        ck.notify_complete(id).unwrap();
                        confirms.push(t.elapsed());
                    }
                    confirms
                })
            };
            let mut begins = Vec::new();
            let mut k = 0i64;
            for id in 1..=checkpoints {
                let mut written = 0;
                while written < keys {
                    k = k.wrapping_add(1);
                    if !range.contains(store.key_group_of(&k).unwrap()) {
                        continue;
                    }
                    store.set_current_key(&k).unwrap();
                    store
                        .value(&value)
                        .unwrap()
                        .update(&vec![b'x'; 100])
                        .unwrap();
                    written += 1;
                }
                let u0 = thread_usage();
                let t = Instant::now();
                let p = ck.begin(id, store.backend_mut()).unwrap();
                let wall = t.elapsed();
                let u1 = thread_usage();
                begins.push(Begin {
                    wall,
                    cpu: u1.0.saturating_sub(u0.0),
                    blocked: u1.1 > u0.1,
                    preempted: u1.2 > u0.2,
                });
                to_upload.send(p).unwrap();
                // The next checkpoint is taken once this one is uploaded: while it is being confirmed.
                uploaded.recv().unwrap();
            }
            drop(to_upload);
            let confirms = uploader.join().unwrap();
            ck.sweep().unwrap();
            (begins, confirms)
        }));
    }
    let mut begins = Vec::new();
    let mut confirms = Vec::new();
    for t in threads {
        let (b, c) = t.join().unwrap();
        begins.extend(b);
        confirms.extend(c);
    }
    begins.sort_by_key(|b| b.wall);
    confirms.sort();
    Run {
        begins,
        confirms,
        wall: t0.elapsed(),
        cpu: cpu_time() - cpu0,
    }
}

fn s3_storage() -> Option<Arc<CheckpointStorage>> {
    if !cfg!(feature = "s3") {
        println!("| s3 | skipped: built without the `s3` feature |");
        return None;
    }
    let ep = std::env::var("KEYED_STATE_S3_ENDPOINT").ok()?;
    let bucket =
        std::env::var("KEYED_STATE_S3_BUCKET").unwrap_or_else(|_| "keyed-state-test".into());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let root = format!("s3://{bucket}/begin-bench-{}-{nanos}", std::process::id());
    let settings = [
        ("aws_endpoint", ep.as_str()),
        ("aws_allow_http", "true"),
        ("aws_access_key_id", "keyed-state-test"),
        ("aws_secret_access_key", "keyed-state-test"),
        ("aws_region", "us-east-1"),
    ];
    Some(Arc::new(
        CheckpointStorage::open_with(&root, &settings).unwrap(),
    ))
}

fn main() {
    let instances = env_usize("KS_BEGIN_BENCH_INSTANCES", 4).max(1);
    let checkpoints = env_usize("KS_BEGIN_BENCH_CHECKPOINTS", 40).max(2) as u64;
    let keys = env_usize("KS_BEGIN_BENCH_KEYS", 2000) as i64;
    let roots = std::env::var("KS_BEGIN_BENCH_ROOTS").unwrap_or_else(|_| "local,s3".into());
    println!(
        "begin while sweeps run: {instances} instances, {checkpoints} checkpoints each, {keys} keys changed per checkpoint"
    );
    println!(
        "| root | begins | begin p50 | begin p99 | begin max | > 1 ms | CPU p50 | CPU p99 | blocked | max blocked | preempted | max preempted | p99 neither | max neither | confirm p50 | confirm max | wall | CPU | load avg |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for root in roots.split(',') {
        let (storage, _dir) = match root.trim() {
            "local" => {
                let dir = tempfile::tempdir().unwrap();
                let s = CheckpointStorage::open(dir.path().to_str().unwrap()).unwrap();
                (Arc::new(s), Some(dir))
            }
            "s3" => match s3_storage() {
                Some(s) => (s, None),
                None => {
                    println!(
                        "| s3 | skipped: no S3 root (KEYED_STATE_S3_ENDPOINT, feature `s3`) |"
                    );
                    continue;
                }
            },
            other => panic!("unknown root {other:?} (local, s3)"),
        };
        let load = load_average();
        let r = run(storage, instances, checkpoints, keys);
        let us = |d: Duration| format!("{:.0} µs", d.as_secs_f64() * 1e6);
        let walls: Vec<Duration> = r.begins.iter().map(|b| b.wall).collect();
        let mut cpus: Vec<Duration> = r.begins.iter().map(|b| b.cpu).collect();
        cpus.sort();
        let quiet: Vec<Duration> = r
            .begins
            .iter()
            .filter(|b| !b.blocked && !b.preempted)
            .map(|b| b.wall)
            .collect();
        println!(
            "| {root} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.1} s | {:.1} s | {load} |",
            r.begins.len(),
            us(percentile(&walls, 0.5)),
            us(percentile(&walls, 0.99)),
            us(walls.last().copied().unwrap_or_default()),
            walls.iter().filter(|w| **w > Duration::from_millis(1)).count(),
            us(percentile(&cpus, 0.5)),
            us(percentile(&cpus, 0.99)),
            r.begins.iter().filter(|b| b.blocked).count(),
            us(max_of(&r.begins, |b| b.blocked)),
            r.begins.iter().filter(|b| b.preempted).count(),
            us(max_of(&r.begins, |b| b.preempted)),
            us(percentile(&quiet, 0.99)),
            us(quiet.last().copied().unwrap_or_default()),
            us(percentile(&r.confirms, 0.5)),
            us(r.confirms.last().copied().unwrap_or_default()),
            r.wall.as_secs_f64(),
            r.cpu.as_secs_f64(),
        );
    }
}
