//! Fuzzes the WAL batch decoder (`internals::decode_write_batch`, the payload of every WAL record): arbitrary
//! bytes give a typed error or a batch, never a panic, and a decoded batch re-encodes to exactly the input
//! bytes (the encoding is canonical, so nothing is skipped or invented).
#![no_main]

use keyed_state_lsm::internals::{decode_write_batch, encode_write_batch};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok((seqno, batch)) = decode_write_batch(data) {
        assert_eq!(encode_write_batch(&batch, seqno), data, "decoded batch does not re-encode to its bytes");
        assert!(batch.approximate_size() <= data.len() + 9 * batch.len());
    }
});
