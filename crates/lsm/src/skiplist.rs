//! The memtable's ordered index: an insert-only skiplist whose nodes live in the memtable's [`Arena`].
//!
//! One writer at a time inserts (the memtable's callers are serialised); any number of readers walk the
//! list concurrently without locks, reference counts or epoch guards. Nodes are never removed or moved, and
//! their memory is freed only with the arena, so a reader's reference is valid for as long as it borrows the
//! list (which owns the arena). A node is `payload | next pointer per level` in one arena allocation (no
//! allocator header, no reference count, no stored height: a search only ever reads level `l` of a node it
//! reached at level `l` or above), linked bottom-up with release stores after it is fully written, so a
//! reader's acquire load of a next pointer always sees a complete node.
//!
//! Why not crossbeam-skiplist: its nodes are one global allocation each, so every memtable faults in and
//! zeroes fresh pages for its nodes (12 % of the state benchmark's listAdd thread in a profile), and frees
//! them node by node when dropped; its search reads a node's tower before comparing its key; it keeps a
//! reference count and height per node.
//!
//! The search prefetches one level down: before comparing `next` at level `l`, it asks for the node at
//! level `l - 1` after the current one, where it goes if `next` turns out not `Less`. With one node in two
//! reaching the next level, about half the steps go down, so about half the cache misses of a search in a
//! list larger than the caches overlap with the one before: measured, inserts of keys new to a large
//! memtable are 2-16 % faster, random puts and merges at 1M keys 3-8 %, seeks unchanged within the noise.
//! (Prefetching a node's tower line while its key is compared measured no gain beyond the noise, so the
//! search does not.)
//! Measurements: `benches/skiplist_insert.rs` and `design/lsm-engine.md` ("The memtable's skiplist").

use std::cmp::Ordering;
use std::marker::PhantomData;
use std::mem::{align_of, size_of, ManuallyDrop};
use std::ptr::NonNull;
use std::sync::atomic::Ordering as AtomicOrdering;

use crate::sync::{AtomicPtr, AtomicU64, AtomicUsize};

use super::arena::Arena;
use crate::prefetch::prefetch_read;

/// Levels at most. With one node in two reaching each next level, 2^20 ≈ 1M keys fill the levels; a larger
/// list only searches a little longer at the top.
pub(crate) const MAX_HEIGHT: usize = 20;

/// A node as laid out in the arena: the payload, then `height` next pointers (only those are allocated; the
/// array type here only names where they start).
#[repr(C)]
struct Node<T> {
    payload: ManuallyDrop<T>,
    next: [AtomicPtr<Node<T>>; 0],
}

/// A node's next pointers (or the list head's): where level 0's pointer is.
type Tower<T> = *const AtomicPtr<Node<T>>;

/// The tower of `node`.
///
/// # Safety
/// `node` points to a node in the arena, derived from the chunk's pointer (so its provenance covers the
/// whole node, next pointers included).
#[inline(always)]
unsafe fn tower_of<T>(node: *const Node<T>) -> Tower<T> {
    // SAFETY: `node` points into a live allocation holding the node; taking a field's address reads nothing.
    unsafe { std::ptr::addr_of!((*node).next).cast() }
}

/// The next pointer at `level` of `tower`.
///
/// # Safety
/// `tower` is the head's (with [`MAX_HEIGHT`] levels) or that of a node allocated with more than `level`
/// levels.
#[inline(always)]
unsafe fn next_at<'a, T>(tower: Tower<T>, level: usize) -> &'a AtomicPtr<Node<T>> {
    // SAFETY: the caller guarantees that the tower has a pointer at `level`, inside its allocation.
    unsafe { &*tower.add(level) }
}

/// A node of a [`SkipList`], borrowed for `'a`: its payload and its successor.
pub(crate) struct NodeRef<'a, T> {
    node: NonNull<Node<T>>,
    _list: PhantomData<&'a T>,
}

impl<T> Clone for NodeRef<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for NodeRef<'_, T> {}

impl<'a, T> NodeRef<'a, T> {
    /// A reference to a published node.
    ///
    /// # Safety
    /// `node` is a node published in a list that outlives `'a`.
    #[inline(always)]
    unsafe fn new(node: NonNull<Node<T>>) -> Self {
        NodeRef {
            node,
            _list: PhantomData,
        }
    }

    /// The payload.
    #[inline(always)]
    pub fn get(self) -> &'a T {
        // SAFETY: the node is published (its payload written before the release store that published it,
        // which happens-before the acquire load that found it), never changed through a `&mut`, and lives as
        // long as its list, which outlives 'a.
        unsafe { &(*self.node.as_ptr()).payload }
    }

    /// The next node in order.
    #[inline(always)]
    pub fn next(self) -> Option<NodeRef<'a, T>> {
        // SAFETY: every node has at least one level; level 0 links every node.
        let p = unsafe { next_at(tower_of(self.node.as_ptr()), 0) }.load(AtomicOrdering::Acquire);
        // SAFETY: a non-null next pointer is a node published in the same list.
        NonNull::new(p).map(|n| unsafe { NodeRef::new(n) })
    }

    /// The same node with its lifetime extended to `'b`.
    ///
    /// # Safety
    /// The list (and so the arena holding the node) must outlive every use of the returned reference.
    #[inline(always)]
    pub unsafe fn extend<'b>(self) -> NodeRef<'b, T> {
        NodeRef {
            node: self.node,
            _list: PhantomData,
        }
    }
}

/// An insert-only skiplist of `T` (ordered by the comparisons its callers pass), its nodes in the [`Arena`]
/// it owns (which its owner may use for other bytes that live as long as the list).
///
/// Payloads are never dropped: `T` must not need dropping (checked at compile time).
pub(crate) struct SkipList<T> {
    /// Where the nodes live; freed only when the list is dropped.
    arena: Arena,
    /// The head's next pointers, one per level.
    head: [AtomicPtr<Node<T>>; MAX_HEIGHT],
    /// Levels in use (readers may see a stale value: any level is a complete sorted list, so starting a
    /// search lower is only slower).
    height: AtomicUsize,
    /// xorshift state of the writer's height draws.
    rng: AtomicU64,
}

// SAFETY: the list only hands out shared references to payloads (`&T`) and links nodes through atomics; a
// node's payload is written once, before it is published. Sending or sharing the list is as safe as sharing
// `&T` between threads, hence `T: Sync` (and `T: Send` since payloads end up read by other threads that own
// the list).
unsafe impl<T: Send + Sync> Send for SkipList<T> {}
// SAFETY: as above; inserts are serialised by the caller (`insert` documents it).
unsafe impl<T: Send + Sync> Sync for SkipList<T> {}

/// What [`SkipList::find_or_insert`] did.
pub(crate) enum Inserted<'a, T> {
    /// The key was there: its node's payload.
    Found(&'a T),
    /// A new node of `bytes` bytes (payload and next pointers, as allocated) was linked: its payload.
    New(&'a T, usize),
}

impl<T> SkipList<T> {
    /// An empty list whose nodes go to `arena`.
    pub fn new(arena: Arena) -> Self {
        const { assert!(!std::mem::needs_drop::<T>()) };
        SkipList {
            arena,
            head: std::array::from_fn(|_| AtomicPtr::new(std::ptr::null_mut())),
            height: AtomicUsize::new(1),
            rng: AtomicU64::new(0x9E37_79B9_7F4A_7C15),
        }
    }

    /// The arena holding the nodes (bytes allocated there live as long as the list).
    #[inline]
    pub fn arena(&self) -> &Arena {
        &self.arena
    }

    /// The bytes a node of `height` levels takes in the arena.
    #[inline]
    pub const fn node_bytes(height: usize) -> usize {
        size_of::<Node<T>>() + height * size_of::<AtomicPtr<Node<T>>>()
    }

    /// The head's tower.
    #[inline(always)]
    fn head(&self) -> Tower<T> {
        self.head.as_ptr()
    }

    /// Whether no node was inserted.
    pub fn is_empty(&self) -> bool {
        self.first().is_none()
    }

    /// The first node.
    #[inline]
    pub fn first(&self) -> Option<NodeRef<'_, T>> {
        let p = self.head[0].load(AtomicOrdering::Acquire);
        // SAFETY: a non-null head pointer is a published node of this list, which `&self` keeps alive.
        NonNull::new(p).map(|n| unsafe { NodeRef::new(n) })
    }

    /// Walks down from the top: for each level, the last node (or the head) whose payload is `Less` than the
    /// target (`cmp(payload)` orders the payload against it), stored in `preds` (levels below `height`).
    /// Returns the first node that compares `Equal` (at whatever level it is met; `preds` are then
    /// incomplete), with `true`; else the first node that is not `Less` at level 0 (null: past the end),
    /// with `false`.
    #[inline(always)]
    fn descend(
        &self,
        cmp: &impl Fn(&T) -> Ordering,
        mut preds: Option<&mut [Tower<T>; MAX_HEIGHT]>,
    ) -> (*mut Node<T>, bool) {
        let mut x = self.head();
        let mut level = self
            .height
            .load(AtomicOrdering::Relaxed)
            .clamp(1, MAX_HEIGHT)
            - 1;
        // A node already found not `Less` at a higher level: the same node at a lower level is not compared
        // again (RocksDB's `last_bigger`).
        let mut bigger: *mut Node<T> = std::ptr::null_mut();
        loop {
            // SAFETY: `x` is the head's tower (MAX_HEIGHT levels) or that of a node reached at `level` or
            // above, so it has a pointer at `level`.
            let next = unsafe { next_at(x, level) }.load(AtomicOrdering::Acquire);
            // The node this search moves to if `next` is not `Less` (unless it is `next` itself): its line is
            // requested now, so that its cache miss overlaps the comparison of `next` (see the module docs).
            if level > 0 {
                // SAFETY: `x` has a pointer at `level`, so also at `level - 1`.
                let down = unsafe { next_at(x, level - 1) }.load(AtomicOrdering::Relaxed);
                if down != next && !down.is_null() {
                    prefetch_read(down);
                }
            }
            if !next.is_null() && next != bigger {
                // SAFETY: a non-null next pointer is a published node of this list (payload written before
                // the release store that linked it; this load is acquire), alive as long as the list.
                match cmp(unsafe { &(*next).payload }) {
                    Ordering::Less => {
                        // SAFETY: `next` is a published node of this list, derived from the arena's pointer.
                        x = unsafe { tower_of(next) };
                        continue;
                    }
                    Ordering::Equal => return (next, true),
                    Ordering::Greater => bigger = next,
                }
            }
            if let Some(p) = preds.as_deref_mut() {
                if let Some(slot) = p.get_mut(level) {
                    *slot = x;
                }
            }
            if level == 0 {
                return (next, false);
            }
            level -= 1;
        }
    }

    /// The node whose payload compares `Equal` (`cmp` orders a payload against the key looked for).
    #[inline]
    pub fn find(&self, cmp: impl Fn(&T) -> Ordering) -> Option<&T> {
        match self.descend(&cmp, None) {
            // SAFETY: a node returned by `descend` is published in this list, which `&self` keeps alive.
            (n, true) => NonNull::new(n).map(|n| unsafe { NodeRef::new(n) }.get()),
            _ => None,
        }
    }

    /// The first node whose payload is not `Less` than the target (`cmp` orders a payload against it).
    #[inline]
    pub fn lower_bound(&self, cmp: impl Fn(&T) -> Ordering) -> Option<NodeRef<'_, T>> {
        let (n, _) = self.descend(&cmp, None);
        // SAFETY: as in `find`.
        NonNull::new(n).map(|n| unsafe { NodeRef::new(n) })
    }

    /// A random height: each further level with probability 1/2, at most one above the list's height.
    #[inline]
    fn random_height(&self, current: usize) -> usize {
        let mut x = self.rng.load(AtomicOrdering::Relaxed);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng.store(x, AtomicOrdering::Relaxed);
        (x.trailing_ones() as usize + 1)
            .min(current + 1)
            .min(MAX_HEIGHT)
    }

    /// The node equal to the target (`cmp` orders a payload against it), or a new node holding `make()`
    /// (which must compare `Equal`), allocated in the list's arena and linked in.
    ///
    /// Callers are serialised: one writer at a time, readers may run concurrently. (Two concurrent writers
    /// could lose one of their nodes: never unsound, since every field is atomic and a pointer at level `l`
    /// always leads to a node with more than `l` levels, but wrong; the memtable checks it in debug builds.)
    pub fn find_or_insert(
        &self,
        cmp: impl Fn(&T) -> Ordering,
        make: impl FnOnce() -> T,
    ) -> Inserted<'_, T> {
        let mut preds = [self.head(); MAX_HEIGHT];
        let (n, equal) = self.descend(&cmp, Some(&mut preds));
        if equal {
            // SAFETY: as in `find`.
            if let Some(n) = NonNull::new(n) {
                return Inserted::Found(unsafe { NodeRef::new(n) }.get());
            }
        }
        let current = self
            .height
            .load(AtomicOrdering::Relaxed)
            .clamp(1, MAX_HEIGHT);
        let height = self.random_height(current);
        let bytes = Self::node_bytes(height);
        let node = self
            .arena
            .alloc_bytes(bytes, align_of::<Node<T>>())
            .cast::<Node<T>>()
            .as_ptr();
        // SAFETY: `node` points to `bytes` fresh, aligned bytes of the arena (room for the payload and
        // `height` next pointers), derived from the chunk's pointer; nothing else refers to them until the
        // release stores below publish the node, after every field is written.
        unsafe {
            let payload = make();
            debug_assert_eq!(
                cmp(&payload),
                Ordering::Equal,
                "a new node must equal its key"
            );
            std::ptr::addr_of_mut!((*node).payload).write(ManuallyDrop::new(payload));
            for (level, pred) in preds.iter().enumerate().take(height) {
                let succ = next_at(*pred, level).load(AtomicOrdering::Relaxed);
                tower_of(node)
                    .cast_mut()
                    .add(level)
                    .write(AtomicPtr::new(succ));
            }
        }
        if height > current {
            self.height.store(height, AtomicOrdering::Relaxed);
        }
        for (level, pred) in preds.iter().enumerate().take(height) {
            // SAFETY: `pred` is the head's tower or that of a node reached at `level` (so it has a pointer
            // there), and `node` is complete: the release store publishes it at this level. The single writer
            // means no other insert changed `pred`'s pointer since `descend` read it.
            unsafe { next_at(*pred, level) }.store(node, AtomicOrdering::Release);
        }
        // SAFETY: `node` is now published in this list.
        let payload = unsafe { NodeRef::new(NonNull::new_unchecked(node)) }.get();
        Inserted::New(payload, bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;
    use std::sync::Arc;

    fn insert(list: &SkipList<u64>, k: u64) -> bool {
        matches!(list.find_or_insert(|p| p.cmp(&k), || k), Inserted::New(..))
    }

    fn contents(list: &SkipList<u64>) -> Vec<u64> {
        let mut out = Vec::new();
        let mut n = list.first();
        while let Some(x) = n {
            out.push(*x.get());
            n = x.next();
        }
        out
    }

    #[test]
    fn node_layout_is_payload_then_pointers() {
        // A node's tower starts right after its payload, where `node_bytes` counts it.
        assert_eq!(
            std::mem::offset_of!(Node<u64>, next),
            SkipList::<u64>::node_bytes(0)
        );
        assert_eq!(SkipList::<[u8; 48]>::node_bytes(2), 64);
    }

    #[test]
    fn finds_inserts_and_orders() {
        let list = SkipList::new(Arena::new(4096));
        assert!(list.is_empty());
        for k in [5u64, 1, 9, 3, 7, 5, 1] {
            insert(&list, k);
        }
        assert_eq!(contents(&list), vec![1, 3, 5, 7, 9]);
        assert_eq!(list.find(|p| p.cmp(&7)), Some(&7));
        assert_eq!(list.find(|p| p.cmp(&4)), None);
        assert_eq!(list.lower_bound(|p| p.cmp(&4)).map(|n| *n.get()), Some(5));
        assert_eq!(list.lower_bound(|p| p.cmp(&10)).map(|n| *n.get()), None);
        assert_eq!(list.lower_bound(|p| p.cmp(&0)).map(|n| *n.get()), Some(1));
        assert!(!insert(&list, 3), "an equal key is found, not inserted");
    }

    #[test]
    fn grows_tall_and_stays_sorted() {
        let list = SkipList::new(Arena::new(1 << 16));
        let mut x = 1u64;
        let mut model = BTreeSet::new();
        for _ in 0..if cfg!(miri) { 2_000 } else { 50_000 } {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            let k = x >> 40;
            assert_eq!(insert(&list, k), model.insert(k));
        }
        assert!(list.height.load(AtomicOrdering::Relaxed) >= if cfg!(miri) { 6 } else { 10 });
        assert_eq!(contents(&list), model.into_iter().collect::<Vec<_>>());
    }

    #[test]
    fn readers_see_complete_sorted_lists_while_one_writer_inserts() {
        let list = Arc::new(SkipList::<[u64; 2]>::new(Arena::new(1 << 14)));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (list, stop) = (Arc::clone(&list), Arc::clone(&stop));
                std::thread::spawn(move || {
                    let mut scans = 0;
                    while !stop.load(AtomicOrdering::Relaxed) || scans < 3 {
                        let mut prev = None;
                        let mut n = list.first();
                        while let Some(x) = n {
                            let [k, check] = *x.get();
                            assert_eq!(check, !k, "a reader saw a node before it was written");
                            assert!(prev < Some(k), "out of order");
                            assert_eq!(list.find(|p| p[0].cmp(&k)).map(|p| p[0]), Some(k));
                            prev = Some(k);
                            n = x.next();
                        }
                        scans += 1;
                    }
                })
            })
            .collect();
        let mut x = 7u64;
        for _ in 0..if cfg!(miri) { 300 } else { 20_000 } {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let k = x % 1_000_000;
            list.find_or_insert(|p| p[0].cmp(&k), || [k, !k]);
        }
        stop.store(true, AtomicOrdering::Relaxed);
        for r in readers {
            r.join().expect("reader");
        }
    }

    proptest! {
        #[test]
        fn behaves_like_a_btreeset(ops in proptest::collection::vec((0u8..3, 0u64..200), 1..400)) {
            let list = SkipList::new(Arena::new(512));
            let mut model = BTreeSet::new();
            for (op, k) in ops {
                match op {
                    0 => prop_assert_eq!(insert(&list, k), model.insert(k)),
                    1 => prop_assert_eq!(list.find(|p| p.cmp(&k)).copied(), model.get(&k).copied()),
                    _ => prop_assert_eq!(
                        list.lower_bound(|p| p.cmp(&k)).map(|n| *n.get()),
                        model.range(k..).next().copied()
                    ),
                }
            }
            prop_assert_eq!(contents(&list), model.into_iter().collect::<Vec<_>>());
        }
    }
}
