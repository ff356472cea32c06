//! Loom model checks of the memtable's lock-free structures: its skiplist, its key version chains and its
//! point index's slots, with the single writer and a concurrent reader. Built only with `--cfg loom`, which
//! swaps the atomics of those structures for loom's (`crate::lsm::sync`); loom then runs each model under
//! every interleaving and every weak-memory outcome the C++11 model allows for them, exhaustively (the models
//! are small enough to need no preemption bound; `LOOM_MAX_PREEMPTIONS` sets one). `--no-default-features`
//! leaves out the `s3` feature, whose hyper-util does not build against tokio's `cfg(loom)` mode:
//!
//! ```sh
//! RUSTFLAGS="--cfg loom" cargo test --release --no-default-features --lib loom_
//! ```
//!
//! The point index's generation swap (growth) is not modelled: the current generation is published through
//! crossbeam-epoch's `Atomic`, whose std atomics loom cannot see, so loom reports every read of a new
//! generation as unordered after its creation. Growth under readers is tested with real threads
//! (`readers_find_every_published_key_while_the_index_grows_under_them`) and by `tests/lsm_stress.rs`.
//!
//! The reader learns what the writer finished through a loom atomic (`done`, Release after each insert,
//! Acquire before reading): whatever was inserted before the value it reads must be found, with its value;
//! nothing else may be found except other real inserts; and every scan is strictly ordered.

use std::cmp::Ordering;
use std::sync::atomic::Ordering::{Acquire, Release};
use std::sync::Arc;

use loom::sync::atomic::AtomicUsize;
use loom::thread;

use super::arena::Arena;
use super::ikey::{self, ValueKind};
use super::memtable::{epoch, MemCursor, MemTable};
use super::skiplist::SkipList;

/// Runs `f` under loom (every execution, unless `LOOM_MAX_PREEMPTIONS` bounds them); prints the campaign
/// line with the number of executions explored.
fn model(name: &str, f: impl Fn() + Sync + Send + 'static) {
    let b = loom::model::Builder::new();
    let runs = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counter = Arc::clone(&runs);
    b.check(move || {
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        f()
    });
    println!(
        "campaign loom:{name} executions={} failures=0",
        runs.load(std::sync::atomic::Ordering::Relaxed)
    );
}

fn insert(list: &SkipList<u64>, k: u64) {
    list.find_or_insert(|p| p.cmp(&k), || k);
}

/// The list's keys in order, checking that the order is strict.
fn scan(list: &SkipList<u64>) -> Vec<u64> {
    let mut out: Vec<u64> = Vec::new();
    let mut n = list.first();
    while let Some(node) = n {
        let k = *node.get();
        assert!(
            out.last().is_none_or(|p| *p < k),
            "scan out of order: {out:?} then {k}"
        );
        out.push(k);
        n = node.next();
    }
    out
}

#[test]
fn loom_skiplist_reader_finds_every_published_node_and_scans_in_order() {
    // Keys 20 (before the reader starts), then 10 (before the head), 30 (after the tail) and 25 (between):
    // every position a new node can be linked at, at the heights the list's generator gives them.
    const ORDER: [u64; 3] = [10, 30, 25];
    model("skiplist", || {
        let list = Arc::new(SkipList::new(Arena::new(4096)));
        insert(&list, 20);
        let done = Arc::new(AtomicUsize::new(0));
        let reader = {
            let (list, done) = (Arc::clone(&list), Arc::clone(&done));
            thread::spawn(move || {
                let upto = done.load(Acquire);
                let seen = scan(&list);
                for k in std::iter::once(&20).chain(&ORDER[..upto]) {
                    assert!(seen.contains(k), "scan missed published {k}: {seen:?}");
                    assert_eq!(
                        list.find(|p| p.cmp(k)),
                        Some(k),
                        "find missed published {k}"
                    );
                }
                assert!(seen.iter().all(|k| *k == 20 || ORDER.contains(k)));
                assert_eq!(list.find(|p| p.cmp(&15)), None);
            })
        };
        for (i, k) in ORDER.iter().enumerate() {
            insert(&list, *k);
            done.store(i + 1, Release);
        }
        reader.join().unwrap();
        assert_eq!(scan(&list), vec![10, 20, 25, 30]);
    });
}

/// The writes of the memtable model: (seqno, key, value), in order.
const WRITES: [(u64, &[u8], &[u8]); 3] = [(6, b"b", b"b6"), (7, b"a", b"a7"), (8, b"c", b"c8")];

/// The writes before the reader starts.
const BEFORE: [(u64, &[u8], &[u8]); 5] = [
    (1, b"a", b"a1"),
    (2, b"p2", b"v2"),
    (3, b"p3", b"v3"),
    (4, b"p4", b"v4"),
    (5, b"p5", b"v5"),
];

#[test]
fn loom_memtable_reader_sees_published_versions_through_the_point_index() {
    // New keys fill point-index slots while the reader probes them; key "a" gets a second version (its
    // chain's head moves) while the reader may be walking it. 16 slots: no growth with 7 keys (see above).
    model("memtable_point_index", || {
        let m = Arc::new(MemTable::with_capacity(0, 0, 16));
        assert_eq!(m.index_slots(), 16);
        for (s, k, v) in BEFORE {
            m.add(s, ValueKind::Put, k, v);
        }
        let done = Arc::new(AtomicUsize::new(0));
        let reader = {
            let (m, done) = (Arc::clone(&m), Arc::clone(&done));
            thread::spawn(move || {
                let upto = done.load(Acquire);
                let guard = epoch::pin();
                for key in [&b"a"[..], b"b", b"c", b"d", b"p2"] {
                    let got: Vec<(u64, Vec<u8>)> = m
                        .versions(key, u64::MAX, &guard)
                        .map(|(s, _, v)| (s, v.to_vec()))
                        .collect();
                    // Newest first, each a real write of this key with its value.
                    assert!(got.windows(2).all(|w| w[0].0 > w[1].0), "{got:?}");
                    let all: Vec<_> = BEFORE.iter().chain(&WRITES).copied().collect();
                    for (s, v) in &got {
                        assert!(all.contains(&(*s, key, &v[..])), "invented {s} {v:?}");
                    }
                    for (s, k, v) in all.iter().take(BEFORE.len() + upto) {
                        if *k == key {
                            assert!(got.contains(&(*s, v.to_vec())), "lost published {s}");
                        }
                    }
                }
            })
        };
        for (i, (s, k, v)) in WRITES.iter().enumerate() {
            m.add(*s, ValueKind::Put, k, v);
            done.store(i + 1, Release);
        }
        reader.join().unwrap();
        assert_eq!(m.index_slots(), 16, "the model must not grow the index");
    });
}

#[test]
fn loom_memtable_cursor_scans_in_order_beside_the_writer() {
    model("memtable_cursor", || {
        let m = Arc::new(MemTable::with_capacity(0, 1 << 16, 2));
        m.add(1, ValueKind::Put, b"b", b"b1");
        let done = Arc::new(AtomicUsize::new(0));
        let reader = {
            let (m, done) = (Arc::clone(&m), Arc::clone(&done));
            thread::spawn(move || {
                let upto = done.load(Acquire);
                let mut c = MemCursor::new(m);
                c.seek_to_first();
                let mut seen: Vec<Vec<u8>> = Vec::new();
                while let Some(e) = c.entry() {
                    if let Some(p) = seen.last() {
                        assert_eq!(ikey::compare(p, e.ikey()), Ordering::Less);
                    }
                    seen.push(e.ikey().to_vec());
                    c.next();
                }
                let published = [(1u64, &b"b"[..])]
                    .into_iter()
                    .chain(WRITES.iter().take(upto).map(|(s, k, _)| (*s, *k)));
                for (s, k) in published {
                    assert!(
                        seen.iter()
                            .any(|ik| ikey::parse(ik)
                                .is_some_and(|p| p.user_key == k && p.seqno == s)),
                        "cursor missed published {s}"
                    );
                }
            })
        };
        for (i, (s, k, v)) in WRITES.iter().enumerate() {
            m.add(*s, ValueKind::Put, k, v);
            done.store(i + 1, Release);
        }
        reader.join().unwrap();
    });
}
