//! Iterators: internal iterators over memtables and SSTs, a merging iterator, and the user-facing
//! [`DbIter`] that resolves versions, tombstones (point and range) and merge operands at a snapshot.

use std::sync::Arc;

use super::ikey::{self, ValueKind};
use super::memtable::{lookup_key, MemEntry, MemTable};
use super::merge::MergeOperator;
use super::rangedel::Fragments;
use super::slice::ValueSlice;
use super::snapshot::Snapshot;
use super::sst::SstIter;
use super::version::{FileMeta, Version};
use super::LsmError;

/// A cursor over internal keys in [`ikey::compare`] order.
pub(crate) trait InternalIterator: Send {
    fn seek_to_first(&mut self) -> Result<(), LsmError>;
    /// Positions at the first entry `>= target` (an internal key).
    fn seek(&mut self, target: &[u8]) -> Result<(), LsmError>;
    fn next(&mut self) -> Result<(), LsmError>;
    fn valid(&self) -> bool;
    fn key(&self) -> &[u8];
    fn value(&self) -> &[u8];
    fn value_slice(&self) -> ValueSlice {
        ValueSlice::from_vec(self.value().to_vec())
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
    fn value_slice(&self) -> ValueSlice {
        SstIter::value_slice(self)
    }
}

/// A cursor over a memtable. Entries are copied out in chunks (one skiplist seek per chunk), since the
/// skiplist's own cursors borrow the map.
pub(crate) struct MemIter {
    mem: Arc<MemTable>,
    buf: std::collections::VecDeque<MemEntry>,
    /// Whether the skiplist holds entries beyond `buf`.
    more: bool,
}

/// Entries copied per skiplist seek.
const MEM_CHUNK: usize = 64;

impl MemIter {
    pub fn new(mem: Arc<MemTable>) -> Self {
        Self {
            mem,
            buf: Default::default(),
            more: false,
        }
    }

    fn fill(&mut self, from: Option<&[u8]>, exclusive: bool) {
        let chunk = self.mem.entries_from(from, exclusive, MEM_CHUNK);
        self.more = chunk.len() == MEM_CHUNK;
        self.buf = chunk.into();
    }
}

impl InternalIterator for MemIter {
    fn seek_to_first(&mut self) -> Result<(), LsmError> {
        self.fill(None, false);
        Ok(())
    }
    fn seek(&mut self, target: &[u8]) -> Result<(), LsmError> {
        self.fill(Some(target), false);
        Ok(())
    }
    fn next(&mut self) -> Result<(), LsmError> {
        if self.buf.len() == 1 && self.more {
            if let Some(last) = self.buf.pop_front() {
                self.fill(Some(last.ikey()), true);
            }
        } else {
            self.buf.pop_front();
        }
        Ok(())
    }
    fn valid(&self) -> bool {
        !self.buf.is_empty()
    }
    fn key(&self) -> &[u8] {
        self.buf.front().map_or(&[], |c| c.ikey())
    }
    fn value(&self) -> &[u8] {
        self.buf.front().map_or(&[], |c| c.value())
    }
}

/// A cursor over the non-overlapping, sorted files of one level (L1+), opening files lazily.
pub(crate) struct LevelIter {
    files: Vec<Arc<FileMeta>>,
    idx: usize,
    iter: Option<SstIter>,
}

impl LevelIter {
    pub fn new(files: Vec<Arc<FileMeta>>) -> Self {
        Self {
            files,
            idx: 0,
            iter: None,
        }
    }

    fn open(&mut self, idx: usize) {
        self.idx = idx;
        self.iter = self.files.get(idx).map(|f| f.reader.iter());
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

impl InternalIterator for LevelIter {
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
    fn value_slice(&self) -> ValueSlice {
        self.iter
            .as_ref()
            .map_or_else(ValueSlice::empty, |i| i.value_slice())
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
    fn value_slice(&self) -> ValueSlice {
        self.current
            .map_or_else(ValueSlice::empty, |i| self.children[i].value_slice())
    }
}

/// Children for a full view: memtables (newest first), each L0 file, then one iterator per deeper level.
pub(crate) fn children(
    mems: &[Arc<MemTable>],
    version: &Version,
) -> Vec<Box<dyn InternalIterator>> {
    let mut out: Vec<Box<dyn InternalIterator>> = Vec::new();
    for m in mems {
        out.push(Box::new(MemIter::new(Arc::clone(m))));
    }
    for (level, files) in version.levels.iter().enumerate() {
        if level == 0 {
            for f in files {
                out.push(Box::new(f.reader.iter()));
            }
        } else if !files.is_empty() {
            out.push(Box::new(LevelIter::new(files.clone())));
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
    value: ValueSlice,
    valid: bool,
    status: Option<LsmError>,
    _version: Arc<Version>,
    _snapshot: Option<Snapshot>,
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
}

impl DbIter {
    pub(crate) fn new(p: IterParts) -> Self {
        let mut tombs = Vec::new();
        for m in &p.mems {
            tombs.extend(m.range_dels());
        }
        let frags = Fragments::build(tombs.iter().chain(p.version.range_dels.iter()), p.snapshot);
        let inner = MergingIter::new(children(&p.mems, &p.version));
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
            valid: false,
            status: None,
            _version: p.version,
            _snapshot: p.hold,
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
        let mut target = key.to_vec();
        for b in [&self.lower, &self.prefix].into_iter().flatten() {
            if target < *b {
                target = b.clone();
            }
        }
        let res = self
            .inner
            .seek(&lookup_key(&target, self.snapshot))
            .and_then(|_| self.find_next());
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

    /// The current value (zero-copy when it sits in an uncompressed SST block).
    pub fn value(&self) -> &[u8] {
        &self.value
    }

    /// The current value as a [`ValueSlice`].
    pub fn value_slice(&self) -> ValueSlice {
        self.value.clone()
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

    /// From the inner position (the start of some user key's versions), finds the next visible entry.
    fn find_next(&mut self) -> Result<(), LsmError> {
        self.valid = false;
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
            let mut uk = std::mem::take(&mut self.key);
            uk.clear();
            uk.extend_from_slice(p.user_key);
            let rd = self.frags.covering(&uk);
            let mut found: Option<ValueSlice> = None;
            if p.seqno >= rd {
                match p.kind {
                    ValueKind::Put => found = Some(self.inner.value_slice()),
                    ValueKind::Merge => {
                        let mut operands = vec![self.inner.value().to_vec()];
                        let mut base: Option<Vec<u8>> = None;
                        self.inner.next()?;
                        while self.inner.valid() {
                            let q = parse(self.inner.key())?;
                            if q.user_key != uk.as_slice() {
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
                        let v =
                            full_merge(self.merge_op.as_ref(), &uk, base.as_deref(), &operands)?;
                        found = Some(ValueSlice::from_vec(v));
                    }
                    _ => {}
                }
            }
            // Skip the remaining versions of this key.
            while self.inner.valid() && ikey::user_key(self.inner.key()) == uk.as_slice() {
                self.inner.next()?;
            }
            self.key = uk;
            if let Some(v) = found {
                self.value = v;
                self.valid = true;
                return Ok(());
            }
        }
    }
}

fn parse(k: &[u8]) -> Result<ikey::ParsedKey<'_>, LsmError> {
    ikey::parse(k).ok_or_else(|| LsmError::Corruption {
        file: String::from("<iterator>"),
        detail: format!("malformed internal key {k:?}"),
    })
}

#[cfg(test)]
mod tests {
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
