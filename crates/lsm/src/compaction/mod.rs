//! Leveled compaction: picking, the snapshot-aware merge of versions (with merge operator, compaction
//! filter and range tombstones), trivial moves, and manual full/range compaction.
//!
//! Invariants kept: L0 files may overlap and are ordered newest first; in L1+ files do not overlap; for any
//! user key, newer data sits in a shallower place (memtables, then L0 newest first, then L1, L2, ...).
//! Compactions move data from level `n >= 1` to `n + 1`; an L0 compaction takes every L0 file into the base
//! level (L1 with static level targets; with dynamic ones the shallowest level the tree needs, never below a
//! non-empty level, the levels above it being empty).
//!
//! [`pick`] chooses what to compact (level scores, static or dynamic level targets, which file of a level);
//! [`run`] carries a compaction out (the merge of its inputs into new files, or a trivial move) and
//! installs the result.

use std::sync::Arc;

use super::inner::DbInner;
use super::version::FileMeta;
use super::LsmError;

mod pick;
mod run;

pub(crate) use pick::{base_level, needs_compaction};

type Result<T> = std::result::Result<T, LsmError>;

/// One compaction: `inputs` from `level` plus the overlapping `next` files of `output_level`.
pub(crate) struct Compaction {
    /// The level the compaction takes its inputs from.
    pub level: usize,
    /// `level + 1`, except for L0, which compacts into the base level.
    pub output_level: usize,
    /// The files taken from `level`.
    pub inputs: Vec<Arc<FileMeta>>,
    /// The files of `output_level` overlapping the inputs' key range.
    pub next: Vec<Arc<FileMeta>>,
    /// Whether a manual compaction asked for it (never a trivial move).
    pub manual: bool,
}

/// The user-key range `[smallest, largest]` the files span (None for no files).
pub(crate) fn key_range(files: &[Arc<FileMeta>]) -> Option<(Vec<u8>, Vec<u8>)> {
    let lo = files.iter().map(|f| f.info.smallest_user()).min()?;
    let hi = files.iter().map(|f| f.info.largest_user()).max()?;
    Some((lo.to_vec(), hi.to_vec()))
}

/// Runs one automatically picked compaction, if any; `Ok(false)` when the compaction lock is held (by a
/// manual compaction, an ingestion, a range delete dropping files or a wait for background work, each of
/// which wakes the engine when it lets go), `Ok(true)` otherwise.
pub(crate) fn run_auto(db: &DbInner) -> Result<bool> {
    let Some(mut pointers) = db.compaction_lock.try_lock() else {
        return Ok(false);
    };
    let (version, paused) = {
        let st = db.state.lock();
        (Arc::clone(&st.version), db.auto_compaction_paused(&st))
    };
    // A manual compaction asked for the lock meanwhile: it goes first (it rewrites what this one would).
    if paused {
        return Ok(true);
    }
    if let Some(c) = pick::pick(&version, &db.opts, &mut pointers) {
        run::run(db, &version, c)?;
    } else if let Some((level, file, why)) = pick::solo_file(&version, &db.opts) {
        if why == pick::Solo::Expired && run::droppable(db, &version, level, &file) {
            // Wholly expired with nothing below it: removed from the version without being read.
            run::drop_expired(db, level, file)?;
        } else {
            // Rewritten on its own within its level: an expired file to nothing or only tombstones, a file
            // due for its periodic rewrite to what the filter keeps of it.
            run::merge_into(db, &version, &[(level, file)], level, false)?;
        }
    }
    Ok(true)
}

/// Manual compaction: all files into one level in one compaction (the last level with dynamic level sizing,
/// else the deepest non-empty level >= 1), or, for a range, level by level over the files overlapping it (L0
/// into the base level, then each level into the next).
pub(crate) fn run_manual(db: &DbInner, range: Option<(&[u8], &[u8])>) -> Result<()> {
    let _g = db.compaction_lock.lock();
    let num_levels = db.opts.num_levels;
    let Some((lo, hi)) = range else {
        let version = Arc::clone(&db.state.lock().version);
        let target = if db.opts.dynamic_level_bytes {
            num_levels - 1
        } else {
            (1..num_levels)
                .rev()
                .find(|l| !version.levels[*l].is_empty())
                .unwrap_or(1)
        };
        let all: Vec<(usize, Arc<FileMeta>)> =
            version.files().map(|(l, f)| (l, Arc::clone(f))).collect();
        if all.is_empty() {
            return Ok(());
        }
        return run::merge_into(db, &version, &all, target, true);
    };
    for level in 0..num_levels - 1 {
        let version = Arc::clone(&db.state.lock().version);
        let deepest = (1..num_levels)
            .rev()
            .find(|l| !version.levels[*l].is_empty())
            .unwrap_or(0);
        if level >= deepest && level > 0 {
            break;
        }
        let mut inputs = version.overlapping(level, lo, hi);
        if inputs.is_empty() {
            continue;
        }
        let output_level = if level == 0 {
            inputs = version.levels[0].clone();
            base_level(&version, &db.opts)
        } else {
            level + 1
        };
        let Some((a, b)) = key_range(&inputs) else {
            continue;
        };
        let next = version.overlapping(output_level, &a, &b);
        run::run(
            db,
            &version,
            Compaction {
                level,
                output_level,
                inputs,
                next,
                manual: true,
            },
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod progress_tests;
