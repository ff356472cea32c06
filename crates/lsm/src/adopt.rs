//! Adopting SST files: a database directory built from existing files (downloaded or linked from a
//! checkpoint), at the levels they had, with a manifest written for them. The files are used as they are;
//! a file may be given bounds, and the database then reads only its keys inside them.

use std::path::Path;
use std::sync::Arc;

use super::bounds::{bounded_extent, KeyBounds};
use super::cache::BlockCache;
use super::manifest::ManifestWriter;
use super::rangedel::{self, RangeTombstone, PROP_RANGE_DELS};
use super::sst::SstReader;
use super::storage::Storage;
use super::version::{sst_path, FileInfo, VersionEdit};
use super::{Location, LsmError};

/// What a checkpoint restore needs to know about one SST file before adopting it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SstSummary {
    /// Smallest user key.
    pub smallest: Vec<u8>,
    /// Largest user key.
    pub largest: Vec<u8>,
    /// Every range tombstone of the file: `[start, end)` user keys.
    pub range_dels: Vec<(Vec<u8>, Vec<u8>)>,
    /// Largest sequence number in the file (its entries and tombstones).
    pub max_seqno: u64,
}

fn read_info(
    storage: &dyn Storage,
    path: &Path,
    number: u64,
) -> Result<(FileInfo, Vec<(Vec<u8>, Vec<u8>)>), LsmError> {
    let (info, _, dels) = open_info(storage, path, number)?;
    Ok((info, dels.into_iter().map(|t| (t.start, t.end)).collect()))
}

/// Opens the file and reads what the manifest records of it (unbounded) and its range tombstones.
fn open_info(
    storage: &dyn Storage,
    path: &Path,
    number: u64,
) -> Result<(FileInfo, Arc<SstReader>, Vec<RangeTombstone>), LsmError> {
    let reader = SstReader::open_on(storage, path, number, BlockCache::new(1 << 20))?;
    let props = reader.properties();
    let dels: Vec<RangeTombstone> = match props.user.iter().find(|(k, _)| k == PROP_RANGE_DELS) {
        Some((_, v)) => rangedel::decode(v).map_err(|d| LsmError::Corruption {
            at: Location::file(path),
            detail: format!("range tombstone property: {d}"),
        })?,
        None => Vec::new(),
    };
    let max_seqno = dels.iter().map(|t| t.seqno).fold(props.max_seqno, u64::max);
    let info = FileInfo {
        number,
        size: reader.file_size(),
        smallest: props.smallest.clone(),
        largest: props.largest.clone(),
        min_seqno: props.min_seqno,
        max_seqno,
        bounds: None,
    };
    Ok((info, reader, dels))
}

/// What the manifest records of the file at `path` read inside `bounds`: its bounded key range, or no
/// bounds when everything of it lies inside anyway; `None` when nothing of it lies inside.
fn bounded_info(
    storage: &dyn Storage,
    path: &Path,
    number: u64,
    bounds: Option<&KeyBounds>,
) -> Result<Option<FileInfo>, LsmError> {
    let (mut info, reader, dels) = open_info(storage, path, number)?;
    let Some(b) = bounds else {
        return Ok(Some(info));
    };
    let all_inside = b.contains(info.smallest_user())
        && b.contains(info.largest_user())
        && dels
            .iter()
            .all(|t| b.lo <= t.start && t.end.as_slice() <= b.hi.as_slice());
    if all_inside {
        return Ok(Some(info));
    }
    Ok(
        bounded_extent(&reader, b, &dels)?.map(|(smallest, largest)| {
            info.smallest = smallest;
            info.largest = largest;
            info.bounds = Some(b.clone());
            info
        }),
    )
}

/// One file to adopt: its level, its number (the file is `NNNNNN.sst` in the directory) and the user keys
/// the database reads of it (`None`: all of it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdoptFile {
    /// The level it goes to.
    pub level: usize,
    /// Its file number.
    pub number: u64,
    /// The user keys `[lo, hi)` read of it.
    pub bounds: Option<KeyBounds>,
}

/// Opens the SST file at `path` of `storage` (checking its footer, index and properties) and summarises it:
/// what a checkpoint restore needs to know to place it before [`adopt_sst_files`].
pub fn summarize_sst(storage: &dyn Storage, path: &Path) -> Result<SstSummary, LsmError> {
    let (info, range_dels) = read_info(storage, path, 0)?;
    Ok(SstSummary {
        smallest: info.smallest_user().to_vec(),
        largest: info.largest_user().to_vec(),
        range_dels,
        max_seqno: info.max_seqno,
    })
}

/// Refuses a directory holding engine files other than the SSTs `files` names: a manifest (a database's),
/// a log (unflushed writes) or another SST would be orphaned by the manifest an adoption writes.
fn check_no_database(
    storage: &dyn Storage,
    dir: &Path,
    files: &[AdoptFile],
) -> Result<(), LsmError> {
    let names = storage.list(dir).map_err(|e| super::io::io_err(dir, e))?;
    let numbers: std::collections::BTreeSet<u64> = files.iter().map(|f| f.number).collect();
    for name in names {
        let sst = name
            .strip_suffix(".sst")
            .and_then(|n| n.parse::<u64>().ok());
        let foreign = match sst {
            Some(n) => !numbers.contains(&n),
            None => {
                name.starts_with("MANIFEST-")
                    || name
                        .strip_suffix(".log")
                        .is_some_and(|n| n.parse::<u64>().is_ok())
            }
        };
        if foreign {
            return Err(LsmError::InvalidArgument(format!(
                "adopting files into {}: it already holds {name}, which an adoption would orphan; adopt into a \
                 directory holding only the files to adopt",
                dir.display()
            )));
        }
    }
    Ok(())
}

/// Makes `dir` of `storage` a database of the SST files `files`, each already at `NNNNNN.sst` in `dir`: writes
/// a manifest naming them at their levels, so that `dir` opens as a [`Db`](crate::Db) whose last sequence
/// number is at least `last_seqno`. The files are used as they are. The database reads a bounded file only
/// inside its bounds (its key range, for the level checks, is what it holds there); a file holding nothing
/// inside its bounds is left out (and removed by the first open). Returns the number of files the manifest
/// names.
///
/// The directory must hold no database: a manifest, a log, or an SST not among `files` is
/// [`LsmError::InvalidArgument`] naming it, and nothing is written (a new manifest would orphan those
/// files, and the first open would delete them).
///
/// Fails with [`LsmError::InvalidArgument`] for a level the database does not have or empty bounds, with
/// [`LsmError::FilesOverlap`] when two files of a level 1 or deeper overlap, and with the errors of opening a
/// file ([`LsmError::Corruption`], [`LsmError::Io`]).
pub fn adopt_sst_files(
    storage: &dyn Storage,
    dir: &Path,
    files: &[AdoptFile],
    last_seqno: u64,
    num_levels: usize,
) -> Result<usize, LsmError> {
    check_no_database(storage, dir, files)?;
    let mut added = Vec::with_capacity(files.len());
    let mut max_seq = last_seqno;
    let mut max_number = 0;
    for f in files {
        let (level, number) = (f.level, f.number);
        if level >= num_levels {
            return Err(LsmError::InvalidArgument(format!(
                "file {number} at level {level}, but the database has {num_levels} levels"
            )));
        }
        if f.bounds.as_ref().is_some_and(|b| b.is_empty()) {
            return Err(LsmError::InvalidArgument(format!(
                "file {number} has empty bounds"
            )));
        }
        max_number = max_number.max(number);
        let Some(info) = bounded_info(storage, &sst_path(dir, number), number, f.bounds.as_ref())?
        else {
            continue;
        };
        max_seq = max_seq.max(info.max_seqno);
        added.push((level as u32, info));
    }
    let count = added.len();
    for level in 1..num_levels as u32 {
        let mut l: Vec<&FileInfo> = added
            .iter()
            .filter(|(lv, _)| *lv == level)
            .map(|(_, f)| f)
            .collect();
        l.sort_by(|a, b| a.smallest_user().cmp(b.smallest_user()));
        if let Some(w) = l
            .windows(2)
            .find(|w| w[0].largest_user() >= w[1].smallest_user())
        {
            return Err(LsmError::FilesOverlap {
                level: level as usize,
                first: w[0].number,
                second: w[1].number,
            });
        }
    }
    let edit = VersionEdit {
        next_file_number: Some(max_number + 2),
        last_seqno: Some(max_seq),
        log_number: Some(0),
        deleted: Vec::new(),
        added,
    };
    ManifestWriter::create(storage, dir, max_number + 1, &edit)?;
    super::io::sync_dir_on(storage, dir)?;
    Ok(count)
}
