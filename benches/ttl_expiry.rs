//! The expiring workload: `BENCH_KEYS` keys (default 10,000,000) written once each over a run of that many
//! milliseconds of an injected clock (key `i` at t = i ms), with a TTL of a tenth of the run, on the LSM and
//! (with `--features rocksdb`) RocksDB backends, each with its TTL compaction filter. At the end only the
//! last tenth is live; the table compares the on-disk size then (memtables flushed, background work
//! settled, no forced compaction) with the size of the live data alone (the live entries written into a fresh backend of the
//! same kind and fully compacted), and once more after one forced full compaction.
//!
//! ```text
//! cargo build --release --features rocksdb --bench ttl_expiry   # then run target/release/deps/ttl_expiry-*
//! ```
//!
//! Environment: `BENCH_KEYS` (default 10000000), `BENCH_KINDS` (comma-separated: lsm,rocksdb; default all
//! built), `BENCH_REPS` (rounds, default 1, backends alternate within a round).
//!
//! Setup: `LongSerializer` keys (max parallelism 128, every key group on one instance), `ValueState` of
//! 100-byte values (50 pseudo-random bytes, 50 repeated), `StateTtlConfig::new(keys / 10 ms)` with Flink's
//! defaults (compaction filter reading the clock every 1,000 entries); the LSM backend's default options,
//! RocksDB with Flink's benchmark options (64 MiB memtables, 256 MiB L1, LZ4). Disk size is every file in
//! the backend's directory except RocksDB's info logs.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use keyed_state::backend::lsm::LsmBackend;
use keyed_state::backend::EngineHandle;
use keyed_state::keygroup::KeyGroupRange;
use keyed_state::serializer::{BytesSerializer, LongSerializer};
use keyed_state::state::{KeyedStateStore, StateTtlConfig, ValueStateDescriptor};
use keyed_state::ttl::ManualClock;

type Store = KeyedStateStore<LongSerializer>;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.replace('_', "").parse().ok())
        .unwrap_or(default)
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// splitmix64: the value bytes of key `i`.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn value(i: u64, out: &mut Vec<u8>) {
    out.clear();
    let mut s = mix(i);
    while out.len() < 48 {
        s = mix(s);
        out.extend_from_slice(&s.to_le_bytes());
    }
    out.extend_from_slice(&(s as u16).to_le_bytes());
    out.resize(100, b'v');
}

/// Bytes of every file under `dir` (recursively), RocksDB's `LOG*` info logs excluded.
fn dir_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with("LOG") {
                continue;
            }
            match e.metadata() {
                Ok(m) if m.is_dir() => total += dir_bytes(&e.path()),
                Ok(m) => total += m.len(),
                Err(_) => {}
            }
        }
    }
    total
}

/// A backend under test: the store, its directory and a way to force a full compaction.
struct Under {
    store: Store,
    dir: PathBuf,
    wait: Box<dyn EngineHandle>,
    compact: Box<dyn Fn() -> keyed_state::Result<()>>,
    flush: Box<dyn Fn() -> keyed_state::Result<()>>,
    /// What the engine says about its TTL cleanup (LSM: compactions and files dropped whole).
    note: Box<dyn Fn() -> String>,
}

fn open(kind: &str) -> keyed_state::Result<Option<Under>> {
    let cfg = Store::config_for(&LongSerializer, 128, KeyGroupRange::all(128));
    Ok(Some(match kind {
        "lsm" => {
            let b = LsmBackend::temp(cfg)?;
            let engine = b.engine();
            let dir = b.path().to_path_buf();
            let (e2, e3, e4) = (engine.clone(), engine.clone(), engine.clone());
            Under {
                store: KeyedStateStore::new(Box::new(b), LongSerializer)?,
                dir,
                wait: Box::new(engine),
                compact: Box::new(move || e2.compact_all()),
                flush: Box::new(move || e3.flush()),
                note: {
                    let e = e4;
                    Box::new(move || {
                        let st = e.stats();
                        format!(
                            "{} compactions, {} expired files dropped unread",
                            st.compactions, st.expired_files_dropped
                        )
                    })
                },
            }
        }
        #[cfg(feature = "rocksdb")]
        "rocksdb" => {
            let b =
                keyed_state::backend::rocksdb::RocksDbBackend::temporary(cfg, Default::default())?;
            let engine = b.engine();
            let dir = b.path().to_path_buf();
            let (e2, e3) = (engine.clone(), engine.clone());
            Under {
                store: KeyedStateStore::new(Box::new(b), LongSerializer)?,
                dir,
                wait: Box::new(engine),
                compact: Box::new(move || e2.compact_all()),
                flush: Box::new(move || e3.flush_all()),
                note: Box::new(String::new),
            }
        }
        _ => return Ok(None),
    }))
}

fn main() -> keyed_state::Result<()> {
    let keys = env("BENCH_KEYS", 10_000_000).max(10);
    let reps = env("BENCH_REPS", 1).max(1) as usize;
    let ttl = keys / 10;
    let default_kinds = if cfg!(feature = "rocksdb") {
        "lsm,rocksdb"
    } else {
        "lsm"
    };
    let kinds = std::env::var("BENCH_KINDS").unwrap_or_else(|_| default_kinds.into());
    let kinds: Vec<&str> = kinds.split(',').collect();
    println!(
        "ttl_expiry: {keys} keys, key i written at t = i ms, ttl {ttl} ms, 100-byte values; load at start {}",
        loadavg()
    );
    println!();
    println!("| round | backend | write ops/s | entries at end | disk at end MiB | live data MiB | end / live | after full compaction MiB | compacted / live | engine | load |");
    println!("|---:|---|---:|---:|---:|---:|---:|---:|---:|---|---|");
    let mut buf = Vec::with_capacity(100);
    for round in 0..reps {
        for ki in 0..kinds.len() {
            let kind = kinds[(ki + round) % kinds.len()];
            let Some(mut u) = open(kind)? else {
                eprintln!("unknown or not built backend {kind}");
                continue;
            };
            let clock = ManualClock::new(0);
            u.store.set_ttl_time_provider(clock.clone());
            let config = StateTtlConfig::new(ttl);
            let h = u.store.register_value(
                ValueStateDescriptor::new("v", BytesSerializer).with_ttl(config.clone()),
            )?;
            let t0 = Instant::now();
            for i in 0..keys {
                clock.set(i as i64);
                u.store.set_current_key(&(i as i64))?;
                value(i, &mut buf);
                u.store.value(&h)?.update(&buf)?;
            }
            let write = keys as f64 / t0.elapsed().as_secs_f64();
            clock.set(keys as i64);
            (u.flush)()?;
            u.wait.wait_for_background_work()?;
            let end = dir_bytes(&u.dir);
            let note = (u.note)();
            let entries = u.store.num_entries()?;
            (u.compact)()?;
            u.wait.wait_for_background_work()?;
            let compacted = dir_bytes(&u.dir);
            drop(u);

            // The live data alone: keys with i + ttl > keys, in a fresh backend of the same kind.
            let Some(mut live) = open(kind)? else {
                continue;
            };
            let live_clock = ManualClock::new(0);
            live.store
                .set_ttl_time_provider(Arc::clone(&live_clock) as _);
            let h = live
                .store
                .register_value(ValueStateDescriptor::new("v", BytesSerializer).with_ttl(config))?;
            for i in keys - ttl + 1..keys {
                live_clock.set(i as i64);
                live.store.set_current_key(&(i as i64))?;
                value(i, &mut buf);
                live.store.value(&h)?.update(&buf)?;
            }
            (live.compact)()?;
            live.wait.wait_for_background_work()?;
            let live_bytes = dir_bytes(&live.dir);
            drop(live);
            let mib = |b: u64| b as f64 / (1 << 20) as f64;
            println!(
                "| {round} | {kind} | {write:.0} | {entries} | {:.1} | {:.1} | {:.2} | {:.1} | {:.2} | {note} | {} |",
                mib(end),
                mib(live_bytes),
                end as f64 / live_bytes as f64,
                mib(compacted),
                compacted as f64 / live_bytes as f64,
                loadavg()
            );
        }
    }
    Ok(())
}
