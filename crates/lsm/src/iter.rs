//! Iterators: internal iterators over memtables and SSTs, a merging iterator, and the user-facing
//! [`DbIter`] that resolves versions, tombstones (point and range) and merge operands at a snapshot.

use std::sync::Arc;

use super::bounds::ClampedIter;
use super::ikey::{self, ValueKind};
use super::memtable::{MemCursor, MemTable};
use super::merge::MergeOperator;
use super::prefix::prefix_successor;
use super::rangedel::Fragments;
use super::slice::ValueSlice;
use super::snapshot::Snapshot;
use super::sst::{PrefixProbe, SstIter};
use super::version::{FileMeta, Version};
use super::{Location, LsmError};

/// A cursor over internal keys in [`ikey::compare`] order.
pub(crate) trait InternalIterator: Send {
    fn seek_to_first(&mut self) -> Result<(), LsmError>;
    /// Positions at the first entry `>= target` (an internal key).
    fn seek(&mut self, target: &[u8]) -> Result<(), LsmError>;
    fn next(&mut self) -> Result<(), LsmError>;
    fn valid(&self) -> bool;
    fn key(&self) -> &[u8];
    fn value(&self) -> &[u8];
    /// The value as a zero-copy view if the source can share its bytes (SST blocks); `None` for sources
    /// whose bytes must be copied out (memtables), which callers copy into a reused buffer instead.
    fn value_shared(&self) -> Option<ValueSlice> {
        None
    }
}

impl InternalIterator for SstIter {
    fn seek_to_first(&mut self) -> Result<(), LsmError> {
        SstIter::seek_to_first(self)
    }
    fn seek(&mut self, target: &[u8]) -> Result<(), LsmError> {
        SstIter::seek(self, target)
    }
    fn next(&mut self) -> Result<(), LsmError> {
        SstIter::next(self)
    }
    fn valid(&self) -> bool {
        SstIter::valid(self)
    }
    fn key(&self) -> &[u8] {
        SstIter::key(self)
    }
    fn value(&self) -> &[u8] {
        SstIter::value(self)
    }
    fn value_shared(&self) -> Option<ValueSlice> {
        Some(SstIter::value_slice(self))
    }
}

/// A cursor over a memtable: walks the skiplist in place (one pointer hop per step, nothing copied).
pub(crate) struct MemIter {
    cur: MemCursor,
}

impl MemIter {
    pub fn new(mem: Arc<MemTable>) -> Self {
        Self {
            cur: MemCursor::new(mem),
        }
    }
}

impl InternalIterator for MemIter {
    fn seek_to_first(&mut self) -> Result<(), LsmError> {
        self.cur.seek_to_first();
        Ok(())
    }
    fn seek(&mut self, target: &[u8]) -> Result<(), LsmError> {
        self.cur.seek(target);
        Ok(())
    }
    fn next(&mut self) -> Result<(), LsmError> {
        self.cur.next();
        Ok(())
    }
    fn valid(&self) -> bool {
        self.cur.entry().is_some()
    }
    fn key(&self) -> &[u8] {
        self.cur.entry().map_or(&[], |e| e.ikey())
    }
    fn value(&self) -> &[u8] {
        self.cur.entry().map_or(&[], |e| e.value())
    }
}

/// How a [`LevelIter`] opens a cursor over one of its files.
pub(crate) trait FileCursor: InternalIterator + Sized {
    /// A cursor over `f`, not positioned.
    fn open(f: &FileMeta) -> Self;
}

impl FileCursor for SstIter {
    #[inline]
    fn open(f: &FileMeta) -> Self {
        f.reader.iter()
    }
}

impl FileCursor for ClampedIter {
    fn open(f: &FileMeta) -> Self {
        ClampedIter::new(&f.reader, f.info.bounds.as_ref())
    }
}

/// A cursor over the non-overlapping, sorted files of one level (L1+), opening files lazily: plain file
/// cursors (`SstIter`) for a level without bounded files, [`ClampedIter`]s for one with some.
pub(crate) struct LevelIter<I: FileCursor = SstIter> {
    files: Vec<Arc<FileMeta>>,
    idx: usize,
    iter: Option<I>,
}

impl<I: FileCursor> LevelIter<I> {
    pub fn new(files: Vec<Arc<FileMeta>>) -> Self {
        Self {
            files,
            idx: 0,
            iter: None,
        }
    }

    fn open(&mut self, idx: usize) {
        self.idx = idx;
        self.iter = self.files.get(idx).map(|f| I::open(f));
    }

    /// Skips exhausted files.
    fn settle(&mut self) -> Result<(), LsmError> {
        while let Some(it) = &self.iter {
            if it.valid() {
                break;
            }
            self.open(self.idx + 1);
            if let Some(it) = &mut self.iter {
                it.seek_to_first()?;
            }
        }
        Ok(())
    }
}

impl<I: FileCursor> InternalIterator for LevelIter<I> {
    fn seek_to_first(&mut self) -> Result<(), LsmError> {
        self.open(0);
        if let Some(it) = &mut self.iter {
            it.seek_to_first()?;
        }
        self.settle()
    }
    fn seek(&mut self, target: &[u8]) -> Result<(), LsmError> {
        let idx = self
            .files
            .partition_point(|f| ikey::compare(&f.info.largest, target).is_lt());
        self.open(idx);
        if let Some(it) = &mut self.iter {
            it.seek(target)?;
        }
        self.settle()
    }
    fn next(&mut self) -> Result<(), LsmError> {
        if let Some(it) = &mut self.iter {
            it.next()?;
        }
        self.settle()
    }
    fn valid(&self) -> bool {
        self.iter.as_ref().is_some_and(|i| i.valid())
    }
    fn key(&self) -> &[u8] {
        self.iter.as_ref().map_or(&[], |i| i.key())
    }
    fn value(&self) -> &[u8] {
        self.iter.as_ref().map_or(&[], |i| i.value())
    }
    fn value_shared(&self) -> Option<ValueSlice> {
        self.iter
            .as_ref()
            .map_or_else(|| Some(ValueSlice::empty()), |i| i.value_shared())
    }
}

/// A cursor over one file of L0: the file's own cursor, clamped when the file has bounds.
pub(crate) fn file_iter(f: &FileMeta) -> Box<dyn InternalIterator> {
    if f.info.bounds.is_some() {
        Box::new(ClampedIter::open(f))
    } else {
        Box::new(f.reader.iter())
    }
}

/// A cursor over the sorted, disjoint files of one deeper level.
pub(crate) fn level_iter(files: Vec<Arc<FileMeta>>) -> Box<dyn InternalIterator> {
    if files.iter().any(|f| f.info.bounds.is_some()) {
        Box::new(LevelIter::<ClampedIter>::new(files))
    } else {
        Box::new(LevelIter::<SstIter>::new(files))
    }
}

/// Merges children into one sorted stream; on equal keys the earlier (newer) child wins first.
pub(crate) struct MergingIter {
    children: Vec<Box<dyn InternalIterator>>,
    current: Option<usize>,
}

impl MergingIter {
    pub fn new(children: Vec<Box<dyn InternalIterator>>) -> Self {
        Self {
            children,
            current: None,
        }
    }

    fn pick(&mut self) {
        let mut best: Option<usize> = None;
        for (i, c) in self.children.iter().enumerate() {
            if !c.valid() {
                continue;
            }
            best = match best {
                Some(b) if !ikey::compare(c.key(), self.children[b].key()).is_lt() => Some(b),
                _ => Some(i),
            };
        }
        self.current = best;
    }
}

impl InternalIterator for MergingIter {
    fn seek_to_first(&mut self) -> Result<(), LsmError> {
        for c in &mut self.children {
            c.seek_to_first()?;
        }
        self.pick();
        Ok(())
    }
    fn seek(&mut self, target: &[u8]) -> Result<(), LsmError> {
        for c in &mut self.children {
            c.seek(target)?;
        }
        self.pick();
        Ok(())
    }
    fn next(&mut self) -> Result<(), LsmError> {
        if let Some(i) = self.current {
            self.children[i].next()?;
            self.pick();
        }
        Ok(())
    }
    fn valid(&self) -> bool {
        self.current.is_some()
    }
    fn key(&self) -> &[u8] {
        self.current.map_or(&[], |i| self.children[i].key())
    }
    fn value(&self) -> &[u8] {
        self.current.map_or(&[], |i| self.children[i].value())
    }
    fn value_shared(&self) -> Option<ValueSlice> {
        self.current.and_then(|i| self.children[i].value_shared())
    }
}

/// The sources of a read: every memtable (newest first), every L0 file and one iterator per deeper level.
/// With `prefix` (the prefix every key of the read shares, and its probe), files whose key range holds no key
/// with the prefix are left out, and so are files whose filter rules it out (counted in `skipped`).
pub(crate) fn children(
    mems: &[Arc<MemTable>],
    version: &Version,
    prefix: Option<&(Vec<u8>, PrefixProbe)>,
    skipped: &mut usize,
) -> Vec<Box<dyn InternalIterator>> {
    let mut out: Vec<Box<dyn InternalIterator>> = Vec::new();
    for m in mems {
        out.push(Box::new(MemIter::new(Arc::clone(m))));
    }
    let end = prefix.and_then(|(p, _)| prefix_successor(p));
    let mut wanted = |f: &Arc<FileMeta>| {
        let Some((p, probe)) = prefix else {
            return true;
        };
        // The key range first (no filter read for the many files of a deep level that lie elsewhere).
        if f.info.largest_user() < p.as_slice()
            || end.as_deref().is_some_and(|e| f.info.smallest_user() >= e)
        {
            return false;
        }
        let keep = f.reader.may_contain_prefix(probe);
        *skipped += usize::from(!keep);
        keep
    };
    for (level, files) in version.levels.iter().enumerate() {
        if level == 0 {
            for f in files.iter().filter(|f| wanted(f)) {
                out.push(file_iter(f));
            }
        } else if prefix.is_some() {
            // A sorted, disjoint subset of a level is still a level.
            let kept: Vec<Arc<FileMeta>> = files.iter().filter(|f| wanted(f)).cloned().collect();
            if !kept.is_empty() {
                out.push(level_iter(kept));
            }
        } else if !files.is_empty() {
            out.push(level_iter(files.clone()));
        }
    }
    out
}

/// Full-merges operands (collected newest first) onto `base`.
pub(crate) fn full_merge(
    op: Option<&Arc<dyn MergeOperator>>,
    key: &[u8],
    base: Option<&[u8]>,
    operands_newest_first: &[impl AsRef<[u8]>],
) -> Result<Vec<u8>, LsmError> {
    let op = op.ok_or(LsmError::NoMergeOperator)?;
    let ops: Vec<&[u8]> = operands_newest_first
        .iter()
        .rev()
        .map(|o| o.as_ref())
        .collect();
    op.full_merge(key, base, &ops)
        .ok_or_else(|| LsmError::MergeFailed {
            operator: op.name().to_string(),
            key: key.to_vec(),
        })
}

/// A user-facing iterator over the database at one snapshot.
///
/// It pins the memtables and version it was created on, so files it reads are not deleted while it lives.
pub struct DbIter {
    inner: MergingIter,
    snapshot: u64,
    frags: Fragments,
    merge_op: Option<Arc<dyn MergeOperator>>,
    lower: Option<Vec<u8>>,
    upper: Option<Vec<u8>>,
    prefix: Option<Vec<u8>>,
    key: Vec<u8>,
    /// The current value when its source shares its bytes (SST blocks) ...
    value: ValueSlice,
    /// ... else (memtables, merge results) a copy in this reused buffer.
    vbuf: Vec<u8>,
    value_in_buf: bool,
    /// The versions of `key` older than the one returned are still ahead of `inner`; skipped by the next
    /// `next` rather than eagerly, so a caller that reads one entry (an emptiness check) never pays for it.
    skip_pending: bool,
    /// Reused seek-target buffer.
    seek_buf: Vec<u8>,
    valid: bool,
    status: Option<LsmError>,
    _version: Arc<Version>,
    _snapshot: Option<Snapshot>,
    /// Files left out because their prefix filter ruled the scan's prefix out.
    pub(crate) prefix_skips: usize,
}

/// What a [`DbIter`] is built from.
pub(crate) struct IterParts {
    pub mems: Vec<Arc<MemTable>>,
    pub version: Arc<Version>,
    pub snapshot: u64,
    pub merge_op: Option<Arc<dyn MergeOperator>>,
    pub lower: Option<Vec<u8>>,
    pub upper: Option<Vec<u8>>,
    pub prefix: Option<Vec<u8>>,
    pub hold: Option<Snapshot>,
    /// The prefix every key of the read shares and its probe, for the SST filters (see [`children`]).
    pub probe: Option<(Vec<u8>, PrefixProbe)>,
}

impl DbIter {
    pub(crate) fn new(p: IterParts) -> Self {
        let mut tombs = Vec::new();
        for m in &p.mems {
            tombs.extend(m.range_dels());
        }
        let frags = Fragments::build(tombs.iter().chain(p.version.range_dels.iter()), p.snapshot);
        let mut prefix_skips = 0;
        let inner = MergingIter::new(children(
            &p.mems,
            &p.version,
            p.probe.as_ref(),
            &mut prefix_skips,
        ));
        DbIter {
            inner,
            snapshot: p.snapshot,
            frags,
            merge_op: p.merge_op,
            lower: p.lower,
            upper: p.upper,
            prefix: p.prefix,
            key: Vec::new(),
            value: ValueSlice::empty(),
            vbuf: Vec::new(),
            value_in_buf: false,
            skip_pending: false,
            seek_buf: Vec::new(),
            valid: false,
            status: None,
            _version: p.version,
            _snapshot: p.hold,
            prefix_skips,
        }
    }

    /// Positions at the first visible key.
    pub fn seek_to_first(&mut self) {
        let start = match (&self.lower, &self.prefix) {
            (Some(l), Some(p)) => std::cmp::max(l, p).clone(),
            (Some(l), None) => l.clone(),
            (None, Some(p)) => p.clone(),
            (None, None) => Vec::new(),
        };
        self.seek(&start);
    }

    /// Positions at the first visible key `>= key` (clamped to the lower bound and prefix).
    pub fn seek(&mut self, key: &[u8]) {
        let mut target = key;
        for b in [&self.lower, &self.prefix].into_iter().flatten() {
            if target < b.as_slice() {
                target = b;
            }
        }
        let mut lk = std::mem::take(&mut self.seek_buf);
        lk.clear();
        lk.extend_from_slice(target);
        lk.extend_from_slice(&((self.snapshot.min(ikey::MAX_SEQNO) << 8) | 0xFF).to_be_bytes());
        self.skip_pending = false;
        let res = self.inner.seek(&lk).and_then(|_| self.find_next());
        self.seek_buf = lk;
        self.settle(res);
    }

    /// Advances to the next visible key.
    pub fn next(&mut self) {
        if !self.valid {
            return;
        }
        let res = self.find_next();
        self.settle(res);
    }

    fn settle(&mut self, res: Result<(), LsmError>) {
        if let Err(e) = res {
            self.valid = false;
            self.status = Some(e);
        }
    }

    /// Whether the iterator is at a key.
    pub fn valid(&self) -> bool {
        self.valid
    }

    /// The current user key.
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// The current value (a view into the SST block when it comes from a file).
    pub fn value(&self) -> &[u8] {
        if self.value_in_buf {
            &self.vbuf
        } else {
            &self.value
        }
    }

    /// The current value as a [`ValueSlice`] (a copy when the value came from a memtable or a merge).
    pub fn value_slice(&self) -> ValueSlice {
        if self.value_in_buf {
            ValueSlice::from_vec(self.vbuf.clone())
        } else {
            self.value.clone()
        }
    }

    /// The error that stopped the iterator, if any.
    pub fn status(&self) -> Result<(), &LsmError> {
        self.status.as_ref().map_or(Ok(()), Err)
    }

    /// Takes the error that stopped the iterator, if any (leaving none behind).
    pub fn take_status(&mut self) -> Result<(), LsmError> {
        self.status.take().map_or(Ok(()), Err)
    }

    fn out_of_bounds(&self, uk: &[u8]) -> bool {
        self.upper.as_ref().is_some_and(|u| uk >= u.as_slice())
            || self.prefix.as_ref().is_some_and(|p| !uk.starts_with(p))
    }

    /// Moves `inner` past the remaining versions of the current key.
    fn skip_current_versions(&mut self) -> Result<(), LsmError> {
        while self.inner.valid() && ikey::user_key(self.inner.key()) == self.key.as_slice() {
            self.inner.next()?;
        }
        Ok(())
    }

    /// From the inner position (the start of some user key's versions, or inside the versions of the key
    /// returned last), finds the next visible entry.
    fn find_next(&mut self) -> Result<(), LsmError> {
        self.valid = false;
        if std::mem::take(&mut self.skip_pending) {
            self.skip_current_versions()?;
        }
        loop {
            if !self.inner.valid() {
                return Ok(());
            }
            let p = parse(self.inner.key())?;
            if self.out_of_bounds(p.user_key) {
                return Ok(());
            }
            if p.seqno > self.snapshot || p.kind == ValueKind::RangeDelete {
                self.inner.next()?;
                continue;
            }
            // Reuse the key buffer of the previous entry (no allocation per entry).
            self.key.clear();
            self.key.extend_from_slice(p.user_key);
            let rd = self.frags.covering(&self.key);
            if p.seqno >= rd {
                match p.kind {
                    ValueKind::Put => {
                        match self.inner.value_shared() {
                            Some(v) => {
                                self.value = v;
                                self.value_in_buf = false;
                            }
                            None => {
                                self.vbuf.clear();
                                self.vbuf.extend_from_slice(self.inner.value());
                                self.value_in_buf = true;
                            }
                        }
                        self.valid = true;
                        self.skip_pending = true;
                        return Ok(());
                    }
                    ValueKind::Merge => {
                        let uk = self.key.as_slice();
                        let mut operands = vec![self.inner.value().to_vec()];
                        let mut base: Option<Vec<u8>> = None;
                        self.inner.next()?;
                        while self.inner.valid() {
                            let q = parse(self.inner.key())?;
                            if q.user_key != uk {
                                break;
                            }
                            if q.seqno > self.snapshot || q.kind == ValueKind::RangeDelete {
                                self.inner.next()?;
                                continue;
                            }
                            if q.seqno < rd {
                                break;
                            }
                            match q.kind {
                                ValueKind::Merge => operands.push(self.inner.value().to_vec()),
                                ValueKind::Put => {
                                    base = Some(self.inner.value().to_vec());
                                    break;
                                }
                                _ => break,
                            }
                            self.inner.next()?;
                        }
                        self.vbuf =
                            full_merge(self.merge_op.as_ref(), uk, base.as_deref(), &operands)?;
                        self.value_in_buf = true;
                        self.valid = true;
                        self.skip_pending = true;
                        return Ok(());
                    }
                    _ => {}
                }
            }
            // Deleted or covered: skip the remaining versions of this key.
            self.skip_current_versions()?;
        }
    }
}

fn parse(k: &[u8]) -> Result<ikey::ParsedKey<'_>, LsmError> {
    ikey::parse(k).ok_or_else(|| LsmError::Corruption {
        at: Location::file("<iterator>"),
        detail: format!("malformed internal key {k:?}"),
    })
}

#[cfg(test)]
mod tests {
    use super::super::memtable::lookup_key;
    use super::*;

    #[test]
    fn mem_iter_crosses_chunk_boundaries() {
        let m = Arc::new(MemTable::new(0));
        for i in 0..1000u32 {
            m.add(
                u64::from(i) + 1,
                ValueKind::Put,
                format!("k{i:04}").as_bytes(),
                b"v",
            );
        }
        let mut it = MemIter::new(Arc::clone(&m));
        it.seek_to_first().unwrap();
        let mut n = 0u32;
        while it.valid() {
            assert_eq!(ikey::user_key(it.key()), format!("k{n:04}").as_bytes());
            n += 1;
            it.next().unwrap();
        }
        assert_eq!(n, 1000);
        it.seek(&lookup_key(b"k0500", u64::MAX)).unwrap();
        let mut n = 500u32;
        while it.valid() {
            assert_eq!(ikey::user_key(it.key()), format!("k{n:04}").as_bytes());
            n += 1;
            it.next().unwrap();
        }
        assert_eq!(n, 1000);
    }
}
