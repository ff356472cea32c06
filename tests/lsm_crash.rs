//! Crash test: a child process writing with the WAL and sync on is SIGKILLed at random points; after
//! reopening, every acknowledged write is there, and nothing else except possibly the one write that was in
//! flight. `KEYED_STATE_CRASH_ITERS` sets the number of kills (default 3).

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use keyed_state::lsm::batch::WriteBatch;
use keyed_state::lsm::db::Db;
use keyed_state::lsm::merge::ListAppendOperator;
use keyed_state::lsm::options::{Options, ReadOptions};
use keyed_state::lsm::sst::SstOptions;

const CHILD_ENV: &str = "KEYED_STATE_CRASH_CHILD_DIR";

fn opts() -> Options {
    Options {
        memtable_size: 8 << 10,
        l0_compaction_trigger: 2,
        l0_stop_writes_trigger: 8,
        num_levels: 4,
        level_base_size: 32 << 10,
        level_multiplier: 2,
        target_file_size: 8 << 10,
        sst: SstOptions {
            block_size: 512,
            ..SstOptions::default()
        },
        wal: true,
        wal_sync: true,
        merge_operator: Some(Arc::new(ListAppendOperator)),
        ..Options::default()
    }
}

fn key(i: u64) -> Vec<u8> {
    format!("k{i:08}").into_bytes()
}

fn value(i: u64) -> Vec<u8> {
    format!("value-{i}-{}", "y".repeat((i % 50) as usize)).into_bytes()
}

/// The child: writes batches forever, recording each acknowledged index in `acked`.
#[test]
fn crash_child() {
    let Some(dir) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let dir = Path::new(&dir);
    let db = Db::open(dir.join("db"), opts()).unwrap();
    let mut acked = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("acked"))
        .unwrap();
    let start = Instant::now();
    let mut i = 0u64;
    while start.elapsed() < Duration::from_secs(60) {
        let mut b = WriteBatch::new();
        b.put(&key(i), &value(i));
        b.merge(b"list", i.to_string().as_bytes());
        if i % 7 == 3 {
            // A range delete of nothing live: exercises tombstones across crashes.
            b.delete_range(b"a", b"b");
        }
        db.write(&b).unwrap();
        acked.write_all(format!("{i}\n").as_bytes()).unwrap();
        i += 1;
    }
}

fn acked_count(dir: &Path) -> u64 {
    let text = std::fs::read_to_string(dir.join("acked")).unwrap_or_default();
    // Only complete lines count; indices are consecutive from 0.
    let complete = &text[..text.rfind('\n').map_or(0, |p| p + 1)];
    let n = complete.lines().count() as u64;
    for (i, l) in complete.lines().enumerate() {
        assert_eq!(l.parse::<u64>().unwrap(), i as u64);
    }
    n
}

#[test]
fn acknowledged_writes_survive_sigkill() {
    let iters: usize = std::env::var("KEYED_STATE_CRASH_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let exe = std::env::current_exe().unwrap();
    for iter in 0..iters {
        let dir = tempfile::tempdir().unwrap();
        let mut child = Command::new(&exe)
            .args(["--exact", "crash_child", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Let it write for a random while (at least until a few writes were acknowledged).
        let wait = Duration::from_millis(rand::random_range(100..1500));
        let t = Instant::now();
        while t.elapsed() < wait
            || (acked_count(dir.path()) < 5 && t.elapsed() < Duration::from_secs(20))
        {
            std::thread::sleep(Duration::from_millis(10));
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let n = acked_count(dir.path());
        let db = Db::open(dir.path().join("db"), opts()).unwrap();
        for i in 0..n {
            assert_eq!(
                db.get(&key(i)).unwrap().map(|v| v.to_vec()),
                Some(value(i)),
                "iteration {iter}: acked write {i} of {n} lost"
            );
        }
        let mut it = db.iter(ReadOptions {
            prefix: Some(b"k".to_vec()),
            ..ReadOptions::default()
        });
        it.seek_to_first();
        let mut present = 0u64;
        while it.valid() {
            assert_eq!(
                it.key(),
                key(present).as_slice(),
                "iteration {iter}: unexpected key"
            );
            present += 1;
            it.next();
        }
        assert!(
            present == n || present == n + 1,
            "iteration {iter}: {present} present, {n} acked"
        );
        // The batch's merge operand is there exactly when its put is (atomic batches).
        let list = db
            .get(b"list")
            .unwrap()
            .map(|v| v.to_vec())
            .unwrap_or_default();
        let want: Vec<String> = (0..present).map(|i| i.to_string()).collect();
        assert_eq!(
            String::from_utf8(list).unwrap(),
            want.join(","),
            "iteration {iter}"
        );
        eprintln!(
            "iteration {iter}: {n} acked, {present} present, stats {:?}",
            db.stats().level_files
        );
    }
}
