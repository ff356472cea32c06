//! Per-file key bounds: a file of the version may be read as if it held only the user keys in `[lo, hi)`,
//! although its bytes hold more (a file adopted from a checkpoint whose other key groups belong to another
//! instance). Reads skip it outside the bounds, iterators over it are clamped to them, its range tombstones
//! are clipped to them, and compaction reads it through the same clamp, so compaction outputs hold nothing
//! outside and carry no bounds (`design/lsm-engine.md`, "File bounds").

use std::sync::Arc;

use super::ikey::{self, is_range_delete, ValueKind};
use super::rangedel::RangeTombstone;
use super::sst::SstReader;
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
    pub(crate) fn clip(&self, t: &RangeTombstone) -> Option<RangeTombstone> {
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
