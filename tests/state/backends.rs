//! Runs the conformance suite against every backend.

use keyed_state::backend::heap::HeapBackend;

conformance_suite!(heap_cow, |cfg| Box::new(
    HeapBackend::new(cfg).expect("heap backend")
));
conformance_suite!(lsm, |cfg| Box::new(
    keyed_state::backend::lsm::LsmBackend::temp_with(
        cfg,
        keyed_state::backend::lsm::LsmBackend::small_options()
    )
    .expect("lsm backend")
));

#[cfg(feature = "rocksdb")]
use keyed_state::backend::rocksdb::{RocksDbBackend, RocksDbOptions};

#[cfg(feature = "rocksdb")]
conformance_suite!(rocksdb, |cfg| Box::new(
    RocksDbBackend::temporary(cfg, RocksDbOptions::default()).expect("rocksdb backend")
));
