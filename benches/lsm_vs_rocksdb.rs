//! Our LSM engine against RocksDB, in one run.
//!
//! `cargo bench --features rocksdb --bench lsm_vs_rocksdb` (release). Prints a table
//! `operation | ours | RocksDB | ratio` (ratio = ours / RocksDB for throughputs, RocksDB / ours for times and
//! sizes, so that > 1.0 always means "we are better").
//!
//! Workload (the issue contract): 10-byte keys (2-byte key-group prefix + 8-byte key), 100-byte values (half
//! random, half repeated bytes: LZ4 shrinks them to about 60 %), WAL off, 64 MiB memtable, LZ4, 4 KiB blocks,
//! 10 bits/key bloom filters and an equal block cache on both, one client thread; leveled compaction with
//! dynamic level sizing and min-overlapping-ratio file picking on both (RocksDB's defaults, set explicitly on
//! our side; both option sets are printed).
//!
//! Each engine runs its phases in a child process (so that `VmHWM` is a per-engine peak), and the children
//! are interleaved `ours, rocksdb, ours, rocksdb, ...` (`KS_BENCH_REPS` rounds, default 2): the machine is
//! shared and loaded, so the ratio of neighbouring runs is what matters. Per phase the child reports wall
//! time, the client thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`) and the process CPU time (background
//! flush/compaction threads included).
//!
//! Environment: `KS_BENCH_KEYS` (default 1,000,000), `KS_BENCH_REPS` (2), `KS_BENCH_CACHE_MB` (64),
//! `KS_BENCH_DIR` (default `/work/tmp-lsm-bench` if it exists, else the system temp dir),
//! `KS_BENCH_ONLY` (`ours` or `rocksdb`: run one engine only), `KS_BENCH_BG_NICE` (nice increment of our
//! background threads, default 5 as `Options::default()`), `KS_BENCH_L0_BASE_RATIO_PCT` (our
//! `l0_base_ratio` in percent, default 25 as `Options::default()`; 0: L0 into the base level at the trigger),
//! `KS_BENCH_SST_METADATA` (`cached`: our files' indexes and filters in the block cache,
//! `MetadataPlacement::Cached`; default `resident`), `KS_BENCH_ROW_CACHE_MB` (our `row_cache_size`:
//! `Some` of that many MiB, a row cache on top of the block cache, 0 none; unset: the default, which shares
//! the block cache's capacity), `KS_BENCH_ROW_MIN_SHARE` (our `row_cache_min_share`, e.g. `0.125`; unset:
//! the default). Our child also prints what its block cache and row cache hold after the gets
//! (`STAT cache_after_<phase>`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

const KEY_LEN: usize = 10;
const VALUE_LEN: usize = 100;
const ELEM_LEN: usize = 8;
const KEY_GROUPS: u64 = 128;
/// Lists in the merge phase: `keys / LIST_FANOUT` lists receive `keys` appends (10 elements each).
const LIST_FANOUT: u64 = 10;

#[path = "support/knobs.rs"]
mod knobs;
use knobs::{env_u64, mix};

/// Key `i`: key group (2 bytes, big-endian) + a random-looking unique 8-byte key.
fn key(i: u64) -> [u8; KEY_LEN] {
    let k = mix(i);
    let kg = (mix(k ^ 0x5555) % KEY_GROUPS) as u16;
    let mut out = [0u8; KEY_LEN];
    out[..2].copy_from_slice(&kg.to_be_bytes());
    out[2..].copy_from_slice(&k.to_be_bytes());
    out
}

/// Value of key `i`: 50 pseudo-random bytes then 50 repeated bytes.
fn value(i: u64, out: &mut [u8; VALUE_LEN]) {
    let mut s = mix(i ^ 0xABCD);
    for chunk in out[..48].chunks_mut(8) {
        s = mix(s);
        chunk.copy_from_slice(&s.to_le_bytes());
    }
    out[48..50].copy_from_slice(&(s as u16).to_le_bytes());
    out[50..].fill(b'v');
}

fn thread_cpu() -> f64 {
    cpu_clock(libc::CLOCK_THREAD_CPUTIME_ID)
}

fn process_cpu() -> f64 {
    cpu_clock(libc::CLOCK_PROCESS_CPUTIME_ID)
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

/// Peak `RssAnon` of this process in KiB, kept by [`start_anon_sampler`].
static PEAK_ANON_KIB: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Starts a thread that samples `RssAnon` every 10 ms into [`PEAK_ANON_KIB`]: the peak of heap and other
/// anonymous memory, without the file pages that `VmHWM` also counts (our SSTs are memory-mapped, so every
/// block read counts in `VmHWM`, while RocksDB's `pread` page cache does not).
fn start_anon_sampler() {
    std::thread::spawn(|| loop {
        let kib = (status_mib("RssAnon:") * 1024.0) as u64;
        PEAK_ANON_KIB.fetch_max(kib, std::sync::atomic::Ordering::Relaxed);
        std::thread::sleep(std::time::Duration::from_millis(10));
    });
}

/// `VmHWM` and `VmRSS` of this process in MiB.
fn memory_mib() -> (f64, f64) {
    (status_mib("VmHWM:"), status_mib("VmRSS:"))
}

/// A `/proc/self/status` field in MiB (0 if absent).
fn status_mib(name: &str) -> f64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// Bytes this process caused to be written to storage (`/proc/self/io` `write_bytes`, counted when pages
/// are dirtied; all threads). With the WAL off this is flush + compaction output
/// plus small metadata files: the same yardstick for both engines.
fn io_write_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("write_bytes:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn dir_bytes(dir: &Path, only_sst: bool) -> u64 {
    let mut total = 0;
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            // RocksDB's info logs are diagnostics, not data.
            if name.starts_with("LOG") {
                continue;
            }
            if only_sst && !name.ends_with(".sst") {
                continue;
            }
            if let Ok(m) = e.metadata() {
                if m.is_file() {
                    total += m.len();
                }
            }
        }
    }
    total
}

/// The operations the workload needs from an engine.
trait Engine {
    fn put(&self, k: &[u8], v: &[u8]);
    fn merge(&self, k: &[u8], v: &[u8]);
    /// Length of the value, if found.
    fn get(&self, k: &[u8]) -> Option<usize>;
    fn flush(&self);
    fn compact_all(&self);
    /// (entries, key + value bytes) of a full scan.
    fn scan(&self) -> (u64, u64);
    fn checkpoint(&self, dir: &Path);
    /// Bytes written by flushes and compactions so far, as the engine counts them (if it does).
    fn background_bytes_written(&self) -> Option<u64>;
    /// Seconds writes have waited for flushes and compactions so far (write stalls), as the engine reports.
    fn write_stall_secs(&self) -> Option<f64>;
    fn describe(&self) -> String;
    /// (block cache bytes, row cache bytes, rows held), if the engine reports them.
    fn caches(&self) -> Option<(usize, usize, usize)> {
        None
    }
}

/// Prints what the engine's caches hold after `phase` (`STAT cache_after_<phase>`), if it reports it.
fn print_caches(e: &dyn Engine, phase: &str) {
    if let Some((blocks, rows, n)) = e.caches() {
        let mib = |b: usize| b as f64 / (1 << 20) as f64;
        println!(
            "STAT cache_after_{phase} block_mib={:.1} row_mib={:.1} rows={n}",
            mib(blocks),
            mib(rows)
        );
    }
}

mod ours {
    use super::*;
    use keyed_state_lsm::{
        CompactionPriority, Compression, Db, ListAppendOperator, MetadataPlacement, Options,
        ReadOptions, SstOptions,
    };

    pub struct Ours {
        db: Db,
        opts: String,
    }

    impl Ours {
        pub fn open(dir: &Path, cache_bytes: usize) -> Self {
            let opts = Options {
                memtable_size: 64 << 20,
                max_immutable_memtables: 2,
                l0_compaction_trigger: 4,
                l0_stop_writes_trigger: 20,
                level_base_size: 256 << 20,
                level_multiplier: 10,
                // RocksDB 11.8's defaults: dynamic level sizing and min-overlapping-ratio file picking.
                dynamic_level_bytes: true,
                compaction_priority: CompactionPriority::MinOverlappingRatio,
                target_file_size: 64 << 20,
                sst: SstOptions {
                    block_size: 4096,
                    restart_interval: 16,
                    bloom_bits_per_key: 10,
                    compression: Compression::Lz4,
                    // Whole-key bloom only, as RocksDB here (no prefix extractor).
                    prefix_extractor: None,
                    prefix_bloom_bits_per_key: 0,
                },
                block_cache_size: cache_bytes,
                wal: false,
                merge_operator: Some(Arc::new(ListAppendOperator)),
                // Our default (flush/compaction threads at nice +5); `KS_BENCH_BG_NICE` overrides it.
                background_nice: env_u64("KS_BENCH_BG_NICE", 5) as i32,
                // Our default (L0 held back from the base level below 25 % of its bytes);
                // `KS_BENCH_L0_BASE_RATIO_PCT` overrides it (0: L0 into the base level at the trigger).
                l0_base_ratio: std::env::var("KS_BENCH_L0_BASE_RATIO_PCT")
                    .ok()
                    .and_then(|v| v.parse::<f64>().ok())
                    .map_or(Options::default().l0_base_ratio, |p| p / 100.0),
                // `KS_BENCH_SST_METADATA=cached`: files' indexes and filters in the block cache.
                sst_metadata: match std::env::var("KS_BENCH_SST_METADATA").as_deref() {
                    Ok("cached") => MetadataPlacement::Cached,
                    _ => MetadataPlacement::Resident,
                },
                // `KS_BENCH_ROW_CACHE_MB`: a row cache of that size on top of the block cache (0: none).
                row_cache_size: std::env::var("KS_BENCH_ROW_CACHE_MB")
                    .ok()
                    .and_then(|v| v.parse::<usize>().ok())
                    .map(|mb| mb << 20),
                // `KS_BENCH_ROW_MIN_SHARE`: the rows' guaranteed share of the one capacity.
                row_cache_min_share: std::env::var("KS_BENCH_ROW_MIN_SHARE").map_or(
                    Options::default().row_cache_min_share,
                    |v| {
                        v.parse::<f64>()
                            .unwrap_or_else(|e| panic!("KS_BENCH_ROW_MIN_SHARE {v:?}: {e}"))
                    },
                ),
                ..Options::default()
            };
            let desc = format!("{opts:?} sst={:?} block_cache={}", opts.sst, cache_bytes);
            let db = Db::open(dir, opts).expect("open");
            Ours { db, opts: desc }
        }
    }

    impl Engine for Ours {
        fn put(&self, k: &[u8], v: &[u8]) {
            self.db.put(k, v).expect("put");
        }
        fn merge(&self, k: &[u8], v: &[u8]) {
            self.db.merge(k, v).expect("merge");
        }
        fn get(&self, k: &[u8]) -> Option<usize> {
            self.db.get(k).expect("get").map(|v| v.len())
        }
        fn flush(&self) {
            self.db.flush().expect("flush");
        }
        fn compact_all(&self) {
            self.db.compact_all().expect("compact");
        }
        fn scan(&self) -> (u64, u64) {
            let mut it = self.db.iter(ReadOptions::default());
            it.seek_to_first();
            let (mut n, mut bytes) = (0u64, 0u64);
            while it.valid() {
                n += 1;
                bytes += (it.key().len() + it.value().len()) as u64;
                it.next();
            }
            it.status().expect("scan");
            (n, bytes)
        }
        fn checkpoint(&self, dir: &Path) {
            self.db.checkpoint(dir).expect("checkpoint");
        }
        fn background_bytes_written(&self) -> Option<u64> {
            let s = self.db.stats();
            Some(s.flush_bytes_written + s.compaction_bytes_written)
        }
        fn write_stall_secs(&self) -> Option<f64> {
            Some(self.db.stats().write_stall_micros as f64 * 1e-6)
        }
        fn describe(&self) -> String {
            self.opts.clone()
        }
        fn caches(&self) -> Option<(usize, usize, usize)> {
            let s = self.db.stats();
            Some((s.block_cache_usage, s.row_cache_usage, s.row_cache_rows))
        }
    }
}

mod rocks {
    use super::*;
    use rocksdb::{
        checkpoint::Checkpoint, BlockBasedOptions, Cache, DBCompressionType, MergeOperands,
        Options, WriteOptions, DB,
    };

    /// RocksDB's `stringappendtest`: existing value and operands joined with `,`.
    fn string_append(
        _key: &[u8],
        existing: Option<&[u8]>,
        operands: &MergeOperands,
    ) -> Option<Vec<u8>> {
        let cap = existing.map_or(0, |e| e.len() + 1)
            + operands.iter().map(|o| o.len() + 1).sum::<usize>();
        let mut out = Vec::with_capacity(cap);
        let mut first = true;
        if let Some(e) = existing {
            out.extend_from_slice(e);
            first = false;
        }
        for op in operands {
            if !first {
                out.push(b',');
            }
            out.extend_from_slice(op);
            first = false;
        }
        Some(out)
    }

    pub struct Rocks {
        db: DB,
        cache_bytes: usize,
        wo: WriteOptions,
        _cache: Cache,
        dir: PathBuf,
    }

    impl Rocks {
        pub fn open(dir: &Path, cache_bytes: usize) -> Self {
            let cache = Cache::new_lru_cache(cache_bytes);
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
            opts.set_level_zero_file_num_compaction_trigger(4);
            opts.set_level_zero_stop_writes_trigger(20);
            opts.set_max_bytes_for_level_base(256 << 20);
            opts.set_max_bytes_for_level_multiplier(10.0);
            opts.set_target_file_size_base(64 << 20);
            opts.set_num_levels(7);
            opts.set_max_background_jobs(2);
            opts.set_merge_operator_associative("stringappendtest", string_append);
            // Background threads yield to the client, as ours do (`Options::background_nice`, +5 unless
            // `KS_BENCH_BG_NICE` says otherwise): RocksDB's `LowerThreadPoolCPUPriority` for the compaction
            // (LOW) and flush (HIGH) pools, whose only level through the C API is nice 19.
            let mut env = rocksdb::Env::new().expect("rocksdb env");
            env.lower_thread_pool_cpu_priority();
            env.lower_high_priority_thread_pool_cpu_priority();
            opts.set_env(&env);
            let db = DB::open(&opts, dir).expect("open rocksdb");
            let mut wo = WriteOptions::default();
            wo.disable_wal(true);
            Rocks {
                db,
                cache_bytes,
                wo,
                _cache: cache,
                dir: dir.to_path_buf(),
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
        fn flush(&self) {
            self.db.flush().expect("flush");
        }
        fn compact_all(&self) {
            self.db.flush().expect("flush");
            self.db.compact_range(None::<&[u8]>, None::<&[u8]>);
        }
        fn scan(&self) -> (u64, u64) {
            let mut it = self.db.raw_iterator();
            it.seek_to_first();
            let (mut n, mut bytes) = (0u64, 0u64);
            while it.valid() {
                n += 1;
                bytes +=
                    (it.key().map_or(0, |k| k.len()) + it.value().map_or(0, |v| v.len())) as u64;
                it.next();
            }
            it.status().expect("scan");
            (n, bytes)
        }
        fn checkpoint(&self, dir: &Path) {
            Checkpoint::new(&self.db)
                .expect("checkpoint")
                .create_checkpoint(dir)
                .expect("checkpoint");
        }
        fn background_bytes_written(&self) -> Option<u64> {
            // Statistics tickers are not used (their overhead, and their numbering differs between
            // RocksDB releases); the process-level `write_bytes` stands for both engines.
            None
        }
        fn write_stall_secs(&self) -> Option<f64> {
            // `rocksdb.dbstats`: "Cumulative stall: HH:MM:SS.sss H:M:S, p percent".
            let stats = self.db.property_value("rocksdb.dbstats").ok()??;
            let line = stats.lines().find(|l| l.starts_with("Cumulative stall:"))?;
            let hms = line.split_whitespace().nth(2)?;
            let mut secs = 0.0;
            for part in hms.split(':') {
                secs = secs * 60.0 + part.parse::<f64>().ok()?;
            }
            Some(secs)
        }
        fn describe(&self) -> String {
            // The options RocksDB itself recorded (OPTIONS-* file), the lines that matter for the comparison.
            let keys = [
                "rocksdb_version",
                "write_buffer_size",
                "max_write_buffer_number",
                "compression=",
                "bottommost_compression=",
                "block_size=",
                "filter_policy",
                "block_cache",
                "capacity",
                "level0_file_num_compaction_trigger",
                "level0_stop_writes_trigger",
                "max_bytes_for_level_base",
                "max_bytes_for_level_multiplier=",
                "target_file_size_base",
                "num_levels",
                "max_background_jobs",
                "merge_operator",
                "use_mmap_reads",
                "cache_index_and_filter_blocks=",
                "level_compaction_dynamic_level_bytes",
                "compaction_pri",
                "format_version",
            ];
            let mut out = Vec::new();
            if let Ok(rd) = std::fs::read_dir(&self.dir) {
                let mut files: Vec<PathBuf> = rd
                    .flatten()
                    .map(|e| e.path())
                    .filter(|p| {
                        p.file_name()
                            .is_some_and(|n| n.to_string_lossy().starts_with("OPTIONS-"))
                    })
                    .collect();
                files.sort();
                if let Some(f) = files.last() {
                    let text = std::fs::read_to_string(f).unwrap_or_default();
                    for line in text.lines() {
                        let t = line.trim();
                        if keys.iter().any(|k| t.starts_with(k)) && !out.contains(&t.to_string()) {
                            out.push(t.to_string());
                        }
                    }
                }
            }
            out.push(format!(
                "block cache: LRU {} bytes (set in code); bloom: 10 bits/key full filter (set in code)",
                self.cache_bytes
            ));
            out.push("WriteOptions.disableWAL=true".into());
            out.push(
                "Env: LowerThreadPoolCPUPriority(LOW and HIGH pools, nice 19) (set in code)".into(),
            );
            out.join("; ")
        }
    }
}

/// One measured phase of one child run.
struct Phase {
    name: &'static str,
    ops: u64,
    bytes: u64,
    wall: f64,
    thread_cpu: f64,
    process_cpu: f64,
    hwm_mib: f64,
    rss_mib: f64,
}

struct Meter {
    t: Instant,
    tc: f64,
    pc: f64,
}

impl Meter {
    fn start() -> Self {
        Meter {
            t: Instant::now(),
            tc: thread_cpu(),
            pc: process_cpu(),
        }
    }
    fn stop(self, name: &'static str, ops: u64, bytes: u64) -> Phase {
        let wall = self.t.elapsed().as_secs_f64();
        let (hwm, rss) = memory_mib();
        let p = Phase {
            name,
            ops,
            bytes,
            wall,
            thread_cpu: thread_cpu() - self.tc,
            process_cpu: process_cpu() - self.pc,
            hwm_mib: hwm,
            rss_mib: rss,
        };
        // One machine-readable line per phase for the parent.
        println!(
            "PHASE {} {} {} {:.6} {:.6} {:.6} {:.1} {:.1}",
            p.name, p.ops, p.bytes, p.wall, p.thread_cpu, p.process_cpu, p.hwm_mib, p.rss_mib
        );
        // Where the resident memory is: heap and other anonymous pages vs file-backed pages (our SSTs are
        // memory-mapped, so their resident pages count in RSS; RocksDB's `pread` page cache does not).
        println!(
            "MEM {} rss_anon_mib={:.1} rss_file_mib={:.1}",
            p.name,
            status_mib("RssAnon:"),
            status_mib("RssFile:")
        );
        println!(
            "STAT peak_anon_mib_{} {:.1}",
            p.name,
            PEAK_ANON_KIB.load(std::sync::atomic::Ordering::Relaxed) as f64 / 1024.0
        );
        p
    }
}

fn run_child(engine: &str, n: u64, cache_bytes: usize, base: &Path) {
    start_anon_sampler();
    let dir = base.join(format!("{engine}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("bench dir");
    let db_dir = dir.join("db");
    let e: Box<dyn Engine> = match engine {
        "ours" => Box::new(ours::Ours::open(&db_dir, cache_bytes)),
        _ => Box::new(rocks::Rocks::open(&db_dir, cache_bytes)),
    };
    let gets = n.min(1_000_000);
    let mut v = [0u8; VALUE_LEN];
    let io0 = io_write_bytes();

    // 1. Random put.
    let m = Meter::start();
    for i in 0..n {
        value(i, &mut v);
        e.put(&key(i), &v);
    }
    m.stop("put", n, n * (KEY_LEN + VALUE_LEN) as u64);
    if let Some(t) = e.write_stall_secs() {
        println!("STAT stall_secs_put {t:.3}");
    }
    let user = n * (KEY_LEN + VALUE_LEN) as u64;
    // What the background flushes and compactions wrote while the client was putting (what competes with it
    // for the cores), before the final flush and full compaction.
    println!(
        "STAT wamp_put_phase {:.4}",
        (io_write_bytes() - io0) as f64 / user as f64
    );
    if let Some(b) = e.background_bytes_written() {
        println!("STAT wamp_put_phase_engine {:.4}", b as f64 / user as f64);
    }

    // 2. Flush + full compaction.
    let m = Meter::start();
    e.compact_all();
    m.stop("flush_compact", 1, 0);
    println!(
        "STAT wamp_put {:.4}",
        (io_write_bytes() - io0) as f64 / user as f64
    );
    if let Some(b) = e.background_bytes_written() {
        println!("STAT wamp_put_engine {:.4}", b as f64 / user as f64);
    }

    println!("STAT disk_bytes {}", dir_bytes(&db_dir, false));
    println!("STAT sst_bytes {}", dir_bytes(&db_dir, true));

    // 3. Uniform random get (existing keys).
    let m = Meter::start();
    let mut found = 0u64;
    for t in 0..gets {
        let i = mix(t ^ 0x1234_5678) % n;
        if e.get(&key(i)) == Some(VALUE_LEN) {
            found += 1;
        }
    }
    assert_eq!(found, gets, "{engine}: uniform get found {found} of {gets}");
    m.stop("get_uniform", gets, 0);
    print_caches(&*e, "get_uniform");

    // 4. Hot get: uniform over 1 % of the keys (their blocks stay cached).
    let hot = (n / 100).max(1);
    let m = Meter::start();
    let mut found = 0u64;
    for t in 0..gets {
        let i = mix(t ^ 0x8765_4321) % hot;
        if e.get(&key(i)).is_some() {
            found += 1;
        }
    }
    assert_eq!(found, gets, "{engine}: hot get");
    m.stop("get_hot", gets, 0);
    print_caches(&*e, "get_hot");

    // 5. Full scan.
    let m = Meter::start();
    let (entries, bytes) = e.scan();
    assert_eq!(entries, n, "{engine}: scan");
    m.stop("scan", entries, bytes);

    // 6. Checkpoint.
    let m = Meter::start();
    e.checkpoint(&dir.join("checkpoint"));
    m.stop("checkpoint", 1, 0);

    // 7. List append through merge: n appends of 8-byte elements over n / 10 lists (keys not among the puts).
    let lists = (n / LIST_FANOUT).max(1);
    let m = Meter::start();
    for t in 0..n {
        let l = mix(t ^ 0xC0FFEE) % lists;
        e.merge(&key(n + l), &t.to_le_bytes());
    }
    m.stop("merge", n, n * (KEY_LEN + ELEM_LEN) as u64);
    if let Some(t) = e.write_stall_secs() {
        println!("STAT stall_secs_through_merge {t:.3}");
    }

    // 8. Get of merged lists after a flush (operands resolved on read; no manual compaction).
    e.flush();
    let m = Meter::start();
    let mut elems = 0u64;
    for t in 0..lists {
        let l = mix(t ^ 0xBEEF) % lists;
        if let Some(len) = e.get(&key(n + l)) {
            elems += (len as u64 + 1) / (ELEM_LEN as u64 + 1);
        }
    }
    m.stop("get_merged", lists, elems);
    print_caches(&*e, "get_merged");
    let user = n * (KEY_LEN + VALUE_LEN) as u64 + n * (KEY_LEN + ELEM_LEN) as u64;
    // The checkpoint hard-links files: it adds no data bytes.
    println!(
        "STAT wamp_all {:.4}",
        (io_write_bytes() - io0) as f64 / user as f64
    );
    if let Some(b) = e.background_bytes_written() {
        println!("STAT wamp_all_engine {:.4}", b as f64 / user as f64);
    }
    println!("STAT options {}", e.describe());
    drop(e);
    let _ = std::fs::remove_dir_all(&dir);
}

// Indices of a parsed PHASE line: ops, bytes, wall, thread CPU, process CPU, VmHWM, VmRSS.
const WALL: usize = 2;
const PROCESS_CPU: usize = 4;
const HWM: usize = 5;

/// Parsed output of one child.
#[derive(Default)]
struct RunResult {
    phases: BTreeMap<String, Vec<f64>>,
    stats: BTreeMap<String, String>,
}

fn parse_child(out: &str) -> RunResult {
    let mut r = RunResult::default();
    for line in out.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.first() {
            Some(&"PHASE") if f.len() == 9 => {
                let nums: Vec<f64> = f[2..].iter().filter_map(|x| x.parse().ok()).collect();
                r.phases.insert(f[1].to_string(), nums);
            }
            Some(&"STAT") if f.len() >= 3 => {
                r.stats.insert(f[1].to_string(), f[2..].join(" "));
            }
            _ => {}
        }
    }
    r
}

/// Per metric: the best of the repeats (max throughput, min time) and all values for the record.
struct Summary {
    runs: Vec<RunResult>,
}

impl Summary {
    fn phase(&self, name: &str, idx: usize) -> Vec<f64> {
        self.runs
            .iter()
            .filter_map(|r| r.phases.get(name).and_then(|p| p.get(idx).copied()))
            .collect()
    }
    /// ops / wall second per run.
    fn rate(&self, name: &str) -> Vec<f64> {
        self.runs
            .iter()
            .filter_map(|r| r.phases.get(name).map(|p| p[0] / p[2]))
            .collect()
    }
    /// ops per client-thread CPU second per run.
    fn cpu_rate(&self, name: &str) -> Vec<f64> {
        self.runs
            .iter()
            .filter_map(|r| r.phases.get(name).map(|p| p[0] / p[3].max(1e-9)))
            .collect()
    }
    fn mbps(&self, name: &str) -> Vec<f64> {
        self.runs
            .iter()
            .filter_map(|r| r.phases.get(name).map(|p| p[1] / 1e6 / p[2]))
            .collect()
    }
    fn stat(&self, name: &str) -> Vec<f64> {
        self.runs
            .iter()
            .filter_map(|r| r.stats.get(name).and_then(|s| s.parse().ok()))
            .collect()
    }
}

fn max(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::NAN, f64::max)
}
fn min(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::NAN, f64::min)
}

fn fmt_rate(x: f64) -> String {
    if x >= 1e6 {
        format!("{:.2}M", x / 1e6)
    } else {
        format!("{:.0}k", x / 1e3)
    }
}

fn list(v: &[f64], f: impl Fn(f64) -> String) -> String {
    v.iter().map(|x| f(*x)).collect::<Vec<_>>().join(" / ")
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n = env_u64("KS_BENCH_KEYS", 1_000_000);
    let cache_mb = env_u64("KS_BENCH_CACHE_MB", 64);
    let base = std::env::var("KS_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            let w = PathBuf::from("/work/tmp-lsm-bench");
            if w.is_dir() {
                w
            } else {
                std::env::temp_dir()
            }
        });
    if let Some(pos) = args.iter().position(|a| a == "--child") {
        let engine = args.get(pos + 1).cloned().unwrap_or_default();
        run_child(&engine, n, (cache_mb << 20) as usize, &base);
        return;
    }
    let reps = env_u64("KS_BENCH_REPS", 2);
    let only = std::env::var("KS_BENCH_ONLY").ok();
    let engines: Vec<&str> = ["ours", "rocksdb"]
        .into_iter()
        .filter(|e| only.as_deref().is_none_or(|o| o == *e))
        .collect();
    let exe = std::env::current_exe().expect("current exe");
    let load = |label: &str| {
        let l = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        println!("load average {label}: {}", l.trim());
    };
    println!(
        "lsm_vs_rocksdb: {n} keys, {KEY_LEN}-byte keys, {VALUE_LEN}-byte values, block cache {cache_mb} MiB each, {reps} interleaved rounds"
    );
    load("at start");
    let mut results: BTreeMap<&str, Vec<RunResult>> = BTreeMap::new();
    for round in 0..reps {
        for engine in &engines {
            let t = Instant::now();
            let out = Command::new(&exe)
                .args(["--child", engine])
                .output()
                .expect("spawn child");
            let text = String::from_utf8_lossy(&out.stdout);
            if !out.status.success() {
                eprintln!("{}", String::from_utf8_lossy(&out.stderr));
                panic!("{engine} child failed: {}", out.status);
            }
            println!(
                "round {round} {engine}: {:.1} s wall",
                t.elapsed().as_secs_f64()
            );
            for line in text.lines().filter(|l| {
                l.starts_with("PHASE") || l.starts_with("MEM") || l.starts_with("STAT cache_after")
            }) {
                println!("  {line}");
            }
            results.entry(engine).or_default().push(parse_child(&text));
        }
        load(&format!("after round {round}"));
    }
    let ours = Summary {
        runs: results.remove("ours").unwrap_or_default(),
    };
    let rocks = Summary {
        runs: results.remove("rocksdb").unwrap_or_default(),
    };

    println!();
    println!("| operation | ours | RocksDB | ratio (ours/RocksDB, >1 = we are better) |");
    println!("|---|---|---|---|");
    let row = |name: &str, o: f64, r: f64, fmt: &dyn Fn(f64) -> String, higher_better: bool| {
        let ratio = if higher_better { o / r } else { r / o };
        println!("| {name} | {} | {} | {:.2} |", fmt(o), fmt(r), ratio);
    };
    let rate = |x: f64| format!("{}/s", fmt_rate(x));
    let cpu = |x: f64| format!("{} per CPU-s", fmt_rate(x));
    let mbps = |x: f64| format!("{x:.0} MB/s");
    let secs = |x: f64| format!("{x:.2} s");
    let mib = |x: f64| format!("{:.1} MB", x / 1e6);
    let plain = |x: f64| format!("{x:.2}");
    let mem = |x: f64| format!("{x:.0} MiB");
    for (label, phase) in [
        ("random put", "put"),
        (
            "random get (uniform, after flush + compaction)",
            "get_uniform",
        ),
        ("random get (hot 1 %)", "get_hot"),
        ("list append (merge, 8-byte elements)", "merge"),
        (
            "get of a merged list (10 elements, after flush)",
            "get_merged",
        ),
    ] {
        row(
            label,
            max(&ours.rate(phase)),
            max(&rocks.rate(phase)),
            &rate,
            true,
        );
        row(
            &format!("{label}, client-thread CPU"),
            max(&ours.cpu_rate(phase)),
            max(&rocks.cpu_rate(phase)),
            &cpu,
            true,
        );
    }
    row(
        "full scan",
        max(&ours.mbps("scan")),
        max(&rocks.mbps("scan")),
        &mbps,
        true,
    );
    row(
        "flush + full compaction time",
        min(&ours.phase("flush_compact", WALL)),
        min(&rocks.phase("flush_compact", WALL)),
        &secs,
        false,
    );
    row(
        "checkpoint time",
        min(&ours.phase("checkpoint", WALL)),
        min(&rocks.phase("checkpoint", WALL)),
        &secs,
        false,
    );
    row(
        "size on disk (after compaction, all files but info LOGs)",
        min(&ours.stat("disk_bytes")),
        min(&rocks.stat("disk_bytes")),
        &mib,
        false,
    );
    row(
        "write amplification (put phase only, before the flush + full compaction)",
        min(&ours.stat("wamp_put_phase")),
        min(&rocks.stat("wamp_put_phase")),
        &plain,
        false,
    );
    row(
        "write amplification (puts; bytes written to storage / user bytes)",
        min(&ours.stat("wamp_put")),
        min(&rocks.stat("wamp_put")),
        &plain,
        false,
    );
    row(
        "write amplification (whole run)",
        min(&ours.stat("wamp_all")),
        min(&rocks.stat("wamp_all")),
        &plain,
        false,
    );
    for (label, phase) in [
        ("peak RSS (VmHWM) after puts", "put"),
        ("peak RSS (VmHWM) after gets", "get_hot"),
        ("peak RSS (VmHWM) whole run", "get_merged"),
    ] {
        row(
            label,
            min(&ours.phase(phase, HWM)),
            min(&rocks.phase(phase, HWM)),
            &mem,
            false,
        );
    }
    for (label, phase) in [
        (
            "peak anonymous memory (RssAnon, sampled every 10 ms) during puts",
            "put",
        ),
        (
            "peak anonymous memory (RssAnon, sampled every 10 ms) whole run",
            "get_merged",
        ),
    ] {
        let key = format!("peak_anon_mib_{phase}");
        row(
            label,
            min(&ours.stat(&key)),
            min(&rocks.stat(&key)),
            &mem,
            false,
        );
    }
    println!();
    println!("All runs (wall-clock rates; ours then RocksDB):");
    for phase in ["put", "get_uniform", "get_hot", "merge", "get_merged"] {
        println!(
            "  {phase}: ours {} | rocksdb {}",
            list(&ours.rate(phase), fmt_rate),
            list(&rocks.rate(phase), fmt_rate)
        );
    }
    println!(
        "  scan MB/s: ours {} | rocksdb {}",
        list(&ours.mbps("scan"), |x| format!("{x:.0}")),
        list(&rocks.mbps("scan"), |x| format!("{x:.0}"))
    );
    println!(
        "  process CPU s (put phase, background threads included): ours {} | rocksdb {}",
        list(&ours.phase("put", PROCESS_CPU), |x| format!("{x:.2}")),
        list(&rocks.phase("put", PROCESS_CPU), |x| format!("{x:.2}"))
    );
    println!(
        "  our engine-counted write amplification (flush + compaction bytes / user bytes): put phase {} | puts {} | whole run {}",
        list(&ours.stat("wamp_put_phase_engine"), |x| format!("{x:.2}")),
        list(&ours.stat("wamp_put_engine"), |x| format!("{x:.2}")),
        list(&ours.stat("wamp_all_engine"), |x| format!("{x:.2}"))
    );
    println!(
        "  write stall s (puts | puts through merges): ours {} | {} ; rocksdb {} | {}",
        list(&ours.stat("stall_secs_put"), |x| format!("{x:.2}")),
        list(&ours.stat("stall_secs_through_merge"), |x| format!(
            "{x:.2}"
        )),
        list(&rocks.stat("stall_secs_put"), |x| format!("{x:.2}")),
        list(&rocks.stat("stall_secs_through_merge"), |x| format!(
            "{x:.2}"
        ))
    );
    println!(
        "  sst bytes: ours {} | rocksdb {}",
        list(&ours.stat("sst_bytes"), |x| format!("{x:.0}")),
        list(&rocks.stat("sst_bytes"), |x| format!("{x:.0}"))
    );
    if let Some(r) = ours.runs.first() {
        println!(
            "our options: {}",
            r.stats.get("options").cloned().unwrap_or_default()
        );
    }
    if let Some(r) = rocks.runs.first() {
        println!(
            "RocksDB options: {}",
            r.stats.get("options").cloned().unwrap_or_default()
        );
    }
    load("at end");
}

/// mimalloc as the global allocator (a dev-dependency): see design/architecture.md,
/// "Allocator".
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
