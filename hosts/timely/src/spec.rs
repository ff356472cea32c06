//! What a job is and how one process of it runs: the query, the events, the backend, the roots, the
//! cluster.

use std::path::PathBuf;

use crate::events::EventSpec;
use crate::query::Query;

/// The keyed-state backend of every keyed operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Backend {
    /// The heap backend (in-memory tables; checkpoints write one table file per state and key group).
    Heap,
    /// The LSM backend (keyed-state's own engine; checkpoints upload new SST files).
    Lsm,
    /// The RocksDB-backed variant (a build with `--features rocksdb`).
    RocksDb,
}

impl Backend {
    /// Parses `heap`, `lsm` or `rocksdb`.
    pub fn parse(s: &str) -> Option<Backend> {
        match s.to_ascii_lowercase().as_str() {
            "heap" => Some(Backend::Heap),
            "lsm" => Some(Backend::Lsm),
            "rocksdb" => Some(Backend::RocksDb),
            _ => None,
        }
    }

    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Heap => "heap",
            Backend::Lsm => "lsm",
            Backend::RocksDb => "rocksdb",
        }
    }
}

/// The LSM engine options of each keyed operator instance: the engine's defaults.
pub fn lsm_options() -> keyed_state_lsm::Options {
    keyed_state_lsm::Options::default()
}

/// What makes two runs the same job: a restore refuses a checkpoint whose identity differs.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct JobIdentity {
    /// The query.
    pub query: Query,
    /// The events.
    pub events: EventSpec,
    /// The number of key groups.
    pub max_parallelism: u32,
    /// The backend.
    pub backend: Backend,
}

/// Everything one process of a job needs.
#[derive(Debug, Clone)]
pub struct JobSpec {
    /// The job's identity.
    pub identity: JobIdentity,
    /// The checkpoint root (a directory or `s3://bucket/prefix`).
    pub checkpoint_root: String,
    /// A checkpoint is taken after every `checkpoint_every` epochs (and after the last).
    pub checkpoint_every: u64,
    /// The output directory.
    pub out: PathBuf,
    /// Continue from the last complete checkpoint in the root.
    pub restore: bool,
    /// Bytes the process's LSM backends share on its one [`StateEnv`](keyed_state::env::StateEnv):
    /// memtables, block cache, SST metadata, and the heap backends' state as reservations
    /// (`--memory-budget`; not part of the job's identity: a restart may change it).
    pub memory_budget: usize,
}

/// The memory budget of a process when `--memory-budget` is not given: 256 MiB.
pub const DEFAULT_MEMORY_BUDGET: usize = 256 << 20;

/// The smallest memory budget accepted: 8 MiB (below it the engines' fixed parts alone overrun it).
pub const MIN_MEMORY_BUDGET: usize = 8 << 20;

impl JobSpec {
    /// Whether a checkpoint is taken once epoch `e` is complete.
    pub fn is_checkpoint_epoch(&self, e: u64) -> bool {
        (e + 1) % self.checkpoint_every.max(1) == 0 || e >= self.identity.events.last_epoch()
    }

    /// The first checkpoint epoch at or after `e`: the checkpoint whose commit publishes epoch `e`'s
    /// output.
    pub fn checkpoint_epoch_of(&self, e: u64) -> u64 {
        let every = self.checkpoint_every.max(1);
        let c = (e / every) * every + every - 1;
        c.min(self.identity.events.last_epoch()).max(e)
    }
}

/// Where one process sits in the cluster.
#[derive(Debug, Clone)]
pub struct ClusterSpec {
    /// Processes.
    pub processes: usize,
    /// This process's index.
    pub process: usize,
    /// Workers per process.
    pub workers: usize,
    /// Each process's `host:port`, by index.
    pub addresses: Vec<String>,
    /// Seconds to wait for every process to connect before giving up.
    pub connect_timeout_secs: u64,
}

impl ClusterSpec {
    /// Every process on this host, process `i` at `127.0.0.1:(base_port + i)` (timely's convention is
    /// `localhost:2101+i`).
    pub fn loopback(processes: usize, process: usize, workers: usize, base_port: u16) -> Self {
        ClusterSpec {
            processes,
            process,
            workers,
            addresses: (0..processes)
                .map(|i| format!("127.0.0.1:{}", usize::from(base_port) + i))
                .collect(),
            connect_timeout_secs: 60,
        }
    }

    /// Every worker of the job.
    pub fn total_workers(&self) -> usize {
        self.processes * self.workers
    }
}
