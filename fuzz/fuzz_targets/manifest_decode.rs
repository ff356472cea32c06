//! Fuzzes the manifest decoder: arbitrary bytes must yield records or a typed error, never a panic.
#![no_main]

use keyed_state_lsm::internals::validate_manifest;
use keyed_state_lsm::internals::record_log::{file_header, frame, LogKind};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = validate_manifest(data, std::path::Path::new("fuzz"));
    // Also feed the bytes as a single well-framed record, so the edit decoder sees arbitrary payloads.
    let mut file = file_header(LogKind::Manifest).to_vec();
    file.extend_from_slice(&frame(data));
    let _ = validate_manifest(&file, std::path::Path::new("fuzz"));
});
