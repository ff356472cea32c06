//! Fuzzes the range-tombstone decoder (the `ks.range_dels` SST property): arbitrary bytes give a typed error
//! or tombstones, never a panic; decoded tombstones re-encode to exactly the input bytes; and the fragments
//! an iterator builds from them agree with a linear scan for every bound and a few snapshots.
#![no_main]

use keyed_state_lsm::internals::rangedel::{decode, encode, Fragments, max_covering};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(tombs) = decode(data) else { return };
    assert_eq!(encode(&tombs), data, "decoded tombstones do not re-encode to their bytes");
    if tombs.len() > 64 {
        return;
    }
    let mut probes: Vec<Vec<u8>> = tombs
        .iter()
        .flat_map(|t| [t.start.clone(), t.end.clone()])
        .collect();
    for p in probes.clone() {
        let mut after = p.clone();
        after.push(0);
        probes.push(after);
    }
    probes.push(Vec::new());
    let mut snaps: Vec<u64> = tombs.iter().map(|t| t.seqno).collect();
    snaps.extend(tombs.iter().map(|t| t.seqno.saturating_sub(1)));
    snaps.push(u64::MAX);
    snaps.sort_unstable();
    snaps.dedup();
    for &snap in snaps.iter().take(8) {
        let frags = Fragments::build(&tombs, snap);
        for p in &probes {
            assert_eq!(frags.covering(p), max_covering(&tombs, p, snap), "fragments disagree");
        }
    }
});
