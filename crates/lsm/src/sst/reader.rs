//! An open SST file ([`SstReader`]): opening and checking it, its index and filter (kept, or placed in the
//! block cache), filter probes, point lookups and data blocks (verified once, decompressed into the cache).
//! Cursors over the file are module `iter`; the parts the reader is made of are its siblings `backing`
//! (the file's bytes), `meta_load` (index and filter blocks verified and decoded) and `meta_slot` (where
//! index and filter live while the file is open).
//!
//! # Memory-map soundness
//! Files are read through `memmap2::Mmap`. Mapping is sound only while nobody truncates or rewrites the file:
//! a shrinking file turns reads of the map into `SIGBUS`, a rewritten one changes bytes under shared
//! references. The engine guarantees both: SST files are written once under a fresh file number (names are
//! never reused; [`crate::io::FileWriter`] creates with `O_EXCL`), never modified after `finish`, and
//! deleted only by unlinking, which leaves existing maps valid. Checkpoints copy or hard-link, never rewrite.

use std::cell::RefCell;
use std::cmp::Ordering;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::Arc;

use memmap2::Advice;

use super::backing::Backing;
use super::block::{user_key_hash, BlockCursor, HashLookup};
use super::cold::{self, Readahead};
use super::format::{
    checked_block, decompress_lz4, locate_block, lz4_uncompressed_len, BlockHandle, Footer,
    BLOCK_TRAILER_LEN, CODEC_NONE, FOOTER_LEN,
};
use super::meta::{IndexView, MetadataPlacement};
use super::meta_load::{filter_bits, load_index};
use super::meta_slot::{MetaSlot, Pinned};
use super::probe::PrefixProbe;
use super::{bloom, properties, SstProperties};
use crate::cache::BlockCache;
use crate::coding::DecodeError;
use crate::env::MemoryReservation;
use crate::ikey::{self, ValueKind};
use crate::slice::ValueSlice;
use crate::storage::Storage;
use crate::{Location, LsmError};

/// What an open reader's index and filter hold, and what it keeps in memory besides the cache.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReaderMetadata {
    /// Data blocks (index entries).
    pub data_blocks: u64,
    /// Bytes of the index entries' keys (every data block's last internal key).
    pub index_key_bytes: u64,
    /// Bytes of the decoded index (keys plus 28 bytes per block).
    pub index_bytes: u64,
    /// Bytes of the bloom filter.
    pub filter_bytes: u64,
    /// Bytes the reader holds outside the block cache (what the budget charges as SST metadata).
    pub resident_bytes: u64,
}

impl std::ops::AddAssign for ReaderMetadata {
    fn add_assign(&mut self, o: Self) {
        self.data_blocks += o.data_blocks;
        self.index_key_bytes += o.index_key_bytes;
        self.index_bytes += o.index_bytes;
        self.filter_bytes += o.filter_bytes;
        self.resident_bytes += o.resident_bytes;
    }
}

/// An open, immutable SST file.
pub struct SstReader {
    path: PathBuf,
    file_number: u64,
    backing: Backing,
    properties: SstProperties,
    /// The decoded index (module [`meta`](super::meta)).
    index: MetaSlot,
    /// The filter's bloom bytes (10 bits per key by default: 1.25 bytes per key), copied out of the file so
    /// that a point read never faults on them.
    filter: Option<MetaSlot>,
    /// Number of data blocks.
    pub(super) blocks: usize,
    /// Bytes of the index entries' keys.
    index_key_bytes: usize,
    /// The bytes charged to the budget by `_metadata_charge`.
    resident_bytes: usize,
    /// Index and filter are placed in the cache ([`MetadataPlacement::Cached`]).
    cached: bool,
    filter_whole: bool,
    /// The filter holds the prefix of every entry, under the extractor whose name hashes to this.
    filter_prefix: Option<u64>,
    cache: Arc<BlockCache>,
    /// One bit per data block: its checksum was verified (raw blocks, served from the map).
    verified: Box<[AtomicU64]>,
    /// One bit per data block: the checksum of its compressed payload was verified (the file is immutable, so
    /// a block decompressed again after its cached copy was evicted is not hashed again).
    lz4_verified: Box<[AtomicU64]>,
    /// Format version 2 or later: data blocks may carry a hash index.
    pub(super) hashed_blocks: bool,
    /// End of the data blocks (start of the metadata blocks): read-ahead stops there.
    data_end: usize,
    /// The charge of the metadata held above (index and filter when kept, bits, this struct) to the cache's
    /// memory budget, if any.
    _metadata_charge: Option<MemoryReservation>,
}

impl SstReader {
    /// Maps the file and validates footer, index, filter and properties blocks (checksums and structure).
    #[cfg(feature = "test-util")]
    pub fn open(
        path: &Path,
        file_number: u64,
        cache: Arc<BlockCache>,
    ) -> Result<Arc<Self>, LsmError> {
        Self::open_on(&crate::storage::OsStorage, path, file_number, cache)
    }

    /// Opens a file of `storage`: mapped from the real file system (see the module documentation on
    /// soundness), an in-memory image from another storage. Its index and filter are kept by the reader
    /// ([`MetadataPlacement::Resident`]).
    pub fn open_on(
        storage: &dyn Storage,
        path: &Path,
        file_number: u64,
        cache: Arc<BlockCache>,
    ) -> Result<Arc<Self>, LsmError> {
        Self::open_placed(
            storage,
            path,
            file_number,
            cache,
            MetadataPlacement::Resident,
        )
    }

    /// [`SstReader::open_on`] with its index and filter placed as `placement` says.
    pub fn open_placed(
        storage: &dyn Storage,
        path: &Path,
        file_number: u64,
        cache: Arc<BlockCache>,
        placement: MetadataPlacement,
    ) -> Result<Arc<Self>, LsmError> {
        let io = |source| LsmError::Io {
            path: path.to_path_buf(),
            source,
        };
        let len = storage.file_size(path).map_err(io)?;
        if len < FOOTER_LEN as u64 {
            return Err(corruption(
                path,
                format!("file of {len} bytes is too short for the {FOOTER_LEN}-byte footer"),
            ));
        }
        let bytes = storage.map(path).map_err(io)?;
        Self::from_backing(bytes.into(), path, file_number, cache, placement)
    }

    /// Opens an SST image held in memory (for tests and fuzzing); `path` only names it in errors.
    #[cfg(feature = "test-util")]
    pub fn open_bytes(
        bytes: Arc<[u8]>,
        path: &Path,
        file_number: u64,
        cache: Arc<BlockCache>,
    ) -> Result<Arc<Self>, LsmError> {
        Self::open_bytes_placed(bytes, path, file_number, cache, MetadataPlacement::Resident)
    }

    /// [`SstReader::open_bytes`] with its index and filter placed as `placement` says.
    #[cfg(feature = "test-util")]
    pub fn open_bytes_placed(
        bytes: Arc<[u8]>,
        path: &Path,
        file_number: u64,
        cache: Arc<BlockCache>,
        placement: MetadataPlacement,
    ) -> Result<Arc<Self>, LsmError> {
        Self::from_backing(Backing::Mem(bytes), path, file_number, cache, placement)
    }

    fn from_backing(
        backing: Backing,
        path: &Path,
        file_number: u64,
        cache: Arc<BlockCache>,
        placement: MetadataPlacement,
    ) -> Result<Arc<Self>, LsmError> {
        let err = |d: String| corruption(path, d);
        if let Backing::Map(m) = &backing {
            // Point reads fault one page, not the disk's read-around window (module `cold`). A hint: a
            // kernel that refuses it reads as before.
            let _ = m.advise(Advice::Random);
        }
        let file = backing.bytes();
        let footer = Footer::decode(file).map_err(|e| err(format!("footer: {e}")))?;
        let meta_end = (file.len() - FOOTER_LEN) as u64;
        // The metadata blocks are contiguous before the footer: one request for all of them.
        let meta_start = [footer.filter, footer.properties, footer.index]
            .iter()
            .filter(|h| h.size != 0)
            .map(|h| h.offset)
            .min()
            .unwrap_or(meta_end);
        backing.will_need(meta_start as usize, file.len());
        for (name, h) in [
            ("filter", footer.filter),
            ("properties", footer.properties),
            ("index", footer.index),
        ] {
            if (name != "filter" || h.size != 0) && h.end().is_none_or(|e| e > meta_end) {
                return Err(err(format!(
                    "footer: {name} block at offset {} size {} lies outside the file",
                    h.offset, h.size
                )));
            }
        }
        // Properties.
        let (codec, payload) =
            checked_block(file, footer.properties).map_err(|e| err(format!("properties {e}")))?;
        if codec != CODEC_NONE {
            return Err(err("properties block: unexpected codec".into()));
        }
        let properties =
            properties::decode(payload).map_err(|e| err(format!("properties block: {e}")))?;
        // Filter.
        let (mut filter_whole, mut filter_prefix) = (false, None);
        let filter = if footer.filter.size == 0 {
            None
        } else {
            let (whole, prefix, bits) =
                filter_bits(file, footer.filter, footer.version).map_err(err)?;
            (filter_whole, filter_prefix) = (whole, prefix);
            Some(Arc::new(bits.to_vec()))
        };
        // Index.
        let data_end = [footer.filter, footer.properties, footer.index]
            .iter()
            .filter(|h| h.size != 0 || h.offset != 0)
            .map(|h| h.offset)
            .min()
            .unwrap_or(meta_end);
        let index = Arc::new(load_index(file, footer.index, data_end).map_err(err)?);
        let view = IndexView::new(&index);
        let blocks = view.len();
        // Cross-checks between properties and index.
        if (properties.entries == 0) != (blocks == 0) {
            return Err(err(format!(
                "properties count {} entries but the index has {blocks} blocks",
                properties.entries,
            )));
        }
        if let Some(last) = view.last_key() {
            if last != &properties.largest[..] {
                return Err(err("properties: largest key differs from the index".into()));
            }
            if ikey::parse(&properties.smallest).is_none()
                || ikey::compare(&properties.smallest, &properties.largest) == Ordering::Greater
            {
                return Err(err(
                    "properties: smallest key is malformed or above the largest".into(),
                ));
            }
        }
        let index_key_bytes = view.key_bytes();
        let verified = (0..blocks.div_ceil(64))
            .map(|_| AtomicU64::new(0))
            .collect();
        let lz4_verified = (0..blocks.div_ceil(64))
            .map(|_| AtomicU64::new(0))
            .collect();
        let keep = placement == MetadataPlacement::Resident;
        let index_slot = MetaSlot::new(footer.index, &index, keep);
        let filter_slot = filter
            .as_ref()
            .map(|f| MetaSlot::new(footer.filter, f, keep));
        let kept = if keep {
            index.len() + filter.as_deref().map_or(0, Vec::len)
        } else {
            0
        };
        let resident_bytes = kept + 2 * blocks.div_ceil(64) * 8 + std::mem::size_of::<SstReader>();
        let _metadata_charge = cache.budget().map(|b| b.charge_metadata(resident_bytes));
        let reader = SstReader {
            _metadata_charge,
            path: path.to_path_buf(),
            file_number,
            backing,
            properties,
            index: index_slot,
            filter: filter_slot,
            blocks,
            index_key_bytes,
            resident_bytes,
            cached: !keep,
            filter_whole,
            filter_prefix,
            cache,
            verified,
            lz4_verified,
            hashed_blocks: footer.version >= 2,
            data_end: data_end as usize,
        };
        if !keep {
            // Warm: the blocks were just read and checked; the first reads find them in the cache.
            reader.index.place(&reader.cache, reader.file_number, index);
            if let (Some(slot), Some(f)) = (&reader.filter, filter) {
                slot.place(&reader.cache, reader.file_number, f);
            }
        }
        Ok(Arc::new(reader))
    }

    /// The decoded index, held for the length of a read: the reader's, the cache's, or loaded from the file
    /// (and placed).
    #[inline]
    pub(super) fn index(&self) -> Result<Pinned<'_>, LsmError> {
        self.index.pinned(&self.cache, self.file_number, || {
            load_index(
                self.backing.bytes(),
                self.index.handle,
                self.data_end as u64,
            )
            .map_err(|d| self.corruption(d))
        })
    }

    /// The filter's bloom bytes, held for the length of a probe (`None` without a filter).
    #[inline]
    fn filter(&self) -> Result<Option<Pinned<'_>>, LsmError> {
        let Some(slot) = &self.filter else {
            return Ok(None);
        };
        slot.pinned(&self.cache, self.file_number, || {
            let bytes = self.backing.bytes();
            Footer::decode(bytes)
                .map_err(|e| format!("footer: {e}"))
                .and_then(|f| filter_bits(bytes, slot.handle, f.version))
                .map(|(_, _, b)| b.to_vec())
                .map_err(|d| self.corruption(d))
        })
        .map(Some)
    }

    /// What the reader's index and filter hold, and what it keeps in memory besides the cache.
    pub fn metadata(&self) -> ReaderMetadata {
        // Buffers of a reader whose metadata is cached, kept because the cache would not take them.
        let late = [Some(&self.index), self.filter.as_ref()]
            .into_iter()
            .flatten()
            .filter(|s| self.cached && s.kept.get().is_some())
            .map(|s| s.len)
            .sum::<usize>();
        ReaderMetadata {
            data_blocks: self.blocks as u64,
            index_key_bytes: self.index_key_bytes as u64,
            index_bytes: self.index.len as u64,
            filter_bytes: self.filter.as_ref().map_or(0, |f| f.len) as u64,
            resident_bytes: (self.resident_bytes + late) as u64,
        }
    }

    /// The file's properties.
    pub fn properties(&self) -> &SstProperties {
        &self.properties
    }

    /// The file size in bytes.
    pub fn file_size(&self) -> u64 {
        self.backing.bytes().len() as u64
    }

    /// The file's path.
    #[cfg(feature = "test-util")]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's key in the block cache (its number, tagged by its engine when the cache is shared).
    pub fn file_number(&self) -> u64 {
        self.file_number
    }

    /// Number of data blocks.
    #[cfg(feature = "test-util")]
    pub fn data_blocks(&self) -> usize {
        self.blocks
    }

    /// The byte range of the whole file image in memory (used to check zero-copy views).
    #[cfg(feature = "test-util")]
    pub fn mapped_range(&self) -> std::ops::Range<usize> {
        let b = self.backing.bytes();
        let start = b.as_ptr() as usize;
        start..start + b.len()
    }

    /// False only if no key with this user key is in the file (bloom filter over user keys).
    pub fn may_contain(&self, user_key: &[u8]) -> bool {
        if !self.filter_whole {
            return true;
        }
        self.filter_says(bloom::key_hash(user_key))
    }

    /// False only if no entry of the file has the probe's prefix (a filter of the probe's extractor).
    pub fn may_contain_prefix(&self, probe: &PrefixProbe) -> bool {
        if self.filter_prefix != Some(probe.extractor) {
            return true;
        }
        self.filter_says(probe.hash)
    }

    /// Whether the file's filter admits the hash `h` (true without a filter).
    fn filter_says(&self, h: u64) -> bool {
        match self.filter() {
            Ok(Some(f)) => bloom::may_contain(&f, h),
            // No filter; or it could not be loaded again (the file was checked at open): the read that
            // follows reports what is wrong with the file.
            Ok(None) | Err(_) => true,
        }
    }

    /// Whether the filter holds prefixes under the extractor `name` (format version 3).
    #[cfg(feature = "test-util")]
    pub fn filters_prefixes_of(&self, name: &str) -> bool {
        self.filter_prefix == Some(super::probe::name_hash(name.as_bytes()))
    }

    pub(super) fn corruption(&self, detail: String) -> LsmError {
        corruption(&self.path, detail)
    }

    /// Point lookup: visits the versions of `user_key` with seqno `<= seqno` in this file, newest first, as
    /// `visit(seqno, kind, value)` until `visit` returns false. `lookup_ikey` is the internal key sorting
    /// before every such version (`user_key` + trailer `(seqno << 8) | 0xFF`). Returns false if `visit`
    /// stopped the walk, true if the file holds no further version (the caller goes on with older sources).
    ///
    /// The dedicated path of `Db::get`: no iterator is built; one index search, one block (more only when the
    /// versions of the key continue into the next block), one restart-point binary search, and a scan that
    /// reuses a per-thread key buffer, so a lookup allocates nothing.
    pub fn get(
        &self,
        user_key: &[u8],
        lookup_ikey: &[u8],
        seqno: u64,
        visit: &mut dyn FnMut(u64, ValueKind, &dyn Fn() -> ValueSlice) -> bool,
    ) -> Result<bool, LsmError> {
        POINT_CURSOR.with(|c| match c.try_borrow_mut() {
            Ok(mut cursor) => self.get_with(&mut cursor, user_key, lookup_ikey, seqno, visit),
            // Re-entered from `visit` (not done by the engine): use a fresh cursor.
            Err(_) => self.get_with(
                &mut BlockCursor::default(),
                user_key,
                lookup_ikey,
                seqno,
                visit,
            ),
        })
    }

    fn get_with(
        &self,
        cursor: &mut BlockCursor,
        user_key: &[u8],
        lookup_ikey: &[u8],
        seqno: u64,
        visit: &mut dyn FnMut(u64, ValueKind, &dyn Fn() -> ValueSlice) -> bool,
    ) -> Result<bool, LsmError> {
        let pinned = self.index()?;
        let index = IndexView::new(&pinned);
        let mut idx = index.find_block(lookup_ikey);
        let mut first = true;
        while idx < index.len() {
            let block = self.data_block(&index, idx)?;
            let berr = |e: DecodeError| {
                let off = index.handle(idx).map_or(0, |h| h.offset);
                self.corruption(format!("data block at offset {off}: {e}"))
            };
            cursor
                .reset_versioned(&block, self.hashed_blocks)
                .map_err(berr)?;
            if first {
                first = false;
                // The first entry >= lookup_ikey is in this block if the file has one; if its hash bucket
                // says the user key is absent, the file holds no version of it.
                match cursor
                    .hash_lookup(&block, user_key_hash(user_key))
                    .map_err(berr)?
                {
                    HashLookup::Absent => return Ok(true),
                    HashLookup::Restart(r) => cursor
                        .seek_from_restart(&block, r, lookup_ikey)
                        .map_err(berr)?,
                    HashLookup::Unknown => cursor.seek(&block, lookup_ikey).map_err(berr)?,
                }
            } else {
                cursor.seek_to_first(&block).map_err(berr)?;
            }
            while cursor.valid() {
                let Some(p) = ikey::parse(cursor.key()) else {
                    return Err(berr(DecodeError::Invalid("malformed internal key")));
                };
                if p.user_key != user_key {
                    return Ok(true);
                }
                if p.seqno <= seqno {
                    let range = cursor.value_range();
                    let value = || block.slice(range.clone()).unwrap_or_default();
                    if !visit(p.seqno, p.kind, &value) {
                        return Ok(false);
                    }
                }
                cursor.next(&block).map_err(berr)?;
            }
            idx += 1;
        }
        Ok(true)
    }

    /// The decompressed contents of data block `idx`: a view into the map for raw blocks, the cached block
    /// otherwise. Checksums are verified before decompression, once per reader and block (raw and LZ4 blocks
    /// alike: the mapped file is immutable); a cached block was verified when it entered the cache.
    ///
    /// A raw block already verified (its bit in `verified`) is served from the map at once. Otherwise the cache
    /// is probed before the file is touched: only verified LZ4 blocks are ever cached, and reading the codec
    /// byte from the map first would cost a cache (and often TLB) miss on every hit.
    pub(super) fn data_block(
        &self,
        index: &IndexView<'_>,
        idx: usize,
    ) -> Result<ValueSlice, LsmError> {
        self.data_block_into(index, idx, None)
    }

    /// [`data_block`](Self::data_block), but with `own` a block read from the file is decompressed into the
    /// buffer `own` holds (if no one else holds it; else a new one) and left there instead of entering the
    /// cache.
    pub(super) fn data_block_into(
        &self,
        index: &IndexView<'_>,
        idx: usize,
        mut own: Option<&mut Option<Arc<Vec<u8>>>>,
    ) -> Result<ValueSlice, LsmError> {
        let handle = index
            .handle(idx)
            .ok_or_else(|| self.corruption(format!("data block {idx} is not in the index")))?;
        let (word, bit) = (idx / 64, 1u64 << (idx % 64));
        let flag = self.verified.get(word);
        let raw_verified = flag.is_some_and(|f| f.load(AtomicOrdering::Relaxed) & bit != 0);
        if !raw_verified {
            if let Some(block) = self.cache.get(self.file_number, handle.offset) {
                let len = block.len();
                return ValueSlice::from_shared_vec(block, 0..len)
                    .ok_or_else(|| self.corruption("cached block view".into()));
            }
        }
        let file = self.backing.bytes();
        self.touch(handle);
        let (codec, start, end) =
            locate_block(file, handle).map_err(|e| self.corruption(format!("data {e}")))?;
        if codec == CODEC_NONE {
            if !raw_verified {
                checked_block(file, handle).map_err(|e| self.corruption(format!("data {e}")))?;
                if let Some(f) = flag {
                    f.fetch_or(bit, AtomicOrdering::Relaxed);
                }
            }
            return self.backing.view(start, end).ok_or_else(|| {
                self.corruption(format!("data block at offset {start} out of bounds"))
            });
        }
        let lz4_flag = self.lz4_verified.get(word);
        let payload = match file.get(start..end) {
            // Verified by an earlier read of this reader (which also checked the codec).
            Some(p) if lz4_flag.is_some_and(|f| f.load(AtomicOrdering::Relaxed) & bit != 0) => p,
            _ => {
                let (_, p) = checked_block(file, handle)
                    .map_err(|e| self.corruption(format!("data {e}")))?;
                if let Some(f) = lz4_flag {
                    f.fetch_or(bit, AtomicOrdering::Relaxed);
                }
                p
            }
        };
        let buf = match &mut own {
            Some(own) => own
                .take()
                .and_then(|b| Arc::try_unwrap(b).ok())
                .unwrap_or_default(),
            None => self.cache.take_buffer(
                self.file_number,
                handle.offset,
                lz4_uncompressed_len(payload),
            ),
        };
        let block = Arc::new(
            decompress_lz4(payload, handle.offset, buf)
                .map_err(|e| self.corruption(format!("data {e}")))?,
        );
        match own {
            Some(own) => *own = Some(Arc::clone(&block)),
            None => self
                .cache
                .insert(self.file_number, handle.offset, Arc::clone(&block)),
        }
        let len = block.len();
        ValueSlice::from_shared_vec(block, 0..len)
            .ok_or_else(|| self.corruption("block view".into()))
    }
}

impl SstReader {
    /// Brings the pages of the block at `handle` (payload and trailer) into memory before it is read: with
    /// this thread's recent block reads mostly cold, one request for the whole range first (module
    /// `cold`); then touches its first and last byte, timed, to tell the thread how this read went.
    #[inline]
    fn touch(&self, handle: BlockHandle) {
        let Backing::Map(m) = &self.backing else {
            return;
        };
        let start = handle.offset as usize;
        let end = start
            .saturating_add(handle.size as usize)
            .saturating_add(BLOCK_TRAILER_LEN);
        if end > m.len() || start >= end {
            return; // out of bounds: `locate_block` reports it
        }
        if cold::pre_read() {
            self.backing.will_need(start, end);
        }
        cold::timed_touch(|| {
            // Through `black_box`, so that the loads (and the faults they may take) cannot move before the
            // clock is read: the bytes of a map are immutable, which would let the compiler hoist them.
            let bytes: &[u8] = std::hint::black_box(m);
            std::hint::black_box(bytes.get(start).copied());
            std::hint::black_box(bytes.get(end - 1).copied());
        });
    }

    /// Asks the kernel, without waiting, for the block a point lookup of `lookup_ikey` reads first (see
    /// [`SstReader::get`]), unless it is a cached decompressed block or its pages are in memory (`mincore`),
    /// and records for this thread whether they were (module `cold`). The batched read
    /// ([`Db::multi_get`](crate::Db::multi_get)) calls it for every key of a batch before looking any up,
    /// so the disk serves the batch's blocks concurrently instead of one fault at a time. `previous` is the
    /// offset this file's previous call of the batch returned: a key in the same block (keys are sorted)
    /// neither asks nor records again. Returns the offset of the block, if the index names one.
    pub(crate) fn pre_read_point(&self, lookup_ikey: &[u8], previous: Option<u64>) -> Option<u64> {
        if !matches!(self.backing, Backing::Map(_)) {
            return None;
        }
        let Ok(pinned) = self.index() else {
            return None; // a hint only: the read that follows reports the error
        };
        let index = IndexView::new(&pinned);
        let h = index.handle(index.find_block(lookup_ikey))?;
        if previous == Some(h.offset) || self.cache.contains(self.file_number, h.offset) {
            return Some(h.offset);
        }
        let start = h.offset as usize;
        let end = start
            .saturating_add(h.size as usize)
            .saturating_add(BLOCK_TRAILER_LEN);
        // Whether the block was in memory is what tells this thread where its reads go (module `cold`):
        // the lookup's touch, after the request, finds it read either way. The batch does not ask for a
        // resident block here; the lookup's `touch` still asks for every block it reads (`MADV_WILLNEED`)
        // while this thread pre-reads, as for any read.
        match self.backing.resident(start, end) {
            Some(true) => cold::record_residency(true),
            Some(false) => {
                cold::record_residency(false);
                self.backing.will_need(start, end);
            }
            None => self.backing.will_need(start, end),
        }
        Some(h.offset)
    }

    /// Read-ahead for a cursor loading data block `idx` (module `cold`).
    pub(super) fn read_ahead(&self, ra: &mut Readahead, index: &IndexView<'_>, idx: usize) {
        if !matches!(self.backing, Backing::Map(_)) {
            return;
        }
        let Some(h) = index.handle(idx) else {
            return;
        };
        let start = h.offset as usize;
        let end = start
            .saturating_add(h.size as usize)
            .saturating_add(BLOCK_TRAILER_LEN);
        if let Some((from, to)) = ra.on_load(idx, start, end, self.data_end) {
            self.backing.will_need(from, to);
        }
    }
}

impl std::fmt::Debug for SstReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SstReader")
            .field("path", &self.path)
            .field("file_number", &self.file_number)
            .field("file_size", &self.file_size())
            .field("data_blocks", &self.blocks)
            .finish()
    }
}

thread_local! {
    /// The block cursor (and its key buffer) reused by every point lookup on this thread.
    static POINT_CURSOR: RefCell<BlockCursor> = RefCell::new(BlockCursor::default());
}

fn corruption(path: &Path, detail: String) -> LsmError {
    LsmError::Corruption {
        at: Location::file(path),
        detail,
    }
}

const _: () = assert!(BLOCK_TRAILER_LEN == 9);
