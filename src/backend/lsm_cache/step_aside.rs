//! Whether the cache pays: an estimate of the hit ratio the cache would have at its capacity, kept while
//! the cache is in use and while it stands aside, and the decision to step aside or back in
//! (`design/rmw-cache.md`, "Stepping aside").
//!
//! The estimate is spatial sampling (SHARDS, Waldspurger et al., FAST '15): a key whose hash has
//! `log2(rate)` chosen bits at 0 is sampled, and a sampled key goes through a shadow cache of fingerprints
//! (CLOCK, as the cache) holding `1 / rate` of the entries the cache holds. The shadow's hit ratio over the
//! sampled keys estimates the cache's over all keys. It knows nothing of the cache's entries: only the
//! hashes it is given (the cache's table hash, computed for the probe anyway).

use hashbrown::HashMap;

/// The thresholds of stepping aside ([`LsmBackend::set_rmw_cache_stepping`](crate::backend::lsm::LsmBackend::set_rmw_cache_stepping)).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RmwCacheStepping {
    /// Operations between two decisions; 0: derived from the capacity (enough for about 2,048 sampled
    /// operations, at least 65,536).
    pub window_ops: u64,
    /// The cache in use steps aside when the estimated hit ratio of a window is below this, and the
    /// working set did not fit (the shadow was full when the window began). Above 1: at every window, fit
    /// or not (tests force stepping with it).
    pub aside_below: f64,
    /// The cache aside steps back in when the estimated hit ratio of a window is above this.
    pub back_above: f64,
}

impl RmwCacheStepping {
    /// Measured thresholds (`design/rmw-cache.md`, "Stepping aside"); the gap between them keeps a
    /// working set near the edge from flapping.
    pub const DEFAULT: RmwCacheStepping = RmwCacheStepping {
        window_ops: 0,
        aside_below: 0.25,
        back_above: 0.40,
    };

    /// Never steps aside.
    pub const NEVER: RmwCacheStepping = RmwCacheStepping {
        window_ops: 0,
        aside_below: -1.0,
        back_above: -1.0,
    };
}

impl Default for RmwCacheStepping {
    fn default() -> Self {
        RmwCacheStepping::DEFAULT
    }
}

/// Entries the shadow aims at: the sampling rate is the cache's entries over this, a power of two.
const SHADOW_TARGET: usize = 2048;
/// The highest sampling rate (one key in this many).
const MAX_RATE: usize = 1024;
/// Sampled operations a derived window aims at, and its least length in operations.
const WINDOW_SAMPLES: u64 = 2048;
const MIN_WINDOW: u64 = 1 << 16;
/// Bytes per entry assumed until the cache has measured its own (an entry's overhead and 16 bytes).
const FIRST_ENTRY_BYTES: usize = 112;
/// The sampled bits of the hash: above the bits the table's buckets and the doorkeeper use first.
const SAMPLE_SHIFT: u32 = 40;

/// What a window's end decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    Stay,
    StepAside,
    StepBackIn,
}

/// The shadow cache: CLOCK over the fingerprints (hashes) of sampled keys.
#[derive(Default)]
struct Shadow {
    index: HashMap<u64, u32>,
    ring: Vec<(u64, bool)>,
    hand: usize,
    capacity: usize,
}

impl Shadow {
    /// Whether `hash` was held (a hit); it is held afterwards.
    fn access(&mut self, hash: u64) -> bool {
        if let Some(e) = self
            .index
            .get(&hash)
            .and_then(|&i| self.ring.get_mut(i as usize))
        {
            e.1 = true;
            return true;
        }
        if self.ring.len() < self.capacity {
            self.index.insert(hash, self.ring.len() as u32);
            self.ring.push((hash, false));
            return false;
        }
        // CLOCK: the first entry from the hand not referenced since the hand last passed it.
        loop {
            let Some(e) = self.ring.get_mut(self.hand) else {
                self.hand = 0;
                if self.ring.is_empty() {
                    return false;
                }
                continue;
            };
            if e.1 {
                e.1 = false;
                self.hand += 1;
                continue;
            }
            self.index.remove(&e.0);
            *e = (hash, false);
            self.index.insert(hash, self.hand as u32);
            self.hand += 1;
            return false;
        }
    }

    fn is_full(&self) -> bool {
        self.ring.len() >= self.capacity
    }

    /// Holds at most `capacity` entries from now on (the newest beyond it are forgotten).
    fn set_capacity(&mut self, capacity: usize) {
        self.capacity = capacity;
        while self.ring.len() > capacity {
            if let Some((h, _)) = self.ring.pop() {
                self.index.remove(&h);
            }
        }
        if self.hand >= self.ring.len() {
            self.hand = 0;
        }
    }

    fn clear(&mut self) {
        self.index.clear();
        self.ring.clear();
        self.hand = 0;
    }

    fn bytes(&self) -> usize {
        // The index's buckets (key, value and a control byte, at 7/8 load) and the ring.
        self.index.capacity() * 14 + self.ring.capacity() * 16
    }
}

/// The cache's estimate and decision. See the module documentation.
pub(crate) struct StepAside {
    active: bool,
    policy: RmwCacheStepping,
    /// The cache's capacity in bytes and its measured bytes per entry.
    capacity: usize,
    entry_bytes: usize,
    /// Sampled: `hash & mask == 0`.
    mask: u64,
    shadow: Shadow,
    window: u64,
    ops: u64,
    samples: u64,
    hits: u64,
    /// Windows ended since the shadow was last emptied: the first one fills it, and decides nothing.
    windows: u64,
    /// Whether the shadow was full when the current window began (a working set larger than the cache).
    full_at_start: bool,
    /// The last window's estimate, if it had sampled operations.
    estimate: Option<f64>,
}

impl StepAside {
    pub(crate) fn new(capacity: usize) -> StepAside {
        let mut s = StepAside {
            active: true,
            policy: RmwCacheStepping::DEFAULT,
            capacity,
            entry_bytes: FIRST_ENTRY_BYTES,
            mask: 0,
            shadow: Shadow::default(),
            window: MIN_WINDOW,
            ops: 0,
            samples: 0,
            hits: 0,
            windows: 0,
            full_at_start: false,
            estimate: None,
        };
        s.size();
        s
    }

    /// Whether the cache is in use (every operation consults it) rather than aside (empty, every operation
    /// goes to the engine).
    #[inline]
    pub(crate) fn is_active(&self) -> bool {
        self.active
    }

    /// Puts the cache back in use (a step aside that failed to write back).
    pub(crate) fn set_active(&mut self, active: bool) {
        self.active = active;
    }

    /// The hit ratio the cache would have had at its capacity over the last window, estimated.
    pub(crate) fn estimate(&self) -> Option<f64> {
        self.estimate
    }

    /// The shadow's memory.
    pub(crate) fn bytes(&self) -> usize {
        self.shadow.bytes()
    }

    pub(crate) fn set_policy(&mut self, policy: RmwCacheStepping) {
        self.policy = policy;
        self.size();
    }

    /// A new capacity: the shadow starts over at its new size.
    pub(crate) fn set_capacity(&mut self, capacity: usize) {
        self.capacity = capacity;
        self.restart();
    }

    /// Empties the shadow and starts a new first window.
    fn restart(&mut self) {
        self.shadow.clear();
        self.windows = 0;
        self.full_at_start = false;
        (self.ops, self.samples, self.hits) = (0, 0, 0);
        self.size();
    }

    /// Sampling rate, shadow capacity and window from the capacity, the bytes per entry and the policy.
    fn size(&mut self) {
        let entries = (self.capacity / self.entry_bytes.max(1)).max(1);
        let rate = (entries / SHADOW_TARGET)
            .clamp(1, MAX_RATE)
            .next_power_of_two();
        let mask = ((rate as u64) - 1) << SAMPLE_SHIFT;
        if mask != self.mask {
            // Another sample: what the shadow holds was sampled otherwise.
            self.shadow.clear();
            self.windows = 0;
            self.full_at_start = false;
            self.mask = mask;
        }
        self.shadow.set_capacity((entries / rate).max(1));
        self.window = match self.policy.window_ops {
            0 => (WINDOW_SAMPLES * rate as u64).max(MIN_WINDOW),
            n => n,
        };
    }

    /// A probe of a key of table hash `hash` (while the cache is in use, or an operation routed around it).
    #[inline]
    pub(crate) fn observe(&mut self, hash: u64) {
        if hash & self.mask == 0 {
            self.sample(hash);
        }
    }

    #[cold]
    fn sample(&mut self, hash: u64) {
        self.samples += 1;
        if self.shadow.access(hash) {
            self.hits += 1;
        }
    }

    /// Counts an operation; `true` when a window has ended ([`decide`](Self::decide) next).
    #[inline]
    pub(crate) fn tick(&mut self) -> bool {
        self.ops += 1;
        self.ops >= self.window
    }

    /// Ends the window: the estimate, then the verdict (which this state already follows). `used` and
    /// `entries`: what the cache holds, for its bytes per entry while it is in use and at least half full.
    pub(crate) fn decide(&mut self, used: usize, entries: usize) -> Verdict {
        if self.samples > 0 {
            self.estimate = Some(self.hits as f64 / self.samples as f64);
        }
        let warm = self.windows > 0;
        // A policy whose threshold every ratio passes (above 1 to step aside, below 0 to come back) steps
        // whatever the estimate, also before any key was sampled (a large cache samples 1 key in hundreds).
        let (forced_aside, forced_back) =
            (self.policy.aside_below > 1.0, self.policy.back_above < 0.0);
        let verdict = match self.estimate {
            _ if warm && self.active && forced_aside => Verdict::StepAside,
            _ if warm && !self.active && forced_back => Verdict::StepBackIn,
            Some(e) if warm && self.active && self.full_at_start && e < self.policy.aside_below => {
                Verdict::StepAside
            }
            Some(e) if warm && !self.active && e > self.policy.back_above => Verdict::StepBackIn,
            _ => Verdict::Stay,
        };
        match verdict {
            Verdict::StepAside => self.active = false,
            Verdict::StepBackIn => self.active = true,
            Verdict::Stay => {}
        }
        self.windows += 1;
        self.full_at_start = self.shadow.is_full();
        (self.ops, self.samples, self.hits) = (0, 0, 0);
        if self.active && entries > 0 && used >= self.capacity / 2 {
            let measured = used / entries;
            // Resized only on a change of a quarter or more, so that the sample stays.
            if measured * 4 < self.entry_bytes * 3 || measured * 4 > self.entry_bytes * 5 {
                self.entry_bytes = measured;
                self.size();
            }
        }
        verdict
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A well-spread hash of `k`.
    fn h(k: u64) -> u64 {
        k.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(29) ^ k
    }

    /// Runs `ops` operations on keys `key(i)`, ending windows as they end; their verdicts.
    fn run(s: &mut StepAside, ops: u64, key: impl Fn(u64) -> u64) -> Vec<Verdict> {
        let mut verdicts = Vec::new();
        for i in 0..ops {
            s.observe(h(key(i)));
            if s.tick() {
                verdicts.push(s.decide(0, 0));
            }
        }
        verdicts
    }

    #[test]
    fn a_uniform_working_set_ten_times_the_cache_is_estimated_at_a_tenth_and_steps_aside() {
        // 10,000 entries of 112 bytes; 100,000 keys.
        let mut s = StepAside::new(10_000 * FIRST_ENTRY_BYTES);
        let keys: Vec<u64> = (0..2_000_000u64).map(|i| h(i ^ 0xABCD) % 100_000).collect();
        let v = run(&mut s, keys.len() as u64, |i| keys[i as usize]);
        let e = s.estimate().unwrap_or(1.0);
        assert!((0.05..0.15).contains(&e), "estimate {e}");
        assert!(v.contains(&Verdict::StepAside), "{v:?}");
        assert!(!s.is_active());
    }

    #[test]
    fn a_working_set_that_fits_is_estimated_near_one_and_brings_the_cache_back() {
        let mut s = StepAside::new(10_000 * FIRST_ENTRY_BYTES);
        s.active = false;
        let v = run(&mut s, 1_000_000, |i| h(i) % 5_000);
        assert!(s.estimate().unwrap_or(0.0) > 0.9, "{:?}", s.estimate());
        assert_eq!(
            v.first(),
            Some(&Verdict::Stay),
            "the first window only fills the shadow"
        );
        assert!(v.contains(&Verdict::StepBackIn), "{v:?}");
        assert!(s.is_active());
    }

    #[test]
    fn a_policy_that_steps_whatever_the_estimate_steps_a_large_cache_before_any_sample() {
        // 64 MiB: one key in hundreds is sampled; three operations per window sample none.
        let mut s = StepAside::new(64 << 20);
        s.set_policy(RmwCacheStepping {
            window_ops: 3,
            aside_below: 2.0,
            back_above: -1.0,
        });
        let v = run(&mut s, 12, |_| 0x1234_5678_9ABC_DEF1);
        assert_eq!(s.estimate(), None);
        assert_eq!(
            v,
            [
                Verdict::Stay,
                Verdict::StepAside,
                Verdict::StepBackIn,
                Verdict::StepAside
            ]
        );
    }

    #[test]
    fn new_keys_into_a_cache_with_room_do_not_step_it_aside() {
        // Every key new (no hit), but fewer than the cache holds: the shadow never fills.
        let mut s = StepAside::new(1_000_000 * FIRST_ENTRY_BYTES);
        let v = run(&mut s, 900_000, |i| i);
        assert!(v.iter().all(|v| *v == Verdict::Stay), "{v:?}");
        assert!(s.is_active());
    }
}
