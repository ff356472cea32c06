//! The bytes of an open SST file: a memory map of a real file or an image in memory, zero-copy views of
//! them, and read-ahead hints to the kernel. Why a map is sound: module `reader`.

use std::sync::Arc;

use memmap2::{Advice, Mmap};

use crate::slice::ValueSlice;
use crate::storage::FileBytes;

/// The bytes of an open file.
pub(super) enum Backing {
    Map(Arc<Mmap>),
    Mem(Arc<[u8]>),
}

impl From<FileBytes> for Backing {
    fn from(b: FileBytes) -> Self {
        match b {
            FileBytes::Map(m) => Backing::Map(m),
            FileBytes::Mem(m) => Backing::Mem(m),
        }
    }
}

impl Backing {
    #[inline]
    pub(super) fn bytes(&self) -> &[u8] {
        match self {
            Backing::Map(m) => m,
            Backing::Mem(b) => b,
        }
    }

    pub(super) fn view(&self, start: usize, end: usize) -> Option<ValueSlice> {
        match self {
            Backing::Map(m) => ValueSlice::from_map(Arc::clone(m), start..end),
            Backing::Mem(b) => ValueSlice::from_shared(Arc::clone(b), start..end),
        }
    }

    /// Asks the kernel to read `[start, end)` of a mapped file into memory without waiting for it
    /// (`MADV_WILLNEED`, which starts the reads and returns). Only a hint: a failure changes no result, so
    /// it is ignored; bytes in memory do nothing.
    pub(super) fn will_need(&self, start: usize, end: usize) {
        if let Backing::Map(m) = self {
            let end = end.min(m.len());
            if start < end {
                let _ = m.advise_range(Advice::WillNeed, start, end - start);
            }
        }
    }
}
