//! Picking a compaction: the level targets (static, or dynamic as RocksDB's
//! `level_compaction_dynamic_level_bytes`), the score of each level, and which files of the
//! highest-scoring level go.

use std::sync::Arc;

use crate::options::{CompactionPriority, Options};
use crate::version::{FileMeta, Version};

use super::{key_range, Compaction};

/// Where L0 compacts to and how large each level may grow, computed from a version's level sizes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LevelTargets {
    /// The level L0 compacts into: 1 in static mode. In dynamic mode never deeper than the shallowest
    /// non-empty level L1+, so data compacted out of L0 (newer than anything in L1+) lands above or beside
    /// older data, never below it.
    pub base_level: usize,
    /// Target bytes per level (index = level); `u64::MAX` where size never triggers a compaction (L0, and in
    /// dynamic mode the levels above the base level, which are empty).
    pub targets: Vec<u64>,
    /// Dynamic mode: the deepest level the tree does not need any more for the size of its largest level
    /// (RocksDB's `lowest_unnecessary_level_`); the non-empty levels down to it are drained downwards, so that
    /// the base level can move down after the tree shrank.
    pub lowest_unnecessary: Option<usize>,
}

impl LevelTargets {
    /// The targets of `v` under `opts` (static or dynamic, per `opts.dynamic_level_bytes`).
    pub fn new(v: &Version, opts: &Options) -> LevelTargets {
        let base = opts.level_base_size.max(1);
        let mult = opts.level_multiplier.max(1);
        let bytes = v.level_bytes();
        let t = if opts.dynamic_level_bytes {
            dynamic_targets(&bytes, base, mult)
        } else {
            static_targets(bytes.len(), base, mult)
        };
        debug_assert!(
            (1..bytes.len()).all(|l| bytes[l] == 0 || l >= t.base_level),
            "base level {} below non-empty levels {bytes:?}",
            t.base_level
        );
        t
    }
}

/// Static targets: L1 = `base`, Ln = `base` * `mult`^(n-1); L0 compacts into L1.
fn static_targets(num_levels: usize, base: u64, mult: u64) -> LevelTargets {
    let mut targets = vec![u64::MAX; num_levels];
    let mut t = base;
    for target in targets.iter_mut().skip(1) {
        *target = t;
        t = t.saturating_mul(mult);
    }
    LevelTargets {
        base_level: 1,
        targets,
        lowest_unnecessary: None,
    }
}

/// Dynamic targets from the bytes per level, following RocksDB's `VersionStorageInfo::CalculateBaseBytes`
/// (dynamic branch, RocksDB 8.2+ with unnecessary levels; `base_bytes_max` = `level_base_size`):
///
/// * No data below L0: L0 compacts into the last level, no level has a size target.
/// * Otherwise, from the largest level L1+ (`max_level_size`, normally the last level) divide by `mult` once
///   per level up to the shallowest non-empty level. If that is `<= base_bytes_max / mult`, the tree has more
///   levels than it needs: the base level is the shallowest non-empty level (it cannot move down past data)
///   with target `base_bytes_max / mult + 1`, and the levels whose share fell to that size are
///   *unnecessary* (drained by compaction). Else the base level moves up from the shallowest non-empty level,
///   dividing by `mult` per level, while the size is still above `base_bytes_max` (and the base level is
///   below L1); its target is that size (at most `base_bytes_max`).
/// * Below the base level each target is `mult` times the one above; no target is set below
///   `base_bytes_max` (RocksDB's guard against an hourglass shape where L1+ targets are smaller than L0).
fn dynamic_targets(bytes: &[u64], base_bytes_max: u64, mult: u64) -> LevelTargets {
    let n = bytes.len();
    let last = n - 1;
    let mut targets = vec![u64::MAX; n];
    let Some(first_non_empty) = (1..n).find(|l| bytes[*l] > 0) else {
        return LevelTargets {
            base_level: last,
            targets,
            lowest_unnecessary: None,
        };
    };
    let max_level_size = bytes[1..].iter().copied().max().unwrap_or(0);
    let base_bytes_min = base_bytes_max / mult;
    let mut cur = max_level_size;
    let mut lowest_unnecessary = None;
    for level in (first_non_empty..last).rev() {
        cur /= mult;
        if lowest_unnecessary.is_none() && cur <= base_bytes_min {
            lowest_unnecessary = Some(level);
        }
    }
    let (base_level, base_level_size) = if cur <= base_bytes_min {
        (first_non_empty, base_bytes_min + 1)
    } else {
        let mut b = first_non_empty;
        while b > 1 && cur > base_bytes_max {
            b -= 1;
            cur /= mult;
        }
        (b, cur.clamp(1, base_bytes_max))
    };
    let mut size = base_level_size;
    for (level, target) in targets.iter_mut().enumerate().skip(base_level) {
        if level > base_level {
            size = size.saturating_mul(mult);
        }
        *target = size.max(base_bytes_max);
    }
    LevelTargets {
        base_level,
        targets,
        lowest_unnecessary,
    }
}

/// The level L0 compacts into in `v` under `opts`.
pub(crate) fn base_level(v: &Version, opts: &Options) -> usize {
    LevelTargets::new(v, opts).base_level
}

/// Factor by which urgent scores are scaled in dynamic mode (RocksDB's `kScoreScale`).
const SCORE_SCALE: f64 = 10.0;

/// Compaction score per level (last level excluded); >= 1 means the level needs compaction.
///
/// Static mode: L0 = sorted runs / `l0_compaction_trigger`; Ln = bytes / target.
///
/// Dynamic mode, as RocksDB's `ComputeCompactionScore`:
/// * L0: sorted runs ([`Version::l0_runs`]) / trigger, at least 1.01 once L0 holds `level_base_size` bytes, and at least
///   L0 bytes / max(base level bytes, base level target) when L0 outgrew the base level's target; scaled by
///   10 when above 1 (so that a backlogged L0 goes before the base level it feeds).
/// * Ln under its target: bytes / target. Over it: bytes / (target + bytes still to come down from the
///   levels above) * 10 — a level that is about to receive much data from above waits for it, and the
///   levels above go first.
/// * A non-empty level at or above the lowest unnecessary level scores at least 10.01 (a little more the
///   shallower it is), so unneeded levels drain downwards.
///
/// While L0 is held back from the base level ([`l0_plan`]), L0 scores as above if it has runs to merge
/// among themselves, else 0.
fn scores(v: &Version, opts: &Options, t: &LevelTargets) -> (Vec<f64>, L0Plan) {
    let bytes = v.level_bytes();
    let mut s = level_scores(&bytes, v.l0_runs, opts, t);
    let plan = l0_plan(v, &bytes, opts, t);
    if let (L0Plan::Hold(None), Some(s0)) = (&plan, s.first_mut()) {
        *s0 = 0.0;
    }
    (s, plan)
}

/// What L0's compaction does now.
enum L0Plan {
    /// Every L0 file goes into the base level (the leveled rule).
    Base,
    /// L0 is held back from the base level ([`Options::l0_base_ratio`]); these files, adjacent sorted runs
    /// ([`l0_merge_window`]), merge into one run within L0 (none: L0 has no work).
    Hold(Option<Vec<Arc<FileMeta>>>),
}

/// The size ratio of a merge within L0 in percent (as `size_ratio` of RocksDB's universal compaction, whose
/// default 1 would be 101 here): going from a newer run to older ones, a merge takes the next older run while
/// its bytes are at most this share of the bytes taken so far. Chosen by measurement against 101 and 200
/// (`design/lsm-many-states.md`).
const L0_SIZE_RATIO_PCT: u128 = 100;

/// The number of L0 sorted runs at which L0 goes into the base level even below
/// [`Options::l0_base_ratio`]: half the stop trigger, at least the compaction trigger (and 2, the fewest
/// runs a merge within L0 takes), never more than the run count at which writes stop (`DbInner::
/// writes_stopped_by_l0`): L0 held back never stops writes.
pub(crate) fn l0_run_cap(opts: &Options) -> usize {
    let stop = opts.l0_stop_writes_trigger.max(opts.l0_compaction_trigger);
    opts.l0_compaction_trigger
        .max(opts.l0_stop_writes_trigger / 2)
        .max(2)
        .min(stop)
}

/// L0's sorted runs newest first: the files of each (groups of L0 files whose seqno ranges overlap, as
/// [`crate::version::l0_runs`] counts them) and their bytes.
fn l0_run_groups(files: &[Arc<FileMeta>]) -> Vec<(Vec<Arc<FileMeta>>, u64)> {
    let mut sorted: Vec<&Arc<FileMeta>> = files.iter().collect();
    sorted.sort_by_key(|f| (f.info.min_seqno, f.info.max_seqno));
    let mut runs: Vec<(Vec<Arc<FileMeta>>, u64, u64)> = Vec::new();
    for f in sorted {
        match runs.last_mut() {
            Some((group, bytes, end)) if f.info.min_seqno <= *end => {
                group.push(Arc::clone(f));
                *bytes += f.info.size;
                *end = (*end).max(f.info.max_seqno);
            }
            _ => runs.push((vec![Arc::clone(f)], f.info.size, f.info.max_seqno)),
        }
    }
    runs.into_iter().rev().map(|(g, b, _)| (g, b)).collect()
}

/// Whether L0 goes into the base level or is held back and merges within itself (`design/lsm-many-states.md`):
/// held back while the base level holds bytes, L0 holds less than [`Options::l0_base_ratio`] of them and
/// fewer runs than [`l0_run_cap`]. Held back, its work is [`l0_merge_window`].
fn l0_plan(v: &Version, bytes: &[u64], opts: &Options, t: &LevelTargets) -> L0Plan {
    let base_bytes = bytes.get(t.base_level).copied().unwrap_or(0);
    let l0_bytes = bytes.first().copied().unwrap_or(0);
    let held = opts.l0_base_ratio > 0.0
        && t.base_level > 0
        && base_bytes > 0
        && (l0_bytes as f64) < opts.l0_base_ratio * base_bytes as f64
        && v.l0_runs < l0_run_cap(opts);
    if !held {
        return L0Plan::Base;
    }
    let runs = l0_run_groups(&v.levels[0]);
    let bytes: Vec<u64> = runs.iter().map(|r| r.1).collect();
    let window = l0_merge_window(&bytes, opts.l0_compaction_trigger.max(2));
    L0Plan::Hold(window.map(|w| runs[w].iter().flat_map(|r| r.0.iter().cloned()).collect()))
}

/// The runs a merge within L0 takes, by the size-ratio rule of RocksDB's universal compaction
/// (`UniversalCompactionBuilder::PickCompactionToReduceSortedRuns`): `runs` are L0's sorted runs' bytes,
/// newest first. From the newest run on, each run in turn starts a window, which takes the next older run
/// while that run's bytes are at most [`L0_SIZE_RATIO_PCT`] % of the bytes taken so far; the first window of
/// at least `width` runs is the merge (none: L0 has no work). So runs of similar size merge, and so do runs
/// of alternating sizes (a flush and a capture's file per checkpoint), while an old run larger than the
/// newer runs together is not rewritten for them: it is taken once they hold its bytes (runs double, as in
/// a binary counter).
fn l0_merge_window(runs: &[u64], width: usize) -> Option<std::ops::Range<usize>> {
    (0..runs.len()).find_map(|start| {
        let mut taken = runs[start];
        let mut end = start + 1;
        while let Some(&next) = runs.get(end) {
            if u128::from(next) * 100 > u128::from(taken.max(1)) * L0_SIZE_RATIO_PCT {
                break;
            }
            taken = taken.saturating_add(next);
            end += 1;
        }
        (end - start >= width).then_some(start..end)
    })
}

/// [`scores`] from the bytes per level and the number of L0 files.
fn level_scores(bytes: &[u64], l0_runs: usize, opts: &Options, t: &LevelTargets) -> Vec<f64> {
    let trigger = opts.l0_compaction_trigger.max(1) as f64;
    let l0_files = l0_runs as f64;
    let inner = 0..bytes.len().saturating_sub(1);
    if !opts.dynamic_level_bytes {
        return inner
            .map(|l| {
                if l == 0 {
                    l0_files / trigger
                } else {
                    bytes[l] as f64 / t.targets[l] as f64
                }
            })
            .collect();
    }
    let mut downcompact = 0.0f64;
    let mut out = Vec::with_capacity(inner.len());
    for l in inner {
        let b = bytes[l];
        let score = if l == 0 {
            downcompact += b as f64;
            let mut s = l0_files / trigger;
            if l0_files > 0.0 && b >= opts.level_base_size.max(1) {
                s = s.max(1.01);
            }
            let base_target = t.targets[t.base_level];
            if b > base_target {
                s = s.max(b as f64 / bytes[t.base_level].max(base_target) as f64);
            }
            if s > 1.0 {
                s *= SCORE_SCALE;
            }
            s
        } else {
            let target = t.targets[l];
            let mut s = if b < target {
                b as f64 / target as f64
            } else {
                b as f64 / (target as f64 + downcompact) * SCORE_SCALE
            };
            let unnecessary = t.lowest_unnecessary.filter(|lu| l <= *lu);
            if let Some(lu) = unnecessary {
                if b > 0 {
                    s = s.max(SCORE_SCALE * (1.001 + 0.001 * (lu - l) as f64));
                }
                downcompact += b as f64;
            } else if b > target {
                downcompact += (b - target) as f64;
            }
            s
        };
        out.push(score);
    }
    out
}

/// Whether automatic compaction has work: a level plan ([`next`], the decision [`pick`] carries out) or a
/// file to compact on its own ([`solo_file`]).
pub(crate) fn needs_compaction(v: &Version, opts: &Options) -> bool {
    opts.auto_compaction
        && (next(v, opts, &LevelTargets::new(v, opts)).is_some() || solo_file(v, opts).is_some())
}

/// Why a file is compacted on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Solo {
    /// The compaction filter would remove every entry (`CompactionFilterFactory::file_expired`).
    Expired,
    /// Written longer ago than the periodic bound (`CompactionFilterFactory::file_due_for_rewrite`).
    Periodic,
}

/// A file of L1 or deeper to compact on its own, judged from its properties without reading it: first one
/// the compaction filter would remove wholly now, else one due for a periodic rewrite; with its level.
pub(crate) fn solo_file(v: &Version, opts: &Options) -> Option<(usize, Arc<FileMeta>, Solo)> {
    let factory = opts
        .compaction_filter_factory
        .as_ref()
        .filter(|f| f.is_active())?;
    let find = |due: &dyn Fn(&FileMeta) -> bool, why: Solo| {
        v.levels.iter().enumerate().skip(1).find_map(|(l, files)| {
            files
                .iter()
                .find(|f| due(f))
                .map(|f| (l, Arc::clone(f), why))
        })
    };
    find(
        &|f| factory.file_expired(f.reader.properties()),
        Solo::Expired,
    )
    .or_else(|| {
        find(
            &|f| factory.file_due_for_rewrite(f.reader.properties()),
            Solo::Periodic,
        )
    })
}

/// Total size of the files of a sorted, non-overlapping level overlapping the user-key range `[lo, hi]`.
fn overlapping_bytes(level: &[Arc<FileMeta>], lo: &[u8], hi: &[u8]) -> u64 {
    let start = level.partition_point(|f| f.info.largest_user() < lo);
    level[start..]
        .iter()
        .take_while(|f| f.info.smallest_user() <= hi)
        .map(|f| f.info.size)
        .sum()
}

/// The file of `files` whose overlapping bytes in `next` divided by its own size are the smallest (the
/// first in key order on ties). Only one compaction runs at a time, so no file is already being compacted.
fn min_overlapping_file(files: &[Arc<FileMeta>], next: &[Arc<FileMeta>]) -> Option<Arc<FileMeta>> {
    let mut best: Option<(&Arc<FileMeta>, f64)> = None;
    for f in files {
        let overlap = overlapping_bytes(next, f.info.smallest_user(), f.info.largest_user());
        let ratio = overlap as f64 / f.info.size.max(1) as f64;
        if best.is_none_or(|(_, b)| ratio < b) {
            best = Some((f, ratio));
        }
    }
    best.map(|(f, _)| Arc::clone(f))
}

/// The file after the level's compaction pointer (wrapping around), moving the pointer past it.
fn round_robin_file(
    files: &[Arc<FileMeta>],
    pointer: Option<&mut Vec<u8>>,
) -> Option<Arc<FileMeta>> {
    let ptr = pointer.as_ref().map(|p| p.as_slice()).unwrap_or_default();
    let f = files
        .iter()
        .find(|f| f.info.smallest_user() > ptr)
        .or_else(|| files.first())?;
    if let Some(p) = pointer {
        *p = f.info.largest_user().to_vec();
    }
    Some(Arc::clone(f))
}

/// What automatic compaction does next on a version: the one decision behind both [`needs_compaction`] and
/// [`pick`], so that "compaction is needed" always comes with a compaction that makes progress.
enum Next {
    /// These L0 files, adjacent sorted runs (at least 2, [`l0_merge_window`]), merge into one run within L0:
    /// L0's run count falls by at least 1 (the merge writes one file, `run::merge_into`).
    L0Merge(Vec<Arc<FileMeta>>),
    /// Every L0 file goes into the base level: L0 is emptied.
    L0ToBase,
    /// One file of this level (L1+, not empty) goes into the next level: bytes move down.
    Level(usize),
}

/// The plan of the highest-scoring level with work (the shallowest on ties) among the levels scoring at
/// least 1. A level that scores but has no plan making progress (no file, or an L0 window of fewer than 2
/// runs) is passed over, never picked, so nothing is picked again and again without changing the tree.
fn next(v: &Version, opts: &Options, t: &LevelTargets) -> Option<Next> {
    let (scores, plan) = scores(v, opts, t);
    let mut due: Vec<(usize, f64)> = scores
        .into_iter()
        .enumerate()
        .filter(|(_, s)| *s >= 1.0)
        .collect();
    // Highest score first, the shallowest level on ties (a stable sort keeps level order on ties).
    due.sort_by(|a, b| b.1.total_cmp(&a.1));
    // L0's plan; it scores 0 when held back without work ([`scores`]).
    let mut l0 = match plan {
        L0Plan::Base => (!v.levels[0].is_empty()).then_some(Next::L0ToBase),
        L0Plan::Hold(Some(inputs)) => {
            (crate::version::l0_runs(&inputs) >= 2).then_some(Next::L0Merge(inputs))
        }
        L0Plan::Hold(None) => None,
    };
    for (level, _) in due {
        let found = match level {
            0 => l0.take(),
            l => (!v.levels[l].is_empty()).then_some(Next::Level(l)),
        };
        if found.is_some() {
            return found;
        }
    }
    None
}

/// The compaction [`next`] decides on; `pointers` are the levels' round-robin compaction pointers (the one
/// of the level compacted moves past the file taken).
pub(super) fn pick(v: &Version, opts: &Options, pointers: &mut [Vec<u8>]) -> Option<Compaction> {
    let t = LevelTargets::new(v, opts);
    let (level, output_level, inputs) = match next(v, opts, &t)? {
        // Adjacent runs merge into one run within L0.
        Next::L0Merge(inputs) => {
            return Some(Compaction {
                level: 0,
                output_level: 0,
                inputs,
                next: Vec::new(),
                manual: false,
            })
        }
        Next::L0ToBase => (0, t.base_level, v.levels[0].clone()),
        Next::Level(level) => {
            let files = &v.levels[level];
            let output_level = level + 1;
            let f = match opts.compaction_priority {
                CompactionPriority::MinOverlappingRatio => {
                    min_overlapping_file(files, &v.levels[output_level])
                }
                CompactionPriority::RoundRobin => round_robin_file(files, pointers.get_mut(level)),
            }?;
            (level, output_level, vec![f])
        }
    };
    let (lo, hi) = key_range(&inputs)?;
    let next = v.overlapping(output_level, &lo, &hi);
    Some(Compaction {
        level,
        output_level,
        inputs,
        next,
        manual: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::Db;
    use crate::sst::{Compression, SstOptions};

    const MIB: u64 = 1 << 20;

    /// Bytes per level of a 7-level tree.
    fn sizes(levels: &[(usize, u64)]) -> Vec<u64> {
        let mut b = vec![0; 7];
        for (l, n) in levels {
            b[*l] = *n;
        }
        b
    }

    #[test]
    fn dynamic_targets_follow_rocksdb_calculate_base_bytes() {
        let (base, mult) = (256 * MIB, 10);
        // Nothing below L0: L0 compacts into the last level, no level has a target.
        let t = dynamic_targets(&sizes(&[(0, 5 * MIB)]), base, mult);
        assert_eq!(t.base_level, 6);
        assert!(t.targets.iter().all(|x| *x == u64::MAX));
        assert_eq!(t.lowest_unnecessary, None);
        // A last level under the base size is the base level; no target is below the base size.
        let t = dynamic_targets(&sizes(&[(6, 100 * MIB)]), base, mult);
        assert_eq!(
            (t.base_level, t.targets[6], t.targets[5]),
            (6, base, u64::MAX)
        );
        // Past the base size the base level moves up.
        let t = dynamic_targets(&sizes(&[(6, 1000 * MIB)]), base, mult);
        assert_eq!(t.base_level, 5);
        assert_eq!(&t.targets[4..], &[u64::MAX, base, 1000 * MIB]);
        // Last level 30000 MiB: each level above 10x smaller, up to the first one under the base size.
        let t = dynamic_targets(&sizes(&[(5, 1000 * MIB), (6, 30000 * MIB)]), base, mult);
        assert_eq!(t.base_level, 3);
        assert_eq!(
            &t.targets[2..],
            &[u64::MAX, base, 300 * MIB, 3000 * MIB, 30000 * MIB]
        );
        assert_eq!(t.lowest_unnecessary, None);
        // The tree shrank under data left in L2: the base level stays at L2 (never below data), and the
        // levels whose share fell under base / mult are unnecessary, to be drained.
        let t = dynamic_targets(&sizes(&[(2, MIB), (6, 100 * MIB)]), base, mult);
        assert_eq!((t.base_level, t.lowest_unnecessary), (2, Some(5)));
        assert_eq!(t.targets[1], u64::MAX);
        assert!(t.targets[2..].iter().all(|x| *x >= base));
        // A tree written with static targets (L1, L2) opened with dynamic ones: base at L1, L1..L4 drained.
        let t = dynamic_targets(&sizes(&[(1, 200 * MIB), (2, 2000 * MIB)]), base, mult);
        assert_eq!((t.base_level, t.lowest_unnecessary), (1, Some(4)));
    }

    #[test]
    fn dynamic_scores_put_a_backlogged_l0_first_and_drain_unnecessary_levels() {
        let opts = Options {
            l0_compaction_trigger: 4,
            ..Options::default()
        };
        let base = opts.level_base_size;
        // L0 at its trigger and the base level (L5) just over its target: the base level goes first.
        let b = sizes(&[(0, 100 * MIB), (5, 300 * MIB), (6, 1000 * MIB)]);
        let t = dynamic_targets(&b, base, 10);
        let s = level_scores(&b, 4, &opts, &t);
        assert_eq!(s[0], 1.0);
        assert!(s[5] > 1.0, "{s:?}");
        // One more L0 file: L0's score is scaled up and goes before the base level.
        let s = level_scores(&b, 5, &opts, &t);
        assert!(s[0] > s[5], "{s:?}");
        // L0 larger than `level_base_size` scores at least 10.1 even under its file trigger.
        let b = sizes(&[(0, base), (6, 1000 * MIB)]);
        let t = dynamic_targets(&b, base, 10);
        assert!(level_scores(&b, 2, &opts, &t)[0] >= 10.1);
        // Unnecessary levels with data score above 10, the shallower higher.
        let b = sizes(&[(2, MIB), (4, MIB), (6, 100 * MIB)]);
        let t = dynamic_targets(&b, base, 10);
        let s = level_scores(&b, 0, &opts, &t);
        assert!(s[2] > s[4] && s[4] > 10.0, "{s:?}");
        assert_eq!((s[1], s[3], s[5]), (0.0, 0.0, 0.0));
        // Static mode: bytes / target.
        let opts = Options {
            dynamic_level_bytes: false,
            ..opts
        };
        let t = static_targets(7, base, 10);
        let b = sizes(&[(1, base / 2), (2, base * 20)]);
        assert_eq!(&level_scores(&b, 2, &opts, &t)[..3], &[0.5, 0.5, 2.0]);
    }

    /// Writes each group of keys and flushes it into one L0 file; returns the files in the order of `groups`.
    fn flushed_files(db: &Db, groups: &[Vec<String>]) -> Vec<Arc<FileMeta>> {
        for g in groups {
            for k in g {
                db.put(k.as_bytes(), &[b'v'; 100]).unwrap();
            }
            db.flush().unwrap();
        }
        let v = Arc::clone(&db.inner().state.lock().version);
        let mut files = v.levels[0].clone();
        files.reverse();
        assert_eq!(files.len(), groups.len());
        files
    }

    fn keys(prefix: &str, range: std::ops::Range<u32>) -> Vec<String> {
        range.map(|i| format!("{prefix}{i:03}")).collect()
    }

    #[test]
    fn min_overlapping_ratio_picks_the_least_overlapping_file() {
        for dynamic in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let opts = Options {
                auto_compaction: false,
                num_levels: 3,
                level_base_size: 1,
                dynamic_level_bytes: dynamic,
                sst: SstOptions {
                    compression: Compression::None,
                    ..SstOptions::default()
                },
                ..Options::default()
            };
            let db = Db::open(dir.path(), opts.clone()).unwrap();
            let f = flushed_files(
                &db,
                &[
                    keys("a", 0..100), // p: L2
                    keys("c", 0..20),  // q: L2
                    keys("a", 10..20), // x: L1, overlaps all of p (ratio ~10)
                    keys("b", 0..10),  // y: L1, overlaps nothing (ratio 0)
                    keys("c", 0..40),  // z: L1, overlaps q (ratio ~0.5)
                ],
            );
            let [p, q, x, y, z] = [0, 1, 2, 3, 4].map(|i| Arc::clone(&f[i]));
            let numbers = |files: &[Arc<FileMeta>]| -> Vec<u64> {
                files.iter().map(|f| f.info.number).collect()
            };
            let mut pointers = vec![Vec::new(); 3];
            let v = Version::from_levels(vec![
                vec![],
                vec![x.clone(), y.clone(), z.clone()],
                vec![p.clone(), q.clone()],
            ]);
            let c = pick(&v, &opts, &mut pointers).unwrap();
            assert_eq!((c.level, c.output_level), (1, 2));
            assert_eq!(numbers(&c.inputs), numbers(&[y]), "dynamic {dynamic}");
            assert!(c.next.is_empty());
            // Without the file that overlaps nothing: the one rewriting the fewest bytes per byte moved.
            let v = Version::from_levels(vec![
                vec![],
                vec![x.clone(), z.clone()],
                vec![p.clone(), q.clone()],
            ]);
            let c = pick(&v, &opts, &mut pointers).unwrap();
            assert_eq!(numbers(&c.inputs), numbers(&[z]), "dynamic {dynamic}");
            assert_eq!(numbers(&c.next), numbers(&[q]));
            // Round robin takes the first file in key order instead.
            let rr = Options {
                compaction_priority: CompactionPriority::RoundRobin,
                ..opts.clone()
            };
            let c = pick(&v, &rr, &mut pointers).unwrap();
            assert_eq!(numbers(&c.inputs), numbers(&[x]));
            assert_eq!(numbers(&c.next), numbers(&[p]));
        }
    }

    fn numbers(files: &[Arc<FileMeta>]) -> Vec<u64> {
        let mut n: Vec<u64> = files.iter().map(|f| f.info.number).collect();
        n.sort_unstable();
        n
    }

    /// A database whose flushes are not compacted (kept open, as the files' owner), the options the picks
    /// below use (trigger 4, stop 20: run cap 10), and the files of `groups` flushed in that order (oldest
    /// first).
    fn tiering_files(
        groups: &[Vec<String>],
        dynamic: bool,
    ) -> (tempfile::TempDir, Db, Options, Vec<Arc<FileMeta>>) {
        let dir = tempfile::tempdir().unwrap();
        let opts = Options {
            auto_compaction: false,
            num_levels: 3,
            dynamic_level_bytes: dynamic,
            l0_base_ratio: 0.25,
            sst: SstOptions {
                compression: Compression::None,
                ..SstOptions::default()
            },
            ..Options::default()
        };
        let db = Db::open(dir.path(), opts.clone()).unwrap();
        let files = flushed_files(&db, groups);
        (dir, db, opts, files)
    }

    /// The base level (L2 with dynamic level sizing, L1 with static) holding `base`, L0 holding `l0`.
    fn tree(base: &Arc<FileMeta>, l0: &[Arc<FileMeta>], dynamic: bool) -> Version {
        let (l1, l2) = if dynamic {
            (vec![], vec![Arc::clone(base)])
        } else {
            (vec![Arc::clone(base)], vec![])
        };
        Version::from_levels(vec![l0.to_vec(), l1, l2])
    }

    #[test]
    fn small_runs_merge_within_l0_while_l0_is_small_against_the_base_level() {
        for dynamic in [true, false] {
            // The base level: 12000 keys. L0 runs: 3 old ones of 400 keys, then 5 of 20.
            let mut groups = vec![[keys("k", 0..6000), keys("m", 0..6000)].concat()];
            groups.extend((0..3).map(|i| keys(&format!("k{i}"), 0..400)));
            groups.extend((0..5).map(|i| keys(&format!("m{i}"), 0..20)));
            let (_dir, _db, opts, f) = tiering_files(&groups, dynamic);
            let (base, big, small) = (&f[0], &f[1..4], &f[4..]);
            let mut ptr = vec![Vec::new(); 3];
            let base_level = if dynamic { 2 } else { 1 };
            // 3 small runs over 3 big ones: 6 runs; the small ones end at a big one (more bytes than
            // they hold together), the big ones are 3: no window of 4, L0 has no work.
            let v = tree(base, &[big, &small[..3]].concat(), dynamic);
            assert!(pick(&v, &opts, &mut ptr).is_none(), "dynamic {dynamic}");
            assert!(!needs_compaction(&v, &opts));
            // A 4th small run: the 4 newest merge within L0, the big ones and the base level untouched.
            let v = tree(base, &[big, &small[..4]].concat(), dynamic);
            let c = pick(&v, &opts, &mut ptr).unwrap();
            assert_eq!((c.level, c.output_level), (0, 0));
            assert_eq!(numbers(&c.inputs), numbers(&small[..4]));
            assert!(c.next.is_empty());
            // 5 small runs: all 5 (each at most the bytes of the newer ones), not the big ones.
            let v = tree(base, &[big, small].concat(), dynamic);
            let c = pick(&v, &opts, &mut ptr).unwrap();
            assert_eq!(numbers(&c.inputs), numbers(small));
            // Off: L0 goes into the base level at 4 runs.
            let off = Options {
                l0_base_ratio: 0.0,
                ..opts.clone()
            };
            let v = tree(base, &[&big[..1], &small[..3]].concat(), dynamic);
            let c = pick(&v, &off, &mut ptr).unwrap();
            assert_eq!((c.level, c.output_level), (0, base_level));
            assert_eq!(c.inputs.len(), 4);
            assert_eq!(numbers(&c.next), numbers(&[Arc::clone(base)]));
            // L0 (about 10 % of the base level's bytes) past a ratio of 5 %: into the base level.
            let low = Options {
                l0_base_ratio: 0.05,
                ..opts.clone()
            };
            let v = tree(base, &[big, &small[..1]].concat(), dynamic);
            let c = pick(&v, &low, &mut ptr).unwrap();
            assert_eq!(
                (c.level, c.output_level),
                (0, base_level),
                "dynamic {dynamic}"
            );
        }
    }

    #[test]
    fn l0_goes_to_the_base_level_at_the_run_cap_and_without_a_base_level() {
        // Runs of 60, 5, 60 and 5 keys (oldest first) never make a merge window of 4 (a 60 ends a window
        // started by the 5 after it); with stop trigger 8 the cap is 4 runs, where L0 goes down.
        let mut groups = vec![keys("a", 0..4000)];
        groups.extend((0..4).map(|i| keys(&format!("b{i}"), 0..if i % 2 == 0 { 60 } else { 5 })));
        let (_dir, _db, opts, f) = tiering_files(&groups, true);
        assert_eq!(l0_run_cap(&opts), 10);
        let opts = Options {
            l0_stop_writes_trigger: 8,
            ..opts
        };
        assert_eq!(l0_run_cap(&opts), 4);
        // Never at or above the run count at which writes stop (a held L0 would stop them for good).
        for trigger in 0..8 {
            for stop in 0..24 {
                let o = Options {
                    l0_compaction_trigger: trigger,
                    l0_stop_writes_trigger: stop,
                    ..Options::default()
                };
                assert!(l0_run_cap(&o) <= stop.max(trigger), "{trigger}/{stop}");
            }
        }
        let mut ptr = vec![Vec::new(); 3];
        let v = tree(&f[0], &f[1..4], true);
        assert!(pick(&v, &opts, &mut ptr).is_none());
        let v = tree(&f[0], &f[1..], true);
        let c = pick(&v, &opts, &mut ptr).unwrap();
        assert_eq!((c.level, c.output_level, c.inputs.len()), (0, 2, 4));
        // Nothing below L0: L0 goes into the last level at the trigger.
        let v = Version::from_levels(vec![f[1..5].to_vec(), vec![], vec![]]);
        let c = pick(&v, &opts, &mut ptr).unwrap();
        assert_eq!((c.level, c.output_level), (0, 2));
    }
    #[test]
    fn alternating_run_sizes_merge_within_l0() {
        // A flush and a capture's file per checkpoint, newest first: the pairs' sizes differ by a little
        // more than 2 in places, which a rule on largest / smallest never merged.
        let runs = [410, 830, 390, 820, 400, 800];
        assert_eq!(l0_merge_window(&runs, 4), Some(1..6));
        assert_eq!(l0_merge_window(&runs[..4], 4), None);
        // The same with files: runs alternating 60 and 20 keys over a base level of 12000.
        let mut groups = vec![[keys("k", 0..6000), keys("m", 0..6000)].concat()];
        groups.extend((0..6).map(|i| keys(&format!("b{i}"), 0..if i % 2 == 0 { 60 } else { 20 })));
        let (_dir, _db, opts, f) = tiering_files(&groups, true);
        let mut ptr = vec![Vec::new(); 3];
        let c = pick(&tree(&f[0], &f[1..], true), &opts, &mut ptr).unwrap();
        assert_eq!((c.level, c.output_level), (0, 0));
        assert!(c.inputs.len() >= 4, "{}", c.inputs.len());
        assert!(c.next.is_empty());
    }

    #[test]
    fn a_big_old_run_is_not_rewritten_for_a_few_small_ones() {
        // Newest first: small runs over one big old run.
        assert_eq!(l0_merge_window(&[10, 10, 10, 100], 4), None);
        assert_eq!(l0_merge_window(&[10, 10, 10, 10, 100], 4), Some(0..4));
        assert_eq!(l0_merge_window(&[10, 10, 10, 10, 10, 100], 4), Some(0..5));
        // Once the small ones hold its bytes, the big run is taken with them.
        let ten_over = |big: u64| [[10; 10].as_slice(), &[big]].concat();
        assert_eq!(l0_merge_window(&ten_over(100), 4), Some(0..11));
        assert_eq!(l0_merge_window(&ten_over(101), 4), Some(0..10));
        // Similar sizes merge; a window needs `width` runs.
        assert_eq!(l0_merge_window(&[5, 5, 5, 5], 4), Some(0..4));
        assert_eq!(l0_merge_window(&[5, 5, 5], 4), None);
        assert_eq!(l0_merge_window(&[], 2), None);
        assert_eq!(l0_merge_window(&[0, 0], 2), Some(0..2));
    }
}
