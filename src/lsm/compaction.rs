//! Leveled compaction: picking, the snapshot-aware merge of versions (with merge operator, compaction
//! filter and range tombstones), trivial moves, and manual full/range compaction.
//!
//! Invariants kept: L0 files may overlap and are ordered newest first; in L1+ files do not overlap; for any
//! user key, newer data sits in a shallower place (memtables, then L0 newest first, then L1, L2, ...).
//! Compactions only move data from level `n` to `n + 1`, and an L0 compaction takes every L0 file.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::db::DbInner;
use super::filter::{CompactionFilter, CompactionFilterContext, FilterDecision, FilterEntryKind};
use super::flush::Outputs;
use super::ikey::{self, ValueKind};
use super::iter::{full_merge, InternalIterator, MergingIter};
use super::options::Options;
use super::rangedel::RangeTombstone;
use super::version::{FileMeta, Version, VersionEdit};
use super::LsmError;

type Result<T> = std::result::Result<T, LsmError>;

/// One compaction: `inputs` from `level` plus overlapping `next` files from `level + 1`.
pub(crate) struct Compaction {
    pub level: usize,
    pub inputs: Vec<Arc<FileMeta>>,
    pub next: Vec<Arc<FileMeta>>,
    pub manual: bool,
}

/// Target size of level `level >= 1`.
fn level_target(opts: &Options, level: usize) -> u64 {
    let mut t = opts.level_base_size.max(1);
    for _ in 1..level {
        t = t.saturating_mul(opts.level_multiplier.max(1));
    }
    t
}

/// Compaction score per level (last level excluded); >= 1 means the level needs compaction.
fn scores(v: &Version, opts: &Options) -> Vec<f64> {
    let bytes = v.level_bytes();
    (0..v.levels.len().saturating_sub(1))
        .map(|l| {
            if l == 0 {
                v.levels[0].len() as f64 / opts.l0_compaction_trigger.max(1) as f64
            } else {
                bytes[l] as f64 / level_target(opts, l) as f64
            }
        })
        .collect()
}

/// Whether automatic compaction has work.
pub(crate) fn needs_compaction(v: &Version, opts: &Options) -> bool {
    opts.auto_compaction && scores(v, opts).iter().any(|s| *s >= 1.0)
}

fn key_range(files: &[Arc<FileMeta>]) -> Option<(Vec<u8>, Vec<u8>)> {
    let lo = files.iter().map(|f| f.info.smallest_user()).min()?;
    let hi = files.iter().map(|f| f.info.largest_user()).max()?;
    Some((lo.to_vec(), hi.to_vec()))
}

fn pick(v: &Version, opts: &Options, pointers: &mut [Vec<u8>]) -> Option<Compaction> {
    let sc = scores(v, opts);
    let (level, score) = sc
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map(|(l, s)| (l, *s))?;
    if score < 1.0 {
        return None;
    }
    let inputs: Vec<Arc<FileMeta>> = if level == 0 {
        v.levels[0].clone()
    } else {
        let files = &v.levels[level];
        let ptr = pointers.get(level).cloned().unwrap_or_default();
        let f = files
            .iter()
            .find(|f| f.info.smallest_user() > ptr.as_slice())
            .or_else(|| files.first())?;
        if let Some(p) = pointers.get_mut(level) {
            *p = f.info.largest_user().to_vec();
        }
        vec![Arc::clone(f)]
    };
    let (lo, hi) = key_range(&inputs)?;
    let next = v.overlapping(level + 1, &lo, &hi);
    Some(Compaction {
        level,
        inputs,
        next,
        manual: false,
    })
}

/// Runs one automatically picked compaction, if any.
pub(crate) fn run_auto(db: &DbInner) -> Result<()> {
    let mut pointers = db.compaction_lock.lock();
    let version = Arc::clone(&db.state.lock().version);
    if let Some(c) = pick(&version, &db.opts, &mut pointers) {
        run(db, &version, c)?;
    }
    Ok(())
}

/// Manual compaction: all files into the deepest non-empty level (one compaction), or, for a range,
/// level by level over the files overlapping it.
pub(crate) fn run_manual(db: &DbInner, range: Option<(&[u8], &[u8])>) -> Result<()> {
    let _g = db.compaction_lock.lock();
    let Some((lo, hi)) = range else {
        let version = Arc::clone(&db.state.lock().version);
        let deepest = (1..version.levels.len())
            .rev()
            .find(|l| !version.levels[*l].is_empty())
            .unwrap_or(1);
        let all: Vec<(usize, Arc<FileMeta>)> =
            version.files().map(|(l, f)| (l, Arc::clone(f))).collect();
        if all.is_empty() {
            return Ok(());
        }
        return merge_into(db, &version, &all, deepest, true);
    };
    let num_levels = db.opts.num_levels;
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
        if level == 0 {
            inputs = version.levels[0].clone();
        }
        let Some((a, b)) = key_range(&inputs) else {
            continue;
        };
        let next = version.overlapping(level + 1, &a, &b);
        run(
            db,
            &version,
            Compaction {
                level,
                inputs,
                next,
                manual: true,
            },
        )?;
    }
    Ok(())
}

fn run(db: &DbInner, version: &Version, c: Compaction) -> Result<()> {
    let out_level = c.level + 1;
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
    let tombs: Vec<RangeTombstone> = files
        .iter()
        .flat_map(|f| f.range_dels.iter().cloned())
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
