//! Restore and rescale: load any key-group range from one or many savepoints into a store's backend.
//!
//! Order of work, so that nothing loads unless everything checks out:
//! 1. every savepoint's max parallelism must equal the backend's, and its key serializer must be compatible
//!    with the store's as is (key serializers may be reconfigured, never migrated);
//! 2. a state present in several savepoints must have the same kind and serializers in each;
//! 3. every restored state that is already registered in the store is checked (kind, namespace serializer
//!    as is, value serializer as is or after migration) — an incompatible serializer is an error naming the
//!    state and both serializers;
//! 4. only then are entries loaded, key group by key group, for the key groups of the backend's range, and
//!    states that need it are migrated. States restored but not registered keep their restored meta until
//!    they are registered (and are re-snapshotted untouched meanwhile).

use std::collections::HashMap;

use super::registration::{incompatible, RestorePlan};
use super::store::KeyedStateStore;
use crate::error::{Error, Result};
use crate::keygroup::KeyGroupRange;
use crate::meta::StateMetaInfo;
use crate::savepoint::SavepointReader;
use crate::serializer::KeySerializer;

/// What a restore loaded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RestoreSummary {
    /// Key groups that had data in the range.
    pub key_groups: usize,
    /// Entries loaded.
    pub entries: u64,
    /// Bytes of keys and values loaded.
    pub bytes: u64,
    /// States migrated to a new serializer.
    pub migrated_states: Vec<String>,
}

impl<K: KeySerializer> KeyedStateStore<K> {
    /// Restores the key groups of this store's range from `savepoints` (any number, any ranges: the key
    /// groups outside this store's range are skipped, which is how rescaling works). The backend must not
    /// hold entries of the restored states yet.
    pub fn restore(&mut self, savepoints: &[SavepointReader]) -> Result<RestoreSummary> {
        let config = self.config().clone();
        let range = config.key_group_range;

        // 1. Max parallelism and key serializer.
        for sp in savepoints {
            let h = sp.header();
            if h.max_parallelism != config.max_parallelism {
                return Err(Error::MaxParallelismMismatch {
                    savepoint: h.max_parallelism,
                    backend: config.max_parallelism,
                });
            }
            let compat = self.key_serializer().compatibility(&h.key_serializer);
            if !compat.is_compatible_as_is() {
                return Err(incompatible(
                    "<key>",
                    "key",
                    &h.key_serializer,
                    &self.key_serializer().snapshot(),
                    compat,
                ));
            }
        }

        // 2. One meta per state name across savepoints.
        let mut restored: Vec<StateMetaInfo> = Vec::new();
        let mut by_name: HashMap<String, usize> = HashMap::new();
        for sp in savepoints {
            for m in &sp.header().states {
                match by_name.get(&m.name) {
                    Some(&i) => {
                        let first = &restored[i];
                        if first.kind != m.kind
                            || first.value_serializer != m.value_serializer
                            || first.namespace_serializer != m.namespace_serializer
                        {
                            return Err(Error::InvalidArgument(format!(
                                "state '{}' differs between the savepoints restored together ({} with {} vs {} with {})",
                                m.name, first.kind, first.value_serializer, m.kind, m.value_serializer
                            )));
                        }
                    }
                    None => {
                        by_name.insert(m.name.clone(), restored.len());
                        restored.push(m.clone());
                    }
                }
            }
        }

        // 3. Check restored states against registrations, before loading anything.
        let mut plans: Vec<(String, RestorePlan)> = Vec::new();
        for m in &restored {
            if let Some(reg) = self.registration(&m.name) {
                plans.push((m.name.clone(), reg.check(m)?));
            }
        }

        // Map each savepoint's state index to a backend state id, registering restored meta where the
        // backend does not know the state yet (registered states keep their registered meta).
        let mut ids: Vec<Vec<usize>> = Vec::with_capacity(savepoints.len());
        for sp in savepoints {
            let mut v = Vec::with_capacity(sp.header().states.len());
            for m in &sp.header().states {
                let id = match self.backend.states().iter().position(|s| s.name == m.name) {
                    Some(id) => id,
                    None => self.backend.register_state(m.clone())?,
                };
                v.push(id);
            }
            ids.push(v);
        }
        self.sync_registered();

        // 4. Load, key group by key group. A failure still finishes the load (a backend may be loading in the
        // background, e.g. the LSM backend's loader thread: nothing may still be written after we return).
        let mut summary = RestoreSummary::default();
        if let Err(e) = self.load_range(range, savepoints, &ids, &mut summary) {
            let _ = self.backend.finish_load();
            return Err(e);
        }
        self.backend.finish_load()?;

        // Migrate registered states whose serializer needs it.
        for (name, plan) in plans {
            if plan != RestorePlan::Migrate {
                continue;
            }
            let Some(&i) = by_name.get(&name) else {
                continue;
            };
            let previous = restored[i].value_serializer.clone();
            let id = self
                .backend
                .states()
                .iter()
                .position(|s| s.name == name)
                .ok_or_else(|| Error::UnknownState(name.clone()))?;
            if let Some(reg) = self.registration(&name).cloned() {
                reg.migrate(self.backend.as_mut(), id, &previous)?;
            }
            summary.migrated_states.push(name);
        }
        Ok(summary)
    }

    /// Loads the key groups of `range` from `savepoints` (state indexes mapped to backend ids by `ids`).
    fn load_range(
        &mut self,
        range: KeyGroupRange,
        savepoints: &[SavepointReader],
        ids: &[Vec<usize>],
        summary: &mut RestoreSummary,
    ) -> Result<()> {
        for kg in range.iter() {
            let mut had = false;
            for (sp, map) in savepoints.iter().zip(ids) {
                let sp_range: KeyGroupRange = sp.header().key_group_range;
                if !sp_range.contains(kg) {
                    continue;
                }
                let backend = &mut self.backend;
                sp.read_key_group(kg, &mut |state_index, key, value| {
                    let id = *map.get(state_index).ok_or_else(|| Error::CorruptState {
                        state: format!("#{state_index}"),
                        detail: format!("key group {kg} holds an entry of a state the savepoint header does not list"),
                    })?;
                    had = true;
                    summary.entries += 1;
                    summary.bytes += (key.len() + value.len()) as u64;
                    backend.load_entry(id, kg, key, value)
                })?;
            }
            if had {
                summary.key_groups += 1;
            }
        }
        Ok(())
    }
}
