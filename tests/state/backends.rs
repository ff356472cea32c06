//! Runs the conformance suite against every backend.

use keyed_state::backend::heap::HeapBackend;

conformance_suite!(heap_cow, |cfg| Box::new(
    HeapBackend::new(cfg).expect("heap backend")
));
// As opened: the read-modify-write cache off.
conformance_suite!(lsm, |cfg| Box::new(
    keyed_state::backend::lsm::LsmBackend::temp_with(
        cfg,
        keyed_state::backend::lsm::LsmBackend::small_options()
    )
    .expect("lsm backend")
));

/// One environment for every test of the suite below, as a process shares one: a 64 MiB budget whose
/// read-modify-write caches take the suggested share, divided among the backends open at the time.
fn shared_env() -> &'static keyed_state::env::StateEnv {
    static ENV: std::sync::OnceLock<keyed_state::env::StateEnv> = std::sync::OnceLock::new();
    ENV.get_or_init(|| {
        keyed_state::env::StateEnv::new(keyed_state::env::StateEnvOptions {
            memory_budget: Some(64 << 20),
            rmw_cache_ratio: keyed_state::backend::lsm::SUGGESTED_RMW_CACHE_RATIO,
            background_threads: 2,
            ..keyed_state::env::StateEnvOptions::default()
        })
        .expect("state env")
    })
}

// The cache at the default capacity of an environment that turns it on (its part of the budget's share).
conformance_suite!(lsm_cache_budget_share, |cfg| Box::new(
    shared_env()
        .temp_lsm(cfg, keyed_state::backend::lsm::LsmBackend::small_options())
        .expect("lsm backend on the shared env")
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
// Stepping aside and back in every few operations, with a few entries (evicting) and with everything fitting.
conformance_suite!(lsm_cache_stepping_tiny, |cfg| lsm_stepping(cfg, 1 << 10));
conformance_suite!(lsm_cache_stepping_large, |cfg| lsm_stepping(cfg, 64 << 20));

/// [`lsm_cached`] (every key taken in on its first miss) stepping aside and back in every few operations.
fn lsm_stepping(
    cfg: keyed_state::backend::BackendConfig,
    capacity: usize,
) -> Box<dyn keyed_state::backend::StateBackend> {
    let mut b = keyed_state::backend::lsm::LsmBackend::temp_with(
        cfg,
        keyed_state::backend::lsm::LsmBackend::small_options(),
    )
    .and_then(|b| b.with_rmw_cache(capacity))
    .expect("lsm backend with a cache");
    b.set_rmw_cache_admission(true).expect("cache admission");
    b.set_rmw_cache_stepping(crate::conformance::STEP_EVERY_FEW_OPS);
    Box::new(b)
}
