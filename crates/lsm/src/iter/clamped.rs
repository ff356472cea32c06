//! Cursors over what a bounded file shows: a file's own cursor clamped to its [`KeyBounds`], and its
//! clipped range tombstones as entries, for compactions (`design/lsm-engine.md`, "File bounds").

use std::sync::Arc;

use super::internal::InternalIterator;
use crate::bounds::KeyBounds;
use crate::ikey::{self, is_range_delete, ValueKind};
use crate::rangedel::RangeTombstone;
use crate::slice::ValueSlice;
use crate::sst::{SstIter, SstReader};
use crate::LsmError;

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
        Self::over(reader.iter(), bounds)
    }

    /// A cursor over `inner` (a file's cursor, not positioned) within `bounds`.
    pub fn over(inner: SstIter, bounds: Option<&KeyBounds>) -> Self {
        Self {
            inner,
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
    fn value_shared(&self) -> Option<ValueSlice> {
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
