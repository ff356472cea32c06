//! A fixed memtable workload for instruction counts (`valgrind --tool=callgrind`): 20,000 puts into one
//! memtable (no WAL, no flush), then a point read of each key. Used to check that the loom seam
//! (`crates/lsm/src/sync.rs`) leaves normal builds' code unchanged: the counts of two builds must be equal.
//!
//! ```sh
//! cargo build --release --example memtable_inserts
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null target/release/examples/memtable_inserts
//! ```

use keyed_state_lsm::{Db, Options};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let db = Db::open(
        dir.path(),
        Options {
            wal: false,
            memtable_size: 64 << 20,
            auto_compaction: false,
            ..Options::default()
        },
    )?;
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut keys = Vec::with_capacity(20_000);
    for _ in 0..20_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        keys.push(x.to_be_bytes());
    }
    for k in &keys {
        db.put(k, b"value-bytes")?;
    }
    let mut found = 0usize;
    for k in &keys {
        found += usize::from(db.get(k)?.is_some());
    }
    println!("{found} keys found");
    db.close()?;
    Ok(())
}
