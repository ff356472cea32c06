//! The LSM engine's tests (crate `keyed-state-lsm`): scenarios named by behaviour, the model against a
//! `BTreeMap`, SST format and fixtures, levels, recovery, crash consistency on `FaultFs`, stress.

mod crash_consistency;
mod lsm_levels;
mod lsm_many_states;
mod lsm_model;
mod lsm_multi_get;
mod lsm_recovery;
mod lsm_row_cache;
mod lsm_row_cache_shared;
mod lsm_scenarios;
mod lsm_shared_env;
mod lsm_sst;
mod lsm_stress;
mod open_never_deletes;
