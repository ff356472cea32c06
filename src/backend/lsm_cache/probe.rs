//! The read-modify-write cache driven directly, without an engine, for the bench of its hash table's growth
//! steps (`benches/rmw_cache_growth.rs`, through `crate::internals`). Not API.

use super::RmwCache;

/// A cache of its own that takes puts while it has room.
pub struct RmwCacheProbe(RmwCache);

impl RmwCacheProbe {
    /// A cache of `capacity` bytes with the doorkeeper (the LSM backend's default).
    pub fn new(capacity: usize) -> Self {
        RmwCacheProbe(RmwCache::new(capacity, false))
    }

    /// A put of `value` for `key` as the LSM backend's goes through the cache: a probe, then the value
    /// written in place (a held key) or as a new dirty entry while the cache has room. `false`: not taken
    /// in (the backend would write it to the engine).
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> bool {
        let found = self.0.probe(key);
        if found.slot().is_none() && !self.0.admit_write(key.len() + value.len()) {
            return false;
        }
        self.0.write_at(found, key, Some(value));
        true
    }

    /// Whether the hash table is moving a growth's entries over from its old buckets.
    pub fn table_growing(&self) -> bool {
        self.0.table.growing()
    }

    /// The bytes of the hash table's buckets (the old ones too while a growth moves them).
    pub fn table_bytes(&self) -> usize {
        self.0.table.bytes()
    }

    /// Entries held.
    pub fn entries(&self) -> usize {
        self.0.table.len()
    }
}
