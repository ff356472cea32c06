//! The heap backend's per-map representation at several map sizes: a sorted vector (`UserMap::Small`, with
//! its prefetch of the entries) against an ordered tree (`UserMap::Large`), for get and update of existing
//! entries. The evidence for `SMALL_MAX` in `src/backend/heap/user_map.rs`.
//!
//! Setup: for each size n, 2^20 / n maps of n entries (about 1M entries, far beyond the caches), 8-byte
//! big-endian user keys and 9-byte values (a `Long → Double` map's bytes); lookups go to a random map and a
//! random existing user key. Wall time per op over 2,000,000 lookups, median of 3 runs.
//!
//! Run: `cargo bench --bench heap_map_sizes`.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use keyed_state::internals::SmallBytes;
use keyed_state::internals::UserMap;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const TOTAL: usize = 1 << 20;
const LOOKUPS: usize = 2_000_000;

fn build(n: usize, small: bool) -> Vec<UserMap> {
    (0..TOTAL / n)
        .map(|m| {
            let entries: Vec<(SmallBytes, SmallBytes)> = (0..n as u64)
                .map(|k| {
                    let mut v = [1u8; 9];
                    v[1..].copy_from_slice(&((m as u64) ^ k).to_le_bytes());
                    (SmallBytes::new(&k.to_be_bytes()), SmallBytes::new(&v))
                })
                .collect();
            if small {
                UserMap::Small(entries)
            } else {
                UserMap::Large(Arc::new(entries.into_iter().collect::<BTreeMap<_, _>>()))
            }
        })
        .collect()
}

fn time(maps: &mut [UserMap], n: usize, update: bool) -> f64 {
    let mut rng = StdRng::seed_from_u64(3);
    let probes: Vec<(usize, [u8; 8])> = (0..LOOKUPS)
        .map(|_| {
            (
                rng.random_range(0..maps.len()),
                rng.random_range(0..n as u64).to_be_bytes(),
            )
        })
        .collect();
    let value = [1u8; 9];
    let t = Instant::now();
    for (m, k) in &probes {
        if update {
            black_box(maps[*m].put(k, &value));
        } else {
            black_box(maps[*m].get(k).map(|v| v.as_slice()[0]));
        }
    }
    t.elapsed().as_secs_f64() * 1e9 / LOOKUPS as f64
}

fn main() {
    println!(
        "| entries per map | vector get ns | tree get ns | vector update ns | tree update ns |"
    );
    println!("|---:|---:|---:|---:|---:|");
    for n in [4usize, 10, 16, 32, 64, 128] {
        let mut cells = Vec::new();
        for update in [false, true] {
            for small in [true, false] {
                let mut maps = build(n, small);
                let mut runs: Vec<f64> = (0..3).map(|_| time(&mut maps, n, update)).collect();
                runs.sort_by(f64::total_cmp);
                cells.push(runs[1]);
            }
        }
        println!(
            "| {n} | {:.1} | {:.1} | {:.1} | {:.1} |",
            cells[0], cells[1], cells[2], cells[3]
        );
    }
}

/// mimalloc as the global allocator (a dev-dependency), as in the other benchmarks.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
