//! `keyed-state checkpoint list | verify | gc | to-savepoint` (`design/checkpoints.md`, "Command line").

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;
use keyed_state::checkpoint::tools::{gc, verify};
use keyed_state::checkpoint::{list_completed, to_savepoint, CheckpointStorage};
use keyed_state::Result;

/// The checkpoint subcommands. ROOT is a directory or a URL (`file:///…`, `memory:///`, `s3://…`).
#[derive(Subcommand)]
pub enum CheckpointCommand {
    /// One line per completed checkpoint and instance: id, key-group range, files new/referenced, bytes
    /// uploaded, state size, instance (tab-separated).
    List {
        /// The checkpoint root.
        root: String,
    },
    /// Check that every referenced object is present, of the recorded size, with the recorded checksums.
    Verify {
        /// The checkpoint root.
        root: String,
        /// Only this checkpoint.
        #[arg(long)]
        id: Option<u64>,
    },
    /// Keep the newest N checkpoints; delete older metadata and every object no kept one references. Offline:
    /// no job may write to the root meanwhile.
    Gc {
        /// The checkpoint root.
        root: String,
        /// Checkpoint ids to keep.
        #[arg(long)]
        retain: usize,
        /// Print what would be deleted, delete nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Write a checkpoint (every instance) as one unified savepoint.
    ToSavepoint {
        /// The checkpoint root.
        root: String,
        /// The checkpoint id.
        #[arg(long)]
        id: u64,
        /// The savepoint file to write.
        #[arg(long)]
        out: PathBuf,
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

fn run(cmd: CheckpointCommand) -> Result<ExitCode> {
    match cmd {
        CheckpointCommand::List { root } => {
            let storage = CheckpointStorage::open_existing(&root)?;
            for m in list_completed(&storage)? {
                let (new, referenced) = m.files_new_and_referenced();
                let range = if m.key_group_range.is_empty() {
                    "empty".to_string()
                } else {
                    format!("{}-{}", m.key_group_range.start(), m.key_group_range.end())
                };
                println!(
                    "{}\t{}\t{}/{}\t{}\t{}\t{}",
                    m.checkpoint_id,
                    range,
                    new,
                    referenced,
                    m.bytes_uploaded(),
                    m.state_size(),
                    m.instance
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        CheckpointCommand::Verify { root, id } => {
            let storage = CheckpointStorage::open_existing(&root)?;
            let rep = verify(&storage, id)?;
            if rep.metadata_files == 0 {
                eprintln!(
                    "error: no checkpoint metadata{} in {root}",
                    id.map(|i| format!(" for checkpoint {i}"))
                        .unwrap_or_default()
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
        } => {
            let storage = CheckpointStorage::open_existing(&root)?;
            let rep = gc(&storage, retain, dry_run)?;
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
            Ok(ExitCode::SUCCESS)
        }
        CheckpointCommand::ToSavepoint { root, id, out } => {
            let storage = CheckpointStorage::open_existing(&root)?;
            let bytes = to_savepoint(&storage, id, &out)?;
            println!(
                "wrote savepoint {} of checkpoint {id}: {bytes} bytes",
                out.display()
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}
