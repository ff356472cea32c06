//! [`RocksDbSnapshot`]: a RocksDB snapshot plus a strong reference to the database, readable on any thread.

use std::sync::Arc;

use rocksdb::{ReadOptions, SnapshotWithThreadMode};

use crate::backend::{BackendConfig, BackendSnapshot, StateId};
use crate::error::{Error, Result};
use crate::keygroup::{write_key_group_prefix, KeyGroup};
use crate::meta::{StateKind, StateMetaInfo};

use super::{cf_handle, rdb_error, Db, DbHolder};

/// A point-in-time view of a [`RocksDbBackend`]: a RocksDB snapshot plus a strong reference to the database,
/// readable on any thread while the backend keeps writing.
pub struct RocksDbSnapshot {
    // Field order is part of the soundness argument in `new`: `snapshot` borrows `holder.db` and must be
    // dropped (releasing the RocksDB snapshot) before `holder` (possibly closing the database).
    snapshot: SnapshotWithThreadMode<'static, Db>,
    holder: Arc<DbHolder>,
    config: BackendConfig,
    states: Vec<StateMetaInfo>,
    cf_names: Vec<String>,
    prefix_len: usize,
}

impl RocksDbSnapshot {
    pub(super) fn new(
        holder: Arc<DbHolder>,
        config: BackendConfig,
        states: Vec<StateMetaInfo>,
        cf_names: Vec<String>,
        prefix_len: usize,
    ) -> Self {
        let db: *const Db = &holder.db;
        // SAFETY: `db` points into the heap allocation of the `Arc<DbHolder>`, which never moves and is freed
        // only when the last strong reference is dropped. The returned struct keeps a strong reference in
        // `holder`, declared after `snapshot`, so the database outlives the snapshot that borrows it (fields
        // drop in declaration order; there is no `Drop` impl that could reorder this). The `'static` borrow
        // never escapes: both fields are private, neither is moved out or replaced, and the snapshot is only
        // read through `raw_iterator_cf_opt(&self, ..)`, whose iterators borrow `self` (never through
        // `iterator_opt`, which would return an iterator carrying the `'static` lifetime). `Db` is `Sync`,
        // so sharing the reference across threads is sound.
        let db: &'static Db = unsafe { &*db };
        RocksDbSnapshot {
            snapshot: db.snapshot(),
            holder,
            config,
            states,
            cf_names,
            prefix_len,
        }
    }
}

impl BackendSnapshot for RocksDbSnapshot {
    fn config(&self) -> &BackendConfig {
        &self.config
    }

    fn states(&self) -> &[StateMetaInfo] {
        &self.states
    }

    fn visit(
        &self,
        state: StateId,
        kg: KeyGroup,
        f: &mut dyn FnMut(&[u8], &[u8]) -> Result<()>,
    ) -> Result<()> {
        let meta = self
            .states
            .get(state)
            .ok_or_else(|| Error::UnknownStateId(state))?;
        if !self.config.key_group_range.contains(kg) {
            return Ok(());
        }
        let cf = cf_handle(&self.holder.db, &self.cf_names, state)?;
        let mut lower = Vec::with_capacity(2);
        write_key_group_prefix(&mut lower, kg, self.prefix_len);
        let mut ro = ReadOptions::default();
        ro.fill_cache(false);
        ro.set_iterate_lower_bound(lower.clone());
        // kg < max parallelism <= 2^15, so kg + 1 still fits the prefix.
        if let Some(next) = kg.checked_add(1) {
            let mut upper = Vec::with_capacity(2);
            write_key_group_prefix(&mut upper, next, self.prefix_len);
            ro.set_iterate_upper_bound(upper);
        }
        // Like the heap backend: empty values are never stored by the state API except for timers.
        let keep_empty = meta.kind == StateKind::Timers;
        let mut it = self.snapshot.raw_iterator_cf_opt(&cf, ro);
        it.seek(&lower);
        while let Some((k, v)) = it.item() {
            if keep_empty || !v.is_empty() {
                f(k, v)?;
            }
            it.next();
        }
        it.status().map_err(|e| {
            rdb_error(
                format!("reading snapshot of state '{}', key group {kg}", meta.name),
                e,
            )
        })
    }
}
