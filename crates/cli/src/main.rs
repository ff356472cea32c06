//! The `keyed-state` command line: demo, inspect, dump, verify, key-group, stats.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, Subcommand, ValueEnum};
use keyed_state::backend::heap::HeapBackend;
use keyed_state::backend::lsm::LsmBackend;
use keyed_state::backend::StateBackend;
use keyed_state::keygroup::{
    check_max_parallelism, java_int_hash, java_long_hash, java_string_hash, key_group_for_hash,
    operator_index_for_key_group,
};
use keyed_state::savepoint::{write_savepoint, SavepointReader, WriteOptions};
use keyed_state::Error;

mod checkpoint_cmds;
mod demo;
mod demo_checkpoints;
mod demo_instances;
mod flink_cmds;
mod host_memory;
mod stats_cmd;
mod tools;

#[derive(Parser)]
#[command(
    name = "keyed-state",
    version,
    about = "A keyed state store for stream processors: demo and savepoint tools"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum BackendKind {
    /// In-memory tables per key group.
    Heap,
    /// Our LSM engine on disk (a temporary directory unless `--dir` is given).
    Lsm,
    /// RocksDB, configured as Flink configures it (built with the `rocksdb` feature).
    #[cfg(feature = "rocksdb")]
    Rocksdb,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum KeyType {
    /// Java long (i64).
    Long,
    /// Java int (i32).
    Int,
    /// Java String.
    String,
}

#[derive(Subcommand)]
enum Command {
    /// Run the demo workload (clicks and impressions per user) and end with a savepoint.
    Demo {
        /// The state backend.
        #[arg(long, value_enum, default_value = "lsm")]
        backend: BackendKind,
        /// Working directory of the lsm (or rocksdb) backend (default: a temporary directory, removed
        /// afterwards). An earlier run's lsm database there is emptied (rocksdb: the directory must be
        /// empty); a directory holding engine files but no CURRENT is refused and nothing is deleted.
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Number of events.
        #[arg(long, default_value_t = 1_000_000)]
        records: u64,
        /// Seed of the event stream.
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// Where to write the savepoint.
        #[arg(long, default_value = "demo.savepoint")]
        savepoint: PathBuf,
        /// Take incremental checkpoints into this root (a directory or a URL: `s3://bucket/prefix`,
        /// `file:///…`), confirming each once it completes while the events keep flowing.
        #[arg(long)]
        checkpoint_dir: Option<String>,
        /// Events between two checkpoints.
        #[arg(long, default_value_t = 100_000, requires = "checkpoint_dir")]
        checkpoint_every: u64,
        /// Confirmed checkpoints retained in the root.
        #[arg(long, default_value_t = 3, requires = "checkpoint_dir")]
        retain: usize,
        /// Checkpoint as this job of the root (its part `jobs/NAME/`; default: the root's top level, the
        /// job `default`).
        #[arg(long, requires = "checkpoint_dir")]
        job: Option<String>,
        /// Run the job as this many operator instances (key-group ranges) in this process, every LSM
        /// backend on one shared environment; prints peak memory, threads and write stall time (no
        /// savepoint or checkpoints).
        #[arg(long, conflicts_with_all = ["checkpoint_dir", "dir"])]
        instances: Option<usize>,
        /// The memory budget the instances share (memtables, block cache, SST metadata), e.g. `512MiB`
        /// (needs `--instances`).
        #[arg(long, requires = "instances", value_parser = keyed_state::env::parse_size)]
        memory_budget: Option<usize>,
        /// Keep mimalloc's defaults (transparent huge pages, freed memory given back after 1 s) instead of
        /// the settings of a host of many operators (huge pages off, freed memory given back at once; see
        /// `design/shared-env.md`).
        #[arg(long)]
        allocator_defaults: bool,
    },
    /// Show a savepoint's states, serializers, key groups, entries and bytes (our savepoint files, and
    /// Flink savepoint or checkpoint directories holding `_metadata`).
    Inspect {
        /// The savepoint file, or a Flink savepoint directory.
        savepoint: PathBuf,
    },
    /// Import keyed state from a Flink savepoint or checkpoint (canonical, HashMap native, RocksDB native
    /// or incremental) into our savepoints: one operator (`--operator OP --out FILE`), or every keyed
    /// operator (`--all --out-dir DIR`: one savepoint per operator, `DIR/<uid>.sp`, or `DIR/<operator
    /// id>.sp` for an operator without uid). An import reads every file it references or fails.
    ImportFlink {
        /// The Flink savepoint or checkpoint directory (holding `_metadata`).
        flink_savepoint: PathBuf,
        /// The operator: its uid or its 32-digit hex operator id.
        #[arg(long, required_unless_present = "all", conflicts_with = "all")]
        operator: Option<String>,
        /// Where to write our savepoint (with `--operator`).
        #[arg(long, required_unless_present = "all", conflicts_with = "all")]
        out: Option<PathBuf>,
        /// Import every operator with keyed state.
        #[arg(long, requires = "out_dir")]
        all: bool,
        /// The directory to write one savepoint per keyed operator into (with `--all`; created if needed).
        #[arg(long, requires = "all")]
        out_dir: Option<PathBuf>,
        /// LZ4-compress the frames of the savepoints written.
        #[arg(long)]
        lz4: bool,
    },
    /// Export our savepoints as a Flink savepoint directory (`_metadata`, one canonical keyed-state file per
    /// subtask and operator) that Flink restores on any state backend: one operator (`SAVEPOINT...
    /// --operator-uid UID`), or several (`--operator UID=SAVEPOINT[,SAVEPOINT...]`, repeated). With
    /// `--template FLINK_SAVEPOINT_DIR`, every operator of that savepoint not given is carried over
    /// unchanged, byte for byte (keyed, operator and coordinator state), and each operator given must be in
    /// it with the same max parallelism (and parallelism, which it then defaults to).
    ExportFlink {
        /// Our savepoint files for `--operator-uid` (states merged by name; key groups must not overlap per
        /// state).
        savepoints: Vec<PathBuf>,
        /// The operator uid of the Flink job for SAVEPOINT...; the operator id is the one Flink derives.
        #[arg(long)]
        operator_uid: Option<String>,
        /// An operator and its savepoints: `UID=SAVEPOINT[,SAVEPOINT...]` (UID may be a 32-digit hex
        /// operator id); repeat for several operators.
        #[arg(long = "operator", value_name = "UID=SAVEPOINT[,SAVEPOINT...]")]
        operators: Vec<String>,
        /// The operators' parallelism: one keyed-state file per subtask (default with --template: each
        /// operator's parallelism in it).
        #[arg(long)]
        parallelism: Option<u32>,
        /// A Flink savepoint or checkpoint of the job whose other operators are carried over.
        #[arg(long, value_name = "FLINK_SAVEPOINT_DIR")]
        template: Option<PathBuf>,
        /// The savepoint directory to write (created; must not exist or be empty).
        #[arg(long)]
        out: PathBuf,
        /// Snappy-compress every key group, as Flink does with snapshot compression on.
        #[arg(long)]
        compress: bool,
    },
    /// Print every entry of a savepoint.
    Dump {
        /// The savepoint file.
        savepoint: PathBuf,
        /// One JSON object per line and per entry.
        #[arg(long)]
        json: bool,
    },
    /// Check every checksum of a savepoint.
    Verify {
        /// The savepoint file.
        savepoint: PathBuf,
    },
    /// Print the key group (and operator index) of keys, exactly as Flink computes them.
    KeyGroup {
        /// The job's max parallelism.
        #[arg(long)]
        max_parallelism: u32,
        /// The job's parallelism (adds the operator index column).
        #[arg(long)]
        parallelism: Option<u32>,
        /// How to read the keys.
        #[arg(long, value_enum)]
        key_type: KeyType,
        /// The keys.
        #[arg(required = true, allow_hyphen_values = true)]
        keys: Vec<String>,
    },
    /// Show an LSM directory: files, bytes, entries and sorted runs per level, files and key range per
    /// state id, estimated keys, manifest and write-ahead log sizes. Read-only: creates, changes and locks
    /// nothing, so it also reads a directory another process holds open (as of its manifest when read).
    Stats {
        /// The LSM backend's (or engine's) directory.
        dir: PathBuf,
        /// Print one JSON document instead of tab-separated lines.
        #[arg(long)]
        json: bool,
    },
    /// List, verify, garbage-collect checkpoints, or turn one into a savepoint.
    Checkpoint {
        /// What to do.
        #[command(subcommand)]
        cmd: checkpoint_cmds::CheckpointCommand,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Checkpoint { cmd } => return checkpoint_cmds::main(cmd),
        Command::Stats { dir, json } => {
            return match stats_cmd::stats(&dir) {
                Ok(s) => {
                    if json {
                        println!("{:#}", stats_cmd::render_json(&dir, &s));
                    } else {
                        print!("{}", stats_cmd::render_text(&dir, &s));
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => report(&e),
            }
        }
        Command::Demo {
            backend,
            dir,
            records,
            seed,
            savepoint,
            checkpoint_dir,
            checkpoint_every,
            retain,
            job,
            instances,
            memory_budget,
            allocator_defaults,
        } => {
            let allocator = host_memory::tune(allocator_defaults);
            if let Some(n) = instances {
                if !matches!(backend, BackendKind::Lsm) {
                    eprintln!("error: --instances runs LSM backends only");
                    return ExitCode::from(2);
                }
                return match demo_instances::run(n, memory_budget, records, seed, &allocator) {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(e) => report(&e),
                };
            }
            let plan = checkpoint_dir.map(|root| demo_checkpoints::Plan {
                root,
                every: checkpoint_every,
                retain,
                job,
            });
            run_demo(backend, dir.as_deref(), records, seed, &savepoint, plan)
        }
        command => run(command),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::BrokenPipe => {
            // The reader of our output went away (e.g. `| head`): not an error.
            ExitCode::SUCCESS
        }
        Err(e) => report(&e),
    }
}

/// Prints `error: …` and the causes the message does not already say.
fn report(e: &dyn std::error::Error) -> ExitCode {
    let message = e.to_string();
    eprintln!("error: {message}");
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !message.contains(&text) {
            eprintln!("  caused by: {text}");
        }
        source = s.source();
    }
    ExitCode::FAILURE
}

fn open(path: &Path) -> Result<SavepointReader, Error> {
    SavepointReader::open(path)
}

fn run(command: Command) -> Result<(), Error> {
    match command {
        // Handled in `main`.
        Command::Demo { .. } => Err(Error::InvalidArgument(
            "the demo runs through run_demo".into(),
        )),
        Command::Inspect { savepoint } if keyed_state_flink::is_flink_savepoint(&savepoint) => {
            print!("{}", flink_cmds::inspect(&savepoint)?);
            Ok(())
        }
        Command::ImportFlink {
            flink_savepoint,
            operator,
            out,
            all,
            out_dir,
            lz4,
        } => {
            let text = match (operator, out, all, out_dir) {
                (Some(op), Some(out), false, None) => {
                    flink_cmds::import(&flink_savepoint, &op, &out, lz4)?
                }
                (None, None, true, Some(dir)) => {
                    flink_cmds::import_all(&flink_savepoint, &dir, lz4)?
                }
                _ => {
                    return Err(Error::InvalidArgument(
                        "give --operator OP --out FILE, or --all --out-dir DIR".into(),
                    ))
                }
            };
            print!("{text}");
            Ok(())
        }
        Command::ExportFlink {
            savepoints,
            operator_uid,
            operators,
            parallelism,
            template,
            out,
            compress,
        } => {
            let request = flink_cmds::ExportRequest {
                savepoints,
                operator_uid,
                operators,
                parallelism,
                template,
                out,
                compress,
            };
            print!("{}", flink_cmds::export(&request)?);
            Ok(())
        }
        Command::Inspect { savepoint } => {
            let reader = open(&savepoint)?;
            print!("{}", tools::inspect(&reader)?);
            Ok(())
        }
        Command::Dump { savepoint, json } => {
            let reader = open(&savepoint)?;
            let stdout = std::io::stdout();
            let mut out = std::io::BufWriter::new(stdout.lock());
            if json {
                tools::dump_json(&reader, &mut out)?;
            } else {
                tools::dump_text(&reader, &mut out)?;
            }
            out.flush()
                .map_err(|e| Error::io("writing the dump to", "<stdout>", e))?;
            Ok(())
        }
        Command::Verify { savepoint } => {
            let reader = open(&savepoint)?;
            let report = reader.verify()?;
            println!(
                "ok: {} key groups, {} frames, {} entries, {} bytes, every checksum verified",
                report.key_groups,
                report.frames,
                report.total_entries(),
                report.file_bytes
            );
            Ok(())
        }
        // Handled in `main`, which owns its exit code.
        Command::Stats { .. } => Err(Error::InvalidArgument(
            "stats runs through stats_cmd".into(),
        )),
        Command::Checkpoint { .. } => Err(Error::InvalidArgument(
            "checkpoint commands run through checkpoint_cmds::main".into(),
        )),
        Command::KeyGroup {
            max_parallelism,
            parallelism,
            key_type,
            keys,
        } => {
            check_max_parallelism(max_parallelism)?;
            if let Some(p) = parallelism {
                if p == 0 || p > max_parallelism {
                    return Err(keyed_state::keygroup::KeyGroupError::InvalidParallelism {
                        parallelism: p,
                        max_parallelism,
                    }
                    .into());
                }
            }
            let stdout = std::io::stdout();
            let mut out = stdout.lock();
            for key in &keys {
                let hash = match key_type {
                    KeyType::Long => java_long_hash(key.trim().parse::<i64>().map_err(|e| {
                        Error::InvalidArgument(format!("'{key}' is not a long: {e}"))
                    })?),
                    KeyType::Int => java_int_hash(key.trim().parse::<i32>().map_err(|e| {
                        Error::InvalidArgument(format!("'{key}' is not an int: {e}"))
                    })?),
                    KeyType::String => java_string_hash(key),
                };
                let kg = key_group_for_hash(hash, max_parallelism);
                let line = match parallelism {
                    Some(p) => format!(
                        "{key}\t{kg}\t{}",
                        operator_index_for_key_group(max_parallelism, p, kg)
                    ),
                    None => format!("{key}\t{kg}"),
                };
                writeln!(out, "{line}").map_err(|e| Error::io("writing to", "<stdout>", e))?;
            }
            Ok(())
        }
    }
}

/// On SIGINT, SIGTERM or SIGHUP: removes the demo's temporary directory `dir`, says so, and exits with
/// 128 + 2 (the process is stopping anyway; the engine's files there are the demo's own).
fn remove_on_signal(dir: PathBuf) -> Result<(), Error> {
    ctrlc::set_handler(move || {
        let _ = std::fs::remove_dir_all(&dir);
        eprintln!(
            "interrupted: removed the temporary directory {}",
            dir.display()
        );
        std::process::exit(130);
    })
    .map_err(|e| Error::InvalidArgument(format!("installing the signal handler: {e}")))
}

fn run_demo(
    backend: BackendKind,
    dir: Option<&Path>,
    records: u64,
    seed: u64,
    path: &Path,
    plan: Option<demo_checkpoints::Plan>,
) -> Result<(), Error> {
    let config = demo::config();
    // The RocksDB settings are printed with the results.
    #[cfg_attr(not(feature = "rocksdb"), allow(unused_mut))]
    let mut settings: Option<String> = None;
    let (backend, location): (Box<dyn StateBackend>, String) = match backend {
        BackendKind::Heap => {
            if dir.is_some() {
                return Err(Error::InvalidArgument(
                    "--dir applies to the on-disk backends (lsm, rocksdb) only".into(),
                ));
            }
            (Box::new(HeapBackend::new(config)?), "in memory".into())
        }
        BackendKind::Lsm => {
            let b = match dir {
                Some(d) => LsmBackend::open(d, config, Default::default())?,
                None => LsmBackend::temp(config)?,
            };
            let location = match dir {
                Some(_) => format!("directory {}", b.path().display()),
                None => {
                    remove_on_signal(b.path().to_path_buf())?;
                    format!("temporary directory {}", b.path().display())
                }
            };
            (Box::new(b), location)
        }
        #[cfg(feature = "rocksdb")]
        BackendKind::Rocksdb => {
            use keyed_state::backend::rocksdb::{RocksDbBackend, RocksDbOptions};
            let options = RocksDbOptions::default();
            settings = Some(options.describe());
            let (backend, location) = match dir {
                Some(d) => (
                    RocksDbBackend::open(d, config, options)?,
                    format!("directory {}", d.display()),
                ),
                None => (
                    RocksDbBackend::temporary(config, options)?,
                    "temporary directory".to_string(),
                ),
            };
            (Box::new(backend), location)
        }
    };
    let name = backend.backend_name();
    let mut store = demo::store(backend)?;
    let states = demo::register(&mut store)?;
    let mut host = match &plan {
        Some(p) => Some(demo_checkpoints::Host::start(p, &mut store)?),
        None => None,
    };

    let bar = indicatif::ProgressBar::new(records);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} events ({per_sec})",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let start = Instant::now();
    let mut clicks = 0u64;
    for (i, e) in demo::events(seed, records).enumerate() {
        clicks += e.click as u64;
        demo::process(&mut store, &states, &e)?;
        if let Some(h) = host.as_mut() {
            // A hidden bar (output not a terminal) prints nothing through `println`.
            h.after_event(i as u64 + 1, &mut store, &mut |line| {
                if bar.is_hidden() {
                    println!("{line}");
                } else {
                    bar.println(line);
                }
            })?;
        }
        if i % 8192 == 0 {
            bar.set_position(i as u64);
        }
    }
    bar.finish_and_clear();
    let process_secs = start.elapsed().as_secs_f64();
    let checkpoints = match host {
        Some(h) => Some(h.finish(&mut |line| println!("{line}"))?),
        None => None,
    };

    let snap_start = Instant::now();
    let snapshot = store.snapshot()?;
    let sync_secs = snap_start.elapsed().as_secs_f64();
    let summary = write_savepoint(path, &*snapshot, &WriteOptions::default())?;
    let write_secs = snap_start.elapsed().as_secs_f64() - sync_secs;

    println!("backend:        {name} ({location})");
    if let Some(settings) = &settings {
        println!("options:        {settings}");
    }
    println!(
        "events:         {records} ({clicks} clicks, {} impressions), seed {seed}",
        records - clicks
    );
    println!(
        "processing:     {:.2} s, {:.0} events/s",
        process_secs,
        records as f64 / process_secs.max(1e-9)
    );
    println!("state entries:  {}", store.num_entries()?);
    if let Some(c) = &checkpoints {
        println!("checkpoints:    {c}");
    }
    println!("snapshot sync:  {:.3} ms", sync_secs * 1e3);
    println!(
        "savepoint:      {} ({} bytes, {} entries, {} key groups) in {:.3} s, {:.0} MB/s",
        path.display(),
        summary.bytes_written,
        summary.total_entries(),
        summary.key_groups_written,
        write_secs,
        summary.bytes_written as f64 / 1e6 / write_secs.max(1e-9)
    );
    Ok(())
}

/// mimalloc as the global allocator: see design/decisions/0004-mimalloc.md.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
