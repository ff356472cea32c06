//! Leveled compaction: picking, the snapshot-aware merge of versions (with merge operator, compaction
//! filter and range tombstones), trivial moves, and manual full/range compaction.
//!
//! Invariants kept: L0 files may overlap and are ordered newest first; in L1+ files do not overlap; for any
//! user key, newer data sits in a shallower place (memtables, then L0 newest first, then L1, L2, ...).
//! Compactions move data from level `n >= 1` to `n + 1`; an L0 compaction takes every L0 file into the base
//! level (L1 with static level targets; with dynamic ones the shallowest level the tree needs, never below a
//! non-empty level, the levels above it being empty).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::filter::{CompactionFilter, CompactionFilterContext, FilterDecision, FilterEntryKind};
use super::flush::Outputs;
use super::ikey::{self, ValueKind};
use super::iter::{full_merge, InternalIterator, MergingIter};
use super::options::{CompactionPriority, Options};
use super::rangedel::RangeTombstone;
use super::state::DbInner;
use super::version::{FileMeta, Version, VersionEdit};
use super::LsmError;

type Result<T> = std::result::Result<T, LsmError>;

/// One compaction: `inputs` from `level` plus the overlapping `next` files of `output_level`.
pub(crate) struct Compaction {
    pub level: usize,
    /// `level + 1`, except for L0, which compacts into the base level.
    pub output_level: usize,
    pub inputs: Vec<Arc<FileMeta>>,
    pub next: Vec<Arc<FileMeta>>,
    pub manual: bool,
}

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
/// Static mode: L0 = files / `l0_compaction_trigger`; Ln = bytes / target.
///
/// Dynamic mode, as RocksDB's `ComputeCompactionScore`:
/// * L0: files / trigger, at least 1.01 once L0 holds `level_base_size` bytes, and at least
///   L0 bytes / max(base level bytes, base level target) when L0 outgrew the base level's target; scaled by
///   10 when above 1 (so that a backlogged L0 goes before the base level it feeds).
/// * Ln under its target: bytes / target. Over it: bytes / (target + bytes still to come down from the
///   levels above) * 10 — a level that is about to receive much data from above waits for it, and the
///   levels above go first.
/// * A non-empty level at or above the lowest unnecessary level scores at least 10.01 (a little more the
///   shallower it is), so unneeded levels drain downwards.
fn scores(v: &Version, opts: &Options, t: &LevelTargets) -> Vec<f64> {
    level_scores(&v.level_bytes(), v.levels[0].len(), opts, t)
}

/// [`scores`] from the bytes per level and the number of L0 files.
fn level_scores(bytes: &[u64], l0_files: usize, opts: &Options, t: &LevelTargets) -> Vec<f64> {
    let trigger = opts.l0_compaction_trigger.max(1) as f64;
    let l0_files = l0_files as f64;
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

/// Whether automatic compaction has work.
pub(crate) fn needs_compaction(v: &Version, opts: &Options) -> bool {
    opts.auto_compaction
        && scores(v, opts, &LevelTargets::new(v, opts))
            .iter()
            .any(|s| *s >= 1.0)
}

/// The user-key range `[smallest, largest]` the files span (None for no files).
pub(crate) fn key_range(files: &[Arc<FileMeta>]) -> Option<(Vec<u8>, Vec<u8>)> {
    let lo = files.iter().map(|f| f.info.smallest_user()).min()?;
    let hi = files.iter().map(|f| f.info.largest_user()).max()?;
    Some((lo.to_vec(), hi.to_vec()))
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

fn pick(v: &Version, opts: &Options, pointers: &mut [Vec<u8>]) -> Option<Compaction> {
    let t = LevelTargets::new(v, opts);
    // The highest score, the shallowest level on ties.
    let mut best: Option<(usize, f64)> = None;
    for (l, s) in scores(v, opts, &t).into_iter().enumerate() {
        if best.is_none_or(|(_, b)| s > b) {
            best = Some((l, s));
        }
    }
    let (level, score) = best?;
    if score < 1.0 {
        return None;
    }
    let output_level = if level == 0 { t.base_level } else { level + 1 };
    let inputs: Vec<Arc<FileMeta>> = if level == 0 {
        v.levels[0].clone()
    } else {
        let files = &v.levels[level];
        let f = match opts.compaction_priority {
            CompactionPriority::MinOverlappingRatio => {
                min_overlapping_file(files, &v.levels[output_level])
            }
            CompactionPriority::RoundRobin => round_robin_file(files, pointers.get_mut(level)),
        }?;
        vec![f]
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

/// Runs one automatically picked compaction, if any.
pub(crate) fn run_auto(db: &DbInner) -> Result<()> {
    let mut pointers = db.compaction_lock.lock();
    let (version, paused) = {
        let st = db.state.lock();
        (Arc::clone(&st.version), db.auto_compaction_paused(&st))
    };
    // A manual compaction asked for the lock meanwhile: it goes first (it rewrites what this one would).
    if paused {
        return Ok(());
    }
    if let Some(c) = pick(&version, &db.opts, &mut pointers) {
        run(db, &version, c)?;
    }
    Ok(())
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
        return merge_into(db, &version, &all, target, true);
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
        run(
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

fn run(db: &DbInner, version: &Version, c: Compaction) -> Result<()> {
    let out_level = c.output_level;
    let trivial = !c.manual && c.next.is_empty() && (c.level > 0 || c.inputs.len() == 1);
    if trivial {
        let deleted: Vec<(usize, Arc<FileMeta>)> =
            c.inputs.iter().map(|f| (c.level, Arc::clone(f))).collect();
        let added: Vec<(usize, Arc<FileMeta>)> = c
            .inputs
            .iter()
            .map(|f| (out_level, Arc::clone(f)))
            .collect();
        db.log_and_apply(VersionEdit::default(), &deleted, &added, false)?;
        db.counters.trivial_moves.fetch_add(1, Ordering::Relaxed);
        return Ok(());
    }
    let mut all: Vec<(usize, Arc<FileMeta>)> =
        c.inputs.iter().map(|f| (c.level, Arc::clone(f))).collect();
    all.extend(c.next.iter().map(|f| (out_level, Arc::clone(f))));
    merge_into(db, version, &all, out_level, c.manual)
}

/// Stripe of a seqno: index of the oldest snapshot that sees it (`snaps.len()` if none).
fn stripe(snaps: &[u64], seq: u64) -> usize {
    snaps.partition_point(|s| *s < seq)
}

/// Merges `inputs` (level, file) into new files at `out_level` and installs the result.
fn merge_into(
    db: &DbInner,
    version: &Version,
    inputs: &[(usize, Arc<FileMeta>)],
    out_level: usize,
    manual: bool,
) -> Result<()> {
    let files: Vec<Arc<FileMeta>> = inputs.iter().map(|(_, f)| Arc::clone(f)).collect();
    let Some((lo, hi)) = key_range(&files) else {
        return Ok(());
    };
    let is_input = |f: &Arc<FileMeta>| files.iter().any(|g| g.info.number == f.info.number);
    let bottommost = version
        .files()
        .filter(|(l, f)| *l > out_level && !is_input(f))
        .all(|(_, f)| !f.info.overlaps(&lo, &hi));
    let mut snaps = db.snapshots.seqnos();
    snaps.sort_unstable();
    // The range tombstones that may cover input entries: every one in the version overlapping the inputs' key
    // range, not only the inputs' own. A file's key range covers a tombstone's start key only, so a file holding
    // a tombstone over an input key can lie outside the compaction (beside an input file, in its level or in
    // the output level); without its tombstone, operands newer than it would be merged into a value it deleted.
    let tombs: Vec<RangeTombstone> = version
        .range_dels
        .iter()
        .filter(|t| t.overlaps(&lo, &hi))
        .cloned()
        .collect();
    let mut filter = db.opts.compaction_filter_factory.as_ref().map(|f| {
        f.create(&CompactionFilterContext {
            output_level: out_level,
            bottommost,
            manual,
        })
    });
    let ctx = MergeCtx {
        db,
        snaps: &snaps,
        tombs: &tombs,
        bottommost,
    };
    // Sort inputs newest first (L0 newest first, then by level) for the merging iterator's tie order.
    let mut ordered: Vec<&(usize, Arc<FileMeta>)> = inputs.iter().collect();
    ordered.sort_by(|a, b| {
        a.0.cmp(&b.0)
            .then(b.1.info.max_seqno.cmp(&a.1.info.max_seqno))
    });
    let children: Vec<Box<dyn InternalIterator>> = ordered
        .iter()
        .map(|(_, f)| Box::new(f.reader.iter()) as Box<dyn InternalIterator>)
        .collect();
    let mut it = MergingIter::new(children);
    it.seek_to_first()?;
    let mut out = Outputs::new(db, Some(db.opts.target_file_size));
    let mut entries: Vec<(u64, ValueKind, Vec<u8>)> = Vec::new();
    // Value buffers of resolved keys, reused so that the copy of each input value does not allocate.
    let mut pool: Vec<Vec<u8>> = Vec::new();
    let mut cur_key: Vec<u8> = Vec::new();
    let mut ikey_buf = Vec::new();
    let plain = filter.is_none() && tombs.is_empty();
    // Like RocksDB, a lone value at the bottom that every snapshot sees is written with seqno 0: the
    // trailers of a compacted level then compress to almost nothing. Only without any range tombstone in the
    // tree (one older than the value could otherwise start to cover it); tombstones written later are newer
    // than every input.
    let zero_seqnos = bottommost && {
        let sv = db.current_sv();
        sv.version.range_dels.is_empty()
            && sv.mems.iter().all(|m| m.with_range_dels(|t| t.is_empty()))
    };
    let oldest_snapshot = snaps.first().copied();
    loop {
        let at_end = !it.valid();
        let same_key = !at_end && ikey::user_key(it.key()) == cur_key.as_slice();
        if !same_key && !entries.is_empty() {
            match entries.as_slice() {
                // Fast path: a lone value with no filter and no range tombstone is kept as it is (what
                // `resolve` yields for it).
                [(seq, ValueKind::Put, value)] if plain => {
                    let seq = if zero_seqnos && oldest_snapshot.is_none_or(|o| *seq <= o) {
                        0
                    } else {
                        *seq
                    };
                    ikey_buf.clear();
                    ikey::encode(&mut ikey_buf, &cur_key, seq, ValueKind::Put);
                    out.add(&ikey_buf, value)?;
                }
                _ => {
                    let produced = ctx.resolve(&cur_key, &entries, &mut filter, |t| {
                        !overlaps_other(version, &files, t)
                    })?;
                    for (seq, kind, value) in produced {
                        ikey_buf.clear();
                        ikey::encode(&mut ikey_buf, &cur_key, seq, kind);
                        out.add(&ikey_buf, &value)?;
                    }
                }
            }
            pool.extend(entries.drain(..).map(|e| e.2));
        }
        if at_end {
            break;
        }
        let p = ikey::parse(it.key()).ok_or_else(|| LsmError::Corruption {
            file: format!("compaction input at level {}", inputs[0].0),
            detail: "malformed internal key".into(),
        })?;
        let mut value = pool.pop().unwrap_or_default();
        value.clear();
        value.extend_from_slice(it.value());
        entries.push((p.seqno, p.kind, value));
        if !same_key {
            cur_key.clear();
            cur_key.extend_from_slice(p.user_key);
        }
        it.next()?;
    }
    let new_files = out.finish()?;
    let read: u64 = files.iter().map(|f| f.info.size).sum();
    let written: u64 = new_files.iter().map(|f| f.info.size).sum();
    let added: Vec<(usize, Arc<FileMeta>)> =
        new_files.into_iter().map(|f| (out_level, f)).collect();
    db.log_and_apply(VersionEdit::default(), inputs, &added, false)?;
    db.counters
        .compaction_read
        .fetch_add(read, Ordering::Relaxed);
    db.counters
        .compaction_written
        .fetch_add(written, Ordering::Relaxed);
    db.counters.compactions.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// Whether a file outside the compaction overlaps the tombstone's range.
fn overlaps_other(version: &Version, inputs: &[Arc<FileMeta>], t: &RangeTombstone) -> bool {
    version.files().any(|(_, f)| {
        !inputs.iter().any(|g| g.info.number == f.info.number)
            && t.overlaps(f.info.smallest_user(), f.info.largest_user())
    })
}

struct MergeCtx<'a> {
    db: &'a DbInner,
    snaps: &'a [u64],
    tombs: &'a [RangeTombstone],
    bottommost: bool,
}

fn apply_filter(
    filter: &mut Option<Box<dyn CompactionFilter>>,
    key: &[u8],
    kind: FilterEntryKind,
    value: &[u8],
) -> Option<Vec<u8>> {
    match filter {
        None => Some(value.to_vec()),
        Some(f) => match f.filter(key, kind, value) {
            FilterDecision::Keep => Some(value.to_vec()),
            FilterDecision::Remove => None,
            FilterDecision::Replace(v) => Some(v),
        },
    }
}

impl MergeCtx<'_> {
    /// Resolves the versions of one user key (newest first) into the entries to write (newest first).
    fn resolve(
        &self,
        key: &[u8],
        entries: &[(u64, ValueKind, Vec<u8>)],
        filter: &mut Option<Box<dyn CompactionFilter>>,
        tomb_droppable: impl Fn(&RangeTombstone) -> bool,
    ) -> Result<Vec<(u64, ValueKind, Vec<u8>)>> {
        let mut out = Vec::new();
        let op = self.db.opts.merge_operator.as_ref();
        // Range tombstones starting at this key: kept unless nothing can still need them.
        for (seq, kind, value) in entries {
            if *kind == ValueKind::RangeDelete {
                let t = RangeTombstone {
                    start: key.to_vec(),
                    end: value.clone(),
                    seqno: *seq,
                };
                if !(stripe(self.snaps, *seq) == 0 && tomb_droppable(&t)) {
                    out.push((*seq, *kind, value.clone()));
                }
            }
        }
        let points: Vec<&(u64, ValueKind, Vec<u8>)> = entries
            .iter()
            .filter(|e| e.1 != ValueKind::RangeDelete)
            .collect();
        let mut i = 0;
        while i < points.len() {
            let st = stripe(self.snaps, points[i].0);
            let mut j = i;
            while j < points.len() && stripe(self.snaps, points[j].0) == st {
                j += 1;
            }
            let last_group = j == points.len();
            let mut operands: Vec<(u64, Vec<u8>)> = Vec::new();
            let mut base: Option<(u64, Option<Vec<u8>>)> = None;
            for (seq, kind, value) in points[i..j].iter().map(|e| (e.0, e.1, &e.2)) {
                let covered = self
                    .tombs
                    .iter()
                    .any(|t| t.seqno > seq && t.contains(key) && stripe(self.snaps, t.seqno) == st);
                if covered {
                    base = Some((seq, None));
                    break;
                }
                match kind {
                    ValueKind::Merge => {
                        if let Some(v) =
                            apply_filter(filter, key, FilterEntryKind::MergeOperand, value)
                        {
                            operands.push((seq, v));
                        }
                    }
                    ValueKind::Put => {
                        base = Some((
                            seq,
                            apply_filter(filter, key, FilterEntryKind::Value, value),
                        ));
                        break;
                    }
                    _ => {
                        base = Some((seq, None));
                        break;
                    }
                }
            }
            let newest_ops: Vec<Vec<u8>> = operands.iter().map(|o| o.1.clone()).collect();
            if op.is_none() && !operands.is_empty() {
                // No operator: keep operands (and the base) unmerged; reads report the missing operator.
                for (s, v) in operands {
                    out.push((s, ValueKind::Merge, v));
                }
                match base {
                    Some((s, Some(v))) => out.push((s, ValueKind::Put, v)),
                    Some((s, None)) => out.push((s, ValueKind::Delete, Vec::new())),
                    None => {}
                }
                i = j;
                continue;
            }
            match base {
                Some((bseq, bval)) => {
                    if let Some((oseq, _)) = operands.first() {
                        let merged = full_merge(op, key, bval.as_deref(), &newest_ops)?;
                        out.push((*oseq, ValueKind::Put, merged));
                    } else if let Some(v) = bval {
                        out.push((bseq, ValueKind::Put, v));
                    } else if !(self.bottommost && last_group) {
                        out.push((bseq, ValueKind::Delete, Vec::new()));
                    }
                }
                None => {
                    if let Some((oseq, _)) = operands.first() {
                        if self.bottommost && last_group {
                            let merged = full_merge(op, key, None, &newest_ops)?;
                            out.push((*oseq, ValueKind::Put, merged));
                        } else {
                            let partial = match op {
                                Some(m) if operands.len() > 1 => {
                                    let olds: Vec<&[u8]> =
                                        operands.iter().rev().map(|o| o.1.as_slice()).collect();
                                    m.partial_merge(key, &olds)
                                }
                                _ => None,
                            };
                            match partial {
                                Some(p) => out.push((*oseq, ValueKind::Merge, p)),
                                None => {
                                    for (s, v) in operands {
                                        out.push((s, ValueKind::Merge, v));
                                    }
                                }
                            }
                        }
                    }
                }
            }
            i = j;
        }
        out.sort_by_key(|e| std::cmp::Reverse(ikey::trailer(e.0, e.1)));
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lsm::db::Db;
    use crate::lsm::sst::{Compression, SstOptions};

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

    /// A range tombstone whose file lies outside a compaction still separates the operands above it from the
    /// value below it: here the tombstone's file sits beside the value's file in the output level, and only
    /// the value's file overlaps the compacted operand.
    #[test]
    fn operands_are_not_merged_across_a_range_tombstone_outside_the_compaction() {
        let dir = tempfile::tempdir().unwrap();
        let opts = Options {
            auto_compaction: false,
            num_levels: 3,
            level_base_size: 1,
            dynamic_level_bytes: false,
            merge_operator: Some(Arc::new(crate::lsm::merge::ListAppendOperator)),
            ..Options::default()
        };
        let db = Db::open(dir.path(), opts.clone()).unwrap();
        // p: the old value of k5 (the file reaches past the tombstone, so it is not dropped whole).
        db.put(b"k5", b"old").unwrap();
        db.put(b"z", b"z").unwrap();
        db.flush().unwrap();
        // t: a tombstone over k0..k9 in a file whose key range is [k0, k0].
        db.put(b"k0", b"zero").unwrap();
        db.delete_range(b"k0", b"k9").unwrap();
        db.flush().unwrap();
        // m: an operand written after the tombstone.
        db.merge(b"k5", b"new").unwrap();
        db.flush().unwrap();
        let get = |db: &Db| db.get(b"k5").unwrap().map(|v| v.to_vec());
        assert_eq!(get(&db), Some(b"new".to_vec()));
        let files = {
            let v = Arc::clone(&db.inner().state.lock().version);
            let mut f = v.levels[0].clone();
            f.reverse();
            f
        };
        assert_eq!(files.len(), 3);
        let [p, t, m] = [0, 1, 2].map(|i| Arc::clone(&files[i]));
        assert_eq!(t.info.largest_user(), b"k0");
        // Lay the files out as compactions could have: m in L1, t and p side by side in L2.
        {
            let mut st = db.inner().state.lock();
            st.version = Arc::new(Version::from_levels(vec![vec![], vec![m], vec![t, p]]));
            st.refresh_super_version();
        }
        assert_eq!(get(&db), Some(b"new".to_vec()));
        let mut pointers = vec![Vec::new(); 3];
        let version = Arc::clone(&db.inner().state.lock().version);
        let c = pick(&version, &opts, &mut pointers).unwrap();
        assert_eq!((c.level, c.next.len()), (1, 1));
        run(db.inner(), &version, c).unwrap();
        assert_eq!(get(&db), Some(b"new".to_vec()));
        assert_eq!(db.get(b"k0").unwrap().map(|v| v.to_vec()), None);
        assert_eq!(
            db.get(b"z").unwrap().map(|v| v.to_vec()),
            Some(b"z".to_vec())
        );
    }
}
