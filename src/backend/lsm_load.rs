//! Restore into the LSM backend: entries arrive key group by key group and are buffered per state as sorted
//! runs; full buffers go to a loader thread that bulk-loads them ([`Db::ingest_sorted`], or
//! [`Db::ingest_sorted_runs`] in two halves on two threads for a large chunk: SST files written directly)
//! while the restore goes on decoding the next entries.
//!
//! Order is what makes this correct: one loader thread ingests the chunks in the order they were handed
//! over, every chunk of a state lies after the chunks before it (the backend checks each entry against the
//! last one buffered or handed over), and an entry out of order, written with a plain `put`, waits until the
//! loader has drained, so that it is newer than every ingested entry. The backend's other `&mut` operations
//! drain the loader first too; `finish_load` ends a restore.
//!
//! Memory: the loader holds one batch while one more waits in the channel and the backend fills a third;
//! each holds about the hand-over threshold of key and value bytes (in vectors of up to twice that capacity)
//! plus 16 bytes of offsets per entry. Chunks come back cleared for reuse during a restore and are freed when
//! it finishes.

use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::error::{Error, Result};
use keyed_state_lsm::Db;

/// A chunk with at least this many entries and bytes is ingested as two runs, in parallel.
const SPLIT_MIN_ENTRIES: usize = 4096;
const SPLIT_MIN_BYTES: usize = 1 << 20;

/// Buffered entries of one state, back to back (`key | value` each), with no allocation per entry.
#[derive(Default)]
pub(crate) struct LoadChunk {
    data: Vec<u8>,
    /// Per entry: where its key ends and where its value ends in `data`.
    ends: Vec<(usize, usize)>,
}

impl LoadChunk {
    fn clear(&mut self) {
        self.data.clear();
        self.ends.clear();
    }

    /// Bulk-loads the chunk (ascending keys); a large chunk as two halves written by two threads.
    fn ingest(&self, db: &Db) -> Result<()> {
        let n = self.ends.len();
        if n < SPLIT_MIN_ENTRIES || self.data.len() < SPLIT_MIN_BYTES {
            db.ingest_sorted(self.entries(0..n))?;
        } else {
            db.ingest_sorted_runs(vec![self.entries(0..n / 2), self.entries(n / 2..n)])?;
        }
        Ok(())
    }

    /// The entries `range` of the chunk as `(key, value)` pairs.
    fn entries(
        &self,
        range: std::ops::Range<usize>,
    ) -> impl Iterator<Item = (&[u8], &[u8])> + Send + '_ {
        let data = &self.data;
        let ends = self.ends.get(range.clone()).unwrap_or_default();
        let mut start = match range.start {
            0 => 0,
            i => self.ends.get(i - 1).map_or(0, |e| e.1),
        };
        ends.iter().map(move |&(key_end, value_end)| {
            // `push` is the only writer of the offsets.
            debug_assert!(start <= key_end && key_end <= value_end && value_end <= data.len());
            let entry = (
                data.get(start..key_end).unwrap_or_default(),
                data.get(key_end..value_end).unwrap_or_default(),
            );
            start = value_end;
            entry
        })
    }
}

/// The sorted run being collected for one state.
#[derive(Default)]
pub(crate) struct LoadRun {
    chunk: LoadChunk,
    /// The last engine key handed over to the loader for this state, to keep runs ascending.
    last: Option<Vec<u8>>,
}

impl LoadRun {
    /// The last buffered key.
    fn last_key(&self) -> Option<&[u8]> {
        let ends = &self.chunk.ends;
        let n = ends.len();
        let start = match n {
            0 => return None,
            1 => 0,
            _ => ends[n - 2].1,
        };
        self.chunk.data.get(start..ends[n - 1].0)
    }

    /// Whether `key` comes after everything buffered or handed over for this state.
    pub(crate) fn accepts(&self, key: &[u8]) -> bool {
        match self.last_key() {
            Some(k) => k < key,
            None => self.last.as_deref().is_none_or(|l| l < key),
        }
    }

    /// Buffers one entry (which [`accepts`](Self::accepts) said is in order).
    pub(crate) fn push(&mut self, key: &[u8], value: &[u8]) {
        let c = &mut self.chunk;
        c.data.extend_from_slice(key);
        let key_end = c.data.len();
        c.data.extend_from_slice(value);
        c.ends.push((key_end, c.data.len()));
    }

    /// Takes the buffered entries (if any), leaving `spare` in their place and remembering the last key.
    fn take(&mut self, spare: &mut Option<LoadChunk>) -> Option<LoadChunk> {
        let last = self.last_key()?.to_vec();
        self.last = Some(last);
        Some(std::mem::replace(
            &mut self.chunk,
            spare.take().unwrap_or_default(),
        ))
    }

    /// Forgets the last key handed over and frees the buffers (the restore is complete).
    pub(crate) fn finish(&mut self) {
        self.last = None;
        self.chunk = LoadChunk::default();
    }

    fn is_empty(&self) -> bool {
        self.chunk.ends.is_empty()
    }
}

/// The loader thread and its channels (started by the first hand-over of a restore, joined by
/// [`drain`](Loader::drain)).
#[derive(Default)]
pub(crate) struct Loader {
    tx: Option<SyncSender<Vec<LoadChunk>>>,
    /// Chunks the loader has ingested, cleared, for reuse (their memory is already faulted in).
    spares: Option<Receiver<LoadChunk>>,
    handle: Option<JoinHandle<Result<()>>>,
}

impl Loader {
    /// Hands every run's buffered entries to the loader, in state order (states occupy disjoint key ranges,
    /// so the order between states does not matter; within a state it does, and is kept).
    pub(crate) fn hand_over<D>(&mut self, owner: &Arc<D>, runs: &mut [LoadRun]) -> Result<()>
    where
        D: AsRef<Db> + Send + Sync + 'static,
    {
        let mut batch = Vec::new();
        for run in runs.iter_mut().filter(|r| !r.is_empty()) {
            let mut spare = self.spare();
            if let Some(chunk) = run.take(&mut spare) {
                batch.push(chunk);
            }
        }
        if batch.is_empty() {
            return Ok(());
        }
        if self.tx.is_none() {
            self.start(owner)?;
        }
        let sent = self.tx.as_ref().map(|tx| tx.send(batch));
        match sent {
            Some(Ok(())) => Ok(()),
            // The loader stopped: it failed, and `drain` returns why.
            _ => {
                self.drain()?;
                Err(Error::InvalidArgument(
                    "the restore loader stopped before taking the next batch".into(),
                ))
            }
        }
    }

    /// Waits until everything handed over is ingested; the first error of the loader, if any.
    pub(crate) fn drain(&mut self) -> Result<()> {
        self.tx = None;
        self.spares = None;
        match self.handle.take() {
            None => Ok(()),
            Some(h) => h.join().map_err(|panic| {
                Error::InvalidArgument(format!(
                    "the restore loader thread panicked: {}",
                    keyed_state_lsm::util::panic_message(&*panic)
                ))
            })?,
        }
    }

    /// Whether no loader thread is running (nothing handed over since the last drain).
    #[cfg(test)]
    pub(crate) fn is_idle(&self) -> bool {
        self.handle.is_none()
    }

    fn spare(&mut self) -> Option<LoadChunk> {
        self.spares.as_ref().and_then(|r| r.try_recv().ok())
    }

    fn start<D>(&mut self, owner: &Arc<D>) -> Result<()>
    where
        D: AsRef<Db> + Send + Sync + 'static,
    {
        // One batch queued while one is ingested (see the module documentation on memory).
        let (tx, rx) = mpsc::sync_channel::<Vec<LoadChunk>>(1);
        let (spare_tx, spare_rx) = mpsc::channel();
        let owner = Arc::clone(owner);
        let handle = std::thread::Builder::new()
            .name("ks-restore".into())
            .spawn(move || -> Result<()> {
                for batch in rx {
                    for mut chunk in batch {
                        chunk.ingest(owner.as_ref().as_ref())?;
                        chunk.clear();
                        // The backend may be gone already; then the chunk is simply dropped.
                        let _ = spare_tx.send(chunk);
                    }
                }
                Ok(())
            })
            .map_err(Error::io_at(
                "spawning the restore loader thread",
                "ks-restore",
            ))?;
        self.tx = Some(tx);
        self.spares = Some(spare_rx);
        self.handle = Some(handle);
        Ok(())
    }
}

impl Drop for Loader {
    fn drop(&mut self) {
        // A restore abandoned half way: let the loader finish what it has, so no thread writes into the
        // engine after its backend is gone (errors were the restore's to report).
        let _ = self.drain();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use keyed_state_lsm::Options;

    struct Owner(Db, tempfile::TempDir);

    impl AsRef<Db> for Owner {
        fn as_ref(&self) -> &Db {
            &self.0
        }
    }

    fn owner() -> Arc<Owner> {
        let t = tempfile::tempdir().unwrap();
        let db = Db::open(t.path(), Options::default()).unwrap();
        Arc::new(Owner(db, t))
    }

    #[test]
    fn a_failed_ingestion_is_reported_and_a_blocked_hand_over_wakes_up() {
        let o = owner();
        let mut l = Loader::default();
        let mut runs = vec![LoadRun::default()];
        // A large valid batch keeps the loader busy; the next one is out of order (pushed around `accepts`).
        for i in 0..200_000u32 {
            runs[0].push(&i.to_be_bytes(), &[7u8; 64]);
        }
        l.hand_over(&o, &mut runs).unwrap();
        runs[0].push(&[0xFF, 0xFF, 0xFF, 0xFF, 2], b"x");
        runs[0].push(&[0xFF, 0xFF, 0xFF, 0xFF, 1], b"y");
        l.hand_over(&o, &mut runs).unwrap();
        // This one blocks until the loader fails on the bad batch, then reports why.
        runs[0].push(&[0xFF, 0xFF, 0xFF, 0xFF, 9], b"z");
        let third = l.hand_over(&o, &mut runs);
        let drained = l.drain();
        let err = third.err().or(drained.err()).expect("the bad batch fails");
        assert!(err.to_string().contains("strictly ascending"), "{err}");
        assert!(l.is_idle());
    }

    #[test]
    fn dropping_the_loader_mid_restore_waits_for_it() {
        let o = owner();
        let dir = o.1.path().to_path_buf();
        let mut l = Loader::default();
        let mut runs = vec![LoadRun::default(), LoadRun::default()];
        for i in 0..100_000u32 {
            runs[1].push(&i.to_be_bytes(), &[7u8; 64]);
        }
        l.hand_over(&o, &mut runs).unwrap();
        drop(o);
        drop(l);
        // The loader held the last reference: the engine closed and its temporary directory went.
        assert!(!dir.exists());
    }

    #[test]
    fn a_chunk_ingested_in_two_halves_loads_every_entry() {
        let o = owner();
        let mut l = Loader::default();
        let mut runs = vec![LoadRun::default()];
        let n = 3 * SPLIT_MIN_ENTRIES as u32;
        for i in 0..n {
            runs[0].push(&i.to_be_bytes(), &[i as u8; 300]);
        }
        assert!(runs[0].chunk.data.len() >= SPLIT_MIN_BYTES);
        // The halves meet exactly: entries n/2 - 1 and n/2 end one and start the other.
        let halves: Vec<Vec<(Vec<u8>, Vec<u8>)>> = [0..n as usize / 2, n as usize / 2..n as usize]
            .into_iter()
            .map(|r| {
                runs[0]
                    .chunk
                    .entries(r)
                    .map(|(k, v)| (k.to_vec(), v.to_vec()))
                    .collect()
            })
            .collect();
        assert_eq!(halves[0].len() + halves[1].len(), n as usize);
        assert_eq!(
            halves[0].last().map(|e| e.0.clone()),
            Some((n / 2 - 1).to_be_bytes().to_vec())
        );
        assert_eq!(
            halves[1].first().map(|e| e.0.clone()),
            Some((n / 2).to_be_bytes().to_vec())
        );
        l.hand_over(&o, &mut runs).unwrap();
        l.drain().unwrap();
        let db: &Db = o.as_ref().as_ref();
        let mut it = db.iter(keyed_state_lsm::ReadOptions::default());
        it.seek_to_first();
        let mut i = 0u32;
        while it.valid() {
            assert_eq!(it.key(), &i.to_be_bytes()[..]);
            assert_eq!(it.value(), &[i as u8; 300][..]);
            i += 1;
            it.next();
        }
        assert_eq!(i, n);
        // Two runs: at least one file each.
        assert!(db.stats().level_files.iter().sum::<usize>() >= 2);
    }

    #[test]
    fn finishing_a_run_frees_its_buffers() {
        let mut r = LoadRun::default();
        r.push(b"a", b"1");
        assert!(!r.accepts(b"a"));
        r.finish();
        assert!(r.accepts(b"a"));
        assert_eq!(r.chunk.data.capacity(), 0);
    }
}
