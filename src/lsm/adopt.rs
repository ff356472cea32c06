//! Adopting SST files: a database directory built from existing files (downloaded or linked from a
//! checkpoint), at the levels they had, with a manifest written for them. The files are used as they are.

use std::path::Path;

use super::cache::BlockCache;
use super::manifest::ManifestWriter;
use super::rangedel::{self, PROP_RANGE_DELS};
use super::sst::SstReader;
use super::version::{sst_path, FileInfo, VersionEdit};
use super::LsmError;

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

fn read_info(path: &Path, number: u64) -> Result<(FileInfo, Vec<(Vec<u8>, Vec<u8>)>), LsmError> {
    let reader = SstReader::open(path, number, BlockCache::new(1 << 20))?;
    let props = reader.properties();
    let dels = match props.user.iter().find(|(k, _)| k == PROP_RANGE_DELS) {
        Some((_, v)) => rangedel::decode(v).map_err(|d| LsmError::Corruption {
            file: path.display().to_string(),
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
    };
    Ok((info, dels.into_iter().map(|t| (t.start, t.end)).collect()))
}

/// Opens the SST file at `path` (checking its footer, index and properties) and summarises it.
pub fn summarize(path: &Path) -> Result<SstSummary, LsmError> {
    let (info, range_dels) = read_info(path, 0)?;
    Ok(SstSummary {
        smallest: info.smallest_user().to_vec(),
        largest: info.largest_user().to_vec(),
        range_dels,
        max_seqno: info.max_seqno,
    })
}

/// Writes a manifest into `dir` naming the SST files `files` — `(level, file number)`, each already at
/// `NNNNNN.sst` in `dir` — so that `dir` opens as a database whose last sequence number is at least
/// `last_seqno`. Levels 1 and deeper must not overlap (`InvalidArgument` naming the files otherwise).
pub fn write_manifest(
    dir: &Path,
    files: &[(usize, u64)],
    last_seqno: u64,
    num_levels: usize,
) -> Result<(), LsmError> {
    let mut added = Vec::with_capacity(files.len());
    let mut max_seq = last_seqno;
    let mut max_number = 0;
    for &(level, number) in files {
        if level >= num_levels {
            return Err(LsmError::InvalidArgument(format!(
                "file {number} at level {level}, but the database has {num_levels} levels"
            )));
        }
        let (info, _) = read_info(&sst_path(dir, number), number)?;
        max_seq = max_seq.max(info.max_seqno);
        max_number = max_number.max(number);
        added.push((level as u32, info));
    }
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
            return Err(LsmError::InvalidArgument(format!(
                "files {} and {} overlap at level {level}",
                w[0].number, w[1].number
            )));
        }
    }
    let edit = VersionEdit {
        next_file_number: Some(max_number + 2),
        last_seqno: Some(max_seq),
        log_number: Some(0),
        deleted: Vec::new(),
        added,
    };
    ManifestWriter::create(&super::storage::OsStorage, dir, max_number + 1, &edit)?;
    super::io::sync_dir(dir)?;
    Ok(())
}
