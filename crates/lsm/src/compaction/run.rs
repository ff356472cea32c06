//! Running a compaction: a trivial move, or the snapshot-aware merge of its inputs (merge operator,
//! compaction filter, range tombstones) into new files of the output level, then installing the result.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::filter::{CompactionFilter, CompactionFilterContext, FilterDecision, FilterEntryKind};
use crate::flush::Outputs;
use crate::ikey::{self, ValueKind};
use crate::inner::DbInner;
use crate::iter::{compaction_file_iter, InternalIterator, MergingIter, TombIter};
use crate::merge::full_merge;
use crate::rangedel::RangeTombstone;
use crate::version::{FileMeta, Version, VersionEdit};
use crate::{Location, LsmError};

use super::{key_range, Compaction, Result};

/// Runs `c` on `version`: a trivial move when nothing in the output level overlaps (automatic compactions
/// only), else a merge.
pub(super) fn run(db: &DbInner, version: &Version, c: Compaction) -> Result<()> {
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

/// Whether a wholly expired file (every entry a value or merge operand of a TTL state, all expired: what
/// its TTL range property says) may leave the version without being read or rewritten: it holds no range
/// tombstone (one could cover older keys outside the file's own key range), no snapshot is open (an open
/// one keeps what it sees), and no deeper file overlaps its key range (nothing older of its keys can
/// resurface once its entries are gone; shallower data is newer and unaffected).
pub(super) fn droppable(db: &DbInner, version: &Version, level: usize, file: &FileMeta) -> bool {
    let (lo, hi) = (file.info.smallest_user(), file.info.largest_user());
    file.range_dels.is_empty()
        && db.snapshots.seqnos().is_empty()
        && version
            .files()
            .filter(|(l, _)| *l > level)
            .all(|(_, f)| !f.info.overlaps(lo, hi))
}

/// Removes a [`droppable`] file from the version.
pub(super) fn drop_expired(db: &DbInner, level: usize, file: Arc<FileMeta>) -> Result<()> {
    db.log_and_apply(VersionEdit::default(), &[(level, file)], &[], false)?;
    db.counters
        .expired_files_dropped
        .fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// Stripe of a seqno: index of the oldest snapshot that sees it (`snaps.len()` if none).
fn stripe(snaps: &[u64], seq: u64) -> usize {
    snaps.partition_point(|s| *s < seq)
}

/// Entries a compaction merges between two looks at the environment's flush queue.
const FLUSH_CHECK_ENTRIES: u32 = 2048;

/// Merges `inputs` (level, file) into new files at `out_level` and installs the result.
pub(super) fn merge_into(
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
    // A merge within L0 is never bottommost: an older L0 run outside it may hold the same keys.
    let bottommost = out_level > 0
        && version
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
    let mut filter = db
        .opts
        .compaction_filter_factory
        .as_ref()
        .filter(|f| f.is_active())
        .map(|f| {
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
    // A bounded input is read through its clamp, its clipped tombstones beside it: the outputs hold nothing
    // outside its bounds and need none.
    let mut children: Vec<Box<dyn InternalIterator>> = Vec::with_capacity(ordered.len());
    for (_, f) in &ordered {
        children.push(compaction_file_iter(f));
        if f.info.bounds.is_some() && !f.range_dels.is_empty() {
            children.push(Box::new(TombIter::new(&f.range_dels)));
        }
    }
    let mut it = MergingIter::new(children);
    it.seek_to_first()?;
    // Below L0: files cut at the target size and at state (partition) boundaries. A merge within L0 writes
    // one file, as a flush does: one sorted run whatever its keys and sequence numbers (files cut from it
    // could hold disjoint sequence-number ranges, each then counting as a run of its own, and the merge
    // would not lower L0's run count), and a point read checks one file per L0 run.
    let below_l0 = out_level > 0;
    let mut out = Outputs::new(db, below_l0.then_some(db.opts.target_file_size), below_l0);
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
    let jobs = db.env.pool();
    let mut merged: u32 = 0;
    loop {
        // Queued flushes (of any engine of the environment) run here rather than wait for this compaction
        // to end: they free the memory writers may be stalled on (`env::pool`, module documentation). Not
        // in a manual compaction, which runs on the caller's thread.
        merged = merged.wrapping_add(1);
        if !manual && merged % FLUSH_CHECK_ENTRIES == 0 {
            jobs.run_queued_flushes();
        }
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
            at: Location::file("<compaction input>"),
            detail: format!("malformed internal key at level {}", inputs[0].0),
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
    if !below_l0 && new_files.len() > 1 {
        // The picker's progress guarantee for a merge within L0 rests on this; never installed otherwise.
        return Err(LsmError::InvalidArgument(format!(
            "a merge within L0 wrote {} files, not one run",
            new_files.len()
        )));
    }
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

/// What resolving one user key's versions needs: the snapshots (ascending), the range tombstones that may
/// cover the inputs, and whether the output is the bottommost data for its key range.
struct MergeCtx<'a> {
    db: &'a DbInner,
    snaps: &'a [u64],
    tombs: &'a [RangeTombstone],
    bottommost: bool,
}

/// The value to keep for an entry under the compaction filter: `value` without a filter, None to drop it.
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
            if !operands.is_empty() && op.is_none_or(|m| !m.can_merge(key)) {
                // No operator, or one that cannot merge this key yet: keep operands (and the base)
                // unmerged; reads report the missing operator or merge them.
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
    use super::super::pick::pick;
    use super::*;
    use crate::db::Db;
    use crate::options::Options;

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
            merge_operator: Some(Arc::new(crate::merge::ListAppendOperator)),
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

    /// A merge within L0 leaves one sorted run, however its keys and sequence numbers lie: two runs of
    /// disjoint, ascending keys (each larger than the target file size) merge into one run, after which L0
    /// has no work. Cut at the target file size, the output was several files with disjoint sequence-number
    /// ranges, so as many runs as before (or more), and the same merge was picked again forever.
    #[test]
    fn a_merge_within_l0_leaves_one_run_and_no_work() {
        for dynamic in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let opts = Options {
                auto_compaction: false,
                num_levels: 3,
                dynamic_level_bytes: dynamic,
                l0_compaction_trigger: 2,
                l0_stop_writes_trigger: 8,
                l0_base_ratio: 0.25,
                target_file_size: 4 << 10,
                sst: crate::sst::SstOptions {
                    compression: crate::sst::Compression::None,
                    ..crate::sst::SstOptions::default()
                },
                ..Options::default()
            };
            let db = Db::open(dir.path(), opts.clone()).unwrap();
            // What automatic compaction would see (it is off here so that the test runs each step).
            let auto = Options {
                auto_compaction: true,
                ..opts.clone()
            };
            for i in 0..4000u32 {
                db.put(format!("a{i:05}").as_bytes(), &[b'v'; 100]).unwrap();
            }
            db.compact_all().unwrap();
            for prefix in ["b", "c"] {
                for i in 0..100u32 {
                    db.put(format!("{prefix}{i:03}").as_bytes(), &[b'v'; 100])
                        .unwrap();
                }
                db.flush().unwrap();
            }
            let version = Arc::clone(&db.inner().state.lock().version);
            assert_eq!(version.l0_runs, 2);
            assert!(super::super::needs_compaction(&version, &auto));
            let mut pointers = vec![Vec::new(); 3];
            let c = pick(&version, &opts, &mut pointers).unwrap();
            assert_eq!((c.level, c.output_level, c.inputs.len()), (0, 0, 2));
            run(db.inner(), &version, c).unwrap();
            let version = Arc::clone(&db.inner().state.lock().version);
            assert_eq!(version.l0_runs, 1, "dynamic {dynamic}");
            assert!(!super::super::needs_compaction(&version, &auto));
            assert!(pick(&version, &opts, &mut pointers).is_none());
            assert_eq!(
                db.get(b"c099").unwrap().map(|v| v.to_vec()),
                Some(vec![b'v'; 100])
            );
        }
    }

    /// Joins operands while `ready`; before that it cannot merge anything (`can_merge` false, merges fail).
    struct NotYet(std::sync::atomic::AtomicBool);

    impl crate::merge::MergeOperator for NotYet {
        fn name(&self) -> &str {
            "not-yet"
        }
        fn full_merge(&self, k: &[u8], base: Option<&[u8]>, ops: &[&[u8]]) -> Option<Vec<u8>> {
            self.can_merge(k)
                .then(|| crate::merge::ListAppendOperator.full_merge(k, base, ops))
                .flatten()
        }
        fn partial_merge(&self, k: &[u8], ops: &[&[u8]]) -> Option<Vec<u8>> {
            self.can_merge(k)
                .then(|| crate::merge::ListAppendOperator.partial_merge(k, ops))
                .flatten()
        }
        fn can_merge(&self, _key: &[u8]) -> bool {
            self.0.load(std::sync::atomic::Ordering::Relaxed)
        }
    }

    /// Operands an operator cannot merge yet stay, with the value below them, through a compaction to the
    /// last level (which would otherwise fail on the merge), and merge once it can.
    #[test]
    fn operands_an_operator_cannot_merge_yet_survive_compactions() {
        let dir = tempfile::tempdir().unwrap();
        let op = Arc::new(NotYet(std::sync::atomic::AtomicBool::new(false)));
        let opts = Options {
            auto_compaction: false,
            merge_operator: Some(op.clone()),
            ..Options::default()
        };
        let db = Db::open(dir.path(), opts).unwrap();
        db.put(b"k", b"a").unwrap();
        db.put(b"j", b"x").unwrap();
        db.flush().unwrap();
        for v in [b"b", b"c"] {
            db.merge(b"k", v).unwrap();
            db.merge(b"n", v).unwrap();
            db.flush().unwrap();
        }
        db.compact_all().unwrap();
        assert!(db.get(b"k").is_err());
        assert_eq!(
            db.get(b"j").unwrap().map(|v| v.to_vec()),
            Some(b"x".to_vec())
        );
        op.0.store(true, std::sync::atomic::Ordering::Relaxed);
        assert_eq!(
            db.get(b"k").unwrap().map(|v| v.to_vec()),
            Some(b"a,b,c".to_vec())
        );
        assert_eq!(
            db.get(b"n").unwrap().map(|v| v.to_vec()),
            Some(b"b,c".to_vec())
        );
        db.compact_all().unwrap();
        assert_eq!(
            db.get(b"k").unwrap().map(|v| v.to_vec()),
            Some(b"a,b,c".to_vec())
        );
    }
}
