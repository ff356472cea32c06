//! The manifest: an append-only log of version-edit records, and the `CURRENT` pointer.
//!
//! A manifest is a record log ([`record_log`](super::record_log), [`LogKind::Manifest`]), each payload one
//! encoded version edit. A torn tail (a record a crash cut off during its append, before it was
//! acknowledged) is ignored, and the next open writes a fresh manifest without it. Anything else that is not
//! a whole record (a damaged file header, length, checksum or payload), or a record that does not decode, is
//! an [`LsmError::DamagedLog`] naming the file and offset. `CURRENT` holds the manifest's file name and is
//! replaced by write-to-temp, fsync, rename, fsync-directory.

use super::io::io_err;
use std::path::{Path, PathBuf};

use super::storage::{NewFile, Storage};

use super::record_log::{file_header, frame, read_file_header, read_frame, Frame, LogKind};
use super::version::VersionEdit;
use super::{Location, LsmError};

/// The path of manifest `number` in `dir`.
pub(crate) fn manifest_path(dir: &Path, number: u64) -> PathBuf {
    dir.join(format!("MANIFEST-{number:06}"))
}

/// Decodes every edit of a manifest's bytes (format 1 or 2); `file` names it in errors.
pub(crate) fn decode_manifest(buf: &[u8], file: &Path) -> Result<Vec<VersionEdit>, LsmError> {
    let damaged = |offset: usize, detail: String| LsmError::DamagedLog {
        at: Location::at(file, offset as u64),
        detail,
    };
    let (format, mut pos) = read_file_header(buf, LogKind::Manifest).map_err(|d| damaged(0, d))?;
    let mut edits = Vec::new();
    loop {
        match read_frame(buf, pos, format) {
            Frame::End | Frame::Torn => return Ok(edits),
            Frame::Damaged(what) => return Err(damaged(pos, format!("manifest record: {what}"))),
            Frame::Record(payload, next) => {
                let edit = VersionEdit::decode(payload)
                    .map_err(|d| damaged(pos, format!("manifest record does not decode: {d}")))?;
                edits.push(edit);
                pos = next;
            }
        }
    }
}

/// Reads `CURRENT`: the manifest number, `None` if there is no `CURRENT`.
pub(crate) fn read_current(storage: &dyn Storage, dir: &Path) -> Result<Option<u64>, LsmError> {
    let path = dir.join("CURRENT");
    let text = match storage.read(&path) {
        Ok(t) => String::from_utf8_lossy(&t).into_owned(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err(&path, e)),
    };
    let name = text.trim();
    name.strip_prefix("MANIFEST-")
        .and_then(|n| n.parse::<u64>().ok())
        .map(Some)
        .ok_or_else(|| LsmError::Corruption {
            at: Location::file(path),
            detail: format!("CURRENT does not name a manifest: {name:?}"),
        })
}

/// Points `CURRENT` at manifest `number` atomically.
pub(crate) fn set_current(storage: &dyn Storage, dir: &Path, number: u64) -> Result<(), LsmError> {
    let tmp = dir.join("CURRENT.tmp");
    let mut f = storage
        .create_or_truncate(&tmp)
        .map_err(|e| io_err(&tmp, e))?;
    f.write_all(format!("MANIFEST-{number:06}\n").as_bytes())
        .map_err(|e| io_err(&tmp, e))?;
    f.sync().map_err(|e| io_err(&tmp, e))?;
    let cur = dir.join("CURRENT");
    storage.rename(&tmp, &cur).map_err(|e| io_err(&cur, e))?;
    super::io::sync_dir_on(storage, dir)
}

/// Appends edits to a manifest file, syncing each.
pub(crate) struct ManifestWriter {
    file: NewFile,
    path: PathBuf,
    /// The manifest's file number.
    pub number: u64,
    /// Bytes written so far.
    pub size: u64,
    /// A write or sync failed: what the file holds past `size` is unknown, so nothing more is appended (the
    /// database rolls to a fresh manifest instead).
    failed: bool,
}

impl ManifestWriter {
    /// Creates manifest `number` in `dir` starting with `base` (the full state), and makes it current.
    pub fn create(
        storage: &dyn Storage,
        dir: &Path,
        number: u64,
        base: &VersionEdit,
    ) -> Result<Self, LsmError> {
        let path = manifest_path(dir, number);
        let file = storage.create(&path).map_err(|e| io_err(&path, e))?;
        let mut w = ManifestWriter {
            file,
            path,
            number,
            size: 0,
            failed: false,
        };
        let header = file_header(LogKind::Manifest);
        w.file.write_all(&header).map_err(|e| io_err(&w.path, e))?;
        w.size = header.len() as u64;
        w.append(base)?;
        // The manifest's entry and those of the files it names (the SSTs of a WAL replay, which reach the
        // manifest through this base record, not `log_and_apply`) are durable before CURRENT points here.
        super::io::sync_dir_on(storage, dir)?;
        set_current(storage, dir, number)?;
        Ok(w)
    }

    /// Appends one edit durably. After a failed write or sync every later append fails: a failed fsync is
    /// never retried on the same file as if it had succeeded.
    pub fn append(&mut self, edit: &VersionEdit) -> Result<(), LsmError> {
        if self.failed {
            return Err(io_err(
                &self.path,
                std::io::Error::other("an earlier write or sync of this manifest failed"),
            ));
        }
        let rec = frame(&edit.encode());
        let res = self.file.write_all(&rec).and_then(|_| self.file.sync());
        if let Err(e) = res {
            self.failed = true;
            return Err(io_err(&self.path, e));
        }
        self.size += rec.len() as u64;
        Ok(())
    }

    /// Whether a write or sync of this manifest failed.
    pub fn failed(&self) -> bool {
        self.failed
    }
}

/// Decodes manifest bytes (as found in a `MANIFEST-NNNNNN` file) and returns the number of version-edit
/// records, or a typed error naming `file`. Never panics on arbitrary input (fuzzed).
#[cfg(any(test, feature = "test-util"))]
pub fn validate_manifest(buf: &[u8], file: &Path) -> Result<usize, LsmError> {
    decode_manifest(buf, file).map(|edits| edits.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::version::FileInfo;

    #[test]
    fn every_single_bit_flip_is_an_error_and_every_cut_a_torn_tail() {
        let edit = VersionEdit {
            next_file_number: Some(10),
            last_seqno: Some(99),
            log_number: Some(3),
            deleted: vec![(0, 4)],
            added: vec![(
                1,
                FileInfo {
                    number: 7,
                    size: 123,
                    smallest: b"a\0\0\0\0\0\0\x01\x01".to_vec(),
                    largest: b"b\0\0\0\0\0\0\x02\x01".to_vec(),
                    min_seqno: 1,
                    max_seqno: 2,
                    bounds: None,
                },
            )],
        };
        let mut buf = file_header(LogKind::Manifest).to_vec();
        buf.extend_from_slice(&frame(&edit.encode()));
        buf.extend_from_slice(&frame(&VersionEdit::default().encode()));
        assert_eq!(validate_manifest(&buf, Path::new("m")).unwrap(), 2);
        for i in 0..buf.len() {
            for bit in 0..8 {
                let mut b = buf.clone();
                b[i] ^= 1 << bit;
                assert!(
                    validate_manifest(&b, Path::new("m")).is_err(),
                    "byte {i} bit {bit}"
                );
            }
            // A cut anywhere is a torn tail: the whole records before it.
            assert!(validate_manifest(&buf[..i], Path::new("m")).unwrap() <= 2);
        }
    }

    /// The format-2 fixture (written before files had bounds) decodes, names no bounds, and this build
    /// encodes its records to exactly the same bytes: manifests without bounds are unchanged.
    #[test]
    fn a_format_2_manifest_without_bounds_decodes_and_reencodes_byte_for_byte() {
        let buf = include_bytes!("../../../tests/fixtures/lsm-db-v2/MANIFEST-000002");
        let edits = decode_manifest(buf, Path::new("MANIFEST-000002")).unwrap();
        assert!(!edits.is_empty());
        assert!(edits
            .iter()
            .flat_map(|e| &e.added)
            .all(|(_, f)| f.bounds.is_none()));
        let mut again = file_header(LogKind::Manifest).to_vec();
        for e in &edits {
            again.extend_from_slice(&frame(&e.encode()));
        }
        assert_eq!(&again[..], &buf[..]);
    }

    /// A record whose tag the decoder does not know (what a bounded file's record is to a build without
    /// bounds) makes the manifest a damaged-log error naming the tag: never a file read whole.
    #[test]
    fn a_record_with_an_unknown_tag_is_a_damaged_log_naming_it() {
        let mut buf = file_header(LogKind::Manifest).to_vec();
        buf.extend_from_slice(&frame(&[7, 0, 0, 0, 0]));
        match validate_manifest(&buf, Path::new("m")) {
            Err(LsmError::DamagedLog { detail, .. }) => {
                assert!(detail.contains("unknown value 7"), "{detail}")
            }
            other => panic!("{other:?}"),
        }
    }
}
