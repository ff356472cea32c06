//! The latency of the read-modify-write cache's hash-table growth steps (`src/backend/lsm_cache/slot_table.rs`:
//! the table doubles at 13/16 full, and each later insertion or probe moves at least 16 old buckets over).
//!
//! `cargo bench --bench rmw_cache_growth` (release). Drives a cache directly (`internals::RmwCacheProbe`:
//! the LSM backend's probe, admission and dirty write, no engine): puts `KS_RMW_KEYS` distinct keys
//! (default 4,000,000; 10-byte keys, 8-byte values) into a cache large enough to take them all, timing each
//! put, then as many puts of random held keys (updates in place: the steady state). Prints per-put
//! latency percentiles (ns, wall, `Instant` around each put) for the puts made while a growth was moving
//! entries (or that started one), the other puts of the fill, and the steady state; then one line per
//! growth of at least 64k buckets (with the minor page faults of its first put and of the whole growth,
//! `getrusage`: the table's fresh pages, and the slots' and dirty log's 4 KiB pages the growth's puts
//! reach, as any put's); and the timer's own cost. `KS_RMW_ROUNDS` (default 1) repeats it.

use std::time::Instant;

use keyed_state::internals::RmwCacheProbe;

#[path = "support/knobs.rs"]
mod knobs;
use knobs::{env_u64, mix};

fn key(i: u64) -> [u8; 10] {
    let mut k = [0u8; 10];
    k[..2].copy_from_slice(&((mix(i) % 128) as u16).to_be_bytes());
    k[2..].copy_from_slice(&mix(i ^ 0xABCD).to_be_bytes());
    k
}

/// `(p50, p99, p99.9, max)` of `ns` (sorted in place).
fn percentiles(ns: &mut [u32]) -> (u32, u32, u32, u32) {
    if ns.is_empty() {
        return (0, 0, 0, 0);
    }
    ns.sort_unstable();
    let at = |q: f64| ns[((ns.len() as f64 * q) as usize).min(ns.len() - 1)];
    (at(0.5), at(0.99), at(0.999), ns[ns.len() - 1])
}

fn row(label: &str, ns: &mut [u32]) {
    let n = ns.len();
    let (p50, p99, p999, max) = percentiles(ns);
    println!("| {label} | {n} | {p50} | {p99} | {p999} | {max} |");
}

fn elapsed_ns(t: Instant) -> u32 {
    u32::try_from(t.elapsed().as_nanos()).unwrap_or(u32::MAX)
}

/// Minor page faults of this thread so far.
fn minor_faults() -> i64 {
    // SAFETY: an all-zero `rusage` is a valid value of the plain C struct `getrusage` fills.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage; RUSAGE_THREAD is supported on Linux.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    ru.ru_minflt
}

/// One growth: the table's bytes after it started, the latencies of its puts (the first started it), and
/// the minor page faults of its first put and of the whole growth.
struct Growth {
    bytes: usize,
    puts: Vec<u32>,
    first_faults: i64,
    faults: i64,
}

fn round(keys: u64) {
    // 10 + 8 bytes and the entry's 96 of overhead each, with room to spare: every key is taken in.
    let mut c = RmwCacheProbe::new(keys as usize * 256);
    let value = 7u64.to_le_bytes();
    let (mut growing, mut quiet) = (Vec::new(), Vec::with_capacity(keys as usize));
    let mut growths: Vec<Growth> = Vec::new();
    let mut was_growing = false;
    for i in 0..keys {
        let k = key(i);
        let bytes = c.table_bytes();
        // This put will start a growth (the table is at 13/16 full): its page faults are counted.
        let starts = !c.table_growing() && (c.entries() + 1) * 16 > bytes / 8 * 13;
        let faults_before = if starts { minor_faults() } else { 0 };
        let t = Instant::now();
        let taken = c.put(&k, &value);
        let ns = elapsed_ns(t);
        let first_faults = if starts {
            minor_faults() - faults_before
        } else {
            0
        };
        assert!(taken, "key {i} not taken in");
        let started = c.table_bytes() > bytes && c.table_growing();
        if started {
            growths.push(Growth {
                bytes: c.table_bytes(),
                puts: Vec::new(),
                first_faults,
                faults: faults_before,
            });
        } else if was_growing && !c.table_growing() {
            // The growth just ended: its faults, from before its first put to after its last.
            if let Some(g) = growths.last_mut() {
                g.faults = minor_faults() - g.faults;
            }
        }
        was_growing = c.table_growing();
        if started || c.table_growing() {
            growing.push(ns);
            if let Some(g) = growths.last_mut() {
                g.puts.push(ns);
            }
        } else {
            quiet.push(ns);
        }
    }
    if was_growing {
        // The last growth is still under way: its faults so far.
        if let Some(g) = growths.last_mut() {
            g.faults = minor_faults() - g.faults;
        }
    }
    assert_eq!(c.entries() as u64, keys);
    let mut steady = Vec::with_capacity(keys as usize);
    for i in 0..keys {
        let k = key(mix(i ^ 0x5151) % keys);
        let t = Instant::now();
        c.put(&k, &value);
        steady.push(elapsed_ns(t));
    }
    let mut timer: Vec<u32> = (0..keys.min(1_000_000))
        .map(|_| elapsed_ns(Instant::now()))
        .collect();
    println!("| puts | n | p50 ns | p99 ns | p99.9 ns | max ns |\n|---|---:|---:|---:|---:|---:|");
    row("fill, a growth under way (or started)", &mut growing);
    row("fill, no growth under way", &mut quiet);
    row("steady: updates of held keys", &mut steady);
    row("(the timer alone)", &mut timer);
    println!(
        "\n| growth: table after (old + new buckets) | puts it spanned | first put ns | first put's minor faults | the growth's minor faults | p50 ns | p99 ns | max ns |\n|---|---:|---:|---:|---:|---:|---:|---:|"
    );
    for g in growths.iter_mut().filter(|g| g.bytes >= 3 * 8 * 65_536) {
        let first = g.puts.first().copied().unwrap_or(0);
        let n = g.puts.len();
        let (p50, p99, _, max) = percentiles(&mut g.puts);
        println!(
            "| {:.1} MiB | {n} | {first} | {} | {} | {p50} | {p99} | {max} |",
            g.bytes as f64 / (1 << 20) as f64,
            g.first_faults,
            g.faults
        );
    }
}

fn main() {
    let keys = env_u64("KS_RMW_KEYS", 4_000_000);
    for r in 0..env_u64("KS_RMW_ROUNDS", 1) {
        println!("\n## round {r}: {keys} keys");
        round(keys);
    }
}
