//! A point-in-time view of an LSM backend ([`LsmSnapshot`]): what the asynchronous part of a checkpoint or
//! savepoint reads.

use std::sync::Arc;

use parking_lot::Mutex;

use crate::backend::lsm_cache::{Layer, Overlay};
use crate::backend::{BackendConfig, BackendSnapshot, StateId};
use crate::error::{Error, Result};
use crate::keygroup::KeyGroup;
use crate::meta::{StateKind, StateMetaInfo};
use keyed_state_lsm::{prefix_successor, DbIter, Snapshot};

use super::*;

/// A point-in-time view of an [`LsmBackend`]: an engine snapshot and the state metas of that moment.
pub struct LsmSnapshot {
    pub(super) config: BackendConfig,
    pub(super) prefix_len: usize,
    pub(super) states: Vec<StateMetaInfo>,
    pub(super) shared: Arc<Shared>,
    pub(super) snap: Snapshot,
    /// One iterator per state over `[SID, SID+1)` at the snapshot's seqno, reused across key groups: the
    /// encoder visits key groups in ascending order, so consecutive visits of a state continue where the
    /// previous one stopped instead of building a merging iterator per (state, key group).
    pub(super) cursors: Mutex<Vec<Option<StateCursor>>>,
    /// The cache's dirty layers at snapshot time (oldest first), not in the engine at `snap`.
    pub(super) layers: Vec<Arc<Layer>>,
    /// `layers` merged and sorted, built by the first visit.
    pub(super) overlay: std::sync::OnceLock<Overlay>,
}

/// A reusable iterator over one state of a snapshot.
pub(super) struct StateCursor {
    pub(super) it: DbIter,
    /// When `Some(end)`: every key below `end` has been consumed and the iterator sits on the first key
    /// `>= end` (or is exhausted). `None`: position unknown (fresh, or stopped early by an error).
    pub(super) end: Option<Vec<u8>>,
}

impl LsmSnapshot {
    /// The engine sequence number the snapshot reads at.
    pub fn seqno(&self) -> u64 {
        self.snap.seqno()
    }

    /// The cache's dirty entries of the snapshot's moment, merged and sorted on first use.
    fn overlay(&self) -> &Overlay {
        self.overlay.get_or_init(|| Overlay::build(&self.layers))
    }
}

impl BackendSnapshot for LsmSnapshot {
    fn config(&self) -> &BackendConfig {
        &self.config
    }

    fn states(&self) -> &[StateMetaInfo] {
        &self.states
    }

    fn visit(
        &self,
        state: StateId,
        kg: KeyGroup,
        f: &mut dyn FnMut(&[u8], &[u8]) -> Result<()>,
    ) -> Result<()> {
        let Some(meta) = self.states.get(state) else {
            return Err(Error::UnknownStateId(state));
        };
        if !self.config.key_group_range.contains(kg) {
            return Ok(());
        }
        // Asynchronous part: the iterators walk the pinned memtables in place (cursor iterators copy nothing
        // out) and read SST blocks through the maps; no flush first (it made the first visit wait for a
        // whole memtable flush: savepoint write 174 MB/s with it, 201–336 MB/s without, same machine).
        let keep_empty = meta.kind == StateKind::Timers;
        let lower = kg_prefix(state, kg, self.prefix_len);
        let upper = prefix_successor(&lower);
        let mut cursors = self.cursors.lock();
        if cursors.len() < self.states.len() {
            cursors.resize_with(self.states.len(), || None);
        }
        let cursor = cursors[state].get_or_insert_with(|| {
            let sid = (state as u16).to_be_bytes().to_vec();
            let sid_end = prefix_successor(&sid);
            // Iterators read at the registered seqno; values are views into SST blocks where possible.
            let it = self.shared.db.iter(bounds(Some(&self.snap), sid, sid_end));
            StateCursor { it, end: None }
        });
        let it = &mut cursor.it;
        // Reuse the position when everything below `lower` has been consumed (ascending visits): the
        // iterator then sits on the first key >= `lower` unless keys between the old end and `lower`
        // exist, which a forward seek skips.
        let positioned = cursor.end.as_deref().is_some_and(|e| e <= lower.as_slice())
            && !(it.valid() && it.key() < lower.as_slice());
        cursor.end = None;
        if !positioned {
            it.seek(&lower);
        }
        let overlay = self.overlay();
        let mut dirty = overlay.range(&lower, upper.as_deref()).peekable();
        loop {
            // The smaller of the engine's next key and the overlay's; on a tie the overlay's value wins.
            let engine_key =
                (it.valid() && upper.as_deref().is_none_or(|u| it.key() < u)).then(|| it.key());
            let step = match (engine_key, dirty.peek()) {
                (None, None) => break,
                (Some(k), Some(&(d, _))) if d <= k => Some(d == k),
                (None, Some(_)) => Some(false),
                (Some(_), _) => None,
            };
            match step {
                Some(tie) => {
                    if let Some((k, Some(v))) = dirty.next() {
                        if keep_empty || !v.is_empty() {
                            f(&k[STATE_PREFIX_LEN..], v)?;
                        }
                    }
                    if tie {
                        it.next();
                    }
                }
                None => {
                    let v = it.value();
                    if keep_empty || !v.is_empty() {
                        f(&it.key()[STATE_PREFIX_LEN..], v)?;
                    }
                    it.next();
                }
            }
        }
        it.take_status()?;
        cursor.end = upper;
        Ok(())
    }
}
