//! Fuzzes the SST block decoder: arbitrary bytes must decode or fail with an error, never panic; and blocks
//! built from fuzz-chosen entries must decode back to exactly those entries.
#![no_main]

use keyed_state::lsm::sst::block::{BlockBuilder, BlockIter};
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
});
