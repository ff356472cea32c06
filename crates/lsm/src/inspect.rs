//! Read-only inspection of a database directory ([`inspect_dir`]): what the current manifest names, level
//! by level, with each file's properties, and the sizes of the manifest and the write-ahead logs.
//!
//! It creates, modifies and locks nothing: it reads `CURRENT`, the manifest it names, and the footer,
//! index and properties blocks of every live SST (mapped read-only). So it works on a directory that an
//! open [`Db`](crate::Db) holds (another process, or this one), without waiting for its `LOCK`: it sees the
//! version the manifest records at the time it reads it. If a compaction of that database deletes a file
//! between the manifest read and the file read, the whole inspection starts again (at most
//! [`INSPECT_ATTEMPTS`] times).

use std::collections::BTreeMap;
use std::path::Path;

use super::cache::BlockCache;
use super::io::io_err;
use super::manifest;
use super::sst::SstReader;
use super::storage::Storage;
use super::version::{sst_path, FileInfo};
use super::{ikey, KeyBounds, LsmError};

/// How many times [`inspect_dir`] reads the manifest again when a file it names disappeared meanwhile.
pub const INSPECT_ATTEMPTS: usize = 5;

/// One live SST file.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SstFileStats {
    /// Its level.
    pub level: usize,
    /// Its file number (`NNNNNN.sst`).
    pub number: u64,
    /// Its size in bytes.
    pub size: u64,
    /// Smallest user key of what the database reads of it.
    pub smallest: Vec<u8>,
    /// Largest user key of what the database reads of it.
    pub largest: Vec<u8>,
    /// The user keys `[lo, hi)` the database reads of it (`None`: all of it).
    pub bounds: Option<KeyBounds>,
    /// Entries of the file (puts, merge operands and tombstones).
    pub entries: u64,
    /// Point tombstones among them.
    pub tombstones: u64,
    /// Merge operands among them.
    pub merge_operands: u64,
    /// Range tombstones of the file.
    pub range_tombstones: u64,
    /// Sum of the entries' internal key lengths.
    pub raw_key_bytes: u64,
    /// Sum of the entries' value lengths.
    pub raw_value_bytes: u64,
    /// Smallest sequence number.
    pub min_seqno: u64,
    /// Largest sequence number.
    pub max_seqno: u64,
}

/// One level.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LevelStats {
    /// Live files.
    pub files: usize,
    /// Their bytes.
    pub bytes: u64,
    /// Their entries.
    pub entries: u64,
    /// Sorted runs: at L0, the groups of files whose sequence-number ranges overlap (one per flush or
    /// ingestion, as the L0 triggers count them); below, 1 for a level holding files.
    pub sorted_runs: usize,
}

/// A database directory as its current manifest describes it ([`inspect_dir`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DirStats {
    /// The manifest `CURRENT` names: its file name and size.
    pub manifest: (String, u64),
    /// Write-ahead logs the manifest has not marked flushed: file name and size, oldest first.
    pub wals: Vec<(String, u64)>,
    /// Engine files the manifest does not name (obsolete logs, SSTs and manifests that the next open or
    /// a running database deletes): file name and size.
    pub obsolete: Vec<(String, u64)>,
    /// Per level, from L0 to the deepest level holding files.
    pub levels: Vec<LevelStats>,
    /// Every live SST, by level and then key order (L0: by file number).
    pub files: Vec<SstFileStats>,
    /// The largest sequence number the manifest and the files record.
    pub last_seqno: u64,
}

impl DirStats {
    /// Bytes of every live SST.
    pub fn sst_bytes(&self) -> u64 {
        self.levels.iter().map(|l| l.bytes).sum()
    }

    /// Entries of every live SST: an estimate of the keys (it counts overwritten versions, tombstones and
    /// merge operands, and not what the write-ahead logs hold).
    pub fn estimated_keys(&self) -> u64 {
        self.levels.iter().map(|l| l.entries).sum()
    }

    /// Sorted runs of the whole tree (what a point read may probe).
    pub fn sorted_runs(&self) -> usize {
        self.levels.iter().map(|l| l.sorted_runs).sum()
    }

    /// Bytes of the manifest, the logs and the live SSTs.
    pub fn total_bytes(&self) -> u64 {
        self.manifest.1 + self.wals.iter().map(|w| w.1).sum::<u64>() + self.sst_bytes()
    }
}

/// Whether `name` is an engine file (`NNNNNN.sst`, `NNNNNN.log`, `MANIFEST-NNNNNN`): its number then.
fn engine_file_number(name: &str) -> Option<u64> {
    name.strip_suffix(".sst")
        .or_else(|| name.strip_suffix(".log"))
        .or_else(|| name.strip_prefix("MANIFEST-"))
        .and_then(|n| n.parse::<u64>().ok())
}

/// Describes the database in `dir` of `storage` without changing anything (see the module documentation).
///
/// Errors: `dir` missing or unreadable is [`LsmError::Io`] on `dir`; a directory without `CURRENT` is
/// [`LsmError::MissingCurrent`] when it holds engine files (a damaged database) and [`LsmError::Io`] with
/// `NotFound` on `dir/CURRENT` when it holds none (not a database); a damaged `CURRENT`, manifest or SST is
/// [`LsmError::Corruption`] or [`LsmError::DamagedLog`] naming the file.
pub fn inspect_dir(storage: &dyn Storage, dir: &Path) -> Result<DirStats, LsmError> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        match inspect_once(storage, dir) {
            Err(LsmError::Io { path, source })
                if source.kind() == std::io::ErrorKind::NotFound
                    && path.parent() == Some(dir)
                    && attempt < INSPECT_ATTEMPTS
                    && path
                        .file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| engine_file_number(n).is_some()) =>
            {
                continue
            }
            other => return other,
        }
    }
}

fn inspect_once(storage: &dyn Storage, dir: &Path) -> Result<DirStats, LsmError> {
    if !storage.exists(dir) {
        return Err(io_err(dir, std::io::ErrorKind::NotFound.into()));
    }
    let names = storage.list(dir).map_err(|e| io_err(dir, e))?;
    let Some(current) = manifest::read_current(storage, dir)? else {
        let mut found: Vec<String> = names
            .iter()
            .filter(|n| engine_file_number(n).is_some())
            .cloned()
            .collect();
        if found.is_empty() {
            return Err(io_err(
                &dir.join("CURRENT"),
                std::io::ErrorKind::NotFound.into(),
            ));
        }
        found.sort();
        return Err(LsmError::MissingCurrent {
            at: super::Location::file(dir),
            found,
        });
    };
    let mpath = manifest::manifest_path(dir, current);
    let bytes = storage.read(&mpath).map_err(|e| io_err(&mpath, e))?;
    let edits = manifest::decode_manifest(&bytes, &mpath)?;
    let mut live: BTreeMap<u64, (usize, FileInfo)> = BTreeMap::new();
    let (mut last_seqno, mut log_number) = (0u64, 0u64);
    for e in edits {
        for (l, n) in &e.deleted {
            if live.get(n).is_some_and(|(fl, _)| *fl == *l as usize) {
                live.remove(n);
            }
        }
        for (l, f) in e.added {
            live.insert(f.number, (l as usize, f));
        }
        last_seqno = last_seqno.max(e.last_seqno.unwrap_or(0));
        log_number = log_number.max(e.log_number.unwrap_or(0));
    }
    let cache = BlockCache::new(1 << 20);
    let mut files = Vec::with_capacity(live.len());
    for (number, (level, info)) in &live {
        let path = sst_path(dir, *number);
        let reader = SstReader::open_on(storage, &path, *number, std::sync::Arc::clone(&cache))?;
        let p = reader.properties();
        last_seqno = last_seqno.max(info.max_seqno);
        files.push(SstFileStats {
            level: *level,
            number: *number,
            size: reader.file_size(),
            smallest: ikey::user_key(&info.smallest).to_vec(),
            largest: ikey::user_key(&info.largest).to_vec(),
            bounds: info.bounds.clone(),
            entries: p.entries,
            tombstones: p.tombstones,
            merge_operands: p.merge_operands,
            range_tombstones: p.range_tombstones,
            raw_key_bytes: p.raw_key_bytes,
            raw_value_bytes: p.raw_value_bytes,
            min_seqno: info.min_seqno,
            max_seqno: info.max_seqno,
        });
    }
    files.sort_by(|a, b| {
        a.level.cmp(&b.level).then_with(|| {
            if a.level == 0 {
                a.number.cmp(&b.number)
            } else {
                a.smallest.cmp(&b.smallest)
            }
        })
    });
    let depth = files.iter().map(|f| f.level + 1).max().unwrap_or(1);
    let mut levels = vec![LevelStats::default(); depth];
    for f in &files {
        let l = &mut levels[f.level];
        l.files += 1;
        l.bytes += f.size;
        l.entries += f.entries;
    }
    for (i, l) in levels.iter_mut().enumerate() {
        l.sorted_runs = if i == 0 {
            l0_runs(files.iter().filter(|f| f.level == 0))
        } else {
            usize::from(l.files > 0)
        };
    }
    let size = |name: &str| -> Result<u64, LsmError> {
        let p = dir.join(name);
        storage.file_size(&p).map_err(|e| io_err(&p, e))
    };
    let manifest_name = format!("MANIFEST-{current:06}");
    let manifest = (manifest_name.clone(), size(&manifest_name)?);
    let (mut wals, mut obsolete) = (Vec::new(), Vec::new());
    let mut sorted = names;
    sorted.sort();
    for name in sorted {
        let Some(num) = engine_file_number(&name) else {
            continue;
        };
        let keep = if name.ends_with(".log") {
            num >= log_number
        } else if name.ends_with(".sst") {
            live.contains_key(&num)
        } else {
            num == current
        };
        // A file a running database deleted since the listing is left out.
        let Ok(bytes) = size(&name) else { continue };
        if name.ends_with(".log") && keep {
            wals.push((name, bytes));
        } else if !keep {
            obsolete.push((name, bytes));
        }
    }
    Ok(DirStats {
        manifest,
        wals,
        obsolete,
        levels,
        files,
        last_seqno,
    })
}

/// The sorted runs among L0 files (as the engine's `Version` counts them).
fn l0_runs<'a>(files: impl Iterator<Item = &'a SstFileStats>) -> usize {
    crate::version::seqno_runs(files.map(|f| (f.min_seqno, f.max_seqno)).collect())
}
