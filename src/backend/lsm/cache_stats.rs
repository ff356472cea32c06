//! The read-modify-write cache's figures, shared by the backend (which writes them) and its engine's
//! handle (whose metrics read them).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::backend::lsm_cache::RmwCache;

/// The cache's figures, shared with the engine's handle for its metrics (written when a window of the
/// cache ends and when the cache is made, resized or dropped; read by the metrics).
#[derive(Default)]
pub(super) struct StepStats {
    active: AtomicBool,
    /// Per mille; `u64::MAX`: none yet.
    estimate: AtomicU64,
    step_asides: AtomicU64,
}

impl StepStats {
    pub(super) fn record(&self, cache: Option<&RmwCache>, stepped_aside: bool) {
        let active = cache.is_some_and(RmwCache::is_active);
        self.active.store(active, Ordering::Relaxed);
        let estimate = cache
            .and_then(RmwCache::estimated_hit_ratio)
            .map_or(u64::MAX, |e| (e * 1000.0).round() as u64);
        self.estimate.store(estimate, Ordering::Relaxed);
        if stepped_aside {
            self.step_asides.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// `keyed-state.rmw-cache.active` (1: in use, 0: aside or no cache),
    /// `keyed-state.rmw-cache.estimated-hit-ratio-permille` (over the last window; absent before one) and
    /// `keyed-state.rmw-cache.step-asides`.
    pub(super) fn step_asides(&self) -> u64 {
        self.step_asides.load(Ordering::Relaxed)
    }

    /// `, rmw cache in use (estimate 0.812, 0 step-asides)` or `aside`; empty before any figure.
    pub(super) fn summary(&self) -> String {
        let estimate = self.estimate.load(Ordering::Relaxed);
        let asides = self.step_asides();
        if estimate == u64::MAX && asides == 0 && !self.active.load(Ordering::Relaxed) {
            return String::new();
        }
        let state = if self.active.load(Ordering::Relaxed) {
            "in use"
        } else {
            "aside"
        };
        let estimate = match estimate {
            u64::MAX => "none".to_string(),
            e => format!("{:.3}", e as f64 / 1000.0),
        };
        format!(", rmw cache {state} (estimate {estimate}, {asides} step-asides)")
    }

    pub(super) fn metrics(&self) -> Vec<keyed_state_lsm::Metric> {
        let mut m = vec![
            keyed_state_lsm::Metric {
                name: "keyed-state.rmw-cache.active".into(),
                value: u64::from(self.active.load(Ordering::Relaxed)),
            },
            keyed_state_lsm::Metric {
                name: "keyed-state.rmw-cache.step-asides".into(),
                value: self.step_asides.load(Ordering::Relaxed),
            },
        ];
        let estimate = self.estimate.load(Ordering::Relaxed);
        if estimate != u64::MAX {
            m.push(keyed_state_lsm::Metric {
                name: "keyed-state.rmw-cache.estimated-hit-ratio-permille".into(),
                value: estimate,
            });
        }
        m
    }
}
