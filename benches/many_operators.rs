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
//! `KS_MO_VIEW` (`off`; `on`: the view materialized in band only; `bg`, the default (the engine's
//! defaults): with background materializations; `both`: off, then on; `all`: off, on, bg, in one run) sets the engine's checkpoint
//! view (`design/checkpoint-view.md`): each checkpoint row then says whether the view advanced to the
//! engine's version (an in-band materialization) and the bytes that took beyond the flushes, the files and
//! bytes it referenced from a background materialization's uploads, and the local disk the view pins; with
//! `KS_MO_SETTLE=1` a background materialization's uploads end before the next checkpoint too. After the
//! rounds, the background materializations' objects and bytes (written outside every checkpoint's path)
//! and the amortised ratio with them. `KS_MO_VIEW_BG_L0_RUNS` and `KS_MO_VIEW_BG_PINNED_RATIO` set the
//! background triggers (default the engine's). After the rounds: median, p90 and max of bytes written / changed raw bytes over
//! checkpoints 2.., the amortised ratio, the materialization bytes apart, and the time to restore the last
//! checkpoint into a temporary directory and the time its compactions then take (writes stall while its L0
//! is at the stop trigger). `KS_MO_VIEW_L0_RUNS` and `KS_MO_VIEW_PINNED_RATIO` set the view's
//! bounds (default the engine's, `Options::checkpoint_view_max_l0_runs` and `_max_pinned_ratio`);
//! `KS_MO_VIEW_HARD_L0_RUNS` the L0 bound once background materializations are taken
//! (`Options::checkpoint_view_hard_l0_runs`).
//!
//! Part 2, many instances: `KS_MO_INSTANCES` backends (default 16), each with 3 value states and its
//! key-group range of max parallelism 128, loaded with `KS_MO_TOTAL_MB` MiB of raw entries in all (default
//! 512), round-robin over the instances; then a mix over `KS_MO_MIX_KEYS` random loaded keys (default a
//! quarter of the keys; per key a get of state 0, a get and an update of state 1 and an update of state 2,
//! as Flink's valueGet / valueUpdate micro-benchmarks); then one checkpoint of each into a local root. Values
//! come from a pool of `KS_MO_VALUE_POOL` (default 1024; a small pool makes blocks compressible, so that
//! reads fill the block cache: see `value_pool`). Each
//! variant runs in a child process of its own (this binary re-executed), so peak memory is its own:
//! * `shared`: LSM backends and checkpoint storages on one `StateEnv` with `KS_MO_BUDGET_MB` (default 256)
//!   MiB of memory budget, `KS_MO_BG_THREADS` background threads (default 4), `KS_MO_IO_THREADS` I/O
//!   threads (default 2; the runtime also starts up to as many blocking threads for a local root's file
//!   operations), `KS_MO_RMW_CACHE_RATIO` of the budget for
//!   the backends' read-modify-write caches (default the environment's, 0.25), `KS_MO_ROW_CACHE_RATIO` of it
//!   for the engines' row cache (default the environment's, 1/16; 0: none);
//! * `separate`: LSM backends each with its own engine defaults (64 MiB memtables, 64 MiB block cache, 2
//!   threads) and each storage with its own runtime: no environment, no budget;
//! * `rocksdb-flink` (feature `rocksdb`): RocksDB backends on one `RocksDbShared` of the same budget, as
//!   Flink's managed memory configures RocksDB (one LRU cache, one write-buffer manager charging it);
//!   their checkpoint storages on one I/O runtime;
//! * `shared-cached`: `shared` with the engines' SST indexes and filters in the block cache
//!   (`MetadataPlacement::Cached`; not run unless named).
//!
//! `KS_MO_VARIANTS` picks and orders the variants (comma-separated); `KS_MO_VARIANT_ROUNDS` runs them that
//! many times, the order reversed every other round. `KS_MO_CHECK=1` checks the targets at the end
//! (`check_results`: `shared`'s peak over budget + baseline, its throughput against `separate`, its threads
//! of ours, background, I/O and sweeper, at most `KS_MO_MAX_THREADS`, default 8), prints
//! `campaign` lines for `scripts/long-checks.sh` and exits non-zero when one is missed.
//!
//! Printed per variant: load and mix throughput and the process's CPU time (user + system, every thread)
//! in each, peak `RssAnon` (sampled every 20 ms) after the load, the mix and the checkpoints, the baseline
//! before loading and the peak over budget + baseline, `VmHWM`, threads at the end (names on stderr; the
//! engines' background threads and the I/O runtime's counted apart), write stall time summed over the
//! engines (`rocksdb.stall.micros`; RocksDB's from its `rocksdb.dbstats` "Cumulative stall", as its
//! statistics are off, as in Flink), and on stderr the load's stall time by cause.
//!
//! Times are wall-clock, one run each: the machine is shared, note its load beside the numbers.
//!
//! Allocator: the children run with `MIMALLOC_ALLOW_THP=0 MIMALLOC_PURGE_DELAY=0` (no transparent huge
//! pages, freed memory given back at once) unless `KS_MO_ALLOCATOR_DEFAULTS=1` or the variable is set.
//!
//! Memory profile: at the peak `RssAnon` of each phase the
//! child prints on stderr `AnonHugePages` and what the budget charges (or RocksDB's shared memory);
//! with `KS_PROFILE_ALLOC=1` also the live heap bytes by thread kind (`support/counting_alloc.rs`; each
//! allocation then carries a 16-byte header, so leave it off when measuring speed); `KS_MO_TRACE=1`
//! prints the same every second; `KS_ALLOC=system` uses `malloc` (mimalloc too with
//! `bench-malloc-override`).
//!
//! SST metadata: `KS_MO_SST_METADATA=cached` opens the LSM engines with their files' indexes and filters in
//! the block cache (`resident`: kept by the readers, the default); each variant prints on stderr what the
//! open files' indexes and filters hold after the mix (`table readers after the mix`).
//!
//! Run: `cargo bench --bench many_operators` (part 1 or 2 alone: `KS_MO_PARTS=1` or `2`).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use keyed_state::backend::lsm::{LsmBackend, LsmEngine};
use keyed_state::backend::{BackendConfig, EngineHandle, StateBackend};
use keyed_state::checkpoint::{CheckpointOptions, CheckpointStorage, Checkpointer};
use keyed_state::env::{StateEnv, StateEnvOptions};
use keyed_state::keygroup::{key_group_range_for_operator, KeyGroupRange};
use keyed_state::serializer::{BytesSerializer, LongSerializer};
use keyed_state::state::{KeyedStateStore, ValueState, ValueStateDescriptor};
use keyed_state_lsm::{MetadataPlacement, Options};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

#[path = "support/counting_alloc.rs"]
mod counting_alloc;

/// mimalloc; with `KS_PROFILE_ALLOC=1` also counting live bytes by thread kind (`support/counting_alloc.rs`).
#[global_allocator]
static GLOBAL: counting_alloc::Counting = counting_alloc::Counting;

/// mimalloc settings of part 2's children (see `part2`): no transparent huge pages, freed memory given back
/// at once.
const ALLOCATOR_SETTINGS: [(&str, &str); 2] =
    [("MIMALLOC_ALLOW_THP", "0"), ("MIMALLOC_PURGE_DELAY", "0")];

#[path = "support/value_workload.rs"]
mod value_workload;
use value_workload::{env_num, value, ENTRY_BYTES, MAX_P, MIB};

#[path = "support/anon_maps.rs"]
mod anon_maps;

#[path = "support/proc_field.rs"]
mod proc_field;
use proc_field::proc_field;

/// A field of `/proc/self/status` in KiB.
fn status_kib(field: &str) -> u64 {
    proc_field("/proc/self/status", field)
}

/// A field of `/proc/self/smaps_rollup` in KiB.
fn smaps_rollup_kib(field: &str) -> u64 {
    proc_field("/proc/self/smaps_rollup", field)
}

fn stall_ms(engine: &LsmEngine) -> f64 {
    engine.stats().write_stall_micros as f64 / 1000.0
}

/// Write stall time of an engine, from its metrics (`rocksdb.stall.micros`), if it reports it.
fn stall_ms_of(engine: &dyn EngineHandle) -> Option<f64> {
    engine
        .metrics()
        .iter()
        .find(|m| m.name == "rocksdb.stall.micros")
        .map(|m| m.value as f64 / 1000.0)
}

/// Write stall time summed over `engines` by cause, from their metrics (RocksDB's names where it has them).
fn stalls_by_cause(engines: &[&dyn EngineHandle]) -> String {
    [
        "rocksdb.stall.micros",
        "keyed-state.lsm.write-buffer-stall-micros",
        "rocksdb.memtable.compaction.micros",
        "rocksdb.l0.num.files.stall.micros",
    ]
    .iter()
    .map(|name| {
        let found: Option<u64> = engines
            .iter()
            .map(|e| {
                e.metrics()
                    .iter()
                    .find(|m| m.name == *name)
                    .map(|m| m.value)
            })
            .sum();
        match found {
            Some(us) => format!("{name} {:.1} s", us as f64 / 1e6),
            None => format!("{name} not reported"),
        }
    })
    .chain(
        // RocksDB's counts by cause (`rocksdb.cf-write-stall-stats`), those above 0.
        engines
            .iter()
            .flat_map(|e| e.metrics())
            .filter(|m| m.name.starts_with("rocksdb.cf-write-stall-stats."))
            .fold(Vec::<(String, u64)>::new(), |mut acc, m| {
                match acc.iter_mut().find(|(n, _)| *n == m.name) {
                    Some((_, v)) => *v += m.value,
                    None => acc.push((m.name, m.value)),
                }
                acc
            })
            .into_iter()
            .filter(|(_, v)| *v > 0)
            .map(|(n, v)| format!("{n} {v}")),
    )
    .collect::<Vec<_>>()
    .join(", ")
}

/// User plus system CPU time of this process (every thread), in seconds.
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage writes into the zeroed struct it is given and reads nothing else.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_SELF is a valid `who`.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) } != 0 {
        return 0.0;
    }
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 / 1e6;
    t(u.ru_utime) + t(u.ru_stime)
}

struct Operator {
    store: KeyedStateStore<LongSerializer>,
    states: Vec<ValueState<BytesSerializer>>,
    ck: Checkpointer,
    engine: Box<dyn EngineHandle>,
}

fn operator(
    backend: Box<dyn StateBackend>,
    engine: Box<dyn EngineHandle>,
    cfg: &BackendConfig,
    storage: &Arc<CheckpointStorage>,
    states: usize,
) -> Operator {
    let mut store = KeyedStateStore::new(backend, LongSerializer).expect("store");
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

/// The checkpoint view of a part-1 run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum View {
    Off,
    /// Materialized in band only (no background trigger).
    InBand,
    /// With background materializations.
    Background,
}

fn part1() {
    let views: &[View] = match std::env::var("KS_MO_VIEW").as_deref() {
        Ok("on") => &[View::InBand],
        Ok("bg") => &[View::Background],
        Ok("both") => &[View::Off, View::InBand],
        Ok("all") => &[View::Off, View::InBand, View::Background],
        Ok("off") => &[View::Off],
        _ => &[View::Background],
    };
    for &view in views {
        part1_run(view);
    }
}

/// The `p`-quantile (0..=1) of `v` (nearest rank).
fn quantile(v: &[f64], p: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    if s.is_empty() {
        return 0.0;
    }
    let i = ((p * s.len() as f64).ceil() as usize).clamp(1, s.len()) - 1;
    s[i]
}

fn part1_run(mode: View) {
    let view = mode != View::Off;
    let states = env_num("KS_MO_STATES", 24) as usize;
    let keys = env_num("KS_MO_KEYS_PER_STATE", 40_000) as i64;
    let rounds = env_num("KS_MO_ROUNDS", 5);
    let range = KeyGroupRange::new(0, MAX_P as u16 - 1);
    let cfg = KeyedStateStore::config_for(&LongSerializer, MAX_P, range);
    let root = tempfile::tempdir().expect("root");
    let storage = Arc::new(CheckpointStorage::local(root.path()).expect("storage"));
    let defaults = Options::default();
    let engine_options = Options {
        checkpoint_view: view,
        checkpoint_view_max_l0_runs: env_num(
            "KS_MO_VIEW_L0_RUNS",
            defaults.checkpoint_view_max_l0_runs as u64,
        ) as usize,
        checkpoint_view_hard_l0_runs: env_num(
            "KS_MO_VIEW_HARD_L0_RUNS",
            defaults.checkpoint_view_hard_l0_runs as u64,
        ) as usize,
        checkpoint_view_max_pinned_ratio: std::env::var("KS_MO_VIEW_PINNED_RATIO")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(defaults.checkpoint_view_max_pinned_ratio),
        checkpoint_view_background_l0_runs: if mode == View::Background {
            env_num(
                "KS_MO_VIEW_BG_L0_RUNS",
                defaults.checkpoint_view_background_l0_runs as u64,
            ) as usize
        } else {
            usize::MAX
        },
        checkpoint_view_background_pinned_ratio: if mode == View::Background {
            std::env::var("KS_MO_VIEW_BG_PINNED_RATIO")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(defaults.checkpoint_view_background_pinned_ratio)
        } else {
            f64::INFINITY
        },
        ..defaults
    };
    let backend = LsmBackend::temp_with(cfg.clone(), engine_options.clone()).expect("backend");
    let engine = backend.engine();
    let lsm = engine.clone();
    let mut op = operator(Box::new(backend), Box::new(engine), &cfg, &storage, states);
    let mut rng = StdRng::seed_from_u64(7);
    println!(
        "## Part 1: {states} value states x {keys} keys, default options, checkpoint view {} ({:.0} MiB of raw entries)\n",
        match mode {
            View::Off => "off".to_string(),
            View::InBand => format!(
                "on, in band only (at most {} L0 runs, pinned ratio {})",
                engine_options.checkpoint_view_max_l0_runs,
                engine_options.checkpoint_view_max_pinned_ratio
            ),
            View::Background => format!(
                "on, in the background from {} L0 runs or pinned ratio {} (in band at {} L0 runs, {} once taken in the background, pinned ratio {})",
                engine_options.checkpoint_view_background_l0_runs,
                engine_options.checkpoint_view_background_pinned_ratio,
                engine_options.checkpoint_view_max_l0_runs,
                engine_options.checkpoint_view_hard_l0_runs,
                engine_options.checkpoint_view_max_pinned_ratio
            ),
        },
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
    let stalls_load = stall_ms(&lsm);
    println!(
        "load: {:.1} s, write stalls {:.0} ms; engine: {}\n",
        load.as_secs_f64(),
        stalls_load,
        lsm.summary()
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
    println!("| checkpoint | changed entries | compactions before | files new | files reused | bytes written | written / changed raw | written / new file bytes | view | materialization | from background | view pins | write stalls since load |");
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    let (mut written_after_first, mut raw_after_first) = (0u64, 0u64);
    let (mut ratios, mut materialization, mut materializations) = (Vec::new(), 0u64, 0usize);
    let mut max_pinned = 0u64;
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
            op.ck.wait_for_materialization();
            lsm.wait_for_background_work().expect("settle");
        }
        let compactions = lsm.stats().compactions;
        let p = op.store.checkpoint(&op.ck, id).expect("sync part");
        let s = p.run().expect("async part");
        op.ck.notify_complete(id).expect("confirm");
        let raw = changed * ENTRY_BYTES;
        let pinned = lsm.stats().checkpoint_view_pinned_bytes;
        if id > 1 {
            written_after_first += s.bytes_written;
            raw_after_first += raw;
            ratios.push(s.bytes_written as f64 / raw as f64);
            materialization += s.bytes_materialization;
            materializations += usize::from(s.view_materialized);
            max_pinned = max_pinned.max(pinned);
        }
        println!(
            "| {id} | {changed} | {compactions} | {} | {} | {:.1} MiB | {:.2} | {:.2} | {} | {:.1} MiB | {} files, {:.1} MiB | {:.1} MiB, {} L0 runs | {:.0} ms |",
            s.files_new,
            s.files_reused,
            s.bytes_written as f64 / MIB,
            s.bytes_written as f64 / raw as f64,
            s.bytes_written as f64 / s.bytes_new_files.max(1) as f64,
            match (view, s.view_materialized) {
                (false, _) => "off",
                (true, true) => "materialized",
                (true, false) => "changes",
            },
            s.bytes_materialization as f64 / MIB,
            s.files_from_materialization,
            s.bytes_from_materialization as f64 / MIB,
            pinned as f64 / MIB,
            lsm.stats().checkpoint_view_l0_runs,
            stall_ms(&lsm) - stalls_load
        );
    }
    let last = rounds + 1;
    let at_most = ratios.iter().filter(|r| **r <= 1.2).count();
    println!(
        "\ncheckpoints 2..: {:.1} MiB written for {:.1} MiB of changed raw entries (amortised {:.2}); per checkpoint median {:.2}, p90 {:.2}, max {:.2}, {at_most} of {} at <= 1.2",
        written_after_first as f64 / MIB,
        raw_after_first as f64 / MIB,
        written_after_first as f64 / raw_after_first.max(1) as f64,
        quantile(&ratios, 0.5),
        quantile(&ratios, 0.9),
        quantile(&ratios, 1.0),
        ratios.len()
    );
    println!(
        "checkpoint view {mode:?}: {materializations} in-band materializations, {:.1} MiB of their bytes beyond the flushes ({:.2} of the changed raw bytes; the rest {:.2}); at most {:.1} MiB of local files pinned by the view",
        materialization as f64 / MIB,
        materialization as f64 / raw_after_first.max(1) as f64,
        (written_after_first - materialization.min(written_after_first)) as f64
            / raw_after_first.max(1) as f64,
        max_pinned as f64 / MIB
    );
    let bg = op.ck.wait_for_materialization();
    println!(
        "background materializations: {} started, {} advanced the view, {} refused, {} abandoned; {} objects, {:.1} MiB ({:.2} of the changed raw bytes); amortised with them {:.2}",
        bg.started,
        bg.advanced,
        bg.refused,
        bg.abandoned,
        bg.objects_written,
        bg.bytes_written as f64 / MIB,
        bg.bytes_written as f64 / raw_after_first.max(1) as f64,
        (written_after_first + bg.bytes_written) as f64 / raw_after_first.max(1) as f64
    );
    let t = Instant::now();
    let (restored, info) =
        keyed_state::checkpoint::restore_lsm_temp(&storage, last, cfg.clone(), engine_options)
            .expect("restore");
    let restore_s = t.elapsed().as_secs_f64();
    let restored_engine = restored.engine();
    println!(
        "restore of checkpoint {last}: {restore_s:.2} s, {} files adopted; restored engine: {}",
        info.files_adopted,
        restored_engine.summary()
    );
    // Until the restored engine's compactions catch up, an L0 at the stop trigger stalls its writes.
    let t = Instant::now();
    restored_engine
        .wait_for_background_work()
        .expect("restored engine's compactions");
    println!(
        "restored engine's compactions after the restore: {:.2} s; then: {}",
        t.elapsed().as_secs_f64(),
        restored_engine.summary()
    );
    drop(restored);
    println!("\nengine after: {}\n", lsm.summary());
}

/// The values written in part 2: a pool of `KS_MO_VALUE_POOL` random ones (default 1024), so that the
/// bench's own work per write stays small. With the default a 4 KiB data block holds no value twice and LZ4
/// leaves it raw (read from the mapped file, never cached); a small pool (e.g. 16) repeats values within a
/// block, LZ4 compresses it and reads go through the shared block cache.
fn value_pool(rng: &mut StdRng) -> Vec<Vec<u8>> {
    (0..env_num("KS_MO_VALUE_POOL", 1024).max(1))
        .map(|_| value(rng))
        .collect()
}

/// Thread names of this process, sorted.
fn thread_names() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir("/proc/self/task")
        .map(|d| {
            d.filter_map(|t| t.ok())
                .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
                .map(|n| n.trim().to_string())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// The backends of a part 2 variant and what they share, kept alive for the whole run.
enum Shared {
    Env(StateEnv),
    None,
    #[cfg(feature = "rocksdb")]
    RocksDb(keyed_state::backend::rocksdb::RocksDbShared, StateEnv),
}

/// Set in a `shared-cached` child: its engines place their files' indexes and filters in the cache.
static CACHED_METADATA: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

/// The LSM engines' options of part 2: the defaults, with `KS_MO_SST_METADATA=cached` (or `resident`), or
/// the variant `shared-cached`, placing open files' indexes and filters.
fn lsm_options() -> Options {
    let mut o = Options::default();
    match std::env::var("KS_MO_SST_METADATA").as_deref() {
        Ok("cached") => o.sst_metadata = MetadataPlacement::Cached,
        Ok("resident") => o.sst_metadata = MetadataPlacement::Resident,
        _ => {}
    }
    if CACHED_METADATA.get() == Some(&true) {
        o.sst_metadata = MetadataPlacement::Cached;
    }
    o
}

/// The open SST files' metadata summed over `engines` (from their metrics), for stderr.
fn table_readers(engines: &[&dyn EngineHandle]) -> String {
    let sum = |name: &str| -> u64 {
        engines
            .iter()
            .flat_map(|e| e.metrics())
            .filter(|m| m.name == name)
            .map(|m| m.value)
            .sum()
    };
    let files: u64 = engines
        .iter()
        .flat_map(|e| e.metrics())
        .filter(|m| m.name.starts_with("rocksdb.num-files-at-level"))
        .map(|m| m.value)
        .sum();
    let (entries, blocks) = (
        sum("rocksdb.estimate-num-keys"),
        sum("keyed-state.lsm.data-blocks"),
    );
    let (keys, index, filter) = (
        sum("keyed-state.lsm.index-key-bytes"),
        sum("keyed-state.lsm.index-bytes"),
        sum("keyed-state.lsm.filter-bytes"),
    );
    let per = |a: u64, b: u64| a as f64 / b.max(1) as f64;
    format!(
        "{files} files, {entries} entries, {blocks} data blocks ({:.1} entries/block); index {:.2} MiB (keys {:.2} MiB, {:.1} B/key; {:.1} B/block in all), filter {:.2} MiB ({:.2} bits/entry), kept outside the cache {:.2} MiB (rocksdb.estimate-table-readers-mem)",
        per(entries, blocks),
        index as f64 / MIB,
        keys as f64 / MIB,
        per(keys, blocks),
        per(index, blocks),
        filter as f64 / MIB,
        8.0 * per(filter, entries),
        sum("rocksdb.estimate-table-readers-mem") as f64 / MIB,
    )
}

/// Opens instance `i`'s backend, engine handle and checkpoint storage for `variant`.
fn open_instance(
    shared: &Shared,
    cfg: &BackendConfig,
    dir: &str,
) -> (
    Box<dyn StateBackend>,
    Box<dyn EngineHandle>,
    Arc<CheckpointStorage>,
) {
    match shared {
        Shared::Env(env) => {
            let b = env.temp_lsm(cfg.clone(), lsm_options()).expect("backend");
            let e = b.engine();
            (
                Box::new(b),
                Box::new(e),
                env.open_storage(dir).expect("storage"),
            )
        }
        Shared::None => {
            let b = LsmBackend::temp_with(cfg.clone(), lsm_options()).expect("backend");
            let e = b.engine();
            (
                Box::new(b),
                Box::new(e),
                Arc::new(CheckpointStorage::open(dir).expect("storage")),
            )
        }
        #[cfg(feature = "rocksdb")]
        Shared::RocksDb(memory, io) => {
            use keyed_state::backend::rocksdb::{RocksDbBackend, RocksDbOptions};
            let b = RocksDbBackend::temporary(
                cfg.clone(),
                RocksDbOptions {
                    shared: Some(memory.clone()),
                    ..RocksDbOptions::default()
                },
            )
            .expect("backend");
            let e = b.engine();
            (
                Box::new(b),
                Box::new(e),
                io.open_storage(dir).expect("storage"),
            )
        }
    }
}

/// A description of what the budget (or RocksDB's shared memory) charges now, for the profile.
type Breakdown = Box<dyn Fn() -> String + Send>;

fn breakdown_of(shared: &Shared) -> Breakdown {
    match shared {
        Shared::Env(env) => {
            let env = env.clone();
            Box::new(move || {
                let m = env.stats().memory;
                let st = env.stats();
                format!(
                    "charged {:.1} MiB (memtables {:.1} mutable / {:.1} pending / {:.1} held, cache {:.1}, sst metadata {:.1}, reserved {:.1}); jobs {} flushes / {} compactions, queued {} / {}, flush queue wait {:.1} s, write-buffer stalls {:.1} s",
                    m.total() as f64 / MIB,
                    m.memtables_mutable as f64 / MIB,
                    m.memtables_pending_flush as f64 / MIB,
                    m.memtables_flushed_held as f64 / MIB,
                    m.block_cache as f64 / MIB,
                    m.sst_metadata as f64 / MIB,
                    m.reserved as f64 / MIB,
                    st.flush_jobs,
                    st.compaction_jobs,
                    st.flushes_queued,
                    st.compactions_queued,
                    st.flush_queue_micros as f64 / 1e6,
                    st.write_buffer_stall_micros as f64 / 1e6,
                )
            })
        }
        #[cfg(feature = "rocksdb")]
        Shared::RocksDb(memory, _) => {
            let memory = memory.clone();
            Box::new(move || {
                memory
                    .metrics()
                    .iter()
                    .map(|m| format!("{}={:.1} MiB", m.name, m.value as f64 / MIB))
                    .collect::<Vec<_>>()
                    .join(", ")
            })
        }
        Shared::None => Box::new(String::new),
    }
}

/// Live heap bytes by size class (`counting_alloc::SIZES`), for the profile.
fn by_size() -> String {
    counting_alloc::SIZES
        .iter()
        .zip(counting_alloc::live_by_size())
        .map(|((name, _), b)| format!("{name} {:.1}", b as f64 / MIB))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The state of the process at the peak `RssAnon` of each phase (load, mix, checkpoint): what the budget
/// charges and, with `KS_PROFILE_ALLOC=1`, the live heap bytes by thread kind.
#[derive(Default)]
struct Profile {
    at_peak: [Option<(u64, String)>; 3],
}

impl Profile {
    fn sample(&mut self, phase: usize, rss_kib: u64, breakdown: &Breakdown) {
        let slot = &mut self.at_peak[phase.min(2)];
        if slot.as_ref().is_some_and(|(max, _)| *max >= rss_kib) {
            return;
        }
        let mut what = format!(
            "AnonHugePages {:.1} MiB; {}; {}",
            smaps_rollup_kib("AnonHugePages:") as f64 / 1024.0,
            anon_maps::describe(),
            breakdown()
        );
        if counting_alloc::enabled() {
            let (live, large) = counting_alloc::live();
            let total: isize = live.iter().sum();
            what += &format!(
                "; live heap {:.1} MiB: {}; in allocations >= 256 KiB {:.1} MiB; by size {}",
                total as f64 / MIB,
                counting_alloc::KINDS
                    .iter()
                    .zip(live)
                    .map(|(k, b)| format!("{k} {:.1}", b as f64 / MIB))
                    .collect::<Vec<_>>()
                    .join(", "),
                large as f64 / MIB,
                by_size()
            );
        }
        *slot = Some((rss_kib, what));
    }
}

/// Part 2 in this process: the variant `variant`; prints one table row.
fn part2_child(variant: &str) {
    let instances = env_num("KS_MO_INSTANCES", 16) as usize;
    let total_mb = env_num("KS_MO_TOTAL_MB", 512);
    let budget_mb = env_num("KS_MO_BUDGET_MB", 256);
    let budget = (budget_mb as usize) << 20;
    let baseline = status_kib("RssAnon:");
    let peak = Arc::new(AtomicU64::new(baseline));
    let stop = Arc::new(AtomicBool::new(false));
    let phase = Arc::new(AtomicUsize::new(0));
    let profile: Arc<Mutex<Profile>> = Arc::default();
    if variant == "shared-cached" {
        let _ = CACHED_METADATA.set(true);
    }
    let shared = match variant {
        "shared" | "shared-cached" => Shared::Env(
            StateEnv::new(StateEnvOptions {
                memory_budget: Some(budget),
                background_threads: env_num("KS_MO_BG_THREADS", 4) as usize,
                io_threads: env_num("KS_MO_IO_THREADS", 2) as usize,
                rmw_cache_ratio: std::env::var("KS_MO_RMW_CACHE_RATIO")
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(keyed_state::backend::lsm::DEFAULT_RMW_CACHE_RATIO),
                row_cache_ratio: std::env::var("KS_MO_ROW_CACHE_RATIO")
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(keyed_state_lsm::DEFAULT_ROW_CACHE_RATIO),
                ..StateEnvOptions::default()
            })
            .expect("env"),
        ),
        "separate" => Shared::None,
        #[cfg(feature = "rocksdb")]
        "rocksdb-flink" => Shared::RocksDb(
            keyed_state::backend::rocksdb::RocksDbShared::new(budget).expect("rocksdb memory"),
            // Only for the checkpoint storages' I/O runtime (one background thread, idle).
            StateEnv::new(StateEnvOptions {
                background_threads: 1,
                io_threads: 2,
                ..StateEnvOptions::default()
            })
            .expect("env"),
        ),
        other => {
            println!("| {other} | unknown variant (feature `rocksdb` off?) |");
            return;
        }
    };
    let breakdown = breakdown_of(&shared);
    let sampler = {
        let (peak, stop, phase, profile) = (
            Arc::clone(&peak),
            Arc::clone(&stop),
            Arc::clone(&phase),
            Arc::clone(&profile),
        );
        // KS_MO_TRACE=1: the same figures every second on stderr.
        let trace = env_num("KS_MO_TRACE", 0) == 1;
        let (started, mut last_trace) = (Instant::now(), Instant::now());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let rss = status_kib("RssAnon:");
                peak.fetch_max(rss, Ordering::Relaxed);
                if trace && last_trace.elapsed() >= Duration::from_secs(1) {
                    last_trace = Instant::now();
                    let live = if counting_alloc::enabled() {
                        let (live, large) = counting_alloc::live();
                        format!(
                            "; live {:.1} MiB, large {:.1}, by size {}",
                            live.iter().sum::<isize>() as f64 / MIB,
                            large as f64 / MIB,
                            by_size()
                        )
                    } else {
                        String::new()
                    };
                    eprintln!(
                        "trace {:.0} s phase {} RssAnon {:.1} MiB{live}; {}; {}",
                        started.elapsed().as_secs_f64(),
                        phase.load(Ordering::Relaxed),
                        rss as f64 / 1024.0,
                        anon_maps::describe(),
                        breakdown()
                    );
                }
                profile.lock().expect("profile").sample(
                    phase.load(Ordering::Relaxed),
                    rss,
                    &breakdown,
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let root = tempfile::tempdir().expect("root");
    let mut ops: Vec<Operator> = (0..instances)
        .map(|i| {
            let range =
                key_group_range_for_operator(MAX_P, instances as u32, i as u32).expect("range");
            let cfg = KeyedStateStore::config_for(&LongSerializer, MAX_P, range);
            let dir = root.path().join(format!("root-{i}"));
            let dir = dir.to_str().expect("utf-8");
            let (backend, engine, storage) = open_instance(&shared, &cfg, dir);
            operator(backend, engine, &cfg, &storage, 3)
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
    let pool = value_pool(&mut rng);
    let (t, cpu) = (Instant::now(), cpu_seconds());
    for k in 0..keys as i64 {
        let kg = ops[0].store.key_group_of(&k).expect("kg");
        let op = &mut ops[owner[kg as usize]];
        op.store.set_current_key(&k).expect("key");
        for s in &op.states {
            let v = &pool[rng.random_range(0..pool.len())];
            op.store.value(s).expect("state").update(v).expect("put");
        }
    }
    let (load, load_cpu) = (t.elapsed(), cpu_seconds() - cpu);
    eprintln!(
        "{variant}: write stalls of the load by cause: {}",
        stalls_by_cause(&ops.iter().map(|o| o.engine.as_ref()).collect::<Vec<_>>())
    );
    peak.fetch_max(status_kib("RssAnon:"), Ordering::Relaxed);
    let peak_load = peak.load(Ordering::Relaxed);
    anon_maps::mimalloc_stats(&format!("{variant} after the load"));
    // The mix: random keys over the loaded ones; per key a read of state 0, and a read and an update of
    // state 1 (Flink's valueGet and valueUpdate), an update of state 2 (valueAdd): 4 operations.
    phase.store(1, Ordering::Relaxed);
    let mix_keys = env_num("KS_MO_MIX_KEYS", (keys / 4).max(1));
    let (t, cpu) = (Instant::now(), cpu_seconds());
    let mut found = 0u64;
    for _ in 0..mix_keys {
        let k = rng.random_range(0..keys as i64);
        let kg = ops[0].store.key_group_of(&k).expect("kg");
        let op = &mut ops[owner[kg as usize]];
        op.store.set_current_key(&k).expect("key");
        let v = &pool[rng.random_range(0..pool.len())];
        found += op
            .store
            .value(&op.states[0])
            .expect("state")
            .get()
            .expect("get")
            .is_some() as u64;
        let mut s1 = op.store.value(&op.states[1]).expect("state");
        found += s1.get().expect("get").is_some() as u64;
        s1.update(v).expect("put");
        op.store
            .value(&op.states[2])
            .expect("state")
            .update(v)
            .expect("put");
    }
    let (mix, mix_cpu) = (t.elapsed(), cpu_seconds() - cpu);
    assert_eq!(found, 2 * mix_keys, "every mixed key was loaded");
    eprintln!(
        "{variant}: table readers after the mix: {}",
        table_readers(&ops.iter().map(|o| o.engine.as_ref()).collect::<Vec<_>>())
    );
    peak.fetch_max(status_kib("RssAnon:"), Ordering::Relaxed);
    let peak_mix = peak.load(Ordering::Relaxed);
    anon_maps::mimalloc_stats(&format!("{variant} after the mix"));
    phase.store(2, Ordering::Relaxed);
    let (t, cpu) = (Instant::now(), cpu_seconds());
    for op in ops.iter_mut() {
        let p = op.store.checkpoint(&op.ck, 1).expect("sync");
        p.run().expect("async");
        op.ck.notify_complete(1).expect("confirm");
    }
    eprintln!(
        "{variant}: checkpoint phase {:.2} s wall, {:.2} s CPU",
        t.elapsed().as_secs_f64(),
        cpu_seconds() - cpu
    );
    anon_maps::mimalloc_stats(&format!("{variant} after the checkpoints"));
    let stalls: Option<f64> = ops.iter().map(|o| stall_ms_of(o.engine.as_ref())).sum();
    let names = thread_names();
    stop.store(true, Ordering::Relaxed);
    let _ = sampler.join();
    let peak = peak.load(Ordering::Relaxed);
    let budgeted = !matches!(shared, Shared::None);
    let count = |p: &str| names.iter().filter(|n| n.starts_with(p)).count();
    let (ours, io) = (count("lsm-bg"), count("ckpt-io"));
    let rocksdb = count("rocksdb:");
    println!(
        "| {variant} | {} | {:.0} | {:.1} s | {:.0} k/s | {:.1} s | {:.0} k/s | {:.1} s | {:.0} | {:.0} | {:.0} | {:.0} | {} | {:.0} | {} (engine {}, io {}) | {} |",
        if budgeted { format!("{budget_mb} MiB") } else { "none".into() },
        (entries * ENTRY_BYTES) as f64 / MIB,
        load.as_secs_f64(),
        (keys * 3) as f64 / load.as_secs_f64() / 1000.0,
        load_cpu,
        (mix_keys * 4) as f64 / mix.as_secs_f64() / 1000.0,
        mix_cpu,
        baseline as f64 / 1024.0,
        peak_load as f64 / 1024.0,
        peak_mix as f64 / 1024.0,
        peak as f64 / 1024.0,
        if budgeted {
            format!(
                "{:.2}",
                peak as f64 / ((budget as u64 >> 10) + baseline) as f64
            )
        } else {
            "-".into()
        },
        status_kib("VmHWM:") as f64 / 1024.0,
        names.len(),
        ours + rocksdb,
        io,
        match stalls {
            Some(ms) => format!("{ms:.0} ms"),
            None => "not reported".into(),
        },
    );
    if let Ok(path) = std::env::var("KS_MO_RESULTS") {
        let line = format!(
            "{variant} ratio={} load_kps={:.1} mix_kps={:.1} load_cpu={:.1} mix_cpu={:.1} stall_ms={} threads_ours={}\n",
            if budgeted {
                format!("{:.3}", peak as f64 / ((budget as u64 >> 10) + baseline) as f64)
            } else {
                "-".into()
            },
            (keys * 3) as f64 / load.as_secs_f64() / 1000.0,
            (mix_keys * 4) as f64 / mix.as_secs_f64() / 1000.0,
            load_cpu,
            mix_cpu,
            stalls.map_or("-".into(), |ms| format!("{ms:.0}")),
            ours + io + count("ckpt-sweep"),
        );
        use std::io::Write;
        let appended = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = appended {
            eprintln!("{variant}: cannot append to {path}: {e}");
        }
    }
    match &shared {
        Shared::Env(env) => eprintln!("{variant}: env memory at the end: {:?}", env.stats().memory),
        #[cfg(feature = "rocksdb")]
        Shared::RocksDb(memory, _) => eprintln!(
            "{variant}: shared RocksDB memory at the end: {:?}; {:?}",
            memory,
            memory
                .metrics()
                .iter()
                .map(|m| format!("{}={}", m.name, m.value))
                .collect::<Vec<_>>()
        ),
        Shared::None => {}
    }
    eprintln!("{variant}: threads {names:?}");
    for (i, at) in profile.lock().expect("profile").at_peak.iter().enumerate() {
        if let Some((rss, what)) = at {
            eprintln!(
                "{variant}: at the peak RssAnon of the {}: {:.1} MiB; {what}",
                ["load", "mix", "checkpoint"][i],
                *rss as f64 / 1024.0
            );
        }
    }
}

fn part2() {
    let default_variants = if cfg!(feature = "rocksdb") {
        "shared,separate,rocksdb-flink"
    } else {
        "shared,separate"
    };
    let variants = std::env::var("KS_MO_VARIANTS").unwrap_or_else(|_| default_variants.into());
    let mut variants: Vec<&str> = variants.split(',').map(str::trim).collect();
    let rounds = env_num("KS_MO_VARIANT_ROUNDS", 1);
    let defaults = env_num("KS_MO_ALLOCATOR_DEFAULTS", 0) == 1;
    println!(
        "## Part 2: many instances, 3 value states each (allocator: mimalloc, {})\n",
        ALLOCATOR_SETTINGS
            .iter()
            .map(|(name, value)| match std::env::var(name) {
                Ok(v) => format!("{name}={v}"),
                Err(_) if defaults => format!("{name} unset"),
                Err(_) => format!("{name}={value}"),
            })
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!("| variant | budget | raw MiB | load | load puts | load CPU | mix ops | mix CPU | RssAnon before (MiB) | peak RssAnon, load (MiB) | peak, load + mix (MiB) | peak, load + mix + checkpoint (MiB) | peak / (budget + before) | VmHWM (MiB) | threads | write stalls |");
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    let exe = std::env::current_exe().expect("exe");
    // KS_MO_CHECK=1: the children append their figures to a file, checked at the end (`check`).
    let check = env_num("KS_MO_CHECK", 0) == 1;
    let results_dir = tempfile::tempdir().expect("results dir");
    let results = check.then(|| results_dir.path().join("results"));
    for round in 0..rounds {
        if round > 0 {
            variants.reverse();
        }
        for variant in &variants {
            let mut child = std::process::Command::new(&exe);
            // mimalloc (our allocator, and RocksDB's with `bench-malloc-override`) by default asks for
            // transparent huge pages and gives freed memory back to the system only after a second; at the
            // peaks that memory, which no allocation held, was a third of RssAnon
            // (design/bench-results/2026-12-05-memory-overrun). The children run with both off unless
            // KS_MO_ALLOCATOR_DEFAULTS=1 (a variable the caller sets itself is kept); every variant runs
            // with the same settings.
            if env_num("KS_MO_ALLOCATOR_DEFAULTS", 0) != 1 {
                for (name, value) in ALLOCATOR_SETTINGS {
                    if std::env::var_os(name).is_none() {
                        child.env(name, value);
                    }
                }
            }
            if let Some(path) = &results {
                child.env("KS_MO_RESULTS", path);
            }
            let out = child
                .env("KS_MO_CHILD", variant)
                .stderr(std::process::Stdio::inherit())
                .output()
                .expect("child");
            print!("{}", String::from_utf8_lossy(&out.stdout));
            if !out.status.success() {
                println!("| {variant} | failed: {} |", out.status);
            }
        }
    }
    println!();
    if let Some(path) = results {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        if !check_results(&text) {
            std::process::exit(1);
        }
    }
}

/// The memory and throughput targets over the rows the children appended (`KS_MO_CHECK=1`):
/// every `shared` run's peak `RssAnon` ≤ `KS_MO_MAX_RATIO` (default 1.10) × budget + baseline, and the
/// median over rounds of `shared`'s load and mix throughput ≥ `KS_MO_MIN_SPEED` (default 0.90) × that of
/// `separate`, and every `shared` run's threads of ours (background, I/O runtime, sweeper) ≤ `KS_MO_MAX_THREADS`
/// (default 8). Prints `campaign` lines (`scripts/long-checks.sh` tabulates them); false if a target is missed
/// or a figure is missing.
fn check_results(text: &str) -> bool {
    let max_ratio: f64 = std::env::var("KS_MO_MAX_RATIO")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1.10);
    let min_speed: f64 = std::env::var("KS_MO_MIN_SPEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.90);
    let field = |variant: &str, name: &str| -> Vec<f64> {
        text.lines()
            .filter(|l| l.split_whitespace().next() == Some(variant))
            .filter_map(|l| {
                l.split_whitespace()
                    .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
                    .and_then(|v| v.parse().ok())
            })
            .collect()
    };
    let median = |mut v: Vec<f64>| -> Option<f64> {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied()
    };
    let ratios = field("shared", "ratio");
    let worst = ratios.iter().copied().fold(f64::NAN, f64::max);
    let memory_ok = !ratios.is_empty() && worst <= max_ratio;
    println!(
        "campaign many_operators_memory runs={} worst_peak_ratio={worst:.3} limit={max_ratio} rocksdb_flink_ratios={:?} failures={}",
        ratios.len(),
        field("rocksdb-flink", "ratio"),
        u8::from(!memory_ok)
    );
    let max_threads: f64 = std::env::var("KS_MO_MAX_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8.0);
    let threads = field("shared", "threads_ours");
    let most = threads.iter().copied().fold(f64::NAN, f64::max);
    let threads_ok = !threads.is_empty() && most <= max_threads;
    println!(
        "campaign many_operators_threads runs={} most_threads_of_ours={most} limit={max_threads} failures={}",
        threads.len(),
        u8::from(!threads_ok)
    );
    let mut ok = memory_ok && threads_ok;
    for phase in ["load_kps", "mix_kps"] {
        let (ours, theirs) = (
            median(field("shared", phase)),
            median(field("separate", phase)),
        );
        let speed = match (ours, theirs) {
            (Some(a), Some(b)) if b > 0.0 => Some(a / b),
            _ => None,
        };
        let pass = speed.is_some_and(|s| s >= min_speed);
        ok &= pass;
        println!(
            "campaign many_operators_{phase} shared_over_separate={} limit={min_speed} failures={}",
            speed.map_or("missing".into(), |s| format!("{s:.3}")),
            u8::from(!pass)
        );
    }
    ok
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
