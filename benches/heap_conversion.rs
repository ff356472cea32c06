//! The worst single write while a heap table turns from packed to bytes: the latency tail of the first
//! write a packed table cannot hold (`src/backend/heap/table.rs`, `design/decisions/0002-heap-tables.md`).
//!
//! Setup as `state_backends`' list section (Flink's `ListStateBenchmark`): `LongSerializer` keys, void
//! namespace, max parallelism 2 with both key groups, 500,000 shuffled keys with a one-element list of one
//! `i64` each (about 250,000 entries per key group, packed: 9-byte keys, 8-byte values). Then
//! `HC_APPENDS` (default 600,000) `listAppend`s of the setup keys in shuffled order (each once per 500,000):
//! the first of each key group makes a 17-byte value, which the packed table cannot hold; from about the
//! 250,000th on, half of each table's entries have grown and the rest of the table is drained. Every append is timed alone, by thread CPU time
//! (clock overhead subtracted) and by wall time; per round (`HC_ROUNDS`, default 3, fresh store each) it
//! prints the worst, the 99.9th and 99th percentiles, the mean, the number of appends over 1 ms of CPU and
//! the CPU time of all the appends together.
//!
//! Run: `cargo bench --bench heap_conversion`.

#[allow(dead_code)]
#[path = "support/cpu_time.rs"]
mod cpu_time;

use std::time::{Duration, Instant};

use keyed_state::backend::heap::HeapBackend;
use keyed_state::keygroup::KeyGroupRange;
use keyed_state::serializer::LongSerializer;
use keyed_state::state::{KeyedStateStore, ListStateDescriptor};
use keyed_state::Result;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

const SETUP_KEYS: i64 = 500_000;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn round(round: usize, appends: usize) -> Result<()> {
    let mut rng = StdRng::seed_from_u64(42 + round as u64);
    let mut keys: Vec<i64> = (0..SETUP_KEYS).collect();
    keys.shuffle(&mut rng);
    let config = KeyedStateStore::config_for(&LongSerializer, 2, KeyGroupRange::all(2));
    let mut store = KeyedStateStore::new(Box::new(HeapBackend::new(config)?), LongSerializer)?;
    let h = store.register_list(ListStateDescriptor::new("list", LongSerializer))?;
    for k in &keys {
        store.set_current_key(k)?;
        store.list(&h)?.add(&rng.random::<i64>())?;
    }
    keys.shuffle(&mut rng);
    let overhead = cpu_time::clock_overhead();
    let mut cpu = Vec::with_capacity(appends);
    let mut wall = Vec::with_capacity(appends);
    for i in 0..appends {
        let k = keys[i % keys.len()];
        let v: i64 = rng.random();
        let (w0, c0) = (Instant::now(), cpu_time::now());
        store.set_current_key(&k)?;
        store.list(&h)?.add(&v)?;
        let c = (cpu_time::now() - c0).saturating_sub(overhead);
        wall.push(w0.elapsed());
        cpu.push(c);
    }
    let total: Duration = cpu.iter().sum();
    let over_1ms = cpu
        .iter()
        .filter(|c| **c > Duration::from_millis(1))
        .count();
    let worst_at = cpu
        .iter()
        .enumerate()
        .max_by_key(|(_, c)| **c)
        .map_or(0, |(i, _)| i);
    cpu.sort_unstable();
    wall.sort_unstable();
    let mean_us = total.as_secs_f64() * 1e6 / appends as f64;
    println!(
        "| {round} | {:.3} (append #{worst_at}) | {:.3} | {:.3} | {mean_us:.2} | {over_1ms} | {:.1} | {:.3} |",
        ms(pct(&cpu, 1.0)),
        ms(pct(&cpu, 0.999)),
        ms(pct(&cpu, 0.99)),
        ms(total),
        ms(pct(&wall, 1.0)),
    );
    Ok(())
}

fn main() -> Result<()> {
    let rounds = env_usize("HC_ROUNDS", 3);
    let appends = env_usize("HC_APPENDS", 600_000);
    println!(
        "heap listAppend across the conversion: {SETUP_KEYS} keys, {appends} appends, per round"
    );
    println!(
        "| round | worst CPU ms | p99.9 CPU ms | p99 CPU ms | mean CPU µs | appends > 1 ms CPU | total CPU ms | worst wall ms |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for r in 0..rounds {
        round(r, appends)?;
    }
    Ok(())
}
