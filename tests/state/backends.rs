//! Runs the conformance suite against every backend.

use keyed_state::backend::heap::HeapBackend;

conformance_suite!(heap_cow, |cfg| Box::new(
    HeapBackend::new(cfg).expect("heap backend")
));
// As opened: the read-modify-write cache at its default capacity.
conformance_suite!(lsm, |cfg| Box::new(
    keyed_state::backend::lsm::LsmBackend::temp_with(
        cfg,
        keyed_state::backend::lsm::LsmBackend::small_options()
    )
    .expect("lsm backend")
));
// The engine alone: the read-modify-write cache off.
conformance_suite!(lsm_no_cache, |cfg| Box::new(
    keyed_state::backend::lsm::LsmBackend::temp_with(
        cfg,
        keyed_state::backend::lsm::LsmBackend::small_options()
    )
    .and_then(|b| b.with_rmw_cache(0))
    .expect("lsm backend without a cache")
));

#[cfg(feature = "rocksdb")]
use keyed_state::backend::rocksdb::{RocksDbBackend, RocksDbOptions};

#[cfg(feature = "rocksdb")]
conformance_suite!(rocksdb, |cfg| Box::new(
    RocksDbBackend::temporary(cfg, RocksDbOptions::default()).expect("rocksdb backend")
));

/// The LSM backend with its read-modify-write cache at `capacity` bytes; `first_touch`: every key taken in
/// on its first miss (no doorkeeper), so that every write goes through the cache.
fn lsm_cached(
    cfg: keyed_state::backend::BackendConfig,
    capacity: usize,
    first_touch: bool,
) -> Box<dyn keyed_state::backend::StateBackend> {
    let mut b = keyed_state::backend::lsm::LsmBackend::temp_with(
        cfg,
        keyed_state::backend::lsm::LsmBackend::small_options(),
    )
    .and_then(|b| b.with_rmw_cache(capacity))
    .expect("lsm backend with a cache");
    b.set_rmw_cache_admission(first_touch)
        .expect("cache admission");
    Box::new(b)
}

// A cache of one byte holds at most the entry an operation returns: every write is evicted (written back)
// at once and every read evicts the previous one.
conformance_suite!(lsm_cache_one_byte, |cfg| lsm_cached(cfg, 1, true));
// A few entries: evicts constantly, with entries dirty across snapshots.
conformance_suite!(lsm_cache_tiny, |cfg| lsm_cached(cfg, 1 << 10, true));
// Everything fits: nothing is evicted, snapshots read the dirty layers.
conformance_suite!(lsm_cache_large, |cfg| lsm_cached(cfg, 64 << 20, true));
// As configured by default: keys taken in at once while there is room, on their second miss once full.
conformance_suite!(lsm_cache_doorkeeper, |cfg| lsm_cached(cfg, 64 << 20, false));
conformance_suite!(lsm_cache_doorkeeper_tiny, |cfg| lsm_cached(
    cfg,
    1 << 10,
    false
));
