//! One process, many operators (`design/shared-env.md`), printed as tables.
//!
//! Part 1, many states: one LSM backend with `KS_MO_STATES` value states (default 24), default engine
//! options, `KS_MO_KEYS_PER_STATE` keys per state (default 40,000; `i64` keys, 100-byte values), written
//! key by key through `KeyedStateStore` (each key updates every state). Then a full checkpoint and
//! `KS_MO_ROUNDS` (default 5) checkpoints each after 1 % of the keys of every state changed (with
//! `KS_MO_SETTLE=1` each after the engine's flushes and compactions are done, so that every compaction's
//! output is in the next checkpoint). Printed: write stall time of the load, L0 files, and per checkpoint
//! the compactions so far, files new/reused, bytes written against the raw bytes of the changed entries and
//! against the bytes of the engine's files new since the last checkpoint; the sum over checkpoints 2...
//!
//! Part 2, many instances: `KS_MO_INSTANCES` LSM backends (default 16), each with 3 value states and its
//! key-group range of max parallelism 128, loaded with `KS_MO_TOTAL_MB` MiB of raw entries in all (default
//! 512), round-robin over the instances, then one checkpoint of each into a local root. Each variant runs in
//! a child process of its own (this binary re-executed), so peak memory is its own:
//! * `shared`: every backend and checkpoint storage on one `StateEnv` with `KS_MO_BUDGET_MB` (default 256)
//!   MiB of memory budget, 4 background threads, 2 I/O threads;
//! * `separate`: each backend with its own engine defaults (64 MiB memtables, 64 MiB block cache, 2 threads)
//!   and each storage with its own runtime: today's behaviour without an environment.
//!
//! Printed per variant: load throughput, peak `RssAnon` (sampled every 20 ms) over the load and over load
//! and checkpoint, and the baseline before loading, `VmHWM`, threads at the end (names on stderr), write
//! stall time summed over the engines.
//!
//! Times are wall-clock, one run each: the machine is shared, note its load beside the numbers.
//!
//! Run: `cargo bench --bench many_operators` (part 1 or 2 alone: `KS_MO_PARTS=1` or `2`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use keyed_state::backend::lsm::{LsmBackend, LsmEngine};
use keyed_state::backend::{BackendConfig, EngineHandle};
use keyed_state::checkpoint::{CheckpointOptions, CheckpointStorage, Checkpointer};
use keyed_state::env::{StateEnv, StateEnvOptions};
use keyed_state::keygroup::{key_group_range_for_operator, KeyGroupRange};
use keyed_state::serializer::{BytesSerializer, LongSerializer};
use keyed_state::state::{KeyedStateStore, ValueState, ValueStateDescriptor};
use keyed_state_lsm::Options;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const MAX_P: u32 = 128;
const VALUE_LEN: usize = 100;
const ENTRY_BYTES: u64 = 8 + VALUE_LEN as u64;
const MIB: f64 = (1 << 20) as f64;

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn value(rng: &mut StdRng) -> Vec<u8> {
    (0..VALUE_LEN)
        .map(|_| b'a' + rng.random_range(0..16u8))
        .collect()
}

/// A field of `/proc/self/status` in KiB.
fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn stall_ms(engine: &LsmEngine) -> f64 {
    engine.db().stats().write_stall_micros as f64 / 1000.0
}

struct Operator {
    store: KeyedStateStore<LongSerializer>,
    states: Vec<ValueState<BytesSerializer>>,
    ck: Checkpointer,
    engine: LsmEngine,
}

fn operator(
    backend: LsmBackend,
    cfg: &BackendConfig,
    storage: &Arc<CheckpointStorage>,
    states: usize,
) -> Operator {
    let engine = backend.engine();
    let mut store = KeyedStateStore::new(Box::new(backend), LongSerializer).expect("store");
    let states = (0..states)
        .map(|i| {
            store
                .register_value(ValueStateDescriptor::new(
                    format!("state-{i}"),
                    BytesSerializer,
                ))
                .expect("register")
        })
        .collect();
    let ck =
        Checkpointer::open(Arc::clone(storage), cfg, CheckpointOptions::default()).expect("ck");
    Operator {
        store,
        states,
        ck,
        engine,
    }
}

fn part1() {
    let states = env_num("KS_MO_STATES", 24) as usize;
    let keys = env_num("KS_MO_KEYS_PER_STATE", 40_000) as i64;
    let rounds = env_num("KS_MO_ROUNDS", 5);
    let range = KeyGroupRange::new(0, MAX_P as u16 - 1);
    let cfg = KeyedStateStore::config_for(&LongSerializer, MAX_P, range);
    let root = tempfile::tempdir().expect("root");
    let storage = Arc::new(CheckpointStorage::local(root.path()).expect("storage"));
    let backend = LsmBackend::temp_with(cfg.clone(), Options::default()).expect("backend");
    let mut op = operator(backend, &cfg, &storage, states);
    let mut rng = StdRng::seed_from_u64(7);
    println!(
        "## Part 1: {states} value states x {keys} keys, default options ({:.0} MiB of raw entries)\n",
        (states as u64 * keys as u64 * ENTRY_BYTES) as f64 / MIB
    );
    let t = Instant::now();
    for k in 0..keys {
        op.store.set_current_key(&k).expect("key");
        for s in &op.states {
            op.store
                .value(s)
                .expect("state")
                .update(&value(&mut rng))
                .expect("put");
        }
    }
    let load = t.elapsed();
    let stalls_load = stall_ms(&op.engine);
    println!(
        "load: {:.1} s, write stalls {:.0} ms; engine: {}\n",
        load.as_secs_f64(),
        stalls_load,
        op.engine.summary()
    );
    let settle = env_num("KS_MO_SETTLE", 0) == 1;
    println!(
        "checkpoints {}\n",
        if settle {
            "after the engine's flushes and compactions settled (KS_MO_SETTLE=1)"
        } else {
            "while compactions may run"
        }
    );
    println!("| checkpoint | changed entries | compactions before | files new | files reused | bytes written | written / changed raw | written / new file bytes | write stalls since load |");
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    let (mut written_after_first, mut raw_after_first) = (0u64, 0u64);
    for id in 1..=rounds + 1 {
        let changed = if id == 1 {
            keys as u64 * states as u64
        } else {
            let n = (keys / 100).max(1);
            for _ in 0..n {
                let k = rng.random_range(0..keys);
                op.store.set_current_key(&k).expect("key");
                for s in &op.states {
                    op.store
                        .value(s)
                        .expect("state")
                        .update(&value(&mut rng))
                        .expect("put");
                }
            }
            n as u64 * states as u64
        };
        if settle {
            op.engine.wait_for_background_work().expect("settle");
        }
        let compactions = op.engine.db().stats().compactions;
        let p = op.store.checkpoint(&op.ck, id).expect("sync part");
        let s = p.run().expect("async part");
        op.ck.notify_complete(id).expect("confirm");
        let raw = changed * ENTRY_BYTES;
        written_after_first += if id > 1 { s.bytes_written } else { 0 };
        raw_after_first += if id > 1 { raw } else { 0 };
        println!(
            "| {id} | {changed} | {compactions} | {} | {} | {:.1} MiB | {:.2} | {:.2} | {:.0} ms |",
            s.files_new,
            s.files_reused,
            s.bytes_written as f64 / MIB,
            s.bytes_written as f64 / raw as f64,
            s.bytes_written as f64 / s.bytes_new_files.max(1) as f64,
            stall_ms(&op.engine) - stalls_load
        );
    }
    println!(
        "\ncheckpoints 2..: {:.1} MiB written for {:.1} MiB of changed raw entries ({:.2})",
        written_after_first as f64 / MIB,
        raw_after_first as f64 / MIB,
        written_after_first as f64 / raw_after_first.max(1) as f64
    );
    println!("\nengine after: {}\n", op.engine.summary());
}

/// Part 2 in this process: the variant `variant`; prints one table row.
fn part2_child(variant: &str) {
    let instances = env_num("KS_MO_INSTANCES", 16) as usize;
    let total_mb = env_num("KS_MO_TOTAL_MB", 512);
    let budget_mb = env_num("KS_MO_BUDGET_MB", 256);
    let baseline = status_kib("RssAnon:");
    let peak = Arc::new(AtomicU64::new(baseline));
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (peak, stop) = (Arc::clone(&peak), Arc::clone(&stop));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                peak.fetch_max(status_kib("RssAnon:"), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let env = (variant == "shared").then(|| {
        StateEnv::new(StateEnvOptions {
            memory_budget: Some((budget_mb as usize) << 20),
            background_threads: 4,
            io_threads: 2,
            ..StateEnvOptions::default()
        })
        .expect("env")
    });
    let root = tempfile::tempdir().expect("root");
    let mut ops: Vec<Operator> = (0..instances)
        .map(|i| {
            let range =
                key_group_range_for_operator(MAX_P, instances as u32, i as u32).expect("range");
            let cfg = KeyedStateStore::config_for(&LongSerializer, MAX_P, range);
            let dir = root.path().join(format!("root-{i}"));
            let dir = dir.to_str().expect("utf-8");
            let (backend, storage) = match &env {
                Some(env) => (
                    env.temp_lsm(cfg.clone(), Options::default())
                        .expect("backend"),
                    env.open_storage(dir).expect("storage"),
                ),
                None => (
                    LsmBackend::temp_with(cfg.clone(), Options::default()).expect("backend"),
                    Arc::new(CheckpointStorage::open(dir).expect("storage")),
                ),
            };
            operator(backend, &cfg, &storage, 3)
        })
        .collect();
    // Keys go to the instance owning their key group.
    let owner: Vec<usize> = (0..MAX_P as u16)
        .map(|kg| {
            (0..instances)
                .find(|&i| {
                    key_group_range_for_operator(MAX_P, instances as u32, i as u32)
                        .is_ok_and(|r| r.contains(kg))
                })
                .unwrap_or(0)
        })
        .collect();
    let entries = (total_mb << 20) / ENTRY_BYTES;
    let keys = entries / 3;
    let mut rng = StdRng::seed_from_u64(11);
    let t = Instant::now();
    for k in 0..keys as i64 {
        let kg = ops[0].store.key_group_of(&k).expect("kg");
        let op = &mut ops[owner[kg as usize]];
        op.store.set_current_key(&k).expect("key");
        for s in &op.states {
            let v = value(&mut rng);
            op.store.value(s).expect("state").update(&v).expect("put");
        }
    }
    let load = t.elapsed();
    peak.fetch_max(status_kib("RssAnon:"), Ordering::Relaxed);
    let peak_load = peak.load(Ordering::Relaxed);
    for op in ops.iter_mut() {
        let p = op.store.checkpoint(&op.ck, 1).expect("sync");
        p.run().expect("async");
        op.ck.notify_complete(1).expect("confirm");
    }
    let stalls: f64 = ops.iter().map(|o| stall_ms(&o.engine)).sum();
    let threads = status_kib("Threads:");
    stop.store(true, Ordering::Relaxed);
    let _ = sampler.join();
    let peak = peak.load(Ordering::Relaxed);
    println!(
        "| {variant} | {instances} | {} | {:.0} | {:.1} s | {:.0} k/s | {:.0} | {:.0} | {:.0} | {:.0} | {threads} | {:.0} ms |",
        if variant == "shared" { format!("{budget_mb} MiB") } else { "none".into() },
        (entries * ENTRY_BYTES) as f64 / MIB,
        load.as_secs_f64(),
        (keys * 3) as f64 / load.as_secs_f64() / 1000.0,
        baseline as f64 / 1024.0,
        peak_load as f64 / 1024.0,
        peak as f64 / 1024.0,
        status_kib("VmHWM:") as f64 / 1024.0,
        stalls,
    );
    if let Some(env) = &env {
        eprintln!("{variant}: env memory at the end: {:?}", env.stats().memory);
    }
    let mut names: Vec<String> = std::fs::read_dir("/proc/self/task")
        .map(|d| {
            d.filter_map(|t| t.ok())
                .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
                .map(|n| n.trim().to_string())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    eprintln!("{variant}: threads {names:?}");
}

fn part2() {
    println!("## Part 2: many instances, 3 value states each\n");
    println!("| variant | instances | budget | raw MiB | load | puts | RssAnon before (MiB) | peak RssAnon, load (MiB) | peak RssAnon, load + checkpoint (MiB) | VmHWM (MiB) | threads | write stalls |");
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    let exe = std::env::current_exe().expect("exe");
    for variant in ["shared", "separate"] {
        let out = std::process::Command::new(&exe)
            .env("KS_MO_CHILD", variant)
            .stderr(std::process::Stdio::inherit())
            .output()
            .expect("child");
        print!("{}", String::from_utf8_lossy(&out.stdout));
        if !out.status.success() {
            println!("| {variant} | failed: {} |", out.status);
        }
    }
    println!();
}

fn main() {
    if let Ok(variant) = std::env::var("KS_MO_CHILD") {
        part2_child(&variant);
        return;
    }
    let parts = std::env::var("KS_MO_PARTS").unwrap_or_else(|_| "1,2".into());
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load average at start: {}", load.trim());
    if parts.contains('1') {
        part1();
    }
    if parts.contains('2') {
        part2();
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load average at end: {}", load.trim());
}
