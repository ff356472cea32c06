//! A criterion measurement of the benchmark thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`).
//!
//! The benchmark machines are shared (other builds run on the same cores), so wall-clock time mostly
//! measures the scheduler. Thread CPU time counts only the time this thread ran, which is what "ops/s on one
//! core" means. It still includes cache and memory-bandwidth interference from the other work.

use std::time::Duration;

use criterion::measurement::{Measurement, ValueFormatter, WallTime};

/// Thread CPU time as a criterion measurement (values are `Duration`s, formatted like `WallTime`).
pub struct CpuTime;

static WALL: WallTime = WallTime;

/// The CPU time this thread has used so far.
#[inline]
pub fn now() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant the kernel knows.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// The smallest observed cost of one `now()` pair (subtracted where single operations are timed).
pub fn clock_overhead() -> Duration {
    (0..1000)
        .map(|_| {
            let a = now();
            now() - a
        })
        .min()
        .unwrap_or_default()
}

impl Measurement for CpuTime {
    type Intermediate = Duration;
    type Value = Duration;

    fn start(&self) -> Duration {
        now()
    }
    fn end(&self, start: Duration) -> Duration {
        now().saturating_sub(start)
    }
    fn add(&self, v1: &Duration, v2: &Duration) -> Duration {
        *v1 + *v2
    }
    fn zero(&self) -> Duration {
        Duration::ZERO
    }
    fn to_f64(&self, value: &Duration) -> f64 {
        value.as_nanos() as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        WALL.formatter()
    }
}
