//! The row cache's paths on an engine on its own: hits, misses (with the admissions of keys missed twice)
//! and `multi_get` batches of keys the row cache does not hold, CPU per key.
//!
//! `cargo bench -p keyed-state-lsm --bench row_cache_lookups` (release). Loads `KS_RCL_KEYS` keys (default
//! 1,000,000; 10-byte keys, 100 incompressible bytes, so blocks are stored raw and read from the map and the
//! row cache has the whole 64 MiB `block_cache_size`) into one compacted level, then runs `KS_RCL_ROUNDS`
//! rounds (default 5): each reads the first `KS_RCL_HOT` keys (default 300,000, which the row cache holds)
//! twice in a row to admit them (untimed), then times three phases of `KS_RCL_OPS` keys each (default
//! 1,000,000): gets of random hot keys (row cache hits), gets of random other keys (misses: the file is
//! read, keys missed twice are admitted and evict others) and `multi_get` of 32 random other keys. Prints,
//! per round and phase, the thread's CPU nanoseconds per key (`CLOCK_THREAD_CPUTIME_ID`), the share of the
//! hot gets the row cache answered and the rows it holds, then each phase's median. Then, `KS_RCL_ROUNDS`
//! times, `KS_RCL_OPS` hot gets from one thread and from each of two threads at once on the same engine
//! (one row cache shared by two readers): CPU nanoseconds per get of each thread, and wall nanoseconds per
//! get of all the threads together (with fewer free cores than threads, the wall time shows the machine,
//! not the cache).

use std::sync::Arc;

use keyed_state_lsm::{Compression, Db, Options, SstOptions};

#[path = "support/cpu_keys.rs"]
#[allow(dead_code)]
mod cpu_keys;
use cpu_keys::{env_u64, key, mix, thread_cpu_ns};

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn main() {
    let n = env_u64("KS_RCL_KEYS", 1_000_000);
    let hot = env_u64("KS_RCL_HOT", 300_000).min(n / 2);
    let ops = env_u64("KS_RCL_OPS", 1_000_000);
    let rounds = env_u64("KS_RCL_ROUNDS", 5);
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
        for (j, c) in value.chunks_mut(8).enumerate() {
            let w = mix(i * 16 + j as u64).to_le_bytes();
            c.copy_from_slice(&w[..c.len()]);
        }
        db.put(&key(i), &value).expect("put");
    }
    db.compact_all().expect("compact");
    // Each hot key read twice in a row: admitted (its doorkeeper slot was just written), and again before
    // every round's hits (the misses of the round before evicted some).
    let admit_hot = || {
        for i in 0..hot {
            for _ in 0..2 {
                assert!(db.get(&key(i)).expect("get").is_some());
            }
        }
    };
    let cold = n - hot;
    let (mut hits, mut misses, mut batches) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        let seed = round << 40;
        admit_hot();
        let before = db.stats().row_cache_hits;
        let c = thread_cpu_ns();
        for g in 0..ops {
            let i = mix(g ^ seed) % hot;
            assert!(db.get(&key(i)).expect("get").is_some());
        }
        let hit = (thread_cpu_ns() - c) as f64 / ops as f64;
        let hit_rate = (db.stats().row_cache_hits - before) as f64 / ops as f64;
        let c = thread_cpu_ns();
        for g in 0..ops {
            let i = hot + mix(g ^ seed ^ (1 << 39)) % cold;
            assert!(db.get(&key(i)).expect("get").is_some());
        }
        let miss = (thread_cpu_ns() - c) as f64 / ops as f64;
        let c = thread_cpu_ns();
        let mut keys = [[0u8; 10]; 32];
        for b in 0..ops / 32 {
            for (j, k) in keys.iter_mut().enumerate() {
                *k = key(hot + mix((b * 32 + j as u64) ^ seed ^ (1 << 38)) % cold);
            }
            let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
            let got = db.multi_get(&refs).expect("multi_get");
            assert!(got.iter().all(Option::is_some));
        }
        let batch = (thread_cpu_ns() - c) as f64 / (ops / 32 * 32) as f64;
        let s = db.stats();
        println!(
            "round {round}: hit {hit:.0} CPU ns/get ({:.1} % hits), miss {miss:.0} CPU ns/get, multi_get of 32 {batch:.0} CPU ns/key; row cache {} rows, {:.1} MiB",
            hit_rate * 100.0,
            s.row_cache_rows,
            s.row_cache_usage as f64 / f64::from(1 << 20)
        );
        hits.push(hit);
        misses.push(miss);
        batches.push(batch);
    }
    println!(
        "row_cache_lookups: {n} keys, {hot} hot, {ops} keys per phase and round; median CPU ns: hit {:.0}, miss {:.0}, multi_get of 32 {:.0} per key",
        median(&mut hits),
        median(&mut misses),
        median(&mut batches)
    );
    // Hot hits from one thread, then from two at once on the same engine (one row cache, as the
    // operators of one process share it), alternated over the rounds.
    let mut shared: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for round in 0..rounds {
        for threads in [1u64, 2] {
            admit_hot();
            let wall = std::time::Instant::now();
            let cpu: Vec<f64> = std::thread::scope(|s| {
                let hs: Vec<_> = (0..threads)
                    .map(|t| {
                        let db = &db;
                        s.spawn(move || {
                            let seed = (round << 40) ^ (t << 36) ^ (1 << 35);
                            let c = thread_cpu_ns();
                            for g in 0..ops {
                                let i = mix(g ^ seed) % hot;
                                assert!(db.get(&key(i)).expect("get").is_some());
                            }
                            (thread_cpu_ns() - c) as f64 / ops as f64
                        })
                    })
                    .collect();
                hs.into_iter().map(|h| h.join().expect("reader")).collect()
            });
            let wall = wall.elapsed().as_secs_f64() * 1e9 / (ops * threads) as f64;
            let per: Vec<String> = cpu.iter().map(|c| format!("{c:.0}")).collect();
            println!(
                "shared round {round}: {threads} thread(s) of hot hits, CPU ns/get per thread {}, wall ns per get of all threads {wall:.0}",
                per.join(" / ")
            );
            if let Some(v) = shared.get_mut(threads as usize - 1) {
                v.extend(cpu);
            }
        }
    }
    let [one, two] = &mut shared;
    println!(
        "row_cache_lookups shared: median CPU ns per hot hit, one thread {:.0}, each of two threads {:.0}",
        median(one),
        median(two)
    );
}
