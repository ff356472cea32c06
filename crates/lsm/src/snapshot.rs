//! Snapshots: a registered sequence number that compaction must keep readable.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;

/// The live snapshots of one database (seqno -> count).
#[derive(Default)]
pub(crate) struct SnapshotList {
    live: Mutex<BTreeMap<u64, usize>>,
}

impl SnapshotList {
    pub fn acquire(self: &Arc<Self>, seqno: u64) -> Snapshot {
        *self.live.lock().entry(seqno).or_insert(0) += 1;
        Snapshot {
            seqno,
            list: Arc::clone(self),
        }
    }

    fn release(&self, seqno: u64) {
        let mut live = self.live.lock();
        if let Some(c) = live.get_mut(&seqno) {
            *c -= 1;
            if *c == 0 {
                live.remove(&seqno);
            }
        }
    }

    /// The live snapshot seqnos, ascending.
    pub fn seqnos(&self) -> Vec<u64> {
        self.live.lock().keys().copied().collect()
    }
}

/// A consistent point-in-time view: reads through it see exactly the writes with a sequence number up to
/// [`Snapshot::seqno`]. Compaction keeps every version such a read needs while the snapshot lives.
pub struct Snapshot {
    seqno: u64,
    list: Arc<SnapshotList>,
}

impl Snapshot {
    /// The last sequence number visible through this snapshot.
    pub fn seqno(&self) -> u64 {
        self.seqno
    }
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot")
            .field("seqno", &self.seqno)
            .finish()
    }
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        self.list.release(self.seqno);
    }
}
