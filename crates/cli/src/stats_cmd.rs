//! `keyed-state stats DIR`: an LSM directory's files, bytes and entries per level and per state, read-only.
//!
//! It writes, creates and locks nothing (`keyed_state_lsm::inspect_dir`): on a directory another process
//! holds open it does not wait for that process's `LOCK` and shows the version the manifest records when
//! it is read.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use keyed_state_lsm::storage::OsStorage;
use keyed_state_lsm::{inspect_dir, DirStats, LsmError};
use serde_json::json;

/// Bytes of the state id in front of every key the LSM backend writes.
const STATE_ID_LEN: usize = 2;

/// Why `stats` could not describe a directory.
#[derive(Debug, thiserror::Error)]
pub enum StatsError {
    /// Nothing at the path.
    #[error("no such directory: {}", path.display())]
    NoDirectory {
        /// The path given.
        path: PathBuf,
    },
    /// The path is a file or something else than a directory.
    #[error("{} is not a directory", path.display())]
    NotADirectory {
        /// The path given.
        path: PathBuf,
    },
    /// A directory holding no database: no `CURRENT` and no engine file.
    #[error("{} is not an LSM directory: it holds no CURRENT and no engine file (NNNNNN.sst, NNNNNN.log, MANIFEST-NNNNNN)", path.display())]
    NotAnLsmDirectory {
        /// The path given.
        path: PathBuf,
    },
    /// Engine files without the `CURRENT` that names the manifest.
    #[error("{} has no CURRENT but holds {} engine file(s) ({}): a damaged database", path.display(), found.len(), found.join(", "))]
    MissingCurrent {
        /// The path given.
        path: PathBuf,
        /// The engine files it holds.
        found: Vec<String>,
    },
    /// The engine could not read the directory (a damaged manifest or SST, an I/O error), naming the file.
    #[error(transparent)]
    Engine(LsmError),
}

/// Reads `dir` (see the module documentation).
pub fn stats(dir: &Path) -> Result<DirStats, StatsError> {
    match std::fs::metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(StatsError::NoDirectory {
                path: dir.to_path_buf(),
            })
        }
        Ok(m) if !m.is_dir() => {
            return Err(StatsError::NotADirectory {
                path: dir.to_path_buf(),
            })
        }
        _ => {}
    }
    inspect_dir(&OsStorage, dir).map_err(|e| match e {
        LsmError::MissingCurrent { found, .. } => StatsError::MissingCurrent {
            path: dir.to_path_buf(),
            found,
        },
        LsmError::Io { path, source }
            if source.kind() == std::io::ErrorKind::NotFound && path == dir.join("CURRENT") =>
        {
            StatsError::NotAnLsmDirectory {
                path: dir.to_path_buf(),
            }
        }
        e => StatsError::Engine(e),
    })
}

/// What the files below L0 (and L0 files within one state) hold of one state id.
#[derive(Default)]
struct StateFigures {
    files: usize,
    bytes: u64,
    entries: u64,
    smallest: Vec<u8>,
    largest: Vec<u8>,
}

/// Groups the files by the state id in front of their keys (the LSM backend's layout); files whose keys
/// span several states (L0 flushes hold every state) are counted apart.
fn by_state(s: &DirStats) -> (BTreeMap<u16, StateFigures>, usize, u64) {
    let mut states: BTreeMap<u16, StateFigures> = BTreeMap::new();
    let (mut spanning, mut spanning_bytes) = (0, 0);
    let id = |k: &[u8]| -> Option<u16> {
        k.get(..STATE_ID_LEN)
            .map(|b| u16::from_be_bytes([b[0], b[1]]))
    };
    for f in &s.files {
        match (id(&f.smallest), id(&f.largest)) {
            (Some(a), Some(b)) if a == b => {
                let st = states.entry(a).or_default();
                if st.files == 0 || f.smallest < st.smallest {
                    st.smallest = f.smallest.clone();
                }
                if st.files == 0 || f.largest > st.largest {
                    st.largest = f.largest.clone();
                }
                st.files += 1;
                st.bytes += f.size;
                st.entries += f.entries;
            }
            _ => {
                spanning += 1;
                spanning_bytes += f.size;
            }
        }
    }
    (states, spanning, spanning_bytes)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The text report.
pub fn render_text(dir: &Path, s: &DirStats) -> String {
    let mut out = String::new();
    let mut line = |l: String| {
        out.push_str(&l);
        out.push('\n');
    };
    line(format!("directory\t{}", dir.display()));
    line(format!(
        "manifest\t{}\t{} bytes",
        s.manifest.0, s.manifest.1
    ));
    for (name, bytes) in &s.wals {
        line(format!("wal\t{name}\t{bytes} bytes"));
    }
    if !s.obsolete.is_empty() {
        line(format!(
            "obsolete\t{} file(s)\t{} bytes",
            s.obsolete.len(),
            s.obsolete.iter().map(|o| o.1).sum::<u64>()
        ));
    }
    line("level\tfiles\tbytes\tentries\tsorted runs".into());
    for (i, l) in s.levels.iter().enumerate() {
        line(format!(
            "L{i}\t{}\t{}\t{}\t{}",
            l.files, l.bytes, l.entries, l.sorted_runs
        ));
    }
    line(format!(
        "total\t{}\t{}\t{}\t{}",
        s.files.len(),
        s.sst_bytes(),
        s.estimated_keys(),
        s.sorted_runs()
    ));
    line(format!("estimated keys\t{}", s.estimated_keys()));
    line(format!(
        "total size\t{} bytes (SSTs, manifest and write-ahead logs)",
        s.total_bytes()
    ));
    line(format!("last sequence number\t{}", s.last_seqno));
    let (states, spanning, spanning_bytes) = by_state(s);
    line("state id\tfiles\tbytes\tentries\tsmallest key\tlargest key".into());
    for (id, st) in &states {
        line(format!(
            "{id}\t{}\t{}\t{}\t{}\t{}",
            st.files,
            st.bytes,
            st.entries,
            hex(&st.smallest),
            hex(&st.largest)
        ));
    }
    if spanning > 0 {
        line(format!(
            "several states\t{spanning}\t{spanning_bytes}\t-\t-\t-"
        ));
    }
    out
}

/// The JSON report.
pub fn render_json(dir: &Path, s: &DirStats) -> serde_json::Value {
    let (states, spanning, spanning_bytes) = by_state(s);
    json!({
        "directory": dir.display().to_string(),
        "manifest": {"name": s.manifest.0, "bytes": s.manifest.1},
        "wals": s.wals.iter().map(|(n, b)| json!({"name": n, "bytes": b})).collect::<Vec<_>>(),
        "obsolete": s.obsolete.iter().map(|(n, b)| json!({"name": n, "bytes": b})).collect::<Vec<_>>(),
        "levels": s.levels.iter().enumerate().map(|(i, l)| json!({
            "level": i, "files": l.files, "bytes": l.bytes, "entries": l.entries, "sorted_runs": l.sorted_runs,
        })).collect::<Vec<_>>(),
        "files": s.files.iter().map(|f| json!({
            "level": f.level, "number": f.number, "bytes": f.size, "entries": f.entries,
            "tombstones": f.tombstones, "merge_operands": f.merge_operands,
            "range_tombstones": f.range_tombstones, "smallest_key": hex(&f.smallest),
            "largest_key": hex(&f.largest), "min_seqno": f.min_seqno, "max_seqno": f.max_seqno,
        })).collect::<Vec<_>>(),
        "states": states.iter().map(|(id, st)| json!({
            "state_id": id, "files": st.files, "bytes": st.bytes, "entries": st.entries,
            "smallest_key": hex(&st.smallest), "largest_key": hex(&st.largest),
        })).collect::<Vec<_>>(),
        "files_spanning_states": {"files": spanning, "bytes": spanning_bytes},
        "sst_bytes": s.sst_bytes(),
        "estimated_keys": s.estimated_keys(),
        "sorted_runs": s.sorted_runs(),
        "total_bytes": s.total_bytes(),
        "last_seqno": s.last_seqno,
    })
}
