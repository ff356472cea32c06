//! [`DbStats`]: the counters and sizes a database reports, and how they are gathered.

use std::sync::atomic::Ordering;

use crate::compaction;
use crate::inner::DbInner;

/// Counters and sizes of a database.
#[derive(Debug, Clone, Default)]
pub struct DbStats {
    /// Bytes of user keys and values accepted by writes.
    pub user_bytes_written: u64,
    /// Bytes of SST files written by flushes.
    pub flush_bytes_written: u64,
    /// Bytes of SST files read as compaction inputs.
    pub compaction_bytes_read: u64,
    /// Bytes of SST files written by compactions.
    pub compaction_bytes_written: u64,
    /// Number of flushes.
    pub flushes: u64,
    /// Number of (non-trivial) compactions.
    pub compactions: u64,
    /// Number of trivial moves.
    pub trivial_moves: u64,
    /// Number of times a write waited for flush or compaction.
    pub write_stalls: u64,
    /// Microseconds writes spent stalled: from a write's first wait for flush or compaction until it
    /// proceeds (including the memtable switch that may end the wait).
    pub write_stall_micros: u64,
    /// Number of times a memtable's point index grew (each a rebuild by the writer, which waits for it).
    pub memtable_index_growths: u64,
    /// Microseconds writes spent growing memtable point indexes.
    pub memtable_index_growth_micros: u64,
    /// Number of files dropped whole by `delete_range`.
    pub files_dropped_by_range_delete: u64,
    /// Number of SST files that reads (point lookups and scans within one prefix) left unread because their
    /// prefix filter ruled the prefix out.
    pub prefix_filter_skips: u64,
    /// Number of wholly expired files (by their TTL range property) removed from the version without
    /// being read, because nothing below them could resurface.
    pub expired_files_dropped: u64,
    /// Files per level.
    pub level_files: Vec<usize>,
    /// Bytes per level.
    pub level_bytes: Vec<u64>,
    /// The level L0 compacts into: 1 with static level targets; with [`Options::dynamic_level_bytes`] the
    /// shallowest level the tree needs (the last one while it is small).
    ///
    /// [`Options::dynamic_level_bytes`]: crate::options::Options::dynamic_level_bytes
    pub base_level: usize,
    /// Bytes in the active and immutable memtables.
    pub memtable_bytes: usize,
    /// Number of immutable memtables waiting for flush.
    pub immutable_memtables: usize,
    /// The last sequence number.
    pub last_seqno: u64,
}

impl DbStats {
    /// (flush + compaction bytes written) / user bytes written.
    pub fn write_amplification(&self) -> f64 {
        if self.user_bytes_written == 0 {
            return 0.0;
        }
        (self.flush_bytes_written + self.compaction_bytes_written) as f64
            / self.user_bytes_written as f64
    }
}

impl DbInner {
    /// The current counters and sizes (see [`Db::stats`](super::Db::stats)).
    pub(super) fn stats(&self) -> DbStats {
        let c = &self.counters;
        let st = self.state.lock();
        let (live_growths, live_growth_micros) = std::iter::once(&st.mem)
            .chain(st.imm.iter())
            .map(|m| m.index_growth_stats())
            .fold((0, 0), |(g, t), (mg, mt)| (g + mg, t + mt));
        DbStats {
            user_bytes_written: c.user_bytes.load(Ordering::Relaxed),
            flush_bytes_written: c.flush_bytes.load(Ordering::Relaxed),
            compaction_bytes_read: c.compaction_read.load(Ordering::Relaxed),
            compaction_bytes_written: c.compaction_written.load(Ordering::Relaxed),
            flushes: c.flushes.load(Ordering::Relaxed),
            compactions: c.compactions.load(Ordering::Relaxed),
            trivial_moves: c.trivial_moves.load(Ordering::Relaxed),
            write_stalls: c.stalls.load(Ordering::Relaxed),
            write_stall_micros: c.stall_micros.load(Ordering::Relaxed),
            memtable_index_growths: c.index_growths.load(Ordering::Relaxed) + live_growths,
            memtable_index_growth_micros: c.index_growth_micros.load(Ordering::Relaxed)
                + live_growth_micros,
            files_dropped_by_range_delete: c.files_dropped.load(Ordering::Relaxed),
            prefix_filter_skips: c.prefix_skips.load(Ordering::Relaxed),
            expired_files_dropped: c.expired_files_dropped.load(Ordering::Relaxed),
            level_files: st.version.levels.iter().map(|l| l.len()).collect(),
            level_bytes: st.version.level_bytes(),
            base_level: compaction::base_level(&st.version, &self.opts),
            memtable_bytes: st.mem.approximate_bytes()
                + st.imm.iter().map(|m| m.approximate_bytes()).sum::<usize>(),
            immutable_memtables: st.imm.len(),
            last_seqno: self.last_seqno.load(Ordering::SeqCst),
        }
    }
}
