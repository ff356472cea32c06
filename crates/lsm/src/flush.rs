//! Writing SST files: the shared output builder (used by flush, compaction and ingestion) and the flush of
//! one immutable memtable into an L0 file.

use std::sync::Arc;

use super::ikey;
use super::inner::DbInner;
use super::memtable::MemTable;
use super::rangedel::{self, RangeDelCollector, PROP_RANGE_DELS};
use super::row_cache::EngineRows;
use super::sst::PropertiesCollector;
use super::sst::{SstReader, SstWriter};
use super::version::{sst_path, FileInfo, FileMeta};
use super::{Location, LsmError};

/// Writes a sorted stream of internal keys into one or more SST files, splitting at `target_size` but
/// never inside the versions of one user key. Dropped without [`finish`](Self::finish) succeeding (an error,
/// a panic), it deletes what it wrote: the file being written at once, the finished ones (never installed)
/// when their last reference goes.
/// Several property collectors as one: each sees every entry; their properties are joined.
struct Collectors(Vec<Box<dyn PropertiesCollector>>);

impl PropertiesCollector for Collectors {
    fn add(&mut self, ikey: &[u8], value: &[u8]) {
        for c in &mut self.0 {
            c.add(ikey, value);
        }
    }
    fn finish(&mut self) -> Vec<(String, Vec<u8>)> {
        self.0.iter_mut().flat_map(|c| c.finish()).collect()
    }
}

pub(crate) struct Outputs<'a> {
    db: &'a DbInner,
    target_size: Option<u64>,
    /// Whether a new file starts where the first `partition_prefix_len` key bytes change.
    partition: bool,
    cur: Option<(SstWriter, u64)>,
    last_user_key: Vec<u8>,
    done: Vec<Arc<FileMeta>>,
}

impl<'a> Outputs<'a> {
    /// Outputs of `db` that start a new file past `target_size` bytes (None: a single file) and, with
    /// `partition`, where the first [`Options::partition_prefix_len`](crate::Options) key bytes change.
    pub fn new(db: &'a DbInner, target_size: Option<u64>, partition: bool) -> Self {
        Self {
            db,
            target_size,
            partition,
            cur: None,
            last_user_key: Vec::new(),
            done: Vec::new(),
        }
    }

    /// Adds one entry (internal keys strictly ascending).
    pub fn add(&mut self, ikey_bytes: &[u8], value: &[u8]) -> Result<(), LsmError> {
        let uk = ikey::user_key(ikey_bytes);
        if let (Some((w, _)), Some(t)) = (&self.cur, self.target_size) {
            if w.estimated_size() >= t && uk != self.last_user_key.as_slice() {
                self.finish_current()?;
            }
        }
        let p = if self.partition {
            self.db.opts.partition_prefix_len
        } else {
            0
        };
        if p > 0
            && self.cur.is_some()
            && uk.get(..p.min(uk.len()))
                != self.last_user_key.get(..p.min(self.last_user_key.len()))
        {
            self.finish_current()?;
        }
        if self.cur.is_none() {
            let number = self.db.new_file_number();
            let mut collectors: Vec<Box<dyn PropertiesCollector>> =
                vec![Box::new(RangeDelCollector::default())];
            if let Some(c) = self
                .db
                .opts
                .compaction_filter_factory
                .as_ref()
                .filter(|f| f.is_active())
                .and_then(|f| f.properties_collector())
            {
                collectors.push(c);
            }
            let w = SstWriter::create_on(
                &self.db.opts.storage,
                &sst_path(&self.db.dir, number),
                self.db.opts.sst.clone(),
                Some(Box::new(Collectors(collectors))),
            )?;
            self.cur = Some((w, number));
        }
        if let Some((w, _)) = &mut self.cur {
            w.add(ikey_bytes, value)?;
        }
        if uk != self.last_user_key.as_slice() {
            self.last_user_key.clear();
            self.last_user_key.extend_from_slice(uk);
        }
        Ok(())
    }

    fn finish_current(&mut self) -> Result<(), LsmError> {
        if let Some((w, number)) = self.cur.take() {
            let path = sst_path(&self.db.dir, number);
            let opened = w
                .finish()
                .and_then(|meta| open_file(self.db, number, meta.file_size));
            match opened {
                Ok(f) => self.done.push(f),
                Err(e) => {
                    // Not part of the tree: the half-written (or unreadable) file goes.
                    let _ = self.db.opts.storage.remove(&path);
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Finishes the last file and returns all files written (their directory entries are made durable
    /// before a manifest record names them: `State::log_and_apply`).
    pub fn finish(mut self) -> Result<Vec<Arc<FileMeta>>, LsmError> {
        self.finish_current()?;
        Ok(std::mem::take(&mut self.done))
    }
}

impl Drop for Outputs<'_> {
    fn drop(&mut self) {
        if let Some((w, _)) = self.cur.take() {
            let _ = w.abandon();
        }
        for f in &self.done {
            f.mark_obsolete();
        }
    }
}

/// Opens SST `number` of the database and builds its shared metadata.
pub(crate) fn open_file(
    db: &DbInner,
    number: u64,
    size_hint: u64,
) -> Result<Arc<FileMeta>, LsmError> {
    open_recorded(db, number, size_hint, None)
}

/// Opens SST `number` as the manifest recorded it: with `recorded` bounds, the file is read only inside
/// them and its key range is the recorded (bounded) one; a recorded smallest sequence number below its
/// entries' is kept.
pub(crate) fn open_recorded(
    db: &DbInner,
    number: u64,
    size_hint: u64,
    recorded: Option<&FileInfo>,
) -> Result<Arc<FileMeta>, LsmError> {
    let path = sst_path(&db.dir, number);
    let reader = SstReader::open_placed(
        &*db.opts.storage,
        &path,
        crate::cache::file_key(db.cache_owner, number),
        Arc::clone(&db.cache),
        db.opts.sst_metadata,
    )?;
    let props = reader.properties();
    let range_dels = match props.user.iter().find(|(k, _)| k == PROP_RANGE_DELS) {
        Some((_, v)) => rangedel::decode(v).map_err(|d| LsmError::Corruption {
            at: Location::file(&path),
            detail: format!("range tombstone property: {d}"),
        })?,
        None => Vec::new(),
    };
    let size = match reader.file_size() {
        0 => size_hint,
        s => s,
    };
    // A recorded smallest seqno below the entries' is a capture's file counted with the L0 run below it
    // (`FileMeta::joined_below`): kept, so that L0's runs are counted as before the reopen.
    let min_seqno = recorded.map_or(props.min_seqno, |r| r.min_seqno.min(props.min_seqno));
    let info = match recorded.filter(|r| r.bounds.is_some()) {
        Some(r) => FileInfo {
            number,
            size,
            smallest: r.smallest.clone(),
            largest: r.largest.clone(),
            min_seqno,
            max_seqno: props.max_seqno,
            bounds: r.bounds.clone(),
        },
        None => FileInfo {
            number,
            size,
            smallest: props.smallest.clone(),
            largest: props.largest.clone(),
            min_seqno,
            max_seqno: props.max_seqno,
            bounds: None,
        },
    };
    Ok(Arc::new(FileMeta::new(
        info,
        reader,
        range_dels,
        path,
        Arc::clone(&db.cache),
        db.row_cache.as_ref().map(EngineRows::file_rows),
        db.opts.storage.clone(),
    )))
}

/// Writes a memtable into one L0 file (none if it is empty), not cut at
/// [`Options::partition_prefix_len`](crate::Options::partition_prefix_len) boundaries: a flush is one sorted
/// run, and one file keeps L0's file count, open readers and a checkpoint's objects at one per flush.
///
/// With a merge operator, each run of consecutive merge operands of one user key that no live snapshot splits
/// is written as one operand (`partial_merge`, oldest first, at the newest operand's seqno), as RocksDB's flush
/// does: a list read then finds one entry per flushed memtable instead of one per append. Not done when the
/// memtable holds a range tombstone (it may hide some operands of a run and not others), when a compaction
/// filter is configured (it must see each operand as written, e.g. to drop expired list elements one by one),
/// or when the operator declines (`None`: the operands are written as they are).
pub(crate) fn write_memtable(db: &DbInner, mem: &MemTable) -> Result<Vec<Arc<FileMeta>>, LsmError> {
    let mut out = Outputs::new(db, None, false);
    let op = match &db.opts.merge_operator {
        Some(op)
            if db
                .opts
                .compaction_filter_factory
                .as_ref()
                .is_none_or(|f| !f.is_active())
                && mem.with_range_dels(|t| t.is_empty()) =>
        {
            Some(Arc::clone(op))
        }
        _ => None,
    };
    let Some(op) = op else {
        mem.try_for_each(|k, v| out.add(k, v))?;
        return out.finish();
    };
    let mut snaps = db.snapshots.seqnos();
    snaps.sort_unstable();
    let stripe = |seq: u64| snaps.partition_point(|s| *s < seq);
    // The pending run: (internal key, value) of consecutive operands of one user key in one stripe, newest first.
    let mut run: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    let mut run_stripe = 0usize;
    let flush_run =
        |run: &mut Vec<(Vec<u8>, Vec<u8>)>, out: &mut Outputs| -> Result<(), LsmError> {
            if run.len() >= 2 {
                if let Some((newest, _)) = run.first() {
                    let ops: Vec<&[u8]> = run.iter().rev().map(|(_, v)| v.as_slice()).collect();
                    if let Some(merged) = op.partial_merge(ikey::user_key(newest), &ops) {
                        out.add(newest, &merged)?;
                        run.clear();
                        return Ok(());
                    }
                }
            }
            for (k, v) in run.drain(..) {
                out.add(&k, &v)?;
            }
            Ok(())
        };
    mem.try_for_each(|k, v| {
        let p = ikey::parse(k).ok_or_else(|| LsmError::Corruption {
            at: Location::file("<memtable>"),
            detail: format!("malformed internal key {k:?}"),
        })?;
        let joins = p.kind == ikey::ValueKind::Merge
            && run.first().is_some_and(|(rk, _)| {
                ikey::user_key(rk) == p.user_key && stripe(p.seqno) == run_stripe
            });
        if !joins {
            flush_run(&mut run, &mut out)?;
        }
        if p.kind == ikey::ValueKind::Merge {
            if run.is_empty() {
                run_stripe = stripe(p.seqno);
            }
            run.push((k.to_vec(), v.to_vec()));
            Ok(())
        } else {
            out.add(k, v)
        }
    })?;
    flush_run(&mut run, &mut out)?;
    out.finish()
}
