//! Fuzzes the SST block decoder: arbitrary bytes must decode or fail with an error, never panic, as version-1
//! blocks and as version-2 data blocks (hash index); and blocks built from fuzz-chosen entries must decode back
//! to exactly those entries, with hash-index point seeks agreeing with binary-search seeks.
#![no_main]

use keyed_state_lsm::internals::ikey::{self, ValueKind};
use keyed_state_lsm::internals::sst::block::{BlockBuilder, BlockIter};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // 1. Arbitrary bytes as a block.
    if let Ok(mut it) = BlockIter::new(data) {
        let mut steps = 0usize;
        if it.seek_to_first().is_ok() {
            while it.valid() && steps < 100_000 {
                let _ = (it.key().len(), it.value().len());
                if it.next().is_err() {
                    break;
                }
                steps += 1;
            }
        }
        let target = data.get(..data.len().min(16)).unwrap_or(&[]);
        let _ = it.seek(target);
        let _ = it.seek_bytewise(target);
    }
    if let Ok(mut it) = BlockIter::new_v2(data) {
        let mut steps = 0usize;
        if it.seek_to_first().is_ok() {
            while it.valid() && steps < 100_000 {
                if it.next().is_err() {
                    break;
                }
                steps += 1;
            }
        }
        let target = data.get(..data.len().min(16)).unwrap_or(&[]);
        let _ = it.seek_for_get(target);
        let _ = it.seek(target);
    }

    // 2. Round trip: entries cut from the input, sorted and deduplicated bytewise.
    let Some((&interval, rest)) = data.split_first() else {
        return;
    };
    let mut entries: Vec<(&[u8], &[u8])> = rest
        .chunks(7)
        .map(|c| c.split_at(c.len().min(1 + usize::from(c[0] % 6))))
        .collect();
    entries.sort_by(|a, b| a.0.cmp(b.0));
    entries.dedup_by(|a, b| a.0 == b.0);
    let mut b = BlockBuilder::new(usize::from(interval % 17) + 1);
    for (k, v) in &entries {
        b.add(k, v);
    }
    let block = b.finish().to_vec();
    let mut it = BlockIter::new(&block).expect("built block opens");
    it.seek_to_first().expect("built block decodes");
    for (k, v) in &entries {
        assert!(it.valid());
        assert_eq!((it.key(), it.value()), (*k, *v));
        it.next().expect("built block decodes");
    }
    assert!(!it.valid());
    for (k, _) in &entries {
        it.seek_bytewise(k).expect("seek");
        assert_eq!(it.key(), *k);
    }

    // 3. Version-2 data block: the same entries as internal keys (user key = entry key, seqnos descending
    // within a user key by construction: one version each, plus a second version of every third key).
    let mut ikeys: Vec<(Vec<u8>, &[u8])> = Vec::new();
    for (i, (k, v)) in entries.iter().enumerate() {
        for s in [9u64, 3].iter().take(if i % 3 == 0 { 2 } else { 1 }) {
            let mut ik = Vec::new();
            ikey::encode(&mut ik, k, *s, ValueKind::Put);
            ikeys.push((ik, *v));
        }
    }
    ikeys.sort_by(|a, b| ikey::compare(&a.0, &b.0));
    let mut b = BlockBuilder::with_hash_index(usize::from(interval % 17) + 1);
    for (k, v) in &ikeys {
        b.add(k, v);
    }
    let block = b.finish().to_vec();
    let mut it = BlockIter::new_v2(&block).expect("built v2 block opens");
    let mut bin = BlockIter::new_v2(&block).expect("built v2 block opens");
    it.seek_to_first().expect("built v2 block decodes");
    for (k, v) in &ikeys {
        assert_eq!((it.key(), it.value()), (&k[..], *v));
        it.next().expect("built v2 block decodes");
    }
    assert!(!it.valid());
    for (k, _) in &ikeys {
        for s in [10u64, 5, 1] {
            let mut target = Vec::new();
            ikey::encode(&mut target, ikey::user_key(k), s, ValueKind::Put);
            bin.seek(&target).expect("seek");
            let found = it.seek_for_get(&target).expect("seek_for_get");
            assert!(found, "hash index lost a present key");
            assert_eq!(it.valid(), bin.valid());
            if bin.valid() && ikey::user_key(bin.key()) == ikey::user_key(k) {
                assert_eq!(it.key(), bin.key());
            }
        }
    }
});
