//! Per-file key bounds: a file of the version may be read as if it held only the user keys in `[lo, hi)`,
//! although its bytes hold more (a file adopted from a checkpoint whose other key groups belong to another
//! instance). Reads skip it outside the bounds, iterators over it are clamped to them, its range tombstones
//! are clipped to them, and compaction reads it through the same clamp, so compaction outputs hold nothing
//! outside and carry no bounds (`design/lsm-engine.md`, "File bounds").

use std::sync::Arc;

use super::ikey::{self, ValueKind};
use super::iter::InternalIterator;
use super::rangedel::RangeTombstone;
use super::sst::{SstIter, SstReader};
use super::LsmError;

/// A user-key range `[lo, hi)`: the only keys of a bounded file that the engine reads.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KeyBounds {
    /// First user key inside.
    pub lo: Vec<u8>,
    /// First user key after the range (exclusive).
    pub hi: Vec<u8>,
}

impl KeyBounds {
    /// Bounds `[lo, hi)`.
    pub fn new(lo: Vec<u8>, hi: Vec<u8>) -> Self {
        Self { lo, hi }
    }

    /// Whether `key` lies inside.
    #[inline]
    pub fn contains(&self, key: &[u8]) -> bool {
        self.lo.as_slice() <= key && key < self.hi.as_slice()
    }

    /// Whether no key lies inside.
    pub fn is_empty(&self) -> bool {
        self.lo >= self.hi
    }

    /// The intersection with `[lo, hi)`.
    pub fn intersect(&self, lo: &[u8], hi: &[u8]) -> KeyBounds {
        KeyBounds {
            lo: self.lo.as_slice().max(lo).to_vec(),
            hi: self.hi.as_slice().min(hi).to_vec(),
        }
    }

    /// `t` cut to the bounds, or `None` if nothing of it lies inside.
    pub fn clip(&self, t: &RangeTombstone) -> Option<RangeTombstone> {
        let start = t.start.as_slice().max(self.lo.as_slice());
        let end = t.end.as_slice().min(self.hi.as_slice());
        (start < end).then(|| RangeTombstone {
            start: start.to_vec(),
            end: end.to_vec(),
            seqno: t.seqno,
        })
    }
}

/// The smallest and largest internal keys of what a file shows inside `bounds`: its point entries there and
/// the starts of its range tombstones `tombs` clipped to them (a tombstone start is keyed with the
/// tombstone's seqno, as in the file). `None` when nothing of the file lies inside.
pub(crate) fn bounded_extent(
    reader: &Arc<SstReader>,
    bounds: &KeyBounds,
    tombs: &[RangeTombstone],
) -> Result<Option<(Vec<u8>, Vec<u8>)>, LsmError> {
    let mut smallest: Option<Vec<u8>> = None;
    let mut largest: Option<Vec<u8>> = None;
    let mut widen = |k: Vec<u8>| {
        if smallest
            .as_ref()
            .is_none_or(|s| ikey::compare(&k, s).is_lt())
        {
            smallest = Some(k.clone());
        }
        if largest
            .as_ref()
            .is_none_or(|l| ikey::compare(&k, l).is_gt())
        {
            largest = Some(k);
        }
    };
    // The first point entry at or after `lo` (tombstone entries are accounted from `tombs`, clipped).
    let mut it = reader.iter();
    it.seek(&ikey::lookup_key(&bounds.lo))?;
    while it.valid() && bounds.contains(ikey::user_key(it.key())) {
        if !is_range_delete(it.key()) {
            widen(it.key().to_vec());
            break;
        }
        it.next()?;
    }
    if let Some(k) = reader.last_point_key_before(&bounds.hi, &bounds.lo)? {
        widen(k);
    }
    for t in tombs.iter().filter_map(|t| bounds.clip(t)) {
        let mut k = Vec::new();
        ikey::encode(&mut k, &t.start, t.seqno, ValueKind::RangeDelete);
        widen(k);
    }
    Ok(smallest.zip(largest))
}

#[inline]
fn is_range_delete(ikey: &[u8]) -> bool {
    ikey.last() == Some(&(ValueKind::RangeDelete as u8))
}

/// A cursor over one file clamped to its bounds: it never shows an entry outside `[lo, hi)`, and it leaves
/// out the file's range tombstone entries (whose extents the bounds may cut; the clipped tombstones reach
/// reads through the version and compactions through [`TombIter`]). Without bounds it is the file's cursor.
pub(crate) struct ClampedIter {
    inner: SstIter,
    bounds: Option<KeyBounds>,
    /// `lo` as a lookup key (sorting before every version of it).
    lo_key: Vec<u8>,
    valid: bool,
}

impl ClampedIter {
    /// A cursor over `reader` limited to `bounds`.
    pub fn new(reader: &Arc<SstReader>, bounds: Option<&KeyBounds>) -> Self {
        Self {
            inner: reader.iter(),
            lo_key: bounds.map(|b| ikey::lookup_key(&b.lo)).unwrap_or_default(),
            bounds: bounds.cloned(),
            valid: false,
        }
    }

    /// From the inner position, skips tombstone entries and stops at the upper bound.
    fn settle(&mut self) -> Result<(), LsmError> {
        let Some(b) = &self.bounds else {
            self.valid = self.inner.valid();
            return Ok(());
        };
        while self.inner.valid() && is_range_delete(self.inner.key()) {
            self.inner.next()?;
        }
        self.valid = self.inner.valid() && ikey::user_key(self.inner.key()) < b.hi.as_slice();
        Ok(())
    }
}

impl InternalIterator for ClampedIter {
    fn seek_to_first(&mut self) -> Result<(), LsmError> {
        if self.bounds.is_some() {
            self.inner.seek(&self.lo_key)?;
        } else {
            self.inner.seek_to_first()?;
        }
        self.settle()
    }
    fn seek(&mut self, target: &[u8]) -> Result<(), LsmError> {
        if self.bounds.is_some() && ikey::compare(target, &self.lo_key).is_lt() {
            self.inner.seek(&self.lo_key)?;
        } else {
            self.inner.seek(target)?;
        }
        self.settle()
    }
    fn next(&mut self) -> Result<(), LsmError> {
        if !self.valid {
            return Ok(());
        }
        self.inner.next()?;
        self.settle()
    }
    fn valid(&self) -> bool {
        self.valid
    }
    fn key(&self) -> &[u8] {
        if self.valid {
            self.inner.key()
        } else {
            &[]
        }
    }
    fn value(&self) -> &[u8] {
        if self.valid {
            self.inner.value()
        } else {
            &[]
        }
    }
    fn value_shared(&self) -> Option<super::slice::ValueSlice> {
        self.valid.then(|| self.inner.value_slice())
    }
}

/// A cursor over range tombstones as the `RangeDelete` entries a file would hold (user key = start, value =
/// end): a bounded file's clipped tombstones, for compactions.
pub(crate) struct TombIter {
    entries: Vec<(Vec<u8>, Vec<u8>)>,
    pos: usize,
}

impl TombIter {
    /// A cursor over `tombs`.
    pub fn new(tombs: &[RangeTombstone]) -> Self {
        let mut entries: Vec<(Vec<u8>, Vec<u8>)> = tombs
            .iter()
            .map(|t| {
                let mut k = Vec::with_capacity(t.start.len() + ikey::TRAILER_LEN);
                ikey::encode(&mut k, &t.start, t.seqno, ValueKind::RangeDelete);
                (k, t.end.clone())
            })
            .collect();
        entries.sort_by(|a, b| ikey::compare(&a.0, &b.0));
        Self {
            pos: entries.len(),
            entries,
        }
    }
}

impl InternalIterator for TombIter {
    fn seek_to_first(&mut self) -> Result<(), LsmError> {
        self.pos = 0;
        Ok(())
    }
    fn seek(&mut self, target: &[u8]) -> Result<(), LsmError> {
        self.pos = self
            .entries
            .partition_point(|(k, _)| ikey::compare(k, target).is_lt());
        Ok(())
    }
    fn next(&mut self) -> Result<(), LsmError> {
        self.pos = (self.pos + 1).min(self.entries.len());
        Ok(())
    }
    fn valid(&self) -> bool {
        self.pos < self.entries.len()
    }
    fn key(&self) -> &[u8] {
        self.entries.get(self.pos).map_or(&[], |e| e.0.as_slice())
    }
    fn value(&self) -> &[u8] {
        self.entries.get(self.pos).map_or(&[], |e| e.1.as_slice())
    }
}
