//! Timer service throughput on the heap, LSM and (with `--features rocksdb`) RocksDB backends: register 1,000,000 event-time timers across 500,000
//! keys (two per key, in one namespace), then fire them all by advancing the watermark in 100 steps. Prints a
//! table of ops/s per phase (register, fire) and backend.
//!
//! ```text
//! cargo bench --bench timers
//! cargo build --release --features rocksdb --bench timers   # then run the binary: heap, LSM and RocksDB
//! ```
//!
//! Environment: `BENCH_TIMERS` (timers, default 1000000), `BENCH_KEYS` (keys, default 500000), `BENCH_STEPS`
//! (watermark steps, default 100), `BENCH_KINDS` (comma-separated: heap,lsm,rocksdb; default all built), `BENCH_REPS` (rounds, default 1:
//! the backends run in turn within each round, rotated per round).
//!
//! Setup: `LongSerializer` keys, `LongSerializer` namespace (a window id), max parallelism 128 with every key
//! group on one instance, timestamps uniform in [0, 1,000,000) from a fixed seed; every registration calls
//! `set_current_key`; firing counts one op per timer fired (the callback does nothing else).

use std::time::Instant;

use keyed_state::backend::heap::HeapBackend;
use keyed_state::backend::lsm::LsmBackend;
use keyed_state::backend::StateBackend;
use keyed_state::keygroup::KeyGroupRange;
use keyed_state::serializer::LongSerializer;
use keyed_state::state::KeyedStateStore;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

fn main() -> keyed_state::Result<()> {
    let timers = env("BENCH_TIMERS", 1_000_000);
    let keys = env("BENCH_KEYS", 500_000).max(1);
    let steps = env("BENCH_STEPS", 100).max(1);
    let default_kinds = if cfg!(feature = "rocksdb") {
        "heap,lsm,rocksdb"
    } else {
        "heap,lsm"
    };
    let kinds = std::env::var("BENCH_KINDS").unwrap_or_else(|_| default_kinds.into());
    let kinds: Vec<&str> = kinds.split(',').collect();
    let reps = env("BENCH_REPS", 1).max(1) as usize;
    let mut rng = StdRng::seed_from_u64(7);
    let span = 1_000_000i64;
    let work: Vec<(i64, i64)> = (0..timers)
        .map(|i| ((i % keys) as i64, rng.random_range(0..span)))
        .collect();
    println!("timers: {timers} timers over {keys} keys, fired in {steps} watermark steps");
    println!();
    println!("| round | backend | register ops/s | fire ops/s | fired | load |");
    println!("|---:|---|---:|---:|---:|---|");
    for round in 0..reps {
        for ki in 0..kinds.len() {
            let kind = kinds[(ki + round) % kinds.len()];
            let cfg = KeyedStateStore::config_for(&LongSerializer, 128, KeyGroupRange::all(128));
            let backend: Box<dyn StateBackend> = match kind {
                "heap" => Box::new(HeapBackend::new(cfg)?),
                "lsm" => Box::new(LsmBackend::temp(cfg)?),
                #[cfg(feature = "rocksdb")]
                "rocksdb" => Box::new(keyed_state::backend::rocksdb::RocksDbBackend::temporary(
                    cfg,
                    Default::default(),
                )?),
                other => {
                    eprintln!("unknown backend {other}");
                    continue;
                }
            };
            let mut s = KeyedStateStore::new(backend, LongSerializer)?;
            let svc = s.register_timer_service("user-timers", LongSerializer)?;
            let t0 = Instant::now();
            for (key, ts) in &work {
                s.set_current_key(key)?;
                s.register_event_time_timer(&svc, &0, *ts)?;
            }
            let register = t0.elapsed().as_secs_f64();
            let t1 = Instant::now();
            let mut fired = 0u64;
            for step in 1..=steps {
                let wm = span * step as i64 / steps as i64;
                fired += s.advance_watermark(&svc, wm, |_, _| Ok(()))?;
            }
            let fire = t1.elapsed().as_secs_f64();
            println!(
                "| {round} | {kind} | {:.0} | {:.0} | {fired} | {} |",
                timers as f64 / register,
                fired as f64 / fire,
                loadavg()
            );
        }
    }
    Ok(())
}
