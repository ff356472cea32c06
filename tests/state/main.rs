//! The state layer's tests: the conformance suite on every backend, models, serializers, savepoint format,
//! restore and rescale, timers, TTL, windows.

#[macro_use]
mod conformance;

mod backend_swap;
mod backends;
mod env_memory;
mod lsm_operands;
mod lsm_rescale;
mod model;
mod operands_model;
mod rescale;
mod rmw_cache_default;
mod rmw_cache_step;
mod savepoint_format;
mod serializers;
mod timers;
mod ttl_cleanup;
mod windows;
