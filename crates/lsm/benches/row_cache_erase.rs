//! The cost of erasing deleted files' rows from a full row cache (`RowCache::erase_files`, called when the
//! engine deletes an SST that had a row cached), against the block cache's `erase_file` on a full block
//! cache.
//!
//! `cargo bench -p keyed-state-lsm --features test-util --bench row_cache_erase` (release). For each
//! capacity in `KS_RCE_MB` (default `64,512`), fills a row cache with rows of 10-byte keys and 100-byte
//! values spread round-robin over `KS_RCE_FILES` files (default 64), then erases the files one by one,
//! refilling the erased file's rows after each (so every erase runs on a full cache), and prints per-erase
//! wall microseconds (median, max) and rows erased; then eight files in one pass (what one compaction's
//! deleted files cost when erased together), a pass for a file with no cached rows (the engine skips it: its
//! file never had a row cached), the same two with every file's rows interleaved in every segment (hot keys
//! read across files: the worst case, a pass compacting every segment), and the block cache.

use std::sync::Arc;
use std::time::Instant;

use keyed_state_lsm::internals::{BlockCache, RowCacheProbe};

#[path = "support/cpu_keys.rs"]
#[allow(dead_code)]
mod cpu_keys;
use cpu_keys::{env_list, spread_key as key};

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Fills file `file`'s share of `rows` rows (every `files`-th row).
fn fill_file(c: &RowCacheProbe, file: u64, files: u64, rows: u64, value: &[u8]) {
    let mut i = file;
    while i < rows {
        c.insert(0, file, &key(i), 1, value);
        i += files;
    }
}

fn main() {
    let files = env_list("KS_RCE_FILES", "64")[0] as u64;
    let value = [7u8; 100];
    println!(
        "| cache | rows held | erase | erases | rows per erase | median us | max us |\n|---|---:|---|---:|---:|---:|---:|"
    );
    for mb in env_list("KS_RCE_MB", "64,512") {
        let cap = mb << 20;
        let c = RowCacheProbe::new(cap);
        // As many rows as it holds (about 134 bytes charged each): filled one file after another, a
        // fuller fill would evict the first files' rows.
        let rows = (cap / 140) as u64;
        for f in 0..files {
            fill_file(&c, f, files, rows, &value);
        }
        let (_, held) = c.usage_and_rows();
        let (mut us, mut erased) = (Vec::new(), 0usize);
        for f in 0..files {
            let before = c.usage_and_rows().1;
            let t = Instant::now();
            c.erase_files(0, &[f]);
            us.push(t.elapsed().as_secs_f64() * 1e6);
            erased += before - c.usage_and_rows().1;
            fill_file(&c, f, files, rows, &value);
        }
        let max = us.iter().copied().fold(0.0, f64::max);
        println!(
            "| row {mb} MiB | {held} | erase_file (file's rows) | {files} | {} | {:.0} | {:.0} |",
            erased / files as usize,
            median(&mut us),
            max
        );
        let (mut us, mut erased) = (Vec::new(), 0usize);
        for batch in (0..files).collect::<Vec<_>>().chunks(8) {
            let before = c.usage_and_rows().1;
            let t = Instant::now();
            c.erase_files(0, batch);
            us.push(t.elapsed().as_secs_f64() * 1e6);
            erased += before - c.usage_and_rows().1;
            for &f in batch {
                fill_file(&c, f, files, rows, &value);
            }
        }
        let max = us.iter().copied().fold(0.0, f64::max);
        println!(
            "| row {mb} MiB | {held} | erase_files (8 files' rows, one pass) | {} | {} | {:.0} | {:.0} |",
            us.len(),
            erased / us.len().max(1),
            median(&mut us),
            max
        );
        let mut us: Vec<f64> = (0..files)
            .map(|f| {
                let t = Instant::now();
                c.erase_files(0, &[1_000_000 + f]);
                t.elapsed().as_secs_f64() * 1e6
            })
            .collect();
        let max = us.iter().copied().fold(0.0, f64::max);
        println!(
            "| row {mb} MiB | {held} | erase_files (no rows cached; skipped by the engine) | {files} | 0 | {:.0} | {:.0} |",
            median(&mut us),
            max
        );
        // Rows of every file in every segment (hot keys read across files): a file's erase reads and
        // compacts every segment. Refilled whole before each erase, so four erases only.
        let fill_all = |c: &RowCacheProbe| {
            for i in 0..rows {
                c.insert(0, i % files, &key(i), 1, &value);
            }
        };
        let mixed = RowCacheProbe::new(cap);
        let (mut us, mut erased) = (Vec::new(), 0usize);
        for f in 0..4 {
            fill_all(&mixed);
            let before = mixed.usage_and_rows().1;
            let t = Instant::now();
            mixed.erase_files(0, &[f]);
            us.push(t.elapsed().as_secs_f64() * 1e6);
            erased += before - mixed.usage_and_rows().1;
        }
        let max = us.iter().copied().fold(0.0, f64::max);
        println!(
            "| row {mb} MiB | {held} | erase_files (file's rows, files interleaved in every segment) | 4 | {} | {:.0} | {:.0} |",
            erased / 4,
            median(&mut us),
            max
        );
        let mut us: Vec<f64> = (0..files)
            .map(|f| {
                let t = Instant::now();
                mixed.erase_files(0, &[1_000_000 + f]);
                t.elapsed().as_secs_f64() * 1e6
            })
            .collect();
        let max = us.iter().copied().fold(0.0, f64::max);
        println!(
            "| row {mb} MiB | {held} | erase_files (no rows cached, files interleaved) | {files} | 0 | {:.0} | {:.0} |",
            median(&mut us),
            max
        );
        drop(mixed);
        // The block cache of the same capacity, full of 4 KiB blocks over the same files.
        let b = BlockCache::new(cap);
        let blocks = (cap / 4160) as u64;
        let fill = |f: u64| {
            let mut i = f;
            while i < blocks {
                b.insert(f, i * 4096, Arc::new(vec![1u8; 4096]));
                i += files;
            }
        };
        (0..files).for_each(fill);
        let mut us = Vec::new();
        for f in 0..files {
            let t = Instant::now();
            b.erase_file(f);
            us.push(t.elapsed().as_secs_f64() * 1e6);
            fill(f);
        }
        let max = us.iter().copied().fold(0.0, f64::max);
        println!(
            "| block {mb} MiB | {blocks} blocks | erase_file (file's blocks) | {files} | {} | {:.0} | {:.0} |",
            blocks / files,
            median(&mut us),
            max
        );
    }
}
