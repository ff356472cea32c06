//! The RocksDB SST reader of Flink native savepoints and incremental checkpoints: arbitrary bytes opened as
//! an SST file (footer, metaindex, properties, index), every data block and the range tombstones read, and
//! the records folded as the importer folds a column family. Errors, never panics. Seeds: the fixture
//! SSTs (`design/bench-results/2026-12-02-flink-native-import/` has the command).
#![no_main]

use keyed_state_flink::sst::{fold_versions, SstFile, Versions};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(t) = SstFile::open(data, "f") else { return };
    let mut v = Versions::default();
    if t.for_each_record(&mut |r| v.push(&r)).is_err() {
        return;
    }
    let Ok(tombstones) = t.range_tombstones() else { return };
    v.add_tombstones(tombstones);
    let mut n = 0u64;
    let _ = fold_versions(v, "f", true, &mut |k, _| {
        n += k.len() as u64;
        Ok(())
    });
});
