//! What a row cache hit waits while another thread erases deleted files' rows from the same cache
//! (`RowCache::erase_files`, run by the thread that records a compaction's version change): per reader
//! thread, the wall latency of each hit (p50, p99, p99.9, max, and hits of 100 µs or more).
//!
//! `cargo bench -p keyed-state-lsm --features test-util --bench row_cache_erase_readers` (release). For each
//! capacity in `KS_RCE_MB` (default `64,512`), each layout and each reader count in `KS_RCE_READERS`
//! (default `1,2`), fills a fresh row cache with `KS_RCE_HOT` hot rows (default 20,000; owner 1, file 0)
//! and then as many rows as it holds of 10-byte keys and 100-byte values over `KS_RCE_FILES` files (default
//! 64; owner 0): `own` fills one file after another (each file's rows in segments of their own), `spread`
//! round-robin (every file's rows in every segment: an erase reads and compacts every segment). The readers
//! then hit random hot rows: first `KS_RCE_IDLE_MS` (default 500) alone (`idle`), then while one thread
//! erases `KS_RCE_ERASES` files (default 16) one after another from a second cache filled the same way
//! (`erasing another cache`: the same work competing for the cores and memory, no lock shared), then from
//! theirs (`erasing`). Per reader and phase: hits, hits per millisecond of the phase, latency quantiles and
//! the lookups of 100 µs and of 1 ms or more (all lookups: "hits" counts them), and those that did not hit
//! (none before lookups went without the cache while an erase's step holds their shard; each is a file
//! read in an engine). Also prints each erase's wall time (median, max). Latencies include the machine's
//! scheduling: with more threads than free cores a reader is preempted for whole time slices; the second
//! phase shows how much of the third is that.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use keyed_state_lsm::internals::RowCacheProbe;

#[path = "support/cpu_keys.rs"]
#[allow(dead_code)]
mod cpu_keys;
use cpu_keys::{env_list, env_u64, mix, spread_key as key};

/// The `q`-quantile of sorted `v`.
fn quantile(v: &[u32], q: f64) -> u32 {
    let i = ((v.len() as f64 * q) as usize).min(v.len().saturating_sub(1));
    v.get(i).copied().unwrap_or(0)
}

/// Looks random hot rows up until `stop`; returns each lookup's wall nanoseconds and how many did not
/// hit (a lookup whose shard an erase's step holds goes to the file instead of waiting).
fn read(c: &RowCacheProbe, hot: u64, seed: u64, stop: &AtomicBool) -> (Vec<u32>, usize) {
    let mut ns = Vec::with_capacity(1 << 22);
    let mut passed = 0;
    let mut g = seed;
    while !stop.load(Ordering::Relaxed) {
        g += 1;
        let k = key(1_000_000_000 + mix(g) % hot);
        let t = Instant::now();
        let hit = c.hit(1, 0, &k);
        ns.push(t.elapsed().as_nanos().min(u128::from(u32::MAX)) as u32);
        passed += usize::from(!hit);
    }
    (ns, passed)
}

fn row(
    cache: &str,
    layout: &str,
    readers: usize,
    phase: &str,
    t: usize,
    (mut ns, passed): (Vec<u32>, usize),
    ms: f64,
) {
    ns.sort_unstable();
    let slow = ns.iter().filter(|&&x| x >= 100_000).count();
    let slower = ns.iter().filter(|&&x| x >= 1_000_000).count();
    println!(
        "| {cache} | {layout} | {readers} | {phase} | {t} | {} | {:.0} | {} | {} | {} | {:.1} | {slow} | {slower} | {passed} |",
        ns.len(),
        ns.len() as f64 / ms,
        quantile(&ns, 0.5),
        quantile(&ns, 0.99),
        quantile(&ns, 0.999),
        f64::from(ns.last().copied().unwrap_or(0)) / 1e3,
    );
}

/// Fills a fresh cache of `cap` bytes: `hot` rows of owner 1 (file 0), then `rows` rows of owner 0 over
/// `files` files, one file after another (`own`) or round-robin (`spread`).
fn fill(cap: usize, hot: u64, rows: u64, files: u64, layout: &str) -> RowCacheProbe {
    let value = [7u8; 100];
    let c = RowCacheProbe::new(cap);
    for i in 0..hot {
        c.insert(1, 0, &key(1_000_000_000 + i), 1, &value);
    }
    if layout == "own" {
        for f in 0..files {
            let mut i = f;
            while i < rows {
                c.insert(0, f, &key(i), 1, &value);
                i += files;
            }
        }
    } else {
        for i in 0..rows {
            c.insert(0, i % files, &key(i), 1, &value);
        }
    }
    c
}

/// `readers` threads hit hot rows of `c` while this thread erases `erases` files from `erased` (`None`:
/// sleeps `idle`); returns each reader's latencies and each erase's wall microseconds.
fn phase(
    c: &RowCacheProbe,
    readers: usize,
    hot: u64,
    erased: Option<&RowCacheProbe>,
    erases: u64,
    idle: Duration,
    seed: u64,
) -> (Vec<(Vec<u32>, usize)>, Vec<f64>) {
    let stop = AtomicBool::new(false);
    let start = Barrier::new(readers + 1);
    let mut us = Vec::new();
    let lat = std::thread::scope(|s| {
        let hs: Vec<_> = (0..readers as u64)
            .map(|t| {
                let (stop, start) = (&stop, &start);
                s.spawn(move || {
                    start.wait();
                    read(c, hot, (t << 40) ^ seed, stop)
                })
            })
            .collect();
        start.wait();
        match erased {
            None => std::thread::sleep(idle),
            Some(e) => {
                std::thread::sleep(Duration::from_millis(20));
                for f in 0..erases {
                    let t = Instant::now();
                    e.erase_files(0, &[f]);
                    us.push(t.elapsed().as_secs_f64() * 1e6);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        stop.store(true, Ordering::Relaxed);
        hs.into_iter().map(|h| h.join().expect("reader")).collect()
    });
    (lat, us)
}

fn main() {
    let files = env_u64("KS_RCE_FILES", 64);
    let hot = env_u64("KS_RCE_HOT", 20_000);
    let erases = env_u64("KS_RCE_ERASES", 16).min(files);
    let idle = Duration::from_millis(env_u64("KS_RCE_IDLE_MS", 500));
    println!(
        "| cache | layout | readers | phase | thread | hits | hits per ms | p50 ns | p99 ns | p99.9 ns | max us | hits >= 100 us | hits >= 1 ms | not hit |\n|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    let mut erase_rows = Vec::new();
    for mb in env_list("KS_RCE_MB", "64,512") {
        let cap = mb << 20;
        let rows = (cap / 140) as u64 - hot;
        for layout in ["own", "spread"] {
            for readers in env_list("KS_RCE_READERS", "1,2") {
                let c = fill(cap, hot, rows, files, layout);
                let other = fill(cap, hot, rows, files, layout);
                let cache = format!("{mb} MiB");
                let phases = [
                    ("idle", None),
                    ("erasing another cache", Some(&other)),
                    ("erasing", Some(&c)),
                ];
                for (k, (name, erased)) in phases.into_iter().enumerate() {
                    let wall = Instant::now();
                    let (lat, mut us) =
                        phase(&c, readers, hot, erased, erases, idle, (k as u64) << 36);
                    let ms = wall.elapsed().as_secs_f64() * 1e3;
                    for (t, ns) in lat.into_iter().enumerate() {
                        row(&cache, layout, readers, name, t, ns, ms);
                    }
                    if erased.is_some() {
                        us.sort_by(f64::total_cmp);
                        erase_rows.push(format!(
                            "| {cache} | {layout} | {readers} | {name} | {} | {:.0} | {:.0} |",
                            us.len(),
                            us.get(us.len() / 2).copied().unwrap_or(0.0),
                            us.last().copied().unwrap_or(0.0)
                        ));
                    }
                }
            }
        }
    }
    println!("\n| cache | layout | readers | phase | erases | median erase us | max erase us |\n|---|---|---:|---|---:|---:|---:|");
    for r in erase_rows {
        println!("{r}");
    }
}
