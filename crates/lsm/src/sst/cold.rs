//! How reads of memory-mapped SST files reach the disk when their pages are not in memory
//! (`design/decisions/0007-cold-reads.md`).
//!
//! SST maps are advised `MADV_RANDOM`, so a page fault reads one page and no read-around (with the default
//! advice a fault on a disk whose `read_ahead_kb` is 8192 read about 6 MB). Three things then keep cold
//! reads to one request per block:
//!
//! - **Block pre-read** ([`ColdTracker`]): a data block is about 4 KiB plus its trailer, so it spans two or
//!   three pages, and under `MADV_RANDOM` each of them is a separate synchronous fault: two disk round trips
//!   per block. Asking for the block's whole byte range first (`MADV_WILLNEED`) makes it one request. That
//!   is a system call, too dear to pay on every read of a resident block, so each thread measures how often
//!   touching a block was slow (a major fault) over its last [`WINDOW`] block reads, and pre-reads while
//!   that fraction is at least [`COLD_TOUCHES`] in [`WINDOW`]. A batched read (`Db::multi_get`) that
//!   pre-reads asks for all its blocks before its lookups touch any, so those touches are fast whether the
//!   blocks came from the disk or not: they are not recorded ([`unrecorded`]); what is recorded for each
//!   block asked for is whether its pages were in memory before the request (`mincore`,
//!   [`record_residency`]). Counting the touches turned the pre-read off after every window of
//!   successful batches, and the next window's blocks were then read one fault per page.
//! - **Iterator read-ahead** ([`Readahead`]): a cursor that reads consecutive blocks of a file (scans,
//!   compaction inputs) asks for the bytes ahead of it, from 64 KiB doubling up to 2 MiB, as RocksDB's
//!   iterator auto-readahead and `compaction_readahead_size` do.
//! - **Metadata at open**: the filter, properties and index blocks are asked for in one request before
//!   they are validated; the index is decoded and the filter copied to the heap, so a point read never
//!   faults on them again.

use std::cell::Cell;
use std::time::{Duration, Instant};

/// Block reads per decision window.
pub(crate) const WINDOW: u32 = 256;
/// Slow touches in a window at or above which the next window pre-reads (about 2 %: a pre-read costs a
/// system call of about a microsecond, a saved disk round trip about 90 µs on the machines we measure).
pub(crate) const COLD_TOUCHES: u32 = 5;
/// A touch slower than this had to wait for the disk (a minor fault costs a few microseconds at most).
pub(crate) const SLOW_TOUCH: Duration = Duration::from_micros(10);

/// First read-ahead window of a sequential cursor.
pub(crate) const READAHEAD_MIN: usize = 64 << 10;
/// Largest read-ahead window.
pub(crate) const READAHEAD_MAX: usize = 2 << 20;
/// Consecutive block loads after which a cursor starts reading ahead.
const READAHEAD_AFTER: u32 = 2;

/// The per-thread record of how block touches went.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct ColdTracker {
    /// Block touches counted in the current window.
    touches: u32,
    /// Of which slow.
    slow: u32,
    /// Whether this window pre-reads (decided from the previous window).
    pre_read: bool,
}

impl ColdTracker {
    /// Whether the next block should be asked for before it is touched.
    #[inline]
    pub(crate) fn pre_read(&self) -> bool {
        self.pre_read
    }

    /// Records one block touch; at the end of a window decides whether the next one pre-reads.
    #[inline]
    pub(crate) fn record(&mut self, slow: bool) {
        self.touches += 1;
        self.slow += u32::from(slow);
        if self.touches >= WINDOW {
            self.pre_read = self.slow >= COLD_TOUCHES;
            self.touches = 0;
            self.slow = 0;
        }
    }
}

thread_local! {
    static TRACKER: Cell<ColdTracker> = const {
        Cell::new(ColdTracker { touches: 0, slow: 0, pre_read: false })
    };
    static FORCED: Cell<Option<bool>> = const { Cell::new(None) };
    /// Touches are not recorded (the lookups of a batch whose blocks were asked for: see [`unrecorded`]).
    static UNRECORDED: Cell<bool> = const { Cell::new(false) };
}

/// Whether this thread's block reads currently pre-read.
#[inline]
pub(crate) fn pre_read() -> bool {
    FORCED
        .with(|f| f.get())
        .unwrap_or_else(|| TRACKER.with(|t| t.get().pre_read()))
}

/// Makes this thread's reads pre-read (`Some(true)`), never pre-read (`Some(false)`), or decide from their
/// recent touches (`None`, the default). For tests of the pre-read paths, which state in memory never
/// takes.
#[cfg(feature = "test-util")]
pub fn force_pre_read(mode: Option<bool>) {
    FORCED.with(|f| f.set(mode));
}

/// Records how long touching one block took on this thread.
#[inline]
pub(crate) fn record_touch(took: Duration) {
    if UNRECORDED.with(|u| u.get()) {
        return;
    }
    record(took >= SLOW_TOUCH);
}

/// Records whether a block asked for before its lookup was in memory already (found by `mincore` before
/// the request): a block that was not counts as a slow touch.
#[inline]
pub(crate) fn record_residency(resident: bool) {
    record(!resident);
}

fn record(slow: bool) {
    TRACKER.with(|t| {
        let mut v = t.get();
        v.record(slow);
        t.set(v);
    });
}

/// Runs `f` without recording its block touches. The lookups of a batch whose blocks were asked for
/// first run so: their touches find the blocks read (or being read) by that request, fast, which says
/// nothing of where the state is; counted, they would turn the pre-read off after a window of batches
/// whose blocks all came from the disk. Whether those blocks were in memory before the request is
/// recorded instead ([`record_residency`]).
pub(crate) fn unrecorded<R>(f: impl FnOnce() -> R) -> R {
    /// Restores the flag however `f` ends.
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            UNRECORDED.with(|u| u.set(self.0));
        }
    }
    let _restore = Restore(UNRECORDED.with(|u| u.replace(true)));
    f()
}

/// Block reads this thread recorded in its current window (tests of what a read records).
#[cfg(test)]
pub(crate) fn touches_in_window() -> u32 {
    TRACKER.with(|t| t.get().touches)
}

/// Times `touch` and records it.
#[inline]
pub(crate) fn timed_touch(touch: impl FnOnce()) {
    let t = Instant::now();
    touch();
    record_touch(t.elapsed());
}

/// The read-ahead state of one cursor over one file.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Readahead {
    /// The block index a sequential cursor loads next.
    expect: usize,
    /// Consecutive sequential loads.
    run: u32,
    /// File offset up to which read-ahead was asked for.
    limit: usize,
    /// Size of the next read-ahead request.
    window: usize,
}

impl Default for Readahead {
    fn default() -> Self {
        Readahead {
            expect: usize::MAX,
            run: 0,
            limit: 0,
            window: READAHEAD_MIN,
        }
    }
}

impl Readahead {
    /// Notes that block `idx`, whose bytes start at `start` and end at `end`, is loaded; returns the byte
    /// range to ask for now, if any (never past `data_end`).
    pub(crate) fn on_load(
        &mut self,
        idx: usize,
        start: usize,
        end: usize,
        data_end: usize,
    ) -> Option<(usize, usize)> {
        if idx == self.expect {
            self.run = self.run.saturating_add(1);
        } else {
            *self = Readahead::default();
        }
        self.expect = idx.wrapping_add(1);
        if self.run < READAHEAD_AFTER {
            return None;
        }
        // Ask again once the cursor is within half a window of what was asked for.
        if end.saturating_add(self.window / 2) <= self.limit {
            return None;
        }
        let from = self.limit.max(start);
        let to = from.saturating_add(self.window).min(data_end);
        self.window = (self.window * 2).min(READAHEAD_MAX);
        if to <= from {
            return None;
        }
        self.limit = to;
        Some((from, to))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pre_reads_only_after_a_window_with_enough_slow_touches() {
        let mut t = ColdTracker::default();
        for i in 0..WINDOW {
            t.record(i < COLD_TOUCHES - 1);
        }
        assert!(!t.pre_read(), "one slow touch short of the threshold");
        for i in 0..WINDOW {
            assert!(!t.pre_read());
            t.record(i < COLD_TOUCHES);
        }
        assert!(t.pre_read());
        // A window of fast touches (the state came back into memory) turns it off again.
        for _ in 0..WINDOW {
            assert!(t.pre_read());
            t.record(false);
        }
        assert!(!t.pre_read());
    }

    /// Batches of cold blocks keep the pre-read on: their lookups' touches (fast, since the blocks were
    /// asked for first) are not recorded, the blocks' residency before the request is. A batch of blocks
    /// already in memory turns it off.
    #[test]
    fn batches_of_blocks_asked_for_first_keep_the_pre_read_on_while_their_blocks_were_cold() {
        force_free_tracker();
        for _ in 0..WINDOW {
            record_touch(SLOW_TOUCH);
        }
        assert!(pre_read());
        // The lookups' touches of blocks asked for first are fast and are not recorded ...
        for _ in 0..4 * WINDOW {
            unrecorded(|| record_touch(Duration::ZERO));
        }
        assert!(
            pre_read(),
            "touches of blocks asked for first do not turn it off"
        );
        // ... their residency before the request is.
        for _ in 0..WINDOW {
            record_residency(false);
        }
        assert!(pre_read(), "cold batches keep it on");
        for _ in 0..WINDOW {
            record_residency(true);
        }
        assert!(!pre_read(), "a window of resident blocks turns it off");
        record_touch(SLOW_TOUCH);
        assert!(
            !UNRECORDED.with(|u| u.get()),
            "recording resumes after the batch"
        );
    }

    /// `unrecorded` restores the thread's flag however its closure ends: an `Err` returned, a panic
    /// caught above it, and an inner call inside an outer one (which leaves the outer's `true`).
    #[test]
    fn unrecorded_restores_recording_after_errors_panics_and_nested_batches() {
        let recording = || !UNRECORDED.with(|u| u.get());
        let r: Result<(), &str> = unrecorded(|| Err("an I/O error of the batch"));
        assert!(r.is_err());
        assert!(recording(), "after an error");
        let caught = std::panic::catch_unwind(|| unrecorded(|| panic!("a lookup panicked")));
        assert!(caught.is_err());
        assert!(recording(), "after a panic");
        unrecorded(|| {
            unrecorded(|| assert!(!recording()));
            assert!(!recording(), "the outer batch still does not record");
        });
        assert!(recording(), "after nested batches");
    }

    fn force_free_tracker() {
        FORCED.with(|f| f.set(None));
        TRACKER.with(|t| t.set(ColdTracker::default()));
    }

    #[test]
    fn readahead_starts_after_sequential_loads_and_doubles_to_the_cap() {
        let mut ra = Readahead::default();
        let block = 4096;
        let data_end = 64 << 20;
        let mut asked = Vec::new();
        for idx in 0..2000 {
            let start = idx * block;
            if let Some(r) = ra.on_load(idx, start, start + block, data_end) {
                asked.push(r);
            }
        }
        // Nothing for the first two loads, then windows that chain without gaps and grow to the cap.
        assert_eq!(asked[0].0, 2 * block);
        assert_eq!(asked[0].1 - asked[0].0, READAHEAD_MIN);
        for w in asked.windows(2) {
            assert_eq!(w[0].1, w[1].0, "requests chain");
            assert!(w[1].1 - w[1].0 <= READAHEAD_MAX);
        }
        assert_eq!(
            asked.last().map(|r| r.1 - r.0),
            Some(READAHEAD_MAX),
            "reaches the cap"
        );
        // Everything read by the cursor was asked for before it was loaded (after the first two blocks).
        let covered = asked.last().map_or(0, |r| r.1);
        assert!(covered >= 2000 * block);
    }

    #[test]
    fn a_jump_resets_the_readahead_and_the_end_of_data_bounds_it() {
        let mut ra = Readahead::default();
        for idx in 0..3 {
            ra.on_load(idx, idx * 100, idx * 100 + 100, 1000);
        }
        assert_eq!(ra.limit, 1000, "clipped at the end of the data blocks");
        assert_eq!(ra.on_load(50, 5000, 5100, 10_000), None);
        assert_eq!(ra.on_load(51, 5100, 5200, 10_000), None);
        assert_eq!(
            ra.on_load(52, 5200, 5300, 10_000),
            Some((5200, 5200 + READAHEAD_MIN.min(4800)))
        );
    }
}
