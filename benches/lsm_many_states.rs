//! Many value states in one backend: bytes each incremental checkpoint uploads against the data changed
//! since the one before (`design/lsm-many-states.md`), on the LSM backend and the RocksDB variant
//! (feature `rocksdb`) under the same workload, printed as tables.
//!
//! One backend per variant with `KS_LMS_STATES` value states (default 24) and `KS_LMS_KEYS` keys
//! (default 40,000; `i64` keys, 100-byte values of a 16-symbol alphabet), default engine options, written
//! key by key through `KeyedStateStore` (each key updates every state). Then a full checkpoint and
//! `KS_LMS_ROUNDS` (default 40) checkpoints, each after 1 % of the keys (drawn uniformly) changed in every
//! state, and after the engine's flushes and compactions are done (so that each compaction's output is in
//! the next checkpoint: the checkpoint pays for every compaction). Printed per checkpoint: bytes uploaded,
//! uploaded / raw bytes of the changed entries, and for the LSM engine the flush and compaction bytes
//! written since the checkpoint before, the new files' bytes by level, and the L0 sorted runs; then the
//! median, p90, max and amortised mean (sum uploaded / sum changed) over checkpoints 2.., the write stall
//! time, and `KS_LMS_READS` (default 200,000) point reads of random (key, state) pairs timed by the
//! reading thread's CPU time.
//!
//! `KS_LMS_RMW_CACHE_MIB` sets the LSM backend's read-modify-write cache in MiB (unset: the default, 64 MiB
//! without a budget; 0: off).
//!
//! `KS_LMS_L0_BASE_RATIO_PCT` sets the LSM engine's `l0_base_ratio` in percent (unset: the engine's
//! default, 25; 0: L0 into the base level at `l0_compaction_trigger` runs, the leveled rule alone).
//! `KS_LMS_BACKENDS` (comma-separated: `lsm,rocksdb`) picks the variants (RocksDB needs `--features
//! rocksdb`). Run: `cargo bench --bench lsm_many_states [--features rocksdb]`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use keyed_state::backend::lsm::{LsmBackend, LsmEngine};
use keyed_state::backend::{EngineHandle, StateBackend};
use keyed_state::checkpoint::{CheckpointOptions, CheckpointStorage, Checkpointer};
use keyed_state::keygroup::KeyGroupRange;
use keyed_state::serializer::{BytesSerializer, LongSerializer};
use keyed_state::state::{KeyedStateStore, ValueState, ValueStateDescriptor};
use keyed_state_lsm::Options;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "support/value_workload.rs"]
mod value_workload;
use value_workload::{env_num, value, ENTRY_BYTES, MAX_P, MIB};

/// The calling thread's CPU time (user + system) in seconds, from `/proc/thread-self/stat`.
fn thread_cpu_secs() -> f64 {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap_or_default();
    // Fields after the command name (which ends with the last ')'): state is field 3, utime 14, stime 15.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    let ticks = f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0);
    ticks as f64 / 100.0
}

fn load_avg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The live SST files of an LSM engine: number -> (level, size), from a checkpoint of it (hard links).
fn lsm_files(e: &LsmEngine) -> BTreeMap<u64, (usize, u64)> {
    // The engine's files as its manifest lists them (an engine checkpoint would need the backend's
    // read-modify-write cache written back first).
    let info = keyed_state_lsm::inspect_dir(&keyed_state_lsm::storage::OsStorage, e.path())
        .expect("lsm files");
    info.files
        .iter()
        .map(|f| (f.number, (f.level, f.size)))
        .collect()
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

fn run(variant: &str) {
    let states = env_num("KS_LMS_STATES", 24) as usize;
    let keys = env_num("KS_LMS_KEYS", 40_000) as i64;
    let rounds = env_num("KS_LMS_ROUNDS", 40);
    let reads = env_num("KS_LMS_READS", 200_000);
    let range = KeyGroupRange::new(0, MAX_P as u16 - 1);
    let cfg = KeyedStateStore::config_for(&LongSerializer, MAX_P, range);
    let root = tempfile::tempdir().expect("root");
    let storage = Arc::new(CheckpointStorage::local(root.path()).expect("storage"));
    let (backend, engine, db): (
        Box<dyn StateBackend>,
        Box<dyn EngineHandle>,
        Option<LsmEngine>,
    ) = match variant {
        "lsm" => {
            let opts = Options {
                l0_base_ratio: std::env::var("KS_LMS_L0_BASE_RATIO_PCT")
                    .ok()
                    .and_then(|v| v.parse::<f64>().ok())
                    .map_or(Options::default().l0_base_ratio, |p| p / 100.0),
                ..Options::default()
            };
            let mut b = LsmBackend::temp_with(cfg.clone(), opts).expect("backend");
            if let Ok(mib) = std::env::var("KS_LMS_RMW_CACHE_MIB") {
                let mib: usize = mib.parse().expect("KS_LMS_RMW_CACHE_MIB: MiB");
                b.set_rmw_cache_capacity(mib << 20).expect("cache");
            }
            let e = b.engine();
            (Box::new(b), Box::new(e.clone()), Some(e))
        }
        #[cfg(feature = "rocksdb")]
        "rocksdb" => {
            let b = keyed_state::backend::rocksdb::RocksDbBackend::temporary(
                cfg.clone(),
                Default::default(),
            )
            .expect("backend");
            let e = b.engine();
            (Box::new(b), Box::new(e), None)
        }
        other => panic!("unknown variant {other} (rocksdb needs --features rocksdb)"),
    };
    let mut store = KeyedStateStore::new(backend, LongSerializer).expect("store");
    let vs: Vec<ValueState<BytesSerializer>> = (0..states)
        .map(|i| {
            store
                .register_value(ValueStateDescriptor::new(
                    format!("state-{i}"),
                    BytesSerializer,
                ))
                .expect("register")
        })
        .collect();
    let ck = Checkpointer::open(Arc::clone(&storage), &cfg, CheckpointOptions::default())
        .expect("checkpointer");
    let metric = |name: &str| {
        engine
            .metrics()
            .iter()
            .find(|m| m.name == name)
            .map_or(0, |m| m.value)
    };
    let mut rng = StdRng::seed_from_u64(7);
    println!(
        "## {variant}: {states} value states x {keys} keys ({:.0} MiB of raw entries), load avg {}\n",
        (states as u64 * keys as u64 * ENTRY_BYTES) as f64 / MIB,
        load_avg()
    );
    let t = Instant::now();
    for k in 0..keys {
        store.set_current_key(&k).expect("key");
        for s in &vs {
            store
                .value(s)
                .expect("state")
                .update(&value(&mut rng))
                .expect("put");
        }
    }
    let load = t.elapsed();
    let stall_load = metric("rocksdb.stall.micros");
    println!(
        "load: {:.1} s, write stalls {:.0} ms\n",
        load.as_secs_f64(),
        stall_load as f64 / 1e3
    );
    println!("| checkpoint | uploaded | uploaded / changed raw | files new | files reused | flush written | compaction written | compactions | new bytes by level | L0 runs |");
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    let mut before = db.as_ref().map(lsm_files).unwrap_or_default();
    let (mut flush0, mut comp0, mut n0) = (0u64, 0u64, 0u64);
    let mut ratios = Vec::new();
    let (mut sum_up, mut sum_raw) = (0u64, 0u64);
    let mut max_runs = 0usize;
    for id in 1..=rounds + 1 {
        let changed = if id == 1 {
            keys as u64 * states as u64
        } else {
            let n = (keys / 100).max(1);
            for _ in 0..n {
                let k = rng.random_range(0..keys);
                store.set_current_key(&k).expect("key");
                for s in &vs {
                    store
                        .value(s)
                        .expect("state")
                        .update(&value(&mut rng))
                        .expect("put");
                }
            }
            n as u64 * states as u64
        };
        engine.wait_for_background_work().expect("settle");
        let p = store.checkpoint(&ck, id).expect("sync part");
        let s = p.run().expect("async part");
        ck.notify_complete(id).expect("confirm");
        let raw = changed * ENTRY_BYTES;
        let ratio = s.bytes_written as f64 / raw as f64;
        if id > 1 {
            ratios.push(ratio);
            sum_up += s.bytes_written;
            sum_raw += raw;
        }
        let (mut by_level, mut flush, mut comp, mut comps, mut runs) = (
            String::from("-"),
            String::from("-"),
            String::from("-"),
            0,
            0,
        );
        if let Some(e) = &db {
            let st = e.stats();
            let now = lsm_files(e);
            let mut per: BTreeMap<usize, u64> = BTreeMap::new();
            for (n, (l, size)) in &now {
                if !before.contains_key(n) {
                    *per.entry(*l).or_default() += size;
                }
            }
            by_level = per
                .iter()
                .map(|(l, b)| format!("L{l} {:.1}", *b as f64 / MIB))
                .collect::<Vec<_>>()
                .join(", ");
            flush = format!("{:.1} MiB", (st.flush_bytes_written - flush0) as f64 / MIB);
            comp = format!(
                "{:.1} MiB",
                (st.compaction_bytes_written - comp0) as f64 / MIB
            );
            comps = st.compactions - n0;
            (flush0, comp0, n0) = (
                st.flush_bytes_written,
                st.compaction_bytes_written,
                st.compactions,
            );
            runs = st.l0_sorted_runs;
            max_runs = max_runs.max(runs);
            before = now;
        }
        println!(
            "| {id} | {:.2} MiB | {ratio:.2} | {} | {} | {flush} | {comp} | {comps} | {by_level} | {runs} |",
            s.bytes_written as f64 / MIB,
            s.files_new,
            s.files_reused,
        );
    }
    let mut sorted = ratios.clone();
    sorted.sort_by(|a, b| a.total_cmp(b));
    let within = ratios.iter().filter(|r| **r <= 1.2).count();
    println!(
        "\ncheckpoints 2..{}: uploaded / changed raw: median {:.2}, p90 {:.2}, max {:.2}, amortised mean {:.2} ({:.1} MiB for {:.1} MiB); {within} of {} at <= 1.2; max L0 runs {max_runs}; write stalls after load {:.0} ms",
        rounds + 1,
        percentile(&sorted, 0.5),
        percentile(&sorted, 0.9),
        sorted.last().copied().unwrap_or(0.0),
        sum_up as f64 / sum_raw.max(1) as f64,
        sum_up as f64 / MIB,
        sum_raw as f64 / MIB,
        ratios.len(),
        (metric("rocksdb.stall.micros") - stall_load) as f64 / 1e3
    );
    // Point reads of random (key, state) pairs, after background work settled.
    engine.wait_for_background_work().expect("settle");
    let cpu = thread_cpu_secs();
    let t = Instant::now();
    let mut found = 0u64;
    for _ in 0..reads {
        let k = rng.random_range(0..keys);
        let s = &vs[rng.random_range(0..states)];
        store.set_current_key(&k).expect("key");
        if store.value(s).expect("state").get().expect("get").is_some() {
            found += 1;
        }
    }
    let (wall, cpu) = (t.elapsed().as_secs_f64(), thread_cpu_secs() - cpu);
    assert_eq!(found, reads, "every key was written");
    println!(
        "point reads: {reads} in {wall:.2} s wall, {cpu:.2} s CPU of the reading thread ({:.2} us/read CPU)",
        cpu * 1e6 / reads as f64
    );
    println!(
        "\nengine after: {}\nload avg at the end {}\n",
        engine.summary(),
        load_avg()
    );
}

fn main() {
    let variants = std::env::var("KS_LMS_BACKENDS").unwrap_or_else(|_| "lsm,rocksdb".into());
    for v in variants.split(',').map(str::trim).filter(|v| !v.is_empty()) {
        run(v);
    }
}
