//! Evidence for a design decision, not product code: how fast does a memtable insert a *new* key into
//! crossbeam-skiplist (the general-purpose concurrent skiplist crate) against an insert-only skiplist
//! whose nodes are bump-allocated in an arena, with RocksDB's branching factor 4 or crossbeam's 2? (The arena
//! node keeps its tower after the payload, as crossbeam's node does; RocksDB puts it before the key, which a
//! reviewer tried in this benchmark: no faster, 0.9–1.0x.)
//!
//! Both hold the same 48-byte node payload as the memtable's `Chain` (a head pointer and an inline entry
//! whose first bytes are the user key), keyed by 12-byte keys shaped like the state backends' value keys
//! (`state id | key group | i64 key | void namespace`, random order, as Flink's `valueAdd`/`listAdd`), and
//! compare keys the same way (first 8 bytes as a big-endian word, then the rest). One writer, no readers;
//! the arena list still publishes nodes with release stores, as a concurrent reader would need.
//!
//! `cargo bench --bench skiplist_insert` prints ns per insert and bytes per node at several sizes.

use std::cmp::Ordering;
use std::hint::black_box;
use std::sync::atomic::{AtomicPtr, Ordering as AtomicOrdering};
use std::time::Instant;

use crossbeam_skiplist::base::SkipList;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The memtable node payload: 8 bytes of chain head, then the entry with the key inline.
#[derive(Clone, Copy)]
#[repr(C)]
struct Payload {
    head: usize,
    tag: [u8; 3],
    key: [u8; 12],
    rest: [u8; 25],
}

impl Payload {
    fn new(key: [u8; 12]) -> Self {
        Payload {
            head: 0,
            tag: [1, 20, 8],
            key,
            rest: [0; 25],
        }
    }

    #[inline]
    fn cmp_key(&self, other: &[u8; 12]) -> Ordering {
        let a = u64::from_be_bytes(self.key[..8].try_into().unwrap_or([0; 8]));
        let b = u64::from_be_bytes(other[..8].try_into().unwrap_or([0; 8]));
        a.cmp(&b).then_with(|| self.key[8..].cmp(&other[8..]))
    }
}

impl PartialEq for Payload {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}
impl Eq for Payload {}
impl PartialOrd for Payload {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Payload {
    fn cmp(&self, other: &Self) -> Ordering {
        self.cmp_key(&other.key)
    }
}

const MAX_HEIGHT: usize = 24;

/// An arena node: the payload, its height, then `height` next pointers (allocated to fit).
#[repr(C)]
struct Node {
    payload: Payload,
    height: usize,
    next: [AtomicPtr<Node>; MAX_HEIGHT],
}

/// An insert-only skiplist in a bump arena (single writer), branching factor `1 << branch_bits`.
struct ArenaList {
    branch_mask: u64,
    /// Chunks of `CHUNK_WORDS` words, kept as raw pointers (from `Box::into_raw`) so that taking a new node
    /// never re-borrows a chunk holding linked nodes; freed in `Drop`.
    chunks: Vec<*mut u64>,
    used: usize,
    head: Box<Node>,
    height: usize,
    rng: u64,
    bytes: usize,
}

const CHUNK_WORDS: usize = 1 << 17; // 1 MiB

impl ArenaList {
    fn new(branch_bits: u32) -> Self {
        ArenaList {
            branch_mask: (1u64 << branch_bits) - 1,
            chunks: Vec::new(),
            used: CHUNK_WORDS,
            head: Box::new(Node {
                payload: Payload::new([0; 12]),
                height: MAX_HEIGHT,
                next: std::array::from_fn(|_| AtomicPtr::new(std::ptr::null_mut())),
            }),
            height: 1,
            rng: 0x9E37_79B9_7F4A_7C15,
            bytes: 0,
        }
    }

    fn random_height(&mut self) -> usize {
        let mut h = 1;
        loop {
            self.rng ^= self.rng << 13;
            self.rng ^= self.rng >> 7;
            self.rng ^= self.rng << 17;
            if h >= MAX_HEIGHT || self.rng & self.branch_mask != 0 {
                return h;
            }
            h += 1;
        }
    }

    /// A node of `height` levels: only its first `height` next pointers are allocated.
    fn alloc(&mut self, payload: Payload, height: usize) -> *mut Node {
        let bytes = std::mem::size_of::<Payload>() + 8 + 8 * height;
        let words = bytes.div_ceil(8);
        if self.used + words > CHUNK_WORDS {
            let chunk = Box::into_raw(vec![0u64; CHUNK_WORDS].into_boxed_slice());
            self.chunks.push(chunk as *mut u64);
            self.used = 0;
        }
        let Some(&base) = self.chunks.last() else {
            return std::ptr::null_mut();
        };
        // SAFETY: `used + words <= CHUNK_WORDS`, so the node lies inside the chunk, which is 8-byte aligned
        // (as `Node` needs), never moves and is only freed in `Drop`; only the first `height` next pointers
        // are ever touched.
        let node = unsafe { base.add(self.used) } as *mut Node;
        self.used += words;
        self.bytes += words * 8;
        // SAFETY: `node` points to `words * 8` writable bytes of the chunk, enough for the payload, the height
        // and `height` pointers; the fields are written before the node is published.
        unsafe {
            std::ptr::addr_of_mut!((*node).payload).write(payload);
            std::ptr::addr_of_mut!((*node).height).write(height);
            for l in 0..height {
                std::ptr::addr_of_mut!((*node).next[l]).write(AtomicPtr::new(std::ptr::null_mut()));
            }
        }
        node
    }

    fn insert(&mut self, key: [u8; 12]) {
        let mut prev: [*const Node; MAX_HEIGHT] = [&*self.head; MAX_HEIGHT];
        let mut x: *const Node = &*self.head;
        for level in (0..self.height).rev() {
            loop {
                // SAFETY: `x` is the head or a published node of this list (arena memory lives as long as the
                // list), and `level` is below its height (we only descend through nodes reached at `level`).
                let next = unsafe { (*x).next[level].load(AtomicOrdering::Acquire) };
                // SAFETY: a non-null next pointer is a published node.
                if !next.is_null() && unsafe { (*next).payload.cmp_key(&key) } == Ordering::Less {
                    x = next;
                } else {
                    break;
                }
            }
            prev[level] = x;
        }
        let height = self.random_height();
        if height > self.height {
            self.height = height;
        }
        let node = self.alloc(Payload::new(key), height);
        if node.is_null() {
            return;
        }
        for (level, p) in prev.iter().enumerate().take(height) {
            // SAFETY: `p` is the head or a published node whose height exceeds `level` (it was reached at
            // `level`, or is the head); `node` has `height > level` pointers. The node's own pointer is set
            // before the release store that publishes it at this level.
            unsafe {
                let succ = (**p).next[level].load(AtomicOrdering::Relaxed);
                (*node).next[level].store(succ, AtomicOrdering::Relaxed);
                (**p).next[level].store(node, AtomicOrdering::Release);
            }
        }
    }
}

impl Drop for ArenaList {
    fn drop(&mut self) {
        for &c in &self.chunks {
            // SAFETY: `c` came from `Box::into_raw` of a boxed slice of `CHUNK_WORDS` words and is freed once.
            drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(c, CHUNK_WORDS)) });
        }
    }
}

/// Random 12-byte value-state keys: state id 0, a key group byte, a random i64, the void namespace byte.
fn keys(n: usize, seed: u64) -> Vec<[u8; 12]> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let k = s ^ (s >> 29);
            let mut key = [0u8; 12];
            key[2] = (k >> 56) as u8 & 1;
            key[3..11].copy_from_slice(&k.to_be_bytes());
            key
        })
        .collect()
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    println!("# New-key inserts: crossbeam-skiplist vs an arena skiplist (evidence for a design decision)\n");
    println!("| keys in the list | crossbeam ns/insert | arena, branching 4 | arena, branching 2 | crossbeam / arena 4 | crossbeam / arena 2 | arena bytes/node (4 / 2) |");
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    for &n in &[100_000usize, 300_000, 800_000, 1_500_000] {
        let ks = keys(n, n as u64);
        let mut best = (f64::MAX, f64::MAX, f64::MAX, 0usize, 0usize);
        for _round in 0..3 {
            let list = SkipList::new(crossbeam_epoch::default_collector().clone());
            let t = Instant::now();
            {
                let guard = crossbeam_epoch::pin();
                for k in &ks {
                    let e = list.get_or_insert(Payload::new(*k), (), &guard);
                    e.release(&guard);
                }
            }
            let cb = t.elapsed().as_secs_f64() * 1e9 / n as f64;
            black_box(list.len());
            drop(list);

            let mut ar = [0.0f64; 2];
            let mut bytes = [0usize; 2];
            for (i, bits) in [2u32, 1].into_iter().enumerate() {
                let mut arena = ArenaList::new(bits);
                let t = Instant::now();
                for k in &ks {
                    arena.insert(*k);
                }
                ar[i] = t.elapsed().as_secs_f64() * 1e9 / n as f64;
                bytes[i] = arena.bytes / n;
                black_box(arena.height);
            }
            best = (
                best.0.min(cb),
                best.1.min(ar[0]),
                best.2.min(ar[1]),
                bytes[0],
                bytes[1],
            );
        }
        println!(
            "| {n} | {:.0} | {:.0} | {:.0} | {:.2} | {:.2} | {} / {} |",
            best.0,
            best.1,
            best.2,
            best.0 / best.1,
            best.0 / best.2,
            best.3,
            best.4
        );
    }
    println!(
        "\ncrossbeam node: 48-byte payload + 8-byte refcount/height + 8 bytes per level (p = 1/2), one allocation \
         each; arena node: payload + 8-byte height + 8 bytes per level (p = 1/4 or 1/2), bump-allocated in insertion \
         order. Best of 3 rounds."
    );
}
