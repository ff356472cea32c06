//! Versions: the immutable set of SST files per level, and edits that move from one version to the next.
//!
//! Files are shared between versions through `Arc<FileMeta>`. When an edit removes a file and the edit is
//! durable in the manifest, the file is marked obsolete; it is deleted from disk when the last `Arc` drops,
//! i.e. when no version (held by the current state, an iterator, a snapshot read or a checkpoint) still
//! names it.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::bounds::KeyBounds;
use super::cache::BlockCache;
use super::coding::{put_len_prefixed_u32, put_u32, put_u64, ByteReader, DecodeError};
use super::ikey;
use super::rangedel::RangeTombstone;
use super::row_cache::FileRows;
use super::sst::SstReader;
use super::storage::StorageHandle;

/// The path of SST file `number` in `dir`.
pub(crate) fn sst_path(dir: &std::path::Path, number: u64) -> PathBuf {
    dir.join(format!("{number:06}.sst"))
}

/// What the manifest records about one SST file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FileInfo {
    /// The file number.
    pub number: u64,
    /// Size in bytes.
    pub size: u64,
    /// Smallest internal key.
    pub smallest: Vec<u8>,
    /// Largest internal key.
    pub largest: Vec<u8>,
    /// Smallest sequence number.
    pub min_seqno: u64,
    /// Largest sequence number.
    pub max_seqno: u64,
    /// The user keys `[lo, hi)` the file is read as holding (`None`: all of it). With bounds, `smallest`
    /// and `largest` are those of what the file shows inside them.
    pub bounds: Option<KeyBounds>,
}

impl FileInfo {
    /// The user key of the smallest internal key.
    pub fn smallest_user(&self) -> &[u8] {
        ikey::user_key(&self.smallest)
    }
    /// The user key of the largest internal key.
    pub fn largest_user(&self) -> &[u8] {
        ikey::user_key(&self.largest)
    }
    /// Whether the file's user-key range overlaps the closed range `[lo, hi]`.
    pub fn overlaps(&self, lo: &[u8], hi: &[u8]) -> bool {
        self.smallest_user() <= hi && lo <= self.largest_user()
    }
}

/// An open SST file shared by versions.
pub(crate) struct FileMeta {
    /// What the manifest records.
    pub info: FileInfo,
    /// The open file.
    pub reader: Arc<SstReader>,
    /// The file's range tombstones.
    pub range_dels: Vec<RangeTombstone>,
    /// Where the file is.
    pub path: PathBuf,
    obsolete: AtomicBool,
    cache: Arc<BlockCache>,
    /// The engine's rows in its row cache, if it has one: erased with the file if it had one cached.
    rows: Option<FileRows>,
    /// Whether a row of the file was cached since its rows were last erased ([`FileMeta::row_cached`]): a
    /// file without one skips the erase.
    rows_cached: AtomicBool,
    storage: StorageHandle,
}

impl FileMeta {
    /// Metadata of an open file, not obsolete.
    pub fn new(
        info: FileInfo,
        reader: Arc<SstReader>,
        range_dels: Vec<RangeTombstone>,
        path: PathBuf,
        cache: Arc<BlockCache>,
        rows: Option<FileRows>,
        storage: StorageHandle,
    ) -> Self {
        // A bounded file's tombstones reach no key outside its bounds.
        let range_dels = match &info.bounds {
            None => range_dels,
            Some(b) => range_dels.iter().filter_map(|t| b.clip(t)).collect(),
        };
        Self {
            info,
            reader,
            range_dels,
            path,
            obsolete: AtomicBool::new(false),
            cache,
            rows,
            rows_cached: AtomicBool::new(false),
            storage,
        }
    }

    /// Notes that a row of the file was cached (after the insertion: its deletion then erases the file's
    /// rows, unless an erase took the note after the insertion).
    pub fn row_cached(&self) {
        if !self.rows_cached.load(Ordering::Acquire) {
            self.rows_cached.store(true, Ordering::Release);
        }
    }

    /// The engine's rows, if the file had a row cached since its rows were last erased (the note is
    /// taken: the caller erases them, and a row cached after that notes itself again for the drop).
    pub fn take_cached_rows(&self) -> Option<&FileRows> {
        self.rows
            .as_ref()
            .filter(|_| self.rows_cached.swap(false, Ordering::AcqRel))
    }

    /// Whether the manifest records a smallest sequence number below that of the file's entries: a
    /// checkpoint capture's file counted with the sorted run below it ([`joined_run_start`]). Every other
    /// file records its entries' own range.
    pub fn joined_below(&self) -> bool {
        self.info.min_seqno < self.reader.properties().min_seqno
    }

    /// Marks the file for deletion once unreferenced (only after the manifest stopped naming it).
    pub fn mark_obsolete(&self) {
        self.obsolete.store(true, Ordering::Release);
    }
}

impl Drop for FileMeta {
    fn drop(&mut self) {
        if self.obsolete.load(Ordering::Acquire) {
            self.cache.erase_file(self.reader.file_number());
            // Queued for the background: the last holder may be a reader.
            if let Some(rows) = self.take_cached_rows() {
                rows.erase_later(self.info.number);
            }
            // Best effort: a leftover file is not named by the manifest and is removed at the next open.
            let _ = self.storage.remove(&self.path);
        }
    }
}

/// One immutable version of the tree.
#[derive(Clone)]
pub(crate) struct Version {
    /// `levels[0]` newest first; deeper levels sorted by smallest key, non-overlapping.
    pub levels: Vec<Vec<Arc<FileMeta>>>,
    /// All range tombstones of all files.
    pub range_dels: Arc<Vec<RangeTombstone>>,
    /// The sorted runs L0 holds ([`l0_runs`]): what one flush or one ingestion added counts once however
    /// many files it cut, as do the adopted pieces of one file. The L0 triggers count these, not files.
    pub l0_runs: usize,
}

/// The sorted runs among L0's `files`: the groups of files whose sequence-number ranges overlap. One
/// engine's flushes and ingestions take disjoint sequence numbers (a memtable's are all below the next
/// one's; an ingestion takes one), so each is one group, whatever it was cut into; the files of one group
/// hold disjoint keys (they were cut from one sorted stream, or are pieces of one file, or come from
/// instances owning different key groups).
pub(crate) fn l0_runs(files: &[Arc<FileMeta>]) -> usize {
    seqno_runs(
        files
            .iter()
            .map(|f| (f.info.min_seqno, f.info.max_seqno))
            .collect(),
    )
}

/// The smallest sequence number to record for a checkpoint capture's L0 files at `seqno` (every entry of
/// them at it) so that [`l0_runs`] counts them with the newest sorted run of `l0` below them (the
/// checkpoint's own flush, when it had one): that run's largest sequence number, which the recorded range
/// then overlaps. A checkpoint with the read-modify-write cache then adds one run to L0, as one without it
/// (`design/rmw-cache.md`, "One run per checkpoint"). `None`: no run below, or that run holds a joined file
/// already ([`FileMeta::joined_below`]), so that a run never holds more than one file joined to it; or an
/// L0 file's range spans `seqno` (a merge within L0 of runs from both sides of it, over other keys): the
/// files are counted with that one already, and joining them to the run below would chain two runs.
pub(crate) fn joined_run_start(l0: &[Arc<FileMeta>], seqno: u64) -> Option<u64> {
    if l0
        .iter()
        .any(|f| f.info.min_seqno <= seqno && seqno <= f.info.max_seqno)
    {
        return None;
    }
    let mut below: Vec<&Arc<FileMeta>> = l0.iter().filter(|f| f.info.max_seqno < seqno).collect();
    below.sort_by_key(|f| (f.info.min_seqno, f.info.max_seqno));
    // The newest run below: the last group of overlapping ranges in ascending order.
    let (mut start, mut end) = (0, None);
    for (i, f) in below.iter().enumerate() {
        match end {
            Some(e) if f.info.min_seqno <= e => end = Some(f.info.max_seqno.max(e)),
            _ => {
                start = i;
                end = Some(f.info.max_seqno);
            }
        }
    }
    let end = end?;
    (!below[start..].iter().any(|f| f.joined_below())).then_some(end)
}

/// The groups of overlapping `(min, max)` sequence-number ranges among `ranges`: [`l0_runs`] of files known
/// by their ranges alone.
pub(crate) fn seqno_runs(mut ranges: Vec<(u64, u64)>) -> usize {
    ranges.sort_unstable();
    let mut runs = 0;
    let mut end: Option<u64> = None;
    for (lo, hi) in ranges {
        match end {
            Some(e) if lo <= e => end = Some(e.max(hi)),
            _ => {
                runs += 1;
                end = Some(hi);
            }
        }
    }
    runs
}

impl Version {
    /// A version without files.
    pub fn empty(num_levels: usize) -> Self {
        Self {
            levels: vec![Vec::new(); num_levels],
            range_dels: Arc::new(Vec::new()),
            l0_runs: 0,
        }
    }

    /// A new version: `self` without `deleted` (level, number) plus `added` (level, file).
    pub fn apply(&self, deleted: &[(usize, u64)], added: &[(usize, Arc<FileMeta>)]) -> Version {
        let mut levels = self.levels.clone();
        for (level, number) in deleted {
            if let Some(l) = levels.get_mut(*level) {
                l.retain(|f| f.info.number != *number);
            }
        }
        for (level, f) in added {
            if let Some(l) = levels.get_mut(*level) {
                l.push(Arc::clone(f));
            }
        }
        let v = Self::from_levels(levels);
        debug_assert_eq!(v.check_invariants(), Ok(()));
        v
    }

    /// A version of these files per level, sorted as [`Version::levels`] requires.
    pub fn from_levels(mut levels: Vec<Vec<Arc<FileMeta>>>) -> Version {
        for (i, l) in levels.iter_mut().enumerate() {
            if i == 0 {
                l.sort_by(|a, b| {
                    (b.info.max_seqno, b.info.number).cmp(&(a.info.max_seqno, a.info.number))
                });
            } else {
                l.sort_by(|a, b| ikey::compare(&a.info.smallest, &b.info.smallest));
            }
        }
        let range_dels = levels
            .iter()
            .flatten()
            .flat_map(|f| f.range_dels.iter().cloned())
            .collect();
        Version {
            l0_runs: levels.first().map_or(0, |l0| l0_runs(l0)),
            levels,
            range_dels: Arc::new(range_dels),
        }
    }

    /// Checks that levels 1+ are sorted and non-overlapping by user key.
    pub fn check_invariants(&self) -> Result<(), DecodeError> {
        for (level, files) in self.levels.iter().enumerate().skip(1) {
            for w in files.windows(2) {
                if w[0].info.largest_user() >= w[1].info.smallest_user() {
                    return Err(DecodeError::FilesOverlap {
                        level,
                        first: w[0].info.number,
                        second: w[1].info.number,
                    });
                }
            }
        }
        Ok(())
    }

    /// Total bytes per level.
    pub fn level_bytes(&self) -> Vec<u64> {
        self.levels
            .iter()
            .map(|l| l.iter().map(|f| f.info.size).sum())
            .collect()
    }

    /// Files of `level` overlapping the user-key range `[lo, hi]`.
    pub fn overlapping(&self, level: usize, lo: &[u8], hi: &[u8]) -> Vec<Arc<FileMeta>> {
        self.levels
            .get(level)
            .map(|l| {
                l.iter()
                    .filter(|f| f.info.overlaps(lo, hi))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// All files.
    pub fn files(&self) -> impl Iterator<Item = (usize, &Arc<FileMeta>)> {
        self.levels
            .iter()
            .enumerate()
            .flat_map(|(i, l)| l.iter().map(move |f| (i, f)))
    }
}

/// A change from one version to the next, as recorded in the manifest.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct VersionEdit {
    /// The next file number to allocate.
    pub next_file_number: Option<u64>,
    /// The largest sequence number in use.
    pub last_seqno: Option<u64>,
    /// WALs numbered below this one are flushed and need no replay.
    pub log_number: Option<u64>,
    /// Files removed: (level, file number).
    pub deleted: Vec<(u32, u64)>,
    /// Files added: (level, file).
    pub added: Vec<(u32, FileInfo)>,
}

const TAG_NEXT_FILE: u8 = 1;
const TAG_LAST_SEQNO: u8 = 2;
const TAG_LOG_NUMBER: u8 = 3;
const TAG_DELETE: u8 = 4;
const TAG_ADD: u8 = 5;
/// An added file with bounds: [`TAG_ADD`]'s fields, then the bounds' `lo` and `hi` (length-prefixed).
/// Unbounded files keep [`TAG_ADD`], so a manifest without bounds is byte-identical to one written before
/// bounds existed, and a binary that does not know this tag rejects the manifest (an unknown tag).
const TAG_ADD_BOUNDED: u8 = 6;

impl VersionEdit {
    /// Encodes the edit as tagged fields (little-endian), see `design/lsm-engine.md`.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let u64f = |out: &mut Vec<u8>, tag: u8, v: Option<u64>| {
            if let Some(v) = v {
                out.push(tag);
                put_u64(out, v);
            }
        };
        u64f(&mut out, TAG_NEXT_FILE, self.next_file_number);
        u64f(&mut out, TAG_LAST_SEQNO, self.last_seqno);
        u64f(&mut out, TAG_LOG_NUMBER, self.log_number);
        for (level, number) in &self.deleted {
            out.push(TAG_DELETE);
            put_u32(&mut out, *level);
            put_u64(&mut out, *number);
        }
        for (level, f) in &self.added {
            out.push(if f.bounds.is_some() {
                TAG_ADD_BOUNDED
            } else {
                TAG_ADD
            });
            put_u32(&mut out, *level);
            for v in [f.number, f.size, f.min_seqno, f.max_seqno] {
                put_u64(&mut out, v);
            }
            for k in [&f.smallest, &f.largest] {
                put_len_prefixed_u32(&mut out, k);
            }
            if let Some(b) = &f.bounds {
                put_len_prefixed_u32(&mut out, &b.lo);
                put_len_prefixed_u32(&mut out, &b.hi);
            }
        }
        out
    }

    /// Decodes [`VersionEdit::encode`]'s output; never panics on arbitrary bytes.
    pub fn decode(bytes: &[u8]) -> Result<VersionEdit, DecodeError> {
        let mut r = ByteReader::new(bytes);
        let mut e = VersionEdit::default();
        while !r.is_empty() {
            let offset = r.position() as u64;
            match r.u8()? {
                TAG_NEXT_FILE => e.next_file_number = Some(r.u64()?),
                TAG_LAST_SEQNO => e.last_seqno = Some(r.u64()?),
                TAG_LOG_NUMBER => e.log_number = Some(r.u64()?),
                TAG_DELETE => {
                    let level = r.u32()?;
                    e.deleted.push((level, r.u64()?));
                }
                tag @ (TAG_ADD | TAG_ADD_BOUNDED) => {
                    let level = r.u32()?;
                    let number = r.u64()?;
                    let size = r.u64()?;
                    let min_seqno = r.u64()?;
                    let max_seqno = r.u64()?;
                    let smallest = r.len_prefixed_u32()?.to_vec();
                    let largest = r.len_prefixed_u32()?.to_vec();
                    let bounds = if tag == TAG_ADD_BOUNDED {
                        let lo = r.len_prefixed_u32()?.to_vec();
                        let hi = r.len_prefixed_u32()?.to_vec();
                        let b = KeyBounds::new(lo, hi);
                        let inside = |k: &[u8]| b.contains(ikey::user_key(k));
                        if b.is_empty() || !inside(&smallest) || !inside(&largest) {
                            return Err(DecodeError::Malformed {
                                what: "file bounds empty or not around the file's smallest and largest keys",
                                offset,
                            });
                        }
                        Some(b)
                    } else {
                        None
                    };
                    e.added.push((
                        level,
                        FileInfo {
                            number,
                            size,
                            smallest,
                            largest,
                            min_seqno,
                            max_seqno,
                            bounds,
                        },
                    ));
                }
                tag => {
                    return Err(DecodeError::BadTag {
                        what: "tag",
                        tag,
                        offset,
                    })
                }
            }
        }
        Ok(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_roundtrip() {
        let e = VersionEdit {
            next_file_number: Some(9),
            last_seqno: Some(100),
            log_number: None,
            deleted: vec![(1, 4)],
            added: vec![(
                2,
                FileInfo {
                    number: 8,
                    size: 1000,
                    smallest: b"a\0\0\0\0\0\0\x01\x01".to_vec(),
                    largest: b"z\0\0\0\0\0\0\x02\x01".to_vec(),
                    min_seqno: 1,
                    max_seqno: 2,
                    bounds: None,
                },
            )],
        };
        assert_eq!(VersionEdit::decode(&e.encode()).unwrap(), e);
        assert!(VersionEdit::decode(&[5, 1]).is_err());
    }

    fn bounded(lo: &[u8], hi: &[u8]) -> VersionEdit {
        VersionEdit {
            added: vec![(
                1,
                FileInfo {
                    number: 8,
                    size: 1000,
                    smallest: b"c\0\0\0\0\0\0\x01\x01".to_vec(),
                    largest: b"f\0\0\0\0\0\0\x02\x01".to_vec(),
                    min_seqno: 1,
                    max_seqno: 2,
                    bounds: Some(KeyBounds::new(lo.to_vec(), hi.to_vec())),
                },
            )],
            ..VersionEdit::default()
        }
    }

    #[test]
    fn a_bounded_file_round_trips_under_its_own_tag_and_an_unbounded_one_keeps_the_old_bytes() {
        let e = bounded(b"b", b"g");
        let bytes = e.encode();
        assert_eq!(bytes[0], TAG_ADD_BOUNDED);
        assert_eq!(VersionEdit::decode(&bytes).unwrap(), e);
        let mut plain = e.clone();
        plain.added[0].1.bounds = None;
        let plain_bytes = plain.encode();
        assert_eq!(plain_bytes[0], TAG_ADD);
        // The bounded record is the unbounded one plus the two keys.
        assert_eq!(&bytes[1..plain_bytes.len()], &plain_bytes[1..]);
        assert_eq!(bytes.len(), plain_bytes.len() + 4 + 1 + 4 + 1);
        for cut in 0..bytes.len() {
            assert!(VersionEdit::decode(&bytes[..cut]).is_err() || cut == 0);
        }
    }

    #[test]
    fn bounds_that_are_empty_or_do_not_enclose_the_files_keys_are_rejected() {
        for (lo, hi) in [
            (&b"g"[..], &b"b"[..]),
            (b"c", b"c"),
            (b"d", b"g"),
            (b"b", b"f"),
        ] {
            let err = VersionEdit::decode(&bounded(lo, hi).encode()).unwrap_err();
            assert!(
                matches!(err, DecodeError::Malformed { .. }),
                "{lo:?} {hi:?}: {err}"
            );
        }
    }
}
