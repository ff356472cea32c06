//! The LSM backend's read-modify-write cache (`design/rmw-cache.md`): engine key → value bytes (or "absent")
//! with dirty bits, CLOCK eviction, and a dirty log that snapshots take over without a copy.
//!
//! An entry is one slot: its key and value as [`SmallBytes`] (inline up to 14 bytes, as the heap backend
//! keeps them, else one shared buffer each) and its hash, so a hit reads the hash table and the slot, and a
//! value update of a cached entry writes the slot in place without an allocation.
//!
//! The cache knows the engine only as the place dirty entries are written back to ([`Db::write`]); the
//! backend decides which operations go through it.
//!
//! Submodules: `slot_table` (the hash table of slots), `map_index` (dirty map entries by map prefix),
//! `map_dirty` (one map's dirty entries, for the scans that merge them with the engine's), `map_marks` and
//! `map_complete` (maps the cache holds whole, which scans read from the cache alone),
//! `ledger` (what the cache and the checkpoint captures of its layers agree on), `eviction` (CLOCK),
//! `growth` (list appends that would not fit, written to the engine with their entry), `step_aside` (whether
//! the cache pays) and `stepping` (stepping aside and back in).

use std::hash::BuildHasher;
use std::sync::Arc;

use keyed_state_lsm::{Db, WriteBatch};

use crate::backend::heap::bytes::SmallBytes;
use crate::error::Result;

mod buckets;
mod eviction;
mod growth;
mod ledger;
mod map_complete;
mod map_dirty;
mod map_index;
mod map_marks;
pub(crate) mod probe;
mod slot_table;
mod step_aside;
mod stepping;
mod storage;
pub(crate) use ledger::LayerLedger;
use map_index::{Hasher, MapIndex};
use map_marks::MapMarks;
use slot_table::SlotTable;
pub use step_aside::RmwCacheStepping;
use step_aside::StepAside;

/// A key or value held by a slot and by the dirty log at once: short bytes are copied, longer ones share
/// one buffer, which is written in place only while nothing else holds it.
pub(crate) type Bytes = SmallBytes;

/// Bytes counted per entry on top of the allocations of its key and value: the slot (64 bytes, holding
/// keys and values of up to 14 bytes), its table entry and the dirty log's entry (40 bytes) when dirty,
/// about.
pub(crate) const ENTRY_OVERHEAD: usize = 96;

/// Dirty writes are written back in batches of this many operations.
const BATCH_OPS: usize = 4096;

/// Pending layers beyond this many are written back by the next write that reaches the engine anyway, so
/// that snapshots taken while nothing reaches the engine do not keep old values alive without end.
pub(crate) const MAX_PENDING_LAYERS: usize = 4;

/// No log entry.
const NO_LOG: u32 = u32::MAX;

/// One line of 64 bytes: a hit reads the table and this line, nothing else (short keys and values).
#[repr(align(64))]
struct Slot {
    key: Bytes,
    value: Option<Bytes>,
    /// The table's hash of `key`.
    hash: u64,
    referenced: bool,
    dirty: bool,
    /// When dirty: the epoch of the log holding the latest value (the current log when equal to the cache's
    /// epoch, else a pending layer).
    epoch: u64,
    /// When dirty in the current epoch: the index of the latest value's entry in the current log.
    log: u32,
    /// For a map entry written through [`RmwCache::write_map`]: the length of its map's prefix
    /// (`sid | KG | K | NS`), else 0.
    map_prefix: u16,
}

// A slot, free or not, is one cache line.
const _: () = assert!(std::mem::size_of::<Option<Slot>>() == 64);

impl Slot {
    /// What the entry costs: the allocations of a key or value too long to sit in the slot (their
    /// buffers' headers and capacity, not only their lengths), and [`ENTRY_OVERHEAD`].
    fn bytes(&self) -> usize {
        self.key.heap_bytes() + self.value.as_ref().map_or(0, Bytes::heap_bytes) + ENTRY_OVERHEAD
    }
}

/// One dirty write: `value` `None` is a delete.
pub(crate) struct LogEntry {
    pub(crate) key: Bytes,
    pub(crate) value: Option<Bytes>,
    /// False once a write-back or an eviction superseded it (a newer write of the same slot in the same
    /// epoch updates the entry instead).
    valid: bool,
    slot: u32,
}

/// A dirty log handed over by a snapshot: immutable, shared with the snapshots that read it.
pub(crate) struct Layer {
    epoch: u64,
    entries: Vec<LogEntry>,
}

impl Layer {
    /// The epoch whose writes the layer holds (increasing from one layer to the next).
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch
    }
}

/// The overlay a snapshot or a checkpoint capture reads on top of the engine: every dirty value of the
/// moment, by engine key, sorted.
pub(crate) struct Overlay(Vec<(Bytes, Option<Bytes>)>);

impl Overlay {
    /// Merges `layers` (oldest first; the newest write of a key wins): one stable sort of every valid entry
    /// into a vector.
    pub(crate) fn build(layers: &[Arc<Layer>]) -> Overlay {
        let mut all: Vec<(Bytes, Option<Bytes>)> = layers
            .iter()
            .flat_map(|l| l.entries.iter().filter(|e| e.valid))
            .map(|e| (e.key.clone(), e.value.clone()))
            .collect();
        // Stable: the entries of one key stay oldest first, and the last one is kept.
        all.sort_by(|a, b| a.0.as_slice().cmp(b.0.as_slice()));
        let mut out: Vec<(Bytes, Option<Bytes>)> = Vec::with_capacity(all.len());
        for e in all {
            match out.last_mut() {
                Some(last) if last.0.as_slice() == e.0.as_slice() => *last = e,
                _ => out.push(e),
            }
        }
        Overlay(out)
    }

    /// The overlay's entries with engine keys in `[lower, upper)` (`upper` `None`: unbounded), ascending.
    pub(crate) fn range<'a>(
        &'a self,
        lower: &[u8],
        upper: Option<&[u8]>,
    ) -> impl Iterator<Item = (&'a [u8], Option<&'a [u8]>)> + 'a {
        let start = self.0.partition_point(|(k, _)| k.as_slice() < lower);
        let end = upper.map_or(self.0.len(), |u| {
            self.0.partition_point(|(k, _)| k.as_slice() < u)
        });
        self.0[start..end.max(start)]
            .iter()
            .map(|(k, v)| (k.as_slice(), v.as_ref().map(SmallBytes::as_slice)))
    }
}

/// The dirty entries of one map, sorted by engine key (`None`: deleted).
pub(crate) type MapDirty = Vec<(Bytes, Option<Bytes>)>;

/// Where [`RmwCache::probe`] found a key: its slot, or (not held) the key's hash, for the insertion and
/// the doorkeeper that may follow, so that a key is hashed once per operation.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Found {
    Slot(u32),
    Missing(u64),
}

impl Found {
    /// The slot, if the key is held.
    #[inline]
    pub(crate) fn slot(self) -> Option<u32> {
        match self {
            Found::Slot(i) => Some(i),
            Found::Missing(_) => None,
        }
    }
}

/// The cache. See the module documentation.
pub(crate) struct RmwCache {
    table: SlotTable,
    hasher: Hasher,
    slots: Vec<Option<Slot>>,
    free: Vec<u32>,
    hand: usize,
    used: usize,
    capacity: usize,
    epoch: u64,
    log: Vec<LogEntry>,
    log_valid: usize,
    /// The entries the dirty log reserves (virtual memory, touched as used), as the slots do: a log that
    /// outgrew its allocation would be copied whole in the middle of a write.
    log_reserve: usize,
    pending: Vec<Arc<Layer>>,
    /// What this cache and the checkpoint captures of its layers agree on.
    ledger: Arc<LayerLedger>,
    /// Hashes of the keys the pending layers hold, for evictions around them (built at the first such
    /// eviction after a change of the pending layers).
    pending_keys: Option<hashbrown::HashSet<u64>>,
    /// The admission filter (a "doorkeeper"): fingerprints of keys that missed recently, direct-mapped by
    /// hash. A key the cache does not hold is taken in on its second miss while its fingerprint is still
    /// there; the first goes straight to the engine. Empty: every key is taken in at once.
    door: Vec<u32>,
    maps: MapIndex,
    /// Maps whose every entry the cache holds; their bytes are counted in `used`.
    marks: MapMarks,
    /// Whether the cache pays, and whether it is in use or aside (empty, every operation to the engine).
    step: StepAside,
    /// The next probe samples its key for the estimate (set by [`route`](Self::route) for an operation
    /// through the cache).
    sample_next: bool,
}

/// Doorkeeper slots per byte of capacity: one per 256 bytes (an entry costs at least `ENTRY_OVERHEAD`), so
/// the filter remembers about as many keys as the cache holds and costs 1/64 of the capacity on top.
const DOOR_BYTES_PER_SLOT: usize = 256;
/// Bounds of the doorkeeper's size in slots.
const DOOR_MIN: usize = 64;
const DOOR_MAX: usize = 1 << 22;

fn door_slots(capacity: usize) -> usize {
    (capacity / DOOR_BYTES_PER_SLOT)
        .clamp(DOOR_MIN, DOOR_MAX)
        .next_power_of_two()
}

impl RmwCache {
    /// A cache of `capacity` bytes; `admit_on_first_touch`: no doorkeeper.
    pub(crate) fn new(capacity: usize, admit_on_first_touch: bool) -> RmwCache {
        // Room for as many entries as the capacity holds at 16 bytes of key and value for the slots and
        // the dirty log, as virtual memory (touched as used, up to 4M). The table grows with the entries
        // (its growth is spread over the operations after it), so that its buckets stay as dense as the
        // entries allow.
        let expect = capacity / (ENTRY_OVERHEAD + 16);
        let c = RmwCache {
            table: SlotTable::new(),
            hasher: Hasher::default(),
            slots: Vec::with_capacity(expect.min(1 << 22)),
            free: Vec::new(),
            hand: 0,
            used: 0,
            capacity,
            epoch: 0,
            log: Vec::with_capacity(expect.min(1 << 22)),
            log_valid: 0,
            log_reserve: expect.min(1 << 22),
            pending: Vec::new(),
            ledger: Arc::default(),
            pending_keys: None,
            door: if admit_on_first_touch {
                Vec::new()
            } else {
                vec![0; door_slots(capacity)]
            },
            maps: MapIndex::default(),
            marks: MapMarks::default(),
            step: StepAside::new(capacity),
            sample_next: false,
        };
        storage::use_small_pages(&c.slots);
        storage::use_small_pages(&c.log);
        c
    }

    /// Whether a key of hash `h` that missed on a read is taken into the cache with `bytes` of key and
    /// value: at once while the cache has room for it (or without a doorkeeper), else on its second miss
    /// while the doorkeeper remembers the first; never when the hash table's growth for it is refused.
    #[inline]
    pub(crate) fn admit(&mut self, h: u64, bytes: usize) -> bool {
        let room = self.door.is_empty() || self.used + bytes + ENTRY_OVERHEAD <= self.capacity;
        (room || self.admit_slow(h)) && self.table.make_room()
    }

    /// Whether a key that missed on a blind write (a put or delete that read nothing) is taken into the
    /// cache with `bytes` of key and value: while the cache has room for it (or without a doorkeeper).
    /// Into a full cache it would only push another entry out to the engine, so the write goes there
    /// itself; a key read again is taken in by [`admit`](Self::admit). Never when the table cannot grow.
    #[inline]
    pub(crate) fn admit_write(&mut self, bytes: usize) -> bool {
        let room = self.door.is_empty() || self.used + bytes + ENTRY_OVERHEAD <= self.capacity;
        room && self.table.make_room()
    }

    #[cold]
    fn admit_slow(&mut self, h: u64) -> bool {
        let slot = (h as usize) & (self.door.len() - 1);
        let fp = ((h >> 32) as u32) | 1;
        if self.door[slot] == fp {
            self.door[slot] = 0;
            true
        } else {
            self.door[slot] = fp;
            false
        }
    }

    /// Bytes held (keys, values and the per-entry overhead).
    pub(crate) fn used(&self) -> usize {
        self.used
    }

    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// The bytes the cache may take: its capacity, the doorkeeper's table, and the hash table's buckets at
    /// the most entries the capacity holds (every entry costs at least [`ENTRY_OVERHEAD`]; the table grows
    /// with the entries, and never shrinks when the capacity does). A growth keeps the old buckets (half
    /// as many) beside the new ones while it moves their entries over: that stays within the charge below
    /// the buckets charged, while the last growth, to them, holds half their bytes more until it has moved
    /// the old ones (at most one operation per 16 old buckets).
    pub(crate) fn footprint(&self) -> usize {
        if !self.step.is_active() {
            // Aside: empty, its memory given back (`stepping`), the doorkeeper untouched.
            return self.step.bytes();
        }
        let table =
            SlotTable::bytes_for(self.capacity / ENTRY_OVERHEAD + 1).max(self.table.bytes());
        self.capacity
            .saturating_add(self.door.len() * std::mem::size_of::<u32>())
            .saturating_add(table)
    }

    /// Whether the hash table, grown for the entries of a larger capacity, holds more than twice the
    /// buckets `capacity` needs (it never shrinks: such a cache is better made again).
    pub(crate) fn table_oversized_for(&self, capacity: usize) -> bool {
        self.table.bytes() > 2 * SlotTable::bytes_for(capacity / ENTRY_OVERHEAD + 1)
    }

    pub(crate) fn set_capacity(&mut self, capacity: usize) {
        self.capacity = capacity;
        self.step.set_capacity(capacity);
        if !self.door.is_empty() {
            self.door = vec![0; door_slots(capacity)];
        }
    }

    /// Whether keys are taken in on their first miss (no doorkeeper).
    pub(crate) fn admits_on_first_touch(&self) -> bool {
        self.door.is_empty()
    }

    /// Whether anything is dirty (in the current log or a pending layer).
    pub(crate) fn has_dirty(&self) -> bool {
        self.log_valid > 0 || !self.pending.is_empty()
    }

    /// Whether the cache holds no entry.
    pub(crate) fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    pub(crate) fn pending_layers(&self) -> usize {
        self.pending.len()
    }

    #[inline]
    fn slot(&self, i: u32) -> &Slot {
        match self.slots.get(i as usize) {
            Some(Some(s)) => s,
            // The table only holds indices of live slots.
            _ => unreachable!("cache table points at a free slot"),
        }
    }

    #[inline]
    fn slot_mut(&mut self, i: u32) -> &mut Slot {
        match self.slots.get_mut(i as usize) {
            Some(Some(s)) => s,
            _ => unreachable!("cache table points at a free slot"),
        }
    }

    /// The slot of `key`, marked referenced.
    #[inline]
    pub(crate) fn lookup(&mut self, key: &[u8]) -> Option<u32> {
        self.probe(key).slot()
    }

    /// The slot of `key`, marked referenced, or its hash when the cache does not hold it.
    #[inline]
    pub(crate) fn probe(&mut self, key: &[u8]) -> Found {
        let hash = self.hasher.hash_one(key);
        self.probe_hashed(key, hash)
    }

    /// The table hash of `key`, for [`probe_hashed`](Self::probe_hashed) and the prefetches.
    #[inline]
    pub(crate) fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    /// Prefetching for a batch of probes, stage 0: the home bucket of `hash`. Never faults.
    #[inline]
    pub(crate) fn prefetch_bucket(&self, hash: u64) {
        self.table.prefetch(hash);
    }

    /// Prefetching, stage 1 (reads the bucket of stage 0): the slot the probe of `hash` compares first.
    #[inline]
    pub(crate) fn prefetch_slot(&self, hash: u64) {
        if let Some(i) = self.table.home(hash) {
            keyed_state_lsm::util::prefetch_read(self.slots.as_ptr().wrapping_add(i as usize));
        }
    }

    /// Prefetching, stage 2 (reads the slot of stage 1): that slot's key bytes, when they are not inline.
    #[inline]
    pub(crate) fn prefetch_key(&self, hash: u64) {
        if let Some(Some(s)) = self
            .table
            .home(hash)
            .and_then(|i| self.slots.get(i as usize))
        {
            s.key.prefetch_data();
        }
    }

    /// [`probe`](Self::probe) with the key's [`hash`](Self::hash).
    #[inline]
    pub(crate) fn probe_hashed(&mut self, key: &[u8], hash: u64) -> Found {
        if self.sample_next {
            self.sample_next = false;
            self.step.observe(hash);
        }
        self.table.advance();
        let slots = &mut self.slots;
        let found = self.table.find(hash, |i| match slots.get(i as usize) {
            Some(Some(s)) => s.hash == hash && s.key.as_slice() == key,
            _ => false,
        });
        match found {
            Some(i) => {
                if let Some(Some(s)) = slots.get_mut(i as usize) {
                    s.referenced = true;
                }
                Found::Slot(i)
            }
            None => Found::Missing(hash),
        }
    }

    /// The value held in slot `i` (`None`: known absent).
    #[inline]
    pub(crate) fn value(&self, i: u32) -> Option<&[u8]> {
        self.slot(i).value.as_ref().map(SmallBytes::as_slice)
    }

    /// Adds a clean entry for `key` (of table hash `hash`, from [`probe`](Self::probe)), which the cache
    /// does not hold, and returns its slot. The caller evicts afterwards ([`evict`](Self::evict)).
    pub(crate) fn insert_clean(&mut self, hash: u64, key: &[u8], value: Option<&[u8]>) -> u32 {
        let slot = Slot {
            key: SmallBytes::new(key),
            value: value.map(SmallBytes::new),
            hash,
            referenced: false,
            dirty: false,
            epoch: 0,
            log: NO_LOG,
            map_prefix: 0,
        };
        self.insert_slot(slot)
    }

    fn insert_slot(&mut self, slot: Slot) -> u32 {
        self.used += slot.bytes();
        let hash = slot.hash;
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = Some(slot);
                i
            }
            None => {
                storage::push(&mut self.slots, Some(slot));
                (self.slots.len() - 1) as u32
            }
        };
        self.table.insert(hash, i);
        i
    }

    /// Writes `value` (`None`: a delete) for `key`, dirty, and returns its slot; `slot`: what
    /// [`lookup`](Self::lookup) found for `key`. The caller evicts afterwards.
    #[inline]
    pub(crate) fn write(&mut self, slot: Option<u32>, key: &[u8], value: Option<&[u8]>) -> u32 {
        let found = match slot {
            Some(i) => Found::Slot(i),
            None => Found::Missing(self.hasher.hash_one(key)),
        };
        self.write_at(found, key, value)
    }

    /// [`write`](Self::write) with what [`probe`](Self::probe) found for `key`.
    #[inline]
    pub(crate) fn write_at(&mut self, found: Found, key: &[u8], value: Option<&[u8]>) -> u32 {
        match found {
            Found::Slot(i) => {
                self.set_dirty(i, value);
                i
            }
            Found::Missing(hash) => {
                let i = self.insert_slot(Slot {
                    key: SmallBytes::new(key),
                    value: None,
                    hash,
                    referenced: false,
                    dirty: false,
                    epoch: 0,
                    log: NO_LOG,
                    map_prefix: 0,
                });
                self.set_dirty(i, value);
                i
            }
        }
    }

    /// [`write`](Self::write) for a map entry whose first `prefix_len` key bytes are its map's prefix
    /// (`sid | KG | K | NS`): the entry is listed under its map for [`map_dirty`](Self::map_dirty).
    #[inline]
    pub(crate) fn write_map(
        &mut self,
        slot: Option<u32>,
        key: &[u8],
        prefix_len: usize,
        value: Option<&[u8]>,
    ) -> u32 {
        let found = match slot {
            Some(i) => Found::Slot(i),
            None => Found::Missing(self.hasher.hash_one(key)),
        };
        self.write_map_at(found, key, prefix_len, value)
    }

    /// [`write_map`](Self::write_map) with what [`probe`](Self::probe) found for `key`.
    #[inline]
    pub(crate) fn write_map_at(
        &mut self,
        found: Found,
        key: &[u8],
        prefix_len: usize,
        value: Option<&[u8]>,
    ) -> u32 {
        let was_dirty = found.slot().is_some_and(|i| self.slot(i).dirty);
        let i = self.write_at(found, key, value);
        if !was_dirty {
            if let (Some(prefix), Ok(plen)) = (key.get(..prefix_len), u16::try_from(prefix_len)) {
                self.slot_mut(i).map_prefix = plen;
                self.maps.add(prefix, i);
                if self.maps.len > 4 * self.slots.len() + 4096 {
                    self.rebuild_map_index();
                }
                if !self.marks.is_empty() {
                    self.note_map_entry(prefix, i);
                }
            }
        }
        i
    }

    /// Lists every dirty map entry again, and nothing else.
    fn rebuild_map_index(&mut self) {
        self.maps.clear();
        for (i, s) in self.slots.iter().enumerate() {
            if let Some(s) = s.as_ref().filter(|s| s.dirty && s.map_prefix > 0) {
                if let Some(prefix) = s.key.as_slice().get(..usize::from(s.map_prefix)) {
                    self.maps.add(prefix, i as u32);
                }
            }
        }
    }

    /// Whether the map `prefix` (`sid | KG | K | NS`) has a dirty entry with a value: then it is not empty,
    /// whatever the engine holds (`false` tells nothing). Reads the map's list of dirty entries only until
    /// the first such entry.
    pub(crate) fn map_has_live_dirty(&self, prefix: &[u8]) -> bool {
        let Some(list) = self.maps.list(prefix) else {
            return false;
        };
        list.iter().any(|&i| {
            matches!(self.slots.get(i as usize), Some(Some(s)) if s.dirty
                && s.value.is_some()
                && map_prefix_of(s) == Some(prefix))
        })
    }

    /// Appends list `elements` to the value held in slot `i`, as the engine's `ListAppendOperator` joins:
    /// `existing , elements`, or `elements` alone when the list is absent. The value's buffer grows in
    /// place (amortised, as the heap backend's lists do) unless a pending layer still holds it.
    pub(crate) fn append(&mut self, i: u32, elements: &[u8]) {
        self.set_dirty_with(i, |v| match v {
            Some(old) => old.extend(&[&[keyed_state_lsm_list_delimiter()], elements]),
            None => *v = Some(SmallBytes::new(elements)),
        });
    }

    /// Writes `value` into slot `i` and marks it dirty in the current epoch. A slot already dirty in this
    /// epoch has its log entry updated (the log holds one entry per slot and epoch); otherwise the write is
    /// appended to the log. The value is written in place where the slot's bytes allow (always for inline
    /// bytes; a shared buffer once the log entry has let go of it).
    fn set_dirty(&mut self, i: u32, value: Option<&[u8]>) {
        self.set_dirty_with(i, |old| match (old, value) {
            (Some(old), Some(v)) => old.set(v),
            (old, v) => *old = v.map(SmallBytes::new),
        });
    }

    /// [`set_dirty`](Self::set_dirty) with the new value made by `change` from the slot's (in place where
    /// the bytes allow).
    #[inline]
    fn set_dirty_with(&mut self, i: u32, change: impl FnOnce(&mut Option<Bytes>)) {
        let epoch = self.epoch;
        let Some(Some(s)) = self.slots.get_mut(i as usize) else {
            unreachable!("cache table points at a free slot")
        };
        let old_bytes = s.bytes();
        let entry = match self.log.get_mut(s.log as usize) {
            Some(e) if s.dirty && s.epoch == epoch && e.valid && e.slot == i => {
                // This epoch's log entry lets go of the value first, so a shared buffer is unshared.
                e.value = None;
                Some(e)
            }
            _ => None,
        };
        change(&mut s.value);
        s.dirty = true;
        s.epoch = epoch;
        self.used = self.used + s.bytes() - old_bytes;
        if let Some(e) = entry {
            e.value = s.value.clone();
            return;
        }
        s.log = self.log.len() as u32;
        storage::push(
            &mut self.log,
            LogEntry {
                key: s.key.clone(),
                value: s.value.clone(),
                valid: true,
                slot: i,
            },
        );
        self.log_valid += 1;
        if self.log.len() > 2 * self.log_valid + 1024 {
            self.compact_log();
        }
    }

    /// Drops the superseded entries of the current log.
    fn compact_log(&mut self) {
        let mut log = std::mem::take(&mut self.log);
        log.retain(|e| e.valid);
        for (n, e) in log.iter().enumerate() {
            let slot = e.slot;
            self.slot_mut(slot).log = n as u32;
        }
        self.log = log;
    }

    /// The synchronous part of a snapshot: moves the current dirty log into a pending layer (no copy) and
    /// returns every pending layer, oldest first, for the snapshot's overlay.
    pub(crate) fn hand_off(&mut self) -> Vec<Arc<Layer>> {
        if self.log_valid > 0 {
            let entries = std::mem::replace(&mut self.log, Vec::with_capacity(self.log_reserve));
            storage::use_small_pages(&self.log);
            self.pending.push(Arc::new(Layer {
                epoch: self.epoch,
                entries,
            }));
            self.epoch += 1;
            self.pending_keys = None;
            self.log_valid = 0;
        } else {
            self.log.clear();
        }
        self.pending.clone()
    }

    /// What this cache and the checkpoint captures of its layers agree on.
    pub(crate) fn ledger(&self) -> &Arc<LayerLedger> {
        &self.ledger
    }

    /// Whether the oldest pending layer is in the engine through an adopted capture's files
    /// ([`retire_adopted`](Self::retire_adopted) has work).
    #[inline]
    pub(crate) fn has_adopted_layers(&self) -> bool {
        self.pending
            .first()
            .is_some_and(|l| l.epoch < self.ledger.adopted_below())
    }

    /// Drops the pending layers an adopted capture put into the engine, and marks clean the slots whose
    /// latest value they held: they count as written back. Does nothing while an adoption holds the ledger
    /// (a later call does it).
    pub(crate) fn retire_adopted(&mut self) {
        let adopted = self.ledger.adopted_below();
        let n = self.pending.partition_point(|l| l.epoch < adopted);
        let Some(last) = n.checked_sub(1).and_then(|i| self.pending.get(i)) else {
            return;
        };
        // Their keys may reach the engine once they are clean: no capture holding them adopts any more.
        if !self.ledger.try_release_below(last.epoch + 1) {
            return;
        }
        let retired: Vec<Arc<Layer>> = self.pending.drain(..n).collect();
        self.pending_keys = None;
        self.mark_clean(&retired);
    }

    /// Marks clean the slots whose latest value `layers` (now in the engine) held.
    fn mark_clean(&mut self, layers: &[Arc<Layer>]) {
        for layer in layers {
            for e in layer.entries.iter().filter(|e| e.valid) {
                if let Some(Some(s)) = self.slots.get_mut(e.slot as usize) {
                    if s.dirty && s.epoch == layer.epoch && s.key.as_slice() == e.key.as_slice() {
                        s.dirty = false;
                        s.log = NO_LOG;
                    }
                }
            }
        }
    }

    /// Writes every pending layer into the engine, oldest first (those an adopted capture put there
    /// already are only retired), and marks clean the slots whose latest value it held. Must precede any
    /// other write of the backend into the engine.
    pub(crate) fn drain_pending(&mut self, db: &Db) -> Result<()> {
        let Some(last) = self.pending.last() else {
            return Ok(());
        };
        // Given up before any of it is written: a capture holding one of these layers adopts nothing now.
        self.ledger.release_below(last.epoch + 1);
        let adopted = self.ledger.adopted_below();
        let n = self.pending.partition_point(|l| l.epoch < adopted);
        let retired: Vec<Arc<Layer>> = self.pending.drain(..n).collect();
        self.pending_keys = None;
        self.mark_clean(&retired);
        if self.pending.is_empty() {
            return Ok(());
        }
        let layers = std::mem::take(&mut self.pending);
        let mut batch = WriteBatch::new();
        // The layer the unwritten batch began in: a batch can span the end of one layer and the start of
        // the next.
        let mut batch_start = 0;
        for (n, layer) in layers.iter().enumerate() {
            for e in layer.entries.iter().filter(|e| e.valid) {
                match &e.value {
                    Some(v) => batch.put(e.key.as_slice(), v.as_slice()),
                    None => batch.delete(e.key.as_slice()),
                };
                if batch.len() >= BATCH_OPS {
                    if let Err(err) = db.write(&batch) {
                        // Nothing is lost: every layer the failed batch touched stays pending, with those
                        // after it (writing a layer's first entries again later is harmless: they are
                        // written in order, and the engine holds nothing newer for a cached key).
                        self.pending = layers[batch_start..].to_vec();
                        return Err(err.into());
                    }
                    batch.clear();
                    batch_start = n;
                }
            }
        }
        if !batch.is_empty() {
            if let Err(err) = db.write(&batch) {
                self.pending = layers;
                return Err(err.into());
            }
        }
        self.mark_clean(&layers);
        Ok(())
    }

    /// Writes every dirty entry into the engine (pending layers first, then the current log); afterwards the
    /// engine holds everything and the cache is clean.
    pub(crate) fn write_back_all(&mut self, db: &Db) -> Result<()> {
        self.drain_pending(db)?;
        if self.log_valid == 0 {
            self.log.clear();
            self.maps.clear();
            return Ok(());
        }
        let mut batch = WriteBatch::new();
        for e in self.log.iter().filter(|e| e.valid) {
            match &e.value {
                Some(v) => batch.put(e.key.as_slice(), v.as_slice()),
                None => batch.delete(e.key.as_slice()),
            };
            if batch.len() >= BATCH_OPS {
                // A failure leaves everything dirty: writing it again later is harmless.
                db.write(&batch)?;
                batch.clear();
            }
        }
        if !batch.is_empty() {
            db.write(&batch)?;
        }
        let mut log = std::mem::take(&mut self.log);
        for e in log.iter().filter(|e| e.valid) {
            let s = self.slot_mut(e.slot);
            s.dirty = false;
            s.log = NO_LOG;
        }
        // The allocation is kept for the next writes.
        log.clear();
        self.log = log;
        self.log_valid = 0;
        // Nothing is dirty any more.
        self.maps.clear();
        Ok(())
    }

    /// Writes everything back and forgets every entry.
    pub(crate) fn clear(&mut self, db: &Db) -> Result<()> {
        self.write_back_all(db)?;
        self.table.clear();
        self.slots.clear();
        self.free.clear();
        self.hand = 0;
        self.used = 0;
        self.marks.clear();
        Ok(())
    }

    /// Forgets `key`'s entry if it is clean (it must be: the caller wrote everything back).
    pub(crate) fn forget_clean(&mut self, key: &[u8]) {
        if let Some(i) = self.lookup(key) {
            if !self.slot(i).dirty {
                self.remove_slot(i);
            }
        }
    }

    fn remove_slot(&mut self, i: u32) {
        let Some(s) = self.slots.get_mut(i as usize).and_then(Option::take) else {
            return;
        };
        self.used -= s.bytes();
        self.table.remove(s.hash, i);
        self.free.push(i);
        // An entry of a complete map leaves: the map is no longer whole in the cache.
        if let Some(prefix) = map_prefix_of(&s).filter(|_| !self.marks.is_empty()) {
            self.unmark_map(prefix);
        }
    }
}

impl Drop for RmwCache {
    fn drop(&mut self) {
        // Whatever the backend does with the keys from now on, no capture of this cache adopts its files.
        self.ledger.release_below(u64::MAX);
    }
}

/// The map prefix of the key of a slot written as a map entry ([`RmwCache::write_map`]).
#[inline]
fn map_prefix_of(s: &Slot) -> Option<&[u8]> {
    match s.map_prefix {
        0 => None,
        n => s.key.as_slice().get(..usize::from(n)),
    }
}

/// The list delimiter of Flink's list state, which the engine's `ListAppendOperator` joins with.
#[inline]
fn keyed_state_lsm_list_delimiter() -> u8 {
    crate::layout::LIST_DELIMITER
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg_attr(miri, ignore)] // opens an engine: scheduling calls, SST file maps (Miri runs neither)
    fn clock_evicts_unreferenced_entries_and_writes_back_dirty_ones() -> Result<()> {
        let dir = tempfile::tempdir().map_err(crate::Error::io_at("tempdir", "/tmp"))?;
        let db = Db::open(dir.path(), keyed_state_lsm::Options::default())?;
        let mut c = RmwCache::new(3 * ENTRY_OVERHEAD, true);
        for k in 0..3u8 {
            c.write(None, &[k], Some(&[k]));
            c.evict(None, &db)?;
        }
        assert_eq!(
            c.used(),
            3 * ENTRY_OVERHEAD,
            "keys and values inside their slots"
        );
        // Key 0 is referenced again; the next insert evicts key 1 (written back), not key 0.
        assert!(c.lookup(&[0]).is_some());
        let i = c.write(None, &[9], Some(&[9]));
        c.evict(Some(i), &db)?;
        assert!(c.lookup(&[0]).is_some());
        assert!(c.lookup(&[9]).is_some());
        assert_eq!(db.get(&[1])?.as_deref(), Some(&[1u8][..]));
        assert_eq!(db.get(&[9])?, None);
        Ok(())
    }

    #[test]
    fn long_keys_and_values_count_their_allocations_not_only_their_lengths() {
        let mut c = RmwCache::new(1 << 20, true);
        let (key, value) = ([7u8; 30], [8u8; 100]);
        c.write(None, &key, Some(&value));
        let counted = c.used();
        // Each buffer carries a header and is rounded up by the allocator: more than the bytes alone.
        assert!(
            counted >= key.len() + value.len() + ENTRY_OVERHEAD + 2 * 16,
            "counted {counted}"
        );
        assert_eq!(
            counted,
            Bytes::new(&key).heap_bytes() + Bytes::new(&value).heap_bytes() + ENTRY_OVERHEAD
        );
        // Rewriting the value in place keeps the count; a delete gives the value's buffer back.
        let held = c.lookup(&key);
        assert!(held.is_some());
        c.write(held, &key, Some(&[9u8; 100]));
        assert_eq!(c.used(), counted);
        c.write(held, &key, None);
        assert_eq!(c.used(), Bytes::new(&key).heap_bytes() + ENTRY_OVERHEAD);
    }

    #[test]
    fn a_hand_off_keeps_the_values_of_its_moment_and_drains_in_order() -> Result<()> {
        let mut c = RmwCache::new(1 << 20, true);
        c.write(None, b"a", Some(b"1"));
        c.write(None, b"b", Some(b"1"));
        let first = c.hand_off();
        let (a, b) = (c.lookup(b"a"), c.lookup(b"b"));
        c.write(a, b"a", Some(b"2"));
        c.write(b, b"b", None);
        let second = c.hand_off();
        assert_eq!(first.len(), 1);
        assert_eq!(second.len(), 2);
        let o1 = Overlay::build(&first);
        let o2 = Overlay::build(&second);
        let all = |o: &Overlay| -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
            o.range(b"", None)
                .map(|(k, v)| (k.to_vec(), v.map(<[u8]>::to_vec)))
                .collect()
        };
        assert_eq!(
            all(&o1),
            vec![
                (b"a".to_vec(), Some(b"1".to_vec())),
                (b"b".to_vec(), Some(b"1".to_vec()))
            ]
        );
        assert_eq!(
            all(&o2),
            vec![(b"a".to_vec(), Some(b"2".to_vec())), (b"b".to_vec(), None)]
        );
        // The write-back opens an engine: its background threads' scheduling calls and its SST file maps
        // do not run under Miri, which checks the cache up to here.
        #[cfg(not(miri))]
        {
            let dir = tempfile::tempdir().map_err(crate::Error::io_at("tempdir", "/tmp"))?;
            let db = Db::open(dir.path(), keyed_state_lsm::Options::default())?;
            c.write_back_all(&db)?;
            assert!(!c.has_dirty());
            assert_eq!(db.get(b"a")?.as_deref(), Some(&b"2"[..]));
            assert_eq!(db.get(b"b")?, None);
        }
        Ok(())
    }

    #[test]
    fn a_hand_off_during_a_growth_of_mapped_buckets_keeps_its_values_and_deletes_after_it_stick(
    ) -> Result<()> {
        use super::slot_table::tests::mapped;
        let mut c = RmwCache::new(64 << 20, true);
        let key = |k: u32| k.to_be_bytes();
        let mut k = 0u32;
        // Insert until a growth from mapped old buckets is under way.
        while !(c.table.growing() && mapped(&c.table) == (true, true)) {
            c.write(None, &key(k), Some(&key(k)));
            k += 1;
            assert!(k < 100_000, "no growth of mapped buckets (not Unix?)");
        }
        let n = k;
        let layers = c.hand_off();
        assert!(
            c.table.growing(),
            "the hand-off came in the middle of the growth"
        );
        // Deletes of every other key, while the growth moves on.
        for k in (0..n).step_by(2) {
            let s = c.lookup(&key(k));
            assert!(s.is_some(), "key {k}");
            c.write(s, &key(k), None);
        }
        assert!(!c.table.growing(), "the growth finished among the deletes");
        let o = Overlay::build(&layers);
        assert_eq!(
            o.range(b"", None).filter(|(_, v)| v.is_some()).count(),
            n as usize
        );
        for k in 0..n {
            let held = c.lookup(&key(k)).and_then(|i| c.value(i));
            assert_eq!(held, (k % 2 == 1).then_some(&key(k)[..]), "key {k}");
        }
        // The write-back opens an engine: its background threads' scheduling calls and its SST file maps
        // do not run under Miri, which checks the cache up to here.
        #[cfg(not(miri))]
        {
            let dir = tempfile::tempdir().map_err(crate::Error::io_at("tempdir", "/tmp"))?;
            let db = Db::open(dir.path(), keyed_state_lsm::Options::default())?;
            c.write_back_all(&db)?;
            assert_eq!(db.get(&key(1))?.as_deref(), Some(&key(1)[..]));
            assert_eq!(db.get(&key(0))?, None);
        }
        Ok(())
    }

    #[test]
    fn a_refused_growth_of_the_table_declines_new_keys_and_keeps_the_held_ones() {
        use super::buckets::tests::REFUSE;
        let mut c = RmwCache::new(1 << 20, true);
        let key = |k: u32| k.to_be_bytes();
        for k in 0..13u32 {
            assert!(c.admit_write(4));
            c.write(None, &key(k), Some(b"v"));
        }
        // A 14th entry would fill more than 13/16 of the 16 buckets: the growth's memory is refused.
        REFUSE.set(true);
        assert!(!c.admit_write(4), "a blind write goes to the engine");
        assert!(
            !c.admit(c.hasher.hash_one(key(13)), 4),
            "a read is not kept"
        );
        assert!((0..13).all(|k| c.lookup(&key(k)).is_some()));
        REFUSE.set(false);
        assert!(c.admit_write(4));
        c.write(None, &key(13), Some(b"v"));
        assert!((0..14).all(|k| c.lookup(&key(k)).is_some()));
    }

    #[test]
    fn admission_is_at_once_with_room_then_reads_on_a_second_miss_and_writes_never() {
        let mut c = RmwCache::new(1 << 20, false);
        assert!(!c.admits_on_first_touch());
        let h = c.hasher.hash_one(b"k");
        // Room for it: taken in at once, the doorkeeper not asked.
        assert!(c.admit(h, 1));
        assert!(c.admit(h, 1));
        assert!(c.admit_write(1));
        // A blind write into a full cache goes to the engine, however often.
        assert!(!c.admit_write(1 << 20));
        assert!(!c.admit_write(1 << 20));
        // No room: the doorkeeper remembers the first miss.
        let full = 1 << 20;
        assert!(!c.admit(h, full));
        assert!(c.admit(h, full));
        // Remembered once: the next miss of the same key starts over.
        assert!(!c.admit(h, full));
        assert!(RmwCache::new(1, true).admit(h, full));
    }

    #[test]
    fn a_rewrite_updates_its_epochs_log_entry_and_a_hand_off_keeps_its_values() -> Result<()> {
        let mut c = RmwCache::new(1 << 20, true);
        let long = |n: u8| vec![n; 40];
        // A short key and value (inline) and a long one (shared buffers).
        for n in 0..5u8 {
            let s = c.lookup(b"short");
            c.write(s, b"short", Some(&[n]));
            let l = c.lookup(&long(0xAA));
            c.write(l, &long(0xAA), Some(&long(n)));
        }
        assert_eq!(c.log.len(), 2);
        let first = c.hand_off();
        // Written again after the hand-off: a new log entry, and the layer keeps the old values.
        let l = c.lookup(&long(0xAA));
        c.write(l, &long(0xAA), Some(&long(7)));
        let s = c.lookup(b"short");
        c.write(s, b"short", None);
        let l = c.lookup(&long(0xAA));
        assert!(l.is_some());
        assert_eq!(l.and_then(|i| c.value(i)), Some(&long(7)[..]));
        let o = Overlay::build(&first);
        let got: Vec<(Vec<u8>, Option<Vec<u8>>)> = o
            .range(b"", None)
            .map(|(k, v)| (k.to_vec(), v.map(<[u8]>::to_vec)))
            .collect();
        assert_eq!(
            got,
            vec![
                (b"short".to_vec(), Some(vec![4])),
                (long(0xAA), Some(long(4))),
            ]
        );
        // The write-back opens an engine: its background threads' scheduling calls and its SST file maps
        // do not run under Miri, which checks the cache up to here.
        #[cfg(not(miri))]
        {
            let dir = tempfile::tempdir().map_err(crate::Error::io_at("tempdir", "/tmp"))?;
            let db = Db::open(dir.path(), keyed_state_lsm::Options::default())?;
            c.write_back_all(&db)?;
            assert_eq!(db.get(&long(0xAA))?.as_deref(), Some(&long(7)[..]));
            assert_eq!(db.get(b"short")?, None);
        }
        Ok(())
    }

    #[test]
    fn a_map_lists_only_its_own_dirty_entries_when_another_maps_share_its_list() {
        let mut c = RmwCache::new(1 << 20, true);
        // Every prefix hashes alike: `a`'s and `b`'s entries share one list.
        c.maps.set_all_alike();
        let (a, b) = (b"sidKGAAAA".as_slice(), b"sidKGBBBB".as_slice());
        let key = |p: &[u8], uk: u8| [p, &[uk]].concat();
        c.write_map(None, &key(a, 1), a.len(), Some(b"1"));
        c.write_map(None, &key(a, 2), a.len(), None);
        c.write_map(None, &key(b, 1), b.len(), Some(b"x"));
        let got: Vec<(Vec<u8>, Option<Vec<u8>>)> = c
            .map_dirty(a)
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k.as_slice().to_vec(), v.map(|v| v.as_slice().to_vec())))
            .collect();
        assert_eq!(
            got,
            vec![(key(a, 1), Some(b"1".to_vec())), (key(a, 2), None)]
        );
        assert!(c.map_has_live_dirty(a));
        // Reading `a` kept `b`'s entry listed.
        let got = c.map_dirty(b).unwrap_or_default();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0.as_slice(), key(b, 1).as_slice());
        let held = c.lookup(&key(a, 1));
        c.write_map(held, &key(a, 1), a.len(), None);
        assert!(!c.map_has_live_dirty(a), "only `b`'s entry has a value");
    }
}
