//! `keyed-state stats DIR`: an LSM directory described read-only, and typed errors naming the path.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};
use std::time::SystemTime;

use keyed_state_lsm::{Db, Options};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_keyed-state"))
        .args(args)
        .output()
        .expect("run keyed-state")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Every file of `dir`: name, size, modification time.
fn listing(dir: &Path) -> BTreeMap<String, (u64, SystemTime)> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let m = e.metadata().unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                (m.len(), m.modified().unwrap()),
            )
        })
        .collect()
}

/// A key of state `state` (2-byte id, as the LSM backend writes them).
fn key(state: u16, i: u32) -> Vec<u8> {
    let mut k = state.to_be_bytes().to_vec();
    k.extend_from_slice(&i.to_be_bytes());
    k
}

/// A database with two states compacted below L0 and one more flush in L0, left open.
fn database(dir: &Path) -> Db {
    let db = Db::open(
        dir,
        Options {
            partition_prefix_len: 2,
            wal: true,
            wal_sync: true,
            ..Options::default()
        },
    )
    .unwrap();
    for state in 0..2u16 {
        for i in 0..1000 {
            db.put(&key(state, i), &[7u8; 40]).unwrap();
        }
    }
    db.flush().unwrap();
    db.compact_all().unwrap();
    for i in 0..10 {
        db.put(&key(1, 5000 + i), b"late").unwrap();
    }
    db.flush().unwrap();
    db
}

#[test]
fn stats_describes_an_open_database_without_changing_its_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    let db = database(&dir);
    // Unflushed writes stay in the write-ahead log.
    db.put(&key(0, 9999), b"in the log").unwrap();
    // A flush returns once its file is installed; the engine removes the flushed memtable's log just after.
    // Wait for that removal (only the live log left), so that the listings below compare `stats` alone.
    let settle = std::time::Instant::now();
    while listing(&dir).keys().filter(|n| n.ends_with(".log")).count() > 1
        && settle.elapsed() < std::time::Duration::from_secs(10)
    {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let before = listing(&dir);
    let engine = db.stats();

    // The database is held open by this process: `stats` (another process) reads it without its lock.
    let o = run(&["stats", dir.to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let text = run(&["stats", dir.to_str().unwrap()]);
    assert!(text.status.success(), "{}", stderr(&text));
    assert_eq!(listing(&dir), before, "stats changed the directory");

    let levels = j["levels"].as_array().unwrap();
    let files: Vec<u64> = levels
        .iter()
        .map(|l| l["files"].as_u64().unwrap())
        .collect();
    let engine_files: Vec<u64> = engine.level_files.iter().map(|&n| n as u64).collect();
    assert_eq!(files, engine_files[..files.len()], "{j:#}");
    assert!(engine_files[files.len()..].iter().all(|&n| n == 0));
    assert_eq!(levels[0]["sorted_runs"], 1);
    assert_eq!(j["estimated_keys"], engine.estimated_sst_entries);
    assert_eq!(j["estimated_keys"], 2010);
    // Below L0 no file spans two states: each state's range is its keys.
    let states = j["states"].as_array().unwrap();
    assert_eq!(states.len(), 2, "{j:#}");
    assert_eq!(states[0]["state_id"], 0);
    assert_eq!(states[0]["entries"], 1000);
    assert_eq!(states[0]["smallest_key"], "000000000000");
    assert_eq!(states[0]["largest_key"], "0000000003e7");
    assert_eq!(states[1]["smallest_key"], "000100000000");
    assert_eq!(states[1]["largest_key"], "000100001391");
    let wal_bytes: u64 = j["wals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["bytes"].as_u64().unwrap())
        .sum();
    assert!(wal_bytes > 0, "the unflushed write is in a log: {j:#}");
    assert!(j["manifest"]["bytes"].as_u64().unwrap() > 0);
    let sst: u64 = j["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["bytes"].as_u64().unwrap())
        .sum();
    assert_eq!(j["sst_bytes"], sst);
    assert_eq!(
        j["total_bytes"].as_u64().unwrap(),
        sst + wal_bytes + j["manifest"]["bytes"].as_u64().unwrap()
    );

    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    assert!(text.contains("estimated keys\t2010\n"), "{text}");
    assert!(text.contains("L0\t1\t"), "{text}");
    assert!(
        text.contains("\n1\t") && text.contains("000100001391"),
        "{text}"
    );
    drop(db);
}

#[test]
fn stats_of_a_missing_directory_names_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("nowhere");
    let o = run(&["stats", dir.to_str().unwrap()]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("no such directory"), "{e}");
    assert!(e.contains(dir.to_str().unwrap()), "{e}");
    assert!(!dir.exists(), "stats created the directory");
}

#[test]
fn stats_of_a_directory_without_engine_files_says_it_is_not_an_lsm_directory() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("notes.txt"), b"x").unwrap();
    let o = run(&["stats", tmp.path().to_str().unwrap()]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("is not an LSM directory"), "{e}");
    assert!(e.contains(tmp.path().to_str().unwrap()), "{e}");
    assert_eq!(listing(tmp.path()).len(), 1, "stats created files");
    let file = tmp.path().join("notes.txt");
    let o = run(&["stats", file.to_str().unwrap()]);
    assert!(stderr(&o).contains("is not a directory"), "{}", stderr(&o));
}

#[test]
fn stats_of_a_database_without_current_names_its_engine_files() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    database(&dir).close().unwrap();
    std::fs::remove_file(dir.join("CURRENT")).unwrap();
    let before = listing(&dir);
    let o = run(&["stats", dir.to_str().unwrap()]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("has no CURRENT"), "{e}");
    assert!(e.contains(dir.to_str().unwrap()), "{e}");
    assert!(e.contains(".sst"), "{e}");
    assert_eq!(listing(&dir), before);
}

#[test]
fn stats_of_a_damaged_manifest_names_the_manifest() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    database(&dir).close().unwrap();
    let current = std::fs::read_to_string(dir.join("CURRENT")).unwrap();
    let manifest = dir.join(current.trim());
    let mut bytes = std::fs::read(&manifest).unwrap();
    // The file header (a damaged tail could read as a torn last record, which is not an error).
    bytes[0] ^= 0xFF;
    std::fs::write(&manifest, &bytes).unwrap();
    let o = run(&["stats", dir.to_str().unwrap()]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains(current.trim()), "{e}");
}
