//! Cursors over the files of one level: one file of L0 (clamped when bounded), and the sorted, disjoint files
//! of a deeper level opened lazily one after the other.

use std::sync::Arc;

use super::clamped::ClampedIter;
use super::internal::InternalIterator;
use crate::ikey;
use crate::slice::ValueSlice;
use crate::sst::SstIter;
use crate::version::FileMeta;
use crate::LsmError;

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

/// A compaction's cursor over one input file: [`file_iter`], with blocks read from the file kept out of the
/// block cache ([`SstReader::iter_for_compaction`](crate::sst::SstReader::iter_for_compaction)).
pub(crate) fn compaction_file_iter(f: &FileMeta) -> Box<dyn InternalIterator> {
    let inner = f.reader.iter_for_compaction();
    if f.info.bounds.is_some() {
        Box::new(ClampedIter::over(inner, f.info.bounds.as_ref()))
    } else {
        Box::new(inner)
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
