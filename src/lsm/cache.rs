//! The block cache: decompressed SST blocks keyed by `(file_number, block_offset)`, bounded in bytes.
//!
//! The cache is split into shards, each behind its own mutex, each bounded by `capacity / SHARDS` bytes, so
//! the total never exceeds the capacity. Eviction is CLOCK (second chance): a hit only sets a reference bit,
//! which keeps the hot path to one hash lookup under a short lock. A block larger than a shard is returned to
//! the caller but not cached. File numbers are never reused, so stale entries of deleted files are simply
//! evicted over time (or dropped at once with [`BlockCache::erase_file`]).

use std::sync::Arc;

use hashbrown::HashMap;
use parking_lot::Mutex;

/// Number of shards (a power of two).
const SHARDS: usize = 16;
/// Bookkeeping bytes charged per cached block on top of its length.
const ENTRY_OVERHEAD: usize = 64;

type Key = (u64, u64);

struct Slot {
    key: Key,
    block: Option<Arc<[u8]>>,
    charge: usize,
    referenced: bool,
}

#[derive(Default)]
struct Shard {
    map: HashMap<Key, usize>,
    slots: Vec<Slot>,
    free: Vec<usize>,
    hand: usize,
    usage: usize,
}

impl Shard {
    fn get(&mut self, key: &Key) -> Option<Arc<[u8]>> {
        let idx = *self.map.get(key)?;
        let slot = self.slots.get_mut(idx)?;
        slot.referenced = true;
        slot.block.clone()
    }

    /// Evicts one unreferenced block; false if the shard is empty.
    fn evict_one(&mut self) -> bool {
        if self.map.is_empty() || self.slots.is_empty() {
            return false;
        }
        // Two sweeps always find a victim: the first clears every reference bit.
        for _ in 0..2 * self.slots.len() + 1 {
            if self.hand >= self.slots.len() {
                self.hand = 0;
            }
            let idx = self.hand;
            self.hand += 1;
            let Some(slot) = self.slots.get_mut(idx) else {
                continue;
            };
            if slot.block.is_none() {
                continue;
            }
            if slot.referenced {
                slot.referenced = false;
                continue;
            }
            slot.block = None;
            self.usage -= slot.charge;
            let key = slot.key;
            self.map.remove(&key);
            self.free.push(idx);
            return true;
        }
        false
    }

    fn remove_idx(&mut self, idx: usize) {
        if let Some(slot) = self.slots.get_mut(idx) {
            if slot.block.take().is_some() {
                self.usage -= slot.charge;
                let key = slot.key;
                self.map.remove(&key);
                self.free.push(idx);
            }
        }
    }

    fn insert(&mut self, key: Key, block: Arc<[u8]>, charge: usize, capacity: usize) {
        if let Some(&idx) = self.map.get(&key) {
            self.remove_idx(idx);
        }
        while self.usage + charge > capacity {
            if !self.evict_one() {
                return;
            }
        }
        let slot = Slot {
            key,
            block: Some(block),
            charge,
            referenced: false,
        };
        let idx = match self.free.pop() {
            Some(idx) => {
                if let Some(s) = self.slots.get_mut(idx) {
                    *s = slot;
                }
                idx
            }
            None => {
                self.slots.push(slot);
                self.slots.len() - 1
            }
        };
        self.map.insert(key, idx);
        self.usage += charge;
    }
}

/// A sharded, byte-bounded cache of decompressed blocks.
pub struct BlockCache {
    shards: Box<[Mutex<Shard>]>,
    shard_capacity: usize,
}

impl BlockCache {
    /// A cache holding at most `capacity_bytes` (block bytes plus a small per-block overhead).
    pub fn new(capacity_bytes: usize) -> Arc<Self> {
        let shards = (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect();
        Arc::new(BlockCache {
            shards,
            shard_capacity: capacity_bytes / SHARDS,
        })
    }

    /// The byte bound this cache was created with (rounded down to a multiple of the shard count).
    pub fn capacity(&self) -> usize {
        self.shard_capacity * SHARDS
    }

    /// Bytes currently charged (never above [`BlockCache::capacity`]).
    pub fn usage(&self) -> usize {
        self.shards.iter().map(|s| s.lock().usage).sum()
    }

    #[inline]
    fn shard(&self, key: &Key) -> &Mutex<Shard> {
        let h = xxhash_rust::xxh3::xxh3_64_with_seed(&key.1.to_le_bytes(), key.0);
        &self.shards[(h as usize) & (SHARDS - 1)]
    }

    /// The cached block at `offset` in file `file_number`, if present.
    pub fn get(&self, file_number: u64, offset: u64) -> Option<Arc<[u8]>> {
        let key = (file_number, offset);
        self.shard(&key).lock().get(&key)
    }

    /// Caches a block (evicting others as needed); blocks larger than a shard's bound are not cached.
    pub fn insert(&self, file_number: u64, offset: u64, block: Arc<[u8]>) {
        let charge = block.len() + ENTRY_OVERHEAD;
        if charge > self.shard_capacity {
            return;
        }
        let key = (file_number, offset);
        self.shard(&key)
            .lock()
            .insert(key, block, charge, self.shard_capacity);
    }

    /// Drops every cached block of `file_number` (e.g. after the file is deleted).
    pub fn erase_file(&self, file_number: u64) {
        for shard in self.shards.iter() {
            let mut s = shard.lock();
            let idxs: Vec<usize> = s
                .map
                .iter()
                .filter(|(k, _)| k.0 == file_number)
                .map(|(_, &i)| i)
                .collect();
            for idx in idxs {
                s.remove_idx(idx);
            }
        }
    }
}

impl std::fmt::Debug for BlockCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockCache")
            .field("capacity", &self.capacity())
            .field("usage", &self.usage())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_and_hits() {
        let cache = BlockCache::new(64 * 1024);
        for i in 0..1000u64 {
            cache.insert(1, i * 4096, Arc::from(vec![i as u8; 1000]));
            assert!(cache.usage() <= cache.capacity());
        }
        let last = cache.get(1, 999 * 4096).unwrap();
        assert_eq!(last[0], (999 % 256) as u8);
        assert!(cache.get(1, 0).is_none());
        cache.insert(2, 0, Arc::from(vec![0u8; 1 << 20]));
        assert!(cache.get(2, 0).is_none());
        cache.erase_file(1);
        assert_eq!(cache.usage(), 0);
    }
}
