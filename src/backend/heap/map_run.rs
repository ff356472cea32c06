//! The restore run of the heap backend's map-state table: restored entries not yet moved into the index,
//! as whole entry keys in sorted, copy-on-write chunks ([`Run`]).

use std::sync::Arc;

use super::bytes::SmallBytes;
use super::user_map::Entry;
use crate::ttl::TtlVerdict;

/// Entries per chunk of the restore run.
pub const RUN_CHUNK: usize = 1024;

/// Restored entries not yet moved into the index: whole entry keys (without the key-group prefix) in
/// ascending order, in non-empty chunks. Each entry carries its key's first 16 bytes as an integer, and the
/// directory the last such head of every chunk, so a search reads contiguous integers and dereferences a
/// key (a separate allocation once longer than 14 bytes) only on a tie.
#[derive(Clone, Default)]
pub(super) struct Run {
    pub(super) dir: Arc<RunDir>,
    pub(super) len: usize,
    /// Whether some entry was loaded out of order (then [`MapTable::finish_load`] sorts).
    pub(super) unsorted: bool,
    /// Whether entries were loaded while the index held maps (then a map in the index may still have
    /// entries here).
    pub(super) overlaps_index: bool,
}

#[derive(Clone, Default)]
pub(super) struct RunDir {
    pub(super) chunks: Vec<Arc<RunChunk>>,
    /// `chunks[i].heads.last()`, for the chunk search.
    pub(super) last_heads: Vec<u128>,
}

#[derive(Clone, Default)]
pub(super) struct RunChunk {
    pub(super) heads: Vec<u128>,
    pub(super) entries: Vec<Entry>,
}

/// `(head, key) < (probe head, probe)`: byte order of keys, deciding on the heads when they differ.
#[inline]
fn below(head: u128, key: &SmallBytes, probe_head: u128, probe: &[u8]) -> bool {
    head < probe_head || (head == probe_head && key.as_slice() < probe)
}

impl Run {
    pub(super) fn iter(&self) -> impl Iterator<Item = &Entry> {
        self.dir.chunks.iter().flat_map(|c| c.entries.iter())
    }

    /// Appends one loaded entry.
    pub(super) fn push(&mut self, key: &[u8], value: &[u8]) {
        let head = sort_prefix(key);
        let dir = Arc::make_mut(&mut self.dir);
        if let Some(last) = dir.chunks.last().and_then(|c| c.entries.last()) {
            if last.0.as_slice() >= key {
                self.unsorted = true;
            }
        }
        if dir
            .chunks
            .last()
            .is_none_or(|c| c.entries.len() >= RUN_CHUNK)
        {
            dir.chunks.push(Arc::new(RunChunk {
                heads: Vec::with_capacity(RUN_CHUNK),
                entries: Vec::with_capacity(RUN_CHUNK),
            }));
            dir.last_heads.push(head);
        }
        if let (Some(c), Some(h)) = (dir.chunks.last_mut(), dir.last_heads.last_mut()) {
            let c = Arc::make_mut(c);
            c.heads.push(head);
            c.entries
                .push((SmallBytes::new(key), SmallBytes::new(value)));
            *h = head;
        }
        self.len += 1;
    }

    /// A run of `entries`, sorted without duplicate keys.
    pub(super) fn from_sorted(entries: &[Entry]) -> Run {
        let mut dir = RunDir::default();
        for c in entries.chunks(RUN_CHUNK) {
            let heads: Vec<u128> = c.iter().map(|e| sort_prefix(e.0.as_slice())).collect();
            dir.last_heads.push(heads.last().copied().unwrap_or(0));
            dir.chunks.push(Arc::new(RunChunk {
                heads,
                entries: c.to_vec(),
            }));
        }
        Run {
            dir: Arc::new(dir),
            len: entries.len(),
            unsorted: false,
            overlaps_index: false,
        }
    }

    /// Removes and returns the entries whose key starts with `prefix` (a contiguous range).
    pub(super) fn take_prefix(&mut self, prefix: &[u8]) -> Vec<Entry> {
        let ph = sort_prefix(prefix);
        let mut taken = Vec::new();
        let d = &self.dir;
        let mut ci = d.last_heads.partition_point(|&h| h < ph);
        // Chunks whose last head equals the probe's: decide on the key.
        while ci < d.chunks.len()
            && d.last_heads[ci] == ph
            && d.chunks[ci]
                .entries
                .last()
                .is_some_and(|e| e.0.as_slice() < prefix)
        {
            ci += 1;
        }
        while ci < self.dir.chunks.len() {
            let c = &self.dir.chunks[ci];
            let i = c.heads.partition_point(|&h| h < ph);
            // Entries with the probe's head but smaller keys (rare: a tie on 16 bytes).
            let start = i + c.entries[i..]
                .iter()
                .zip(&c.heads[i..])
                .take_while(|(e, &h)| below(h, &e.0, ph, prefix))
                .count();
            let n = c.entries[start..]
                .iter()
                .take_while(|e| e.0.as_slice().starts_with(prefix))
                .count();
            if n == 0 {
                break;
            }
            let old_len = c.entries.len();
            let dir = Arc::make_mut(&mut self.dir);
            let chunk = Arc::make_mut(&mut dir.chunks[ci]);
            taken.extend(chunk.entries.drain(start..start + n));
            chunk.heads.drain(start..start + n);
            self.len -= n;
            if chunk.entries.is_empty() {
                dir.chunks.remove(ci);
                dir.last_heads.remove(ci);
            } else {
                if let Some(&h) = chunk.heads.last() {
                    dir.last_heads[ci] = h;
                }
                if start + n < old_len {
                    break;
                }
                ci += 1;
            }
        }
        taken
    }

    /// Keeps the entries for which `f` returns true (`f` may change the value).
    pub(super) fn retain(&mut self, f: &mut dyn FnMut(&[u8], &mut SmallBytes) -> bool) {
        let mut all: Vec<Entry> = Vec::with_capacity(self.len);
        for c in &self.dir.chunks {
            for (k, v) in &c.entries {
                let mut v = v.clone();
                if f(k.as_slice(), &mut v) {
                    all.push((k.clone(), v));
                }
            }
        }
        let overlaps_index = self.overlaps_index;
        *self = Run::from_sorted(&all);
        self.overlaps_index = overlaps_index;
    }

    /// Judges up to `want` entries with keys above `after` in key order, removing or rewriting what `judge`
    /// says (chunks are copied only when one of their entries changes); returns how many were judged and
    /// the last key judged.
    pub(super) fn ttl_step(
        &mut self,
        after: Option<&[u8]>,
        want: usize,
        judge: &mut dyn FnMut(&[u8]) -> TtlVerdict,
    ) -> (usize, Option<SmallBytes>) {
        let mut judged = 0;
        let mut last: Option<SmallBytes> = None;
        let mut ci = match after {
            None => 0,
            Some(a) => self
                .dir
                .chunks
                .partition_point(|c| c.entries.last().is_some_and(|e| e.0.as_slice() <= a)),
        };
        while judged < want && ci < self.dir.chunks.len() {
            let c = &self.dir.chunks[ci];
            let start = match last.as_ref().map(SmallBytes::as_slice).or(after) {
                None => 0,
                Some(a) => c.entries.partition_point(|e| e.0.as_slice() <= a),
            };
            let end = c.entries.len().min(start + (want - judged));
            let verdicts: Vec<TtlVerdict> = c.entries[start..end]
                .iter()
                .map(|e| judge(e.1.as_slice()))
                .collect();
            if end > start {
                last = Some(c.entries[end - 1].0.clone());
            }
            judged += end - start;
            if verdicts.iter().all(|v| *v == TtlVerdict::Keep) {
                ci += 1;
                continue;
            }
            let dir = Arc::make_mut(&mut self.dir);
            let chunk = Arc::make_mut(&mut dir.chunks[ci]);
            for (i, verdict) in verdicts.into_iter().enumerate().rev() {
                let at = start + i;
                match verdict {
                    TtlVerdict::Keep => {}
                    TtlVerdict::Replace(v) => chunk.entries[at].1.set(&v),
                    TtlVerdict::Remove => {
                        chunk.entries.remove(at);
                        chunk.heads.remove(at);
                        self.len -= 1;
                    }
                }
            }
            match chunk.heads.last() {
                Some(&h) => {
                    dir.last_heads[ci] = h;
                    ci += 1;
                }
                None => {
                    dir.chunks.remove(ci);
                    dir.last_heads.remove(ci);
                }
            }
        }
        (judged, last)
    }
}

/// The first 16 bytes of `key` as a big-endian integer, zero padded: ordering by it, then by the bytes, is
/// byte order.
#[inline]
pub(super) fn sort_prefix(key: &[u8]) -> u128 {
    let mut b = [0u8; 16];
    let n = key.len().min(16);
    b[..n].copy_from_slice(&key[..n]);
    u128::from_be_bytes(b)
}
