//! The heap backend's checkpoint table decoder on arbitrary bytes: a typed error or entries in strictly
//! ascending key order, never a panic.
#![no_main]

use keyed_state::internals::heap_table_file as table_file;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut last: Option<Vec<u8>> = None;
    let _ = table_file::decode(std::path::Path::new("fuzz"), data, &mut |k, _| {
        assert!(last.as_deref().is_none_or(|l| l < k));
        last = Some(k.to_vec());
        Ok(())
    });
});
