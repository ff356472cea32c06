//! Kill -9 campaign on real files: a child process runs a deterministic workload on one database — atomic
//! batches of puts, deletes, merges and range deletes with the WAL synced, flushes, compactions,
//! checkpoints and savepoints — and is SIGKILLed at a random point, then restarted on the same directory,
//! again and again. After every kill the parent reopens the database and checks it against a model:
//!
//! * it holds exactly the state after the last acknowledged batch, or after the one in flight (each batch
//!   records its step number under `last`, so the state must equal the model at that step, whole);
//! * the last completed checkpoint opens and equals the model at its step;
//! * the savepoint file reads back, checksums verified, with the model's key count at the step of the last
//!   completed savepoint or of a savepoint started after it (each replaces the file atomically, and a child
//!   killed in a savepoint step restarts past it, so several may have started since the last completed one).
//!
//! `KEYED_STATE_KILL9_ITERS` sets the number of kills (default 50); `scripts/long-checks.sh` runs 1000.
//! `KEYED_STATE_KILL9_KEEP` keeps the directory (database, checkpoints, savepoint, the child's log) when the
//! campaign fails.
//! The campaign prints the number of inconsistencies and fails if there is any.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use keyed_state::backend::heap::HeapBackend;
use keyed_state::keygroup::KeyGroupRange;
use keyed_state::savepoint::{write_savepoint, SavepointReader, WriteOptions};
use keyed_state::serializer::{LongSerializer, StringSerializer};
use keyed_state::state::{KeyedStateStore, ValueStateDescriptor};
use keyed_state_lsm::{Db, ListAppendOperator, Options, ReadOptions, SstOptions, WriteBatch};

const CHILD_ENV: &str = "KEYED_STATE_KILL9_CHILD_DIR";
/// `STEP:POINT` makes the child abort at `POINT` of step `STEP` (`before-savepoint`: after the step's batch
/// is acknowledged, before its savepoint starts; `before-savepoint-log`: after the savepoint is renamed
/// into place and its directory synced, before the `s` line is logged).
const DIE_AT_ENV: &str = "KEYED_STATE_KILL9_DIE_AT";
/// Set (to anything) to keep the campaign's directory when it finds an inconsistency; its path is printed.
const KEEP_ENV: &str = "KEYED_STATE_KILL9_KEEP";
const KEYS: u64 = 1500;
const FLUSH_EVERY: u64 = 40;
const COMPACT_EVERY: u64 = 170;
const CHECKPOINT_EVERY: u64 = 60;
const SAVEPOINT_EVERY: u64 = 90;

fn opts() -> Options {
    Options {
        memtable_size: 16 << 10,
        l0_compaction_trigger: 3,
        l0_stop_writes_trigger: 12,
        num_levels: 4,
        level_base_size: 64 << 10,
        level_multiplier: 4,
        target_file_size: 16 << 10,
        sst: SstOptions {
            block_size: 1024,
            ..SstOptions::default()
        },
        wal: true,
        wal_sync: true,
        merge_operator: Some(Arc::new(ListAppendOperator)),
        background_nice: 0,
        ..Options::default()
    }
}

fn key(k: u64) -> Vec<u8> {
    format!("k{k:06}").into_bytes()
}

/// One step's batch, as (kind, key, value): `p` put, `d` delete, `m` merge, `r` range delete `[key, value)`.
fn step_ops(s: u64) -> Vec<(char, Vec<u8>, Vec<u8>)> {
    let mut ops = vec![(
        'p',
        key(s * 7 % KEYS),
        format!("v{s}-{}", "x".repeat((s % 40) as usize)).into_bytes(),
    )];
    if s % 5 == 0 {
        ops.push(('d', key(s * 13 % KEYS), Vec::new()));
    }
    if s % 11 == 0 {
        ops.push((
            'm',
            format!("list{}", s % 4).into_bytes(),
            s.to_string().into_bytes(),
        ));
    }
    if s % 17 == 0 {
        let a = s * 3 % KEYS;
        ops.push(('r', key(a), key(a + 5)));
    }
    ops.push(('p', b"last".to_vec(), s.to_string().into_bytes()));
    ops
}

/// The model: the state after steps `0..=step`, built up incrementally.
struct Model {
    map: BTreeMap<Vec<u8>, Vec<u8>>,
    /// Steps applied (the next one to apply).
    next: u64,
}

impl Model {
    fn new() -> Self {
        Model {
            map: BTreeMap::new(),
            next: 0,
        }
    }

    fn advance_to(&mut self, step: u64) {
        while self.next <= step {
            for (kind, k, v) in step_ops(self.next) {
                match kind {
                    'p' => {
                        self.map.insert(k, v);
                    }
                    'd' => {
                        self.map.remove(&k);
                    }
                    'm' => {
                        let e = self.map.entry(k).or_default();
                        if !e.is_empty() {
                            e.push(b',');
                        }
                        e.extend_from_slice(&v);
                    }
                    _ => {
                        let doomed: Vec<Vec<u8>> = self
                            .map
                            .range(k.clone()..v.clone())
                            .map(|(k, _)| k.clone())
                            .collect();
                        for d in doomed {
                            self.map.remove(&d);
                        }
                    }
                }
            }
            self.next += 1;
        }
    }

    fn keys_with_prefix(&self, p: u8) -> usize {
        self.map.keys().filter(|k| k.first() == Some(&p)).count()
    }
}

fn contents(db: &Db) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut it = db.iter(ReadOptions::default());
    it.seek_to_first();
    let mut out = BTreeMap::new();
    while it.valid() {
        out.insert(it.key().to_vec(), it.value().to_vec());
        it.next();
    }
    it.take_status().unwrap();
    out
}

fn last_step(db: &Db) -> Option<u64> {
    db.get(b"last")
        .unwrap()
        .map(|v| String::from_utf8_lossy(&v).parse().unwrap())
}

fn ckpt_dir(dir: &Path, s: u64) -> PathBuf {
    dir.join("ckpt").join(format!("{s:08}"))
}

/// Writes a savepoint of the `k` keys of `db` (key number → value as a string) to `dir/savepoint`.
fn savepoint(db: &Db, dir: &Path) {
    let cfg = KeyedStateStore::config_for(&LongSerializer, 16, KeyGroupRange::new(0, 15));
    let mut store =
        KeyedStateStore::new(Box::new(HeapBackend::new(cfg).unwrap()), LongSerializer).unwrap();
    let v = store
        .register_value(ValueStateDescriptor::new("v", StringSerializer))
        .unwrap();
    for (k, val) in contents(db) {
        if k.first() != Some(&b'k') {
            continue;
        }
        let n: i64 = String::from_utf8_lossy(&k[1..]).parse().unwrap();
        store.set_current_key(&n).unwrap();
        store
            .value(&v)
            .unwrap()
            .update(&String::from_utf8_lossy(&val).into_owned())
            .unwrap();
    }
    let snap = store.snapshot().unwrap();
    write_savepoint(&dir.join("savepoint"), &*snap, &WriteOptions::default()).unwrap();
}

/// The child: continues the workload from the step after the one the database holds, logging its start
/// (`o S`, the first step it runs), every acknowledged step (`w S`), checkpoint (`c S`), savepoint started
/// (`S S`) and savepoint completed (`s S`), until it is killed.
///
/// A child killed after acknowledging a savepoint step but before completing its savepoint restarts at the
/// next step: that savepoint is never retried, so the file can go from one step to a savepoint 180 or more
/// steps later without the step in between ever being logged as completed.
#[test]
fn kill9_child() {
    let Some(dir) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let dir = Path::new(&dir);
    let db = Db::open(dir.join("db"), opts()).unwrap();
    let mut log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("log"))
        .unwrap();
    std::fs::create_dir_all(dir.join("ckpt")).unwrap();
    let mut s = last_step(&db).map_or(0, |l| l + 1);
    log.write_all(format!("o {s}\n").as_bytes()).unwrap();
    let die_at = std::env::var(DIE_AT_ENV).ok().and_then(|v| {
        let (step, point) = v.split_once(':')?;
        Some((step.parse::<u64>().ok()?, point.to_string()))
    });
    let die_if = |s: u64, point: &str| {
        if die_at.as_ref().is_some_and(|(d, p)| *d == s && p == point) {
            // Like SIGKILL for the files: no destructor runs, nothing buffered is flushed.
            std::process::abort();
        }
    };
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(60) {
        let mut b = WriteBatch::new();
        for (kind, k, v) in step_ops(s) {
            match kind {
                'p' => b.put(&k, &v),
                'd' => b.delete(&k),
                'm' => b.merge(&k, &v),
                _ => b.delete_range(&k, &v),
            };
        }
        db.write(&b).unwrap();
        log.write_all(format!("w {s}\n").as_bytes()).unwrap();
        if s % FLUSH_EVERY == FLUSH_EVERY - 1 {
            db.flush().unwrap();
        }
        if s % COMPACT_EVERY == COMPACT_EVERY - 1 {
            db.compact_all().unwrap();
        }
        if s % CHECKPOINT_EVERY == CHECKPOINT_EVERY - 1 {
            let target = ckpt_dir(dir, s);
            if target.exists() {
                // Left by a checkpoint killed midway at this same step in an earlier life.
                std::fs::remove_dir_all(&target).unwrap();
            }
            db.checkpoint(&target).unwrap();
            log.write_all(format!("c {s}\n").as_bytes()).unwrap();
        }
        if s % SAVEPOINT_EVERY == SAVEPOINT_EVERY - 1 {
            die_if(s, "before-savepoint");
            log.write_all(format!("S {s}\n").as_bytes()).unwrap();
            savepoint(&db, dir);
            die_if(s, "before-savepoint-log");
            log.write_all(format!("s {s}\n").as_bytes()).unwrap();
        }
        s += 1;
    }
}

/// The last complete log line of each kind.
fn last_logged(dir: &Path, kind: char) -> Option<u64> {
    let text = std::fs::read_to_string(dir.join("log")).unwrap_or_default();
    let complete = &text[..text.rfind('\n').map_or(0, |p| p + 1)];
    complete
        .lines()
        .filter_map(|l| l.strip_prefix(kind).and_then(|r| r.trim().parse().ok()))
        .next_back()
}

/// The steps the file `savepoint` may hold, given the child's log: the last completed savepoint (`s`) and
/// every savepoint started (`S`) after it, any of which may have been renamed into place before a kill.
/// (Savepoints are renamed in the order they start; a completed one replaces all started before it.)
fn savepoint_steps_possible(log: &str) -> Vec<u64> {
    let complete = &log[..log.rfind('\n').map_or(0, |p| p + 1)];
    let mut steps = Vec::new();
    for line in complete.lines() {
        if let Some(s) = line.strip_prefix("s ").and_then(|r| r.trim().parse().ok()) {
            steps = vec![s];
        } else if let Some(s) = line
            .strip_prefix("S ")
            .and_then(|r| r.trim().parse::<u64>().ok())
        {
            steps.push(s);
        }
    }
    steps
}

/// The step a savepoint file was taken at, read from its values (`v{step}-...`: the put of step `s` is the
/// value with the highest step), for diagnostics.
fn savepoint_step(path: &Path) -> Option<u64> {
    let r = SavepointReader::open(path).ok()?;
    let mut max = None;
    for block in r.key_groups() {
        r.read_key_group(block.key_group, &mut |_, _, v| {
            if let Some(i) = v.iter().position(|&b| b == b'v') {
                let digits: Vec<u8> = v[i + 1..]
                    .iter()
                    .copied()
                    .take_while(u8::is_ascii_digit)
                    .collect();
                if let Ok(n) = String::from_utf8_lossy(&digits).parse::<u64>() {
                    max = max.max(Some(n));
                }
            }
            Ok(())
        })
        .ok()?;
    }
    max
}

/// Checks the directory after a kill; returns what is wrong, if anything. `ahead` counts the kills after
/// which the savepoint file was N savepoint periods ahead of the last one logged as completed (N = 0: the
/// logged one; 1: the one in flight, renamed before its log line; 2 or more: after savepoints skipped).
fn check(
    dir: &Path,
    model: &mut Model,
    models_at: &mut BTreeMap<u64, usize>,
    ahead: &mut BTreeMap<u64, usize>,
) -> Vec<String> {
    let mut bad = Vec::new();
    let acked = last_logged(dir, 'w');
    let db = match Db::open(dir.join("db"), opts()) {
        Ok(db) => db,
        Err(e) => return vec![format!("reopen failed: {e}")],
    };
    let held = last_step(&db);
    let ok_step = match (acked, held) {
        (None, None) => true,
        (None, Some(h)) => h == 0,
        (Some(a), Some(h)) => h == a || h == a + 1,
        (Some(_), None) => false,
    };
    if !ok_step {
        bad.push(format!(
            "acknowledged step {acked:?}, database holds {held:?}"
        ));
    }
    if let Some(h) = held {
        model.advance_to(h);
        if contents(&db) != model.map {
            bad.push(format!("contents differ from the model at step {h}"));
        }
    }
    drop(db);
    if let Some(c) = last_logged(dir, 'c') {
        let mut m = Model::new();
        m.advance_to(c);
        match Db::open(ckpt_dir(dir, c), opts()) {
            Ok(db) => {
                if contents(&db) != m.map {
                    bad.push(format!("checkpoint of step {c} differs from the model"));
                }
            }
            Err(e) => bad.push(format!("checkpoint of step {c} does not open: {e}")),
        }
        // Older checkpoints are no longer checked: keep the disk lean.
        if let Ok(rd) = std::fs::read_dir(dir.join("ckpt")) {
            for e in rd.flatten() {
                let n: Option<u64> = e.file_name().to_string_lossy().parse().ok();
                if n.is_some_and(|n| n < c) {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
    }
    // Temporary files of savepoints killed midway never look complete; clear them.
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_name().to_string_lossy().starts_with(".savepoint.") {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    let steps =
        savepoint_steps_possible(&std::fs::read_to_string(dir.join("log")).unwrap_or_default());
    if !steps.is_empty() {
        let mut count_at = |step: u64| {
            *models_at.entry(step).or_insert_with(|| {
                let mut m = Model::new();
                m.advance_to(step);
                m.keys_with_prefix(b'k')
            })
        };
        let want: Vec<(u64, usize)> = steps.iter().map(|&s| (s, count_at(s))).collect();
        let path = dir.join("savepoint");
        let logged = last_logged(dir, 's');
        if logged.is_some() || path.exists() {
            match SavepointReader::open(&path).and_then(|r| r.verify()) {
                Ok(report) => {
                    let n = report.entries_per_state.iter().sum::<u64>() as usize;
                    // How many savepoint periods the file is ahead of the log's last completed one.
                    if let (Some(s), Some(h)) = (logged, savepoint_step(&path)) {
                        *ahead
                            .entry(h.saturating_sub(s) / SAVEPOINT_EVERY)
                            .or_default() += 1;
                    }
                    if !want.iter().any(|&(_, c)| c == n) {
                        bad.push(format!(
                            "savepoint: {n} entries, holds step {:?}; possible (step, entries) {want:?}",
                            savepoint_step(&path)
                        ));
                    }
                }
                Err(e) => bad.push(format!("savepoint of step {logged:?} does not verify: {e}")),
            }
        }
    }
    bad
}

/// Runs the child on `dir` until it dies at `die_at` (`STEP:POINT`).
fn run_child_until(dir: &Path, die_at: &str) {
    let status = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "kill9_campaign::kill9_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, dir)
        .env(DIE_AT_ENV, die_at)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(!status.success(), "the child should have died at {die_at}");
}

/// The sequence the campaign hits now and then: the child dies after acknowledging step 179 but before its
/// savepoint, restarts at step 180, and dies again after savepoint 269 is renamed into place but before it is
/// logged. The log's last completed savepoint is 89 while the file holds step 269; that is no inconsistency.
#[test]
fn kill9_savepoint_skipped_on_restart_then_killed_before_its_log_line_is_no_inconsistency() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    run_child_until(dir, "179:before-savepoint");
    run_child_until(dir, "269:before-savepoint-log");
    assert_eq!(last_logged(dir, 's'), Some(89));
    assert_eq!(savepoint_step(&dir.join("savepoint")), Some(269));
    let problems = check(
        dir,
        &mut Model::new(),
        &mut BTreeMap::new(),
        &mut BTreeMap::new(),
    );
    assert!(problems.is_empty(), "{problems:?}");
}

#[test]
fn kill9_campaign_loses_nothing_acknowledged_and_keeps_checkpoints_and_savepoints_whole() {
    let iters: usize = std::env::var("KEYED_STATE_KILL9_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    let exe = std::env::current_exe().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut model = Model::new();
    let mut counts = BTreeMap::new();
    let mut ahead = BTreeMap::new();
    let mut inconsistencies = Vec::new();
    let (mut max_step, mut checkpoints, mut savepoints) = (0, 0, 0);
    for iter in 0..iters {
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "kill9_campaign::kill9_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let wait = Duration::from_millis(rand::random_range(20..400));
        let before = last_logged(dir, 'w');
        let t = Instant::now();
        // Run for the random while, and at least until the child acknowledged a step of its own.
        while t.elapsed() < wait
            || (last_logged(dir, 'w') == before && t.elapsed() < Duration::from_secs(20))
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        for problem in check(dir, &mut model, &mut counts, &mut ahead) {
            inconsistencies.push(format!("kill {iter}: {problem}"));
        }
        max_step = last_logged(dir, 'w').unwrap_or(0);
        checkpoints = last_logged(dir, 'c').map_or(0, |c| (c + 1) / CHECKPOINT_EVERY);
        savepoints = last_logged(dir, 's').map_or(0, |s| (s + 1) / SAVEPOINT_EVERY);
    }
    eprintln!(
        "kill -9 campaign: {iters} kills, {} steps acknowledged, {checkpoints} checkpoints and \
         {savepoints} savepoints completed, {} inconsistencies; savepoint file ahead of the log by \
         (periods: kills) {ahead:?}",
        max_step + 1,
        inconsistencies.len()
    );
    eprintln!(
        "campaign kill9 kills={iters} steps={} checkpoints={checkpoints} savepoints={savepoints} \
         inconsistencies={}",
        max_step + 1,
        inconsistencies.len()
    );
    if !inconsistencies.is_empty() && std::env::var_os(KEEP_ENV).is_some() {
        eprintln!(
            "kill -9 campaign: directory kept at {}",
            tmp.keep().display()
        );
    }
    assert!(inconsistencies.is_empty(), "{}", inconsistencies.join("\n"));
}
