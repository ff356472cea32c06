//! Fuzzes the manifest decoder: arbitrary bytes must yield records or a typed error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = keyed_state::lsm::manifest::validate_manifest(data, "fuzz");
    // Also feed the bytes as a single well-framed record, so the edit decoder sees arbitrary payloads.
    let mut framed = Vec::with_capacity(data.len() + 12);
    framed.extend_from_slice(&(data.len() as u32).to_le_bytes());
    framed.extend_from_slice(&xxh3(data).to_le_bytes());
    framed.extend_from_slice(data);
    let _ = keyed_state::lsm::manifest::validate_manifest(&framed, "fuzz");
});

fn xxh3(data: &[u8]) -> u64 {
    keyed_state::lsm::manifest::checksum(data)
}
