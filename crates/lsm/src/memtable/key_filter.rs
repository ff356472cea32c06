//! The writer's filter of the keys that have a node in the table: it lets a certainly new key skip the
//! point index's probe.

use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};

use crate::words::Words;

/// The writer's filter of the user keys that have a node in this table (a blocked Bloom filter, 3 bits of
/// one 64-bit word per key, about 8 bits per key at a full table): "absent" lets a new key skip the point
/// index's probe — one cache miss — before its skiplist search. Only a hint: a wrong "absent" would only make
/// the insert search the skiplist, which finds an existing node anyway. Writer only (Relaxed loads and
/// stores, no read-modify-write).
pub(super) struct KeyFilter {
    /// The filter's words (a power of two of them).
    words: Words<AtomicU64>,
}

impl KeyFilter {
    /// A filter of `bytes` bytes (rounded up to a power of two, at least one word).
    pub(super) fn new(bytes: usize) -> Self {
        let n = (bytes / 8).max(1).next_power_of_two();
        KeyFilter {
            words: Words::zeroed(n),
        }
    }

    /// The word and the mask of the bits that key hash `h` sets: hash bits 20 and up pick the word (below the
    /// high bits the index's home slot uses, for any table under 2^44 filter words and slots together), its
    /// low 18 bits the three bits.
    #[inline(always)]
    fn bits(&self, h: u64) -> (Option<&AtomicU64>, u64) {
        let w = ((h >> 20) as usize) & (self.words.len() - 1);
        let mask = (1u64 << (h & 63)) | (1u64 << ((h >> 6) & 63)) | (1u64 << ((h >> 12) & 63));
        (self.words.get(w), mask)
    }

    /// Whether a key of hash `h` may have a node (false: it certainly has none).
    #[inline(always)]
    pub(super) fn may_contain(&self, h: u64) -> bool {
        match self.bits(h) {
            (Some(w), mask) => w.load(AtomicOrdering::Relaxed) & mask == mask,
            (None, _) => true,
        }
    }

    /// Records a key of hash `h` (writer only).
    #[inline(always)]
    pub(super) fn insert(&self, h: u64) {
        if let (Some(w), mask) = self.bits(h) {
            w.store(
                w.load(AtomicOrdering::Relaxed) | mask,
                AtomicOrdering::Relaxed,
            );
        }
    }

    /// Bytes allocated.
    pub(super) fn bytes(&self) -> usize {
        self.words.len() * 8
    }
}

#[cfg(test)]
mod tests {
    use super::super::point_index::{key_hash, Probe};
    use super::super::{epoch, MemTable};
    use super::*;
    use crate::ikey::ValueKind;

    #[test]
    fn key_filter_keeps_every_inserted_key_and_rules_out_most_others() {
        // 8 bits per key; fewer keys under Miri (a 4 KiB filter).
        let keys: u64 = if cfg!(miri) { 4096 } else { 65_536 };
        let f = KeyFilter::new(keys as usize);
        let hashes: Vec<u64> = (0..keys).map(|i| key_hash(&i.to_be_bytes())).collect();
        for &h in &hashes {
            f.insert(h);
        }
        assert!(
            hashes.iter().all(|&h| f.may_contain(h)),
            "no false negatives"
        );
        // 8 bits per key, 3 bits in one word: a few percent of absent keys pass.
        let absent: u64 = if cfg!(miri) { 4096 } else { 100_000 };
        let passed = (1_000_000..1_000_000 + absent)
            .filter(|i| f.may_contain(key_hash(&i.to_be_bytes())))
            .count();
        assert!(
            (passed as u64) < absent / 10,
            "{passed} of {absent} absent keys passed"
        );
    }

    #[test]
    fn new_keys_skip_the_index_probe_and_are_still_published() {
        let m = MemTable::with_capacity(0, 1 << 20, 1 << 14);
        let n: u64 = if cfg!(miri) { 100 } else { 2000 };
        for i in 0..n {
            m.add(i + 1, ValueKind::Put, &i.to_be_bytes(), b"v");
        }
        let guard = epoch::pin();
        for i in 0..n {
            let k = i.to_be_bytes();
            assert!(
                matches!(m.probe(&k, key_hash(&k), &guard), Probe::Found(_)),
                "{i} indexed"
            );
        }
        // A second version of each goes through the index (the filter says "maybe").
        for i in 0..n {
            m.add(3000 + i, ValueKind::Put, &i.to_be_bytes(), b"w");
        }
        let mut seen = Vec::new();
        m.for_each_version(&7u64.to_be_bytes(), u64::MAX, |s, _, v| {
            seen.push((s, v.to_vec()));
            true
        });
        assert_eq!(seen, vec![(3007, b"w".to_vec()), (8, b"v".to_vec())]);
    }
}
