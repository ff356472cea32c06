//! Writing SST files: the shared output builder (used by flush, compaction and ingestion) and the flush of
//! one immutable memtable into an L0 file.

use std::sync::Arc;

use super::db::DbInner;
use super::ikey;
use super::memtable::MemTable;
use super::rangedel::{self, RangeDelCollector, PROP_RANGE_DELS};
use super::sst::{SstReader, SstWriter};
use super::version::{sst_path, FileInfo, FileMeta};
use super::LsmError;

/// Writes a sorted stream of internal keys into one or more SST files, splitting at `target_size` but
/// never inside the versions of one user key.
pub(crate) struct Outputs<'a> {
    db: &'a DbInner,
    target_size: Option<u64>,
    cur: Option<(SstWriter, u64)>,
    last_user_key: Vec<u8>,
    done: Vec<Arc<FileMeta>>,
}

impl<'a> Outputs<'a> {
    pub fn new(db: &'a DbInner, target_size: Option<u64>) -> Self {
        Self {
            db,
            target_size,
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
        if self.cur.is_none() {
            let number = self.db.new_file_number();
            let w = SstWriter::create(
                &sst_path(&self.db.dir, number),
                self.db.opts.sst.clone(),
                Some(Box::new(RangeDelCollector::default())),
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
            let meta = w.finish()?;
            let f = open_file(self.db, number, meta.file_size)?;
            self.done.push(f);
        }
        Ok(())
    }

    /// Finishes the last file and returns all files written.
    pub fn finish(mut self) -> Result<Vec<Arc<FileMeta>>, LsmError> {
        self.finish_current()?;
        Ok(std::mem::take(&mut self.done))
    }
}

/// Opens SST `number` of the database and builds its shared metadata.
pub(crate) fn open_file(
    db: &DbInner,
    number: u64,
    size_hint: u64,
) -> Result<Arc<FileMeta>, LsmError> {
    let path = sst_path(&db.dir, number);
    let reader = SstReader::open(&path, number, Arc::clone(&db.cache))?;
    let props = reader.properties();
    let range_dels = match props.user.iter().find(|(k, _)| k == PROP_RANGE_DELS) {
        Some((_, v)) => rangedel::decode(v).map_err(|d| LsmError::Corruption {
            file: path.display().to_string(),
            detail: format!("range tombstone property: {d}"),
        })?,
        None => Vec::new(),
    };
    let size = match reader.file_size() {
        0 => size_hint,
        s => s,
    };
    let info = FileInfo {
        number,
        size,
        smallest: props.smallest.clone(),
        largest: props.largest.clone(),
        min_seqno: props.min_seqno,
        max_seqno: props.max_seqno,
    };
    Ok(Arc::new(FileMeta::new(
        info,
        reader,
        range_dels,
        path,
        Arc::clone(&db.cache),
    )))
}

/// Writes a memtable into one L0 file (none if it is empty).
pub(crate) fn write_memtable(db: &DbInner, mem: &MemTable) -> Result<Vec<Arc<FileMeta>>, LsmError> {
    let mut out = Outputs::new(db, None);
    let mut err = None;
    mem.for_each(|k, v| match out.add(k, v) {
        Ok(()) => true,
        Err(e) => {
            err = Some(e);
            false
        }
    });
    if let Some(e) = err {
        return Err(e);
    }
    out.finish()
}
