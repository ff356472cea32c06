//! Stepping aside and back in (`design/rmw-cache.md`, "Stepping aside"): at the end of each window of
//! operations the cache asks its estimate ([`StepAside`](super::step_aside::StepAside)) whether it pays. To
//! step aside it writes everything back (pending layers first, as any eviction with layers pending) and
//! gives its memory back, keeping only its hasher and its estimate: an empty cache answers nothing, so the
//! operations may go straight to the engine. Stepping back in needs nothing: the empty cache fills again
//! (admission while there is room).

use keyed_state_lsm::Db;

use super::step_aside::{RmwCacheStepping, Verdict};
use super::RmwCache;
use crate::error::Result;

/// What [`RmwCache::route`] decided for one operation.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Route {
    /// The operation goes through the cache (else straight to the engine: the cache is aside, empty).
    pub(crate) through: bool,
    /// The cache stepped aside or back in at this operation (its footprint changed).
    pub(crate) stepped: bool,
    /// A window ended at this operation (a new estimate).
    pub(crate) ended: bool,
}

impl RmwCache {
    /// Routes an operation on `key` (an engine key): through the cache while it is in use, to the engine
    /// while it is aside (the key is then sampled here, as a probe samples it in use). Ends the window
    /// when it is over, which may step aside (writing everything back into `db`) or back in.
    #[inline]
    pub(crate) fn route(&mut self, key: &[u8], db: &Db) -> Result<Route> {
        let sampled = !self.step.is_active();
        if sampled {
            let hash = self.hash(key);
            self.step.observe(hash);
        }
        let route = if self.step.tick() {
            self.end_window(db)?
        } else {
            Route {
                through: self.step.is_active(),
                stepped: false,
                ended: false,
            }
        };
        // In use, the operation's first probe samples its key; the other probes (a map's entries looked up
        // while it is cleared, a merge's lookup) are not operations and do not.
        self.sample_next = route.through && !sampled;
        Ok(route)
    }

    /// Whether the cache is in use (else aside: empty, every operation goes to the engine).
    pub(crate) fn is_active(&self) -> bool {
        self.step.is_active()
    }

    /// The hit ratio the cache would have had over the last window, estimated.
    pub(crate) fn estimated_hit_ratio(&self) -> Option<f64> {
        self.step.estimate()
    }

    pub(crate) fn set_stepping(&mut self, policy: RmwCacheStepping) {
        self.step.set_policy(policy);
    }

    #[cold]
    fn end_window(&mut self, db: &Db) -> Result<Route> {
        let entries = self.table.len();
        let verdict = self.step.decide(self.used, entries);
        if verdict == Verdict::StepAside {
            if let Err(e) = self.empty_and_release(db) {
                // Still holding entries: every operation must keep consulting it.
                self.step.set_active(true);
                return Err(e);
            }
        }
        Ok(Route {
            through: self.step.is_active(),
            stepped: verdict != Verdict::Stay,
            ended: true,
        })
    }

    /// Writes everything back, then becomes a new empty cache of the same capacity, admission, hasher and
    /// estimate: the slots, the table's buckets and the dirty log go back to the allocator.
    fn empty_and_release(&mut self, db: &Db) -> Result<()> {
        self.clear(db)?;
        let mut fresh = RmwCache::new(self.capacity, self.admits_on_first_touch());
        fresh.hasher = self.hasher.clone();
        std::mem::swap(&mut fresh.step, &mut self.step);
        // Dropping this one releases its ledger's layers (none: `clear` drained them).
        *self = fresh;
        Ok(())
    }
}
