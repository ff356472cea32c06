//! How a memtable uses its point index ([`IndexTable`] generations in its [`IndexCell`](super::index_cell)):
//! probing it, publishing a new node into it, and growing it when it fills up.

use std::sync::atomic::Ordering as AtomicOrdering;

use super::point_index::{slot_value, IndexTable, Probe, ADDR_MASK, GROW_DEN, GROW_NUM, POISON};
use super::versions::Chain;
use super::MemTable;
use crossbeam_epoch as epoch;

impl MemTable {
    /// A table whose index starts with `slots` slots and grows as any table's does (model checks of the
    /// growth: from 2 slots, the second and third keys each make it grow).
    #[cfg(all(test, loom))]
    pub(crate) fn with_index_slots(slots: usize) -> Self {
        Self::with_index(0, 0, IndexTable::new(slots))
    }

    /// A table whose index has exactly `slots` slots and never grows (tests of a full probe window).
    #[cfg(test)]
    fn with_fixed_index(slots: usize) -> Self {
        let m = Self::new(0);
        let t = IndexTable::new(slots);
        m.bytes
            .store(t.bytes() + m.new_keys.bytes(), AtomicOrdering::Relaxed);
        m.index.replace(t, &epoch::pin());
        m.index_frozen.store(true, AtomicOrdering::Relaxed);
        m
    }

    /// Whether the index may grow (always, except in tests that fix its size).
    #[inline]
    fn index_may_grow(&self) -> bool {
        #[cfg(test)]
        return !self.index_frozen.load(AtomicOrdering::Relaxed);
        #[cfg(not(test))]
        true
    }

    /// The current index generation.
    #[inline]
    pub(super) fn index<'g>(&'g self, guard: &'g epoch::Guard) -> Option<&'g IndexTable> {
        self.index.load(guard)
    }

    /// Slots of the current point index (a size hint for the next table).
    pub fn index_slots(&self) -> usize {
        let guard = epoch::pin();
        self.index(&guard).map_or(0, |t| t.slots.len())
    }

    /// Looks `user_key` (hash `h`) up in the point index.
    #[inline]
    pub(super) fn probe<'g>(
        &'g self,
        user_key: &[u8],
        h: u64,
        guard: &'g epoch::Guard,
    ) -> Probe<'g> {
        match self.index(guard) {
            Some(t) => t.probe(user_key, h),
            None => Probe::Missing {
                free: None,
                sure: false,
            },
        }
    }

    /// Records a new node `chain` (hash `h`) in the free slot `free` a probe of the current generation
    /// returned (None: the key's probe window is full, and the key stays out of the index: a probe of it
    /// crosses the same full window, answers "don't know", and its reader searches the skiplist), adds it to
    /// the left-out list if no slot points to it (full window, or a poisoned slot), and grows the index when
    /// it is full enough. Writer only.
    pub(super) fn publish(&self, free: Option<usize>, h: u64, chain: &Chain, guard: &epoch::Guard) {
        let Some(t) = self.index(guard) else { return };
        let value = slot_value(h, chain);
        if free.is_none() || value & ADDR_MASK == POISON {
            self.index_left_out
                .lock()
                .push(chain as *const Chain as usize);
        }
        let Some(i) = free else { return };
        t.publish(i, value);
        let used = self.index_used.fetch_add(1, AtomicOrdering::Relaxed) + 1;
        if used * GROW_DEN > t.slots.len() * GROW_NUM && self.index_may_grow() {
            self.grow_index(t.slots.len() * 2, guard);
        }
    }

    /// Replaces the index with one of `slots` slots, rebuilt from the current generation's slots and the
    /// nodes it left out: a sequential scan, each node's key prefetched ahead (4–5x faster than a walk of
    /// the skiplist, whose nodes are in key order but scattered over the arena: 23–31 ms instead of
    /// 123–127 at 734k nodes, allocation included; `design/lsm-engine.md`, "Growth cost"). Writer only (no
    /// node is added while it runs); readers see the old or the new generation, each complete for every
    /// key it holds.
    #[cold]
    fn grow_index(&self, slots: usize, guard: &epoch::Guard) {
        let Some(old) = self.index(guard) else { return };
        let started = std::time::Instant::now();
        let new = IndexTable::new(slots);
        let mut left_out = self.index_left_out.lock();
        let (used, still_left_out) = new.rebuild_from(old, &left_out);
        *left_out = still_left_out;
        drop(left_out);
        let added = new.bytes().saturating_sub(old.bytes());
        self.index_used.store(used, AtomicOrdering::Relaxed);
        self.index.replace(new, guard);
        self.charge(added);
        self.index_growths.fetch_add(1, AtomicOrdering::Relaxed);
        self.index_growth_micros.fetch_add(
            u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
            AtomicOrdering::Relaxed,
        );
    }

    /// How many times the point index grew, and the microseconds the writer spent growing it.
    pub fn index_growth_stats(&self) -> (u64, u64) {
        (
            self.index_growths.load(AtomicOrdering::Relaxed),
            self.index_growth_micros.load(AtomicOrdering::Relaxed),
        )
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::super::tests::cursor_entries;
    use super::*;
    use crate::ikey::ValueKind;
    use crate::memtable::point_index::{
        key_hash, live_index_tables, MIN_INDEX_SLOTS, POISON_EVEN_HASHES,
    };
    use crate::sync::AtomicU64;

    #[test]
    fn key_whose_probe_window_is_full_is_still_found_via_the_skiplist() {
        // 8 slots (the whole table is one probe window) for 40 keys: 32 keys are only in the skiplist.
        let m = Arc::new(MemTable::with_fixed_index(8));
        assert_eq!(m.index_slots(), 8);
        let key = |i: u64| format!("key{i:03}").into_bytes();
        let mut seq = 0;
        for round in 0..2 {
            for i in 0..40 {
                seq += 1;
                m.add(seq, ValueKind::Put, &key(i), format!("{round}").as_bytes());
            }
        }
        let mut unindexed = 0;
        for i in 0..40 {
            let k = key(i);
            let guard = epoch::pin();
            match m.probe(&k, key_hash(&k), &guard) {
                Probe::Found(c) => assert_eq!(c.user_key(), &k[..]),
                Probe::Missing { sure, free } => {
                    assert!(!sure && free.is_none(), "a present key ruled out");
                    unindexed += 1;
                }
            }
            let mut seen = Vec::new();
            m.for_each_version(&k, u64::MAX, |s, _, v| {
                seen.push((s, v.to_vec()));
                true
            });
            assert_eq!(
                seen,
                vec![(41 + i, b"1".to_vec()), (1 + i, b"0".to_vec())],
                "{i}"
            );
        }
        assert_eq!(unindexed, 32);
        // Absent keys are absent, with the index full ("don't know") as with it not.
        for i in 40..60 {
            m.for_each_version(&key(i), u64::MAX, |_, _, _| panic!("absent key {i} found"));
        }
        assert_eq!(cursor_entries(&m).len(), 80);
    }

    #[test]
    fn index_grows_with_the_keys_and_rules_out_absent_ones() {
        // A table of distinct small keys from the smallest index: it doubles several times, each rebuild
        // keeping the keys findable, and stays between 0.35 and 0.7 full.
        let capacity = 4 << 20;
        let m = MemTable::new(0);
        assert_eq!(m.index_slots(), MIN_INDEX_SLOTS);
        let mut n = 0u64;
        while m.approximate_bytes() < capacity {
            n += 1;
            m.add(n, ValueKind::Put, &n.to_be_bytes(), b"v");
        }
        assert!(
            m.index_slots() >= 8 * MIN_INDEX_SLOTS,
            "{}",
            m.index_slots()
        );
        assert!(!m.index_frozen.load(AtomicOrdering::Relaxed));
        let load = n as f64 / m.index_slots() as f64;
        let guard = epoch::pin();
        let mut indexed = 0;
        for i in 1..=n {
            if matches!(
                m.probe(&i.to_be_bytes(), key_hash(&i.to_be_bytes()), &guard),
                Probe::Found(_)
            ) {
                indexed += 1;
            }
        }
        let absent = 10_000u64;
        let ruled_out = (n + 1..=n + absent)
            .filter(|i| {
                matches!(
                    m.probe(&i.to_be_bytes(), key_hash(&i.to_be_bytes()), &guard),
                    Probe::Missing { sure: true, .. }
                )
            })
            .count();
        println!("index load {load:.2}: {indexed}/{n} keys indexed, {ruled_out}/{absent} absent keys ruled out");
        assert!((0.35..=0.7).contains(&load), "load {load}");
        assert!(indexed as f64 >= 0.99 * n as f64, "{indexed}/{n}");
        assert!(
            ruled_out as f64 >= 0.99 * absent as f64,
            "{ruled_out}/{absent}"
        );
    }

    #[test]
    fn readers_find_every_published_key_while_the_index_grows_under_them() {
        // From an 8-slot index to thousands of slots: each key, once its `add` returned, must be found by
        // every later lookup, whichever generation of the index the reader holds.
        let m = Arc::new(MemTable::with_capacity(0, 0, 0));
        assert_eq!(m.index_slots(), 8);
        let published = Arc::new(AtomicU64::new(0));
        let key = |i: u64| (i.wrapping_mul(0x9E37_79B9_7F4A_7C15)).to_be_bytes();
        let n = 20_000u64;
        let readers: Vec<_> = (0..2)
            .map(|r| {
                let (m, published) = (Arc::clone(&m), Arc::clone(&published));
                std::thread::spawn(move || {
                    let mut checks = 0u64;
                    loop {
                        let upto = published.load(AtomicOrdering::Acquire);
                        for i in (r..upto).step_by(97) {
                            let guard = epoch::pin();
                            let v: Vec<u64> =
                                m.versions(&key(i), u64::MAX, &guard).map(|v| v.0).collect();
                            assert_eq!(v, vec![i + 1], "key {i} of {upto}");
                            checks += 1;
                        }
                        if upto == n {
                            return checks;
                        }
                    }
                })
            })
            .collect();
        for i in 0..n {
            m.add(i + 1, ValueKind::Put, &key(i), b"v");
            published.store(i + 1, AtomicOrdering::Release);
        }
        for r in readers {
            assert!(r.join().expect("reader") > 0);
        }
        assert!(m.index_slots() >= 16_384, "{}", m.index_slots());
    }

    #[test]
    fn growth_indexes_keys_a_full_window_left_out() {
        // 8 slots for 40 keys: 32 keys left out (only in the skiplist). A growth re-places them and indexes
        // all of them; absent keys are then ruled out.
        let m = MemTable::with_fixed_index(8);
        let key = |i: u64| format!("key{i:03}").into_bytes();
        for i in 0..40 {
            m.add(i + 1, ValueKind::Put, &key(i), b"v");
        }
        let guard = epoch::pin();
        let found = |m: &MemTable| {
            (0..40)
                .filter(|&i| matches!(m.probe(&key(i), key_hash(&key(i)), &guard), Probe::Found(_)))
                .count()
        };
        assert_eq!(found(&m), 8);
        m.grow_index(1024, &guard);
        assert_eq!(m.index_slots(), 1024);
        assert_eq!(found(&m), 40);
        for i in 40..60 {
            assert!(matches!(
                m.probe(&key(i), key_hash(&key(i)), &guard),
                Probe::Missing { sure: true, .. }
            ));
        }
    }

    #[test]
    fn every_node_stays_indexed_or_listed_as_left_out_across_growths() {
        // Growth rebuilds from the old generation and the left-out list only: a node in neither would be
        // lost to the index, and a probe would then wrongly be sure the key is absent.
        let m = MemTable::with_fixed_index(8);
        let key = |i: u64| format!("key{i:04}").into_bytes();
        let guard = epoch::pin();
        let check = |m: &MemTable, n: u64| {
            let listed = m.index_left_out.lock().clone();
            let mut found = 0;
            for i in 0..n {
                match m.probe(&key(i), key_hash(&key(i)), &guard) {
                    Probe::Found(c) => {
                        found += 1;
                        assert!(!listed.contains(&(c as *const Chain as usize)));
                    }
                    Probe::Missing { sure, .. } => assert!(!sure, "key {i} lost by the index"),
                }
            }
            assert_eq!(
                found + listed.len(),
                n as usize,
                "indexed + left out != nodes"
            );
            found
        };
        for i in 0..40 {
            m.add(i + 1, ValueKind::Put, &key(i), b"v");
        }
        assert_eq!(check(&m, 40), 8);
        m.grow_index(16, &guard);
        assert_eq!(check(&m, 40), 16);
        for i in 40..100 {
            m.add(i + 1, ValueKind::Put, &key(i), b"v");
        }
        check(&m, 100);
        m.grow_index(4096, &guard);
        assert_eq!(check(&m, 100), 100);
        assert!(m.index_left_out.lock().is_empty());
    }

    #[test]
    fn nodes_with_poisoned_slots_are_found_through_the_skiplist_before_and_after_growth() {
        // Half the keys get poisoned slots (their "address does not fit"): probes of their tag must answer
        // "don't know", reads must still find them, and growth must carry them over through the left-out
        // list instead of losing them.
        POISON_EVEN_HASHES.with(|p| p.set(true));
        let m = MemTable::new(0);
        let key = |i: u64| format!("key{i:05}").into_bytes();
        let n = 3 * MIN_INDEX_SLOTS as u64; // Several growths from the smallest index.
        for i in 0..n {
            m.add(i + 1, ValueKind::Put, &key(i), &i.to_be_bytes());
        }
        POISON_EVEN_HASHES.with(|p| p.set(false));
        assert!(
            m.index_growth_stats().0 >= 2,
            "{:?}",
            m.index_growth_stats()
        );
        let guard = epoch::pin();
        let poisoned = (0..n).filter(|&i| key_hash(&key(i)) % 2 == 0).count();
        assert!(poisoned > (n / 3) as usize);
        assert_eq!(m.index_left_out.lock().len(), poisoned);
        for i in 0..n {
            let k = key(i);
            match m.probe(&k, key_hash(&k), &guard) {
                Probe::Found(c) => {
                    assert_ne!(key_hash(&k) % 2, 0, "a poisoned node was dereferenced");
                    assert_eq!(c.user_key(), &k[..]);
                }
                Probe::Missing { sure, .. } => assert!(!sure, "key {i} ruled out"),
            }
            let mut seen = Vec::new();
            m.for_each_version(&k, u64::MAX, |_, _, v| {
                seen.push(v.to_vec());
                true
            });
            assert_eq!(seen, vec![i.to_be_bytes().to_vec()], "key {i}");
        }
    }

    #[test]
    fn dropping_a_memtable_frees_its_index() {
        let before = live_index_tables::made_here().len();
        let ours = {
            let m = MemTable::with_capacity(0, 1 << 20, 1 << 12);
            for i in 0..100u64 {
                m.add(i + 1, ValueKind::Put, &i.to_be_bytes(), b"v");
            }
            let ours = live_index_tables::made_here().split_off(before);
            assert_eq!(ours.len(), 1, "one generation, no growth: {ours:?}");
            assert!(live_index_tables::is_live(ours[0]));
            ours
        };
        assert!(
            !live_index_tables::is_live(ours[0]),
            "the current index generation leaked"
        );
    }
}
