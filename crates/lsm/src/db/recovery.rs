//! WAL replay at open: point-in-time recovery across the whole sequence of logs (`design/durability.md`).
//!
//! Replay reads the logs oldest first and stops at the first record that is not whole; nothing after it is
//! applied, in that log or a later one. A torn tail of the newest log is a write a crash cut off: normal and
//! silent. Anything else (damage, or a torn record before the end of the newest log) fails the open under
//! [`WalRecovery::Strict`]; under [`WalRecovery::PointInTime`] the writes before it are recovered and the
//! rest is dropped and reported ([`RecoveryReport::dropped`]).

use std::path::{Path, PathBuf};

use crate::batch::WriteBatch;
use crate::options::WalRecovery;
use crate::storage::Storage;
use crate::version::Version;
use crate::wal::{self, WalEnd};
use crate::{Location, LsmError};

/// What opening recovered from the write-ahead logs ([`Db::recovery_report`](super::Db::recovery_report)).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecoveryReport {
    /// WAL files read.
    pub logs: usize,
    /// Write batches replayed from them.
    pub records: u64,
    /// Bytes of the newest log's torn tail (a write a crash cut off), ignored.
    pub torn_tail_bytes: u64,
    /// What point-in-time recovery dropped at a damaged record (`None`: nothing).
    pub dropped: Option<DroppedWrites>,
}

/// The part of the logs that [`WalRecovery::PointInTime`] dropped: everything from a damaged record on.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DroppedWrites {
    /// The log holding the damaged record.
    pub file: PathBuf,
    /// Where the damaged record starts in it.
    pub offset: u64,
    /// What is wrong there.
    pub detail: String,
    /// Bytes dropped: the rest of that log and every later log.
    pub bytes: u64,
    /// Later logs dropped whole.
    pub later_logs: usize,
    /// Write batches dropped that could still be read (those of the later logs; the records after the
    /// damage in the same log cannot be framed, so the true count may be higher).
    pub records_readable: u64,
}

/// The outcome of [`replay_wals`].
pub(super) struct Replay {
    /// The batches to apply, in log order: (first seqno, batch).
    pub batches: Vec<(u64, WriteBatch)>,
    /// What was read and dropped.
    pub report: RecoveryReport,
    /// The largest seqno of any batch read, dropped ones included (never to be reused).
    pub max_seqno_seen: u64,
}

/// The last seqno of a batch starting at `seq`.
fn last_seqno(seq: u64, b: &WriteBatch) -> u64 {
    (seq + b.ops.len() as u64).saturating_sub(1)
}

/// Reads WAL files `logs` (ascending numbers) of `dir` and decides what to replay under `mode`.
pub(super) fn replay_wals(
    storage: &dyn Storage,
    dir: &Path,
    logs: &[u64],
    mode: WalRecovery,
) -> Result<Replay, LsmError> {
    let mut out = Replay {
        batches: Vec::new(),
        report: RecoveryReport {
            logs: logs.len(),
            ..RecoveryReport::default()
        },
        max_seqno_seen: 0,
    };
    for (i, n) in logs.iter().enumerate() {
        let path = wal::wal_path(dir, *n);
        let contents = wal::read_wal(storage, &path)?;
        for (seq, b, _) in contents.batches {
            out.max_seqno_seen = out.max_seqno_seen.max(last_seqno(seq, &b));
            out.report.records += 1;
            out.batches.push((seq, b));
        }
        let newest = i + 1 == logs.len();
        let (offset, detail) = match contents.end {
            WalEnd::Clean => continue,
            WalEnd::Torn { offset } if newest => {
                out.report.torn_tail_bytes = contents.len - offset;
                continue;
            }
            WalEnd::Torn { offset } => (
                offset,
                "record cut off, but a newer log follows (only the newest log may end torn)"
                    .to_string(),
            ),
            WalEnd::Damaged { offset, detail } => (offset, detail),
        };
        let file = path.to_path_buf();
        if mode == WalRecovery::Strict {
            return Err(LsmError::DamagedLog {
                at: Location::at(file, offset),
                detail,
            });
        }
        let mut dropped = DroppedWrites {
            file,
            offset,
            detail,
            bytes: contents.len - offset,
            later_logs: logs.len() - i - 1,
            records_readable: 0,
        };
        for later in &logs[i + 1..] {
            let c = wal::read_wal(storage, &wal::wal_path(dir, *later))?;
            dropped.bytes += c.len;
            dropped.records_readable += c.batches.len() as u64;
            for (seq, b, _) in &c.batches {
                out.max_seqno_seen = out.max_seqno_seen.max(last_seqno(*seq, b));
            }
        }
        tracing::warn!(
            file = %dropped.file.display(),
            offset = dropped.offset,
            detail = %dropped.detail,
            bytes = dropped.bytes,
            later_logs = dropped.later_logs,
            records_readable = dropped.records_readable,
            "point-in-time WAL recovery dropped everything from a damaged record on"
        );
        out.report.dropped = Some(dropped);
        break;
    }
    Ok(out)
}

/// After point-in-time recovery dropped writes: checks that no live SST holds a seqno above the last one
/// recovered, which would make the recovered state no moment's state (an ingestion after the dropped
/// writes, for example).
pub(super) fn check_point_in_time(replay: &Replay, version: &Version) -> Result<(), LsmError> {
    let Some(dropped) = &replay.report.dropped else {
        return Ok(());
    };
    let Some(recovered) = replay.batches.last().map(|(s, b)| last_seqno(*s, b)) else {
        // Nothing recovered from the logs: the recovery point is the SSTs' own state.
        return Ok(());
    };
    for (_, f) in version.files() {
        if f.info.max_seqno > recovered {
            return Err(LsmError::RecoveryPointBehindSst {
                at: Location::at(&dropped.file, dropped.offset),
                recovered,
                sst: f.info.number,
                sst_seqno: f.info.max_seqno,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::batch::WriteBatch;
    use crate::db::Db;
    use crate::options::{Options, WalRecovery};
    use crate::wal::{wal_path, WalWriter};
    use crate::LsmError;

    /// An empty database in `dir` (a manifest naming log number 0, so every log is replayed).
    fn empty_db(dir: &std::path::Path) {
        Db::open(dir, Options::default()).unwrap().close().unwrap();
    }

    /// An empty database in `dir`, then WAL 1 (keys `a-0..a-2`, seqnos 1..=3) and WAL 2 (keys `b-0..b-2`,
    /// seqnos 4..=6).
    fn two_logs(dir: &std::path::Path) {
        empty_db(dir);
        let mut seq = 1;
        for (number, prefix) in [(1, "a"), (2, "b")] {
            let mut w = WalWriter::create(&crate::storage::OsStorage, dir, number, true).unwrap();
            for i in 0..3 {
                let mut b = WriteBatch::new();
                b.put(format!("{prefix}-{i}").as_bytes(), b"value");
                w.append(&b.encode(seq)).unwrap();
                seq += 1;
            }
        }
    }

    /// Flips one bit inside the first occurrence of `needle` in `path`.
    fn damage(path: &std::path::Path, needle: &[u8]) {
        let mut bytes = std::fs::read(path).unwrap();
        let at = bytes
            .windows(needle.len())
            .position(|w| w == needle)
            .unwrap();
        bytes[at] ^= 0x01;
        std::fs::write(path, bytes).unwrap();
    }

    #[test]
    fn damage_in_the_middle_of_an_older_log_is_an_error_not_a_silent_gap() {
        let dir = tempfile::tempdir().unwrap();
        two_logs(dir.path());
        damage(&wal_path(dir.path(), 1), b"a-1");
        let res = Db::open(dir.path(), Options::default());
        match res {
            Err(LsmError::DamagedLog { at, .. }) => {
                assert!(at.file.ends_with("000001.log"), "{at}");
                assert!(at.offset > Some(0), "{at}");
            }
            Err(e) => panic!("unexpected error {e}"),
            Ok(db) => {
                let got: Vec<bool> = ["a-0", "a-1", "a-2", "b-0"]
                    .iter()
                    .map(|k| db.get(k.as_bytes()).unwrap().is_some())
                    .collect();
                panic!(
                    "opened with a gap in WAL 1 and no error; a-0, a-1, a-2, b-0 present: {got:?}"
                );
            }
        }
    }

    fn point_in_time() -> Options {
        Options {
            wal_recovery: WalRecovery::PointInTime,
            ..Options::default()
        }
    }

    #[test]
    fn point_in_time_recovery_applies_nothing_after_the_gap_and_reports_it() {
        let dir = tempfile::tempdir().unwrap();
        two_logs(dir.path());
        let log2 = std::fs::metadata(wal_path(dir.path(), 2)).unwrap().len();
        let log1 = std::fs::metadata(wal_path(dir.path(), 1)).unwrap().len();
        damage(&wal_path(dir.path(), 1), b"a-1");
        let db = Db::open(dir.path(), point_in_time()).unwrap();
        let present: Vec<&str> = ["a-0", "a-1", "a-2", "b-0", "b-1", "b-2"]
            .into_iter()
            .filter(|k| db.get(k.as_bytes()).unwrap().is_some())
            .collect();
        assert_eq!(present, ["a-0"]);
        let r = db.recovery_report();
        assert_eq!(r.records, 1);
        let d = r.dropped.as_ref().unwrap();
        assert!(d.file.ends_with("000001.log"));
        assert_eq!(d.later_logs, 1);
        assert_eq!(d.records_readable, 3);
        assert_eq!(d.bytes, log1 - d.offset + log2);
        // A write after recovery gets a seqno above every dropped one, and survives a reopen.
        db.put(b"c", b"1").unwrap();
        db.close().unwrap();
        let db = Db::open(dir.path(), Options::default()).unwrap();
        assert!(db.get(b"c").unwrap().is_some());
        assert!(db.get(b"b-0").unwrap().is_none());
        assert_eq!(db.recovery_report().dropped, None);
    }

    #[test]
    fn a_torn_tail_of_the_newest_log_is_silent_but_of_an_older_log_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        two_logs(dir.path());
        let p2 = wal_path(dir.path(), 2);
        let len = std::fs::metadata(&p2).unwrap().len();
        let f = std::fs::OpenOptions::new().write(true).open(&p2).unwrap();
        f.set_len(len - 3).unwrap();
        drop(f);
        let copy = tempfile::tempdir().unwrap();
        empty_db(copy.path());
        for n in [1, 2] {
            std::fs::copy(wal_path(dir.path(), n), wal_path(copy.path(), n)).unwrap();
        }
        let db = Db::open(dir.path(), Options::default()).unwrap();
        assert!(db.get(b"b-1").unwrap().is_some());
        assert!(db.get(b"b-2").unwrap().is_none());
        assert!(db.recovery_report().torn_tail_bytes > 0);
        assert_eq!(db.recovery_report().dropped, None);
        drop(db);
        // The same cut in the older log, with a newer log after it.
        let p1 = wal_path(copy.path(), 1);
        let len = std::fs::metadata(&p1).unwrap().len();
        let f = std::fs::OpenOptions::new().write(true).open(&p1).unwrap();
        f.set_len(len - 3).unwrap();
        drop(f);
        assert!(matches!(
            Db::open(copy.path(), Options::default()),
            Err(LsmError::DamagedLog { .. })
        ));
        let db = Db::open(copy.path(), point_in_time()).unwrap();
        assert!(db.get(b"a-1").unwrap().is_some());
        assert!(db.get(b"a-2").unwrap().is_none());
        assert!(db.get(b"b-0").unwrap().is_none());
    }

    #[test]
    fn point_in_time_recovery_refuses_when_an_sst_holds_writes_after_the_gap() {
        let dir = tempfile::tempdir().unwrap();
        two_logs(dir.path());
        damage(&wal_path(dir.path(), 2), b"b-1");
        // An SST (as an ingestion would leave) holding seqno 100, after the gap at seqno 5.
        {
            let mut b = WriteBatch::new();
            b.put(b"later", b"x");
            let mut w = WalWriter::create(&crate::storage::OsStorage, dir.path(), 3, true).unwrap();
            w.append(&b.encode(100)).unwrap();
        }
        let db = Db::open(dir.path(), Options::default());
        assert!(matches!(db, Err(LsmError::DamagedLog { .. })));
        // Replay the third log alone into an SST first, then put the damaged logs back.
        let scratch = tempfile::tempdir().unwrap();
        empty_db(scratch.path());
        std::fs::rename(wal_path(dir.path(), 3), wal_path(scratch.path(), 3)).unwrap();
        let db = Db::open(scratch.path(), Options::default()).unwrap();
        db.close().unwrap();
        for e in std::fs::read_dir(dir.path()).unwrap() {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_owned();
            if p.extension().is_some_and(|x| x == "log") {
                std::fs::rename(&p, scratch.path().join(name)).unwrap();
            }
        }
        // Logs 1 and 2 are numbered below the manifest's log number now; renumber them above every file.
        let mut top = 0;
        for e in std::fs::read_dir(scratch.path()).unwrap() {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            let digits: String = name.chars().filter(char::is_ascii_digit).collect();
            if name.ends_with(".log") && !["000001.log", "000002.log"].contains(&name.as_str()) {
                std::fs::remove_file(&p).unwrap();
            }
            top = top.max(digits.parse::<u64>().unwrap_or(0));
        }
        for (n, to) in [(1, top + 10), (2, top + 11)] {
            std::fs::rename(wal_path(scratch.path(), n), wal_path(scratch.path(), to)).unwrap();
        }
        match Db::open(scratch.path(), point_in_time()) {
            Err(LsmError::RecoveryPointBehindSst {
                recovered,
                sst_seqno,
                ..
            }) => {
                assert_eq!(recovered, 4);
                assert_eq!(sst_seqno, 100);
            }
            Err(e) => panic!("unexpected error {e}"),
            Ok(_) => panic!("recovered to a point an SST is already past"),
        }
    }
}
