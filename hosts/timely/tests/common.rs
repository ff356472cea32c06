//! Running the binary as a user would, and reading what it committed.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

use keyed_state_timely::events::EventSpec;
use keyed_state_timely::queries::Query;

/// The binary under test.
pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_keyed-state-timely"))
}

/// A job's flags.
#[derive(Debug, Clone)]
pub struct Job {
    pub query: Query,
    pub events: u64,
    pub seed: u64,
    pub per_epoch: u64,
    pub rate: usize,
    pub every: u64,
    pub backend: &'static str,
    pub root: String,
    pub out: PathBuf,
    /// Environment for the children (S3 settings).
    pub env: Vec<(String, String)>,
    /// The children's temporary directory (their LSM and RocksDB directories: a killed process leaves
    /// them behind, and the test's directory takes them away).
    pub tmp: PathBuf,
}

impl Job {
    /// A job on a local root and output under `dir`.
    pub fn local(query: Query, backend: &'static str, events: u64, dir: &Path) -> Job {
        Job {
            query,
            events,
            seed: 7,
            per_epoch: 1_000,
            rate: 1_000,
            every: 2,
            backend,
            root: dir.join("checkpoints").display().to_string(),
            out: dir.join("out"),
            env: Vec::new(),
            tmp: dir.join("tmp"),
        }
    }

    pub fn spec(&self) -> EventSpec {
        EventSpec {
            events: self.events,
            seed: self.seed,
            per_epoch: self.per_epoch,
            rate: self.rate,
        }
    }

    pub fn args(&self, restore: bool) -> Vec<String> {
        let mut a: Vec<String> = [
            "--query",
            self.query.name(),
            "--events",
            &self.events.to_string(),
            "--seed",
            &self.seed.to_string(),
            "--backend",
            self.backend,
            "--checkpoint-dir",
            &self.root,
            "--checkpoint-every-epochs",
            &self.every.to_string(),
            "--out",
            &self.out.display().to_string(),
            "--events-per-epoch",
            &self.per_epoch.to_string(),
            "--event-rate",
            &self.rate.to_string(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if restore {
            a.push("--restore".into());
        }
        a
    }

    /// The binary with the job's environment (S3 settings, TMPDIR).
    pub fn command(&self) -> Command {
        let mut c = Command::new(bin());
        std::fs::create_dir_all(&self.tmp).unwrap();
        c.envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("TMPDIR", &self.tmp);
        c
    }

    /// `launch --processes P --workers W`, to its end.
    pub fn launch(&self, processes: usize, workers: usize, restore: bool) -> Output {
        let mut c = self.command();
        c.arg("launch")
            .args(self.args(restore))
            .args(["--processes", &processes.to_string()])
            .args(["--workers", &workers.to_string()]);
        c.output().expect("running launch")
    }

    /// `launch --processes P --workers W` started, its standard error piped.
    pub fn launch_child(&self, processes: usize, workers: usize, restore: bool) -> Child {
        let mut c = self.command();
        c.arg("launch")
            .args(self.args(restore))
            .args(["--processes", &processes.to_string()])
            .args(["--workers", &workers.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        c.spawn().expect("starting launch")
    }

    /// `run` processes started one by one (`-n P -p i -w W --hostfile`), their output piped.
    pub fn spawn(&self, processes: usize, workers: usize, restore: bool, dir: &Path) -> Vec<Child> {
        let ports = keyed_state_timely::launch::free_ports(processes).unwrap();
        static N: AtomicU64 = AtomicU64::new(0);
        let hostfile = dir.join(format!("hosts-{}", N.fetch_add(1, Ordering::Relaxed)));
        let hosts: String = ports.iter().map(|p| format!("127.0.0.1:{p}\n")).collect();
        std::fs::write(&hostfile, hosts).unwrap();
        (0..processes)
            .map(|i| {
                let mut c = self.command();
                c.arg("run")
                    .args(self.args(restore))
                    .args(["-n", &processes.to_string(), "-p", &i.to_string()])
                    .args(["-w", &workers.to_string(), "--connect-timeout", "10"])
                    .arg("--hostfile")
                    .arg(&hostfile)
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped());
                c.spawn().expect("starting run")
            })
            .collect()
    }
}

/// The committed rows: the lines of the regular files directly under `out` whose names do not start with
/// a dot, sorted.
pub fn committed_rows(out: &Path) -> Vec<String> {
    let mut rows = Vec::new();
    let Ok(entries) = std::fs::read_dir(out) else {
        return rows;
    };
    for e in entries {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || !e.file_type().unwrap().is_file() {
            continue;
        }
        let text = std::fs::read_to_string(e.path()).unwrap();
        rows.extend(text.lines().map(str::to_string));
    }
    rows.sort();
    rows
}

/// Asserts that `got` equals `want` (both sorted), naming a few missing and extra rows.
pub fn assert_rows(got: &[String], want: &[String], what: &str) {
    if got == want {
        return;
    }
    let mut missing = Vec::new();
    let mut extra = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < got.len() || j < want.len() {
        match (got.get(i), want.get(j)) {
            (Some(g), Some(w)) if g == w => {
                i += 1;
                j += 1;
            }
            (Some(g), Some(w)) if g < w => {
                extra.push(g.clone());
                i += 1;
            }
            (Some(_), Some(w)) => {
                missing.push(w.clone());
                j += 1;
            }
            (Some(g), None) => {
                extra.push(g.clone());
                i += 1;
            }
            (None, Some(w)) => {
                missing.push(w.clone());
                j += 1;
            }
            (None, None) => break,
        }
    }
    panic!(
        "{what}: {} rows, {} expected; {} missing (first {:?}), {} extra or duplicated (first {:?})",
        got.len(),
        want.len(),
        missing.len(),
        missing.iter().take(3).collect::<Vec<_>>(),
        extra.len(),
        extra.iter().take(3).collect::<Vec<_>>()
    );
}

/// Asserts a launch succeeded, with its output in the message if not.
pub fn assert_ok(o: &Output, what: &str) {
    assert!(
        o.status.success(),
        "{what}: {}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// An S3 root on the test server (`.ci/run` starts moto and sets KEYED_STATE_S3_ENDPOINT), with the
/// environment the children need; `None` (and a printed line) when there is no server.
pub fn s3_root(test: &str) -> Option<(String, Vec<(String, String)>)> {
    let ep = match std::env::var("KEYED_STATE_S3_ENDPOINT") {
        Ok(e) if !e.is_empty() => e,
        _ => {
            println!(
                "skipped {test}: KEYED_STATE_S3_ENDPOINT is not set (.ci/run starts an S3 server and sets it)"
            );
            return None;
        }
    };
    let bucket =
        std::env::var("KEYED_STATE_S3_BUCKET").unwrap_or_else(|_| "keyed-state-test".to_string());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let root = format!("s3://{bucket}/timely-{test}-{}-{nanos}", std::process::id());
    let env = [
        ("AWS_ENDPOINT", ep.as_str()),
        ("AWS_ALLOW_HTTP", "true"),
        ("AWS_ACCESS_KEY_ID", "keyed-state-test"),
        ("AWS_SECRET_ACCESS_KEY", "keyed-state-test"),
        ("AWS_DEFAULT_REGION", "us-east-1"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    Some((root, env))
}
