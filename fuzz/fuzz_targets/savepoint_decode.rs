//! Fuzzes the savepoint decoder: open from bytes, read every key group, verify. Any input must give a
//! result or a typed error, never a panic, and a successful read must agree with verify.
#![no_main]

use keyed_state::savepoint::SavepointReader;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(reader) = SavepointReader::from_bytes(data.to_vec()) else {
        return;
    };
    let mut read_ok = true;
    let mut entries = 0u64;
    for kg in reader.header().key_group_range.iter() {
        let r = reader.read_key_group(kg, &mut |state, _key, _value| {
            assert!(state < reader.header().states.len());
            entries += 1;
            Ok(())
        });
        read_ok &= r.is_ok();
    }
    match reader.verify() {
        Ok(report) => {
            assert!(read_ok, "verify accepted what read_key_group rejected");
            assert_eq!(report.total_entries(), entries);
        }
        Err(_) => assert!(!read_ok, "read_key_group accepted what verify rejected"),
    }
});
