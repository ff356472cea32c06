//! A RocksDB `MANIFEST` (`db/version_set.cc`, `db/version_edit.cc`, `db/log_reader.cc`): the log of
//! version edits whose replay gives the live SST files of every column family, and `CURRENT`, which names
//! the manifest in use.
//!
//! ```text
//! log file   = 32 KiB blocks; a block's tail shorter than a header is zero padding
//! record     = u32 LE masked CRC-32C (of type byte and payload) | u16 LE length | u8 type | payload
//!              type 1 full, 2 first, 3 middle, 4 last fragment of one logical record
//! logical record = one VersionEdit: varint32 tag, then the field
//!   1 comparator (len-prefixed)   2 log number   3 next file number   4 last sequence   9 prev log number
//!   10 min log number to keep     5 compact cursor (level, len-prefixed internal key)
//!   6 deleted file (varint32 level, varint64 number)
//!   7/100/102/103 new file: level, number, [102: path id], size, smallest and largest internal keys
//!       (len-prefixed), [100+: smallest and largest seqno], [103: custom fields tag | len-prefixed value
//!       until tag 1; a tag with bit 6 set that is not known must fail]
//!   200 column family id   201 column family add (name)   202 column family drop   203 max column family
//!   300 in atomic group (remaining edits)   400/401 blob files   tags with bit 13 set: len-prefixed, ignorable
//! ```
//!
//! The edits are replayed as RocksDB's `VersionBuilder` does: per column family (an edit without tag 200
//! is the default column family, id 0), deletions before additions within an edit; deleting a file that is
//! not live, or adding one that is, is corruption; a dropped column family's files are no longer live;
//! edits of an atomic group apply together, and a group the manifest ends inside is not applied. The
//! result, per column family, is each live file with its level, size, key range and sequence numbers.
//! Record checksums are verified; a truncated record is an error (a checkpoint's manifest is copied whole).
//! Every decoder returns a [`FlinkError`] naming the file and offset, never panics, and has the fuzz
//! target `flink_rocksdb_manifest`.
//!
//! Writing a manifest (for tests, benchmarks and fuzz seeds) is the child module `writer`; its
//! [`ManifestWriter`], [`EditSpec`] and [`internal_key`] are re-exported here.

use std::collections::BTreeMap;

use super::coding::{fixed64, Cursor};
use crate::snappy::crc32c;
use crate::FlinkError;
use keyed_state::Location;

mod writer;
pub use writer::{internal_key, EditSpec, ManifestWriter};

/// `log::kBlockSize`.
pub const LOG_BLOCK_SIZE: usize = 32768;
/// `log::kHeaderSize`.
const HEADER: usize = 7;
const FULL: u8 = 1;
const FIRST: u8 = 2;
const MIDDLE: u8 = 3;
const LAST: u8 = 4;
/// `crc32c::kMaskDelta`.
const MASK_DELTA: u32 = 0xa282_ead8;

// VersionEdit tags (`db/version_edit.h`).
const COMPARATOR: u32 = 1;
const LOG_NUMBER: u32 = 2;
const NEXT_FILE_NUMBER: u32 = 3;
const LAST_SEQUENCE: u32 = 4;
const COMPACT_CURSOR: u32 = 5;
const DELETED_FILE: u32 = 6;
const NEW_FILE: u32 = 7;
const PREV_LOG_NUMBER: u32 = 9;
const MIN_LOG_NUMBER_TO_KEEP: u32 = 10;
const NEW_FILE2: u32 = 100;
const NEW_FILE3: u32 = 102;
const NEW_FILE4: u32 = 103;
const COLUMN_FAMILY: u32 = 200;
const COLUMN_FAMILY_ADD: u32 = 201;
const COLUMN_FAMILY_DROP: u32 = 202;
const MAX_COLUMN_FAMILY: u32 = 203;
const IN_ATOMIC_GROUP: u32 = 300;
const BLOB_FILE_ADDITION: u32 = 400;
const BLOB_FILE_GARBAGE: u32 = 401;
const TAG_SAFE_IGNORE_MASK: u32 = 1 << 13;
// kDbId is TAG_SAFE_IGNORE_MASK + 1 (length-prefixed, ignored).
const BLOB_FILE_ADDITION_DEPRECATED: u32 = TAG_SAFE_IGNORE_MASK + 2;
const BLOB_FILE_GARBAGE_DEPRECATED: u32 = TAG_SAFE_IGNORE_MASK + 3;
const WAL_ADDITION: u32 = TAG_SAFE_IGNORE_MASK + 4;
const WAL_DELETION: u32 = TAG_SAFE_IGNORE_MASK + 5;

// NewFile4 custom tags.
const CUSTOM_TERMINATE: u32 = 1;
const CUSTOM_EPOCH_NUMBER: u32 = 13;
const CUSTOM_NON_SAFE_IGNORE_MASK: u32 = 1 << 6;
const CUSTOM_PATH_ID: u32 = CUSTOM_NON_SAFE_IGNORE_MASK + 1;

/// At most this many levels (RocksDB's `num_levels` is far smaller; a larger level is damage).
const MAX_LEVELS: u32 = 64;

/// One live SST file of a column family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveFile {
    /// The LSM level (0 holds overlapping files, newest first by epoch; 1+ hold disjoint key ranges).
    pub level: u32,
    /// The file number: the file is `{number:06}.sst`.
    pub number: u64,
    /// Its size in bytes.
    pub size: u64,
    /// The smallest internal key (user key and 8-byte trailer).
    pub smallest: Vec<u8>,
    /// The largest internal key.
    pub largest: Vec<u8>,
    /// The smallest sequence number in the file.
    pub smallest_seqno: u64,
    /// The largest sequence number in the file.
    pub largest_seqno: u64,
    /// The epoch number (order of L0 files; 0 when the manifest does not record it).
    pub epoch: u64,
}

impl LiveFile {
    /// The file's name in a RocksDB directory (`MakeTableFileName`).
    pub fn file_name(&self) -> String {
        format!("{:06}.sst", self.number)
    }

    /// The smallest user key.
    pub fn smallest_user_key(&self) -> &[u8] {
        &self.smallest[..self.smallest.len().saturating_sub(8)]
    }

    /// The largest user key.
    pub fn largest_user_key(&self) -> &[u8] {
        &self.largest[..self.largest.len().saturating_sub(8)]
    }
}

/// One column family and its live files, in RocksDB's read order: level 0 newest first (by epoch number,
/// then largest sequence number), then levels 1, 2, … by smallest key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnFamily {
    /// The column family id (0 is `default`).
    pub id: u32,
    /// The column family name (for Flink, the state name).
    pub name: String,
    /// The live files.
    pub files: Vec<LiveFile>,
}

/// A replayed `MANIFEST`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// The live column families, by id.
    pub column_families: Vec<ColumnFamily>,
    /// The comparator the manifest names, if any.
    pub comparator: Option<String>,
    /// The next file number.
    pub next_file_number: u64,
    /// The last sequence number.
    pub last_sequence: u64,
    /// Version edits replayed.
    pub edits: u64,
}

impl Manifest {
    /// The column family named `name`.
    pub fn column_family(&self, name: &str) -> Option<&ColumnFamily> {
        self.column_families.iter().find(|c| c.name == name)
    }

    /// Every live file with its column family.
    pub fn live_files(&self) -> impl Iterator<Item = (&ColumnFamily, &LiveFile)> + '_ {
        self.column_families
            .iter()
            .flat_map(|c| c.files.iter().map(move |f| (c, f)))
    }
}

/// The manifest `CURRENT` names (its content is `MANIFEST-<number>` and a newline).
pub fn read_current(data: &[u8], name: &str) -> Result<String, FlinkError> {
    let bad = |detail: String| FlinkError::ManifestCorrupt {
        at: Location::at(name, 0),
        detail,
    };
    let text = std::str::from_utf8(data)
        .map_err(|_| bad("CURRENT is not text".into()))?
        .strip_suffix('\n')
        .ok_or_else(|| bad("CURRENT does not end with a newline".into()))?;
    let number = text
        .strip_prefix("MANIFEST-")
        .ok_or_else(|| bad(format!("CURRENT names {text:?}, not a MANIFEST")))?;
    if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) || number.len() > 20 {
        return Err(bad(format!("CURRENT names {text:?}, not a MANIFEST")));
    }
    Ok(text.to_string())
}

fn unmask(masked: u32) -> u32 {
    let rot = masked.wrapping_sub(MASK_DELTA);
    rot.rotate_left(15)
}

/// Calls `f(offset, record)` with every logical record of the log file `data`, in order.
pub fn for_each_log_record(
    data: &[u8],
    name: &str,
    f: &mut dyn FnMut(u64, &[u8]) -> Result<(), FlinkError>,
) -> Result<u64, FlinkError> {
    let corrupt = |offset: usize, detail: String| FlinkError::ManifestCorrupt {
        at: Location::at(name, offset as u64),
        detail,
    };
    let mut pos = 0usize;
    let mut pending: Option<(usize, Vec<u8>)> = None;
    let mut records = 0u64;
    while pos < data.len() {
        let in_block = LOG_BLOCK_SIZE - pos % LOG_BLOCK_SIZE;
        if in_block < HEADER {
            // The writer pads a block's tail shorter than a header with zeros.
            let end = (pos + in_block).min(data.len());
            if data[pos..end].iter().any(|b| *b != 0) {
                return Err(corrupt(
                    pos,
                    "non-zero padding at the end of a block".into(),
                ));
            }
            pos = end;
            continue;
        }
        if data.len() - pos < HEADER {
            return Err(corrupt(
                pos,
                format!(
                    "{} bytes left, too few for a record header",
                    data.len() - pos
                ),
            ));
        }
        let h = &data[pos..pos + HEADER];
        let stored = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
        let len = usize::from(u16::from_le_bytes([h[4], h[5]]));
        let ty = h[6];
        if ty == 0 && len == 0 && stored == 0 {
            // Preallocated space: the rest of the file must be zeros.
            if data[pos..].iter().all(|b| *b == 0) {
                break;
            }
            return Err(corrupt(pos, "a zero record header before more data".into()));
        }
        if len > in_block - HEADER {
            return Err(corrupt(
                pos,
                format!(
                    "a record of {len} bytes runs past its 32 KiB block ({} bytes left)",
                    in_block - HEADER
                ),
            ));
        }
        let Some(payload) = data.get(pos + HEADER..pos + HEADER + len) else {
            return Err(corrupt(
                pos,
                format!(
                    "a record of {len} bytes, the file ends {} bytes after its header",
                    data.len() - pos - HEADER
                ),
            ));
        };
        let computed = crc32c(&data[pos + 6..pos + HEADER + len]);
        if !cfg!(fuzzing) && unmask(stored) != computed {
            return Err(corrupt(
                pos,
                format!(
                    "record checksum mismatch (stored {:#010x}, computed {computed:#010x})",
                    unmask(stored)
                ),
            ));
        }
        match ty {
            FULL => {
                if pending.is_some() {
                    return Err(corrupt(pos, "a full record inside a fragmented one".into()));
                }
                records += 1;
                f(pos as u64, payload)?;
            }
            FIRST => {
                if pending.is_some() {
                    return Err(corrupt(
                        pos,
                        "a first fragment inside a fragmented record".into(),
                    ));
                }
                pending = Some((pos, payload.to_vec()));
            }
            MIDDLE | LAST => {
                let Some((start, mut buf)) = pending.take() else {
                    return Err(corrupt(
                        pos,
                        "a middle or last fragment without a first one".into(),
                    ));
                };
                buf.extend_from_slice(payload);
                if ty == LAST {
                    records += 1;
                    f(start as u64, &buf)?;
                } else {
                    pending = Some((start, buf));
                }
            }
            5..=8 | 11 => {
                return Err(FlinkError::ManifestUnsupported {
                    file: name.to_string(),
                    feature: format!("recycled log records (type {ty})"),
                })
            }
            9 => {
                return Err(FlinkError::ManifestUnsupported {
                    file: name.to_string(),
                    feature: "compressed log records".into(),
                })
            }
            10 => {
                return Err(FlinkError::ManifestUnsupported {
                    file: name.to_string(),
                    feature: "user-defined timestamp size records".into(),
                })
            }
            t => {
                return Err(corrupt(
                    pos,
                    format!("record type {t} is not one of RocksDB's"),
                ))
            }
        }
        pos += HEADER + len;
    }
    if let Some((start, _)) = pending {
        return Err(corrupt(
            start,
            "the file ends inside a fragmented record".into(),
        ));
    }
    Ok(records)
}

/// One decoded version edit (the fields the replay uses).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Edit {
    comparator: Option<String>,
    next_file_number: Option<u64>,
    last_sequence: Option<u64>,
    column_family: u32,
    add_column_family: Option<String>,
    drop_column_family: bool,
    deleted: Vec<(u32, u64)>,
    added: Vec<LiveFile>,
    atomic_group_remaining: Option<u32>,
}

struct EditReader<'a> {
    c: Cursor<'a>,
    name: &'a str,
    offset: u64,
}

impl<'a> EditReader<'a> {
    fn corrupt(&self, detail: impl Into<String>) -> FlinkError {
        FlinkError::ManifestCorrupt {
            at: Location::at(self.name, self.offset),
            detail: format!("version edit: {}", detail.into()),
        }
    }

    fn v32(&mut self, what: &str) -> Result<u32, FlinkError> {
        self.c
            .varint32()
            .ok_or_else(|| self.corrupt(format!("bad {what}")))
    }

    fn v64(&mut self, what: &str) -> Result<u64, FlinkError> {
        self.c
            .varint64()
            .ok_or_else(|| self.corrupt(format!("bad {what}")))
    }

    fn slice(&mut self, what: &str) -> Result<&'a [u8], FlinkError> {
        let n = self.v32(what)? as usize;
        self.c
            .bytes(n)
            .ok_or_else(|| self.corrupt(format!("{what} of {n} bytes runs past the record")))
    }

    fn level(&mut self) -> Result<u32, FlinkError> {
        let l = self.v32("level")?;
        if l >= MAX_LEVELS {
            return Err(self.corrupt(format!("level {l}")));
        }
        Ok(l)
    }

    fn internal_key(&mut self, what: &str) -> Result<Vec<u8>, FlinkError> {
        let k = self.slice(what)?;
        if k.len() < 8 {
            return Err(self.corrupt(format!(
                "{what} of {} bytes is shorter than an internal key's trailer",
                k.len()
            )));
        }
        Ok(k.to_vec())
    }

    fn new_file(&mut self, tag: u32) -> Result<LiveFile, FlinkError> {
        let level = self.level()?;
        let number = self.v64("file number")?;
        if tag == NEW_FILE3 {
            let path_id = self.v32("path id")?;
            if path_id != 0 {
                return Err(FlinkError::ManifestUnsupported {
                    file: self.name.to_string(),
                    feature: format!("SST files in other db_paths (path id {path_id})"),
                });
            }
        }
        let size = self.v64("file size")?;
        let smallest = self.internal_key("smallest key")?;
        let largest = self.internal_key("largest key")?;
        let (smallest_seqno, largest_seqno) = if tag == NEW_FILE {
            (0, u64::MAX >> 8)
        } else {
            (
                self.v64("smallest sequence number")?,
                self.v64("largest sequence number")?,
            )
        };
        let mut epoch = 0;
        if tag == NEW_FILE4 {
            loop {
                let custom = self.v32("new-file4 custom field")?;
                if custom == CUSTOM_TERMINATE {
                    break;
                }
                let field = self.slice("new-file4 custom field")?;
                match custom {
                    CUSTOM_PATH_ID if field != [0] => {
                        return Err(FlinkError::ManifestUnsupported {
                            file: self.name.to_string(),
                            feature: format!("SST files in other db_paths (path id {field:02x?})"),
                        });
                    }
                    CUSTOM_PATH_ID => {}
                    CUSTOM_EPOCH_NUMBER => {
                        let mut c = Cursor::new(field);
                        epoch = c
                            .varint64()
                            .filter(|_| c.is_empty())
                            .ok_or_else(|| self.corrupt("bad epoch number"))?;
                    }
                    t if t & CUSTOM_NON_SAFE_IGNORE_MASK != 0 => {
                        return Err(FlinkError::ManifestUnsupported {
                            file: self.name.to_string(),
                            feature: format!("the new-file field {t} that must be understood"),
                        })
                    }
                    _ => {}
                }
            }
        }
        if smallest_seqno > largest_seqno {
            return Err(self.corrupt(format!(
                "file #{number}: smallest sequence number {smallest_seqno} above the largest {largest_seqno}"
            )));
        }
        Ok(LiveFile {
            level,
            number,
            size,
            smallest,
            largest,
            smallest_seqno,
            largest_seqno,
            epoch,
        })
    }

    fn edit(&mut self) -> Result<Edit, FlinkError> {
        let mut e = Edit::default();
        while !self.c.is_empty() {
            let tag = self.v32("tag")?;
            match tag {
                COMPARATOR => {
                    let s = self.slice("comparator name")?;
                    e.comparator = Some(String::from_utf8_lossy(s).into_owned());
                }
                LOG_NUMBER | PREV_LOG_NUMBER | MIN_LOG_NUMBER_TO_KEEP => {
                    self.v64("log number")?;
                }
                NEXT_FILE_NUMBER => e.next_file_number = Some(self.v64("next file number")?),
                LAST_SEQUENCE => e.last_sequence = Some(self.v64("last sequence number")?),
                MAX_COLUMN_FAMILY => {
                    self.v32("max column family")?;
                }
                COMPACT_CURSOR => {
                    self.level()?;
                    self.internal_key("compaction cursor")?;
                }
                DELETED_FILE => {
                    let level = self.level()?;
                    let number = self.v64("deleted file number")?;
                    e.deleted.push((level, number));
                }
                NEW_FILE | NEW_FILE2 | NEW_FILE3 | NEW_FILE4 => e.added.push(self.new_file(tag)?),
                COLUMN_FAMILY => e.column_family = self.v32("column family id")?,
                COLUMN_FAMILY_ADD => {
                    let s = self.slice("column family name")?;
                    e.add_column_family = Some(String::from_utf8_lossy(s).into_owned());
                }
                COLUMN_FAMILY_DROP => e.drop_column_family = true,
                IN_ATOMIC_GROUP => {
                    e.atomic_group_remaining = Some(self.v32("atomic group remaining entries")?)
                }
                BLOB_FILE_ADDITION
                | BLOB_FILE_GARBAGE
                | BLOB_FILE_ADDITION_DEPRECATED
                | BLOB_FILE_GARBAGE_DEPRECATED => {
                    return Err(FlinkError::ManifestUnsupported {
                        file: self.name.to_string(),
                        feature: "BlobDB blob files".into(),
                    })
                }
                WAL_ADDITION | WAL_DELETION => {
                    // Unprefixed WAL records (`WalAddition::EncodeTo`): a log number and custom
                    // fields up to a terminating tag 1; the WALs are not read.
                    self.v64("WAL number")?;
                    if tag == WAL_ADDITION {
                        loop {
                            let t = self.v32("WAL field tag")?;
                            if t == 1 {
                                break;
                            }
                            if t == 2 {
                                self.v64("WAL size")?;
                            } else {
                                return Err(self.corrupt(format!("WAL addition field {t}")));
                            }
                        }
                    }
                }
                t if t & TAG_SAFE_IGNORE_MASK != 0 => {
                    // Ignorable (kDbId, kWalAddition2, kFullHistoryTsLow, …): length-prefixed.
                    self.slice("ignorable field")?;
                }
                t => return Err(self.corrupt(format!("unknown tag {t}"))),
            }
        }
        Ok(e)
    }
}

#[derive(Default)]
struct CfState {
    name: String,
    /// file number → file.
    files: BTreeMap<u64, LiveFile>,
}

struct Builder<'a> {
    name: &'a str,
    cfs: BTreeMap<u32, CfState>,
    dropped: std::collections::BTreeSet<u32>,
    comparator: Option<String>,
    next_file_number: u64,
    last_sequence: u64,
    edits: u64,
}

impl Builder<'_> {
    fn apply(&mut self, offset: u64, e: Edit) -> Result<(), FlinkError> {
        let corrupt = |detail: String| FlinkError::ManifestCorrupt {
            at: Location::at(self.name, offset),
            detail,
        };
        self.edits += 1;
        if let Some(c) = e.comparator {
            self.comparator = Some(c);
        }
        if let Some(n) = e.next_file_number {
            self.next_file_number = n;
        }
        if let Some(s) = e.last_sequence {
            self.last_sequence = s;
        }
        let id = e.column_family;
        if let Some(name) = e.add_column_family {
            if self.cfs.contains_key(&id) {
                return Err(corrupt(format!(
                    "column family {id} ('{name}') is added twice"
                )));
            }
            self.dropped.remove(&id);
            self.cfs.insert(
                id,
                CfState {
                    name,
                    files: BTreeMap::new(),
                },
            );
        } else if e.drop_column_family {
            if id == 0 {
                // RocksDB refuses to drop the default column family, so no manifest it wrote does.
                return Err(corrupt(
                    "the default column family (0) is dropped, which RocksDB never does"
                        .to_string(),
                ));
            }
            if self.cfs.remove(&id).is_none() {
                return Err(corrupt(format!(
                    "column family {id} is dropped but does not exist"
                )));
            }
            self.dropped.insert(id);
            return Ok(());
        }
        let Some(cf) = self.cfs.get_mut(&id) else {
            if self.dropped.contains(&id) {
                // RocksDB ignores the edits of a dropped column family.
                return Ok(());
            }
            return Err(corrupt(format!(
                "an edit of column family {id}, which was never added"
            )));
        };
        for (level, number) in e.deleted {
            match cf.files.get(&number) {
                Some(f) if f.level == level => {
                    cf.files.remove(&number);
                }
                _ => {
                    return Err(corrupt(format!(
                        "deletes file #{number} from level {level} of column family '{}', where it is not",
                        cf.name
                    )))
                }
            }
        }
        for f in e.added {
            if let Some(old) = cf.files.get(&f.number) {
                return Err(corrupt(format!(
                    "adds file #{} to level {} of column family '{}', but it is already on level {}",
                    f.number, f.level, cf.name, old.level
                )));
            }
            cf.files.insert(f.number, f);
        }
        Ok(())
    }
}

/// Replays the `MANIFEST` `data` (named `name` in messages): the live files of every column family.
pub fn read_manifest(data: &[u8], name: &str) -> Result<Manifest, FlinkError> {
    let mut b = Builder {
        name,
        cfs: BTreeMap::new(),
        dropped: Default::default(),
        comparator: None,
        next_file_number: 0,
        last_sequence: 0,
        edits: 0,
    };
    b.cfs.insert(
        0,
        CfState {
            name: "default".into(),
            files: BTreeMap::new(),
        },
    );
    let mut group: Vec<(u64, Edit)> = Vec::new();
    let mut group_left: Option<u32> = None;
    for_each_log_record(data, name, &mut |offset, record| {
        let mut r = EditReader {
            c: Cursor::new(record),
            name,
            offset,
        };
        let e = r.edit()?;
        match (e.atomic_group_remaining, group_left) {
            (Some(rem), None) => {
                group_left = Some(rem);
                group.push((offset, e));
            }
            (Some(rem), Some(left)) => {
                if rem + 1 != left {
                    return Err(FlinkError::ManifestCorrupt {
                        at: Location::at(name, offset),
                        detail: format!(
                            "atomic group edit says {rem} remaining, {} expected",
                            left.saturating_sub(1)
                        ),
                    });
                }
                group_left = Some(rem);
                group.push((offset, e));
            }
            (None, Some(_)) => {
                return Err(FlinkError::ManifestCorrupt {
                    at: Location::at(name, offset),
                    detail: "an edit outside an atomic group before the group is complete".into(),
                })
            }
            (None, None) => b.apply(offset, e)?,
        }
        if group_left == Some(0) {
            group_left = None;
            for (o, e) in group.drain(..) {
                b.apply(o, e)?;
            }
        }
        Ok(())
    })?;
    // An atomic group the manifest ends inside is not applied (RocksDB's recovery drops it).
    let mut column_families = Vec::with_capacity(b.cfs.len());
    for (id, cf) in b.cfs {
        let mut files: Vec<LiveFile> = cf.files.into_values().collect();
        files.sort_by(|a, c| {
            a.level.cmp(&c.level).then_with(|| {
                if a.level == 0 {
                    (c.epoch, c.largest_seqno, c.number).cmp(&(a.epoch, a.largest_seqno, a.number))
                } else {
                    a.smallest_user_key().cmp(c.smallest_user_key())
                }
            })
        });
        // Levels 1 and up hold disjoint key ranges.
        for w in files.windows(2) {
            if w[0].level == w[1].level
                && w[0].level > 0
                && w[0].largest_user_key() >= w[1].smallest_user_key()
            {
                return Err(FlinkError::ManifestCorrupt {
                    at: Location::file(name),
                    detail: format!(
                        "files #{} and #{} of level {} of column family '{}' overlap",
                        w[0].number, w[1].number, w[0].level, cf.name
                    ),
                });
            }
        }
        column_families.push(ColumnFamily {
            id,
            name: cf.name,
            files,
        });
    }
    Ok(Manifest {
        column_families,
        comparator: b.comparator,
        next_file_number: b.next_file_number,
        last_sequence: b.last_sequence,
        edits: b.edits,
    })
}

/// The sequence number and value type of an internal key's trailer.
pub fn internal_key_trailer(ikey: &[u8]) -> Option<(u64, u8)> {
    let t = fixed64(ikey.get(ikey.len().checked_sub(8)?..)?)?;
    Some((t >> 8, (t & 0xff) as u8))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(level: u32, number: u64, lo: &[u8], hi: &[u8], seq: (u64, u64)) -> LiveFile {
        LiveFile {
            level,
            number,
            size: 1000 + number,
            smallest: internal_key(lo, seq.0, 1),
            largest: internal_key(hi, seq.1, 1),
            smallest_seqno: seq.0,
            largest_seqno: seq.1,
            epoch: number,
        }
    }

    fn add_cf(id: u32, name: &str) -> EditSpec {
        EditSpec {
            column_family: id,
            add_column_family: Some(name.into()),
            ..EditSpec::default()
        }
    }

    #[test]
    fn replay_applies_flushes_compactions_and_drops() {
        let mut w = ManifestWriter::new();
        w.comparator("leveldb.BytewiseComparator");
        w.edit(&add_cf(1, "sum"));
        w.edit(&add_cf(2, "list"));
        w.edit(&EditSpec {
            column_family: 1,
            added: vec![file(0, 10, b"a", b"m", (1, 5))],
            next_file_and_last_sequence: Some((11, 5)),
            ..EditSpec::default()
        });
        w.edit(&EditSpec {
            column_family: 1,
            added: vec![file(0, 12, b"b", b"z", (6, 9))],
            ..EditSpec::default()
        });
        w.edit(&EditSpec {
            column_family: 2,
            added: vec![file(0, 13, b"a", b"b", (10, 10))],
            ..EditSpec::default()
        });
        // A compaction of both L0 files into two L1 files.
        w.edit(&EditSpec {
            column_family: 1,
            deleted: vec![(0, 10), (0, 12)],
            added: vec![
                file(1, 15, b"n", b"z", (0, 9)),
                file(1, 14, b"a", b"k", (0, 8)),
            ],
            ..EditSpec::default()
        });
        w.edit(&add_cf(3, "gone"));
        w.edit(&EditSpec {
            column_family: 3,
            added: vec![file(0, 16, b"a", b"b", (11, 11))],
            ..EditSpec::default()
        });
        w.edit(&EditSpec {
            column_family: 3,
            drop_column_family: true,
            ..EditSpec::default()
        });
        let bytes = w.finish();
        let m = read_manifest(&bytes, "MANIFEST-000005").unwrap();
        assert_eq!(m.comparator.as_deref(), Some("leveldb.BytewiseComparator"));
        let names: Vec<&str> = m.column_families.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["default", "sum", "list"]);
        let sum: Vec<u64> = m
            .column_family("sum")
            .unwrap()
            .files
            .iter()
            .map(|f| f.number)
            .collect();
        assert_eq!(sum, [14, 15], "L1 by smallest key");
        assert_eq!(m.live_files().count(), 3);
        assert_eq!(m.edits, 10);
    }

    #[test]
    fn level_zero_is_newest_first_and_levels_one_up_must_not_overlap() {
        let mut w = ManifestWriter::new();
        w.edit(&EditSpec {
            added: vec![
                file(0, 7, b"a", b"c", (1, 2)),
                file(0, 9, b"a", b"c", (3, 4)),
                file(0, 8, b"b", b"d", (5, 6)),
            ],
            ..EditSpec::default()
        });
        let m = read_manifest(&w.finish(), "M").unwrap();
        let order: Vec<u64> = m.column_families[0]
            .files
            .iter()
            .map(|f| f.number)
            .collect();
        assert_eq!(order, [9, 8, 7], "by epoch, newest first");
        let mut w = ManifestWriter::new();
        w.edit(&EditSpec {
            added: vec![
                file(1, 7, b"a", b"c", (1, 2)),
                file(1, 8, b"c", b"d", (3, 4)),
            ],
            ..EditSpec::default()
        });
        let e = read_manifest(&w.finish(), "M").unwrap_err();
        assert!(e.to_string().contains("overlap"), "{e}");
    }

    #[test]
    fn deleting_a_file_that_is_not_live_or_adding_one_twice_is_corruption() {
        for spec in [
            EditSpec {
                deleted: vec![(0, 99)],
                ..EditSpec::default()
            },
            EditSpec {
                added: vec![file(2, 5, b"a", b"b", (1, 1))],
                ..EditSpec::default()
            },
            EditSpec {
                column_family: 7,
                added: vec![file(0, 6, b"a", b"b", (1, 1))],
                ..EditSpec::default()
            },
        ] {
            let mut w = ManifestWriter::new();
            w.edit(&EditSpec {
                added: vec![file(0, 5, b"a", b"b", (1, 1))],
                ..EditSpec::default()
            });
            w.edit(&spec);
            let e = read_manifest(&w.finish(), "MANIFEST-000001").unwrap_err();
            assert!(matches!(e, FlinkError::ManifestCorrupt { .. }), "{e}");
            assert!(e.to_string().starts_with("MANIFEST-000001 at byte "), "{e}");
        }
    }

    #[test]
    fn an_atomic_group_cut_off_at_the_end_is_not_applied() {
        let mut w = ManifestWriter::new();
        w.edit(&add_cf(1, "a"));
        w.edit(&EditSpec {
            column_family: 1,
            added: vec![file(0, 3, b"a", b"b", (1, 1))],
            atomic_group_remaining: Some(1),
            ..EditSpec::default()
        });
        w.edit(&EditSpec {
            added: vec![file(0, 4, b"a", b"b", (2, 2))],
            atomic_group_remaining: Some(0),
            ..EditSpec::default()
        });
        w.edit(&EditSpec {
            column_family: 1,
            added: vec![file(0, 5, b"a", b"b", (3, 3))],
            atomic_group_remaining: Some(1),
            ..EditSpec::default()
        });
        let m = read_manifest(&w.finish(), "M").unwrap();
        let live: Vec<u64> = m.live_files().map(|(_, f)| f.number).collect();
        assert_eq!(live, [4, 3]);
    }

    #[test]
    fn records_span_blocks_and_damage_is_found() {
        let mut w = ManifestWriter::new();
        let big = "x".repeat(70_000);
        w.edit(&add_cf(1, &big));
        w.edit(&EditSpec {
            column_family: 1,
            added: vec![file(0, 3, b"a", b"b", (1, 1))],
            ..EditSpec::default()
        });
        let bytes = w.finish();
        assert!(bytes.len() > 2 * LOG_BLOCK_SIZE);
        let m = read_manifest(&bytes, "M").unwrap();
        assert_eq!(m.column_families[1].name.len(), 70_000);
        for cut in [1, 7, 100, LOG_BLOCK_SIZE + 3, bytes.len() - 1] {
            assert!(read_manifest(&bytes[..cut], "M").is_err(), "cut {cut}");
        }
        let mut flipped = bytes.clone();
        flipped[LOG_BLOCK_SIZE + 100] ^= 1;
        let e = read_manifest(&flipped, "M").unwrap_err();
        assert!(e.to_string().contains("checksum mismatch"), "{e}");
    }

    #[test]
    fn current_names_the_manifest() {
        assert_eq!(
            read_current(b"MANIFEST-000005\n", "CURRENT").unwrap(),
            "MANIFEST-000005"
        );
        for bad in [
            &b"MANIFEST-000005"[..],
            b"OPTIONS-1\n",
            b"MANIFEST-\n",
            b"\xff\n",
        ] {
            assert!(read_current(bad, "CURRENT").is_err());
        }
    }

    #[test]
    fn a_manifest_dropping_the_default_column_family_is_corrupt() {
        // Found by the fuzzer: a dropped and re-added column family 0 under another name read as that name.
        let mut w = ManifestWriter::new();
        w.edit(&EditSpec {
            drop_column_family: true,
            ..EditSpec::default()
        });
        w.edit(&EditSpec {
            add_column_family: Some("\u{1}".into()),
            ..EditSpec::default()
        });
        let e = read_manifest(&w.finish(), "MANIFEST-000007").unwrap_err();
        assert!(
            e.to_string()
                .contains("default column family (0) is dropped"),
            "{e}"
        );
        assert!(e.to_string().contains("MANIFEST-000007"), "{e}");
    }
}
