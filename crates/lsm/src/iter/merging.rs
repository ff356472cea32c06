//! The merging cursor over every source of a read, and the choice of those sources.

use std::sync::Arc;

use super::internal::{InternalIterator, MemIter};
use super::level::{file_iter, level_iter};
use crate::ikey;
use crate::memtable::MemTable;
use crate::prefix::prefix_successor;
use crate::slice::ValueSlice;
use crate::sst::PrefixProbe;
use crate::version::{FileMeta, Version};
use crate::LsmError;

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
