//! Crash test of checkpoints: a child process writes rounds of a deterministic workload, checkpoints after
//! every round (two in flight at a time: round r's starts while r-1's is still uploading; every fifth is
//! aborted instead of confirmed) and is SIGKILLed at a random point. Then: the last confirmed checkpoint
//! still exists, every referenced object is present with its size and checksums, the newest completed
//! checkpoint restores to exactly the model's state at its round, and the next open of the instance
//! leaves storage holding exactly what metadata references. `KEYED_STATE_CKPT_CRASH_ITERS` sets the number
//! of kills (default 10).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use keyed_state::backend::lsm::LsmBackend;
use keyed_state::checkpoint::list_completed;
use keyed_state::checkpoint::tools::{referenced_objects, verify};
use keyed_state::checkpoint::{
    restore_lsm_temp, CheckpointOptions, CheckpointStorage, Checkpointer, PendingCheckpoint,
};
use keyed_state::keygroup::KeyGroupRange;
use keyed_state::serializer::LongSerializer;
use keyed_state::state::{KeyedStateStore, ValueStateDescriptor};

const CHILD_ENV: &str = "KEYED_STATE_CKPT_CRASH_CHILD_DIR";
/// The child's read-modify-write cache capacity in bytes (0: off).
const CACHE_ENV: &str = "KEYED_STATE_CKPT_CRASH_CHILD_CACHE";
/// The cache capacities the iterations cycle through: off, a few entries (evicting constantly), all.
const CACHES: [usize; 3] = [0, 1 << 10, 64 << 20];
const MAX_P: u32 = 16;
const KEYS: i64 = 2000;

fn config() -> keyed_state::backend::BackendConfig {
    KeyedStateStore::config_for(
        &LongSerializer,
        MAX_P,
        KeyGroupRange::new(0, MAX_P as u16 - 1),
    )
}

/// Round `r`'s writes: `Some(v)` puts, `None` deletes.
fn round(r: u64) -> impl Iterator<Item = (i64, Option<i64>)> {
    (0..KEYS).filter_map(move |k| {
        if (k as u64 + r) % 23 == 0 {
            Some((k, None))
        } else if (k as u64 * 7 + r) % 10 == 0 {
            Some((k, Some(r as i64 * 10_000 + k)))
        } else {
            None
        }
    })
}

/// The state after rounds `1..=r`.
fn model(r: u64) -> BTreeMap<i64, i64> {
    let mut m = BTreeMap::new();
    for i in 1..=r {
        for (k, v) in round(i) {
            match v {
                Some(v) => m.insert(k, v),
                None => m.remove(&k),
            };
        }
    }
    m
}

/// The child: rounds, checkpoints and confirmations until it is killed (or 60 s pass). Each confirmed id
/// is appended to `confirmed` after `notify_complete` returned.
#[test]
fn checkpoint_crash_child() {
    let Some(dir) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let dir = Path::new(&dir);
    let cfg = config();
    let cache: usize = std::env::var(CACHE_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut backend = LsmBackend::open(dir.join("db"), cfg.clone(), LsmBackend::small_options())
        .and_then(|b| b.with_rmw_cache(cache))
        .unwrap();
    // The small cache takes every write in (no doorkeeper); the large one as configured by default.
    backend.set_rmw_cache_admission(cache < 1 << 20).unwrap();
    let mut store = KeyedStateStore::new(Box::new(backend), LongSerializer).unwrap();
    let counter = store
        .register_value(ValueStateDescriptor::new("counter", LongSerializer))
        .unwrap();
    let storage = Arc::new(CheckpointStorage::local(&dir.join("root")).unwrap());
    let ck = Checkpointer::open(
        storage,
        &cfg,
        CheckpointOptions {
            retain: 2,
            ..CheckpointOptions::default()
        },
    )
    .unwrap();
    let mut confirmed = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("confirmed"))
        .unwrap();
    let finish = |id: u64, h: std::thread::JoinHandle<_>, confirmed: &mut std::fs::File| {
        let r: keyed_state::Result<_> = h.join().unwrap();
        r.unwrap();
        if id % 5 == 0 {
            ck.notify_aborted(id).unwrap();
        } else {
            ck.notify_complete(id).unwrap();
            confirmed.write_all(format!("{id}\n").as_bytes()).unwrap();
        }
    };
    let start = Instant::now();
    let mut pending: Option<(u64, std::thread::JoinHandle<_>)> = None;
    let mut r = 1u64;
    while start.elapsed() < Duration::from_secs(60) {
        for (k, v) in round(r) {
            store.set_current_key(&k).unwrap();
            let mut s = store.value(&counter).unwrap();
            match v {
                Some(v) => s.update(&v).unwrap(),
                None => s.clear().unwrap(),
            }
        }
        let p: PendingCheckpoint = store.checkpoint(&ck, r).unwrap();
        if let Some((id, h)) = pending.take() {
            finish(id, h, &mut confirmed);
        }
        pending = Some((r, std::thread::spawn(move || p.run())));
        r += 1;
    }
    if let Some((id, h)) = pending.take() {
        finish(id, h, &mut confirmed);
    }
}

fn last_confirmed(dir: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(dir.join("confirmed")).unwrap_or_default();
    let complete = &text[..text.rfind('\n').map_or(0, |p| p + 1)];
    complete.lines().last().map(|l| l.parse().unwrap())
}

#[test]
fn a_sigkill_during_checkpoints_leaves_the_last_completed_one_restorable() {
    let iters: usize = std::env::var("KEYED_STATE_CKPT_CRASH_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let exe = std::env::current_exe().unwrap();
    for iter in 0..iters {
        let dir = tempfile::tempdir().unwrap();
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "checkpoint_crash::checkpoint_crash_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, dir.path())
            .env(CACHE_ENV, CACHES[iter % CACHES.len()].to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Until a first confirmation (or 30 s), then a random while more.
        let t = Instant::now();
        while last_confirmed(dir.path()).is_none() && t.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(rand::random_range(0..1500)));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();

        let confirmed = last_confirmed(dir.path());
        let storage = Arc::new(CheckpointStorage::local(&dir.path().join("root")).unwrap());
        let completed: Vec<u64> = list_completed(&storage)
            .unwrap()
            .iter()
            .map(|m| m.checkpoint_id)
            .collect();
        if let Some(c) = confirmed {
            assert!(
                completed.contains(&c),
                "iteration {iter}: the last confirmed checkpoint {c} is gone ({completed:?})"
            );
        }
        let rep = verify(&storage, None).unwrap();
        assert!(
            rep.problems.is_empty(),
            "iteration {iter}: {:?}",
            rep.problems
        );
        let Some(&last) = completed.iter().max() else {
            assert!(confirmed.is_none());
            continue;
        };
        let (backend, _) =
            restore_lsm_temp(&storage, last, config(), LsmBackend::small_options()).unwrap();
        let mut store = KeyedStateStore::new(Box::new(backend), LongSerializer).unwrap();
        let counter = store
            .register_value(ValueStateDescriptor::new("counter", LongSerializer))
            .unwrap();
        let want = model(last);
        for k in 0..KEYS {
            store.set_current_key(&k).unwrap();
            assert_eq!(
                store.value(&counter).unwrap().get().unwrap(),
                want.get(&k).copied(),
                "iteration {iter} (cache {} bytes): checkpoint {last}, key {k}",
                CACHES[iter % CACHES.len()]
            );
        }
        assert_eq!(store.num_entries().unwrap(), want.len() as u64);

        // The next start of the instance cleans the leftovers of the killed run.
        let _again = Checkpointer::open(
            Arc::clone(&storage),
            &config(),
            CheckpointOptions::default(),
        )
        .unwrap();
        let objects: std::collections::BTreeSet<String> = storage
            .list("shared/")
            .unwrap()
            .into_iter()
            .map(|(p, _)| p)
            .collect();
        assert_eq!(
            objects,
            referenced_objects(&storage).unwrap().unwrap(),
            "iteration {iter}: leftovers after the restart"
        );
        eprintln!(
            "iteration {iter}: completed {completed:?}, last confirmed {confirmed:?}, restored {last} ({} entries)",
            want.len()
        );
    }
}
