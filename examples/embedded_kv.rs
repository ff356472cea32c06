//! The LSM engine embedded as a sorted key-value store: point writes and batches, merge operands, reads
//! and ordered scans, a snapshot that later writes do not disturb, range deletes, flush and compaction, and a
//! reopen that replays the write-ahead log.
//!
//! `cargo run --release --example embedded_kv`

use std::sync::Arc;

use keyed_state_lsm::{Db, ListAppendOperator, Options, ReadOptions, WriteBatch};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let options = Options {
        wal: true, // log every write, so a reopen finds what was not flushed yet
        merge_operator: Some(Arc::new(ListAppendOperator)), // merge operands joined with ','
        ..Options::default()
    };
    let db = Db::open(dir.path(), options.clone())?;

    // Point writes, and a batch that is applied atomically.
    db.put(b"user/0001/name", b"ada")?;
    let mut batch = WriteBatch::new();
    for i in 2..=5u32 {
        batch.put(
            format!("user/{i:04}/name").as_bytes(),
            format!("user-{i}").as_bytes(),
        );
    }
    db.write(&batch)?;

    // Merge operands append without reading the value.
    for page in ["/home", "/cart", "/checkout"] {
        db.merge(b"user/0001/pages", page.as_bytes())?;
    }
    let pages = db.get(b"user/0001/pages")?.ok_or("no pages")?;
    assert_eq!(&pages[..], b"/home,/cart,/checkout");

    // A snapshot sees the store as it was; later writes do not disturb it.
    let snapshot = db.snapshot();
    db.delete_range(b"user/0003", b"user/0005")?; // users 3 and 4
    db.put(b"user/0001/name", b"ada lovelace")?;

    let names =
        |rows: &[(String, String)]| rows.iter().filter(|(k, _)| k.ends_with("/name")).count();
    let now = scan(
        &db,
        ReadOptions {
            prefix: Some(b"user/".to_vec()),
            ..ReadOptions::default()
        },
    )?;
    let then = scan(
        &db,
        ReadOptions {
            snapshot: Some(&snapshot),
            ..ReadOptions::default()
        },
    )?;
    assert_eq!((names(&now), names(&then)), (3, 5));
    println!("now: {now:?}");
    assert_eq!(
        first_from(&db, b"user/0003")?.as_deref(),
        Some("user/0005/name")
    );
    drop(snapshot);

    // Flush the memtable to an SST file and compact; reads are unchanged.
    db.flush()?;
    db.compact_all()?;
    assert_eq!(
        &db.get(b"user/0001/name")?.ok_or("no name")?[..],
        b"ada lovelace"
    );
    db.put(b"user/0006/name", b"written after the flush")?;
    println!("{:?}", db.stats().level_files);
    db.close()?;

    // Reopen: the SST files and the write-ahead log bring everything back.
    let db = Db::open(dir.path(), options)?;
    assert_eq!(
        &db.get(b"user/0006/name")?.ok_or("lost a write")?[..],
        b"written after the flush"
    );
    assert!(db.get(b"user/0003/name")?.is_none());
    println!(
        "reopened with {} keys",
        scan(&db, ReadOptions::default())?.len()
    );
    db.close()?;
    Ok(())
}

/// Every (key, value) an iterator with `ro` yields, in key order: the iterator over owned entries, which ends
/// with the error that stopped it, if any.
fn scan(db: &Db, ro: ReadOptions<'_>) -> Result<Vec<(String, String)>, Box<dyn std::error::Error>> {
    let mut out = Vec::new();
    for entry in db.iter(ro) {
        let (key, value) = entry?;
        out.push((
            String::from_utf8_lossy(&key).into_owned(),
            String::from_utf8_lossy(&value).into_owned(),
        ));
    }
    Ok(out)
}

/// The first key at or after `from`, read with the zero-copy cursor: positioned by a seek, it lends its key
/// and value without copying them.
fn first_from(db: &Db, from: &[u8]) -> Result<Option<String>, Box<dyn std::error::Error>> {
    let mut it = db.iter(ReadOptions::default());
    it.seek(from);
    let found = it
        .valid()
        .then(|| String::from_utf8_lossy(it.key()).into_owned());
    it.take_status()?;
    Ok(found)
}
