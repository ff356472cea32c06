//! Fuzzes the manifest decoder: arbitrary bytes must yield records or a typed error, never a panic.
#![no_main]

use keyed_state::lsm::manifest::validate_manifest;
use keyed_state::lsm::record_log::frame;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = validate_manifest(data, "fuzz");
    // Also feed the bytes as a single well-framed record, so the edit decoder sees arbitrary payloads.
    let _ = validate_manifest(&frame(data), "fuzz");
});
