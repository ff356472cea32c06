//! Flink's canonical keyed-state stream: the serialization proxy (with its raw-snapshot fallback) and the
//! key groups after it, plain or Snappy-framed, and the HashMap native key-group format. The first 2 bytes pick the compression flag and how many
//! key groups to read; the key groups start where the proxy ends.
#![no_main]

use keyed_state_flink::keyed_stream::read_key_group;
use keyed_state_flink::proxy::read_proxy;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&ctl, rest)) = data.split_first() else { return };
    let header_end = if ctl & 1 == 1 { None } else { Some(rest.len() / 2) };
    let Ok(proxy) = read_proxy(rest, "f", header_end) else { return };
    let metas: Result<Vec<_>, _> = proxy.states.iter().map(|s| s.to_meta("f")).collect();
    if let Ok(metas) = &metas {
        // The same bytes as the HashMap backend's native format.
        let _ = keyed_state_flink::heap_native::read_native_key_group(
            rest,
            proxy.end,
            0,
            128,
            &proxy.key_serializer.snapshot,
            metas,
            "f",
            &mut |_, _, _| Ok(()),
        );
    }
    let mut offset = proxy.end;
    for kg in 0..(ctl >> 4) as u16 {
        if offset >= rest.len() {
            break;
        }
        match read_key_group(rest, offset, kg, 128, proxy.compressed, proxy.states.len(), "f", &mut |_, _, _| Ok(())) {
            Ok(st) => offset = st.end,
            Err(_) => break,
        }
    }
});
