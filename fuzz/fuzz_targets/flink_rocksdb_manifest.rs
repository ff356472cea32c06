//! The RocksDB `MANIFEST` and `CURRENT` readers of Flink native savepoints and checkpoints: arbitrary bytes
//! replayed as a manifest (log records, version edits, column families, live files) and read as `CURRENT`.
//! Errors, never panics; a manifest that replays is written back (one edit per column family with its live
//! files) and must replay to the same column families and files. Seeds: the fixtures' MANIFEST files
//! (`tests/reliability/fuzz_corpus.rs`).
#![no_main]

use keyed_state_flink::sst::manifest::{read_current, read_manifest, EditSpec, ManifestWriter};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = read_current(data, "CURRENT");
    let Ok(m) = read_manifest(data, "MANIFEST") else {
        return;
    };
    // Column family 0 is always there as "default" (a manifest dropping it is refused).
    assert!(m.column_families.iter().any(|c| c.id == 0 && c.name == "default"));
    let mut w = ManifestWriter::new();
    for cf in &m.column_families {
        w.edit(&EditSpec {
            column_family: cf.id,
            add_column_family: (cf.id != 0).then(|| cf.name.clone()),
            added: cf.files.clone(),
            ..EditSpec::default()
        });
    }
    let again = read_manifest(&w.finish(), "again").expect("a replayed manifest written back replays");
    assert_eq!(again.column_families, m.column_families);
});
