//! The hot paths the storage seam sits under, on the real file system: WAL appends (a write with the WAL
//! on, not synced: one framed record per write), a flush (SST writer), point reads from SST blocks (through
//! the memory map) and a full scan. Prints one line per phase with the wall time and the rate.
//! `design/bench-results/2026-12-02-storage-seam/` compares it before and after the seam.
//!
//! `cargo bench --bench storage_seam -- [keys]` (default 300000).

use std::time::Instant;

use keyed_state_lsm::{Db, Options, ReadOptions};

fn key(i: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&(i.wrapping_mul(0x9E37_79B9_7F4A_7C15)).to_be_bytes());
    k[8..].copy_from_slice(&i.to_be_bytes());
    k
}

fn main() {
    let keys: u64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(300_000);
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = Options {
        wal: true,
        wal_sync: false,
        memtable_size: 256 << 20,
        auto_compaction: false,
        ..Options::default()
    };
    let db = Db::open(dir.path().join("db"), opts).expect("open");
    let value = [7u8; 100];
    let row = |name: &str, n: u64, t: Instant| {
        let s = t.elapsed().as_secs_f64();
        println!(
            "{name:<24} {n:>9} ops {:>9.1} ms {:>10.0} ops/s",
            s * 1e3,
            n as f64 / s
        );
    };
    let t = Instant::now();
    for i in 0..keys {
        db.put(&key(i), &value).expect("put");
    }
    row("put (WAL append)", keys, t);
    let t = Instant::now();
    db.flush().expect("flush");
    row("flush (SST write)", 1, t);
    let mut out = Vec::new();
    let t = Instant::now();
    let mut found = 0u64;
    for i in 0..keys {
        found += u64::from(db.get_into(&key(i), &mut out).expect("get"));
    }
    row("get (SST, mmap)", keys, t);
    assert_eq!(found, keys);
    let t = Instant::now();
    let mut it = db.iter(ReadOptions::default());
    it.seek_to_first();
    let mut n = 0u64;
    while it.valid() {
        n += it.value().len() as u64 / 100;
        it.next();
    }
    row("scan (SST, mmap)", n, t);
    assert_eq!(n, keys);
}
