//! Flink's Snappy framing (xerial `SnappyFramedOutputStream`): arbitrary bytes decode or give a
//! `FlinkError`; what the writer writes decodes back to the same bytes.
#![no_main]

use keyed_state_flink::snappy::{decode_all, FramedWriter};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = decode_all(data, "f");
    let mut out = Vec::new();
    let mut w = FramedWriter::new();
    w.begin(&mut out);
    w.write(data, &mut out);
    w.flush(&mut out);
    assert_eq!(decode_all(&out, "f").ok().as_deref(), Some(data));
});
