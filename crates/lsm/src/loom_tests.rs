//! Loom model checks of the memtable's lock-free structures: its skiplist, its key version chains, its point
//! index's slots and the index's growth, with the single writer and a concurrent reader. Built only with
//! `--cfg loom`, which swaps the atomics of those structures for loom's (`crate::sync`); loom then runs
//! each model under every interleaving and every weak-memory outcome the C++11 model allows for them,
//! exhaustively (the models are small enough to need no preemption bound; `LOOM_MAX_PREEMPTIONS` sets one).
//! `--no-default-features` leaves out the `s3` feature, whose hyper-util does not build against tokio's
//! `cfg(loom)` mode:
//!
//! ```sh
//! RUSTFLAGS="--cfg loom" cargo test --release --no-default-features --lib loom_
//! ```
//!
//! The point index's growth is modelled too: under `cfg(loom)` the current generation is published through a
//! loom `AtomicPtr` (`memtable::index_cell`, with the orderings of the normal build, whose crossbeam-epoch
//! `Atomic` loom cannot see), so loom checks the order between building a generation, re-placing its entries
//! and publishing it; replaced generations are kept until the table drops (crossbeam's reclamation is not what
//! these models check). Growth under many readers and keys is also tested with real threads
//! (`readers_find_every_published_key_while_the_index_grows_under_them`) and by `tests/lsm_stress.rs`. The
//! writer's fast path past the state lock has its own models (`loom_fast_path`).
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
pub(super) fn model(name: &str, f: impl Fn() + Sync + Send + 'static) {
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

/// What the reader of a growth model sees of `key`: its versions' seqnos and values, newest first.
fn lookup(m: &MemTable, key: &[u8]) -> Vec<(u64, Vec<u8>)> {
    let guard = epoch::pin();
    m.versions(key, u64::MAX, &guard)
        .map(|(s, _, v)| (s, v.to_vec()))
        .collect()
}

/// A model of the point index's growth: `before` keys are added before the reader starts, then the writer
/// adds `during` (announcing each through `done`, Release) while the reader looks every key up twice
/// (each lookup loads the current generation anew, so a reader may hold the old, the new or both in turn).
/// Key `i` has seqno `i + 1` and value `[b'v', i]`. Every key announced before a lookup is found with its one
/// version; no other version and no absent key is ever found.
fn growth_model(index_slots: usize, before: usize, during: usize, growths: u64) {
    let key = |i: usize| [b'k', i as u8];
    let value = |i: usize| vec![b'v', i as u8];
    let m = Arc::new(MemTable::with_index_slots(index_slots));
    for i in 0..before {
        m.add(i as u64 + 1, ValueKind::Put, &key(i), &value(i));
    }
    let done = Arc::new(AtomicUsize::new(before));
    let reader = {
        let (m, done) = (Arc::clone(&m), Arc::clone(&done));
        thread::spawn(move || {
            for _round in 0..2 {
                let upto = done.load(Acquire);
                for i in 0..before + during {
                    let got = lookup(&m, &key(i));
                    if i < upto {
                        assert_eq!(got, vec![(i as u64 + 1, value(i))], "announced key {i}");
                    } else {
                        assert!(
                            got.is_empty() || got == vec![(i as u64 + 1, value(i))],
                            "key {i} invented: {got:?}"
                        );
                    }
                }
                assert!(lookup(&m, b"absent").is_empty(), "an absent key found");
            }
        })
    };
    for i in before..before + during {
        m.add(i as u64 + 1, ValueKind::Put, &key(i), &value(i));
        done.store(i + 1, Release);
    }
    reader.join().unwrap();
    assert_eq!(m.index_growth_stats().0, growths, "the model's growths");
}

#[test]
fn loom_point_index_readers_find_announced_keys_across_two_growths() {
    // From 2 slots: the second key grows the index to 4 slots (re-placing 2 keys), the third to 8
    // (re-placing 3), both while the reader looks up.
    model("point_index_two_growths", || growth_model(2, 1, 2, 2));
}

#[test]
fn loom_point_index_readers_find_announced_keys_across_a_growth_from_the_smallest_index() {
    // The smallest index a real table starts with (8 slots): the sixth key grows it to 16 (re-placing 6
    // keys) while the reader looks up; the seventh goes into the new generation.
    model("point_index_growth_8", || growth_model(8, 5, 2, 1));
}
