//! The engine's cursors over internal keys: the [`InternalIterator`] trait every source of a read implements,
//! and its implementations for an SST file and a memtable.

use std::sync::Arc;

use crate::memtable::{MemCursor, MemTable};
use crate::slice::ValueSlice;
use crate::sst::SstIter;
use crate::LsmError;

/// A cursor over internal keys in [`ikey::compare`](crate::ikey::compare) order.
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ikey::{self, ValueKind};
    use crate::memtable::lookup_key;

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
