//! `keyed-state-timely`: run one process of a Nexmark job on timely dataflow with keyed-state, or launch
//! all of a job's processes on loopback (`design/timely-host.md`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, Parser, Subcommand};
use keyed_state_timely::events::{EventSpec, DEFAULT_EVENT_RATE};
use keyed_state_timely::launch::{launch, LaunchOutcome};
use keyed_state_timely::queries::Query;
use keyed_state_timely::spec::{
    Backend, ClusterSpec, JobIdentity, JobSpec, DEFAULT_MEMORY_BUDGET, MIN_MEMORY_BUDGET,
};
use keyed_state_timely::Error;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "keyed-state-timely",
    about = "Nexmark on timely dataflow with keyed-state: aligned checkpoints, exactly-once output, restart and rescale"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Runs one process of a job.
    Run {
        #[command(flatten)]
        job: JobArgs,
        /// Processes of the job.
        #[arg(short = 'n', long = "processes", default_value_t = 1)]
        processes: usize,
        /// This process's index.
        #[arg(short = 'p', long = "process", default_value_t = 0)]
        process: usize,
        /// Worker threads per process.
        #[arg(short = 'w', long = "workers", default_value_t = 1)]
        workers: usize,
        /// A file with each process's host:port, one a line (default: 127.0.0.1:BASE_PORT+i).
        #[arg(long)]
        hostfile: Option<PathBuf>,
        /// The first process's port when there is no hostfile (timely's default is 2101).
        #[arg(long, default_value_t = 2101)]
        base_port: u16,
        /// Seconds to wait for every process to connect.
        #[arg(long, default_value_t = 60)]
        connect_timeout: u64,
    },
    /// Starts the job's processes on loopback as children and waits for them; if one dies, stops the
    /// others and fails.
    Launch {
        #[command(flatten)]
        job: JobArgs,
        /// Processes to start.
        #[arg(short = 'n', long = "processes", default_value_t = 1)]
        processes: usize,
        /// Worker threads per process.
        #[arg(short = 'w', long = "workers", default_value_t = 1)]
        workers: usize,
    },
}

#[derive(Args, Clone)]
struct JobArgs {
    /// The Nexmark query: q3, q5, q7, q8 or q11.
    #[arg(long)]
    query: String,
    /// Events in the whole job.
    #[arg(long)]
    events: u64,
    /// The generator's seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// The state backend: heap, lsm or rocksdb.
    #[arg(long, default_value = "lsm")]
    backend: String,
    /// The checkpoint root: a directory or s3://bucket/prefix (the AWS_* variables configure S3).
    #[arg(long)]
    checkpoint_dir: String,
    /// A checkpoint after every E epochs (and after the last).
    #[arg(long, default_value_t = 10)]
    checkpoint_every_epochs: u64,
    /// The output directory.
    #[arg(long)]
    out: PathBuf,
    /// Continue from the last complete checkpoint in the root.
    #[arg(long)]
    restore: bool,
    /// Events per epoch (default: events / 200, between 100 and 50 000).
    #[arg(long)]
    events_per_epoch: Option<u64>,
    /// Events per second of event time (Nexmark's default 10 000).
    #[arg(long, default_value_t = DEFAULT_EVENT_RATE)]
    event_rate: usize,
    /// Key groups of the job (fixed for its lifetime).
    #[arg(long, default_value_t = 128)]
    max_parallelism: u32,
    /// Memory each process's state stores share: memtables, block cache, row cache and SST metadata of
    /// every LSM backend, and the heap backends' state (e.g. 512MiB, 2GiB; default 256MiB).
    #[arg(long, value_name = "SIZE", value_parser = keyed_state::env::parse_size)]
    memory_budget: Option<usize>,
}

impl JobArgs {
    fn spec(&self) -> Result<JobSpec, Error> {
        let query = Query::parse(&self.query).ok_or_else(|| {
            Error::Config(format!(
                "--query {}: expected q3, q5, q7, q8 or q11",
                self.query
            ))
        })?;
        let backend = Backend::parse(&self.backend).ok_or_else(|| {
            Error::Config(format!(
                "--backend {}: expected heap, lsm or rocksdb",
                self.backend
            ))
        })?;
        if self.events == 0 {
            return Err(Error::Config("--events must be at least 1".into()));
        }
        if self.checkpoint_every_epochs == 0 {
            return Err(Error::Config(
                "--checkpoint-every-epochs must be at least 1".into(),
            ));
        }
        if self.event_rate == 0 {
            return Err(Error::Config("--event-rate must be at least 1".into()));
        }
        let memory_budget = self.memory_budget.unwrap_or(DEFAULT_MEMORY_BUDGET);
        if memory_budget < MIN_MEMORY_BUDGET {
            return Err(Error::Config(format!(
                "--memory-budget {memory_budget} bytes: at least {} MiB",
                MIN_MEMORY_BUDGET >> 20
            )));
        }
        let per_epoch = self
            .events_per_epoch
            .unwrap_or_else(|| EventSpec::default_per_epoch(self.events))
            .max(1);
        Ok(JobSpec {
            identity: JobIdentity {
                query,
                events: EventSpec {
                    events: self.events,
                    seed: self.seed,
                    per_epoch,
                    rate: self.event_rate,
                },
                max_parallelism: self.max_parallelism,
                backend,
            },
            checkpoint_root: self.checkpoint_dir.clone(),
            checkpoint_every: self.checkpoint_every_epochs,
            out: self.out.clone(),
            restore: self.restore,
            memory_budget,
        })
    }

    /// The flags again, for a child process.
    fn to_args(&self) -> Vec<String> {
        let mut a = vec![
            "--query".into(),
            self.query.clone(),
            "--events".into(),
            self.events.to_string(),
            "--seed".into(),
            self.seed.to_string(),
            "--backend".into(),
            self.backend.clone(),
            "--checkpoint-dir".into(),
            self.checkpoint_dir.clone(),
            "--checkpoint-every-epochs".into(),
            self.checkpoint_every_epochs.to_string(),
            "--out".into(),
            self.out.display().to_string(),
            "--event-rate".into(),
            self.event_rate.to_string(),
            "--max-parallelism".into(),
            self.max_parallelism.to_string(),
        ];
        if let Some(k) = self.events_per_epoch {
            a.extend(["--events-per-epoch".into(), k.to_string()]);
        }
        if let Some(b) = self.memory_budget {
            a.extend(["--memory-budget".into(), b.to_string()]);
        }
        if self.restore {
            a.push("--restore".into());
        }
        a
    }
}

/// A panic anywhere (timely's network threads panic when a peer's connection drops) ends the process with
/// a clear message rather than leaving the workers waiting for progress that never comes.
fn install_panic_hook(process: usize) {
    std::panic::set_hook(Box::new(move |info| {
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("(no message)");
        if msg.contains("timely communication error") {
            eprintln!(
                "keyed-state-timely: process {process}: lost the connection to a peer process ({msg}); \
                 a process of the job died: stopping (restart the job with --restore)"
            );
        } else {
            let at = info
                .location()
                .map(|l| format!(" at {l}"))
                .unwrap_or_default();
            eprintln!("keyed-state-timely: process {process}: internal error{at}: {msg}; stopping");
        }
        std::process::exit(2);
    }));
}

fn hosts(
    hostfile: &Option<PathBuf>,
    processes: usize,
    base_port: u16,
) -> Result<Vec<String>, Error> {
    match hostfile {
        Some(f) => {
            let text = std::fs::read_to_string(f).map_err(Error::io("reading hostfile", f))?;
            let v: Vec<String> = text
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(str::to_string)
                .collect();
            if v.len() < processes {
                return Err(Error::Config(format!(
                    "hostfile {} names {} processes, -n says {processes}",
                    f.display(),
                    v.len()
                )));
            }
            Ok(v.into_iter().take(processes).collect())
        }
        None => Ok((0..processes)
            .map(|i| format!("127.0.0.1:{}", usize::from(base_port) + i))
            .collect()),
    }
}

/// Turns transparent huge pages off for this process. The allocator takes fresh memory from the system in
/// 2 MiB-aligned regions, and with huge pages every first touch of one zeroes a whole 2 MiB page: on q3
/// that kernel zeroing was a quarter of the job's CPU time (`design/timely-host.md`, "Allocation").
fn disable_transparent_huge_pages() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: PR_SET_THP_DISABLE takes plain integer arguments and changes only this process's
        // memory policy; it touches no memory of ours. A failure (an old kernel) leaves the default.
        let _ = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
    }
}

fn main() -> ExitCode {
    disable_transparent_huge_pages();
    let cli = Cli::parse();
    match cli.command {
        Cmd::Run {
            job,
            processes,
            process,
            workers,
            hostfile,
            base_port,
            connect_timeout,
        } => {
            install_panic_hook(process);
            let run = || -> Result<String, Error> {
                let spec = job.spec()?;
                let cluster = ClusterSpec {
                    processes,
                    process,
                    workers,
                    addresses: hosts(&hostfile, processes, base_port)?,
                    connect_timeout_secs: connect_timeout,
                };
                let on_failure = Arc::new(move |e: &Error| {
                    eprintln!("keyed-state-timely: process {process}: {e}; stopping");
                    std::process::exit(1);
                });
                let report = keyed_state_timely::process::run(spec, cluster, on_failure)?;
                Ok(report.summary())
            };
            match run() {
                Ok(line) => {
                    println!("{line}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("keyed-state-timely: process {process}: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Cmd::Launch {
            job,
            processes,
            workers,
        } => {
            if let Err(e) = job.spec() {
                eprintln!("keyed-state-timely launch: {e}");
                return ExitCode::FAILURE;
            }
            let exe = match std::env::current_exe() {
                Ok(e) => e,
                Err(e) => {
                    eprintln!("keyed-state-timely launch: finding this program: {e}");
                    return ExitCode::FAILURE;
                }
            };
            match launch(&exe, &job.to_args(), processes, workers) {
                Ok(LaunchOutcome::Done) => ExitCode::SUCCESS,
                Ok(LaunchOutcome::Failed { process, status }) => {
                    eprintln!(
                        "keyed-state-timely launch: process {process} failed ({status}); stopped the others"
                    );
                    ExitCode::FAILURE
                }
                Err(e) => {
                    eprintln!("keyed-state-timely launch: {e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}
