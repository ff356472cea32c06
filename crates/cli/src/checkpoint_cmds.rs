//! `keyed-state checkpoint jobs | list | verify | gc | to-savepoint` (`design/checkpoints.md`, "Command
//! line"; jobs: `design/checkpoint-fencing.md`, "Jobs in the root").

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;
use keyed_state::checkpoint::tools::{gc, gc_fencing, verify, VerifyReport};
use keyed_state::checkpoint::{
    list_completed, list_jobs, newest_checkpoint, resolve_job, to_savepoint, CheckpointStorage,
    DEFAULT_JOB,
};
use keyed_state::{Error, Result};

/// The checkpoint subcommands. ROOT is a directory or a URL (`file:///…`, `memory:///`, `s3://…`).
#[derive(Subcommand)]
pub enum CheckpointCommand {
    /// One line per job in the root: job, checkpoints (metadata files), newest checkpoint id
    /// (tab-separated). Roots written before jobs hold the one job `default`.
    Jobs {
        /// The checkpoint root.
        root: String,
    },
    /// One line per completed checkpoint and instance: id, key-group range, files new/referenced, bytes
    /// uploaded, state size, instance (tab-separated); without `--job`, in a root holding a job other than
    /// `default`, a seventh column names each line's job.
    List {
        /// The checkpoint root.
        root: String,
        /// Only this job's checkpoints.
        #[arg(long)]
        job: Option<String>,
    },
    /// Check that every referenced object is present, of the recorded size, with the recorded checksums.
    Verify {
        /// The checkpoint root.
        root: String,
        /// Only this checkpoint (of the root's only job, or of `--job`).
        #[arg(long)]
        id: Option<u64>,
        /// Only this job (default: every job in the root).
        #[arg(long)]
        job: Option<String>,
    },
    /// Keep the newest N checkpoints of one job (and each instance name's newest); delete older metadata and
    /// every object no kept one references and no live writer may still use (uploads of the newest attempt
    /// of an instance name stay: see `--fence`). Safe while the job writes.
    Gc {
        /// The checkpoint root.
        root: String,
        /// Checkpoint ids to keep.
        #[arg(long)]
        retain: usize,
        /// Print what would be deleted, delete nothing.
        #[arg(long)]
        dry_run: bool,
        /// The job (needed when the root holds several).
        #[arg(long)]
        job: Option<String>,
        /// For a stopped job: first fence every writer of the job (a new attempt of each instance name),
        /// then delete everything no kept checkpoint references. A writer still running fails with a
        /// "fenced" error at its next commit.
        #[arg(long)]
        fence: bool,
    },
    /// Write a checkpoint (every instance) as one unified savepoint.
    ToSavepoint {
        /// The checkpoint root.
        root: String,
        /// The checkpoint id (default: the job's newest).
        #[arg(long)]
        id: Option<u64>,
        /// The savepoint file to write.
        #[arg(long)]
        out: PathBuf,
        /// The job whose checkpoint it is (needed when the root holds several); the savepoint of another
        /// job's checkpoint is how a job forks from it.
        #[arg(long)]
        job: Option<String>,
    },
}

/// Runs a checkpoint subcommand; failures print `error: …` and exit non-zero.
pub fn main(cmd: CheckpointCommand) -> ExitCode {
    match run(cmd) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The part of `root` job `job` (or the root's only job) owns, and the job's name.
fn job_storage(root: &CheckpointStorage, job: Option<&str>) -> Result<(CheckpointStorage, String)> {
    let job = resolve_job(root, job)?;
    Ok((root.job(&job)?, job))
}

fn run(cmd: CheckpointCommand) -> Result<ExitCode> {
    match cmd {
        CheckpointCommand::Jobs { root } => {
            let storage = CheckpointStorage::open_existing(&root)?;
            for job in list_jobs(&storage)? {
                let js = storage.job(&job)?;
                let metadata = js
                    .list("")?
                    .iter()
                    .filter(|(p, _)| p.starts_with("chk-") && p.ends_with("/_metadata"))
                    .count();
                let newest = newest_checkpoint(&js)?
                    .map(|i| i.to_string())
                    .unwrap_or_else(|| "-".into());
                println!("{job}\t{metadata}\t{newest}");
            }
            Ok(ExitCode::SUCCESS)
        }
        CheckpointCommand::List { root, job } => {
            let storage = CheckpointStorage::open_existing(&root)?;
            let jobs = match &job {
                Some(j) => vec![resolve_job(&storage, Some(j))?],
                None => list_jobs(&storage)?,
            };
            let name_jobs = job.is_none() && jobs.iter().any(|j| j != DEFAULT_JOB);
            for j in &jobs {
                list_job(&storage.job(j)?, name_jobs.then_some(j.as_str()))?;
            }
            Ok(ExitCode::SUCCESS)
        }
        CheckpointCommand::Verify { root, id, job } => {
            let storage = CheckpointStorage::open_existing(&root)?;
            let jobs = if job.is_some() || id.is_some() {
                vec![resolve_job(&storage, job.as_deref())?]
            } else {
                list_jobs(&storage)?
            };
            let mut rep = VerifyReport::default();
            for j in &jobs {
                let r = verify(&storage.job(j)?, id)?;
                rep.metadata_files += r.metadata_files;
                rep.objects += r.objects;
                rep.files += r.files;
                let prefix = if j == DEFAULT_JOB {
                    String::new()
                } else {
                    format!("jobs/{j}/")
                };
                rep.problems.extend(r.problems.into_iter().map(|mut p| {
                    p.path = format!("{prefix}{}", p.path);
                    p
                }));
            }
            if rep.metadata_files == 0 {
                eprintln!(
                    "error: no checkpoint metadata{}{} in {root}",
                    id.map(|i| format!(" for checkpoint {i}"))
                        .unwrap_or_default(),
                    job.map(|j| format!(" of job {j}")).unwrap_or_default()
                );
                return Ok(ExitCode::FAILURE);
            }
            if rep.problems.is_empty() {
                println!(
                    "ok: {} metadata files, {} objects, {} files, every size and checksum verified",
                    rep.metadata_files, rep.objects, rep.files
                );
                return Ok(ExitCode::SUCCESS);
            }
            for p in &rep.problems {
                let id = p.checkpoint_id.map(|i| i.to_string()).unwrap_or_default();
                eprintln!("damaged: checkpoint {id}: {}: {}", p.path, p.detail);
            }
            Ok(ExitCode::FAILURE)
        }
        CheckpointCommand::Gc {
            root,
            retain,
            dry_run,
            job,
            fence,
        } => {
            let storage = CheckpointStorage::open_existing(&root)?;
            let (storage, _) = job_storage(&storage, job.as_deref())?;
            let rep = if fence {
                gc_fencing(&storage, retain, dry_run)?
            } else {
                gc(&storage, retain, dry_run)?
            };
            let verb = if dry_run { "would delete" } else { "deleted" };
            for p in rep.metadata.iter().chain(&rep.objects) {
                println!("{verb}\t{p}");
            }
            println!(
                "kept checkpoints {:?}; {verb} {} metadata files and {} objects",
                rep.kept,
                rep.metadata.len(),
                rep.objects.len()
            );
            if !rep.spared.is_empty() {
                println!(
                    "left {} unreferenced objects a live writer may still use (its next sweep deletes them; \
                     `--fence` once the job is stopped)",
                    rep.spared.len()
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        CheckpointCommand::ToSavepoint { root, id, out, job } => {
            let storage = CheckpointStorage::open_existing(&root)?;
            let (storage, job) = job_storage(&storage, job.as_deref())?;
            let id = match id {
                Some(id) => id,
                None => newest_checkpoint(&storage)?.ok_or_else(|| {
                    Error::InvalidArgument(format!(
                        "checkpoint root {root}: job {job} holds no checkpoint"
                    ))
                })?,
            };
            let bytes = to_savepoint(&storage, id, &out)?;
            println!(
                "wrote savepoint {} of checkpoint {id}: {bytes} bytes",
                out.display()
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The `list` lines of one job's part of a root; with `job`, a seventh column naming it.
fn list_job(storage: &CheckpointStorage, job: Option<&str>) -> Result<()> {
    for m in list_completed(storage)? {
        let (new, referenced) = m.files_new_and_referenced();
        let range = if m.key_group_range.is_empty() {
            "empty".to_string()
        } else {
            format!("{}-{}", m.key_group_range.start(), m.key_group_range.end())
        };
        let job = job.map(|j| format!("\t{j}")).unwrap_or_default();
        println!(
            "{}\t{}\t{}/{}\t{}\t{}\t{}{job}",
            m.checkpoint_id,
            range,
            new,
            referenced,
            m.bytes_uploaded(),
            m.state_size(),
            m.instance
        );
    }
    Ok(())
}
