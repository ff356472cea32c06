//! Nexmark on the timely host, every backend in the same run: per query and backend, a job of
//! `KS_NEXMARK_EVENTS` events (default 10 000 000) on 2 processes × 1 worker launched on loopback.
//!
//! For each it prints: events/s, events/s per core and events per CPU-second (Nexmark's "throughput/cores":
//! events over the CPU seconds the job's processes used), the state's checkpointed bytes, checkpoint sync,
//! async and confirmation times, whether the result and the final state (as unified savepoints) equal the
//! other backends', then two more jobs, each with one process killed (SIGKILL) at half of the failure-free
//! run's time (or later, once a checkpoint is complete): one restarted at 2 processes (recovery), one at 3
//! (rescale 2 → 3). Recovery is measured from the restart to the first committed output of an epoch after
//! the restored checkpoint; the restore alone as the processes report it (milliseconds, files, bytes); and the
//! machine's 1-minute load average when the row was printed.
//!
//! `cargo bench -p keyed-state-timely --bench nexmark [--features rocksdb]`; `KS_NEXMARK_EVENTS` (a
//! comma-separated list runs each size), `KS_NEXMARK_QUERIES` (e.g. `q5,q7`), `KS_NEXMARK_BACKENDS`,
//! `KS_NEXMARK_DIR` (where jobs write; default the temporary directory).

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_keyed-state-timely");

#[derive(Debug, Default, Clone)]
struct Line {
    state_bytes: u64,
    checkpoints: u64,
    sync_avg: f64,
    sync_max: f64,
    async_avg: f64,
    async_max: f64,
    confirm_avg: f64,
    restore_ms: f64,
    restored_files: u64,
    restored_bytes: u64,
}

/// The number after `key` in `s` (up to the next space, comma or semicolon).
fn after(s: &str, key: &str) -> Option<f64> {
    let i = s.find(key)? + key.len();
    let rest = s[i..].trim_start();
    let end = rest.find([' ', ',', ';']).unwrap_or(rest.len());
    rest[..end].parse().ok()
}

fn parse(line: &str) -> Option<Line> {
    if !line.contains("events/s") {
        return None;
    }
    Some(Line {
        state_bytes: after(line, "(peak")? as u64,
        checkpoints: line
            .split(" checkpoints:")
            .next()?
            .rsplit(' ')
            .next()?
            .parse()
            .ok()?,
        sync_avg: after(line, "sync avg")?,
        sync_max: after(line, "sync avg")
            .and_then(|_| after(&line[line.find("sync avg")?..], "max"))?,
        async_avg: after(line, "async avg")?,
        async_max: after(&line[line.find("async avg")?..], "max")?,
        confirm_avg: after(line, "confirmation avg")?,
        restore_ms: after(line, " in")
            .filter(|_| line.contains("restored"))
            .unwrap_or(0.0),
        restored_files: line
            .find(" ms, ")
            .filter(|_| line.contains("restored"))
            .and_then(|i| after(&line[i..], "ms,"))
            .unwrap_or(0.0) as u64,
        restored_bytes: line
            .find(" files, ")
            .filter(|_| line.contains("restored"))
            .and_then(|i| after(&line[i..], "files,"))
            .unwrap_or(0.0) as u64,
    })
}

struct Job {
    query: String,
    backend: String,
    events: u64,
    root: PathBuf,
    out: PathBuf,
}

impl Job {
    fn new(base: &Path, query: &str, backend: &str, events: u64, tag: &str) -> Job {
        let dir = base.join(format!("{query}-{backend}-{events}-{tag}"));
        let _ = std::fs::remove_dir_all(&dir);
        Job {
            query: query.into(),
            backend: backend.into(),
            events,
            root: dir.join("checkpoints"),
            out: dir.join("out"),
        }
    }

    fn args(&self, restore: bool) -> Vec<String> {
        let mut a: Vec<String> = vec![
            "--query".into(),
            self.query.clone(),
            "--events".into(),
            self.events.to_string(),
            "--seed".into(),
            "1".into(),
            "--backend".into(),
            self.backend.clone(),
            "--checkpoint-dir".into(),
            self.root.display().to_string(),
            "--checkpoint-every-epochs".into(),
            "10".into(),
            "--out".into(),
            self.out.display().to_string(),
        ];
        if restore {
            a.push("--restore".into());
        }
        a
    }

    fn launch(&self, processes: usize, restore: bool) -> Child {
        Command::new(BIN)
            .arg("launch")
            .args(self.args(restore))
            .args(["--processes", &processes.to_string(), "--workers", "1"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting launch")
    }

    /// Runs to the end; the processes' end-of-run lines, the wall time and the CPU seconds the job's
    /// processes used (`launch` and its children).
    fn run(&self, processes: usize, restore: bool) -> (Vec<Line>, Duration, f64) {
        let cpu = children_cpu_seconds();
        let t = Instant::now();
        let o = self
            .launch(processes, restore)
            .wait_with_output()
            .expect("waiting for launch");
        let d = t.elapsed();
        assert!(o.status.success(), "{} {} failed", self.query, self.backend);
        let lines = String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter_map(parse)
            .collect();
        (lines, d, children_cpu_seconds() - cpu)
    }

    fn committed(&self) -> Vec<String> {
        let mut v = Vec::new();
        for e in std::fs::read_dir(&self.out).into_iter().flatten().flatten() {
            if !e.file_name().to_string_lossy().starts_with('.') {
                v.push(e.file_name().to_string_lossy().into_owned());
            }
        }
        v
    }

    /// A hash of every operator's final state as unified savepoints (the same bytes on every backend for
    /// the same state), and their total size.
    fn state_digest(&self) -> (u64, u64) {
        let Ok(env) = keyed_state::env::StateEnv::new(keyed_state::env::StateEnvOptions::default())
        else {
            return (0, 0);
        };
        let Ok(root) =
            keyed_state_timely::checkpoints::JobRoot::open(&self.root.display().to_string(), &env)
        else {
            return (0, 0);
        };
        let Ok(Some(rec)) = root.latest() else {
            return (0, 0);
        };
        let mut h = DefaultHasher::new();
        let mut size = 0;
        for op in &rec.operators {
            let f = self.root.with_file_name(format!("{op}.savepoint"));
            match keyed_state_timely::checkpoints::operator_savepoint(&root, op, rec.id, &f) {
                Ok(n) => size += n,
                Err(e) => panic!("savepoint of {op}: {e}"),
            }
            std::fs::read(&f).unwrap_or_default().hash(&mut h);
        }
        (h.finish(), size)
    }

    fn digest(&self) -> (u64, usize) {
        let mut rows = Vec::new();
        for f in self.committed() {
            let text = std::fs::read_to_string(self.out.join(f)).unwrap_or_default();
            rows.extend(text.lines().map(str::to_string));
        }
        rows.sort();
        let mut h = DefaultHasher::new();
        rows.hash(&mut h);
        (h.finish(), rows.len())
    }

    /// The newest complete checkpoint's epoch, from the job's records in the (local) root.
    fn recorded_epoch(&self) -> Option<u64> {
        let mut ids: Vec<u64> = std::fs::read_dir(self.root.join("job"))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let n = e.file_name().to_string_lossy().into_owned();
                n.strip_prefix("chk-")?.strip_suffix(".json")?.parse().ok()
            })
            .collect();
        ids.sort_unstable();
        ids.last().map(|id| id - 1)
    }

    /// The checkpoint epochs of the committed files.
    fn committed_epochs(&self) -> Vec<u64> {
        self.committed()
            .iter()
            .filter_map(|n| n.strip_prefix("part-")?.split('-').next()?.parse().ok())
            .collect()
    }

    /// Kills one process of the job once `after` has passed and a checkpoint is complete, restarts it at
    /// `processes`: the time from the restart to the first committed output of an epoch after the restored
    /// checkpoint, and the restarted processes' lines.
    fn kill_and_restart(&self, after: Duration, processes: usize) -> (Duration, Vec<Line>) {
        let mut first = self.launch(2, false);
        let t0 = Instant::now();
        while t0.elapsed() < after || self.recorded_epoch().is_none() {
            if let Ok(Some(_)) = first.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        // Killing `launch` alone would leave its children: kill one child, as a crash would.
        let children = child_pids(first.id());
        if let Some(pid) = children.first() {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
        let _ = first.wait();
        let restored = self.recorded_epoch();
        let t = Instant::now();
        let mut restart = self.launch(processes, true);
        let mut recovery = None;
        loop {
            if recovery.is_none()
                && self
                    .committed_epochs()
                    .iter()
                    .any(|&c| restored.is_none_or(|r| c > r))
            {
                recovery = Some(t.elapsed());
            }
            if let Ok(Some(_)) = restart.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        let o = restart.wait_with_output().expect("waiting for the restart");
        let lines = String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter_map(parse)
            .collect();
        (recovery.unwrap_or_else(|| t.elapsed()), lines)
    }
}

/// User and system CPU seconds of this process's children that have ended and been waited for, and of
/// theirs (`cutime` and `cstime` of /proc/self/stat, in clock ticks of 1/100 s).
fn children_cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    // cutime and cstime are fields 16 and 17 of the line, 14 and 15 after the name and state.
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(13) + ticks(14)) / 100.0
}

fn child_pids(parent: u32) -> Vec<u32> {
    let text = std::fs::read_to_string(format!("/proc/{parent}/task/{parent}/children"))
        .unwrap_or_default();
    text.split_whitespace()
        .filter_map(|s| s.parse().ok())
        .collect()
}

/// The machine's 1-minute load average (the machine is shared), as /proc/loadavg says.
fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".into())
}

fn list(var: &str, default: &str) -> Vec<String> {
    std::env::var(var)
        .unwrap_or_else(|_| default.to_string())
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

fn main() {
    let sizes: Vec<u64> = list("KS_NEXMARK_EVENTS", "10000000")
        .iter()
        .filter_map(|s| s.parse().ok())
        .collect();
    let queries = list("KS_NEXMARK_QUERIES", "q3,q5,q7,q8,q11");
    let default_backends = if cfg!(feature = "rocksdb") {
        "heap,lsm,rocksdb"
    } else {
        "heap,lsm"
    };
    let backends = list("KS_NEXMARK_BACKENDS", default_backends);
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let base = std::env::var("KS_NEXMARK_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| tmp.path().to_path_buf());
    let cores = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(2);
    println!("nexmark on the timely host: 2 processes x 1 worker on loopback, {cores} cores, checkpoint every 10 epochs, seed 1");
    println!();
    println!("| events | query | backend | events/s | events/s per core | events per CPU-second | peak state bytes | checkpoints | sync avg / max ms | async avg / max ms | confirm avg ms | result (rows; final state as savepoints) | recovery ms (restore ms, files, bytes) | rescale 2→3 ms (restore ms, files, bytes) | load (1 min) |");
    println!(
        "| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |"
    );
    for &events in &sizes {
        for q in &queries {
            let mut first_digest = None;
            for b in &backends {
                let job = Job::new(&base, q, b, events, "full");
                let (lines, wall, cpu) = job.run(2, false);
                let (digest, rows) = job.digest();
                let (sdigest, sbytes) = job.state_digest();
                let same = match first_digest {
                    None => {
                        first_digest = Some((digest, sdigest));
                        format!("{rows} rows; savepoint {sbytes} B")
                    }
                    Some((d, s)) => format!(
                        "{rows} rows {}; savepoint {sbytes} B {}",
                        if d == digest { "same" } else { "DIFFERENT" },
                        if s == sdigest { "same" } else { "DIFFERENT" }
                    ),
                };
                let _ = std::fs::remove_dir_all(job.out.parent().unwrap_or(&job.out));
                let eps = events as f64 / wall.as_secs_f64();
                let state: u64 = lines.iter().map(|l| l.state_bytes).sum();
                let n = lines.len().max(1) as f64;
                let avg = |f: fn(&Line) -> f64| lines.iter().map(f).sum::<f64>() / n;
                let max = |f: fn(&Line) -> f64| lines.iter().map(f).fold(0.0, f64::max);
                let half = wall / 2;
                let rec = Job::new(&base, q, b, events, "recovery");
                let (rec_t, rec_lines) = rec.kill_and_restart(half, 2);
                let _ = std::fs::remove_dir_all(rec.out.parent().unwrap_or(&rec.out));
                let res = Job::new(&base, q, b, events, "rescale");
                let (res_t, res_lines) = res.kill_and_restart(half, 3);
                let _ = std::fs::remove_dir_all(res.out.parent().unwrap_or(&res.out));
                let restore = |ls: &[Line]| {
                    (
                        ls.iter().map(|l| l.restore_ms).fold(0.0, f64::max),
                        ls.iter().map(|l| l.restored_files).sum::<u64>(),
                        ls.iter().map(|l| l.restored_bytes).sum::<u64>(),
                    )
                };
                let (rm, rf, rb) = restore(&rec_lines);
                let (sm, sf, sb) = restore(&res_lines);
                println!(
                    "| {events} | {q} | {b} | {eps:.0} | {:.0} | {:.0} | {state} | {} | {:.1} / {:.1} | {:.0} / {:.0} | {:.0} | {same} | {} ({rm:.0}, {rf}, {rb}) | {} ({sm:.0}, {sf}, {sb}) | {} |",
                    eps / cores as f64,
                    events as f64 / cpu.max(0.01),
                    lines.first().map_or(0, |l| l.checkpoints),
                    avg(|l| l.sync_avg),
                    max(|l| l.sync_max),
                    avg(|l| l.async_avg),
                    max(|l| l.async_max),
                    avg(|l| l.confirm_avg),
                    rec_t.as_millis(),
                    res_t.as_millis(),
                    load(),
                );
            }
        }
    }
}
