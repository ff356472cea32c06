//! State larger than memory: our LSM engine against RocksDB, each inside a cgroup memory limit, in one run.
//!
//! `cargo bench --features rocksdb --bench larger_than_memory` (release; run as root: it creates a child
//! cgroup and drops the page cache). Prints the limit it ran under and a table per case:
//! `phase | ours | RocksDB | ratio` (ratio = ours / RocksDB, > 1 = we are better, with the spread of the
//! per-round ratios).
//!
//! Cases (`KS_LTM_CASES`, default `10m,8g`):
//! - `10m`: 10 million keys of incompressible 100-byte values (about 1.1 GB of state) under 512 MiB;
//! - `8g`: 8 GB of the same entries (72.7 million keys) under 1 GiB.
//!
//! Keys are 10 bytes (a 2-byte key-group prefix and an 8-byte big-endian index), loaded in key order with
//! the WAL off; both engines then finish their background work. Both use 4 KiB blocks, LZ4 (the values do
//! not compress, so blocks are stored raw), 10 bits/key bloom filters, a 64 MiB memtable and an equal
//! block cache (`KS_LTM_CACHE_MB`, default 64). `ours` keeps the engine's default row cache (an engine
//! without an environment: one sharing the block cache's capacity, so that the two hold at most
//! `KS_LTM_CACHE_MB` together, as RocksDB's block cache alone; `Options::row_cache_size` `None`),
//! `ours-row` turns it off (`Some(0)`); RocksDB has none by default, nor in Flink's configuration. Each
//! engine also runs with a row cache of `KS_LTM_ROW_CACHE_MB` (default 32) on top of its block cache
//! (`KS_LTM_ROW_CHARGED=1`: taken from the block cache, so that every engine has the same cache memory)
//! (`ours+row`: `Options::row_cache_size`; `rocksdb+row`: RocksDB's `row_cache`), reading the state its
//! base engine loaded; tables compare ours (defaults) against RocksDB, ours without a row cache against
//! RocksDB, ours against ours without, both with an explicit row cache, and each with against without.
//!
//! How it runs: the bench creates the cgroup `/sys/fs/cgroup/memory/ks-larger-than-memory-<pid>` (cgroup v1;
//! `memory.max` under a v2 child of the root otherwise), sets the limit, and runs every engine phase in a
//! child process that moves itself into the cgroup before it opens anything. First one child per engine
//! loads the state (timed). Then `KS_LTM_REPS` rounds (default 3) alternate the engines (`ours, rocksdb,
//! ours-row, ours+row, rocksdb+row, ours, ...`): each
//! child starts after `sync; echo 3 > /proc/sys/vm/drop_caches` (pages charged by the previous child do not
//! stay in the limit), reopens the database, warms up with uniform reads until the cgroup holds 90 % of its
//! limit (or 20 s), then runs the phases for `KS_LTM_SECS` seconds each (default 8):
//! uniform point reads, Zipfian point reads (θ = 0.99, ranks scattered over the keys), hot point reads (1 %
//! of the keys, after two untimed reads in a row of each hot key, reported as `hot_fill`), batched reads (`multi_get` of 32 uniform keys), read-modify-write updates (get, then put
//! of a new value, uniform keys) and list appends (merge operands, 8-byte elements on 1 % of the keys).
//! Per phase: ops/s, ops per CPU-second of the process (background threads included), `read_bytes` of
//! `/proc/self/io` per op, major faults per op, and what the block cache and the row cache hold after it
//! (`STAT cache_after_<phase>`, echoed; rows held for ours); per child: the cgroup's peak usage
//! (`memory.max_usage_in_bytes`, page cache included), the process's peak RSS and peak anonymous memory,
//! and whether the cgroup OOM-killed anything.
//!
//! Data lives under `KS_LTM_DIR` (default `/tmp/ks-larger-than-memory`), deleted at the end
//! (`KS_LTM_KEEP=1` keeps it for another run, which then skips the load).
//! `KS_LTM_ENGINES=ours,rocksdb` (any of `ours`, `rocksdb`, `ours-row`, `ours+row`, `rocksdb+row`, `ours+meta`) runs
//! those only; `ours+meta` is `ours` with its files' indexes and filters in the block cache
//! (`MetadataPlacement::Cached`), reading `ours`'s state (not run unless named).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const KEY_LEN: usize = 10;
const VALUE_LEN: usize = 100;
const KEY_GROUPS: u64 = 128;
const BATCH: usize = 32;

#[path = "support/knobs.rs"]
mod knobs;
use knobs::{env_u64, mix};

/// Key `i` of `n`: key group (ascending with `i`) then `i`, both big-endian, so keys ascend with `i`.
fn key(i: u64, n: u64) -> [u8; KEY_LEN] {
    let kg = (i as u128 * KEY_GROUPS as u128 / n.max(1) as u128) as u16;
    let mut out = [0u8; KEY_LEN];
    out[..2].copy_from_slice(&kg.to_be_bytes());
    out[2..].copy_from_slice(&i.to_be_bytes());
    out
}

/// Incompressible value of key `i`, version `v`.
fn value(i: u64, v: u64, out: &mut [u8; VALUE_LEN]) {
    let mut s = mix(i ^ v.rotate_left(40) ^ 0xABCD);
    for chunk in out.chunks_mut(8) {
        s = mix(s);
        let b = s.to_le_bytes();
        chunk.copy_from_slice(&b[..chunk.len()]);
    }
}

/// A Zipfian generator over `0..n` (Gray et al., as YCSB's `ZipfianGenerator`), ranks scattered by `mix`.
struct Zipf {
    n: f64,
    theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
    items: u64,
}

impl Zipf {
    fn new(items: u64, theta: f64) -> Self {
        let zeta = |m: u64| (1..=m).map(|i| 1.0 / (i as f64).powf(theta)).sum::<f64>();
        let zetan = zeta(items);
        let zeta2 = zeta(2);
        let n = items as f64;
        Zipf {
            n,
            theta,
            alpha: 1.0 / (1.0 - theta),
            zetan,
            eta: (1.0 - (2.0 / n).powf(1.0 - theta)) / (1.0 - zeta2 / zetan),
            items,
        }
    }
    /// The key index for the uniform variate `u` in [0, 1).
    fn sample(&self, u: f64) -> u64 {
        let uz = u * self.zetan;
        let rank = if uz < 1.0 {
            0
        } else if uz < 1.0 + 0.5f64.powf(self.theta) {
            1
        } else {
            (self.n * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64
        };
        mix(rank.min(self.items - 1)) % self.items
    }
}

/// A small xorshift generator (deterministic per phase).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = mix(self.0);
        self.0
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn cpu_clock(clock: libc::clockid_t) -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

#[path = "support/proc_field.rs"]
mod proc_field;
use proc_field::proc_field;

fn read_bytes() -> u64 {
    proc_field("/proc/self/io", "read_bytes:")
}

fn major_faults() -> u64 {
    let s = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the parenthesised command name; majflt is field 12 (1-based) of the whole line.
    s.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(9))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

static PEAK_ANON_KIB: AtomicU64 = AtomicU64::new(0);

fn start_anon_sampler() {
    std::thread::spawn(|| loop {
        let kib = proc_field("/proc/self/status", "RssAnon:");
        PEAK_ANON_KIB.fetch_max(kib, Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(10));
    });
}

/// The cgroup the children run in.
#[derive(Clone)]
struct Cgroup {
    dir: PathBuf,
    v2: bool,
}

impl Cgroup {
    fn create(limit: u64) -> std::io::Result<Cgroup> {
        let name = format!("ks-larger-than-memory-{}", std::process::id());
        let v1 = Path::new("/sys/fs/cgroup/memory");
        let (dir, v2) = if v1.join("memory.limit_in_bytes").exists() {
            (v1.join(&name), false)
        } else {
            (Path::new("/sys/fs/cgroup").join(&name), true)
        };
        std::fs::create_dir_all(&dir)?;
        let cg = Cgroup { dir, v2 };
        if v2 {
            std::fs::write(cg.dir.join("memory.max"), limit.to_string())?;
            let _ = std::fs::write(cg.dir.join("memory.swap.max"), "0");
        } else {
            std::fs::write(cg.dir.join("memory.limit_in_bytes"), limit.to_string())?;
            let _ = std::fs::write(
                cg.dir.join("memory.memsw.limit_in_bytes"),
                limit.to_string(),
            );
        }
        Ok(cg)
    }
    fn from_env() -> Option<Cgroup> {
        let dir = PathBuf::from(std::env::var("KS_LTM_CGROUP").ok()?);
        let v2 = !dir.join("memory.limit_in_bytes").exists();
        Some(Cgroup { dir, v2 })
    }
    fn limit(&self) -> u64 {
        let f = if self.v2 {
            "memory.max"
        } else {
            "memory.limit_in_bytes"
        };
        std::fs::read_to_string(self.dir.join(f))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    }
    fn usage(&self) -> u64 {
        let f = if self.v2 {
            "memory.current"
        } else {
            "memory.usage_in_bytes"
        };
        std::fs::read_to_string(self.dir.join(f))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    }
    fn peak(&self) -> u64 {
        let f = if self.v2 {
            "memory.peak"
        } else {
            "memory.max_usage_in_bytes"
        };
        std::fs::read_to_string(self.dir.join(f))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    }
    fn reset_peak(&self) {
        if !self.v2 {
            let _ = std::fs::write(self.dir.join("memory.max_usage_in_bytes"), "0");
        }
    }
    fn oom_kills(&self) -> u64 {
        let (f, k) = if self.v2 {
            ("memory.events", "oom_kill ")
        } else {
            ("memory.oom_control", "oom_kill ")
        };
        proc_field(&self.dir.join(f).to_string_lossy(), k)
    }
    fn enter(&self) {
        std::fs::write(
            self.dir.join("cgroup.procs"),
            std::process::id().to_string(),
        )
        .expect("move into the cgroup");
    }
    fn remove(&self) {
        let _ = std::fs::remove_dir(&self.dir);
    }
}

fn drop_caches() {
    // SAFETY: `sync` has no preconditions.
    unsafe { libc::sync() };
    if let Err(e) = std::fs::write("/proc/sys/vm/drop_caches", "3") {
        eprintln!("cannot drop the page cache ({e}); runs after the first start warm");
    }
}

/// What the workload needs from an engine.
trait Engine {
    fn put(&self, k: &[u8], v: &[u8]);
    fn merge(&self, k: &[u8], v: &[u8]);
    /// Length of the value, if found.
    fn get(&self, k: &[u8]) -> Option<usize>;
    /// Number of keys found.
    fn multi_get(&self, keys: &[[u8; KEY_LEN]]) -> usize;
    /// Flushes and waits for background work.
    fn settle(&self);
    /// Bytes in the row cache (0 without one).
    fn row_cache_usage(&self) -> usize;
    /// Entries in the row cache (`None`: not known).
    fn row_cache_rows(&self) -> Option<usize>;
    /// Bytes in the block cache.
    fn block_cache_usage(&self) -> usize;
}

/// Prints what the engine's caches hold after phase `name` (`STAT cache_after_<name>`, echoed by the parent).
fn print_caches(e: &dyn Engine, name: &str) {
    println!(
        "STAT cache_after_{name} block cache {:.1} MiB, row cache {:.1} MiB, {} rows",
        e.block_cache_usage() as f64 / (1 << 20) as f64,
        e.row_cache_usage() as f64 / (1 << 20) as f64,
        e.row_cache_rows().map_or("?".into(), |r| r.to_string())
    );
}

mod ours {
    use super::*;
    use keyed_state_lsm::{
        Compression, Db, ListAppendOperator, MetadataPlacement, Options, SstOptions,
    };
    use std::sync::Arc;

    pub struct Ours(Db);

    impl Ours {
        /// `row_cache_bytes`: `Options::row_cache_size` (`None`: the engine's default).
        pub fn open(
            dir: &Path,
            cache_bytes: usize,
            row_cache_bytes: Option<usize>,
            cached_metadata: bool,
        ) -> Self {
            let opts = Options {
                row_cache_size: row_cache_bytes,
                sst_metadata: if cached_metadata {
                    MetadataPlacement::Cached
                } else {
                    MetadataPlacement::Resident
                },
                memtable_size: 64 << 20,
                target_file_size: 64 << 20,
                sst: SstOptions {
                    block_size: 4096,
                    restart_interval: 16,
                    bloom_bits_per_key: 10,
                    compression: Compression::Lz4,
                    prefix_extractor: None,
                    prefix_bloom_bits_per_key: 0,
                },
                block_cache_size: cache_bytes,
                wal: false,
                merge_operator: Some(Arc::new(ListAppendOperator)),
                ..Options::default()
            };
            Ours(Db::open(dir, opts).expect("open"))
        }
    }

    impl Engine for Ours {
        fn put(&self, k: &[u8], v: &[u8]) {
            self.0.put(k, v).expect("put");
        }
        fn merge(&self, k: &[u8], v: &[u8]) {
            self.0.merge(k, v).expect("merge");
        }
        fn get(&self, k: &[u8]) -> Option<usize> {
            self.0.get(k).expect("get").map(|v| v.len())
        }
        fn multi_get(&self, keys: &[[u8; KEY_LEN]]) -> usize {
            let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
            self.0
                .multi_get(&refs)
                .expect("multi_get")
                .iter()
                .filter(|v| v.is_some())
                .count()
        }
        fn settle(&self) {
            self.0.flush().expect("flush");
            self.0.wait_for_background_work().expect("wait");
        }
        fn row_cache_usage(&self) -> usize {
            self.0.stats().row_cache_usage
        }
        fn row_cache_rows(&self) -> Option<usize> {
            Some(self.0.stats().row_cache_rows)
        }
        fn block_cache_usage(&self) -> usize {
            self.0.stats().block_cache_usage
        }
    }
}

mod rocks {
    use super::*;
    use rocksdb::{
        BlockBasedOptions, Cache, DBCompressionType, MergeOperands, Options, WaitForCompactOptions,
        WriteOptions, DB,
    };

    fn string_append(_k: &[u8], existing: Option<&[u8]>, ops: &MergeOperands) -> Option<Vec<u8>> {
        let mut out = existing.map(|e| e.to_vec()).unwrap_or_default();
        for op in ops {
            if !out.is_empty() {
                out.push(b',');
            }
            out.extend_from_slice(op);
        }
        Some(out)
    }

    pub struct Rocks {
        db: DB,
        wo: WriteOptions,
        _cache: Cache,
        _row_cache: Option<Cache>,
    }

    impl Rocks {
        pub fn open(dir: &Path, cache_bytes: usize, row_cache_bytes: usize) -> Self {
            let cache = Cache::new_lru_cache(cache_bytes);
            let row_cache = (row_cache_bytes > 0).then(|| Cache::new_lru_cache(row_cache_bytes));
            let mut bbo = BlockBasedOptions::default();
            bbo.set_block_size(4096);
            bbo.set_block_cache(&cache);
            bbo.set_bloom_filter(10.0, false);
            let mut opts = Options::default();
            opts.create_if_missing(true);
            opts.set_block_based_table_factory(&bbo);
            opts.set_compression_type(DBCompressionType::Lz4);
            opts.set_write_buffer_size(64 << 20);
            opts.set_max_write_buffer_number(3);
            opts.set_target_file_size_base(64 << 20);
            opts.set_max_background_jobs(2);
            opts.set_level_compaction_dynamic_level_bytes(true);
            opts.set_merge_operator_associative("stringappendtest", string_append);
            if let Some(rc) = &row_cache {
                opts.set_row_cache(rc);
            }
            let db = DB::open(&opts, dir).expect("open rocksdb");
            let mut wo = WriteOptions::default();
            wo.disable_wal(true);
            Rocks {
                db,
                wo,
                _cache: cache,
                _row_cache: row_cache,
            }
        }
    }

    impl Engine for Rocks {
        fn put(&self, k: &[u8], v: &[u8]) {
            self.db.put_opt(k, v, &self.wo).expect("put");
        }
        fn merge(&self, k: &[u8], v: &[u8]) {
            self.db.merge_opt(k, v, &self.wo).expect("merge");
        }
        fn get(&self, k: &[u8]) -> Option<usize> {
            self.db.get_pinned(k).expect("get").map(|v| v.len())
        }
        fn multi_get(&self, keys: &[[u8; KEY_LEN]]) -> usize {
            self.db
                .multi_get(keys.iter())
                .into_iter()
                .filter(|r| matches!(r, Ok(Some(_))))
                .count()
        }
        fn settle(&self) {
            self.db.flush().expect("flush");
            let mut w = WaitForCompactOptions::default();
            w.set_flush(true);
            self.db.wait_for_compact(&w).expect("wait for compact");
        }
        fn row_cache_usage(&self) -> usize {
            self._row_cache.as_ref().map_or(0, |c| c.get_usage())
        }
        fn row_cache_rows(&self) -> Option<usize> {
            None
        }
        fn block_cache_usage(&self) -> usize {
            self._cache.get_usage()
        }
    }
}

/// The engines: `ours` (the engine's default row cache) and `rocksdb` (none, as Flink configures it),
/// `ours-row` (no row cache), and each with a row cache (`ours+row`, `rocksdb+row`) of
/// `KS_LTM_ROW_CACHE_MB` (default 32) on top of its block cache (`KS_LTM_ROW_CHARGED=1`: taken from it).
/// A variant reads the state its base engine loaded.
/// `ours+meta` is `ours` with its files' indexes and filters in the block cache
/// (`Options::sst_metadata = MetadataPlacement::Cached`), reading `ours`'s state.
const ENGINES: [&str; 6] = [
    "ours",
    "rocksdb",
    "ours-row",
    "ours+row",
    "rocksdb+row",
    "ours+meta",
];

/// The engine whose files `engine` reads (`ours+row` and `ours-row` read `ours`'s state).
fn base_engine(engine: &str) -> &str {
    engine
        .strip_suffix("+row")
        .or_else(|| engine.strip_suffix("-row"))
        .or_else(|| engine.strip_suffix("+meta"))
        .unwrap_or(engine)
}

fn open_engine(engine: &str, dir: &Path, cache: usize) -> Box<dyn Engine> {
    let row_cache = if engine.ends_with("+row") {
        (env_u64("KS_LTM_ROW_CACHE_MB", 32) << 20) as usize
    } else {
        0
    };
    // `KS_LTM_ROW_CHARGED=1`: the row cache comes out of the block cache (same memory as without one).
    let cache = if env_u64("KS_LTM_ROW_CHARGED", 0) == 1 {
        cache.saturating_sub(row_cache)
    } else {
        cache
    };
    match base_engine(engine) {
        "ours" => Box::new(ours::Ours::open(
            dir,
            cache,
            if engine.ends_with("+row") {
                Some(row_cache)
            } else if engine.ends_with("-row") {
                Some(0)
            } else {
                None
            },
            engine.ends_with("+meta"),
        )),
        _ => Box::new(rocks::Rocks::open(dir, cache, row_cache)),
    }
}

/// One measured phase: prints a machine-readable line for the parent.
struct Meter {
    t: Instant,
    pc: f64,
    rb: u64,
    mf: u64,
}

impl Meter {
    fn start() -> Self {
        Meter {
            t: Instant::now(),
            pc: cpu_clock(libc::CLOCK_PROCESS_CPUTIME_ID),
            rb: read_bytes(),
            mf: major_faults(),
        }
    }
    fn stop(self, name: &str, ops: u64) {
        let wall = self.t.elapsed().as_secs_f64();
        let cpu = cpu_clock(libc::CLOCK_PROCESS_CPUTIME_ID) - self.pc;
        let rb = read_bytes() - self.rb;
        let mf = major_faults() - self.mf;
        println!("PHASE {name} {ops} {wall:.6} {cpu:.6} {rb} {mf}");
        println!(
            "STAT anon_after_{name}_mib {}",
            proc_field("/proc/self/status", "RssAnon:") >> 10
        );
    }
}

/// Runs `op` (which returns the ops it did) until `secs` have passed.
fn timed(secs: f64, mut op: impl FnMut() -> u64) -> u64 {
    let t = Instant::now();
    let mut ops = 0;
    while t.elapsed().as_secs_f64() < secs {
        for _ in 0..16 {
            ops += op();
        }
    }
    ops
}

fn child_load(engine: &str, n: u64, dir: &Path, cache: usize) {
    let e = open_engine(engine, dir, cache);
    let m = Meter::start();
    let mut v = [0u8; VALUE_LEN];
    for i in 0..n {
        value(i, 0, &mut v);
        e.put(&key(i, n), &v);
    }
    e.settle();
    m.stop("load", n);
    drop(e);
    let bytes: u64 = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0);
    println!("STAT disk_bytes {bytes}");
}

fn child_measure(engine: &str, n: u64, dir: &Path, cache: usize, cg: Option<&Cgroup>) {
    let secs = env_u64("KS_LTM_SECS", 8) as f64;
    let m = Meter::start();
    let e = open_engine(engine, dir, cache);
    m.stop("open", 1);
    println!(
        "STAT anon_after_open_mib {}",
        proc_field("/proc/self/status", "RssAnon:") >> 10
    );
    // Background work a reopen may start (not timed).
    e.settle();
    let mut rng = Rng(0x5EED ^ std::process::id() as u64);
    // Warm-up: uniform reads until the cgroup is 90 % full (or 20 s).
    let t = Instant::now();
    let mut warm = 0u64;
    while t.elapsed() < Duration::from_secs(20) {
        for _ in 0..256 {
            e.get(&key(rng.next() % n, n));
        }
        warm += 256;
        if cg.is_some_and(|c| c.usage() >= c.limit() / 10 * 9) {
            break;
        }
    }
    println!(
        "STAT warmup {warm} ops in {:.1} s, cgroup usage {} MiB",
        t.elapsed().as_secs_f64(),
        cg.map_or(0, |c| c.usage() >> 20)
    );

    let m = Meter::start();
    let ops = timed(secs, || {
        let i = rng.next() % n;
        assert!(e.get(&key(i, n)).is_some(), "{engine}: key {i} missing");
        1
    });
    m.stop("get_uniform", ops);
    print_caches(e.as_ref(), "get_uniform");

    let zipf = Zipf::new(n, 0.99);
    let m = Meter::start();
    let ops = timed(secs, || {
        let i = zipf.sample(rng.unit());
        assert!(e.get(&key(i, n)).is_some(), "{engine}: key {i} missing");
        1
    });
    m.stop("get_zipf", ops);
    print_caches(e.as_ref(), "get_zipf");

    let hot = (n / 100).max(1);
    // Every hot key read twice in a row first (not timed, but reported): the phase measures hot reads once
    // a row cache could hold them, not the disk reads that fill it. Our row cache admits a row on its
    // second read (the second read of a key finds its block in memory).
    let m = Meter::start();
    for h in 0..hot {
        e.get(&key(mix(h) % n, n));
        e.get(&key(mix(h) % n, n));
    }
    m.stop("hot_fill", hot);
    print_caches(e.as_ref(), "hot_fill");
    let m = Meter::start();
    let ops = timed(secs, || {
        let i = mix(rng.next() % hot) % n;
        assert!(e.get(&key(i, n)).is_some(), "{engine}: key {i} missing");
        1
    });
    m.stop("get_hot", ops);
    print_caches(e.as_ref(), "get_hot");
    println!(
        "STAT row_cache_mib_after_hot {:.1} MiB, {} rows",
        e.row_cache_usage() as f64 / (1 << 20) as f64,
        e.row_cache_rows().map_or("?".into(), |r| r.to_string())
    );

    let mut batch = [[0u8; KEY_LEN]; BATCH];
    let m = Meter::start();
    let ops = timed(secs, || {
        for k in batch.iter_mut() {
            *k = key(rng.next() % n, n);
        }
        let found = e.multi_get(&batch);
        assert_eq!(found, BATCH, "{engine}: multi_get found {found} of {BATCH}");
        BATCH as u64
    });
    m.stop("multi_get32", ops);
    print_caches(e.as_ref(), "multi_get32");

    let mut v = [0u8; VALUE_LEN];
    let m = Meter::start();
    let ops = timed(secs, || {
        let i = rng.next() % n;
        let k = key(i, n);
        assert!(e.get(&k).is_some(), "{engine}: key {i} missing");
        value(i, rng.next(), &mut v);
        e.put(&k, &v);
        1
    });
    m.stop("rmw", ops);
    print_caches(e.as_ref(), "rmw");

    // Lists of their own keys (after every loaded key), 1 % as many as the loaded keys.
    let lists = (n / 100).max(1);
    let m = Meter::start();
    let ops = timed(secs, || {
        let l = n + mix(rng.next() % lists) % lists;
        e.merge(&key(l, n), &rng.next().to_le_bytes());
        1
    });
    m.stop("append", ops);
    print_caches(e.as_ref(), "append");
    // Flush and compact what the writes left (not timed), so that the next round does not read while
    // compacting them.
    let t = Instant::now();
    e.settle();
    println!("STAT settle_secs {:.1}", t.elapsed().as_secs_f64());
    drop(e);
    println!(
        "STAT peak_anon_mib {:.1}",
        PEAK_ANON_KIB.load(Ordering::Relaxed) as f64 / 1024.0
    );
    println!(
        "STAT vmhwm_mib {:.1}",
        proc_field("/proc/self/status", "VmHWM:") as f64 / 1024.0
    );
}

struct Case {
    name: &'static str,
    keys: u64,
    limit: u64,
}

#[derive(Default)]
struct Run {
    /// phase -> [ops, wall, cpu, read_bytes, major faults]
    phases: BTreeMap<String, Vec<f64>>,
    stats: BTreeMap<String, String>,
    cgroup_peak: u64,
    oom_kills: u64,
}

impl Run {
    fn rate(&self, p: &str) -> Option<f64> {
        self.phases.get(p).map(|v| v[0] / v[1])
    }
    fn cpu_rate(&self, p: &str) -> Option<f64> {
        self.phases.get(p).map(|v| v[0] / v[2].max(1e-9))
    }
    fn kib_per_op(&self, p: &str) -> Option<f64> {
        self.phases.get(p).map(|v| v[3] / 1024.0 / v[0].max(1.0))
    }
    fn faults_per_op(&self, p: &str) -> Option<f64> {
        self.phases.get(p).map(|v| v[4] / v[0].max(1.0))
    }
}

fn run_child(
    exe: &Path,
    role: &str,
    engine: &str,
    case: &Case,
    dir: &Path,
    cg: Option<&Cgroup>,
) -> Run {
    let mut cmd = Command::new(exe);
    cmd.args(["--child", role, engine])
        .env("KS_LTM_N", case.keys.to_string())
        .env("KS_LTM_DB", dir);
    if let Some(c) = cg {
        cmd.env("KS_LTM_CGROUP", &c.dir);
        c.reset_peak();
    }
    let oom0 = cg.map_or(0, |c| c.oom_kills());
    let out = cmd.output().expect("spawn child");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut run = Run::default();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.first() {
            Some(&"PHASE") if f.len() == 7 => {
                // Raw: phase, ops, wall s, CPU s, read bytes, major faults (a run of one engine prints no
                // table).
                println!("  {engine} {line}");
                let nums = f[2..].iter().filter_map(|x| x.parse().ok()).collect();
                run.phases.insert(f[1].to_string(), nums);
            }
            Some(&"STAT") if f.len() >= 3 => {
                if f[1].starts_with("cache_after_") {
                    println!("  {engine} {line}");
                }
                run.stats.insert(f[1].to_string(), f[2..].join(" "));
            }
            _ => {}
        }
    }
    run.cgroup_peak = cg.map_or(0, |c| c.peak());
    run.oom_kills = cg.map_or(0, |c| c.oom_kills()) - oom0;
    if !out.status.success() {
        eprintln!("{}", String::from_utf8_lossy(&out.stderr));
        println!(
            "  {engine} {role} child FAILED: {} (cgroup OOM kills during it: {})",
            out.status, run.oom_kills
        );
    }
    run
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn fmt_rate(x: f64) -> String {
    if x >= 1e6 {
        format!("{:.2}M", x / 1e6)
    } else if x >= 1e4 {
        format!("{:.1}k", x / 1e3)
    } else {
        format!("{x:.0}")
    }
}

fn run_case(exe: &Path, case: &Case, engines: &[&str], base: &Path, reps: u64) {
    let cg = if env_u64("KS_LTM_NO_CGROUP", 0) == 1 {
        println!("NO cgroup (KS_LTM_NO_CGROUP=1): the limit below is not enforced");
        None
    } else {
        Some(Cgroup::create(case.limit).expect("create the cgroup (run as root)"))
    };
    println!();
    println!(
        "## case {}: {} keys x ({KEY_LEN} + {VALUE_LEN}) bytes = {:.2} GB of user data; cgroup {} limit {} MiB",
        case.name,
        case.keys,
        case.keys as f64 * (KEY_LEN + VALUE_LEN) as f64 / 1e9,
        cg.as_ref().map_or("none".into(), |c| c.dir.display().to_string()),
        cg.as_ref().map_or(case.limit, |c| c.limit()) >> 20
    );
    let mut loads = BTreeMap::new();
    let mut bases: Vec<&str> = engines.iter().map(|e| base_engine(e)).collect();
    bases.dedup();
    bases.sort_unstable();
    bases.dedup();
    for e in &bases {
        let dir = base.join(format!("{}-{e}", case.name));
        if dir.join("LOADED").exists() {
            println!("{e}: reusing the state loaded in {}", dir.display());
            continue;
        }
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("bench dir");
        drop_caches();
        let r = run_child(exe, "load", e, case, &dir, cg.as_ref());
        if let Some(p) = r.phases.get("load") {
            println!(
                "{e}: loaded {} keys in {:.1} s ({}/s, {:.0} CPU-s), {:.2} GB on disk, cgroup peak {} MiB, OOM kills {}",
                case.keys,
                p[1],
                fmt_rate(p[0] / p[1]),
                p[2],
                r.stats.get("disk_bytes").and_then(|s| s.parse::<f64>().ok()).unwrap_or(0.0) / 1e9,
                r.cgroup_peak >> 20,
                r.oom_kills
            );
            std::fs::write(dir.join("LOADED"), b"").expect("mark loaded");
        }
        loads.insert(*e, r);
    }
    let mut runs: BTreeMap<&str, Vec<Run>> = BTreeMap::new();
    for round in 0..reps {
        for e in engines {
            let dir = base.join(format!("{}-{}", case.name, base_engine(e)));
            drop_caches();
            let t = Instant::now();
            let r = run_child(exe, "measure", e, case, &dir, cg.as_ref());
            println!(
                "round {round} {e}: {:.0} s, {}; hot keys read twice in {:.1} s; row cache after the hot reads {}, cgroup peak {} MiB, OOM kills {}; {}",
                t.elapsed().as_secs_f64(),
                r.stats.get("warmup").cloned().unwrap_or_default(),
                r.phases.get("hot_fill").map_or(f64::NAN, |p| p[1]),
                r.stats
                    .get("row_cache_mib_after_hot")
                    .cloned()
                    .unwrap_or_default(),
                r.cgroup_peak >> 20,
                r.oom_kills,
                [
                    "get_uniform",
                    "get_zipf",
                    "get_hot",
                    "multi_get32",
                    "rmw",
                    "append"
                ]
                .iter()
                .map(|p| format!("{p} {}", r.rate(p).map_or("-".into(), fmt_rate)))
                .collect::<Vec<_>>()
                .join(", ")
            );
            runs.entry(e).or_default().push(r);
        }
        let l = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        println!("load average after round {round}: {}", l.trim());
    }
    for (a, b) in [
        ("ours", "rocksdb"),
        ("ours-row", "rocksdb"),
        ("ours", "ours-row"),
        ("ours+row", "rocksdb"),
        ("ours+row", "rocksdb+row"),
        ("ours+row", "ours"),
        ("rocksdb+row", "rocksdb"),
        ("ours+meta", "ours"),
        ("ours+meta", "rocksdb"),
    ] {
        if let (Some(ra), Some(rb)) = (runs.get(a), runs.get(b)) {
            print_table(case, (a, ra), (b, rb), &loads);
        }
    }
    if env_u64("KS_LTM_KEEP", 0) != 1 {
        for e in &bases {
            let _ = std::fs::remove_dir_all(base.join(format!("{}-{e}", case.name)));
        }
    }
    if let Some(c) = cg {
        c.remove();
    }
}

/// The table comparing engine `a` with engine `b` (their rounds paired in order).
fn print_table(
    case: &Case,
    (a, ours): (&str, &[Run]),
    (b, rocks): (&str, &[Run]),
    loads: &BTreeMap<&str, Run>,
) {
    let med =
        |rs: &[Run], f: &dyn Fn(&Run) -> Option<f64>| median(rs.iter().filter_map(f).collect());
    println!();
    println!(
        "| {} under {} MiB | {a} | {b} | ratio {a}/{b} (median, min-max over rounds) |",
        case.name,
        case.limit >> 20
    );
    println!("|---|---:|---:|---|");
    let phases = [
        ("uniform point read", "get_uniform"),
        ("Zipfian point read (0.99)", "get_zipf"),
        ("hot point read (1 % of keys)", "get_hot"),
        ("multi_get of 32 (keys/s)", "multi_get32"),
        ("read-modify-write update", "rmw"),
        ("list append (merge operand)", "append"),
    ];
    for (label, p) in phases {
        let ratios: Vec<f64> = ours
            .iter()
            .zip(rocks.iter())
            .filter_map(|(o, r)| Some(o.rate(p)? / r.rate(p)?))
            .collect();
        let spread = if ratios.is_empty() {
            "-".to_string()
        } else {
            format!(
                "{:.2} ({:.2}-{:.2})",
                median(ratios.clone()),
                ratios.iter().copied().fold(f64::INFINITY, f64::min),
                ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max)
            )
        };
        println!(
            "| {label}, ops/s | {} | {} | {spread} |",
            fmt_rate(med(ours, &|r| r.rate(p))),
            fmt_rate(med(rocks, &|r| r.rate(p)))
        );
        println!(
            "| {label}, ops per CPU-s | {} | {} | |",
            fmt_rate(med(ours, &|r| r.cpu_rate(p))),
            fmt_rate(med(rocks, &|r| r.cpu_rate(p)))
        );
        println!(
            "| {label}, read KiB/op (major faults/op) | {:.1} ({:.2}) | {:.1} ({:.2}) | |",
            med(ours, &|r| r.kib_per_op(p)),
            med(ours, &|r| r.faults_per_op(p)),
            med(rocks, &|r| r.kib_per_op(p)),
            med(rocks, &|r| r.faults_per_op(p))
        );
    }
    let mib = |rs: &[Run], f: &dyn Fn(&Run) -> f64| {
        rs.iter()
            .map(|r| format!("{:.0}", f(r)))
            .collect::<Vec<_>>()
            .join(" / ")
    };
    println!(
        "| open, s | {} | {} | |",
        mib(ours, &|r| r.phases.get("open").map_or(f64::NAN, |p| p[1])),
        mib(rocks, &|r| r.phases.get("open").map_or(f64::NAN, |p| p[1]))
    );
    println!(
        "| cgroup peak (page cache included), MiB | {} | {} | |",
        mib(ours, &|r| (r.cgroup_peak >> 20) as f64),
        mib(rocks, &|r| (r.cgroup_peak >> 20) as f64)
    );
    let stat = |r: &Run, k: &str| {
        r.stats
            .get(k)
            .and_then(|s| s.parse().ok())
            .unwrap_or(f64::NAN)
    };
    println!(
        "| peak RSS (VmHWM), MiB | {} | {} | |",
        mib(ours, &|r| stat(r, "vmhwm_mib")),
        mib(rocks, &|r| stat(r, "vmhwm_mib"))
    );
    println!(
        "| anonymous memory after open / after the uniform reads, MiB | {} | {} | |",
        ours.iter()
            .map(|r| format!(
                "{:.0}/{:.0}",
                stat(r, "anon_after_open_mib"),
                stat(r, "anon_after_get_uniform_mib")
            ))
            .collect::<Vec<_>>()
            .join(" ; "),
        rocks
            .iter()
            .map(|r| format!(
                "{:.0}/{:.0}",
                stat(r, "anon_after_open_mib"),
                stat(r, "anon_after_get_uniform_mib")
            ))
            .collect::<Vec<_>>()
            .join(" ; ")
    );
    println!(
        "| peak anonymous memory, MiB | {} | {} | |",
        mib(ours, &|r| stat(r, "peak_anon_mib")),
        mib(rocks, &|r| stat(r, "peak_anon_mib"))
    );
    let ooms = |rs: &[Run]| rs.iter().map(|r| r.oom_kills).sum::<u64>();
    println!(
        "| OOM kills (load + rounds) | {} | {} | |",
        ooms(ours) + loads.get(base_engine(a)).map_or(0, |r| r.oom_kills),
        ooms(rocks) + loads.get(base_engine(b)).map_or(0, |r| r.oom_kills)
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let cache = (env_u64("KS_LTM_CACHE_MB", 64) << 20) as usize;
    if let Some(pos) = args.iter().position(|a| a == "--child") {
        let role = args.get(pos + 1).cloned().unwrap_or_default();
        let engine = args.get(pos + 2).cloned().unwrap_or_default();
        let cg = Cgroup::from_env();
        if let Some(c) = &cg {
            c.enter();
        }
        start_anon_sampler();
        let n = env_u64("KS_LTM_N", 0);
        let dir = PathBuf::from(std::env::var("KS_LTM_DB").expect("KS_LTM_DB"));
        match role.as_str() {
            "load" => child_load(&engine, n, &dir, cache),
            _ => child_measure(&engine, n, &dir, cache, cg.as_ref()),
        }
        return;
    }
    // `cargo bench` passes `--bench`; nothing else is expected.
    let base = PathBuf::from(
        std::env::var("KS_LTM_DIR").unwrap_or_else(|_| "/tmp/ks-larger-than-memory".into()),
    );
    std::fs::create_dir_all(&base).expect("bench dir");
    let reps = env_u64("KS_LTM_REPS", 3);
    let only = std::env::var("KS_LTM_ENGINES").ok();
    let engines: Vec<&str> = ENGINES
        .into_iter()
        .filter(|e| match only.as_deref() {
            Some(o) => o.split(',').any(|x| x == *e),
            None => *e != "ours+meta",
        })
        .collect();
    let cases_env = std::env::var("KS_LTM_CASES").unwrap_or_else(|_| "10m,8g".into());
    let all = [
        Case {
            name: "10m",
            keys: 10_000_000,
            limit: 512 << 20,
        },
        Case {
            name: "8g",
            keys: 8_000_000_000 / (KEY_LEN + VALUE_LEN) as u64,
            limit: 1 << 30,
        },
    ];
    let exe = std::env::current_exe().expect("current exe");
    let l = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "larger_than_memory: engines {engines:?}, {reps} rounds, {} s per phase, block cache {} MiB each, row cache {} MiB (+row engines, {}), data under {}; load average at start {}",
        env_u64("KS_LTM_SECS", 8),
        cache >> 20,
        env_u64("KS_LTM_ROW_CACHE_MB", 32),
        if env_u64("KS_LTM_ROW_CHARGED", 0) == 1 {
            "taken from their block cache"
        } else {
            "on top of their block cache"
        },
        base.display(),
        l.trim()
    );
    for case in all
        .iter()
        .filter(|c| cases_env.split(',').any(|x| x == c.name))
    {
        run_case(&exe, case, &engines, &base, reps);
    }
}

/// mimalloc as the global allocator, as the other benches (design/architecture.md, "Allocator").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
