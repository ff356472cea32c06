//! The read path: point lookups (memtables, then files level by level, then one full merge) and iterators.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::ikey::ValueKind;
use crate::inner::{DbInner, SuperVersion};
use crate::iter::{DbIter, IterParts};
use crate::memtable::{epoch, key_hash, with_lookup_key};
use crate::merge::full_merge;
use crate::options::ReadOptions;
use crate::rangedel::max_covering;
use crate::row_cache::{self, Lookup, RowRecorder};
use crate::slice::ValueSlice;
use crate::sst::PrefixProbe;
use crate::version::FileMeta;

use super::Result;

/// What a point lookup found; memtable bytes are borrowed for the epoch guard's lifetime.
enum Got<'g> {
    Missing,
    Mem(&'g [u8]),
    Slice(ValueSlice),
    Owned(Vec<u8>),
}

/// A merge operand or base value met by a lookup.
enum Operand<'g> {
    Mem(&'g [u8]),
    Slice(ValueSlice),
}

impl AsRef<[u8]> for Operand<'_> {
    #[inline]
    fn as_ref(&self) -> &[u8] {
        match self {
            Operand::Mem(v) => v,
            Operand::Slice(v) => v,
        }
    }
}

/// The largest seqno of any entry the file holds (the manifest's and the file's own record, whichever is
/// larger).
fn file_max_seqno(f: &FileMeta) -> u64 {
    f.info.max_seqno.max(f.reader.properties().max_seqno)
}

impl DbInner {
    /// The read view and the seqno to read at: `seqno`, or (`None`) the latest one, loaded *after* the view
    /// is taken. In the other order a reader preempted between the two loads could meet a view in which a
    /// flush or compaction already folded versions at or below its seqno into newer ones (a flush's partial
    /// merge of operands, a compaction's dropped shadowed versions), since only registered snapshots are
    /// protected; as RocksDB's `GetImpl` does, the view comes first.
    fn read_view(&self, seqno: Option<u64>) -> (Arc<SuperVersion>, u64) {
        let sv = self.current_sv();
        let seqno = seqno.unwrap_or_else(|| self.last_seqno.load(Ordering::SeqCst));
        (sv, seqno)
    }

    /// Reads `key` as of `seqno` (`None`: the latest).
    pub(super) fn get_at_seqno(
        &self,
        key: &[u8],
        seqno: Option<u64>,
    ) -> Result<Option<ValueSlice>> {
        let (sv, seqno) = self.read_view(seqno);
        let guard = epoch::pin();
        Ok(match self.lookup(&sv, &guard, key, seqno)? {
            Got::Missing => None,
            Got::Mem(v) => Some(ValueSlice::from_vec(v.to_vec())),
            Got::Slice(v) => Some(v),
            Got::Owned(v) => Some(ValueSlice::from_vec(v)),
        })
    }

    /// Reads `key` as of `seqno` (`None`: the latest) into `out` (cleared first); returns whether the key
    /// has a value. A value found in a memtable is copied straight into `out`, so a warm buffer means no
    /// allocation.
    pub(super) fn get_into_at_seqno(
        &self,
        key: &[u8],
        seqno: Option<u64>,
        out: &mut Vec<u8>,
    ) -> Result<bool> {
        let (sv, seqno) = self.read_view(seqno);
        let guard = epoch::pin();
        out.clear();
        match self.lookup(&sv, &guard, key, seqno)? {
            Got::Missing => return Ok(false),
            Got::Mem(v) => out.extend_from_slice(v),
            Got::Slice(v) => out.extend_from_slice(&v),
            Got::Owned(v) => *out = v,
        }
        Ok(true)
    }

    /// Reads every key of `keys` as of one seqno (`None`: the latest), results in the order of `keys`.
    ///
    /// The keys are looked up in sorted order. When this thread's recent block reads went to the disk
    /// (`sst::cold`), the blocks the batch will read first (one per key and candidate file the filters
    /// admit, unless a memtable already holds a value or deletion of the key) are asked for before any is
    /// read, so that the disk serves them concurrently; whether they were in memory before is what the
    /// thread records, not how fast the lookups touched them.
    pub(super) fn multi_get_at_seqno(
        &self,
        keys: &[&[u8]],
        seqno: Option<u64>,
    ) -> Result<Vec<Option<ValueSlice>>> {
        let (sv, seqno) = self.read_view(seqno);
        let guard = epoch::pin();
        let mut order: Vec<usize> = (0..keys.len()).collect();
        order.sort_unstable_by(|&a, &b| keys.get(a).cmp(&keys.get(b)));
        let pre_read = crate::sst::cold::pre_read();
        if pre_read {
            // Per file, the block the previous key asked about.
            let mut asked: Vec<(u64, Option<u64>)> = Vec::new();
            for key in order.iter().filter_map(|&i| keys.get(i)) {
                self.pre_read(&sv, &guard, key, seqno, &mut asked);
            }
        }
        let mut out: Vec<Option<ValueSlice>> = vec![None; keys.len()];
        let mut look_up = || -> Result<()> {
            for &i in &order {
                let (Some(key), Some(slot)) = (keys.get(i), out.get_mut(i)) else {
                    continue;
                };
                *slot = match self.lookup(&sv, &guard, key, seqno)? {
                    Got::Missing => None,
                    Got::Mem(v) => Some(ValueSlice::from_vec(v.to_vec())),
                    Got::Slice(v) => Some(v),
                    Got::Owned(v) => Some(ValueSlice::from_vec(v)),
                };
            }
            Ok(())
        };
        // The touches of blocks just asked for say nothing of where the state is (`sst::cold`).
        if pre_read {
            crate::sst::cold::unrecorded(look_up)?;
        } else {
            look_up()?;
        }
        Ok(out)
    }

    /// Asks for the first block of every file a lookup of `key` would read (see `multi_get_at_seqno`),
    /// unless it is the block the batch's previous key asked about in that file (`asked`: per file number).
    fn pre_read(
        &self,
        sv: &SuperVersion,
        guard: &epoch::Guard,
        key: &[u8],
        seqno: u64,
        asked: &mut Vec<(u64, Option<u64>)>,
    ) {
        let hash = key_hash(key);
        for m in &sv.mems {
            if let Some((_, kind, _)) = m
                .versions_hashed(key, hash, seqno, guard)
                .find(|v| v.1 != ValueKind::RangeDelete)
            {
                if matches!(kind, ValueKind::Put | ValueKind::Delete) {
                    return;
                }
            }
        }
        let probe = self.opts.sst.prefix_extractor.as_ref().and_then(|x| {
            let n = x.prefix_len(key)?;
            Some(PrefixProbe::new(x.name(), key.get(..n)?))
        });
        with_lookup_key(key, seqno, |lk| {
            for (level, files) in sv.version.levels.iter().enumerate() {
                let candidates: &[Arc<FileMeta>] = if level == 0 {
                    files
                } else {
                    let i = files.partition_point(|f| f.info.largest_user() < key);
                    files.get(i..files.len().min(i + 1)).unwrap_or(&[])
                };
                for f in candidates {
                    if f.info.overlaps(key, key)
                        && f.reader.may_contain(key)
                        && probe.is_none_or(|p| f.reader.may_contain_prefix(&p))
                        && !self.row_cached(f, key, seqno)
                    {
                        let n = f.info.number;
                        match asked.iter_mut().find(|a| a.0 == n) {
                            Some(a) => a.1 = f.reader.pre_read_point(lk, a.1),
                            None => asked.push((n, f.reader.pre_read_point(lk, None))),
                        }
                    }
                }
            }
        });
    }

    /// Whether the row cache answers a lookup of `key` at `seqno` in file `f` (it then reads no block).
    fn row_cached(&self, f: &FileMeta, key: &[u8], seqno: u64) -> bool {
        self.row_cache
            .as_ref()
            .is_some_and(|rc| seqno >= file_max_seqno(f) && rc.contains(f.info.number, key))
    }

    /// The point lookup behind every `get`: range tombstones, then versions newest first (memtables, L0
    /// newest first, then one file per deeper level), then one full merge if operands were found. Memtable
    /// bytes are borrowed under `guard`, not copied.
    fn lookup<'g>(
        &self,
        sv: &'g SuperVersion,
        guard: &'g epoch::Guard,
        key: &'g [u8],
        seqno: u64,
    ) -> Result<Got<'g>> {
        let (mems, version) = (&sv.mems, &sv.version);
        let mut rd = if version.range_dels.is_empty() {
            0
        } else {
            max_covering(version.range_dels.iter(), key, seqno)
        };
        for m in mems {
            if m.has_range_dels() {
                rd = rd.max(m.with_range_dels(|t| max_covering(t, key, seqno)));
            }
        }
        // Operands, newest first: memtable ones borrowed, SST ones as zero-copy views of their blocks.
        let mut operands: Vec<Operand<'g>> = Vec::new();
        // Hashed once for every memtable's point index (a table without the key answers from its index).
        let hash = key_hash(key);
        for m in mems {
            for (s, kind, value) in m.versions_hashed(key, hash, seqno, guard) {
                if kind == ValueKind::RangeDelete {
                    continue;
                }
                if s < rd {
                    return self.finish_lookup(key, None, operands);
                }
                match kind {
                    ValueKind::Put if operands.is_empty() => return Ok(Got::Mem(value)),
                    ValueKind::Put => {
                        return self.finish_lookup(key, Some(Operand::Mem(value)), operands)
                    }
                    ValueKind::Delete => return self.finish_lookup(key, None, operands),
                    _ => operands.push(Operand::Mem(value)),
                }
            }
        }
        // Some(base) once a put, delete or covering range tombstone ends the search.
        let mut base: Option<Option<ValueSlice>> = None;
        let mut step = |s: u64, kind: ValueKind, value: &dyn Fn() -> ValueSlice| -> bool {
            if kind == ValueKind::RangeDelete {
                return true;
            }
            if s < rd {
                base = Some(None);
                return false;
            }
            match kind {
                ValueKind::Put => {
                    base = Some(Some(value()));
                    false
                }
                ValueKind::Delete => {
                    base = Some(None);
                    false
                }
                _ => {
                    operands.push(Operand::Slice(value()));
                    true
                }
            }
        };
        // The key's prefix, for files whose filter holds prefixes rather than whole keys.
        let probe = self.opts.sst.prefix_extractor.as_ref().and_then(|x| {
            let n = x.prefix_len(key)?;
            Some(PrefixProbe::new(x.name(), key.get(..n)?))
        });
        with_lookup_key(key, seqno, |lk| -> Result<()> {
            for (level, files) in version.levels.iter().enumerate() {
                // L0: every file, newest first; deeper levels: the one file that may hold `key`.
                let candidates: &[Arc<FileMeta>] = if level == 0 {
                    files
                } else {
                    let i = files.partition_point(|f| f.info.largest_user() < key);
                    files.get(i..files.len().min(i + 1)).unwrap_or(&[])
                };
                for f in candidates {
                    if !f.info.overlaps(key, key) || !f.reader.may_contain(key) {
                        continue;
                    }
                    if probe.is_some_and(|p| !f.reader.may_contain_prefix(&p)) {
                        self.counters.prefix_skips.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    if !self.file_get(f, key, lk, seqno, &mut step)? {
                        return Ok(());
                    }
                }
            }
            Ok(())
        })?;
        let base = base.flatten();
        if operands.is_empty() {
            return Ok(base.map_or(Got::Missing, Got::Slice));
        }
        self.finish_lookup(key, base.map(Operand::Slice), operands)
    }

    /// One file's part of a lookup: its versions of `key` at or below `seqno`, newest first, shown to
    /// `visit` until it returns false (then false), as [`SstReader::get`](crate::sst::SstReader::get) does.
    /// With a row cache, a read that sees every version in the file (`seqno` at or above the file's
    /// largest) is answered from the cache, or reads the file and, if the cache admits the key (its second
    /// miss), caches what it showed; a read at an older seqno reads the file.
    fn file_get(
        &self,
        f: &FileMeta,
        key: &[u8],
        lk: &[u8],
        seqno: u64,
        visit: &mut dyn FnMut(u64, ValueKind, &dyn Fn() -> ValueSlice) -> bool,
    ) -> Result<bool> {
        let Some(rc) = self
            .row_cache
            .as_ref()
            .filter(|_| seqno >= file_max_seqno(f))
        else {
            return f.reader.get(key, lk, seqno, visit);
        };
        match rc.lookup(f.info.number, key) {
            Lookup::Hit(rows) => return Ok(row_cache::replay(&rows, visit)),
            Lookup::Pass => return f.reader.get(key, lk, seqno, visit),
            Lookup::Admit => {}
        }
        let mut rec = RowRecorder::new(key);
        let exhausted = f.reader.get(key, lk, seqno, &mut |s, kind, value| {
            let v = value();
            rec.push(s, kind, &v);
            visit(s, kind, &|| v.clone())
        })?;
        // The file is noted only when a row of it was offered to the cache (its deletion then erases it).
        if rec.complete(exhausted) && rc.insert(f.info.number, rec) {
            f.row_cached();
        }
        Ok(exhausted)
    }

    /// The result of a lookup that ended at `base` with `operands` (newest first) above it.
    fn finish_lookup<'g>(
        &self,
        key: &[u8],
        base: Option<Operand<'g>>,
        operands: Vec<Operand<'g>>,
    ) -> Result<Got<'g>> {
        if operands.is_empty() {
            return Ok(match base {
                None => Got::Missing,
                Some(Operand::Mem(v)) => Got::Mem(v),
                Some(Operand::Slice(v)) => Got::Slice(v),
            });
        }
        let merged = full_merge(
            self.opts.merge_operator.as_ref(),
            key,
            base.as_ref().map(|b| b.as_ref()),
            &operands,
        )?;
        Ok(Got::Owned(merged))
    }

    /// Whether the latest state may hold a key starting with `prefix` (see [`Db::may_hold_prefix`](super::Db::may_hold_prefix)).
    #[cfg(test)]
    pub(super) fn may_hold_prefix(&self, prefix: &[u8]) -> bool {
        let sv = self.current_sv();
        sv.mems.iter().any(|m| m.holds_prefix(prefix)) || self.files_may_hold(&sv.version, prefix)
    }

    /// An iterator over the keys starting with `prefix` from `prefix | from` on, or `None` when the latest
    /// state holds none (see [`Db::prefix_iter`](super::Db::prefix_iter)).
    pub(super) fn prefix_iter(&self, prefix: &[u8], from: &[u8]) -> Option<DbIter> {
        let sv = self.current_sv();
        // The read view is (sv, latest): taken before the checks, so that a key a writer adds to a memtable
        // left out below has a later seqno, which the iterator does not show anyway (writers insert before
        // they publish the seqno, so every entry at or below `latest` is visible to the checks).
        let latest = self.last_seqno.load(Ordering::SeqCst);
        // Memtables without a key of the prefix are left out (unless they hold range tombstones, which may
        // delete keys of it in older tables or files).
        let mut held = false;
        let mut mems = Vec::new();
        for m in &sv.mems {
            let holds = m.holds_prefix(prefix);
            held |= holds;
            if holds || m.has_range_dels() {
                mems.push(Arc::clone(m));
            }
        }
        if !held && !self.files_may_hold(&sv.version, prefix) {
            return None;
        }
        let ro = ReadOptions {
            lower_bound: Some([prefix, from].concat()),
            upper_bound: crate::prefix::prefix_successor(prefix),
            ..ReadOptions::default()
        };
        Some(self.iter_on(mems, Arc::clone(&sv.version), ro, Some(latest)))
    }

    /// Whether a file of `version` may hold a key starting with `prefix`: one whose key range overlaps
    /// `[prefix, successor)` and whose prefix filter (if any, and if the extractor gives `prefix`'s filter
    /// prefix) admits it.
    fn files_may_hold(&self, version: &crate::version::Version, prefix: &[u8]) -> bool {
        if version.levels.iter().all(Vec::is_empty) {
            return false;
        }
        let end = crate::prefix::prefix_successor(prefix);
        let probe = self.opts.sst.prefix_extractor.as_ref().and_then(|x| {
            let p = crate::prefix::scan_prefix(x.as_ref(), Some(prefix), end.as_deref(), None)?;
            Some(PrefixProbe::new(x.name(), p))
        });
        let overlaps = |f: &Arc<FileMeta>| {
            f.info.largest_user() >= prefix
                && end.as_deref().is_none_or(|e| f.info.smallest_user() < e)
                && probe
                    .as_ref()
                    .is_none_or(|p| f.reader.may_contain_prefix(p))
        };
        version.levels.iter().enumerate().any(|(level, files)| {
            if level == 0 {
                return files.iter().any(overlaps);
            }
            // Sorted and disjoint: only the files from the first one ending at or after `prefix` on.
            let first = files.partition_point(|f| f.info.largest_user() < prefix);
            files[first..]
                .iter()
                .take_while(|f| end.as_deref().is_none_or(|e| f.info.smallest_user() < e))
                .any(overlaps)
        })
    }

    /// An iterator over `ro`'s range (see [`Db::iter`](super::Db::iter)).
    pub(super) fn iter(&self, ro: ReadOptions<'_>) -> DbIter {
        let (mems, version) = self.super_version();
        self.iter_on(mems, version, ro, None)
    }

    /// [`iter`](Self::iter) over the memtables `mems` and `version`, a read view taken before this call, at
    /// `ro`'s snapshot, else at `latest` (a seqno loaded after the view was taken), else at the latest seqno.
    fn iter_on(
        &self,
        mems: Vec<Arc<crate::memtable::MemTable>>,
        version: Arc<crate::version::Version>,
        ro: ReadOptions<'_>,
        latest: Option<u64>,
    ) -> DbIter {
        // The read view before the latest seqno (see `DbInner::read_view`).
        let (snapshot, hold) = match ro.snapshot {
            Some(s) => (s.seqno(), Some(self.snapshots.acquire(s.seqno()))),
            None => (
                latest.unwrap_or_else(|| self.last_seqno.load(Ordering::SeqCst)),
                None,
            ),
        };
        let probe = self.opts.sst.prefix_extractor.as_ref().and_then(|x| {
            let p = crate::prefix::scan_prefix(
                x.as_ref(),
                ro.lower_bound.as_deref(),
                ro.upper_bound.as_deref(),
                ro.prefix.as_deref(),
            )?;
            Some((p.to_vec(), PrefixProbe::new(x.name(), p)))
        });
        let it = DbIter::new(IterParts {
            mems,
            version,
            snapshot,
            merge_op: self.opts.merge_operator.clone(),
            lower: ro.lower_bound,
            upper: ro.upper_bound,
            prefix: ro.prefix,
            hold,
            probe,
        });
        if it.prefix_skips > 0 {
            self.counters
                .prefix_skips
                .fetch_add(it.prefix_skips as u64, Ordering::Relaxed);
        }
        it
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::Db;
    use crate::merge::ListAppendOperator;
    use crate::options::Options;
    use crate::sst::{cold, Compression};

    /// A latest-value read preempted between taking its view and looking up, while a memtable is switched
    /// and flushed, still sees every operand up to its seqno, although the flush's partial merge moves older
    /// operands to the run's newest seqno, above the reader's. (Loading the seqno before the view is shown
    /// to lose the operand.)
    #[test]
    fn a_read_at_a_seqno_loaded_before_a_partial_merge_flush_keeps_every_element() {
        let dir = tempfile::tempdir().unwrap();
        let opts = Options {
            merge_operator: Some(Arc::new(ListAppendOperator)),
            ..Options::default()
        };
        let db = Db::open(dir.path(), opts).unwrap();
        db.merge(b"k", b"x").unwrap();
        // The reader takes its view here (`read_view`: the view, then the latest seqno) ...
        let (sv, seq) = db.inner.read_view(None);
        // ... the writer appends and the memtable is flushed (partial merge: `x,y` at the newer seqno) ...
        db.merge(b"k", b"y").unwrap();
        db.flush().unwrap();
        // ... then the reader looks up at its seqno in its view: it still sees `x`.
        let guard = epoch::pin();
        let got = match db.inner.lookup(&sv, &guard, b"k", seq).unwrap() {
            Got::Mem(v) => Some(v.to_vec()),
            Got::Slice(v) => Some(v.to_vec()),
            Got::Owned(v) => Some(v),
            Got::Missing => None,
        };
        assert_eq!(got.as_deref(), Some(&b"x"[..]));
        // The other order (seqno first, view after the flush) loses `x`: the flushed file holds `x,y` at the
        // newer seqno only.
        let late = db.inner.get_at_seqno(b"k", Some(seq)).unwrap();
        assert_eq!(late.map(|v| v.to_vec()), None);
        assert_eq!(
            db.get(b"k").unwrap().map(|v| v.to_vec()),
            Some(b"x,y".to_vec())
        );
    }

    /// `may_hold_prefix` is false only for a prefix no memtable holds and no file can (its key range, its
    /// prefix filter), and true for one a memtable or a file holds, a point delete too.
    #[test]
    fn may_hold_prefix_is_false_only_where_no_memtable_or_file_holds_the_prefix() {
        let dir = tempfile::tempdir().unwrap();
        let mut opts = Options::default();
        opts.sst.prefix_extractor = Some(Arc::new(crate::FixedPrefix::new(4)));
        let db = Db::open(dir.path(), opts).unwrap();
        assert!(!db.may_hold_prefix(b"map1"), "an empty database");
        db.put(b"map1/a", b"1").unwrap();
        db.put(b"map3/a", b"3").unwrap();
        db.delete(b"map5/a").unwrap();
        for (prefix, held) in [(&b"map1"[..], true), (b"map2", false), (b"map5", true)] {
            assert_eq!(db.may_hold_prefix(prefix), held, "memtable, {prefix:?}");
        }
        // In a file: map2 and map4 lie inside its key range, and its prefix filter rules them out.
        db.flush().unwrap();
        db.put(b"map9/a", b"9").unwrap();
        for (prefix, held) in [
            (&b"map1"[..], true),
            (b"map2", false),
            (b"map4", false),
            (b"map5", true),
            (b"map9", true),
            (b"map0", false),
        ] {
            assert_eq!(db.may_hold_prefix(prefix), held, "file, {prefix:?}");
        }
        // Compacted below L0 (a sorted level, found by key range).
        db.compact_all().unwrap();
        for (prefix, held) in [(&b"map1"[..], true), (b"map2", false), (b"map9", true)] {
            assert_eq!(db.may_hold_prefix(prefix), held, "level, {prefix:?}");
        }
        // A prefix longer than the extractor's: the key range still rules out what lies outside it.
        assert!(db.may_hold_prefix(b"map1/a"));
        assert!(!db.may_hold_prefix(b"map9/b"));
    }

    /// `prefix_iter` is `None` where `may_hold_prefix` is false, and otherwise shows what `iter` shows over
    /// the same bounds: keys of the prefix from `from` on, with a memtable that holds none of them left out
    /// but its range tombstone still applied.
    #[test]
    fn prefix_iter_is_none_for_an_absent_prefix_and_keeps_range_tombstones_of_tables_it_leaves_out()
    {
        let dir = tempfile::tempdir().unwrap();
        let mut opts = Options::default();
        opts.sst.prefix_extractor = Some(Arc::new(crate::FixedPrefix::new(4)));
        let db = Db::open(dir.path(), opts).unwrap();
        assert!(db.prefix_iter(b"map1", b"").is_none(), "an empty database");
        for k in [&b"map1/a"[..], b"map1/b", b"map1/c", b"map2/a"] {
            db.put(k, b"v").unwrap();
        }
        db.flush().unwrap();
        // The memtable now holds no key of map1 (a tombstone's node sits at its start key), only a range
        // tombstone over part of it.
        db.delete_range(b"map0/z", b"map1/b").unwrap();
        db.put(b"map3/a", b"v").unwrap();
        let keys = |from: &[u8]| -> Vec<Vec<u8>> {
            let Some(mut it) = db.prefix_iter(b"map1", from) else {
                return Vec::new();
            };
            it.seek_to_first();
            let mut out = Vec::new();
            while it.valid() {
                out.push(it.key().to_vec());
                it.next();
            }
            out
        };
        assert_eq!(keys(b""), vec![b"map1/b".to_vec(), b"map1/c".to_vec()]);
        assert_eq!(keys(b"/c"), vec![b"map1/c".to_vec()]);
        assert!(db.prefix_iter(b"map4", b"").is_none());
        assert!(db.prefix_iter(b"map3", b"").is_some());
    }

    /// With an immutable memtable beside the active one, `prefix_iter` shows what `iter` shows over the same
    /// bounds: the older table kept when it alone holds keys of the prefix, or only a point delete of one
    /// (which hides the file's entry), and left out when only the newer holds the prefix.
    #[test]
    fn prefix_iter_keeps_an_immutable_memtable_holding_the_prefix_or_a_point_delete_of_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut opts = Options::default();
        opts.sst.prefix_extractor = Some(Arc::new(crate::FixedPrefix::new(4)));
        let db = Db::open(dir.path(), opts).unwrap();
        db.put(b"map2/b", b"file").unwrap();
        db.flush().unwrap();
        // The older table: map1 and a point delete of map2's entry in the file.
        db.put(b"map1/a", b"v").unwrap();
        db.put(b"map1/b", b"v").unwrap();
        db.delete(b"map2/b").unwrap();
        {
            // Switched without waking the background flush, so that the table stays immutable.
            let mut w = db.inner.writer.lock();
            let mut st = db.inner.state.lock();
            db.inner.switch_memtable(&mut st, &mut w, true).unwrap();
            w.mem = st.fast_path_entry(true);
        }
        // The newer table: map2 and map4 only.
        db.put(b"map2/a", b"v").unwrap();
        db.put(b"map4/a", b"v").unwrap();
        assert_eq!(db.inner.current_sv().mems.len(), 2, "an immutable memtable");
        let collect = |it: Option<DbIter>| -> Vec<Vec<u8>> {
            let Some(mut it) = it else {
                return Vec::new();
            };
            it.seek_to_first();
            let mut out = Vec::new();
            while it.valid() {
                out.push(it.key().to_vec());
                it.next();
            }
            it.take_status().unwrap();
            out
        };
        for prefix in [&b"map1"[..], b"map2", b"map3", b"map4"] {
            for from in [&b""[..], b"/b"] {
                let ro = ReadOptions {
                    lower_bound: Some([prefix, from].concat()),
                    upper_bound: crate::prefix::prefix_successor(prefix),
                    ..ReadOptions::default()
                };
                assert_eq!(
                    collect(db.prefix_iter(prefix, from)),
                    collect(Some(db.iter(ro))),
                    "{prefix:?} from {from:?}"
                );
            }
        }
        let keys = collect(db.prefix_iter(b"map1", b""));
        assert_eq!(keys, vec![b"map1/a".to_vec(), b"map1/b".to_vec()]);
        assert_eq!(
            collect(db.prefix_iter(b"map2", b"")),
            vec![b"map2/a".to_vec()]
        );
        assert!(db.prefix_iter(b"map3", b"").is_none());
        assert_eq!(db.inner.current_sv().mems.len(), 2, "still immutable");
    }

    /// While another thread appends keys to the prefix (and writes others), flushes and compacts (moving
    /// the prefix's entries from memtables to files and between levels under the reads), `prefix_iter`
    /// shows the prefix without a hole: every key written before it was called, and no later key without
    /// the ones before it.
    #[test]
    fn prefix_iter_shows_a_prefix_without_holes_under_concurrent_flushes_and_compactions() {
        use std::sync::atomic::{AtomicBool, AtomicU32};
        let dir = tempfile::tempdir().unwrap();
        let mut opts = Options::default();
        opts.sst.prefix_extractor = Some(Arc::new(crate::FixedPrefix::new(4)));
        let db = Db::open(dir.path(), opts).unwrap();
        let key = |p: &str, i: u32| format!("{p}/{i:06}").into_bytes();
        let (done, written) = (AtomicBool::new(false), AtomicU32::new(0));
        std::thread::scope(|scope| {
            scope.spawn(|| {
                let mut i = 0u32;
                while !done.load(Ordering::Relaxed) {
                    db.put(&key("map0", i), b"v").unwrap();
                    db.put(&key("map1", i), b"v").unwrap();
                    db.put(&key("map2", i), b"v").unwrap();
                    i += 1;
                    written.store(i, Ordering::SeqCst);
                    if i % 20 == 0 {
                        db.flush().unwrap();
                    }
                    if i % 400 == 0 {
                        db.compact_all().unwrap();
                    }
                }
            });
            // At least 300 rounds, and on until the writer has flushed 150 times and compacted 7.
            let mut round = 0;
            while round < 300 || written.load(Ordering::SeqCst) < 3000 {
                round += 1;
                let before = written.load(Ordering::SeqCst);
                let mut got = Vec::new();
                if let Some(mut it) = db.prefix_iter(b"map1", b"") {
                    it.seek_to_first();
                    while it.valid() {
                        got.push(it.key().to_vec());
                        it.next();
                    }
                    it.take_status().unwrap();
                }
                let n = u32::try_from(got.len()).unwrap();
                let whole = n >= before && got.iter().zip(0..).all(|(k, i)| *k == key("map1", i));
                if !whole {
                    done.store(true, Ordering::Relaxed);
                    panic!("round {round}: {n} keys with a hole, {before} written before");
                }
            }
            done.store(true, Ordering::Relaxed);
        });
    }

    /// A batch that pre-reads records one entry per block it asks for (whether it was in memory before the
    /// request), not its lookups' touches of those blocks: `n` keys in `n` blocks add `n` to the thread's
    /// window (recording the touches too would add `2n`; recording only them, whose speed says nothing
    /// after the request, would add none from the pre-read).
    #[test]
    fn a_pre_reading_batch_records_each_blocks_residency_and_not_its_lookups_touches() {
        let (_dir, db, keys) = one_key_per_block_on_a_cold_thread();
        let refs: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
        let got = db.multi_get(&refs).unwrap();
        assert!(got.iter().all(|v| v.as_deref() == Some(&[7u8; 300][..])));
        assert_eq!(
            cold::touches_in_window(),
            u32::try_from(keys.len()).unwrap(),
            "one record per block asked for, none per lookup"
        );
    }

    /// Keys of a batch in a block the previous key of the same file asked about (here: each key twice) ask
    /// and record nothing again: `n` blocks add `n` to the window, not one per key.
    #[test]
    fn a_pre_reading_batch_asks_about_a_block_once_for_consecutive_keys_in_it() {
        let (_dir, db, keys) = one_key_per_block_on_a_cold_thread();
        let refs: Vec<&[u8]> = keys.iter().flat_map(|k| [k.as_slice(), k]).collect();
        let got = db.multi_get(&refs).unwrap();
        assert_eq!(got.len(), 2 * keys.len());
        assert!(got.iter().all(|v| v.as_deref() == Some(&[7u8; 300][..])));
        assert_eq!(
            cold::touches_in_window(),
            u32::try_from(keys.len()).unwrap(),
            "one record per distinct block"
        );
    }

    /// A flushed file of 20 keys, one per block, reopened (no block in the block cache, so each lookup
    /// touches its block in the map), and this thread's pre-read switched on by a window of slow touches,
    /// which starts a new window.
    fn one_key_per_block_on_a_cold_thread() -> (tempfile::TempDir, Db, Vec<Vec<u8>>) {
        let dir = tempfile::tempdir().unwrap();
        let mut opts = Options::default();
        opts.sst.block_size = 256;
        opts.sst.compression = Compression::None;
        let keys: Vec<Vec<u8>> = (0..20u32)
            .map(|i| format!("key{i:04}").into_bytes())
            .collect();
        {
            let db = Db::open(dir.path(), opts.clone()).unwrap();
            for k in &keys {
                db.put(k, &[7u8; 300]).unwrap();
            }
            db.flush().unwrap();
        }
        let db = Db::open(dir.path(), opts).unwrap();
        for _ in 0..cold::WINDOW {
            cold::record_touch(cold::SLOW_TOUCH);
        }
        assert!(cold::pre_read());
        assert_eq!(cold::touches_in_window(), 0);
        (dir, db, keys)
    }
}
