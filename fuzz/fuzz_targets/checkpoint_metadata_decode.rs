//! Checkpoint metadata decoder on arbitrary bytes: a typed error or a metadata that re-encodes, never a
//! panic. Checksums are skipped under `--cfg fuzzing`, so the fields behind them are reached.
#![no_main]

use keyed_state::checkpoint::CheckpointMetadata;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = CheckpointMetadata::decode(data) {
        let _ = m.encode();
    }
});
