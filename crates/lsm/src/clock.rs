//! One shard of a byte-bounded CLOCK cache: the structure the block cache ([`crate::cache`]) and the row
//! cache ([`crate::row_cache`]) share.
//!
//! Entries live in a hash map; a hit sets the entry's reference bit in place (one probe, no second
//! indirection). The clock hand walks a ring of keys in insertion order: a referenced entry loses its bit
//! and goes to the back, an unreferenced one is evicted (second chance). The ring may hold keys no longer
//! cached (removed or replaced); the hand skips them, and the ring is rebuilt when they pile up. The
//! caller keeps one shard behind each of its mutexes and chooses the shard by key.

use std::collections::VecDeque;
use std::hash::Hash;

use hashbrown::HashMap;

struct Slot<V> {
    value: V,
    /// At most 4 GiB: a larger value is not cached (a `u32` keeps a row cache's slot at 24 bytes).
    charge: u32,
    referenced: bool,
}

/// Bytes of one slot of a shard's map of values `V` keyed by `K` (the key and the slot, as the map stores
/// them; its control byte and empty slots are not counted).
pub(crate) const fn slot_bytes<K, V>() -> usize {
    std::mem::size_of::<(K, Slot<V>)>()
}

/// A CLOCK shard of values `V` keyed by `K`, bounded by the capacity its caller passes to
/// [`insert`](Self::insert).
pub(crate) struct ClockShard<K, V> {
    map: HashMap<K, Slot<V>>,
    /// The clock: keys in insertion order. Invariant: every cached key is in it.
    ring: VecDeque<K>,
    usage: usize,
}

impl<K, V> Default for ClockShard<K, V> {
    fn default() -> Self {
        ClockShard {
            map: HashMap::default(),
            ring: VecDeque::new(),
            usage: 0,
        }
    }
}

impl<K: Copy + Eq + Hash, V> ClockShard<K, V> {
    /// The value of `key`, marked recently used.
    #[inline]
    pub(crate) fn get(&mut self, key: &K) -> Option<&V> {
        let slot = self.map.get_mut(key)?;
        slot.referenced = true;
        Some(&slot.value)
    }

    /// The value of `key`, its reference bit left alone.
    #[inline]
    pub(crate) fn peek(&self, key: &K) -> Option<&V> {
        self.map.get(key).map(|s| &s.value)
    }

    /// Bytes charged by the cached entries.
    pub(crate) fn usage(&self) -> usize {
        self.usage
    }

    /// The number of cached entries.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// Evicts one unreferenced entry, handing its value to `evicted`; false if the shard is empty.
    pub(crate) fn evict_one(&mut self, evicted: &mut impl FnMut(V)) -> bool {
        // Two sweeps always find a victim: the first clears every reference bit.
        let mut budget = 2 * self.ring.len() + 1;
        while budget > 0 && !self.map.is_empty() {
            budget -= 1;
            let Some(key) = self.ring.pop_front() else {
                return false;
            };
            let Some(slot) = self.map.get_mut(&key) else {
                continue; // stale ring entry
            };
            if slot.referenced {
                slot.referenced = false;
                self.ring.push_back(key);
                continue;
            }
            if let Some(slot) = self.map.remove(&key) {
                self.usage -= slot.charge as usize;
                evicted(slot.value);
            }
            return true;
        }
        false
    }

    /// Evicts until the shard holds at most `capacity` bytes (or is empty).
    pub(crate) fn fit(&mut self, capacity: usize, evicted: &mut impl FnMut(V)) {
        while self.usage > capacity {
            if !self.evict_one(evicted) {
                break;
            }
        }
    }

    /// Inserts `value` under `key` charging `charge` bytes, or replaces the value cached there (keeping
    /// its place in the clock), evicting others to stay within `capacity`. A new entry that cannot fit
    /// (the shard emptied), or whose charge is 4 GiB or more, is dropped. Evicted values go to `evicted`.
    pub(crate) fn insert(
        &mut self,
        key: K,
        value: V,
        charge: usize,
        capacity: usize,
        evicted: &mut impl FnMut(V),
    ) {
        let Ok(charge32) = u32::try_from(charge) else {
            if let Some(slot) = self.map.remove(&key) {
                self.usage -= slot.charge as usize;
                evicted(slot.value);
            }
            return;
        };
        if let Some(slot) = self.map.get_mut(&key) {
            self.usage = self.usage - slot.charge as usize + charge;
            slot.value = value;
            slot.charge = charge32;
        } else {
            while self.usage + charge > capacity {
                if !self.evict_one(evicted) {
                    return;
                }
            }
            self.map.insert(
                key,
                Slot {
                    value,
                    charge: charge32,
                    referenced: false,
                },
            );
            self.usage += charge;
            self.ring.push_back(key);
        }
        self.fit(capacity, evicted);
        self.drop_stale_keys();
    }

    /// Drops every entry whose key and value fail `keep`. The ring's keys of dropped entries stay until
    /// the hand passes them or they pile up (then the ring is rebuilt, as after an insert): a pass that
    /// drops nothing costs one walk over the map's slots.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&K, &V) -> bool) {
        let usage = &mut self.usage;
        self.map.retain(|k, slot| {
            let kept = keep(k, &slot.value);
            if !kept {
                *usage -= slot.charge as usize;
            }
            kept
        });
        self.drop_stale_keys();
    }

    /// Rebuilds the ring without the keys no longer cached once they outnumber the cached ones (plus 64).
    fn drop_stale_keys(&mut self) {
        if self.ring.len() > 2 * self.map.len() + 64 {
            let map = &self.map;
            self.ring.retain(|k| map.contains_key(k));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_referenced_entry_survives_a_sweep_and_an_unreferenced_one_goes_first() {
        let mut s: ClockShard<u32, u32> = ClockShard::default();
        let mut gone = Vec::new();
        for k in 0..4 {
            s.insert(k, k * 10, 10, 40, &mut |v| gone.push(v));
        }
        assert_eq!(s.get(&0), Some(&0));
        s.insert(4, 40, 10, 40, &mut |v| gone.push(v));
        // 0 was referenced: it lost its bit and 1 went instead.
        assert_eq!(gone, vec![10]);
        assert!(s.peek(&0).is_some() && s.peek(&1).is_none());
        assert_eq!(s.usage(), 40);
    }

    #[test]
    fn replacing_keeps_one_entry_and_charges_the_new_size() {
        let mut s: ClockShard<u32, &str> = ClockShard::default();
        s.insert(1, "a", 10, 100, &mut |_| {});
        s.insert(1, "b", 30, 100, &mut |_| {});
        assert_eq!((s.peek(&1), s.usage()), (Some(&"b"), 30));
        // An entry larger than the capacity is not kept, and the shard stays within it.
        s.insert(2, "c", 200, 100, &mut |_| {});
        assert_eq!((s.peek(&2), s.usage()), (None, 0));
    }

    #[test]
    fn retain_and_fit_release_their_charges() {
        let mut s: ClockShard<u32, u32> = ClockShard::default();
        for k in 0..10 {
            s.insert(k, k, 5, 1000, &mut |_| {});
        }
        s.retain(|k, _| k % 2 == 0);
        assert_eq!(s.usage(), 25);
        let mut evicted = 0;
        s.fit(10, &mut |_| evicted += 1);
        assert_eq!((s.usage(), evicted), (10, 3));
        for k in 0..1000 {
            s.insert(k, k, 5, 50, &mut |_| {});
            assert!(s.usage() <= 50);
        }
    }
}
