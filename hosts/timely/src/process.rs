//! One process of a job: checks the roots, readies the output, connects to its peers and runs its workers
//! (`design/timely-host.md`, "Restart").

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use keyed_state::env::{StateEnv, StateEnvOptions};
use timely::{CommunicationConfig, WorkerConfig};

use crate::checkpoints::{JobCheckpoint, JobRoot};
use crate::context::{FailureHandler, WorkerStats};
use crate::error::{Error, Result};
use crate::sink::{self, Prepared};
use crate::spec::{ClusterSpec, JobSpec};
use crate::worker::{self, ProcessShared};

/// What one process did.
#[derive(Debug, Clone)]
pub struct ProcessReport {
    /// The job.
    pub spec: JobSpec,
    /// The cluster.
    pub cluster: ClusterSpec,
    /// The checkpoint the run continued from.
    pub restored: Option<JobCheckpoint>,
    /// What readying the output did.
    pub prepared: Prepared,
    /// Each worker's figures.
    pub workers: Vec<WorkerStats>,
    /// Wall time from the start of the process's work (after the roots were checked) to its end.
    pub elapsed: Duration,
}

fn avg_max(v: &[u64]) -> (f64, f64) {
    if v.is_empty() {
        return (0.0, 0.0);
    }
    let sum: u64 = v.iter().sum();
    let max = v.iter().copied().max().unwrap_or(0);
    (sum as f64 / v.len() as f64 / 1000.0, max as f64 / 1000.0)
}

impl ProcessReport {
    /// Events this process's sources emitted.
    pub fn events(&self) -> u64 {
        self.workers.iter().map(|w| w.events).sum()
    }

    /// Bytes of this process's state in its last checkpoint.
    pub fn state_bytes(&self) -> u64 {
        self.workers.iter().map(|w| w.state_bytes).sum()
    }

    /// The sum over this process's workers of each one's largest checkpointed state.
    pub fn state_bytes_peak(&self) -> u64 {
        self.workers.iter().map(|w| w.state_bytes_peak).sum()
    }

    fn all(&self, f: impl Fn(&WorkerStats) -> &Vec<u64>) -> Vec<u64> {
        self.workers
            .iter()
            .flat_map(|w| f(w).iter().copied())
            .collect()
    }

    /// The end-of-run line: events/s, state size, checkpoint sync, async and confirmation times.
    pub fn summary(&self) -> String {
        let secs = self.elapsed.as_secs_f64().max(1e-9);
        let events = self.events();
        let (s_avg, s_max) = avg_max(&self.all(|w| &w.sync_micros));
        let (a_avg, a_max) = avg_max(&self.all(|w| &w.async_micros));
        let (c_avg, c_max) = avg_max(&self.all(|w| &w.confirm_micros));
        let checkpoints = self.workers.first().map_or(0, |w| w.checkpoints);
        let rows: u64 = self.workers.iter().map(|w| w.rows).sum();
        let restored = match &self.restored {
            Some(r) => format!(
                "restored checkpoint {} (epoch {}, offset {}) in {:.1} ms, {} files, {} bytes; ",
                r.id,
                r.epoch,
                r.offset,
                self.workers
                    .iter()
                    .filter_map(|w| w.restore_micros)
                    .max()
                    .unwrap_or(0) as f64
                    / 1000.0,
                self.workers.iter().map(|w| w.restored_files).sum::<usize>(),
                self.workers.iter().map(|w| w.restored_bytes).sum::<u64>()
            ),
            None => String::new(),
        };
        format!(
            "keyed-state-timely: process {} of {} ({} workers, {}, {}): {restored}{events} events in {secs:.2} s, \
             {:.0} events/s; state {} bytes (peak {} bytes); {checkpoints} checkpoints: sync avg {s_avg:.2} ms max {s_max:.2} ms, \
             async avg {a_avg:.1} ms max {a_max:.1} ms, confirmation avg {c_avg:.1} ms max {c_max:.1} ms; {rows} rows",
            self.cluster.process,
            self.cluster.processes,
            self.cluster.workers,
            self.spec.identity.query.name(),
            self.spec.identity.backend.name(),
            events as f64 / secs,
            self.state_bytes(),
            self.state_bytes_peak(),
        )
    }
}

/// Set once a worker runs: the cluster connected.
static CONNECTED: AtomicBool = AtomicBool::new(false);

/// Runs one process of the job to its end.
pub fn run(
    spec: JobSpec,
    cluster: ClusterSpec,
    on_failure: FailureHandler,
) -> Result<ProcessReport> {
    let total = cluster.total_workers();
    if cluster.processes == 0 || cluster.workers == 0 || cluster.process >= cluster.processes {
        return Err(Error::Config(format!(
            "process {} of {} with {} workers each is no cluster",
            cluster.process, cluster.processes, cluster.workers
        )));
    }
    if total > spec.identity.max_parallelism as usize {
        return Err(Error::Config(format!(
            "{total} workers exceed the job's {} key groups (--max-parallelism)",
            spec.identity.max_parallelism
        )));
    }
    if cluster.addresses.len() != cluster.processes {
        return Err(Error::Config(format!(
            "{} addresses for {} processes",
            cluster.addresses.len(),
            cluster.processes
        )));
    }
    let operators: Vec<String> = spec
        .identity
        .query
        .operators()
        .iter()
        .map(|s| s.to_string())
        .collect();
    let env = StateEnv::new(StateEnvOptions {
        memory_budget: Some(spec.memory_budget),
        ..StateEnvOptions::default()
    })
    .map_err(Error::state("starting the process's state environment"))?;
    let root = JobRoot::open(&spec.checkpoint_root, &env)?;
    let restored = if spec.restore {
        root.latest()?
    } else {
        if !root.is_empty()? {
            return Err(Error::Config(format!(
                "checkpoint root {} holds a job's checkpoints: pass --restore to continue it, or give an empty root",
                root.name()
            )));
        }
        None
    };
    if let Some(r) = &restored {
        if r.job != spec.identity {
            return Err(Error::Config(format!(
                "checkpoint {} in {} is of another job ({:?}), not of this one ({:?})",
                r.id,
                root.name(),
                r.job,
                spec.identity
            )));
        }
    }
    root.remove_incomplete(restored.as_ref().map(|r| r.id), &operators)?;
    let prepared = sink::prepare_output(&spec.out, restored.as_ref().map(|r| r.epoch))?;
    let mut storages = Vec::new();
    for op in &operators {
        storages.push((op.clone(), root.operator_storage(op)?));
    }
    let shared = Arc::new(ProcessShared {
        spec: Arc::new(spec.clone()),
        root: Arc::new(root),
        storages,
        restored: restored.clone(),
        env,
        processes: cluster.processes,
        workers: cluster.workers,
        on_failure,
    });
    let communication = if cluster.processes == 1 {
        CommunicationConfig::Process(cluster.workers)
    } else {
        CommunicationConfig::Cluster {
            threads: cluster.workers,
            process: cluster.process,
            addresses: cluster.addresses.clone(),
            report: false,
            zerocopy: false,
        }
    };
    let config = timely::Config {
        communication,
        worker: WorkerConfig::default(),
    };
    watch_connection(cluster.connect_timeout_secs, cluster.process);
    let t = Instant::now();
    let guards = timely::execute(config, move |w| {
        CONNECTED.store(true, Ordering::Release);
        worker::run(w, &shared)
    })
    .map_err(|e| Error::Cluster(format!("starting the cluster: {e}")))?;
    let mut workers = Vec::new();
    for (i, r) in guards.join().into_iter().enumerate() {
        match r {
            Ok(Ok(s)) => workers.push(s),
            Ok(Err(e)) => return Err(e),
            Err(p) => {
                return Err(Error::Cluster(format!(
                    "worker {i} of this process failed: {p}"
                )))
            }
        }
    }
    Ok(ProcessReport {
        spec,
        cluster,
        restored,
        prepared,
        workers,
        elapsed: t.elapsed(),
    })
}

/// Ends the process if the cluster has not connected within `secs` seconds (a peer that never came up, or
/// died before connecting, would otherwise leave it waiting for ever).
fn watch_connection(secs: u64, process: usize) {
    std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while Instant::now() < deadline {
            if CONNECTED.load(Ordering::Acquire) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!(
            "keyed-state-timely: process {process}: the other processes did not all connect within {secs} s; stopping"
        );
        std::process::exit(3);
    });
}
