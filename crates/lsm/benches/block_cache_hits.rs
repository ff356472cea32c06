//! The block cache's hit path: point reads of keys whose (LZ4) blocks are all in the block cache.
//!
//! `cargo bench -p keyed-state-lsm --bench block_cache_hits` (release). Loads `KS_BCH_KEYS` keys (default
//! 200,000; 10-byte keys, 100-byte values that LZ4 compresses, so that every block read goes through the
//! block cache) into one compacted level with a 64 MiB block cache, reads every key once, then times
//! `KS_BCH_ROUNDS` rounds (default 5) of `KS_BCH_GETS` random gets (default 2,000,000) and prints, per round,
//! the thread's CPU nanoseconds per get (`CLOCK_THREAD_CPUTIME_ID`) and the wall time, then the median.
//! Every get is a block cache hit (the bench checks the cache did not grow).

use std::sync::Arc;
use std::time::Instant;

use keyed_state_lsm::{Compression, Db, Options, SstOptions};

#[path = "support/cpu_keys.rs"]
#[allow(dead_code)]
mod cpu_keys;
use cpu_keys::{env_u64, key, mix, thread_cpu_ns};

fn main() {
    let n = env_u64("KS_BCH_KEYS", 200_000);
    let gets = env_u64("KS_BCH_GETS", 2_000_000);
    let rounds = env_u64("KS_BCH_ROUNDS", 5);
    let dir = tempfile::tempdir().expect("temp dir");
    let opts = Options {
        block_cache_size: 64 << 20,
        sst: SstOptions {
            block_size: 4096,
            compression: Compression::Lz4,
            ..SstOptions::default()
        },
        ..Options::default()
    };
    let db = Arc::new(Db::open(dir.path(), opts).expect("open"));
    let mut value = [0u8; 100];
    for i in 0..n {
        value[..8].copy_from_slice(&mix(i).to_le_bytes());
        db.put(&key(i), &value).expect("put");
    }
    db.compact_all().expect("compact");
    for i in 0..n {
        assert!(db.get(&key(i)).expect("get").is_some());
    }
    let cached = db.stats().block_cache_usage;
    let mut per_get = Vec::new();
    for round in 0..rounds {
        let (t, c) = (Instant::now(), thread_cpu_ns());
        let mut found = 0u64;
        for g in 0..gets {
            let i = mix(g ^ (round << 40)) % n;
            found += u64::from(db.get(&key(i)).expect("get").is_some());
        }
        let cpu = (thread_cpu_ns() - c) as f64 / gets as f64;
        assert_eq!(found, gets);
        println!(
            "round {round}: {cpu:.1} CPU ns per get, {:.1} wall ns per get",
            t.elapsed().as_nanos() as f64 / gets as f64
        );
        per_get.push(cpu);
    }
    assert_eq!(db.stats().block_cache_usage, cached, "every get must hit");
    per_get.sort_by(f64::total_cmp);
    println!(
        "block_cache_hits: {n} keys, {gets} gets per round, median {:.1} CPU ns per get (min {:.1}, max {:.1})",
        per_get[per_get.len() / 2],
        per_get[0],
        per_get[per_get.len() - 1]
    );
}
