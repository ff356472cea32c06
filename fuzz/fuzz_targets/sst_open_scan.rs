//! Fuzzes opening an SST image from bytes and scanning it fully, plus a few seeks and point lookups (the
//! `SstReader::get` path, hash index included) and filter probes (whole keys, and prefixes of format 3): any input must either fail with an error or be read without
//! panicking, and the block cache must stay within its bound. The first input byte's low bit places the
//! file's index and filter in the reader or in the block cache (`MetadataPlacement`).
#![no_main]

use std::path::Path;
use std::sync::Arc;

use keyed_state_lsm::internals::BlockCache;
use keyed_state_lsm::internals::sst::{PrefixProbe, SstReader};
use keyed_state_lsm::MetadataPlacement;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let cache = BlockCache::new(64 * 1024);
    let bytes: Arc<[u8]> = Arc::from(data);
    let placement = match data.first() {
        Some(b) if b & 1 == 1 => MetadataPlacement::Cached,
        _ => MetadataPlacement::Resident,
    };
    let Ok(reader) =
        SstReader::open_bytes_placed(bytes, Path::new("fuzz.sst"), 1, cache.clone(), placement)
    else {
        return;
    };
    let _ = reader.may_contain(b"key");
    // The name of the extractor `tests/fixtures/sst_v3.sst` was written with (a format-3 filter of prefixes).
    const FIXTURE_EXTRACTOR: &str = "keyed-state.fixed-prefix/5";
    let _ = reader.may_contain_prefix(&PrefixProbe::new(FIXTURE_EXTRACTOR, b"k0001"));
    let mut it = reader.iter();
    let mut keys = Vec::new();
    if it.seek_to_first().is_ok() {
        while it.valid() {
            if keys.len() < 64 {
                keys.push(it.key().to_vec());
            }
            let _ = it.value_slice();
            if it.next().is_err() {
                break;
            }
        }
    }
    for k in &keys {
        let _ = it.seek(k);
        let user = keyed_state_lsm::internals::ikey::user_key(k);
        let _ = reader.may_contain_prefix(&PrefixProbe::new(
            FIXTURE_EXTRACTOR,
            user.get(..5).unwrap_or(user),
        ));
        let _ = reader.get(user, k, u64::MAX >> 8, &mut |_, _, v| {
            let _ = v().len();
            true
        });
    }
    let _ = it.seek(b"");
    assert!(cache.usage() <= cache.capacity());
});
