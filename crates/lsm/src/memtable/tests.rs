//! Tests of a whole memtable: point reads, cursors and the flush walk over the same entries, and readers
//! running concurrently with the writer.

use std::cmp::Ordering;
use std::sync::atomic::Ordering as AtomicOrdering;
use std::sync::Arc;

use super::*;

#[test]
fn lookups_and_cursor_mix_inline_and_heap_entries() {
    // Without an index (every lookup searches the skiplist) and with one.
    for m in [
        MemTable::new(0),
        MemTable::with_capacity(0, 1 << 20, 1 << 14),
    ] {
        lookups_and_cursor_mix_inline_and_heap_entries_in(Arc::new(m));
    }
}

fn lookups_and_cursor_mix_inline_and_heap_entries_in(m: Arc<MemTable>) {
    // Fewer keys under Miri, still inline and heap entries, keys and values.
    let keys: Vec<Vec<u8>> = (0..if cfg!(miri) { 48u32 } else { 200 })
        .map(|i| {
            let mut k = format!("k{i:04}").into_bytes();
            if i % 3 == 0 {
                k.resize(80, b'x'); // heap entry
            }
            k
        })
        .collect();
    for (i, k) in keys.iter().enumerate() {
        m.add(2 * i as u64 + 1, ValueKind::Put, k, b"old");
        let big = vec![b'v'; 100 * (i % 2)];
        m.add(2 * i as u64 + 2, ValueKind::Put, k, &big);
    }
    for (i, k) in keys.iter().enumerate() {
        let guard = epoch::pin();
        let vs: Vec<(u64, Vec<u8>)> = m
            .versions(k, u64::MAX, &guard)
            .map(|(s, _, v)| (s, v.to_vec()))
            .collect();
        assert_eq!(vs.len(), 2);
        assert_eq!(vs[0], (2 * i as u64 + 2, vec![b'v'; 100 * (i % 2)]));
        assert_eq!(vs[1], (2 * i as u64 + 1, b"old".to_vec()));
        // Bounded by the snapshot: only the older version.
        let old: Vec<u64> = m
            .versions(k, 2 * i as u64 + 1, &guard)
            .map(|v| v.0)
            .collect();
        assert_eq!(old, vec![2 * i as u64 + 1]);
    }
    let mut c = MemCursor::new(Arc::clone(&m));
    c.seek_to_first();
    let mut n = 0;
    let mut prev: Option<Vec<u8>> = None;
    while let Some(e) = c.entry() {
        if let Some(p) = &prev {
            assert_eq!(ikey::compare(p, e.ikey()), Ordering::Less);
        }
        prev = Some(e.ikey().to_vec());
        n += 1;
        c.next();
    }
    assert_eq!(n, 2 * keys.len());
    // Seek to a long key between its versions (7 and 8), then below both (to the next key).
    c.seek(&lookup_key(&keys[3], 7));
    let p = c
        .entry()
        .and_then(|e| ikey::parse(e.ikey()).map(|p| p.seqno));
    assert_eq!(p, Some(7));
    c.seek(&lookup_key(&keys[3], 6));
    let p = c
        .entry()
        .and_then(|e| ikey::parse(e.ikey()).map(|p| (p.user_key.to_vec(), p.seqno)));
    assert_eq!(p, Some((keys[4].clone(), 10)));
}

/// Every entry of `m` through a cursor, as `(user key, seqno)`, checking strict internal-key order.
pub(super) fn cursor_entries(m: &Arc<MemTable>) -> Vec<(Vec<u8>, u64)> {
    let mut c = MemCursor::new(Arc::clone(m));
    c.seek_to_first();
    let mut out = Vec::new();
    let mut prev: Option<Vec<u8>> = None;
    while let Some(e) = c.entry() {
        if let Some(p) = &prev {
            assert_eq!(
                ikey::compare(p, e.ikey()),
                Ordering::Less,
                "{p:?} {:?}",
                e.ikey()
            );
        }
        prev = Some(e.ikey().to_vec());
        let p = ikey::parse(e.ikey()).expect("internal key");
        out.push((p.user_key.to_vec(), p.seqno));
        c.next();
    }
    out
}

#[test]
fn versions_of_one_key_come_newest_first_in_cursor_order() {
    let m = Arc::new(MemTable::with_capacity(0, 1 << 20, 1 << 14));
    m.add(1, ValueKind::Put, b"b", b"b1");
    m.add(2, ValueKind::Put, b"a", b"a2");
    m.add(3, ValueKind::Merge, b"b", b"b3");
    m.add(4, ValueKind::Put, b"c", b"c4");
    m.add(5, ValueKind::Delete, b"b", b"");
    m.add(6, ValueKind::Put, b"b", b"b6");
    let want: Vec<(Vec<u8>, u64)> = [
        (&b"a"[..], 2),
        (b"b", 6),
        (b"b", 5),
        (b"b", 3),
        (b"b", 1),
        (b"c", 4),
    ]
    .iter()
    .map(|(k, s)| (k.to_vec(), *s))
    .collect();
    assert_eq!(cursor_entries(&m), want);
    // The flush walk sees the same order.
    let mut flushed = Vec::new();
    m.try_for_each(|k, v| {
        let p = ikey::parse(k).expect("internal key");
        flushed.push((p.user_key.to_vec(), p.seqno, v.to_vec()));
        Ok::<(), ()>(())
    })
    .unwrap();
    let keys: Vec<(Vec<u8>, u64)> = flushed.iter().map(|(k, s, _)| (k.clone(), *s)).collect();
    assert_eq!(keys, want);
    assert_eq!(flushed[1].2, b"b6");
    assert_eq!(flushed[4].2, b"b1");
    // A seek into the middle of a chain lands on the first version at or below the target's seqno.
    let mut c = MemCursor::new(Arc::clone(&m));
    c.seek(&lookup_key(b"b", 4));
    let at = c
        .entry()
        .and_then(|e| ikey::parse(e.ikey()).map(|p| p.seqno));
    assert_eq!(at, Some(3));
    c.next();
    c.next();
    let at = c
        .entry()
        .and_then(|e| ikey::parse(e.ikey()).map(|p| (p.user_key.to_vec(), p.seqno)));
    assert_eq!(at, Some((b"c".to_vec(), 4)));
}

#[test]
fn read_at_older_snapshot_skips_newer_chain_versions() {
    let m = Arc::new(MemTable::with_capacity(0, 1 << 20, 1 << 14));
    for s in [1u64, 3, 5] {
        m.add(s, ValueKind::Put, b"k", format!("v{s}").as_bytes());
        m.add(s + 1, ValueKind::Put, b"other", b"x");
    }
    let read = |snapshot: u64| {
        let mut seen = Vec::new();
        m.for_each_version(b"k", snapshot, |s, _, v| {
            seen.push((s, v.to_vec()));
            true
        });
        seen
    };
    assert_eq!(
        read(u64::MAX),
        vec![
            (5, b"v5".to_vec()),
            (3, b"v3".to_vec()),
            (1, b"v1".to_vec())
        ]
    );
    assert_eq!(read(4), vec![(3, b"v3".to_vec()), (1, b"v1".to_vec())]);
    assert_eq!(read(3), vec![(3, b"v3".to_vec()), (1, b"v1".to_vec())]);
    assert_eq!(read(2), vec![(1, b"v1".to_vec())]);
    assert!(read(0).is_empty());
    // A cursor seek at a snapshot older than every version moves on to the next key.
    let mut c = MemCursor::new(Arc::clone(&m));
    c.seek(&lookup_key(b"k", 0));
    let at = c
        .entry()
        .and_then(|e| ikey::parse(e.ikey()).map(|p| (p.user_key.to_vec(), p.seqno)));
    assert_eq!(at, Some((b"other".to_vec(), 6)));
}

#[test]
fn concurrent_reader_sees_a_sorted_consistent_view_while_the_writer_pushes() {
    let m = Arc::new(MemTable::with_capacity(0, 1 << 20, 1 << 14));
    // Fewer keys and rounds under Miri: version chains are still published while both readers run.
    let (n, rounds) = if cfg!(miri) { (40u32, 3u32) } else { (200, 30) };
    let keys: Vec<Vec<u8>> = (0..n)
        .map(|i| format!("k{:05}", i * 7 % n).into_bytes())
        .collect();
    // Every value is its own seqno, so a reader can check each version it sees.
    for (i, k) in keys.iter().enumerate() {
        let s = i as u64 + 1;
        m.add(s, ValueKind::Put, k, &s.to_be_bytes());
    }
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (m, done, keys) = (Arc::clone(&m), Arc::clone(&done), keys.clone());
            std::thread::spawn(move || {
                let mut passes = 0;
                while !done.load(AtomicOrdering::Acquire) || passes == 0 {
                    let mut c = MemCursor::new(Arc::clone(&m));
                    c.seek_to_first();
                    let mut prev: Option<Vec<u8>> = None;
                    while let Some(e) = c.entry() {
                        if let Some(p) = &prev {
                            assert_eq!(ikey::compare(p, e.ikey()), Ordering::Less);
                        }
                        let seqno = ikey::parse(e.ikey()).map(|p| p.seqno);
                        assert_eq!(
                            Some(e.value()),
                            seqno.map(u64::to_be_bytes).as_ref().map(|b| &b[..])
                        );
                        prev = Some(e.ikey().to_vec());
                        c.next();
                    }
                    for k in keys.iter().step_by(17) {
                        let guard = epoch::pin();
                        let seqnos: Vec<u64> =
                            m.versions(k, u64::MAX, &guard).map(|v| v.0).collect();
                        assert!(!seqnos.is_empty());
                        assert!(seqnos.windows(2).all(|w| w[0] > w[1]), "{seqnos:?}");
                    }
                    passes += 1;
                }
                passes
            })
        })
        .collect();
    let mut s = keys.len() as u64;
    for round in 0..rounds {
        for k in &keys {
            s += 1;
            m.add(s, ValueKind::Put, k, &s.to_be_bytes());
        }
        // Some new keys too (skiplist inserts and index inserts under the readers).
        s += 1;
        m.add(
            s,
            ValueKind::Put,
            format!("n{round:03}").as_bytes(),
            &s.to_be_bytes(),
        );
    }
    done.store(true, AtomicOrdering::Release);
    for r in readers {
        assert!(r.join().expect("reader") > 0);
    }
    assert_eq!(cursor_entries(&m).len(), s as usize);
}
