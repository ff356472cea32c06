//! The read-modify-write cache stepping aside when it does not pay (`design/rmw-cache.md`, "Stepping
//! aside"): the backend's hook that routes an operation through the cache or to the engine, its settings
//! and its figures (kept for the engine's handle in `cache_stats`).

use super::LsmBackend;
use crate::backend::lsm_cache::{RmwCache, RmwCacheStepping};
use crate::backend::StateId;
use crate::error::Result;

impl LsmBackend {
    /// Whether an operation on `state` whose engine key is in the key buffer goes through the cache: not
    /// for timer queues, nor without a cache or while it is aside. Counts the operation in the cache's
    /// window, which may step it aside (writing it back) or back in.
    #[inline]
    pub(super) fn through_cache(&mut self, state: StateId) -> Result<bool> {
        if !self.cached_kind(state) {
            return Ok(false);
        }
        let Some(cache) = self.cache.as_mut() else {
            return Ok(false);
        };
        let route = cache.route(&self.kbuf, &self.shared.db)?;
        if route.ended {
            self.window_ended(route.stepped, route.through);
        }
        Ok(route.through)
    }

    #[cold]
    fn window_ended(&mut self, stepped: bool, active: bool) {
        if stepped {
            // Aside, the cache is charged only its estimate's memory; back in, its footprint again.
            self.charge_cache();
        }
        self.shared
            .step
            .record(self.cache.as_ref(), stepped && !active);
    }

    /// The thresholds by which the read-modify-write cache steps aside when its estimated hit ratio says
    /// it does not pay, and back in when it would ([`RmwCacheStepping::DEFAULT`] unless set;
    /// [`RmwCacheStepping::NEVER`]: always in use). Kept for a cache made later.
    pub fn set_rmw_cache_stepping(&mut self, policy: RmwCacheStepping) {
        self.cache_stepping = policy;
        if let Some(c) = &mut self.cache {
            c.set_stepping(policy);
        }
    }

    /// Whether the read-modify-write cache is in use (false: none, or aside: every operation goes to the
    /// engine).
    pub fn rmw_cache_active(&self) -> bool {
        self.cache.as_ref().is_some_and(RmwCache::is_active)
    }

    /// The hit ratio the read-modify-write cache would have had at its capacity over its last window of
    /// operations, estimated from a sample of the keys (in use or aside).
    pub fn rmw_cache_estimated_hit_ratio(&self) -> Option<f64> {
        self.cache.as_ref().and_then(RmwCache::estimated_hit_ratio)
    }

    /// How many times the read-modify-write cache stepped aside.
    pub fn rmw_cache_step_asides(&self) -> u64 {
        self.shared.step.step_asides()
    }
}
