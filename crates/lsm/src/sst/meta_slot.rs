//! An open file's index or filter in memory: where it lies in the file, the buffer the reader keeps of it,
//! or its entry in the block cache (see [`MetadataPlacement`](super::meta::MetadataPlacement)), and the
//! buffer a read holds while it uses it.

use std::sync::{Arc, OnceLock};

use super::format::BlockHandle;
use crate::cache::BlockCache;
use crate::env::MemoryReservation;
use crate::words::Words;

/// Where a reader's index or filter lies in the file, and the buffer the reader keeps of it (module
/// [`meta`](super::meta) for the index; the filter's bloom bytes as they are in the file).
pub(super) struct MetaSlot {
    /// The block in the file (its offset is also the cache key's).
    pub(super) handle: BlockHandle,
    /// The buffer, when the reader keeps it ([`Resident`](super::meta::MetadataPlacement::Resident), or too
    /// large for the cache): a copy, in a map of its own when large (`words`).
    pub(super) kept: OnceLock<Words<u8>>,
    /// Its length.
    pub(super) len: usize,
    /// The budget's charge for a buffer kept after the file was opened.
    late_charge: OnceLock<MemoryReservation>,
}

impl MetaSlot {
    pub(super) fn new(handle: BlockHandle, buf: &Arc<Vec<u8>>, keep: bool) -> Self {
        let kept = OnceLock::new();
        if keep {
            let _ = kept.set(Words::copy_of(buf));
        }
        MetaSlot {
            handle,
            kept,
            len: buf.len(),
            late_charge: OnceLock::new(),
        }
    }

    /// Inserts a freshly loaded buffer into `cache` under file `file_number`; the slot keeps it instead
    /// (charged as metadata) when it is too large for the cache to keep (see
    /// [`Cached`](super::meta::MetadataPlacement::Cached)).
    pub(super) fn place(
        &self,
        cache: &BlockCache,
        file_number: u64,
        buf: Arc<Vec<u8>>,
    ) -> Pinned<'_> {
        cache.insert(file_number, self.handle.offset, Arc::clone(&buf));
        if buf.len().saturating_mul(16) >= cache.capacity()
            && !cache.contains(file_number, self.handle.offset)
            && self.kept.set(Words::copy_of(&buf)).is_ok()
        {
            if let Some(b) = cache.budget() {
                let _ = self.late_charge.set(b.charge_metadata(buf.len()));
            }
        }
        Pinned::Cached(buf)
    }

    /// The buffer: the slot's, the cache's, or loaded from the file by `load` (and placed).
    #[inline]
    pub(super) fn pinned<E>(
        &self,
        cache: &BlockCache,
        file_number: u64,
        load: impl FnOnce() -> Result<Vec<u8>, E>,
    ) -> Result<Pinned<'_>, E> {
        if let Some(b) = self.kept.get() {
            return Ok(Pinned::Kept(b));
        }
        if let Some(b) = cache.get(file_number, self.handle.offset) {
            return Ok(Pinned::Cached(b));
        }
        let buf = Arc::new(load()?);
        Ok(self.place(cache, file_number, buf))
    }
}

/// An index or filter buffer held for the length of a read: borrowed from the reader, or a reference to
/// the cache's entry (which keeps its bytes alive if the cache evicts it meanwhile).
pub(super) enum Pinned<'a> {
    Kept(&'a [u8]),
    Cached(Arc<Vec<u8>>),
}

impl std::ops::Deref for Pinned<'_> {
    type Target = [u8];

    #[inline]
    fn deref(&self) -> &[u8] {
        match self {
            Pinned::Kept(b) => b,
            Pinned::Cached(b) => b,
        }
    }
}
