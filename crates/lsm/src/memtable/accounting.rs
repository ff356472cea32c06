//! Memory accounting: the bytes each write charges to its table, as the arena allocates them, so that the
//! table's [`approximate_bytes`](super::MemTable::approximate_bytes) tracks what it takes from the allocator.

use super::entry::{INLINE_CAP, KEY_INLINE_CAP};
use super::versions::KeyVersion;

/// The bytes an entry with an internal key of `klen` bytes and a value of `vlen` bytes copies into the arena,
/// as [`MemEntry::new_in`](super::MemEntry::new_in) lays it out (0 when it is all inline). The arena's
/// chunks are 1/64 of the memtable (at most 1 MiB), so their unused tails add at most a few percent.
#[inline]
fn entry_arena(klen: usize, vlen: usize) -> usize {
    if klen + vlen <= INLINE_CAP {
        0
    } else if klen <= KEY_INLINE_CAP {
        vlen
    } else {
        klen + vlen
    }
}

/// The memory a new key's node takes, as allocated: the node (`node_bytes`, its chain and its next pointers)
/// and the entry's bytes that did not fit in it.
#[inline]
pub(super) fn charge_node(node_bytes: usize, klen: usize, vlen: usize) -> usize {
    node_bytes + entry_arena(klen, vlen)
}

/// The memory a pushed version takes in the arena.
#[inline]
pub(super) fn charge_version(klen: usize, vlen: usize) -> usize {
    std::mem::size_of::<KeyVersion>() + entry_arena(klen, vlen)
}

/// The arena chunk size of a memtable of `capacity_bytes`: 1/64 of it, from 4 KiB to 1 MiB (the unused tail
/// of the last chunk is at most a few percent of a table).
pub(super) fn arena_chunk_size(capacity_bytes: usize) -> usize {
    (capacity_bytes / 64).clamp(4 << 10, 1 << 20)
}

#[cfg(test)]
mod tests {
    use super::super::point_index::{MIN_INDEX_SLOTS, START_BYTES_PER_SLOT};
    use super::super::versions::Chain;
    use super::super::MemTable;
    use super::*;
    use crate::ikey::{self, ValueKind};
    use crate::skiplist::SkipList;

    #[test]
    fn a_node_and_a_pushed_version_are_an_entry_and_a_pointer() {
        // The accounting charges both as allocated: the entry plus one pointer each.
        assert_eq!(std::mem::size_of::<Chain>(), 48);
        assert_eq!(std::mem::size_of::<KeyVersion>(), 48);
    }

    #[test]
    fn accounting_grows_with_versions_and_index() {
        let m = MemTable::with_capacity(0, 64 << 20, 0);
        // The index and the key filter (1/64 of the table) are charged from the start.
        let index = MIN_INDEX_SLOTS * 8 + (1 << 20);
        assert_eq!(m.approximate_bytes(), index);
        assert_eq!(
            MemTable::new(0).approximate_bytes(),
            MIN_INDEX_SLOTS * 8 + MIN_INDEX_SLOTS * START_BYTES_PER_SLOT / 64
        );
        m.add(1, ValueKind::Put, b"key", b"v");
        // A node is its chain and 8 bytes per level (its height is random).
        let node = m.approximate_bytes() - index;
        assert!(is_node_size(node), "{node}");
        m.add(2, ValueKind::Put, b"key", b"v2");
        let version = charge_version(3 + ikey::TRAILER_LEN, 2);
        assert_eq!(m.approximate_bytes(), index + node + version);
        // A large value is charged with its arena bytes, on a pushed version as on a node.
        m.add(3, ValueKind::Put, b"key", &[0u8; 100]);
        assert_eq!(
            m.approximate_bytes(),
            index + node + version + charge_version(3 + ikey::TRAILER_LEN, 100)
        );
        assert!(charge_version(11, 100) > charge_version(11, 2));
        assert_eq!(charge_version(11, 2), 48);
        // The index is charged as it grows: 0.7 of the smallest index filled doubles it.
        let mut i = 0u64;
        while m.index_slots() == MIN_INDEX_SLOTS {
            let before = m.approximate_bytes();
            m.add(10 + i, ValueKind::Put, &i.to_be_bytes(), b"v");
            let mut added = m.approximate_bytes() - before;
            if m.index_slots() != MIN_INDEX_SLOTS {
                added -= MIN_INDEX_SLOTS * 8;
            }
            assert!(is_node_size(added), "{added}");
            i += 1;
        }
        assert!(i as usize <= MIN_INDEX_SLOTS * 7 / 10 + 16, "{i}");
        assert_eq!(m.index_slots(), 2 * MIN_INDEX_SLOTS);
    }

    /// Whether `bytes` is what a small key's node is charged: its chain and 1 to `MAX_HEIGHT` next pointers.
    fn is_node_size(bytes: usize) -> bool {
        (1..=crate::skiplist::MAX_HEIGHT)
            .any(|h| bytes == charge_node(SkipList::<Chain>::node_bytes(h), 11, 1))
    }

    /// Heap bytes per new key and per pushed version actually allocated (glibc `mallinfo2`), for the memory
    /// accounting: run with `cargo test --release --lib memtable_bytes_per_entry -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn memtable_bytes_per_entry() {
        /// Bytes in use from glibc: the heap's and the mmap'ed chunks' (arena chunks of 1 MiB are mmap'ed).
        unsafe fn heap_in_use() -> usize {
            // SAFETY: `mallinfo2` only reads allocator statistics.
            let m = unsafe { libc::mallinfo2() };
            m.uordblks + m.hblkhd
        }
        for (klen, vlen) in [(12usize, 8usize), (20, 9), (10, 100), (40, 100)] {
            let n = 500_000u64;
            let mut key = vec![0u8; klen];
            let value = vec![7u8; vlen];
            // The index is sized up front (no generation is rebuilt and freed while measuring) and allocated
            // before the first reading: it is reported on its own.
            let m = MemTable::with_capacity(0, 64 << 20, 1 << 20);
            // SAFETY: `mallinfo2` only reads allocator statistics.
            let before = unsafe { heap_in_use() };
            for i in 0..n {
                key[klen - 8..]
                    .copy_from_slice(&(i.wrapping_mul(0x9E37_79B9_7F4A_7C15)).to_be_bytes());
                m.add(i + 1, ValueKind::Put, &key, &value);
            }
            // SAFETY: as above.
            let mid = unsafe { heap_in_use() };
            let index = m.index_slots() * 8 + m.new_keys.bytes();
            let charged_nodes = m.approximate_bytes() - index;
            for i in 0..n {
                key[klen - 8..]
                    .copy_from_slice(&(i.wrapping_mul(0x9E37_79B9_7F4A_7C15)).to_be_bytes());
                m.add(n + i + 1, ValueKind::Put, &key, &value);
            }
            // SAFETY: as above.
            let after = unsafe { heap_in_use() };
            let per = |bytes: usize| bytes as f64 / n as f64;
            let (node, node_charged) = (per(mid - before), per(charged_nodes));
            let (version, version_charged) = (
                per(after - mid),
                per(m.approximate_bytes() - index - charged_nodes),
            );
            println!(
                "key {klen} value {vlen}: new key {node:.1} B allocated, {node_charged:.1} charged \
                 (+ index {:.1} B); version {version:.1} B allocated, {version_charged:.1} charged",
                per(index)
            );
            assert!((node_charged / node - 1.0).abs() < 0.05);
            assert!((version_charged / version - 1.0).abs() < 0.05);
        }
    }
}
