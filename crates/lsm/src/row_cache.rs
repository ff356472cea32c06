//! The row cache: what a point lookup found for one user key in one SST file, bounded in bytes.
//!
//! A block cache keeps a hot key's whole block (4 KiB for an entry of about 110 bytes); when the hot keys
//! are scattered over more blocks than it holds, every hot read goes to the disk although the hot entries
//! alone would fit many times over. The row cache keeps the entries: for a file and a user key, the
//! versions the file's [`SstReader::get`](crate::sst::SstReader::get) showed the lookup (newest first, up to
//! and including the first put or deletion), or that it has none (a filter's false positive). RocksDB's
//! `row_cache` is the same idea, keyed the same way.
//!
//! Entries are keyed by file number, and files never change: an entry can never hold a stale value, so
//! writes, deletions, range deletions, ingestion and compaction need nothing from the cache (newer versions
//! are in memtables or newer files, which a lookup reads first). A file's rows are erased when the engine
//! deletes the file ([`RowCache::erase_files`]: the files of one version change in one pass, in short
//! steps, a lookup finding its shard held by one reading the file instead of waiting; a file again after
//! its drop, queued for the background, if a reader on an older version cached a row of it since; only
//! files that had a row cached), so that they give their memory back at once instead of when they age
//! out. A lookup at a sequence number below a file's largest one must not see the file's newer
//! versions, so such reads (at an older snapshot) bypass the cache for that file; a read at or above it sees
//! every version in the file, which is what the cache holds.
//!
//! **Admission**: a lookup result is cached on its key's second miss within a window, not its first. A
//! doorkeeper (a direct-mapped table of 32-bit fingerprints of the (file, key) hashes that missed, one
//! slot per 128 bytes of capacity) remembers the first miss until another key's miss takes its slot; the
//! second miss while it is there admits the row. Keys read once (uniform reads over state larger than
//! memory, `multi_get` batches of them, read-modify-write of cold keys) then cost the cache one store of
//! four bytes and neither copy their rows nor push out rows that are read again. The table is part of the
//! capacity; it is allocated (and charged) at the first miss, so a cache never read costs nothing.
//!
//! The structure: shards behind mutexes, each a [`SlabShard`] bounded by its share of the capacity: entries
//! packed into segments of up to 32 KiB, an index of 8-byte slots, CLOCK eviction one segment at a time (a
//! hit sets a reference bit; `crate::row_slab`). An entry is looked up by a 64-bit hash of (owner, file,
//! key) and keeps its owner, file and key, so a hash collision is a miss, never a wrong answer. An entry
//! is `varint owner | varint file | varint key length | key | rows`, each row
//! `kind u8 | varint seqno | varint length | value`, behind a 2-byte head in its segment; a shard is charged
//! its segments and its index, what it allocated (about 131–140 bytes per entry of a 10-byte key and a 100-byte
//! value); a hit copies the rows out under the shard's lock.
//!
//! **Sharing**: by default the engines of an environment with a memory budget share its one row cache, as
//! they share its block cache ([`EngineRows`]): an engine's rows are keyed by its owner tag
//! ([`BlockCache::new_owner`](crate::cache::BlockCache::new_owner)), its file number and the key, all three
//! kept in the entry and compared on a lookup, so engines (whose file numbers are their own) never see each
//! other's rows. A closed engine's rows are erased ([`RowCache::erase_owner`]). A cache charges its memory
//! budget what it holds (doorkeeper, once allocated, and entries; at most its capacity), once however many
//! engines use it; the block cache gets what is left (`design/decisions/0008-row-cache.md`). An engine with
//! a block cache of its own shares that cache's capacity with its default row cache
//! ([`RowCache::pooled`], `crate::cache_pool`).

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

use crate::budget::{LeftoverCache, MemoryBudget};
use crate::cache_pool::{CachePool, Part};
use crate::coding::{get_varint64, put_varint64};
use crate::ikey::ValueKind;
use crate::row_slab::{self, SlabShard};
use crate::slice::ValueSlice;

/// Number of shards (a power of two).
const SHARDS: usize = 16;
/// A shard's segments are a sixteenth of its smallest bound (a fixed cache's bound; in a pool, the rows'
/// guaranteed share of it, [`CachePool::rows_min`]), within `row_slab`'s limits (a power of two of 512
/// bytes to 32 KiB: 32 KiB for a smallest bound of 512 KiB per shard or more), so that a shard at its
/// smallest bound still has 16 segments' worth of it for its CLOCK (fewer beside the doorkeeper: 12 at
/// the default share of 1/8) and gives room back a segment of that size at a time.
const SEGMENTS_PER_SHARD: usize = 16;
/// Bytes of capacity per doorkeeper slot: an entry of a 10-byte key and a 100-byte value costs 131–140
/// bytes, so the doorkeeper has about as many slots as the cache holds entries (and takes 1/32 of the
/// capacity).
const DOOR_BYTES_PER_SLOT: usize = 128;
/// The most doorkeeper slots (16 MiB of fingerprints).
const DOOR_MAX: usize = 1 << 22;
/// The most segments an erase reads (and compacts) per hold of a shard's lock ([`SlabShard::erase_step`]):
/// a lookup on that shard waits for at most one step, not for the shard's whole share of the erase.
const ERASE_STEP_SEGMENTS: usize = 2;
/// The most entries an erase drops per hold of a shard's lock, give or take a segment's (a step ends
/// after the segment that reaches it, so a segment holding only erased rows is dropped whole).
const ERASE_STEP_ENTRIES: usize = 64;

/// The owner, file number and key range encoded at the head of an entry's bytes.
fn head(data: &[u8]) -> Option<(u64, u64, std::ops::Range<usize>)> {
    let (owner, at) = get_varint64(data, 0)?;
    let (file, at) = get_varint64(data, at)?;
    let (len, at) = get_varint64(data, at)?;
    let end = at.checked_add(usize::try_from(len).ok()?)?;
    (end <= data.len()).then_some((owner, file, at..end))
}

/// Whether `entry` (the bytes of a cached entry: `varint owner | varint file | varint key length | key |
/// rows`, rows newest first, each `kind u8 | varint seqno | varint value length | value`) is the entry of
/// `key` in file `file` of the engine tagged `owner`.
fn is_entry(entry: &[u8], owner: u64, file: u64, key: &[u8]) -> bool {
    head(entry).is_some_and(|(o, f, k)| o == owner && f == file && entry.get(k) == Some(key))
}

/// The hash an entry is cached under, from its bytes ([`hash`] of its owner, file and key).
fn entry_hash(entry: &[u8]) -> Option<u64> {
    let (owner, file, k) = head(entry)?;
    Some(hash(owner, file, entry.get(k)?))
}

/// The hash of the file of `entry` ([`file_hash`]): the slab's group of the entry.
fn entry_file(entry: &[u8]) -> Option<u64> {
    let (owner, file, _) = head(entry)?;
    Some(file_hash(owner, file))
}

/// A hash of file `file` of the engine tagged `owner`, which groups its entries in the slab: erasing a
/// deleted file's rows reads only the segments whose filter has the file's bit.
fn file_hash(owner: u64, file: u64) -> u64 {
    // MurmurHash3's 64-bit finaliser of the key hash's seed.
    let mut x = owner.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ file;
    x ^= x >> 33;
    x = x.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
    x ^= x >> 33;
    x = x.wrapping_mul(0xC4CE_B9FE_1A85_EC53);
    x ^ (x >> 33)
}

/// A copy of the rows of `entry` (one allocation, which the values read from them share).
fn rows_of(entry: &[u8]) -> Option<CachedRows> {
    let (_, _, k) = head(entry)?;
    Some(CachedRows {
        data: Arc::from(entry.get(k.end..)?),
    })
}

/// The encoded rows of a cached entry, copied out of the cache.
#[derive(Clone)]
pub(crate) struct CachedRows {
    data: Arc<[u8]>,
}

impl CachedRows {
    /// Whether the rows decode one after another to their last byte (an entry that does not, which only
    /// a corruption of memory could make, is a miss: replaying it would show fewer versions than the file).
    fn is_whole(&self) -> bool {
        let mut at = 0;
        while let Some((_, _, range)) = row_at(&self.data, at) {
            at = range.end;
        }
        at == self.data.len()
    }
}

/// What [`RowCache::lookup`] found for one file and key.
pub(crate) enum Lookup {
    /// The cached rows.
    Hit(CachedRows),
    /// A miss whose rows are to be recorded and cached (the key's second miss).
    Admit,
    /// A miss to read as without a cache.
    Pass,
}

/// Rows recorded while a lookup reads a file, for [`RowCache::insert`].
pub(crate) struct RowRecorder {
    /// The key, then the rows.
    rows: Vec<u8>,
    key_len: usize,
    last_kind: Option<ValueKind>,
}

impl RowRecorder {
    /// A recorder for the versions of `key`.
    pub(crate) fn new(key: &[u8]) -> Self {
        RowRecorder {
            rows: key.to_vec(),
            key_len: key.len(),
            last_kind: None,
        }
    }

    /// Records one version the file showed.
    pub(crate) fn push(&mut self, seqno: u64, kind: ValueKind, value: &[u8]) {
        self.rows.push(kind as u8);
        put_varint64(&mut self.rows, seqno);
        put_varint64(&mut self.rows, value.len() as u64);
        self.rows.extend_from_slice(value);
        self.last_kind = Some(kind);
    }

    /// Whether the recorded rows are all a lookup can ever take from the file: the file had no more
    /// versions of the key (`file_exhausted`), or the last one recorded is a put or a deletion (every lookup
    /// stops there). A lookup stopped early on a merge operand (below a range tombstone) is not.
    pub(crate) fn complete(&self, file_exhausted: bool) -> bool {
        file_exhausted || matches!(self.last_kind, Some(ValueKind::Put | ValueKind::Delete))
    }

    /// The entry of these rows for file `file` of the engine tagged `owner` (see [`is_entry`]), allocated at
    /// its exact length.
    fn encode(&self, owner: u64, file: u64) -> Vec<u8> {
        let varint = |v: u64| (v.max(1).ilog2() as usize) / 7 + 1;
        let len = varint(owner) + varint(file) + varint(self.key_len as u64) + self.rows.len();
        let mut data = Vec::with_capacity(len);
        put_varint64(&mut data, owner);
        put_varint64(&mut data, file);
        put_varint64(&mut data, self.key_len as u64);
        data.extend_from_slice(&self.rows);
        data
    }
}

/// A lookup's or an insertion's shard is held by an erase's step ([`RowCache::lock_unless_erasing`]).
struct Erasing;

/// A sharded, byte-bounded cache of lookup results per (file, user key).
pub(crate) struct RowCache {
    shards: Box<[Mutex<SlabShard>]>,
    /// Each shard's bound (a cache of a fixed capacity).
    shard_capacity: usize,
    /// The capacity shared with the engine's block cache, if any ([`RowCache::pooled`]): the shards'
    /// bound is then what it leaves the rows.
    pool: Option<Arc<CachePool>>,
    /// The doorkeeper: fingerprints of hashes that missed once, direct-mapped ([`door_slots`], a power of
    /// two of slots); allocated at the first miss.
    door: OnceLock<Box<[AtomicU32]>>,
    /// The doorkeeper's slot count.
    door_slots: usize,
    /// Bytes charged by the entries of every shard.
    usage: AtomicUsize,
    /// The budget charged what the cache holds (doorkeeper and entries), if any.
    budget: Option<Arc<MemoryBudget>>,
    /// Per shard, how many erases are working on it (counted from before they take its lock for their
    /// first step to after they release it from their last: [`RowCache::lock_unless_erasing`]).
    erasing: Box<[AtomicU32]>,
    /// Lookups, insertions and `contains` that went without the cache because an erase was working on
    /// their shard ([`RowCache::lock_unless_erasing`]).
    busy_skips: AtomicU64,
    /// Files (owner, file number) whose rows a reader's drop of them left to erase
    /// ([`FileRows::erase_later`]), for the next background pass ([`RowCache::erase_queued`]).
    queued: Mutex<Vec<(u64, u64)>>,
}

fn hash(owner: u64, file: u64, key: &[u8]) -> u64 {
    // The owner is spread over the seed's bits (an odd multiplier: distinct owners, distinct products), so
    // that one file number of two engines makes two seeds; a collision would only be a miss (the entry is
    // compared).
    xxhash_rust::xxh3::xxh3_64_with_seed(key, owner.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ file)
}

/// The doorkeeper's slot count for a cache of `capacity_bytes`: a power of two, at most one per
/// [`DOOR_BYTES_PER_SLOT`] bytes.
fn door_slots(capacity_bytes: usize) -> usize {
    let slots = (capacity_bytes / DOOR_BYTES_PER_SLOT).clamp(1, DOOR_MAX);
    1 << slots.ilog2()
}

impl RowCache {
    /// A cache holding at most `capacity_bytes`: its doorkeeper, and keys, rows and a per-entry overhead.
    /// It charges `budget` (if any) what it holds: the doorkeeper from its first miss on, entries as they
    /// come and go.
    pub(crate) fn new(capacity_bytes: usize, budget: Option<Arc<MemoryBudget>>) -> Self {
        let slots = door_slots(capacity_bytes);
        let door_bytes = slots * std::mem::size_of::<AtomicU32>();
        let shard_capacity = capacity_bytes.saturating_sub(door_bytes) / SHARDS;
        RowCache {
            shards: Self::shards(shard_capacity / SEGMENTS_PER_SHARD),
            shard_capacity,
            pool: None,
            door: OnceLock::new(),
            door_slots: slots,
            usage: AtomicUsize::new(0),
            budget,
            erasing: (0..SHARDS).map(|_| AtomicU32::new(0)).collect(),
            busy_skips: AtomicU64::new(0),
            queued: Mutex::new(Vec::new()),
        }
    }

    /// A row cache of an engine's own sharing `pool` with its block cache (`crate::cache_pool`): its
    /// doorkeeper is sized for the pool's capacity, its entries hold at most what the pool leaves the rows
    /// less the doorkeeper, and it evicts when the block cache needs the room. It charges `budget` (if any)
    /// what it holds, as [`new`](Self::new).
    pub(crate) fn pooled(pool: Arc<CachePool>, budget: Option<Arc<MemoryBudget>>) -> Arc<Self> {
        let mut cache = RowCache::new(pool.capacity(), budget);
        // Segments sized for the rows' guaranteed share, the least the pool leaves them.
        cache.shards = Self::shards(pool.rows_min() / SHARDS / SEGMENTS_PER_SHARD);
        cache.pool = Some(Arc::clone(&pool));
        let cache = Arc::new(cache);
        let weak: std::sync::Weak<dyn LeftoverCache> = Arc::downgrade(&cache) as _;
        pool.connect(Part::Rows, weak);
        cache
    }

    /// Empty shards whose segments are `segment` bytes (clamped and rounded by [`SlabShard::new`]).
    fn shards(segment: usize) -> Box<[Mutex<SlabShard>]> {
        (0..SHARDS)
            .map(|_| Mutex::new(SlabShard::new(segment, entry_hash).grouped(entry_file)))
            .collect()
    }

    /// Each shard's bound on its entries now.
    fn shard_capacity(&self) -> usize {
        match &self.pool {
            None => self.shard_capacity,
            Some(p) => p.bound(Part::Rows).saturating_sub(self.door_bytes()) / SHARDS,
        }
    }

    /// The cache holds `bytes` more: its budget and pool are told.
    fn grew(&self, bytes: usize) {
        if let Some(b) = &self.budget {
            b.row_cache_grew(bytes);
        }
        if let Some(p) = &self.pool {
            p.grew(Part::Rows, bytes);
        }
    }

    /// The cache holds `bytes` less (`freed_room`: see [`MemoryBudget::row_cache_shrank`]).
    fn shrank(&self, bytes: usize, freed_room: bool) {
        if let Some(b) = &self.budget {
            b.row_cache_shrank(bytes, freed_room);
        }
        if let Some(p) = &self.pool {
            p.shrank(Part::Rows, bytes);
        }
    }

    /// Bytes of the doorkeeper's table (allocated or not).
    fn door_bytes(&self) -> usize {
        self.door_slots * std::mem::size_of::<AtomicU32>()
    }

    /// The doorkeeper's table, allocated and charged on the first call.
    fn door(&self) -> &[AtomicU32] {
        let mut allocated = false;
        let door = self.door.get_or_init(|| {
            allocated = true;
            (0..self.door_slots).map(|_| AtomicU32::new(0)).collect()
        });
        if allocated {
            self.grew(self.door_bytes());
        }
        door
    }

    /// Shard of hash `h` locked, or `None` if it is locked while an erase works on it (a step of the erase
    /// holds it, or the erase waits for it between steps: [`RowCache::erase`]): a lookup or an insertion
    /// then goes without the cache instead of waiting (a thread put to sleep on the lock
    /// waits for the scheduler to wake it, which on a busy machine is often far longer than the step).
    fn lock_unless_erasing(&self, h: u64) -> Option<parking_lot::MutexGuard<'_, SlabShard>> {
        let i = (h >> 58) as usize % SHARDS;
        let s = self.shards.get(i)?;
        match s.try_lock() {
            Some(g) => Some(g),
            None if self
                .erasing
                .get(i)
                .is_some_and(|e| e.load(Ordering::Acquire) > 0) =>
            {
                self.busy_skips.fetch_add(1, Ordering::Relaxed);
                None
            }
            None => Some(s.lock()),
        }
    }

    /// The rows cached for `key` in file `file` of the engine tagged `owner`, if any (a hit marks the entry
    /// recently used).
    #[cfg(test)]
    pub(crate) fn get(&self, owner: u64, file: u64, key: &[u8]) -> Option<CachedRows> {
        self.get_hashed(hash(owner, file, key), owner, file, key)
            .ok()
            .flatten()
    }

    /// [`get`](Self::get) with the hash of (`owner`, `file`, `key`), or `Err` if an erase's step holds the
    /// key's shard (the lookup goes to the file: [`lock_unless_erasing`](Self::lock_unless_erasing)). An
    /// empty cache answers without a lock (the miss path of every file lookup while no row was admitted);
    /// rows that do not decode to their end are a miss ([`CachedRows::is_whole`]).
    fn get_hashed(
        &self,
        h: u64,
        owner: u64,
        file: u64,
        key: &[u8],
    ) -> Result<Option<CachedRows>, Erasing> {
        if self.usage.load(Ordering::Relaxed) == 0 {
            return Ok(None);
        }
        let mut s = self.lock_unless_erasing(h).ok_or(Erasing)?;
        Ok(s.get(h, &|e| is_entry(e, owner, file, key))
            .and_then(rows_of)
            .filter(CachedRows::is_whole))
    }

    /// One file's lookup of `key` (file `file` of the engine tagged `owner`): the cached rows, or whether
    /// the rows the file shows are to be cached ([`admit`](Self::admit)); one hash for both. A lookup
    /// whose shard an erase's step holds reads the file as without a cache.
    pub(crate) fn lookup(&self, owner: u64, file: u64, key: &[u8]) -> Lookup {
        let h = hash(owner, file, key);
        match self.get_hashed(h, owner, file, key) {
            Ok(Some(rows)) => Lookup::Hit(rows),
            Ok(None) if self.admit_hashed(h) => Lookup::Admit,
            Ok(None) | Err(Erasing) => Lookup::Pass,
        }
    }

    /// Whether `key` of file `file` of the engine tagged `owner` is cached (counts nothing, marks nothing;
    /// false, without waiting, while an erase works on the key's shard:
    /// [`lock_unless_erasing`](Self::lock_unless_erasing)).
    pub(crate) fn contains(&self, owner: u64, file: u64, key: &[u8]) -> bool {
        if self.usage.load(Ordering::Relaxed) == 0 {
            return false;
        }
        let h = hash(owner, file, key);
        self.lock_unless_erasing(h)
            .is_some_and(|s| s.peek(h, &|e| is_entry(e, owner, file, key)).is_some())
    }

    /// Whether the rows of `key` in file `file`, which just missed, are to be recorded and cached: true on
    /// the second miss while the doorkeeper still remembers the first (which it then forgets), false on a
    /// first miss (which it remembers, in place of whatever missed before in that slot).
    #[cfg(test)]
    pub(crate) fn admit(&self, owner: u64, file: u64, key: &[u8]) -> bool {
        self.admit_hashed(hash(owner, file, key))
    }

    /// [`admit`](Self::admit) with the hash of (owner, file, key).
    fn admit_hashed(&self, h: u64) -> bool {
        let door = self.door();
        let Some(slot) = door.get(h as usize & (door.len() - 1)) else {
            return false;
        };
        let fingerprint = ((h >> 32) as u32) | 1;
        if slot.load(Ordering::Relaxed) == fingerprint {
            slot.store(0, Ordering::Relaxed);
            true
        } else {
            slot.store(fingerprint, Ordering::Relaxed);
            false
        }
    }

    /// Caches what `rec` recorded in file `file` of the engine tagged `owner` (a recording that is not complete must not be passed),
    /// whatever the doorkeeper says ([`admit`](Self::admit) is the caller's question). An entry larger
    /// than a segment (a power of two of at most 32 KiB and a sixteenth of a shard's smallest bound), or than an eighth of a
    /// shard's bound now (lower in a pool whose blocks took the room), is not cached. False when nothing
    /// was offered to the shard (an erase's step held it, or the entry is too large): the caller then has
    /// no row of the file to note.
    pub(crate) fn insert(&self, owner: u64, file: u64, rec: RowRecorder) -> bool {
        let key = rec.rows.get(..rec.key_len).unwrap_or_default();
        let h = hash(owner, file, key);
        let capacity = self.shard_capacity();
        let matches = |e: &[u8]| is_entry(e, owner, file, key);
        let data = rec.encode(owner, file);
        let stored;
        let (before, after) = {
            // A shard an erase's step holds caches nothing now (the row is read from the file again).
            let Some(mut s) = self.lock_unless_erasing(h) else {
                return false;
            };
            let before = s.usage();
            stored = data.len() + row_slab::HEAD <= capacity / 8;
            if stored {
                s.insert(h, &data, &matches, capacity);
            } else {
                // Too large: whatever was cached under the key goes.
                s.remove(h, &matches);
            }
            (before, s.usage())
        };
        if after >= before {
            self.usage.fetch_add(after - before, Ordering::Relaxed);
            self.grew(after - before);
        } else {
            self.usage.fetch_sub(before - after, Ordering::Relaxed);
            self.shrank(before - after, false);
        }
        stored
    }

    /// Evicts until every shard is within its bound (the pool's block cache grew).
    pub(crate) fn fit(&self) {
        let capacity = self.shard_capacity();
        let mut freed = 0;
        for s in self.shards.iter() {
            let mut s = s.lock();
            let before = s.usage();
            s.fit(capacity);
            freed += before.saturating_sub(s.usage());
        }
        if freed > 0 {
            self.usage.fetch_sub(freed, Ordering::Relaxed);
            self.shrank(freed, false);
        }
    }

    /// Drops every entry of the engine tagged `owner` (it closed), giving their charge back (and forgets
    /// its files queued for erasure).
    pub(crate) fn erase_owner(&self, owner: u64) {
        self.queued.lock().retain(|&(o, _)| o != owner);
        self.erase(&row_slab::ALL_GROUPS, |o, _| o == owner, &mut || {});
    }

    /// Drops every entry of the files `files` of the engine tagged `owner` (they were deleted: no lookup
    /// can ask for them again), and those of the files queued by readers' drops
    /// ([`erase_queued`](Self::erase_queued)), giving their charge back: one pass over each shard's
    /// segments for all of them, reading only the segments whose filter may hold one of them, in steps
    /// of [`ERASE_STEP_SEGMENTS`] segments per hold of the shard's lock.
    pub(crate) fn erase_files(&self, owner: u64, files: &[u64]) {
        let mut all: Vec<(u64, u64)> = files.iter().map(|&f| (owner, f)).collect();
        all.append(&mut self.queued.lock());
        self.erase_pairs(all);
    }

    /// Drops the rows of the files queued by readers' drops ([`FileRows::erase_later`]), if any: the
    /// background's pass for them.
    pub(crate) fn erase_queued(&self) {
        let queued = std::mem::take(&mut *self.queued.lock());
        self.erase_pairs(queued);
    }

    /// Drops every entry of the files `files` (owner, file number) in one pass; each entry read is looked
    /// up among them by binary search (a queue of many engines' files costs the same per entry as one).
    fn erase_pairs(&self, mut files: Vec<(u64, u64)>) {
        if !files.is_empty() && self.usage.load(Ordering::Relaxed) > 0 {
            files.sort_unstable();
            files.dedup();
            let groups = row_slab::groups_of(files.iter().map(|&(o, f)| file_hash(o, f)));
            self.erase(
                &groups,
                |o, f| files.binary_search(&(o, f)).is_ok(),
                &mut || {},
            );
        }
    }

    /// Drops every entry of the groups `groups` whose owner and file `erase` accepts, giving their charge
    /// back: shard by shard, in short steps ([`ERASE_STEP_SEGMENTS`], [`ERASE_STEP_ENTRIES`];
    /// [`SlabShard::erase_step`]), the lock released between them (a shard's steps run one after another,
    /// its index warm in the CPU's caches). From before the first step takes a shard's lock to after the
    /// last releases it, the shard's count in `erasing` is raised: a lookup or an insertion finding the
    /// shard locked then goes without the cache instead of waiting
    /// ([`lock_unless_erasing`](Self::lock_unless_erasing)); one that took the lock before the count was
    /// raised waits for one step. Each shard's freed charge is given back after its last step. `between`
    /// is called after each step with no lock held.
    fn erase(
        &self,
        groups: &row_slab::Groups,
        erase: impl Fn(u64, u64) -> bool,
        between: &mut dyn FnMut(),
    ) {
        let erase = |e: &[u8]| head(e).is_some_and(|(o, f, _)| erase(o, f));
        for (s, count) in self.shards.iter().zip(self.erasing.iter()) {
            let mut steps = None;
            let mut freed = 0;
            count.fetch_add(1, Ordering::AcqRel);
            loop {
                let mut shard = s.lock();
                let st = steps.get_or_insert_with(|| shard.erase_steps(groups));
                let before = shard.usage();
                let done = shard.erase_step(st, ERASE_STEP_SEGMENTS, ERASE_STEP_ENTRIES, &erase);
                freed += before.saturating_sub(shard.usage());
                drop(shard);
                if done {
                    count.fetch_sub(1, Ordering::AcqRel);
                    break;
                }
                between();
            }
            // Each shard's charge goes back when its turn ends, not when the whole erase does (which,
            // with readers taking the cores, lasts up to about half a second at 512 MiB).
            if freed > 0 {
                self.usage.fetch_sub(freed, Ordering::Relaxed);
                self.shrank(freed, true);
            }
            between();
        }
    }

    /// Bytes charged by the cached entries.
    pub(crate) fn usage(&self) -> usize {
        self.usage.load(Ordering::Relaxed)
    }

    /// The number of cached entries (of every owner).
    pub(crate) fn rows(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }

    /// Lookups, insertions and `contains` (of every owner) that went without the cache because an erase
    /// was working on their shard.
    pub(crate) fn busy_skips(&self) -> u64 {
        self.busy_skips.load(Ordering::Relaxed)
    }

    /// What the cache holds and charges its budget: the doorkeeper (once allocated) and the entries.
    pub(crate) fn held(&self) -> usize {
        self.door.get().map_or(0, |_| self.door_bytes()) + self.usage()
    }

    /// The capacity in bytes: the entries' bound and the doorkeeper's table (in a pool, the pool's: the
    /// most the rows may hold when the block cache holds nothing).
    pub(crate) fn capacity(&self) -> usize {
        match &self.pool {
            None => self.shard_capacity * SHARDS + self.door_bytes(),
            Some(p) => p.capacity(),
        }
    }
}

impl LeftoverCache for RowCache {
    fn usage(&self) -> usize {
        self.held()
    }

    fn fit(&self) {
        RowCache::fit(self)
    }
}

impl Drop for RowCache {
    fn drop(&mut self) {
        self.shrank(self.held(), true);
    }
}

/// An engine's row cache: one of its own, or its environment's shared one. The engine's rows are keyed by
/// its owner tag (the one it has in the shared block cache), its file number and the key, so that engines
/// never see each other's rows; hits and misses are counted per engine.
pub(crate) struct EngineRows {
    cache: Arc<RowCache>,
    owner: u64,
    hits: AtomicU64,
    misses: AtomicU64,
    /// What a file's queued erase calls ([`EngineRows::wake_with`]), shared with the engine's files.
    wake: Wake,
}

/// Asks an engine's background for a job, which erases the queued rows ([`RowCache::erase_queued`]);
/// set once the engine is registered with its pool.
type Wake = Arc<OnceLock<Box<dyn Fn() + Send + Sync>>>;

impl EngineRows {
    /// The rows of the engine tagged `owner` in `cache`.
    pub(crate) fn new(cache: Arc<RowCache>, owner: u64) -> Self {
        EngineRows {
            cache,
            owner,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            wake: Wake::default(),
        }
    }

    /// Sets what a file's drop calls after queuing its rows ([`FileRows::erase_later`]): a request for a
    /// background job of the engine, so that the queue is erased without waiting for a write (once;
    /// later calls change nothing).
    pub(crate) fn wake_with(&self, wake: Box<dyn Fn() + Send + Sync>) {
        let _ = self.wake.set(wake);
    }

    /// [`RowCache::lookup`] of `key` in the engine's file `number`, counted as a hit or a miss.
    pub(crate) fn lookup(&self, number: u64, key: &[u8]) -> Lookup {
        let found = self.cache.lookup(self.owner, number, key);
        let counter = if matches!(found, Lookup::Hit(_)) {
            &self.hits
        } else {
            &self.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    /// [`RowCache::contains`] for the engine's file `number`.
    pub(crate) fn contains(&self, number: u64, key: &[u8]) -> bool {
        self.cache.contains(self.owner, number, key)
    }

    /// [`RowCache::insert`] for the engine's file `number` (false: nothing offered to the cache).
    pub(crate) fn insert(&self, number: u64, rec: RowRecorder) -> bool {
        self.cache.insert(self.owner, number, rec)
    }

    /// Drops the rows of the files queued by readers' drops (of every engine sharing the cache:
    /// [`RowCache::erase_queued`]); run by the engine's background jobs.
    pub(crate) fn erase_queued(&self) {
        self.cache.erase_queued();
    }

    /// What the engine's files need to erase their rows when they are deleted.
    pub(crate) fn file_rows(&self) -> FileRows {
        FileRows {
            cache: Arc::downgrade(&self.cache),
            owner: self.owner,
            wake: Arc::clone(&self.wake),
        }
    }

    /// Bytes charged by the entries of the cache (of every engine sharing it).
    pub(crate) fn usage(&self) -> usize {
        self.cache.usage()
    }

    /// Entries in the cache (of every engine sharing it).
    pub(crate) fn rows(&self) -> usize {
        self.cache.rows()
    }

    /// [`RowCache::busy_skips`] (of every engine sharing the cache).
    pub(crate) fn busy_skips(&self) -> u64 {
        self.cache.busy_skips()
    }

    /// This engine's lookups answered by the cache, and those it could not answer.
    pub(crate) fn hits_and_misses(&self) -> (u64, u64) {
        (
            self.hits.load(Ordering::Relaxed),
            self.misses.load(Ordering::Relaxed),
        )
    }
}

impl Drop for EngineRows {
    /// The engine closed: its rows can never be read again, so they are dropped and their charge given back
    /// at once (a cache of the engine's own goes with it).
    fn drop(&mut self) {
        if Arc::strong_count(&self.cache) > 1 {
            self.cache.erase_owner(self.owner);
        }
    }
}

/// An engine's rows as its files see them: deleted files erase their rows ([`RowCache::erase_files`]). The
/// cache is held weakly: a file outliving its engine (in an iterator's version) has no rows left to erase
/// once the cache is gone, and does not keep it.
pub(crate) struct FileRows {
    cache: std::sync::Weak<RowCache>,
    owner: u64,
    wake: Wake,
}

impl FileRows {
    /// Drops the rows of the engine's files `numbers`, which were deleted (on the thread that deleted
    /// them, with those queued by readers).
    pub(crate) fn erase(&self, numbers: &[u64]) {
        if let Some(c) = self.cache.upgrade() {
            c.erase_files(self.owner, numbers);
        }
    }

    /// Queues the rows of the engine's file `number`, deleted and just dropped by whichever thread held
    /// it last (often a reader's), and asks the engine's background for a job
    /// ([`EngineRows::wake_with`]), which erases the queue ([`RowCache::erase_queued`]; or the next
    /// version change's erase does): the reader does not erase on its own thread. The file number is
    /// never used again, so until then the rows only hold memory.
    pub(crate) fn erase_later(&self, number: u64) {
        if let Some(c) = self.cache.upgrade() {
            c.queued.lock().push((self.owner, number));
            if let Some(wake) = self.wake.get() {
                wake();
            }
        }
    }
}

/// Shows the cached `rows` to `visit` as the file's reader would (newest first), until `visit` returns
/// false; returns what the reader would have returned (false: `visit` stopped).
pub(crate) fn replay(
    rows: &CachedRows,
    visit: &mut dyn FnMut(u64, ValueKind, &dyn Fn() -> ValueSlice) -> bool,
) -> bool {
    let mut at = 0;
    while let Some((seqno, kind, range)) = row_at(&rows.data, at) {
        at = range.end;
        let value = || {
            ValueSlice::from_shared(Arc::clone(&rows.data), range.clone())
                .unwrap_or_else(ValueSlice::empty)
        };
        if !visit(seqno, kind, &value) {
            return false;
        }
    }
    true
}

/// The row encoded at `at`: its seqno, kind and the range of its value (`None` at the end).
fn row_at(rows: &[u8], at: usize) -> Option<(u64, ValueKind, std::ops::Range<usize>)> {
    let kind = ValueKind::from_u8(*rows.get(at)?)?;
    let (seqno, at) = get_varint64(rows, at + 1)?;
    let (len, start) = get_varint64(rows, at)?;
    let end = start
        .checked_add(usize::try_from(len).ok()?)
        .filter(|&e| e <= rows.len())?;
    Some((seqno, kind, start..end))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(key: &[u8], rows: &[(u64, ValueKind, &[u8])]) -> RowRecorder {
        let mut r = RowRecorder::new(key);
        for (s, k, v) in rows {
            r.push(*s, *k, v);
        }
        r
    }

    fn replayed(rows: &CachedRows) -> Vec<(u64, ValueKind, Vec<u8>)> {
        let mut out = Vec::new();
        replay(rows, &mut |s, k, v| {
            out.push((s, k, v().to_vec()));
            true
        });
        out
    }

    #[test]
    fn rows_replay_as_recorded_and_a_hit_needs_the_same_file_and_key() {
        let c = RowCache::new(1 << 20, None);
        let rows: &[(u64, ValueKind, &[u8])] = &[
            (9, ValueKind::Merge, b"b"),
            (7, ValueKind::Merge, b""),
            (5, ValueKind::Put, b"base"),
        ];
        let rec = record(b"key", rows);
        assert!(rec.complete(false));
        c.insert(0, 3, rec);
        let got = c.get(0, 3, b"key").unwrap();
        assert_eq!(
            replayed(&got),
            rows.iter()
                .map(|(s, k, v)| (*s, *k, v.to_vec()))
                .collect::<Vec<_>>()
        );
        assert!(c.get(0, 4, b"key").is_none());
        assert!(c.get(0, 3, b"kex").is_none());
        assert!(c.contains(0, 3, b"key") && !c.contains(0, 3, b"ke"));
        // An empty recording (the file has no version: a filter false positive) replays nothing.
        c.insert(0, 4, record(b"absent", &[]));
        assert_eq!(replayed(&c.get(0, 4, b"absent").unwrap()), vec![]);
    }

    #[test]
    fn rows_of_another_owner_are_never_seen_whatever_the_tag_or_file_number() {
        let c = RowCache::new(1 << 20, None);
        let put = || record(b"key", &[(5, ValueKind::Put, b"v")]);
        c.insert(0, 1 << 40, put());
        c.insert(0, 3, put());
        // A tag above 2^24 or a file number of 2^40 or more once shared a packed key with these.
        assert!(c.get(1, 0, b"key").is_none());
        assert!(c.get(1 << 24, 3, b"key").is_none());
        assert!(!c.contains(1, 0, b"key") && !c.contains(1 << 24, 3, b"key"));
        assert!(c.get(0, 1 << 40, b"key").is_some() && c.get(0, 3, b"key").is_some());
    }

    #[test]
    fn erasing_an_owner_drops_its_rows_only_and_gives_their_charge_back() {
        let wb = crate::env::write_buffer::WriteBuffers::new(None);
        let budget = MemoryBudget::new(Some(64 << 20), wb);
        let c = RowCache::new(1 << 20, Some(Arc::clone(&budget)));
        let door = budget.row_cache_bytes();
        for owner in [1, 2] {
            for i in 0u64..50 {
                c.insert(
                    owner,
                    1,
                    record(&i.to_be_bytes(), &[(1, ValueKind::Put, &[7u8; 100])]),
                );
            }
        }
        let both = c.usage();
        c.erase_owner(1);
        // Owner 2's rows, packed into as few segments as they need (one per shard at most here).
        assert!(c.usage() < both, "{} {both}", c.usage());
        let shard = c
            .shards
            .first()
            .map(|s| s.lock().segment_bytes())
            .unwrap_or(0);
        assert!(c.usage() <= 16 * (shard + 32 * 8), "{}", c.usage());
        assert_eq!(budget.row_cache_bytes(), door + c.usage());
        assert!((0u64..50)
            .all(|i| !c.contains(1, 1, &i.to_be_bytes()) && c.contains(2, 1, &i.to_be_bytes())));
        c.erase_owner(2);
        assert_eq!((c.usage(), budget.row_cache_bytes()), (0, door));
    }

    #[test]
    fn erasing_deleted_files_drops_their_rows_only_and_the_budget_and_pool_get_the_charge_back() {
        use crate::cache::BlockCache;
        let wb = crate::env::write_buffer::WriteBuffers::new(None);
        let budget = MemoryBudget::new(None, wb);
        let pool = CachePool::new(4 << 20, 0.125);
        let _blocks = BlockCache::pooled(Arc::clone(&pool));
        let c = RowCache::pooled(Arc::clone(&pool), Some(Arc::clone(&budget)));
        assert!(!c.admit(0, 1, b"first miss"));
        for i in 0u64..6_000 {
            // Files 1 to 3 of owner 0, and file 1 of owner 1.
            let (owner, file) = if i % 4 == 3 { (1, 1) } else { (0, 1 + i % 4) };
            c.insert(
                owner,
                file,
                record(&i.to_be_bytes(), &[(1, ValueKind::Put, &[7u8; 100])]),
            );
        }
        let held = c.held();
        let cached = |owner: u64, file: u64| {
            (0u64..6_000)
                .filter(|i| c.contains(owner, file, &i.to_be_bytes()))
                .count()
        };
        assert_eq!(
            (cached(0, 1), cached(0, 2), cached(0, 3), cached(1, 1)),
            (1_500, 1_500, 1_500, 1_500)
        );
        c.erase_files(0, &[1, 3]);
        assert_eq!(
            (cached(0, 1), cached(0, 2), cached(0, 3), cached(1, 1)),
            (0, 1_500, 0, 1_500)
        );
        // The budget and the pool follow what the cache holds (segments left more than half live keep
        // the erased bytes until they are recycled).
        assert!(c.held() <= held);
        assert_eq!(budget.row_cache_bytes(), c.held());
        assert_eq!(pool.held(Part::Rows), c.held());
        // A pass that finds nothing changes nothing.
        let left = c.held();
        c.erase_files(0, &[4, 5]);
        assert_eq!((c.held(), pool.held(Part::Rows)), (left, left));
        // Three quarters of the rows gone: the segments were compacted and freed (less a segment per
        // shard, as the rest need part of one), and the charge given back.
        c.erase_files(0, &[2]);
        assert_eq!((cached(0, 2), cached(1, 1)), (0, 1_500));
        let segment = c
            .shards
            .first()
            .map(|s| s.lock().segment_bytes())
            .unwrap_or(0);
        assert!(
            c.held() + 4_500 * 120 <= held + 16 * segment,
            "{} {held}",
            c.held()
        );
        assert_eq!(budget.row_cache_bytes(), c.held());
        assert_eq!(pool.held(Part::Rows), c.held());
        c.erase_files(1, &[1]);
        assert_eq!(c.usage(), 0);
        assert_eq!(
            (budget.row_cache_bytes(), pool.held(Part::Rows)),
            (c.held(), c.held())
        );
    }

    /// A cache of 16 MiB (segments of 32 KiB, 32 per shard) with a budget, holding 30,000 rows of each of
    /// files 1 and 2 of owner 0, interleaved (both files' rows in every segment).
    fn two_interleaved_files() -> (RowCache, Arc<MemoryBudget>) {
        let wb = crate::env::write_buffer::WriteBuffers::new(None);
        let budget = MemoryBudget::new(None, wb);
        let c = RowCache::new(16 << 20, Some(Arc::clone(&budget)));
        assert!(!c.admit(0, 9, b"first miss"));
        for i in 0u64..60_000 {
            c.insert(
                0,
                1 + i % 2,
                record(&i.to_be_bytes(), &[(1, ValueKind::Put, &[7u8; 100])]),
            );
        }
        (c, budget)
    }

    fn cached(c: &RowCache, file: u64) -> usize {
        (0u64..60_000)
            .filter(|i| 1 + i % 2 == file && c.contains(0, file, &i.to_be_bytes()))
            .count()
    }

    #[test]
    fn an_erase_releases_each_shard_between_steps_and_a_lookup_between_them_hits() {
        let (c, budget) = two_interleaved_files();
        assert_eq!((cached(&c, 1), cached(&c, 2)), (30_000, 30_000));
        let groups = row_slab::groups_of([file_hash(0, 1)]);
        let (mut pauses, mut hits) = (0, 0);
        c.erase(&groups, |o, f| o == 0 && f == 1, &mut || {
            pauses += 1;
            // No shard is locked between steps: a lookup anywhere goes through.
            assert!(c.shards.iter().all(|s| s.try_lock().is_some()));
            hits += usize::from(
                c.get(0, 2, &(pauses as u64 * 2 + 1).to_be_bytes())
                    .is_some(),
            );
        });
        // About 14 segments per shard, each with about 135 rows of file 1: a step per segment or two.
        assert!(pauses >= 2 * SHARDS, "{pauses}");
        assert_eq!(hits, pauses);
        assert_eq!((cached(&c, 1), cached(&c, 2)), (0, 30_000));
        assert_eq!(budget.row_cache_bytes(), c.held());
    }

    #[test]
    fn a_lookup_on_a_shard_an_erase_holds_reads_the_file_instead_of_waiting() {
        let (c, _budget) = two_interleaved_files();
        let c = Arc::new(c);
        let key = 1u64.to_be_bytes();
        let i = (hash(0, 2, &key) >> 58) as usize % SHARDS;
        let other = (60_000u64..)
            .map(u64::to_be_bytes)
            .find(|k| (hash(0, 2, k) >> 58) as usize % SHARDS == i)
            .expect("a key of the shard");
        // Held as an erase's step holds it.
        let held = c.shards.get(i).map(|s| s.lock());
        c.erasing[i].store(1, Ordering::Release);
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = {
            let c = Arc::clone(&c);
            std::thread::spawn(move || {
                let pass = matches!(c.lookup(0, 2, &key), Lookup::Pass);
                // Not cached while the shard is held: the insertion goes without the cache too, and says
                // so (the reader then notes no row of the file).
                let stored = c.insert(0, 2, record(&other, &[(1, ValueKind::Put, b"v")]));
                let _ = tx.send((pass, stored));
            })
        };
        let answered = rx.recv_timeout(std::time::Duration::from_secs(10));
        c.erasing[i].store(0, Ordering::Release);
        drop(held);
        reader.join().unwrap();
        assert_eq!(
            answered,
            Ok((true, false)),
            "the lookup waited for the shard"
        );
        // Both went without the cache, and are counted.
        assert_eq!(c.busy_skips(), 2);
        // Released: the row is a hit again; the insertion cached nothing.
        assert!(matches!(c.lookup(0, 2, &key), Lookup::Hit(_)));
        assert!(!c.contains(0, 2, &other));
    }

    #[test]
    fn a_lookup_on_a_shard_an_erase_waits_for_reads_the_file_instead_of_waiting_behind_it() {
        let (c, _budget) = two_interleaved_files();
        let c = Arc::new(c);
        let key = 1u64.to_be_bytes();
        let i = (hash(0, 2, &key) >> 58) as usize % SHARDS;
        // Held by someone else (an insertion's recycle, say) when the erase comes to the shard.
        let held = c.shards.get(i).map(|s| s.lock());
        let eraser = {
            let c = Arc::clone(&c);
            std::thread::spawn(move || {
                let groups = row_slab::groups_of([file_hash(0, 1)]);
                c.erase(&groups, |o, f| o == 0 && f == 1, &mut || {});
            })
        };
        // The erase reaches the held shard (the others take it microseconds) and waits for it.
        let start = std::time::Instant::now();
        while c.erasing[i].load(Ordering::Acquire) == 0
            && start.elapsed() < std::time::Duration::from_secs(10)
        {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = {
            let c = Arc::clone(&c);
            std::thread::spawn(move || {
                let pass = matches!(c.lookup(0, 2, &key), Lookup::Pass);
                let cached = c.contains(0, 2, &key);
                let _ = tx.send((pass, cached));
            })
        };
        let answered = rx.recv_timeout(std::time::Duration::from_secs(2));
        drop(held);
        reader.join().unwrap();
        eraser.join().unwrap();
        assert_eq!(
            answered,
            Ok((true, false)),
            "the lookup waited behind the erase"
        );
        assert_eq!((cached(&c, 1), cached(&c, 2)), (0, 30_000));
    }

    #[test]
    fn an_erase_gives_back_each_shards_charge_when_its_turn_ends_not_when_the_erase_does() {
        let (c, budget) = two_interleaved_files();
        let start = c.usage();
        let groups = row_slab::groups_of([file_hash(0, 1)]);
        let mut seen = Vec::new();
        c.erase(&groups, |o, f| o == 0 && f == 1, &mut || {
            seen.push((c.usage(), budget.row_cache_bytes()));
        });
        // Half of the shards done: about half of the erased charge is back, in the budget too.
        let (usage, charged) = seen.get(seen.len() / 2).copied().unwrap();
        assert!(usage < start, "{usage} of {start}");
        assert!(charged < start + c.door_bytes(), "{charged}");
        assert_eq!(budget.row_cache_bytes(), c.held());
    }

    #[test]
    fn rows_of_the_erased_file_cached_between_its_steps_keep_an_exact_charge_and_the_old_rows_go() {
        let (c, budget) = two_interleaved_files();
        let groups = row_slab::groups_of([file_hash(0, 2)]);
        let mut i = 0u64;
        c.erase(&groups, |o, f| o == 0 && f == 2, &mut || {
            // A reader on an older version caches rows of the file being erased.
            for _ in 0..20 {
                i += 1;
                c.insert(
                    0,
                    2,
                    record(
                        &(1_000_000 + i).to_be_bytes(),
                        &[(1, ValueKind::Put, &[9u8; 100])],
                    ),
                );
            }
        });
        // Every row cached before the erase is gone; some cached during it may stay (an engine's file
        // notes them and its drop queues them), charged exactly.
        assert_eq!(cached(&c, 2), 0);
        assert_eq!(cached(&c, 1), 30_000);
        assert_eq!(budget.row_cache_bytes(), c.held());
        let shards: usize = c.shards.iter().map(|s| s.lock().usage()).sum();
        assert_eq!(c.usage(), shards);
        c.erase_files(0, &[2]);
        let left = (1..=i).filter(|j| c.contains(0, 2, &(1_000_000 + j).to_be_bytes()));
        assert_eq!(left.count(), 0);
        assert_eq!(budget.row_cache_bytes(), c.held());
    }

    #[test]
    fn an_erase_in_steps_gives_back_the_exact_charge_while_rows_come_and_go_between_steps() {
        let (c, budget) = two_interleaved_files();
        let groups = row_slab::groups_of([file_hash(0, 2)]);
        let mut i = 100_000u64;
        c.erase(&groups, |o, f| o == 0 && f == 2, &mut || {
            // Rows of another file cached, and a row of file 1 replaced, between the steps.
            for _ in 0..50 {
                i += 1;
                c.insert(
                    0,
                    3,
                    record(&i.to_be_bytes(), &[(1, ValueKind::Put, &[9u8; 100])]),
                );
            }
            c.insert(
                0,
                1,
                record(
                    &(i % 30_000 * 2).to_be_bytes(),
                    &[(2, ValueKind::Put, &[8u8; 60])],
                ),
            );
        });
        assert_eq!(cached(&c, 2), 0);
        assert!(cached(&c, 1) > 29_000);
        assert_eq!(budget.row_cache_bytes(), c.held());
        let shards: usize = c.shards.iter().map(|s| s.lock().usage()).sum();
        assert_eq!(c.usage(), shards);
        // Erasing the rest gives back every byte of the entries.
        c.erase_owner(0);
        assert_eq!((c.usage(), budget.row_cache_bytes()), (0, c.held()));
    }

    #[test]
    fn rows_of_a_file_a_reader_dropped_are_erased_by_the_next_background_pass_not_by_the_reader() {
        let (c, budget) = two_interleaved_files();
        let c = Arc::new(c);
        let rows = EngineRows::new(Arc::clone(&c), 0);
        let files = rows.file_rows();
        files.erase_later(1);
        // Queued: still cached until the background's pass.
        assert_eq!(cached(&c, 1), 30_000);
        rows.erase_queued();
        assert_eq!((cached(&c, 1), cached(&c, 2)), (0, 30_000));
        assert_eq!(budget.row_cache_bytes(), c.held());
        // A version change's erase takes what readers queued since, in the same pass.
        files.erase_later(2);
        files.erase(&[7]);
        assert_eq!((cached(&c, 2), c.usage()), (0, 0));
        assert_eq!(budget.row_cache_bytes(), c.held());
        // Nothing left queued: a pass changes nothing.
        rows.erase_queued();
        assert!(c.queued.lock().is_empty());
    }

    #[test]
    fn erasing_a_file_keeps_the_rows_of_a_file_with_the_same_filter_bit() {
        // Segments filter files by 9 bits of their hash: a file sharing file 1's bit is read by its erase,
        // and its rows must stay.
        let bit = |f: u64| file_hash(0, f) >> 55;
        let twin = (2..)
            .find(|&f| bit(f) == bit(1))
            .expect("a file with the same bit");
        let c = RowCache::new(1 << 20, None);
        for i in 0u64..200 {
            let file = if i % 2 == 0 { 1 } else { twin };
            c.insert(
                0,
                file,
                record(&i.to_be_bytes(), &[(1, ValueKind::Put, &[7u8; 100])]),
            );
        }
        c.erase_files(0, &[1]);
        assert!((0u64..200).all(|i| {
            let file = if i % 2 == 0 { 1 } else { twin };
            c.contains(0, file, &i.to_be_bytes()) == (file == twin)
        }));
    }

    #[test]
    fn a_recording_stopped_on_a_merge_operand_is_not_complete() {
        assert!(!record(b"k", &[(4, ValueKind::Merge, b"x")]).complete(false));
        assert!(record(b"k", &[(4, ValueKind::Merge, b"x")]).complete(true));
        assert!(record(b"k", &[(4, ValueKind::Delete, b"")]).complete(false));
        assert!(record(b"k", &[]).complete(true));
    }

    #[test]
    fn an_entry_whose_rows_do_not_decode_to_their_end_is_a_miss() {
        let c = RowCache::new(1 << 20, None);
        let mut rec = record(
            b"k",
            &[
                (9, ValueKind::Merge, b"newer"),
                (5, ValueKind::Put, b"base"),
            ],
        );
        // The second row's value cut short: replaying would show the merge operand alone.
        rec.rows.truncate(rec.rows.len() - 2);
        c.insert(0, 1, rec);
        assert!(c.contains(0, 1, b"k"));
        assert!(c.get(0, 1, b"k").is_none());
        assert!(matches!(c.lookup(0, 1, b"k"), Lookup::Pass | Lookup::Admit));
    }

    #[test]
    fn replay_stops_where_the_visitor_stops() {
        let c = RowCache::new(1 << 20, None);
        c.insert(
            0,
            1,
            record(
                b"k",
                &[(9, ValueKind::Merge, b"b"), (5, ValueKind::Put, b"base")],
            ),
        );
        let rows = c.get(0, 1, b"k").unwrap();
        let mut seen = 0;
        assert!(!replay(&rows, &mut |_, _, _| {
            seen += 1;
            false
        }));
        assert_eq!(seen, 1);
    }

    #[test]
    fn the_cache_stays_within_its_capacity() {
        let c = RowCache::new(64 << 10, None);
        for i in 0u64..10_000 {
            c.insert(
                0,
                1,
                record(&i.to_be_bytes(), &[(1, ValueKind::Put, &[7u8; 100])]),
            );
            assert!(c.usage() <= c.capacity());
        }
        let cached = (0u64..10_000)
            .filter(|i| c.contains(0, 1, &i.to_be_bytes()))
            .count();
        assert!(cached > 100 && cached < 10_000, "{cached}");
        // Re-inserting a cached key replaces it without growing the usage.
        let before = c.usage();
        let last = 9_999u64.to_be_bytes();
        if c.contains(0, 1, &last) {
            c.insert(0, 1, record(&last, &[(2, ValueKind::Put, &[8u8; 100])]));
            assert_eq!(c.usage(), before);
            let rows = c.get(0, 1, &last).unwrap();
            assert_eq!(replayed(&rows)[0].0, 2);
        }
    }

    #[test]
    fn a_row_is_admitted_on_its_second_miss_and_the_doorkeeper_then_forgets_it() {
        let c = RowCache::new(1 << 20, None);
        assert!(!c.admit(0, 1, b"k"));
        assert!(c.admit(0, 1, b"k"));
        // Admitted once: the next miss of the same key starts over.
        assert!(!c.admit(0, 1, b"k"));
        // The same key in another file is another row.
        assert!(!c.admit(0, 2, b"k"));
    }

    #[test]
    fn a_first_miss_is_forgotten_when_another_key_takes_its_slot() {
        let c = RowCache::new(64 << 10, None);
        let slots = c.door_slots as u64;
        let slot = |i: u64| hash(0, 1, &i.to_be_bytes()) % slots;
        let other = (1..10_000u64)
            .find(|&i| slot(i) == slot(0))
            .expect("a key in the same slot");
        assert!(!c.admit(0, 1, &0u64.to_be_bytes()));
        assert!(!c.admit(0, 1, &other.to_be_bytes()));
        assert!(!c.admit(0, 1, &0u64.to_be_bytes()));
        assert!(c.admit(0, 1, &0u64.to_be_bytes()));
    }

    #[test]
    fn keys_missed_once_are_not_admitted_and_keys_missed_twice_are() {
        let c = RowCache::new(1 << 20, None);
        let once = (0u64..20_000)
            .filter(|i| c.admit(0, 1, &(i * 2 + 1).to_be_bytes()))
            .count();
        assert_eq!(once, 0);
        // A small set read twice in a row is admitted (its doorkeeper slots were just written).
        let twice = (0u64..1_000)
            .filter(|i| {
                let k = (i * 2).to_be_bytes();
                !c.admit(0, 1, &k) && c.admit(0, 1, &k)
            })
            .count();
        assert_eq!(twice, 1_000);
    }

    #[test]
    fn the_budget_is_charged_what_the_cache_holds() {
        let wb = crate::env::write_buffer::WriteBuffers::new(None);
        let budget = MemoryBudget::new(Some(64 << 20), wb);
        let c = RowCache::new(1 << 20, Some(Arc::clone(&budget)));
        let door = (1 << 20) / 32;
        // The doorkeeper is allocated and charged at the first miss.
        assert_eq!(budget.row_cache_bytes(), 0);
        assert!(!c.admit(0, 1, b"missed"));
        assert_eq!(budget.row_cache_bytes(), door);
        assert_eq!(budget.cache_capacity(), (64 << 20) - door);
        for i in 0u64..100 {
            c.insert(
                0,
                1,
                record(&i.to_be_bytes(), &[(1, ValueKind::Put, &[7u8; 100])]),
            );
        }
        assert!(c.usage() > 100 * 100);
        assert_eq!(budget.row_cache_bytes(), door + c.usage());
        assert_eq!(c.held(), door + c.usage());
        drop(c);
        assert_eq!(budget.row_cache_bytes(), 0);
    }

    #[test]
    fn a_full_cache_holds_over_7_300_rows_of_a_10_byte_key_and_a_100_byte_value_per_mib() {
        // Entries of owner 1, file 5, a 10-byte key and one row (a seqno of 70 million, a 100-byte value):
        // 3 + 10 + 6 + 100 = 119 bytes, 121 with their head in a segment.
        let c = RowCache::new(16 << 20, None);
        for i in 0u64..200_000 {
            let key = format!("{i:010}");
            c.insert(
                1,
                5,
                record(key.as_bytes(), &[(70_000_000, ValueKind::Put, &[7u8; 100])]),
            );
        }
        let rows = c.rows();
        let per_mib = rows * (1 << 20) / c.usage();
        eprintln!("{rows} rows in {} bytes: {per_mib}", c.usage());
        assert!(
            per_mib > 7_300,
            "{rows} rows in {} bytes: {per_mib}",
            c.usage()
        );
        assert!(c.usage() <= c.capacity());
    }

    #[test]
    fn an_entry_is_encoded_at_its_exact_length_and_charged_it() {
        for (owner, file) in [(0, 0), (127, 128), (1 << 24, 1 << 40), (u64::MAX, u64::MAX)] {
            let data =
                record(b"key", &[(u64::MAX, ValueKind::Put, &[7u8; 200])]).encode(owner, file);
            assert_eq!(data.capacity(), data.len(), "{owner} {file}");
            let c = RowCache::new(1 << 20, None);
            c.insert(
                owner,
                file,
                record(b"key", &[(u64::MAX, ValueKind::Put, &[7u8; 200])]),
            );
            // Charged what its shard allocated: one segment and the smallest index.
            let segment = c
                .shards
                .first()
                .map(|s| s.lock().segment_bytes())
                .unwrap_or(0);
            assert_eq!(c.usage(), segment + 32 * 8);
            assert_eq!(
                replayed(&c.get(owner, file, b"key").unwrap())[0].2,
                [7u8; 200]
            );
        }
    }

    #[test]
    fn a_pooled_shard_has_about_sixteen_segments_at_the_rows_guaranteed_share() {
        for (capacity, share) in [(4 << 20, 0.125), (64 << 20, 0.125), (4 << 20, 0.5)] {
            let pool = CachePool::new(capacity, share);
            let c = RowCache::pooled(Arc::clone(&pool), None);
            let segment = c
                .shards
                .first()
                .map(|s| s.lock().segment_bytes())
                .unwrap_or(1);
            let segments = pool.rows_min() / SHARDS / segment;
            assert!(
                (16..32).contains(&segments),
                "{capacity} {share}: {segment}"
            );
        }
    }

    #[test]
    fn pooled_rows_take_what_blocks_leave_and_blocks_take_back_the_rows_room_above_half() {
        use crate::cache::BlockCache;
        let wb = crate::env::write_buffer::WriteBuffers::new(None);
        let budget = MemoryBudget::new(None, wb);
        let pool = CachePool::new(4 << 20, 0.5);
        let blocks = BlockCache::pooled(Arc::clone(&pool));
        let rows = RowCache::pooled(Arc::clone(&pool), Some(Arc::clone(&budget)));
        assert!(!rows.admit(0, 1, b"first miss"));
        for i in 0u64..40_000 {
            rows.insert(
                0,
                1,
                record(&i.to_be_bytes(), &[(1, ValueKind::Put, &[7u8; 100])]),
            );
        }
        // No blocks: the rows use the whole pool (less the doorkeeper and a segment and the index's growth
        // room per shard).
        let segment = rows
            .shards
            .first()
            .map(|s| s.lock().segment_bytes())
            .unwrap_or(0);
        assert!(rows.held() > (4 << 20) * 9 / 10, "{}", rows.held());
        assert!(rows.held() <= 4 << 20);
        assert_eq!(budget.row_cache_bytes(), rows.held());
        assert_eq!(pool.held(Part::Rows), rows.held());
        // Blocks take the rows' room back, down to the rows' half.
        for i in 0..2_000u64 {
            blocks.insert(9, i * 4096, Arc::new(vec![1u8; 4000]));
            assert!(blocks.usage() + rows.held() <= 4 << 20, "{i}");
        }
        // Down to the rows' half, less at most a segment per shard (they go whole).
        assert!(rows.held() >= (2 << 20) - 16 * segment, "{}", rows.held());
        assert!(blocks.usage() > (2 << 20) - 16 * 4064, "{}", blocks.usage());
        assert_eq!(pool.held(Part::Blocks), blocks.usage());
        assert_eq!(pool.held(Part::Rows), rows.held());
        // Rows that grow again take no more than what the blocks leave.
        for i in 40_000u64..80_000 {
            rows.insert(
                0,
                1,
                record(&i.to_be_bytes(), &[(1, ValueKind::Put, &[7u8; 100])]),
            );
        }
        assert!(blocks.usage() + rows.held() <= 4 << 20);
        drop(rows);
        assert_eq!((budget.row_cache_bytes(), pool.held(Part::Rows)), (0, 0));
    }

    #[test]
    fn the_doorkeeper_is_part_of_the_capacity() {
        for capacity in [0usize, 100, 1 << 10, 48 << 10, 1 << 20, 32 << 20] {
            let c = RowCache::new(capacity, None);
            assert!(
                c.capacity() <= capacity.max(4),
                "{capacity}: {}",
                c.capacity()
            );
            assert!(c.door_slots.is_power_of_two());
        }
        assert_eq!(RowCache::new(32 << 20, None).door_slots, 1 << 18);
    }
}
