//! Flink `_metadata` decoding: arbitrary bytes give a `FlinkError` or a decoded metadata, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = keyed_state_flink::parse_metadata(data, "_metadata") {
        for op in &m.operators {
            let _ = op.label();
            for st in &op.subtasks {
                if let Some(h) = &st.managed_keyed {
                    let _ = (h.type_name(), h.range());
                }
            }
        }
    }
});
