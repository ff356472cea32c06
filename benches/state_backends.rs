//! Flink's state micro-benchmarks (flink-benchmarks' `org.apache.flink.state.benchmark`) on the heap,
//! LSM and (with `--features rocksdb`) RocksDB backends in the same run, plus savepoint write / restore
//! throughput and a 1→2 rescale-restore. Prints tables; see `design/bench-results/`.
//!
//! ```text
//! cargo bench --bench state_backends                                   # heap + LSM
//! CARGO_TARGET_DIR=/work/target-rocksdb cargo bench --features rocksdb --bench state_backends
//! ```
//!
//! Environment: `BENCH_OPS` (max ops per sample, default 300000), `BENCH_SECS` (max seconds of the
//! benchmark thread's CPU time per sample, default 0.5), `BENCH_LIST_ADDALL_OPS` (the ops of every listAddAll sample, default
//! 100000: a fixed count, as its lists grow with every op), `BENCH_ROUNDS` (default 3; the median round is reported), `BENCH_SP_KEYS` (savepoint keys,
//! default 1000000), `BENCH_ONLY` (comma-separated sections: value,list,map,reducing,savepoint,mapsavepoint), `BENCH_OP` (comma-separated op names), `BENCH_KINDS`
//! (comma-separated backends: heap,lsm-nocache,lsm,lsm+cache,rocksdb; `lsm` as it opens (no
//! read-modify-write cache by default), `lsm-nocache` with the cache set off), `BENCH_RMW_CACHE_MIB` (the LSM+cache backend's
//! read-modify-write cache, default 1024), `BENCH_SHAPE` (set: print each engine's shape before every sample), `BENCH_SAMPLES` (set: print every sample, not only the median), `BENCH_PREFIX_BLOOM` (the LSM backend's filter bits per state-key prefix, default 10, 0 = off), `BENCH_BLOOM` (bloom bits per key on both LSM and RocksDB,
//! default 0 = off), `BENCH_WRITE_BUFFER_MIB` (the memtable size of both engines, default 64),
//! `KS_BENCH_L0_BASE_RATIO_PCT` (the LSM engine's `l0_base_ratio` in percent, default the engine's 25; 0: L0 into the base level at the
//! trigger), `KS_BENCH_ROW_CACHE_MIB` (the LSM engine's row cache in MiB, 0 = off; default the engine's),
//! `KS_BENCH_CHECKPOINT_VIEW` (`0`: the LSM engine's checkpoint view off; default the engine's),
//! `BENCH_REDUCING_SHARED` (set: the reducing section's two states in one store instead of one store each). `BENCH_MAP_SCHEDULE` (`shared`: the map section's old schedule, every op on one setup round after
//! round; see `run_map`), `BENCH_MAP_KEYS_FROM_ZERO` (set: every map sample starts at key index 0),
//! `BENCH_MAP_ENGINE_HELD` (set: after the map setup, the LSM+cache backend writes its cache back into the
//! engine, then updates one entry of every map, so that each map is in the engine with one
//! dirty entry in the cache: the map scans merge the two), `BENCH_MAP_ENGINE_CLEAN` (set: after the map
//! setup, the LSM+cache backend writes its cache back and nothing more, as a checkpoint whose capture is
//! adopted leaves it: every entry in the engine and clean in the cache, none dirty; a map's first scan
//! takes it in whole, the later ones read the cache alone; `BENCH_SAMPLES` shows the first round apart).
//!
//! Setup as Flink's: `LongSerializer` keys, `VoidNamespace`, max parallelism 2 with both key groups
//! (`KeyGroupRange(0,1)`), 500,000 shuffled setup keys, new keys 500,000..999,999 for the "add" ops, maps of
//! 10 entries `Long → Double`, list values appended one at a time, 1,000,000 random values; every invocation
//! calls `set_current_key`. Map iteration ops count per entry (Flink's `@OperationsPerInvocation(10)`).
//!
//! The map section also times a yardstick: a plain `std` `HashMap<(i64, i64), f64>` holding the same 5,000,000
//! (key, user key) entries, doing the lookups of mapGet / mapContains / mapUpdate in the same order (no
//! `set_current_key`, no serialization), and, on the heap backend only, the copy-on-write cost after a
//! snapshot: the first map update right after a snapshot and 10,000 updates while it stays open. The
//! `mapsavepoint` section writes and restores a map-heavy savepoint (`BENCH_SP_KEYS / 10` keys × maps of 10
//! `Long → Double` entries) and times map reads right after the restore.
//!
//! `BENCH_TTL` (`never` or `expire3`; default off) turns the value, list and map sections into Flink's
//! `ttl/Ttl{Value,List,Map}StateBenchmark`: every state gets `StateTtlConfig::new(1,000,000 ms)` with Flink's
//! defaults (OnCreateAndWrite, NeverReturnExpired, background cleanup: the compaction filter querying time
//! every 1,000 entries on LSM and RocksDB, incremental (5, false) on the heap); a manual clock stamps the
//! setup writes at random times in [0, 1,000,000), is then set to 1,000,000 and, under `expire3`
//! (`Expire3PercentPerIteration`), advances by 30,000 ms before every sample (`never`: `NeverExpired`).
//! The map section then runs Flink's TTL map ops only (mapUpdate, mapAdd, mapGet, mapIsEmpty, mapIterator,
//! mapPutAll).

use std::collections::HashMap;
use std::time::Instant;

use keyed_state::backend::heap::HeapBackend;
use keyed_state::backend::lsm::LsmBackend;
use keyed_state::backend::{BackendConfig, EngineHandle, StateBackend};
use keyed_state::keygroup::{key_group_range_for_operator, KeyGroupRange};
use keyed_state::savepoint::{encode, SavepointReader, WriteOptions};
use keyed_state::serializer::{BytesSerializer, DoubleSerializer, LongSerializer};
use keyed_state::state::{
    KeyedStateStore, ListState, ListStateDescriptor, MapState, MapStateDescriptor, OperandFolding,
    ReducingState, ReducingStateDescriptor, StateTtlConfig, ValueState, ValueStateDescriptor,
};
use keyed_state::ttl::ManualClock;
use keyed_state::Result;
use keyed_state_lsm::{Compression as SstCompression, Options, SstOptions};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

const SETUP_KEY_COUNT: usize = 500_000;
const MAP_KEY_COUNT: usize = 10;
const LIST_VALUE_COUNT: usize = 100;
const RANDOM_VALUE_COUNT: usize = 1_000_000;
const MIB: usize = 1 << 20;

type Store = KeyedStateStore<LongSerializer>;

/// Time to live of the TTL benchmarks (Flink's `TtlStateBenchmarkBase`).
const TTL_MILLIS: u64 = 1_000_000;
/// Clock advance per sample under `Expire3PercentPerIteration`.
const TTL_EXPIRE_STEP: i64 = 30_000;

/// Flink's TTL benchmark modes (`BENCH_TTL`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum TtlMode {
    Off,
    NeverExpired,
    Expire3PercentPerIteration,
}

fn ttl_mode() -> TtlMode {
    match std::env::var("BENCH_TTL").as_deref() {
        Ok("never") => TtlMode::NeverExpired,
        Ok("expire3") => TtlMode::Expire3PercentPerIteration,
        _ => TtlMode::Off,
    }
}

/// The TTL configuration of every benchmarked state, if `BENCH_TTL` is on.
fn ttl_config() -> Option<StateTtlConfig> {
    (ttl_mode() != TtlMode::Off).then(|| StateTtlConfig::new(TTL_MILLIS))
}

/// Installs a manual clock on `store` when TTL is on.
fn ttl_clock(store: &mut Store) -> Option<std::sync::Arc<ManualClock>> {
    ttl_config()?;
    let clock = ManualClock::new(0);
    store.set_ttl_time_provider(clock.clone());
    Some(clock)
}

/// Setup write `i` happens at a random time in [0, TTL) (Flink's `TtlStateBenchmarkBase` setup).
fn ttl_setup_time(clock: &Option<std::sync::Arc<ManualClock>>, data: &Data, i: usize) {
    if let Some(c) = clock {
        c.set(data.value(i ^ 0x5a5a).rem_euclid(TTL_MILLIS as i64));
    }
}

/// After the setup the clock stands at TTL.
fn ttl_setup_done(clock: &Option<std::sync::Arc<ManualClock>>) {
    if let Some(c) = clock {
        c.set(TTL_MILLIS as i64);
    }
}

/// Before each sample: `Expire3PercentPerIteration` moves the clock by 3 % of the TTL.
fn ttl_before_sample(clock: &Option<std::sync::Arc<ManualClock>>) {
    if let (Some(c), TtlMode::Expire3PercentPerIteration) = (clock, ttl_mode()) {
        c.advance(TTL_EXPIRE_STEP);
    }
}

/// A descriptor with the benchmark's TTL, if on.
macro_rules! with_ttl {
    ($d:expr) => {
        match ttl_config() {
            Some(t) => $d.with_ttl(t),
            None => $d,
        }
    };
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Heap,
    /// The LSM backend as it opens: its read-modify-write cache at the default capacity.
    Lsm,
    /// The LSM backend with its read-modify-write cache off (capacity 0).
    LsmNoCache,
    /// The LSM backend with its read-modify-write cache (`BENCH_RMW_CACHE_MIB`).
    LsmCache,
    #[cfg(feature = "rocksdb")]
    RocksDb,
}

impl Kind {
    /// Every backend built, filtered by `BENCH_KINDS` (comma-separated names, case-insensitive).
    fn all() -> Vec<Kind> {
        let only = std::env::var("BENCH_KINDS").ok().map(|s| s.to_lowercase());
        vec![
            Kind::Heap,
            Kind::LsmNoCache,
            Kind::Lsm,
            Kind::LsmCache,
            #[cfg(feature = "rocksdb")]
            Kind::RocksDb,
        ]
        .into_iter()
        .filter(|k| {
            only.as_ref()
                .is_none_or(|o| o.split(',').any(|n| n == k.name().to_lowercase()))
        })
        .collect()
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Heap => "heap",
            Kind::Lsm => "LSM",
            Kind::LsmNoCache => "LSM-nocache",
            Kind::LsmCache => "LSM+cache",
            #[cfg(feature = "rocksdb")]
            Kind::RocksDb => "RocksDB",
        }
    }
}

/// Filter bits per state-key prefix of the LSM backend (`BENCH_PREFIX_BLOOM`, default 10 as the backend
/// ships; 0 = off). RocksDB has no counterpart in Flink's configuration (no prefix extractor).
fn prefix_bloom_bits() -> u32 {
    std::env::var("BENCH_PREFIX_BLOOM")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10)
}

/// The read-modify-write cache of the `LSM+cache` backend (`BENCH_RMW_CACHE_MIB`, default 1024: holds every
/// entry of every section).
fn rmw_cache_bytes() -> usize {
    std::env::var("BENCH_RMW_CACHE_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024)
        * MIB
}

/// Bloom filter bits per key on both sides (`BENCH_BLOOM`, default 0 = off as in Flink's benchmark).
fn bloom_bits() -> u32 {
    std::env::var("BENCH_BLOOM")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[cfg(feature = "rocksdb")]
fn rocksdb_options() -> keyed_state::backend::rocksdb::RocksDbOptions {
    let bits = bloom_bits();
    keyed_state::backend::rocksdb::RocksDbOptions {
        bloom_filter_bits_per_key: (bits > 0).then_some(f64::from(bits)),
        write_buffer_size: write_buffer_mib() * MIB,
        ..Default::default()
    }
}

/// The memtable (write buffer) size of both engines in MiB (`BENCH_WRITE_BUFFER_MIB`, default 64 as in
/// Flink's benchmark; smaller puts most of the state in files).
fn write_buffer_mib() -> usize {
    std::env::var("BENCH_WRITE_BUFFER_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64)
}

/// The LSM engine configured like RocksDB's benchmark options: one 64 MiB memtable + 1 immutable (RocksDB:
/// write buffer 64 MiB × 2), 8 MiB block cache, 4 KiB blocks, LZ4, no bloom filter, level compaction with
/// 64 MiB files and a 256 MiB L1.
fn lsm_options() -> Options {
    #[cfg(feature = "rocksdb")]
    let (mem, nmem, cache, block, bloom) = {
        let r = rocksdb_options();
        (
            r.write_buffer_size,
            r.max_write_buffer_number as usize,
            r.block_cache_size,
            r.block_size,
            r.bloom_filter_bits_per_key.map_or(0, |b| b.round() as u32),
        )
    };
    #[cfg(not(feature = "rocksdb"))]
    let (mem, nmem, cache, block, bloom) = (
        write_buffer_mib() * MIB,
        2usize,
        8 * MIB,
        4096usize,
        bloom_bits(),
    );
    Options {
        memtable_size: mem,
        max_immutable_memtables: nmem.saturating_sub(1).max(1),
        block_cache_size: cache,
        level_base_size: 256 * MIB as u64,
        target_file_size: 64 * MIB as u64,
        sst: SstOptions {
            block_size: block,
            bloom_bits_per_key: bloom,
            compression: SstCompression::Lz4,
            prefix_bloom_bits_per_key: prefix_bloom_bits(),
            ..SstOptions::default()
        },
        // `KS_BENCH_L0_BASE_RATIO_PCT` overrides the engine's default (25 %; 0: L0 into the base level at the
        // trigger, `design/lsm-many-states.md`).
        l0_base_ratio: std::env::var("KS_BENCH_L0_BASE_RATIO_PCT")
            .ok()
            .and_then(|v| v.parse::<f64>().ok())
            .map_or(Options::default().l0_base_ratio, |p| p / 100.0),
        // `KS_BENCH_ROW_CACHE_MIB` sets the engine's row cache (0 = off); unset, the engine's default.
        row_cache_size: std::env::var("KS_BENCH_ROW_CACHE_MIB")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .map_or(Options::default().row_cache_size, |m| Some(m * MIB)),
        // `KS_BENCH_CHECKPOINT_VIEW=0` turns the checkpoint view off; unset, the engine's default.
        checkpoint_view: std::env::var("KS_BENCH_CHECKPOINT_VIEW")
            .map_or(Options::default().checkpoint_view, |v| v != "0"),
        ..Options::default()
    }
}

fn describe_lsm(o: &Options) -> String {
    format!(
        "memtable={}MiB x (1 + {} immutable), block_cache={}MiB, block={}B, restart_interval={}, \
         compression={:?}, bloom={}, prefix filter={}, compaction=level (L0 trigger {}, stop {}, {} level sizing, pick {:?}), \
         target_file={}MiB, level_base={}MiB, level_multiplier={}, wal={}, background threads=2 (flush + compaction) at nice +{}",
        o.memtable_size / MIB,
        o.max_immutable_memtables,
        o.block_cache_size / MIB,
        o.sst.block_size,
        o.sst.restart_interval,
        o.sst.compression,
        if o.sst.bloom_bits_per_key == 0 {
            "off".to_string()
        } else {
            format!("{}bits", o.sst.bloom_bits_per_key)
        },
        if o.sst.prefix_bloom_bits_per_key == 0 {
            "off".to_string()
        } else {
            format!(
                "{}bits per state|KG|K|NS prefix",
                o.sst.prefix_bloom_bits_per_key
            )
        },
        o.l0_compaction_trigger,
        o.l0_stop_writes_trigger,
        if o.dynamic_level_bytes {
            "dynamic"
        } else {
            "static"
        },
        o.compaction_priority,
        o.target_file_size / MIB as u64,
        o.level_base_size / MIB as u64,
        o.level_multiplier,
        if o.wal { "on" } else { "off" },
        o.background_nice,
    )
}

/// A backend of `kind`, and a handle on its engine (for waiting on background work between samples).
fn backend(
    kind: Kind,
    config: BackendConfig,
) -> Result<(Box<dyn StateBackend>, Option<Box<dyn EngineHandle>>)> {
    Ok(match kind {
        Kind::Heap => (Box::new(HeapBackend::new(config)?), None),
        Kind::Lsm => {
            let b = LsmBackend::temp_with(config, lsm_options())?;
            let engine: Box<dyn EngineHandle> = Box::new(b.engine());
            (Box::new(b), Some(engine))
        }
        Kind::LsmNoCache => {
            let b = LsmBackend::temp_with(config, lsm_options())?.with_rmw_cache(0)?;
            let engine: Box<dyn EngineHandle> = Box::new(b.engine());
            (Box::new(b), Some(engine))
        }
        Kind::LsmCache => {
            let b =
                LsmBackend::temp_with(config, lsm_options())?.with_rmw_cache(rmw_cache_bytes())?;
            let engine: Box<dyn EngineHandle> = Box::new(b.engine());
            (Box::new(b), Some(engine))
        }
        #[cfg(feature = "rocksdb")]
        Kind::RocksDb => {
            let b = keyed_state::backend::rocksdb::RocksDbBackend::temporary(
                config,
                rocksdb_options(),
            )?;
            let engine: Box<dyn EngineHandle> = Box::new(b.engine());
            (Box::new(b), Some(engine))
        }
    })
}

/// A store on a backend of `kind`, and a handle on its engine.
fn store(
    kind: Kind,
    max_parallelism: u32,
    range: KeyGroupRange,
) -> Result<(Store, Option<Box<dyn EngineHandle>>)> {
    let config = Store::config_for(&LongSerializer, max_parallelism, range);
    let (backend, engine) = backend(kind, config)?;
    Ok((KeyedStateStore::new(backend, LongSerializer)?, engine))
}

/// CPU time of the calling thread in seconds.
fn thread_cpu() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_THREAD_CPUTIME_ID is supported on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

#[derive(Clone, Copy, Default)]
struct Sample {
    ops: u64,
    wall: f64,
    cpu: f64,
}

impl Sample {
    fn wall_rate(&self) -> f64 {
        self.ops as f64 / self.wall
    }
    fn cpu_rate(&self) -> f64 {
        self.ops as f64 / self.cpu.max(1e-9)
    }
}

/// Runs `f(i)` for consecutive invocation indexes until `max_ops` or `max_secs` of the calling thread's CPU
/// time (not wall time: on a loaded machine a wall-time limit cuts samples short by however long the thread
/// waited for a core); `per_op` ops per call.
/// Never inlined, so that a profiler can count one sample's instructions (e.g. callgrind's
/// `--toggle-collect='*state_backends::timed*' --dump-after='state_backends::timed'`: one dump per sample).
#[inline(never)]
fn timed(
    counter: &mut u64,
    max_ops: u64,
    max_secs: f64,
    per_op: u64,
    mut f: impl FnMut(usize) -> Result<()>,
) -> Result<Sample> {
    let c0 = thread_cpu();
    let t0 = Instant::now();
    let mut n = 0u64;
    while n < max_ops {
        for _ in 0..256 {
            f(*counter as usize)?;
            *counter += 1;
        }
        n += 256;
        if thread_cpu() - c0 >= max_secs {
            break;
        }
    }
    Ok(Sample {
        ops: n * per_op,
        wall: t0.elapsed().as_secs_f64(),
        cpu: thread_cpu() - c0,
    })
}

/// Flink's `StateBenchmarkConstants` (shuffled with a fixed seed).
struct Data {
    setup_keys: Vec<i64>,
    new_keys: Vec<i64>,
    map_keys: Vec<i64>,
    map_values: Vec<f64>,
    random_values: Vec<i64>,
    list_values: Vec<i64>,
}

impl Data {
    fn new() -> Data {
        let mut rng = StdRng::seed_from_u64(0x5eed);
        let mut setup_keys: Vec<i64> = (0..SETUP_KEY_COUNT as i64).collect();
        setup_keys.shuffle(&mut rng);
        let mut new_keys: Vec<i64> = (SETUP_KEY_COUNT as i64..2 * SETUP_KEY_COUNT as i64).collect();
        new_keys.shuffle(&mut rng);
        let mut map_keys: Vec<i64> = (0..MAP_KEY_COUNT as i64).collect();
        map_keys.shuffle(&mut rng);
        let map_values = (0..MAP_KEY_COUNT).map(|_| rng.random::<f64>()).collect();
        let random_values = (0..RANDOM_VALUE_COUNT).map(|_| rng.random()).collect();
        let list_values = (0..LIST_VALUE_COUNT).map(|_| rng.random()).collect();
        Data {
            setup_keys,
            new_keys,
            map_keys,
            map_values,
            random_values,
            list_values,
        }
    }
    fn setup_key(&self, i: usize) -> &i64 {
        &self.setup_keys[i % SETUP_KEY_COUNT]
    }
    fn new_key(&self, i: usize) -> &i64 {
        &self.new_keys[i % SETUP_KEY_COUNT]
    }
    fn value(&self, i: usize) -> i64 {
        self.random_values[i % RANDOM_VALUE_COUNT]
    }
    fn map_key(&self, i: usize) -> i64 {
        self.map_keys[i % MAP_KEY_COUNT]
    }
    fn map_value(&self, i: usize) -> f64 {
        self.map_values[i % MAP_KEY_COUNT]
    }
}

struct Cfg {
    ops: u64,
    /// Ops of every listAddAll sample (`BENCH_LIST_ADDALL_OPS`).
    list_add_all_ops: u64,
    secs: f64,
    rounds: usize,
    sp_keys: usize,
    only: Option<Vec<String>>,
    op_only: Option<Vec<String>>,
}

impl Cfg {
    fn from_env() -> Cfg {
        fn get<T: std::str::FromStr>(name: &str, default: T) -> T {
            std::env::var(name)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(default)
        }
        Cfg {
            ops: get("BENCH_OPS", 300_000),
            list_add_all_ops: get("BENCH_LIST_ADDALL_OPS", 100_000),
            secs: get("BENCH_SECS", 0.5),
            rounds: get("BENCH_ROUNDS", 3),
            sp_keys: get("BENCH_SP_KEYS", 1_000_000),
            only: std::env::var("BENCH_ONLY")
                .ok()
                .map(|s| s.split(',').map(str::to_string).collect()),
            op_only: std::env::var("BENCH_OP")
                .ok()
                .map(|s| s.split(',').map(str::to_string).collect()),
        }
    }
    /// Whether op `name` runs (`BENCH_OP`: comma-separated op names, e.g. for profiling one op).
    fn wants_op(&self, name: &str) -> bool {
        self.op_only
            .as_ref()
            .is_none_or(|o| o.iter().any(|s| s == name))
    }

    fn wants(&self, section: &str) -> bool {
        self.only
            .as_ref()
            .is_none_or(|o| o.iter().any(|s| s == section))
    }
}

/// One state-kind benchmark: a store per backend with one registered state (as Flink's benchmark classes).
struct Bench<H> {
    kind: Kind,
    store: Store,
    engine: Option<Box<dyn EngineHandle>>,
    h: H,
    counter: u64,
    /// The manual TTL clock, when `BENCH_TTL` is on.
    clock: Option<std::sync::Arc<ManualClock>>,
}

/// Results: op name → per backend, every sample over rounds; the median (by wall rate) is reported.
struct Results {
    kinds: Vec<Kind>,
    rows: Vec<(String, Vec<Vec<Sample>>)>,
    /// Yardstick samples (a plain `HashMap` doing an op's lookups) by op name.
    yardstick: Vec<(String, Vec<Sample>)>,
}

impl Results {
    fn record_yardstick(&mut self, op: &str, s: Sample) {
        match self.yardstick.iter_mut().find(|(n, _)| n == op) {
            Some((_, v)) => v.push(s),
            None => self.yardstick.push((op.to_string(), vec![s])),
        }
    }

    /// The yardstick table: heap backend against the plain `HashMap` per op, same rounds.
    fn print_yardstick(&self, cpu: bool) {
        let Some(heap) = self.kinds.iter().position(|&k| k == Kind::Heap) else {
            return;
        };
        if self.yardstick.is_empty() {
            return;
        }
        let rate = |s: &Sample| if cpu { s.cpu_rate() } else { s.wall_rate() };
        println!("| op | heap | HashMap<(i64, i64), f64> | HashMap/heap |");
        println!("|---|---:|---:|---:|");
        for (op, ys) in &self.yardstick {
            let Some((_, cells)) = self.rows.iter().find(|(n, _)| n == op) else {
                continue;
            };
            let h = Self::median(&cells[heap], rate);
            let y = Self::median(ys, rate);
            println!(
                "| {op} | {:.0} | {:.0} | {:.2} |",
                rate(&h) / 1000.0,
                rate(&y) / 1000.0,
                rate(&y) / rate(&h)
            );
        }
    }

    fn record(&mut self, op: &str, kind: Kind, s: Sample) {
        let k = self.kinds.iter().position(|&x| x == kind).unwrap_or(0);
        let row = match self.rows.iter().position(|(n, _)| n == op) {
            Some(i) => i,
            None => {
                self.rows
                    .push((op.to_string(), vec![Vec::new(); self.kinds.len()]));
                self.rows.len() - 1
            }
        };
        if std::env::var_os("BENCH_SAMPLES").is_some() {
            eprintln!(
                "  sample {op} {}: {} ops, {:.0}k/s wall, {:.0}k/s cpu",
                kind.name(),
                s.ops,
                s.wall_rate() / 1000.0,
                s.cpu_rate() / 1000.0
            );
        }
        self.rows[row].1[k].push(s);
    }

    /// The median sample of one cell by `rate` (the upper median for an even count).
    fn median(samples: &[Sample], rate: impl Fn(&Sample) -> f64) -> Sample {
        let mut v = samples.to_vec();
        v.sort_by(|a, b| rate(a).total_cmp(&rate(b)));
        v.get(v.len() / 2).copied().unwrap_or_default()
    }

    /// Per op and backend, every round's ops over every round's CPU time (no median: the background work a
    /// sample leaves lands in some samples and not others).
    fn print_totals(&self) {
        print!("| op |");
        for k in &self.kinds {
            print!(" {} |", k.name());
        }
        println!();
        println!("|---|{}", "---:|".repeat(self.kinds.len()));
        for (op, cells) in &self.rows {
            print!("| {op} |");
            for samples in cells {
                let ops: u64 = samples.iter().map(|s| s.ops).sum();
                let cpu: f64 = samples.iter().map(|s| s.cpu).sum();
                match cpu > 0.0 {
                    true => print!(" {:.0} |", ops as f64 / cpu / 1e3),
                    false => print!(" n/a |"),
                }
            }
            println!();
        }
    }

    fn print(&self, cpu: bool) {
        let lsm = self.kinds.iter().position(|&k| k == Kind::Lsm);
        let cached = self.kinds.iter().position(|&k| k == Kind::LsmCache);
        #[cfg(feature = "rocksdb")]
        let rdb = self.kinds.iter().position(|&k| k == Kind::RocksDb);
        #[cfg(not(feature = "rocksdb"))]
        let rdb: Option<usize> = None;
        let rate = |s: &Sample| if cpu { s.cpu_rate() } else { s.wall_rate() };
        print!("| op |");
        for k in &self.kinds {
            print!(" {} |", k.name());
        }
        println!(" LSM/RocksDB | LSM/heap | LSM+cache/heap | LSM+cache/LSM |");
        print!("|---|");
        for _ in &self.kinds {
            print!("---:|");
        }
        println!("---:|---:|---:|---:|");
        let (mut log_sum, mut n) = (0.0f64, 0usize);
        for (op, cells) in &self.rows {
            let samples: Vec<Sample> = cells.iter().map(|c| Self::median(c, rate)).collect();
            print!("| {op} |");
            for s in &samples {
                print!(" {:.0} |", rate(s) / 1000.0);
            }
            match (lsm, rdb) {
                (Some(l), Some(r)) => {
                    let ratio = rate(&samples[l]) / rate(&samples[r]);
                    log_sum += ratio.ln();
                    n += 1;
                    print!(" {ratio:.2} |");
                }
                _ => print!(" n/a |"),
            }
            let ratio = |a: Option<usize>, b: Option<usize>| match (a, b) {
                (Some(a), Some(b)) => format!("{:.2}", rate(&samples[a]) / rate(&samples[b])),
                _ => "n/a".to_string(),
            };
            let heap = (self.kinds.first() == Some(&Kind::Heap)).then_some(0);
            println!(
                " {} | {} | {} |",
                ratio(lsm, heap),
                ratio(cached, heap),
                ratio(cached, lsm)
            );
        }
        if n > 0 {
            println!(
                "\ngeometric mean LSM/RocksDB over {n} ops: {:.2}",
                (log_sum / n as f64).exp()
            );
        }
    }
}

fn run_value(cfg: &Cfg, data: &Data, res: &mut Results) -> Result<()> {
    let mut benches = Vec::new();
    for kind in Kind::all() {
        let (mut store, engine) = store(kind, 2, KeyGroupRange::all(2))?;
        let h = store.register_value(with_ttl!(ValueStateDescriptor::new(
            "value",
            LongSerializer
        )))?;
        let clock = ttl_clock(&mut store);
        let t = Instant::now();
        for i in 0..SETUP_KEY_COUNT {
            ttl_setup_time(&clock, data, i);
            store.set_current_key(data.setup_key(i))?;
            store.value(&h)?.update(&data.value(i))?;
        }
        ttl_setup_done(&clock);
        eprintln!(
            "value setup {}: {:.2}s",
            kind.name(),
            t.elapsed().as_secs_f64()
        );
        benches.push(Bench {
            kind,
            store,
            engine,
            h,
            counter: 0,
            clock,
        });
    }
    for round in 0..cfg.rounds {
        for op in ["valueUpdate", "valueAdd", "valueGet"] {
            if !cfg.wants_op(op) {
                continue;
            }
            for bi in rotation(benches.len(), round) {
                quiesce(&mut benches, op)?;
                ttl_before_sample(&benches[bi].clock);
                let b: &mut Bench<ValueState<LongSerializer>> = &mut benches[bi];
                let (st, h) = (&mut b.store, &b.h);
                let s = timed(&mut b.counter, cfg.ops, cfg.secs, 1, |i| match op {
                    "valueUpdate" => {
                        st.set_current_key(data.setup_key(i))?;
                        st.value(h)?.update(&data.value(i))
                    }
                    "valueAdd" => {
                        st.set_current_key(data.new_key(i))?;
                        st.value(h)?.update(&data.value(i))
                    }
                    _ => {
                        st.set_current_key(data.setup_key(i))?;
                        std::hint::black_box(st.value(h)?.get()?);
                        Ok(())
                    }
                })?;
                res.record(op, b.kind, s);
            }
        }
    }
    Ok(())
}

/// The two reducing states of the `reducing` section: the same sum, read-modify-write and merge operands.
struct ReducingPair {
    rmw: ReducingState<LongSerializer>,
    operands: ReducingState<LongSerializer>,
    /// Which ops this store serves: `None` both (`BENCH_REDUCING_SHARED`), `Some(true)` the `+operands` ops
    /// only, `Some(false)` the read-modify-write ops only.
    operands_only: Option<bool>,
}

impl ReducingPair {
    fn serves(&self, op: &str) -> bool {
        self.operands_only
            .is_none_or(|o| o == op.ends_with("+operands"))
    }
}

/// Reducing state (not in Flink's micro-benchmarks; shaped as its `ValueStateBenchmark`): a sum per setup
/// key, once read-modify-write (`reducingAdd`, `reducingGet`) and once with adds as merge operands
/// (`reducingAdd+operands`, `reducingGet+operands`: `design/merge-operands.md`; the heap and RocksDB backends
/// read, fold and write either way). Every setup key holds a value in both states first. The reads run after
/// the adds, so the operands state has operands to fold on read until compactions have folded them.
///
/// Each state lives in a store (and engine) of its own, so that the flushes and compactions a sample leaves
/// (counted in its process CPU) are of its own state's writes; `BENCH_REDUCING_SHARED` puts both states in
/// one store, where a sample also pays for compacting the other state's entries.
fn run_reducing(cfg: &Cfg, data: &Data, res: &mut Results) -> Result<()> {
    let mut benches = Vec::new();
    let mut process = Results {
        kinds: Kind::all(),
        rows: Vec::new(),
        yardstick: Vec::new(),
    };
    let layouts: &[Option<bool>] = match std::env::var_os("BENCH_REDUCING_SHARED") {
        Some(_) => &[None],
        None => &[Some(false), Some(true)],
    };
    for (kind, &operands_only) in Kind::all()
        .into_iter()
        .flat_map(|k| layouts.iter().map(move |l| (k, l)))
    {
        let (mut store, engine) = store(kind, 2, KeyGroupRange::all(2))?;
        let sum = |a: &i64, b: &i64| a.wrapping_add(*b);
        let rmw = store.register_reducing(with_ttl!(ReducingStateDescriptor::new(
            "reducing",
            LongSerializer,
            sum
        )))?;
        let operands = store.register_reducing(with_ttl!(ReducingStateDescriptor::new(
            "reducing-operands",
            LongSerializer,
            sum
        )
        .with_merge_operands(OperandFolding::Associative)))?;
        let clock = ttl_clock(&mut store);
        let t = Instant::now();
        for i in 0..SETUP_KEY_COUNT {
            ttl_setup_time(&clock, data, i);
            store.set_current_key(data.setup_key(i))?;
            if operands_only != Some(true) {
                store.reducing(&rmw)?.add(&data.value(i))?;
            }
            if operands_only != Some(false) {
                store.reducing(&operands)?.add(&data.value(i))?;
            }
        }
        ttl_setup_done(&clock);
        eprintln!(
            "reducing setup {}{}: {:.2}s",
            kind.name(),
            match operands_only {
                None => "",
                Some(true) => " (operands state)",
                Some(false) => " (read-modify-write state)",
            },
            t.elapsed().as_secs_f64()
        );
        benches.push(Bench {
            kind,
            store,
            engine,
            h: ReducingPair {
                rmw,
                operands,
                operands_only,
            },
            counter: 0,
            clock,
        });
    }
    for round in 0..cfg.rounds {
        for op in [
            "reducingAdd",
            "reducingAdd+operands",
            "reducingGet",
            "reducingGet+operands",
        ] {
            if !cfg.wants_op(op) {
                continue;
            }
            for bi in rotation(benches.len(), round) {
                if !benches[bi].h.serves(op) {
                    continue;
                }
                quiesce(&mut benches, op)?;
                ttl_before_sample(&benches[bi].clock);
                let b: &mut Bench<ReducingPair> = &mut benches[bi];
                let (st, h) = (&mut b.store, &b.h);
                let state = match op.ends_with("+operands") {
                    true => &h.operands,
                    false => &h.rmw,
                };
                let add = op.starts_with("reducingAdd");
                let p0 = process_cpu();
                let s = timed(&mut b.counter, cfg.ops, cfg.secs, 1, |i| {
                    st.set_current_key(data.setup_key(i))?;
                    if add {
                        st.reducing(state)?.add(&data.value(i))
                    } else {
                        std::hint::black_box(st.reducing(state)?.get()?);
                        Ok(())
                    }
                })?;
                // The background work the sample left (flushes, compactions folding operands) counts too.
                if let Some(engine) = &b.engine {
                    engine.wait_for_background_work()?;
                }
                process.record(
                    op,
                    b.kind,
                    Sample {
                        cpu: process_cpu() - p0,
                        ..s
                    },
                );
                res.record(op, b.kind, s);
            }
        }
    }
    println!(
        "\n## Reducing state, k ops/s by process CPU time: every thread, and the sample's background work waited for (median of {} rounds by that rate)\n",
        cfg.rounds
    );
    process.print(true);
    println!(
        "\n## Reducing state, k ops/s by process CPU time summed over all {} rounds (every sample's ops over every sample's CPU: a sample that flushed and compacted counts as much as one that did not)\n",
        cfg.rounds
    );
    process.print_totals();
    Ok(())
}

/// CPU time of the whole process (every thread), in seconds.
fn process_cpu() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_PROCESS_CPUTIME_ID is supported on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// The synchronous parts of a snapshot (`StateBackend::snapshot`) and of a checkpoint (`Checkpointer::begin`
/// on a local root) with `n` dirty value entries, on LSM and LSM+cache (taking every key in on its first
/// write): the cache hands its dirty log to a snapshot and to a checkpoint without a copy; a checkpoint's
/// asynchronous part (also shown) writes it into SST files of its own (`design/rmw-cache.md`).
/// Section `cachesync` (not in the default run).
fn run_cache_sync(cfg: &Cfg, data: &Data) -> Result<()> {
    use keyed_state::checkpoint::{CheckpointOptions, CheckpointStorage, Checkpointer};
    println!(
        "\n## Synchronous parts with n dirty entries, ms (median of {} rounds; min–max)\n",
        cfg.rounds
    );
    println!("| n dirty | backend | snapshot sync | checkpoint sync | checkpoint async |");
    println!("|---:|---|---:|---:|---:|");
    for n in [1_000usize, 10_000, 100_000, SETUP_KEY_COUNT] {
        for kind in [Kind::Lsm, Kind::LsmCache] {
            let (mut snap_ms, mut ck_ms, mut run_ms) = (Vec::new(), Vec::new(), Vec::new());
            for round in 0..cfg.rounds {
                // The cache takes every key in on its first write: all n entries are dirty in it, none in
                // the engine.
                let config = Store::config_for(&LongSerializer, 2, KeyGroupRange::all(2));
                let backend: Box<dyn StateBackend> = match kind {
                    Kind::LsmCache => {
                        let mut b = LsmBackend::temp_with(config, lsm_options())?
                            .with_rmw_cache(rmw_cache_bytes())?;
                        b.set_rmw_cache_admission(true)?;
                        Box::new(b)
                    }
                    _ => Box::new(LsmBackend::temp_with(config, lsm_options())?),
                };
                let mut store = KeyedStateStore::new(backend, LongSerializer)?;
                let h = store.register_value(ValueStateDescriptor::new("value", LongSerializer))?;
                for i in 0..n {
                    store.set_current_key(data.setup_key(i))?;
                    store.value(&h)?.update(&data.value(i + round))?;
                }
                let t = Instant::now();
                let snap = store.snapshot()?;
                snap_ms.push(t.elapsed().as_secs_f64() * 1e3);
                drop(snap);
                // Dirty again (the snapshot's hand-off leaves the entries dirty until written back).
                for i in 0..n {
                    store.set_current_key(data.setup_key(i))?;
                    store.value(&h)?.update(&data.value(i + round + 1))?;
                }
                let dir = tempfile::tempdir()
                    .map_err(|e| keyed_state::Error::io("tempdir", "/tmp", e))?;
                let storage = std::sync::Arc::new(CheckpointStorage::local(dir.path())?);
                let ck = Checkpointer::open(storage, store.config(), CheckpointOptions::default())?;
                let t = Instant::now();
                let pending = store.checkpoint(&ck, 1)?;
                ck_ms.push(t.elapsed().as_secs_f64() * 1e3);
                let t = Instant::now();
                pending.run()?;
                run_ms.push(t.elapsed().as_secs_f64() * 1e3);
            }
            let show = |v: &mut Vec<f64>| {
                v.sort_by(f64::total_cmp);
                format!("{:.3} ({:.3}–{:.3})", v[v.len() / 2], v[0], v[v.len() - 1])
            };
            println!(
                "| {n} | {} | {} | {} | {} |",
                kind.name(),
                show(&mut snap_ms),
                show(&mut ck_ms),
                show(&mut run_ms)
            );
        }
    }
    Ok(())
}

/// Per round, as Flink's `ListStateBenchmark` (per-iteration setup): fresh backends, one element per key.
fn run_list(cfg: &Cfg, data: &Data, res: &mut Results) -> Result<()> {
    for round in 0..cfg.rounds {
        let mut benches = Vec::new();
        for kind in Kind::all() {
            let (mut store, engine) = store(kind, 2, KeyGroupRange::all(2))?;
            let h =
                store.register_list(with_ttl!(ListStateDescriptor::new("list", LongSerializer)))?;
            let clock = ttl_clock(&mut store);
            let t = Instant::now();
            for i in 0..SETUP_KEY_COUNT {
                ttl_setup_time(&clock, data, i);
                store.set_current_key(data.setup_key(i))?;
                store.list(&h)?.add(&data.value(i))?;
            }
            ttl_setup_done(&clock);
            eprintln!(
                "list setup {} (round {round}): {:.2}s",
                kind.name(),
                t.elapsed().as_secs_f64()
            );
            benches.push(Bench {
                kind,
                store,
                engine,
                h,
                counter: 0,
                clock,
            });
        }
        // Read-only ops first, then the ones that keep lists at one element, then the growing ones.
        for op in [
            "listGet",
            "listGetAndIterate",
            "listUpdate",
            "listAdd",
            "listAppend",
            "listAddAll",
        ] {
            if !cfg.wants_op(op) {
                continue;
            }
            for bi in rotation(benches.len(), round) {
                quiesce(&mut benches, op)?;
                ttl_before_sample(&benches[bi].clock);
                let b: &mut Bench<ListState<LongSerializer>> = &mut benches[bi];
                let (st, h) = (&mut b.store, &b.h);
                // listAddAll grows the lists it appends to by 100 elements per op, so its rate depends on
                // how many ops a sample ran: a fixed count, every backend the same work.
                let (max_ops, max_secs) = match op {
                    "listAddAll" => (cfg.list_add_all_ops, f64::INFINITY),
                    _ => (cfg.ops, cfg.secs),
                };
                let s = timed(&mut b.counter, max_ops, max_secs, 1, |i| match op {
                    "listGet" => {
                        st.set_current_key(data.setup_key(i))?;
                        std::hint::black_box(st.list(h)?.get()?);
                        Ok(())
                    }
                    "listGetAndIterate" => {
                        st.set_current_key(data.setup_key(i))?;
                        let mut sum = 0i64;
                        for v in st.list(h)?.get()?.unwrap_or_default() {
                            sum = sum.wrapping_add(v);
                        }
                        std::hint::black_box(sum);
                        Ok(())
                    }
                    "listUpdate" => {
                        st.set_current_key(data.setup_key(i))?;
                        st.list(h)?.update(&[data.value(i)])
                    }
                    "listAdd" => {
                        st.set_current_key(data.new_key(i))?;
                        st.list(h)?.update(&[data.value(i)])
                    }
                    "listAppend" => {
                        st.set_current_key(data.setup_key(i))?;
                        st.list(h)?.add(&data.value(i))
                    }
                    _ => {
                        st.set_current_key(data.setup_key(i))?;
                        st.list(h)?.add_all(&data.list_values)
                    }
                })?;
                res.record(op, b.kind, s);
            }
        }
    }
    Ok(())
}

/// The map ops of Flink's `TtlMapStateBenchmark`.
const TTL_MAP_OPS: [&str; 6] = [
    "mapUpdate",
    "mapAdd",
    "mapGet",
    "mapIsEmpty",
    "mapIterator",
    "mapPutAll",
];

/// Map states as Flink's `MapStateBenchmark` sets them up: `SETUP_KEY_COUNT` keys × `MAP_KEY_COUNT` entries,
/// one set of backends (every kind).
fn map_setup(data: &Data) -> Result<Vec<Bench<MapState<LongSerializer, DoubleSerializer>>>> {
    let mut benches = Vec::new();
    for kind in Kind::all() {
        let (mut store, engine) = store(kind, 2, KeyGroupRange::all(2))?;
        let h = store.register_map(with_ttl!(MapStateDescriptor::new(
            "map",
            LongSerializer,
            DoubleSerializer,
        )))?;
        let clock = ttl_clock(&mut store);
        let t = Instant::now();
        for i in 0..SETUP_KEY_COUNT {
            ttl_setup_time(&clock, data, i);
            store.set_current_key(data.setup_key(i))?;
            let mut m = store.map(&h)?;
            for j in 0..MAP_KEY_COUNT {
                m.put(&(j as i64), &data.map_value(i + j))?;
            }
        }
        ttl_setup_done(&clock);
        let held = std::env::var_os("BENCH_MAP_ENGINE_HELD").is_some();
        if kind == Kind::LsmCache && std::env::var_os("BENCH_MAP_ENGINE_CLEAN").is_some() && !held {
            store.backend_mut().write_back()?;
        }
        if kind == Kind::LsmCache && held {
            store.backend_mut().write_back()?;
            for i in 0..SETUP_KEY_COUNT {
                store.set_current_key(data.setup_key(i))?;
                store.map(&h)?.put(&0, &data.map_value(i + 1))?;
            }
        }
        eprintln!(
            "map setup {}: {:.2}s",
            kind.name(),
            t.elapsed().as_secs_f64()
        );
        benches.push(Bench {
            kind,
            store,
            engine,
            h,
            counter: 0,
            clock,
        });
    }
    Ok(benches)
}

/// The map ops in the order they run; the first `MAP_READ_OPS` only read.
const MAP_OPS: [&str; 11] = [
    "mapGet",
    "mapContains",
    "mapIsEmpty",
    "mapKeys",
    "mapValues",
    "mapEntries",
    "mapIterator",
    "mapUpdate",
    "mapAdd",
    "mapPutAll",
    "mapRemove",
];
const MAP_READ_OPS: usize = 7;

/// Whether the map section runs every op on one setup, round after round (`BENCH_MAP_SCHEDULE=shared`, the
/// schedule before 2026-12-05), instead of as Flink's JMH trials (the default).
fn map_schedule_shared() -> bool {
    std::env::var("BENCH_MAP_SCHEDULE").is_ok_and(|v| v == "shared")
}

/// The map section. As in Flink, where every `@Benchmark` method of `MapStateBenchmark` is a JMH trial with
/// its own `@Setup` (a new backend filled by the setup, `keyIndex` back to 0) and its iterations follow
/// each other on that backend: the read ops run on the state as the setup left it (reads change nothing,
/// so one setup serves them all; under `BENCH_TTL` every op gets its own), each write op on a new setup, its rounds one after the other, and every
/// op's key index starts at 0. So no read sample sees what an earlier write sample left (how many
/// writes a time-bounded sample made, which memtable and L0 files they landed in), and no write sample
/// pays for a memtable that earlier write samples filled. `BENCH_MAP_SCHEDULE=shared` runs the old
/// schedule (one setup; per round every op in turn; the key index running on across ops and rounds).
fn run_map(cfg: &Cfg, data: &Data, res: &mut Results) -> Result<()> {
    let shared = map_schedule_shared();
    // A diagnostic: every sample starts at key index 0, so that (with the shared schedule) a read sample reads
    // the maps the write samples before it wrote.
    let keys_from_zero = std::env::var_os("BENCH_MAP_KEYS_FROM_ZERO").is_some();
    // The yardstick: the same entries in a plain `HashMap<(key, user key), value>`.
    let mut yard: HashMap<(i64, i64), f64> = HashMap::new();
    for i in 0..SETUP_KEY_COUNT {
        for j in 0..MAP_KEY_COUNT {
            yard.insert((*data.setup_key(i), j as i64), data.map_value(i + j));
        }
    }
    let mut yard_counter = 0u64;
    let put_all: Vec<(i64, f64)> = (0..MAP_KEY_COUNT)
        .map(|j| (data.map_key(j), data.map_value(j + 1)))
        .collect();
    let wanted: Vec<(usize, &str)> = MAP_OPS
        .iter()
        .enumerate()
        .filter(|(_, op)| {
            cfg.wants_op(op) && (ttl_mode() == TtlMode::Off || TTL_MAP_OPS.contains(op))
        })
        .map(|(i, op)| (i, *op))
        .collect();
    // (round, op index, op) in the order they run.
    let schedule: Vec<(usize, usize, &str)> = if shared {
        (0..cfg.rounds)
            .flat_map(|r| wanted.iter().map(move |&(i, op)| (r, i, op)))
            .collect()
    } else {
        wanted
            .iter()
            .flat_map(|&(i, op)| (0..cfg.rounds).map(move |r| (r, i, op)))
            .collect()
    };
    let mut benches: Vec<Bench<MapState<LongSerializer, DoubleSerializer>>> = Vec::new();
    // The op the current setup was last used by (a new setup before each write op's first round).
    let mut setup_for: Option<usize> = None;
    for (round, op_index, op) in schedule {
        let fresh = if shared {
            benches.is_empty()
        } else {
            // Under TTL a read may remove what it finds expired, so every op gets its own setup there.
            let own_setup = op_index >= MAP_READ_OPS || ttl_mode() != TtlMode::Off;
            setup_for.is_none() || (own_setup && setup_for != Some(op_index))
        };
        if fresh {
            benches.clear();
            benches = map_setup(data)?;
        }
        if !shared && round == 0 {
            for b in &mut benches {
                b.counter = 0;
            }
        }
        setup_for = Some(op_index);
        let per_op = match op {
            "mapKeys" | "mapValues" | "mapEntries" | "mapIterator" => MAP_KEY_COUNT as u64,
            _ => 1,
        };
        for bi in rotation(benches.len(), round) {
            quiesce(&mut benches, op)?;
            ttl_before_sample(&benches[bi].clock);
            let b: &mut Bench<MapState<LongSerializer, DoubleSerializer>> = &mut benches[bi];
            if keys_from_zero {
                b.counter = 0;
            }
            let (st, h) = (&mut b.store, &b.h);
            let s = timed(&mut b.counter, cfg.ops / per_op, cfg.secs, per_op, |i| {
                match op {
                    "mapGet" => {
                        st.set_current_key(data.setup_key(i))?;
                        std::hint::black_box(st.map(h)?.get(&data.map_key(i))?);
                    }
                    "mapContains" => {
                        st.set_current_key(data.setup_key(i))?;
                        std::hint::black_box(st.map(h)?.contains(&(data.map_key(i) << 1))?);
                    }
                    "mapIsEmpty" => {
                        st.set_current_key(data.setup_key(i))?;
                        std::hint::black_box(st.map(h)?.is_empty()?);
                    }
                    "mapKeys" => {
                        st.set_current_key(data.setup_key(i))?;
                        let mut sum = 0i64;
                        for k in st.map(h)?.keys() {
                            sum = sum.wrapping_add(k?);
                        }
                        std::hint::black_box(sum);
                    }
                    "mapValues" => {
                        st.set_current_key(data.setup_key(i))?;
                        let mut sum = 0f64;
                        for v in st.map(h)?.values() {
                            sum += v?;
                        }
                        std::hint::black_box(sum);
                    }
                    "mapEntries" | "mapIterator" => {
                        st.set_current_key(data.setup_key(i))?;
                        let mut sum = 0f64;
                        for e in st.map(h)?.entries() {
                            let (k, v) = e?;
                            sum += k as f64 + v;
                        }
                        std::hint::black_box(sum);
                    }
                    "mapUpdate" => {
                        st.set_current_key(data.setup_key(i))?;
                        st.map(h)?.put(&data.map_key(i), &data.map_value(i + 1))?;
                    }
                    "mapAdd" => {
                        st.set_current_key(data.new_key(i))?;
                        st.map(h)?.put(&data.map_key(i), &data.map_value(i))?;
                    }
                    "mapPutAll" => {
                        st.set_current_key(data.setup_key(i))?;
                        st.map(h)?.put_all(&put_all)?;
                    }
                    _ => {
                        st.set_current_key(data.setup_key(i))?;
                        st.map(h)?.remove(&data.map_key(i))?;
                    }
                }
                Ok(())
            })?;
            res.record(op, b.kind, s);
        }
        if matches!(op, "mapGet" | "mapContains" | "mapUpdate") {
            let s = timed(&mut yard_counter, cfg.ops, cfg.secs, 1, |i| -> Result<()> {
                let k = *data.setup_key(i);
                match op {
                    "mapGet" => {
                        std::hint::black_box(yard.get(&(k, data.map_key(i))).copied());
                    }
                    "mapContains" => {
                        std::hint::black_box(yard.contains_key(&(k, data.map_key(i) << 1)));
                    }
                    _ => {
                        yard.insert((k, data.map_key(i)), data.map_value(i + 1));
                    }
                }
                Ok(())
            })?;
            res.record_yardstick(op, s);
        }
    }
    drop(yard);
    if let Some(b) = benches.iter_mut().find(|b| b.kind == Kind::Heap) {
        map_copy_on_write(data, b)?;
    }
    Ok(())
}

/// Heap backend only: what a snapshot costs map writes. Per repetition (10, median reported): the synchronous
/// snapshot, the first map update right after it, and 10,000 more updates while it stays open; then the
/// snapshot is dropped and 10,000 updates run with none open (for comparison).
fn map_copy_on_write(
    data: &Data,
    b: &mut Bench<MapState<LongSerializer, DoubleSerializer>>,
) -> Result<()> {
    const REPS: usize = 10;
    const N: usize = 10_000;
    let (st, h) = (&mut b.store, &b.h);
    let mut i = b.counter as usize;
    let update = |st: &mut Store, i: &mut usize| -> Result<()> {
        st.set_current_key(data.setup_key(*i))?;
        st.map(h)?.put(&data.map_key(*i), &data.map_value(*i + 1))?;
        *i += 1;
        Ok(())
    };
    let (mut sync, mut first, mut open, mut closed) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..REPS {
        let t = Instant::now();
        let snap = st.snapshot()?;
        sync.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        update(st, &mut i)?;
        first.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        for _ in 0..N {
            update(st, &mut i)?;
        }
        open.push(t.elapsed().as_secs_f64());
        drop(snap);
        let t = Instant::now();
        for _ in 0..N {
            update(st, &mut i)?;
        }
        closed.push(t.elapsed().as_secs_f64());
    }
    b.counter = i as u64;
    let med = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        (v[v.len() / 2], v[0], v[v.len() - 1])
    };
    let us = |(m, lo, hi): (f64, f64, f64)| {
        format!("{:.1} µs ({:.1}–{:.1})", m * 1e6, lo * 1e6, hi * 1e6)
    };
    let ms = |(m, lo, hi): (f64, f64, f64)| {
        format!("{:.2} ms ({:.2}–{:.2})", m * 1e3, lo * 1e3, hi * 1e3)
    };
    println!(
        "\n## Heap map state after a snapshot ({SETUP_KEY_COUNT} maps of {MAP_KEY_COUNT} entries, 2 key groups; \
         median (min–max) of {REPS} snapshots, wall time)\n"
    );
    println!("| synchronous snapshot | first mapUpdate after it | {N} mapUpdates with it open | {N} mapUpdates with none open |");
    println!("|---:|---:|---:|---:|");
    println!(
        "| {} | {} | {} | {} |",
        us(med(&mut sync)),
        us(med(&mut first)),
        ms(med(&mut open)),
        ms(med(&mut closed))
    );
    Ok(())
}

/// Waits for every backend's background flushes and compactions, so that no sample pays for work left by
/// an earlier sample (of the same or another backend: on 2 cores they compete).
fn quiesce<H>(benches: &mut [Bench<H>], op: &str) -> Result<()> {
    for b in benches {
        let Some(engine) = &b.engine else { continue };
        engine.wait_for_background_work()?;
        if std::env::var_os("BENCH_SHAPE").is_some() {
            eprintln!("  before {op}, {}: {}", b.kind.name(), engine.summary());
        }
    }
    Ok(())
}

/// Backend order for a round: rotated so that no backend always runs first.
fn rotation(n: usize, round: usize) -> Vec<usize> {
    (0..n).map(|i| (i + round) % n).collect()
}

/// What a savepoint benchmark stores.
#[derive(Clone, Copy, PartialEq, Eq)]
enum SpShape {
    /// `sp_keys` keys × 100-byte values in a `ValueState<byte[]>`.
    Value,
    /// `sp_keys / 10` keys × maps of 10 `Long → Double` entries in a `MapState` (the same entry count).
    Map,
}

/// Fills `st` with the entries of `shape`; returns how many entries it wrote.
fn fill_savepoint_state(st: &mut Store, shape: SpShape, sp_keys: usize) -> Result<u64> {
    let mut rng = StdRng::seed_from_u64(7);
    match shape {
        SpShape::Value => {
            let mut value = vec![0u8; 100];
            let h = st.register_value(ValueStateDescriptor::new("payload", BytesSerializer))?;
            for k in 0..sp_keys as i64 {
                rng.fill(&mut value[..]);
                st.set_current_key(&k)?;
                st.value(&h)?.update(&value)?;
            }
            Ok(sp_keys as u64)
        }
        SpShape::Map => {
            let h = st.register_map(MapStateDescriptor::new(
                "map",
                LongSerializer,
                DoubleSerializer,
            ))?;
            let keys = sp_keys / MAP_KEY_COUNT;
            for k in 0..keys as i64 {
                st.set_current_key(&k)?;
                let mut m = st.map(&h)?;
                for j in 0..MAP_KEY_COUNT as i64 {
                    m.put(&j, &rng.random::<f64>())?;
                }
            }
            Ok((keys * MAP_KEY_COUNT) as u64)
        }
    }
}

/// Savepoint write / restore MB/s of `shape` (max parallelism 128, all key groups), and the 1→2
/// rescale-restore of instance 0 (key groups 0..=63) from that savepoint.
fn run_savepoint(cfg: &Cfg, shape: SpShape) -> Result<()> {
    const MAX_P: u32 = 128;
    let half = key_group_range_for_operator(MAX_P, 2, 0)?;
    match shape {
        SpShape::Value => println!(
            "\n## Savepoint write / restore and 1→2 rescale ({} keys × 100-byte values, ValueState<byte[]>, max parallelism {MAX_P}, frames uncompressed)\n",
            cfg.sp_keys
        ),
        SpShape::Map => println!(
            "\n## Map-heavy savepoint write / restore and 1→2 rescale ({} keys × maps of {MAP_KEY_COUNT} Long → Double entries, MapState, max parallelism {MAX_P}, frames uncompressed)\n",
            cfg.sp_keys / MAP_KEY_COUNT
        ),
    }
    println!("| backend | savepoint MB | write s (cpu s) | write MB/s | restore s (cpu s) | restore MB/s | rescale 1→2 restore of instance 0 s (cpu s) | keys restored |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    let mut reference: Option<Vec<u8>> = None;
    let mut identical = true;
    let mut after_restore: Vec<(Kind, [f64; 3])> = Vec::new();
    for kind in Kind::all() {
        let (mut st, _) = store(kind, MAX_P, KeyGroupRange::all(MAX_P))?;
        let t = Instant::now();
        let entries = fill_savepoint_state(&mut st, shape, cfg.sp_keys)?;
        eprintln!(
            "savepoint setup {}: {:.2}s",
            kind.name(),
            t.elapsed().as_secs_f64()
        );
        // Write: sync snapshot + encode into memory.
        let mut out = Vec::with_capacity(cfg.sp_keys * 128 + (1 << 20));
        let c0 = thread_cpu();
        let t0 = Instant::now();
        let snap = st.snapshot()?;
        encode(&*snap, &WriteOptions::default(), &mut out)?;
        let (w_wall, w_cpu) = (t0.elapsed().as_secs_f64(), thread_cpu() - c0);
        drop(snap);
        drop(st);
        let mb = out.len() as f64 / MIB as f64;
        match &reference {
            None => reference = Some(out.clone()),
            Some(r) => identical &= *r == out,
        }
        // Restore everything into a fresh backend.
        let bytes = out.clone();
        let (mut fresh, _) = store(kind, MAX_P, KeyGroupRange::all(MAX_P))?;
        let c0 = thread_cpu();
        let t0 = Instant::now();
        let reader = SavepointReader::from_bytes(bytes)?;
        let sum = fresh.restore(std::slice::from_ref(&reader))?;
        let (r_wall, r_cpu) = (t0.elapsed().as_secs_f64(), thread_cpu() - c0);
        assert_eq!(sum.entries, entries);
        if shape == SpShape::Map {
            after_restore.push((kind, map_ops_after_restore(&mut fresh, cfg.sp_keys)?));
        }
        drop(fresh);
        // Rescale 1→2: instance 0 restores its half from the parallelism-1 savepoint.
        let (mut inst0, _) = store(kind, MAX_P, half)?;
        let c0 = thread_cpu();
        let t0 = Instant::now();
        let reader = SavepointReader::from_bytes(out)?;
        let sum0 = inst0.restore(std::slice::from_ref(&reader))?;
        let (s_wall, s_cpu) = (t0.elapsed().as_secs_f64(), thread_cpu() - c0);
        println!(
            "| {} | {mb:.1} | {w_wall:.3} ({w_cpu:.3}) | {:.0} | {r_wall:.3} ({r_cpu:.3}) | {:.0} | {s_wall:.3} ({s_cpu:.3}) | {} |",
            kind.name(),
            mb / w_wall,
            mb / r_wall,
            sum0.entries
        );
    }
    println!(
        "\nsavepoint bytes identical across backends: {}",
        if identical { "yes" } else { "NO" }
    );
    if !after_restore.is_empty() {
        println!("\nMap ops right after the restore, k ops/s by wall time (100,000 each, random keys): get of a restored map (its first touch), the same gets again, contains on maps of keys not in the savepoint\n");
        println!("| backend | first get | second get | contains, absent key |");
        println!("|---|---:|---:|---:|");
        for (kind, [a, b, c]) in after_restore {
            println!(
                "| {} | {:.0} | {:.0} | {:.0} |",
                kind.name(),
                a / 1000.0,
                b / 1000.0,
                c / 1000.0
            );
        }
    }
    Ok(())
}

/// On a store just restored from the map-heavy savepoint: rates (ops/s, wall) of 100,000 gets of restored
/// maps in random order (first touch), the same gets again, and 100,000 contains on keys not restored.
fn map_ops_after_restore(st: &mut Store, sp_keys: usize) -> Result<[f64; 3]> {
    const N: usize = 100_000;
    let h = st.register_map(MapStateDescriptor::new(
        "map",
        LongSerializer,
        DoubleSerializer,
    ))?;
    let keys = (sp_keys / MAP_KEY_COUNT).max(1) as i64;
    let mut rng = StdRng::seed_from_u64(11);
    let order: Vec<i64> = (0..N).map(|_| rng.random_range(0..keys)).collect();
    let mut rates = [0.0; 3];
    for (pass, rate) in rates.iter_mut().enumerate() {
        let t = Instant::now();
        for (i, k) in order.iter().enumerate() {
            let user_key = (i % MAP_KEY_COUNT) as i64;
            if pass < 2 {
                st.set_current_key(k)?;
                std::hint::black_box(st.map(&h)?.get(&user_key)?);
            } else {
                st.set_current_key(&(k + keys))?;
                std::hint::black_box(st.map(&h)?.contains(&user_key)?);
            }
        }
        *rate = N as f64 / t.elapsed().as_secs_f64();
    }
    Ok(rates)
}

fn main() -> Result<()> {
    let cfg = Cfg::from_env();
    let data = Data::new();
    println!("# keyed-state state backends (Flink state micro-benchmarks)\n");
    println!(
        "machine: {} cores, load average at start {}; ops per sample ≤ {} or ≤ {} s of thread CPU time; {} rounds, median round shown, backends idle before each sample, backend order rotated per round",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        loadavg(),
        cfg.ops,
        cfg.secs,
        cfg.rounds
    );
    println!("LSM options: {}", describe_lsm(&lsm_options()));
    println!(
        "LSM+cache: the same engine with a read-modify-write cache of {} MiB",
        rmw_cache_bytes() / MIB
    );
    match ttl_mode() {
        TtlMode::Off => println!("TTL: off"),
        mode => println!(
            "TTL: {mode:?}, StateTtlConfig::new({TTL_MILLIS} ms) with Flink's defaults (compaction filter every 1000 entries on LSM and RocksDB, incremental (5, false) on heap), manual clock"
        ),
    }
    #[cfg(feature = "rocksdb")]
    println!("RocksDB options: {}", rocksdb_options().describe());
    #[cfg(not(feature = "rocksdb"))]
    println!("RocksDB: not built (cargo feature `rocksdb` off)");
    let mut res = Results {
        kinds: Kind::all(),
        rows: Vec::new(),
        yardstick: Vec::new(),
    };
    if cfg.wants("value") {
        run_value(&cfg, &data, &mut res)?;
    }
    if cfg.wants("list") {
        run_list(&cfg, &data, &mut res)?;
    }
    if cfg.wants("map") {
        run_map(&cfg, &data, &mut res)?;
    }
    if cfg.wants("reducing") {
        run_reducing(&cfg, &data, &mut res)?;
    }
    if !res.rows.is_empty() {
        println!(
            "\n## Throughput, k ops/s by wall time (median of {} rounds; backends idle before each sample)\n",
            cfg.rounds
        );
        res.print(false);
        println!(
            "\n## Throughput, k ops/s by thread CPU time (median of the same rounds by CPU rate)\n"
        );
        res.print(true);
        if !res.yardstick.is_empty() {
            println!(
                "\n## Map yardstick: heap backend vs a plain HashMap doing the same lookups, k ops/s by wall time (median of {} rounds)\n",
                cfg.rounds
            );
            res.print_yardstick(false);
            println!("\nby thread CPU time:\n");
            res.print_yardstick(true);
        }
    }
    if cfg.wants("cachesync") {
        run_cache_sync(&cfg, &data)?;
    }
    if cfg.wants("savepoint") {
        run_savepoint(&cfg, SpShape::Value)?;
    }
    if cfg.wants("mapsavepoint") {
        run_savepoint(&cfg, SpShape::Map)?;
    }
    println!("\nload average at end: {}", loadavg());
    Ok(())
}

/// mimalloc as the global allocator (a dev-dependency): see design/architecture.md,
/// "Allocator".
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
