//! [`DbIter`], the user-facing cursor over the database at one snapshot.

use std::sync::Arc;

use super::internal::InternalIterator;
use super::merging::{children, MergingIter};
use crate::ikey::{self, ValueKind};
use crate::memtable::MemTable;
use crate::merge::{full_merge, MergeOperator};
use crate::rangedel::Fragments;
use crate::slice::ValueSlice;
use crate::snapshot::Snapshot;
use crate::sst::PrefixProbe;
use crate::version::Version;
use crate::{Location, LsmError};

/// A user-facing cursor over the database at one snapshot, in key order.
///
/// As a cursor ([`seek`](Self::seek), [`next`](Self::next), [`key`](Self::key), [`value`](Self::value)) it
/// copies nothing per entry: the key and value it shows are borrowed from it until it moves. As an
/// [`Iterator`] (`for entry in db.iter(..)`, or [`entries`](Self::entries)) it yields owned entries instead.
/// An error stops it: the cursor then reports it through [`status`](Self::status), the iterator as its last
/// item.
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
    /// Whether `seek` (or `seek_to_first`) was called.
    positioned: bool,
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
            positioned: false,
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
        self.positioned = true;
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

    /// The entries from the current position on (from the first key if the cursor was never positioned),
    /// as an [`Iterator`] of owned keys and values.
    pub fn entries(mut self) -> DbEntries {
        if !self.positioned {
            self.seek_to_first();
        }
        DbEntries {
            iter: self,
            done: false,
        }
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

impl IntoIterator for DbIter {
    type Item = Result<(Vec<u8>, ValueSlice), LsmError>;
    type IntoIter = DbEntries;

    /// [`DbIter::entries`].
    fn into_iter(self) -> DbEntries {
        self.entries()
    }
}

/// The entries of a [`DbIter`] as an [`Iterator`]: each key copied out, each value a [`ValueSlice`] (a view
/// into the file when the value sits in an SST block, a copy otherwise). An error ends it: it is the last
/// item.
pub struct DbEntries {
    iter: DbIter,
    done: bool,
}

impl DbEntries {
    /// The cursor behind the entries, positioned at the next entry to yield.
    pub fn into_cursor(self) -> DbIter {
        self.iter
    }
}

impl Iterator for DbEntries {
    type Item = Result<(Vec<u8>, ValueSlice), LsmError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        if !self.iter.valid() {
            self.done = true;
            return self.iter.take_status().err().map(Err);
        }
        let entry = (self.iter.key().to_vec(), self.iter.value_slice());
        self.iter.next();
        Some(Ok(entry))
    }
}

impl std::iter::FusedIterator for DbEntries {}

fn parse(k: &[u8]) -> Result<ikey::ParsedKey<'_>, LsmError> {
    ikey::parse(k).ok_or_else(|| LsmError::Corruption {
        at: Location::file("<iterator>"),
        detail: format!("malformed internal key {k:?}"),
    })
}
