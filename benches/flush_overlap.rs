//! How much a flush running beside the writer costs new-key inserts (the situation of the state benchmark's
//! listAdd sample, which starts with a full memtable): 300,000 new keys put into an engine whose 64 MiB
//! memtable is nearly full (the switch comes after ≈ 40k puts and the flush runs beside the rest), against the
//! same puts after the memtable was flushed first (a fresh memtable, no flush beside them).
//!
//! `cargo bench --bench flush_overlap` (alternates the two cases, 3 times each).

use std::time::Instant;

use keyed_state_lsm::{Db, Options, SstOptions};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A 12-byte value-state-shaped key (state 0, key group 0 or 1, a scrambled i64, the void namespace).
fn key(i: u64) -> [u8; 12] {
    let k = i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut out = [0u8; 12];
    out[2] = (k >> 63) as u8;
    out[3..11].copy_from_slice(&k.to_be_bytes());
    out
}

fn run(flush_first: bool) -> Result<f64, Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let opts = Options {
        memtable_size: 64 << 20,
        sst: SstOptions {
            bloom_bits_per_key: 0,
            ..SstOptions::default()
        },
        ..Options::default()
    };
    let db = Db::open(dir.path(), opts)?;
    let fill = 620_000u64;
    for i in 0..fill {
        db.put(&key(i), &i.to_be_bytes())?;
    }
    db.wait_for_background_work()?;
    if flush_first {
        db.flush()?;
        db.wait_for_background_work()?;
    }
    let n = 300_000u64;
    let t = Instant::now();
    for i in fill..fill + n {
        db.put(&key(i), &i.to_be_bytes())?;
    }
    Ok(n as f64 / t.elapsed().as_secs_f64() / 1e3)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!(
        "| round | flush beside the puts, k puts/s | memtable flushed first, k puts/s | ratio |"
    );
    println!("|---:|---:|---:|---:|");
    for round in 1..=3 {
        let beside = run(false)?;
        let first = run(true)?;
        println!(
            "| {round} | {beside:.0} | {first:.0} | {:.2} |",
            beside / first
        );
    }
    Ok(())
}
