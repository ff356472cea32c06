//! Prefix probes: what a lookup or scan within one key prefix tests against the filters of SST files
//! (format version 3), and the hash by which a filter names its prefix extractor.

use super::bloom;

/// A prefix to test against SST filters: the hash of its extractor's name and of its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrefixProbe {
    pub(super) extractor: u64,
    pub(super) hash: u64,
}

impl PrefixProbe {
    /// A probe for `prefix` under the extractor named `extractor_name`.
    pub fn new(extractor_name: &str, prefix: &[u8]) -> Self {
        PrefixProbe {
            extractor: name_hash(extractor_name.as_bytes()),
            hash: bloom::key_hash(prefix),
        }
    }
}

/// How a filter's extractor name is compared (hashed once per file and per probe).
pub(super) fn name_hash(name: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(name)
}
