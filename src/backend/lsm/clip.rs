//! Deleting key groups from the LSM backend: clipping to a key-group range (rescaling) and deleting
//! everything.

use super::{kg_prefix, LsmBackend};
use crate::error::Result;
use crate::keygroup::KeyGroupRange;
use keyed_state_lsm::{prefix_successor, ReadOptions};

impl LsmBackend {
    /// Deletes every entry of every state outside `range` (one range tombstone per state and side; the
    /// engine drops files lying entirely inside them) and makes `range` this backend's key-group range.
    pub fn clip_to(&mut self, range: KeyGroupRange) -> Result<()> {
        // Whatever a restore handed over is in the engine first, and nothing cached survives the clip.
        self.loader.drain()?;
        self.forget_cache()?;
        crate::backend::check_range_fits(range, self.config.max_parallelism)?;
        let db = &self.shared.db;
        for sid in 0..self.states.len() {
            let start = (sid as u16).to_be_bytes().to_vec();
            let end = prefix_successor(&start).unwrap_or_else(|| vec![0xFF; 3]);
            if range.is_empty() {
                db.delete_range(&start, &end)?;
                continue;
            }
            db.delete_range(&start, &kg_prefix(sid, range.start(), self.prefix_len))?;
            let after = kg_prefix(sid, range.end(), self.prefix_len);
            if let Some(after) = prefix_successor(&after) {
                db.delete_range(&after, &end)?;
            }
        }
        self.config.key_group_range = range;
        Ok(())
    }

    /// Deletes everything in the engine: one range tombstone over every key whenever the engine holds any
    /// file or visible key. Files whose entries are all deleted already still get it: their prefix filters
    /// were built with an earlier run's state widths, so a read may skip the file holding a tombstone and
    /// find an older put in another file — unless a tombstone from the version covers every old entry.
    pub(super) fn delete_all(&mut self) -> Result<()> {
        let has_files = self.shared.db.stats().level_files.iter().any(|&n| n > 0);
        let mut it = self.shared.db.iter(ReadOptions::default());
        it.seek_to_first();
        if has_files || it.valid() {
            drop(it);
            self.shared.db.delete_range(&[], &[0xFF; 3])?;
        }
        Ok(())
    }
}
