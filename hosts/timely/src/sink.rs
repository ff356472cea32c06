//! The exactly-once file sink (`design/timely-host.md`, "Output").
//!
//! Worker `w` writes the rows of every epoch that checkpoint epoch `c` publishes to
//! `DIR/.part-<c>-<w>.inprogress`. Once its input frontier passes `c` the file is flushed and fsynced and
//! the sink's part of checkpoint `c` is done; when the checkpoint is confirmed the file is renamed to
//! `DIR/part-<c>-<w>` (committed). A restart commits the in-progress files of the checkpoints its restored
//! checkpoint covers (complete, and confirmed by the record) and deletes the others.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use timely::dataflow::channels::pact::Pipeline;
use timely::dataflow::operators::generic::Operator;
use timely::dataflow::StreamVec;

use crate::context::{PartDone, WorkerCtx};
use crate::error::{Error, Result};

const PREFIX: &str = "part-";
const IN_PROGRESS: &str = ".inprogress";

/// The committed name of worker `worker`'s output of checkpoint epoch `c`.
fn committed_name(c: u64, worker: usize) -> String {
    format!("{PREFIX}{c:010}-{worker:05}")
}

/// The in-progress name of it.
fn in_progress_name(c: u64, worker: usize) -> String {
    format!(".{}{IN_PROGRESS}", committed_name(c, worker))
}

/// The checkpoint epoch of an in-progress or committed name.
fn epoch_of(name: &str) -> Option<u64> {
    let n = name.strip_prefix('.').unwrap_or(name);
    let n = n.strip_suffix(IN_PROGRESS).unwrap_or(n);
    n.strip_prefix(PREFIX)?.split('-').next()?.parse().ok()
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(Error::io("syncing directory", dir))
}

/// What [`prepare_output`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Prepared {
    /// In-progress files committed (their checkpoint was complete).
    pub committed: usize,
    /// In-progress files removed (their checkpoint was not).
    pub removed: usize,
}

/// Readies `dir` for a run that starts after checkpoint epoch `restored` (`None`: from the beginning):
/// commits the in-progress files of complete checkpoints, removes the others, and refuses committed output
/// that no checkpoint accounts for. Runs in every process before the cluster connects (each step is
/// harmless to repeat).
pub fn prepare_output(dir: &Path, restored: Option<u64>) -> Result<Prepared> {
    std::fs::create_dir_all(dir).map_err(Error::io("creating output directory", dir))?;
    let mut p = Prepared::default();
    let entries = std::fs::read_dir(dir).map_err(Error::io("listing output directory", dir))?;
    for entry in entries {
        let entry = entry.map_err(Error::io("listing output directory", dir))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(c) = epoch_of(&name) else { continue };
        let path = entry.path();
        if name.starts_with('.') {
            if restored.is_some_and(|r| c <= r) {
                let to = dir.join(name.trim_start_matches('.').trim_end_matches(IN_PROGRESS));
                match std::fs::rename(&path, &to) {
                    Ok(()) => p.committed += 1,
                    // Another process of the restart committed it first.
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(Error::io("committing", &path)(e)),
                }
            } else {
                match std::fs::remove_file(&path) {
                    Ok(()) => p.removed += 1,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(Error::io("removing", &path)(e)),
                }
            }
        } else if restored.is_none_or(|r| c > r) {
            return Err(Error::Config(format!(
                "output directory {} holds committed output {name} that no complete checkpoint in the root \
                 covers (output of another job?): give an empty directory",
                dir.display()
            )));
        }
    }
    sync_dir(dir)?;
    Ok(p)
}

/// Commits this worker's flushed files of checkpoint epochs up to `c` (the checkpoint is confirmed).
pub fn commit(ctx: &WorkerCtx, c: u64) -> Result<()> {
    let ready: Vec<u64> = ctx
        .sink_pending
        .borrow()
        .range(..=c)
        .map(|(k, _)| *k)
        .collect();
    if ready.is_empty() {
        return Ok(());
    }
    for k in ready {
        let Some((from, to)) = ctx.sink_pending.borrow_mut().remove(&k) else {
            continue;
        };
        std::fs::rename(&from, &to).map_err(Error::io("committing", &from))?;
    }
    sync_dir(&ctx.spec.out)?;
    let mut s = ctx.stats.borrow_mut();
    if s.first_commit_micros.is_none() {
        s.first_commit_micros =
            Some(u64::try_from(ctx.run_started.elapsed().as_micros()).unwrap_or(u64::MAX));
    }
    Ok(())
}

/// The sink: writes `rows` (this worker's, no exchange) to in-progress files by checkpoint epoch and
/// finishes each file once the frontier passes its epoch.
pub fn files(rows: StreamVec<'_, u64, String>, ctx: &Rc<WorkerCtx>) {
    let ctx = Rc::clone(ctx);
    let last = ctx.spec.identity.events.last_epoch();
    let mut next_c = if ctx.start_epoch <= last {
        Some(ctx.spec.checkpoint_epoch_of(ctx.start_epoch))
    } else {
        None
    };
    let mut open: BTreeMap<u64, (BufWriter<File>, PathBuf)> = BTreeMap::new();
    rows.sink(Pipeline, "FileSink", move |(input, frontier)| {
        let mut failed = None;
        input.for_each_stamp(|cap, data| {
            let Some(&t) = cap.least() else { return };
            if failed.is_some() {
                return;
            }
            let c = ctx.spec.checkpoint_epoch_of(t);
            let w = match open.entry(c) {
                std::collections::btree_map::Entry::Occupied(o) => o.into_mut(),
                std::collections::btree_map::Entry::Vacant(v) => {
                    let path = ctx.spec.out.join(in_progress_name(c, ctx.worker));
                    match File::create(&path) {
                        Ok(f) => v.insert((BufWriter::with_capacity(1 << 16, f), path)),
                        Err(e) => {
                            failed = Some(Error::io("creating", &path)(e));
                            return;
                        }
                    }
                }
            };
            let mut n = 0u64;
            for batch in data {
                for row in batch.drain(..) {
                    n += 1;
                    if let Err(e) =
                        w.0.write_all(row.as_bytes())
                            .and_then(|()| w.0.write_all(b"\n"))
                    {
                        failed = Some(Error::io("writing", &w.1)(e));
                        return;
                    }
                }
            }
            ctx.stats.borrow_mut().rows += n;
        });
        if let Some(e) = failed {
            ctx.fail(&e);
            return;
        }
        while let Some(c) = next_c {
            if frontier.less_equal(&c) {
                break;
            }
            if let Some((w, path)) = open.remove(&c) {
                let done = w
                    .into_inner()
                    .map_err(|e| e.into_error())
                    .and_then(|f| f.sync_all())
                    .map_err(Error::io("flushing", &path));
                if let Err(e) = done {
                    ctx.fail(&e);
                    return;
                }
                let to = ctx.spec.out.join(committed_name(c, ctx.worker));
                ctx.sink_pending.borrow_mut().insert(c, (path, to));
            }
            ctx.part_done(PartDone {
                epoch: c,
                result: Ok(None),
            });
            next_c = if c >= last {
                None
            } else {
                Some(ctx.spec.checkpoint_epoch_of(c + 1))
            };
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        assert_eq!(epoch_of(&committed_name(42, 3)), Some(42));
        assert_eq!(epoch_of(&in_progress_name(42, 3)), Some(42));
        assert_eq!(epoch_of("README"), None);
        assert!(in_progress_name(1, 0).starts_with('.'));
    }

    #[test]
    fn restart_commits_covered_files_and_removes_the_rest() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join(committed_name(3, 0)), "a\n").unwrap();
        std::fs::write(d.path().join(in_progress_name(7, 0)), "b\n").unwrap();
        std::fs::write(d.path().join(in_progress_name(11, 1)), "c\n").unwrap();
        let p = prepare_output(d.path(), Some(7)).unwrap();
        assert_eq!(
            p,
            Prepared {
                committed: 1,
                removed: 1
            }
        );
        assert!(d.path().join(committed_name(7, 0)).exists());
        assert!(!d.path().join(in_progress_name(11, 1)).exists());
        // Committed output that no checkpoint covers is refused.
        assert!(prepare_output(d.path(), None).is_err());
    }
}
