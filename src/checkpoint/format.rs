//! The checkpoint metadata file (`chk-<id>/<instance>/_metadata`, version 3 when a file has bounds, else
//! version 2; version 1 still decodes): byte layout in `design/checkpoints.md`. Every decoder check is a
//! typed [`CheckpointError::Metadata`] naming the file and the byte offset.

use std::path::Path;

use crate::backend::{BackendConfig, BackendKind, BackendSnapshot, StateId};
use crate::error::{CheckpointError, Error, Location, Result, IN_MEMORY};
use crate::keygroup::{KeyGroup, KeyGroupRange};
use crate::meta::StateMetaInfo;
use crate::savepoint::{SavepointReader, WriteOptions};
use crate::serializer::SerializerSnapshot;
use keyed_state_lsm::KeyBounds;

/// The first eight bytes of every metadata file.
pub const MAGIC: [u8; 8] = *b"KSCKPT\0\x01";
/// The newest format version this build writes (version 3 adds the bounded SST file kind; metadata
/// without bounded files is written as version 2, byte for byte what builds without bounds wrote).
pub const FORMAT_VERSION: u16 = 3;
/// The version of metadata holding no bounded file.
pub const UNBOUNDED_FORMAT_VERSION: u16 = 2;
/// The oldest format version this build reads (version 1: LSM files only, no file kinds).
pub const OLDEST_FORMAT_VERSION: u16 = 1;
const PREAMBLE_LEN: usize = 16;
const CHECKSUM_LEN: usize = 8;
/// Smallest encoded size of one object record (an empty path).
const OBJECT_MIN: usize = 2 + 8 + 8 + 8;
/// Encoded size of one file record of version 1, and of the fixed part of a version-2 record.
const FILE_LEN: usize = 8 + 1 + 4 + 8 + 8 + 8;
/// Smallest encoded size of one version-2 file record (the fixed part and its kind byte).
const FILE_MIN_V2: usize = FILE_LEN + 1;

/// The metadata's code of a backend.
fn backend_code(kind: BackendKind) -> u8 {
    match kind {
        BackendKind::Lsm => 1,
        BackendKind::Heap => 2,
        BackendKind::RocksDb => 3,
    }
}

/// What one file of a checkpoint is.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum FileKind {
    /// An SST file named by its number (`NNNNNN.sst`).
    Sst,
    /// The heap backend's serialized table of one (state, key group) (`heap_table`).
    Table {
        /// The state id (index into [`CheckpointMetadata::states`]).
        state: u32,
        /// The key group.
        key_group: KeyGroup,
    },
    /// A file the backend restores under this name (RocksDB: `MANIFEST-000005`, `OPTIONS-000007`, `CURRENT`).
    Named(String),
    /// An SST file (`NNNNNN.sst`, LSM only, format version 3) that the engine reads only inside these user-key
    /// bounds.
    BoundedSst(KeyBounds),
}

/// One object in checkpoint storage that a checkpoint references.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectRef {
    /// Path relative to the storage root.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// xxh3-64 of the whole object.
    pub checksum: u64,
    /// The checkpoint that uploaded it.
    pub uploaded_by: u64,
}

/// One backend file and where its bytes are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileRef {
    /// The backend's local file number (LSM: `NNNNNN.sst`).
    pub number: u64,
    /// The LSM level it sits in.
    pub level: u8,
    /// Index into [`CheckpointMetadata::objects`].
    pub object: u32,
    /// Offset of the file inside the object.
    pub offset: u64,
    /// Length of the file.
    pub length: u64,
    /// xxh3-64 of the file's bytes.
    pub checksum: u64,
    /// What the file is.
    pub kind: FileKind,
}

impl FileRef {
    /// How errors and reports name the file: `file 000012.sst`, `table of state 1 key group 7 (file 3)`,
    /// `file MANIFEST-000005`.
    pub fn label(&self) -> String {
        match &self.kind {
            FileKind::Sst | FileKind::BoundedSst(_) => format!("file {:06}.sst", self.number),
            FileKind::Table { state, key_group } => {
                format!(
                    "table of state {state} key group {key_group} (file {})",
                    self.number
                )
            }
            FileKind::Named(name) => format!("file {name}"),
        }
    }
}

/// What one instance wrote for one checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointMetadata {
    /// The checkpoint id the host gave.
    pub checkpoint_id: u64,
    /// The backend that wrote it.
    pub backend: BackendKind,
    /// The instance name (unique among instances running at the same time).
    pub instance: String,
    /// The run of the instance that wrote it.
    pub run: u64,
    /// The job's max parallelism.
    pub max_parallelism: u32,
    /// The instance's key groups.
    pub key_group_range: KeyGroupRange,
    /// The engine sequence number at the synchronous part.
    pub seqno: u64,
    /// Wall-clock milliseconds since the Unix epoch at the synchronous part.
    pub created_millis: u64,
    /// The key serializer's snapshot.
    pub key_serializer: SerializerSnapshot,
    /// Every state, in state-id order.
    pub states: Vec<StateMetaInfo>,
    /// The objects referenced.
    pub objects: Vec<ObjectRef>,
    /// The files, each inside one object.
    pub files: Vec<FileRef>,
}

impl CheckpointMetadata {
    /// Bytes of all files: the state size.
    pub fn state_size(&self) -> u64 {
        self.files.iter().map(|f| f.length).sum()
    }

    /// Whether the object at `index` was uploaded by this checkpoint.
    pub fn object_is_new(&self, index: u32) -> bool {
        self.objects
            .get(index as usize)
            .is_some_and(|o| o.uploaded_by == self.checkpoint_id)
    }

    /// (files in new objects, files in objects of earlier checkpoints).
    pub fn files_new_and_referenced(&self) -> (usize, usize) {
        let new = self
            .files
            .iter()
            .filter(|f| self.object_is_new(f.object))
            .count();
        (new, self.files.len() - new)
    }

    /// Bytes of the objects this checkpoint uploaded.
    pub fn bytes_uploaded(&self) -> u64 {
        self.objects
            .iter()
            .filter(|o| o.uploaded_by == self.checkpoint_id)
            .map(|o| o.size)
            .sum()
    }

    /// The backend configuration the checkpoint was taken with.
    pub fn backend_config(&self) -> BackendConfig {
        BackendConfig {
            max_parallelism: self.max_parallelism,
            key_group_range: self.key_group_range,
            key_serializer: self.key_serializer.clone(),
        }
    }

    /// Encodes the metadata file.
    pub fn encode(&self) -> Result<Vec<u8>> {
        let mut b = Vec::with_capacity(256 + self.files.len() * FILE_LEN);
        b.extend_from_slice(&self.checkpoint_id.to_le_bytes());
        b.push(backend_code(self.backend));
        put_str(&mut b, &self.instance, "instance name")?;
        b.extend_from_slice(&self.run.to_le_bytes());
        b.extend_from_slice(&self.max_parallelism.to_le_bytes());
        let (start, count) = if self.key_group_range.is_empty() {
            (0u32, 0u32)
        } else {
            (
                u32::from(self.key_group_range.start()),
                self.key_group_range.len() as u32,
            )
        };
        b.extend_from_slice(&start.to_le_bytes());
        b.extend_from_slice(&count.to_le_bytes());
        b.extend_from_slice(&self.seqno.to_le_bytes());
        b.extend_from_slice(&self.created_millis.to_le_bytes());
        let metas = encode_states(self)?;
        put_u32(&mut b, metas.len(), "state-meta section")?;
        b.extend_from_slice(&metas);
        put_u32(&mut b, self.objects.len(), "object count")?;
        for o in &self.objects {
            put_str(&mut b, &o.path, "object path")?;
            b.extend_from_slice(&o.size.to_le_bytes());
            b.extend_from_slice(&o.checksum.to_le_bytes());
            b.extend_from_slice(&o.uploaded_by.to_le_bytes());
        }
        put_u32(&mut b, self.files.len(), "file count")?;
        for f in &self.files {
            b.extend_from_slice(&f.number.to_le_bytes());
            b.push(f.level);
            b.extend_from_slice(&f.object.to_le_bytes());
            b.extend_from_slice(&f.offset.to_le_bytes());
            b.extend_from_slice(&f.length.to_le_bytes());
            b.extend_from_slice(&f.checksum.to_le_bytes());
            match &f.kind {
                FileKind::Sst => b.push(0),
                FileKind::Table { state, key_group } => {
                    b.push(1);
                    b.extend_from_slice(&state.to_le_bytes());
                    b.extend_from_slice(&u32::from(*key_group).to_le_bytes());
                }
                FileKind::Named(name) => {
                    b.push(2);
                    put_str(&mut b, name, "file name")?;
                }
                FileKind::BoundedSst(bounds) => {
                    b.push(3);
                    put_u32(&mut b, bounds.lo.len(), "bounds lo")?;
                    b.extend_from_slice(&bounds.lo);
                    put_u32(&mut b, bounds.hi.len(), "bounds hi")?;
                    b.extend_from_slice(&bounds.hi);
                }
            }
        }
        let version = if self
            .files
            .iter()
            .any(|f| matches!(f.kind, FileKind::BoundedSst(_)))
        {
            FORMAT_VERSION
        } else {
            UNBOUNDED_FORMAT_VERSION
        };
        let mut out = Vec::with_capacity(PREAMBLE_LEN + b.len() + CHECKSUM_LEN);
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&version.to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        put_u32(&mut out, b.len(), "metadata body")?;
        out.extend_from_slice(&b);
        let sum = xxhash_rust::xxh3::xxh3_64(&out);
        out.extend_from_slice(&sum.to_le_bytes());
        Ok(out)
    }

    /// Decodes a metadata file held in memory, checking everything `design/checkpoints.md` lists. Errors
    /// name the file `<memory>`. Never panics.
    pub fn decode(bytes: &[u8]) -> Result<CheckpointMetadata> {
        Self::decode_named(IN_MEMORY, bytes)
    }

    /// [`decode`](Self::decode) of the metadata file `name` (its path relative to the storage root), which
    /// errors name.
    pub fn decode_named(name: impl AsRef<Path>, bytes: &[u8]) -> Result<CheckpointMetadata> {
        let name = name.as_ref();
        let meta_err = |offset: u64, detail: String| meta_err(name, offset, detail);
        let mut r = Reader {
            buf: bytes,
            pos: 0,
            name,
        };
        let magic: [u8; 8] = r.array("magic")?;
        if magic != MAGIC {
            return Err(meta_err(0, format!("bad magic {magic:02x?}")));
        }
        let version = r.u16("format version")?;
        if !(OLDEST_FORMAT_VERSION..=FORMAT_VERSION).contains(&version) {
            return Err(CheckpointError::UnsupportedVersion {
                at: Location::at(name, 8),
                version,
                oldest: OLDEST_FORMAT_VERSION,
                newest: FORMAT_VERSION,
            }
            .into());
        }
        let flags = r.u16("flags")?;
        if flags != 0 {
            return Err(meta_err(10, format!("unknown flags {flags:#06x}")));
        }
        let body_len = r.u32("body length")? as usize;
        let Some(end) = PREAMBLE_LEN
            .checked_add(body_len)
            .filter(|e| e.checked_add(CHECKSUM_LEN) == Some(bytes.len()))
        else {
            return Err(meta_err(
                12,
                format!(
                    "body length {body_len} does not match the file's {} bytes",
                    bytes.len()
                ),
            ));
        };
        let (covered, stored) = bytes.split_at(end);
        let stored = u64::from_le_bytes(stored.try_into().unwrap_or_default());
        let computed = xxhash_rust::xxh3::xxh3_64(covered);
        if stored != computed && !cfg!(fuzzing) {
            return Err(meta_err(
                end as u64,
                format!("checksum mismatch: stored {stored:#018x}, computed {computed:#018x}"),
            ));
        }
        let mut r = Reader {
            buf: covered,
            pos: PREAMBLE_LEN,
            name,
        };
        let checkpoint_id = r.u64("checkpoint id")?;
        let at = r.pos;
        let backend = match r.u8("backend kind")? {
            1 => BackendKind::Lsm,
            2 if version >= 2 => BackendKind::Heap,
            3 if version >= 2 => BackendKind::RocksDb,
            k => {
                return Err(meta_err(
                    at as u64,
                    format!("unknown backend kind {k} in format version {version}"),
                ))
            }
        };
        let instance = r.string("instance name")?;
        let run = r.u64("run id")?;
        let at = r.pos;
        let max_parallelism = r.u32("max parallelism")?;
        crate::keygroup::check_max_parallelism(max_parallelism)
            .map_err(|e| meta_err(at as u64, e.to_string()))?;
        let at = r.pos;
        let start = r.u32("key-group range start")?;
        let count = r.u32("key-group range length")?;
        let key_group_range =
            decode_range(start, count, max_parallelism).map_err(|d| meta_err(at as u64, d))?;
        let seqno = r.u64("sequence number")?;
        let created_millis = r.u64("creation time")?;
        let at = r.pos;
        let metas_len = r.u32("state-meta section length")? as usize;
        let metas = r.bytes(metas_len, "state-meta section")?;
        let (key_serializer, states) =
            decode_states(metas, max_parallelism).map_err(|d| meta_err(at as u64, d))?;
        let at = r.pos;
        let n_objects = r.u32("object count")? as usize;
        if n_objects > r.remaining() / OBJECT_MIN {
            return Err(meta_err(
                at as u64,
                format!("{n_objects} objects cannot fit in {} bytes", r.remaining()),
            ));
        }
        let mut objects = Vec::with_capacity(n_objects);
        for _ in 0..n_objects {
            let path = r.string("object path")?;
            let size = r.u64("object size")?;
            let checksum = r.u64("object checksum")?;
            let uploaded_by = r.u64("uploading checkpoint")?;
            objects.push(ObjectRef {
                path,
                size,
                checksum,
                uploaded_by,
            });
        }
        let at = r.pos;
        let n_files = r.u32("file count")? as usize;
        let counts_fit = if version == 1 {
            n_files.checked_mul(FILE_LEN) == Some(r.remaining())
        } else {
            n_files <= r.remaining() / FILE_MIN_V2
        };
        if !counts_fit {
            return Err(meta_err(
                at as u64,
                format!(
                    "{n_files} file records do not fit the {} bytes left",
                    r.remaining()
                ),
            ));
        }
        let mut files: Vec<FileRef> = Vec::with_capacity(n_files);
        for _ in 0..n_files {
            let at = r.pos as u64;
            let mut f = FileRef {
                number: r.u64("file number")?,
                level: r.u8("file level")?,
                object: r.u32("file object")?,
                offset: r.u64("file offset")?,
                length: r.u64("file length")?,
                checksum: r.u64("file checksum")?,
                kind: FileKind::Sst,
            };
            if version >= 2 {
                f.kind =
                    decode_file_kind(&mut r, version, backend, &key_group_range, states.len())?;
            }
            let Some(o) = objects.get(f.object as usize) else {
                return Err(meta_err(
                    at,
                    format!(
                        "file {} names object {} of {}",
                        f.number, f.object, n_objects
                    ),
                ));
            };
            if f.offset.checked_add(f.length).is_none_or(|e| e > o.size) {
                return Err(meta_err(
                    at,
                    format!(
                        "file {} at {}+{} lies outside object {} of {} bytes",
                        f.number, f.offset, f.length, o.path, o.size
                    ),
                ));
            }
            files.push(f);
        }
        if r.remaining() != 0 {
            return Err(meta_err(
                r.pos as u64,
                format!("{} bytes after the last file record", r.remaining()),
            ));
        }
        let mut numbers: Vec<u64> = files
            .iter()
            .filter(|f| !matches!(f.kind, FileKind::Named(_)))
            .map(|f| f.number)
            .collect();
        numbers.sort_unstable();
        if let Some(w) = numbers.windows(2).find(|w| w[0] == w[1]) {
            return Err(meta_err(
                at as u64,
                format!("file number {} appears twice", w[0]),
            ));
        }
        let mut tables: Vec<(u32, KeyGroup)> = files
            .iter()
            .filter_map(|f| match f.kind {
                FileKind::Table { state, key_group } => Some((state, key_group)),
                _ => None,
            })
            .collect();
        tables.sort_unstable();
        if let Some(w) = tables.windows(2).find(|w| w[0] == w[1]) {
            return Err(meta_err(
                at as u64,
                format!(
                    "the table of state {} key group {} appears twice",
                    w[0].0, w[0].1
                ),
            ));
        }
        let mut names: Vec<&str> = files
            .iter()
            .filter_map(|f| match &f.kind {
                FileKind::Named(n) => Some(n.as_str()),
                _ => None,
            })
            .collect();
        names.sort_unstable();
        if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
            return Err(meta_err(
                at as u64,
                format!("file name {} appears twice", w[0]),
            ));
        }
        Ok(CheckpointMetadata {
            checkpoint_id,
            backend,
            instance,
            run,
            max_parallelism,
            key_group_range,
            seqno,
            created_millis,
            key_serializer,
            states,
            objects,
            files,
        })
    }
}

/// The kind byte and fields of a version-2 file record, checked against the backend, the instance's
/// key-group range and the number of states.
fn decode_file_kind(
    r: &mut Reader<'_>,
    version: u16,
    backend: BackendKind,
    range: &KeyGroupRange,
    states: usize,
) -> Result<FileKind> {
    let name = r.name;
    let meta_err = |offset: u64, detail: String| meta_err(name, offset, detail);
    let at = r.pos as u64;
    let kind = match r.u8("file kind")? {
        0 => FileKind::Sst,
        1 => {
            let state = r.u32("table state id")?;
            let kg = r.u32("table key group")?;
            if state as usize >= states {
                return Err(meta_err(
                    at,
                    format!("table of state {state}, but the checkpoint has {states} states"),
                ));
            }
            let key_group = KeyGroup::try_from(kg)
                .ok()
                .filter(|k| range.contains(*k))
                .ok_or_else(|| {
                    meta_err(at, format!("table key group {kg} lies outside {range}"))
                })?;
            FileKind::Table { state, key_group }
        }
        2 => {
            let name = r.string("file name")?;
            if name.is_empty()
                || name.contains('/')
                || name.contains('\\')
                || name == "."
                || name == ".."
            {
                return Err(meta_err(
                    at,
                    format!("file name {name:?} is not a plain name"),
                ));
            }
            FileKind::Named(name)
        }
        3 if version >= 3 => {
            let n = r.u32("bounds lo length")? as usize;
            let lo = r.bytes(n, "bounds lo")?.to_vec();
            let n = r.u32("bounds hi length")? as usize;
            let hi = r.bytes(n, "bounds hi")?.to_vec();
            let bounds = KeyBounds::new(lo, hi);
            if bounds.is_empty() {
                return Err(meta_err(
                    at,
                    format!("empty file bounds {:02x?}..{:02x?}", bounds.lo, bounds.hi),
                ));
            }
            FileKind::BoundedSst(bounds)
        }
        k => {
            return Err(meta_err(
                at,
                format!("unknown file kind {k} in format version {version}"),
            ))
        }
    };
    let fits = matches!(
        (&kind, backend),
        (FileKind::Sst, BackendKind::Lsm | BackendKind::RocksDb)
            | (FileKind::BoundedSst(_), BackendKind::Lsm)
            | (FileKind::Table { .. }, BackendKind::Heap)
            | (FileKind::Named(_), BackendKind::RocksDb)
    );
    if !fits {
        return Err(meta_err(
            at,
            format!(
                "a {kind:?} file in a checkpoint of the {} backend",
                backend.name()
            ),
        ));
    }
    Ok(kind)
}

fn decode_range(start: u32, count: u32, max_parallelism: u32) -> Result<KeyGroupRange, String> {
    if count == 0 {
        return if start == 0 {
            Ok(KeyGroupRange::EMPTY)
        } else {
            Err(format!("empty key-group range with start {start}"))
        };
    }
    let end = u64::from(start) + u64::from(count) - 1;
    if end >= u64::from(max_parallelism) {
        return Err(format!(
            "key-group range {start}+{count} exceeds max parallelism {max_parallelism}"
        ));
    }
    Ok(KeyGroupRange::new(start as KeyGroup, end as KeyGroup))
}

/// A snapshot with states and no entries: the state-meta section is a unified savepoint of it.
struct MetaOnly {
    config: BackendConfig,
    states: Vec<StateMetaInfo>,
}

impl BackendSnapshot for MetaOnly {
    fn config(&self) -> &BackendConfig {
        &self.config
    }
    fn states(&self) -> &[StateMetaInfo] {
        &self.states
    }
    fn visit(
        &self,
        _state: StateId,
        _kg: KeyGroup,
        _f: &mut dyn FnMut(&[u8], &[u8]) -> crate::Result<()>,
    ) -> crate::Result<()> {
        Ok(())
    }
}

fn encode_states(m: &CheckpointMetadata) -> Result<Vec<u8>> {
    let snap = MetaOnly {
        config: BackendConfig {
            max_parallelism: m.max_parallelism,
            key_group_range: KeyGroupRange::EMPTY,
            key_serializer: m.key_serializer.clone(),
        },
        states: m.states.clone(),
    };
    let mut out = Vec::new();
    crate::savepoint::encode(&snap, &WriteOptions::default(), &mut out)?;
    Ok(out)
}

fn decode_states(
    bytes: &[u8],
    max_parallelism: u32,
) -> Result<(SerializerSnapshot, Vec<StateMetaInfo>), String> {
    let r = SavepointReader::from_bytes(bytes.to_vec()).map_err(|e| format!("state metas: {e}"))?;
    let h = r.header();
    if h.max_parallelism != max_parallelism {
        return Err(format!(
            "state metas say max parallelism {}, the metadata {max_parallelism}",
            h.max_parallelism
        ));
    }
    Ok((h.key_serializer.clone(), h.states.clone()))
}

fn meta_err(file: &Path, offset: u64, detail: String) -> Error {
    CheckpointError::Metadata {
        at: Location::at(file, offset),
        detail,
    }
    .into()
}

fn put_u32(out: &mut Vec<u8>, n: usize, what: &str) -> Result<()> {
    let n = u32::try_from(n).map_err(|_| {
        Error::InvalidArgument(format!("checkpoint metadata: {what}: {n} exceeds 2^32-1"))
    })?;
    out.extend_from_slice(&n.to_le_bytes());
    Ok(())
}

fn put_str(out: &mut Vec<u8>, s: &str, what: &str) -> Result<()> {
    let n = u16::try_from(s.len()).map_err(|_| {
        Error::InvalidArgument(format!(
            "checkpoint metadata: {what} of {} bytes exceeds 65535",
            s.len()
        ))
    })?;
    out.extend_from_slice(&n.to_le_bytes());
    out.extend_from_slice(s.as_bytes());
    Ok(())
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    /// The file, for errors.
    name: &'a Path,
}

impl<'a> Reader<'a> {
    fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }
    fn bytes(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        let s = self
            .pos
            .checked_add(n)
            .and_then(|e| self.buf.get(self.pos..e))
            .ok_or_else(|| {
                meta_err(
                    self.name,
                    self.pos as u64,
                    format!("{what}: {n} bytes needed, {} left", self.remaining()),
                )
            })?;
        self.pos += n;
        Ok(s)
    }
    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let s = self.bytes(N, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }
    fn u8(&mut self, what: &str) -> Result<u8> {
        Ok(self.array::<1>(what)?[0])
    }
    fn u16(&mut self, what: &str) -> Result<u16> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }
    fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }
    fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }
    fn string(&mut self, what: &str) -> Result<String> {
        let at = self.pos as u64;
        let n = self.u16(what)? as usize;
        let s = self.bytes(n, what)?;
        String::from_utf8(s.to_vec())
            .map_err(|_| meta_err(self.name, at, format!("{what} is not UTF-8")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::StateKind;

    pub(crate) fn sample() -> CheckpointMetadata {
        CheckpointMetadata {
            checkpoint_id: 7,
            backend: BackendKind::Lsm,
            instance: "kg00000-00063".into(),
            run: 0xabcdef,
            max_parallelism: 128,
            key_group_range: KeyGroupRange::new(0, 63),
            seqno: 99,
            created_millis: 1,
            key_serializer: SerializerSnapshot::simple("long", 1),
            states: vec![StateMetaInfo {
                name: "clicks".into(),
                kind: StateKind::Value,
                namespace_serializer: SerializerSnapshot::simple("void", 1),
                value_serializer: SerializerSnapshot::simple("long", 1),
                ttl: None,
            }],
            objects: vec![ObjectRef {
                path: "shared/a/b/7-0.pack".into(),
                size: 100,
                checksum: 5,
                uploaded_by: 7,
            }],
            files: vec![
                FileRef {
                    number: 3,
                    level: 0,
                    object: 0,
                    offset: 0,
                    length: 60,
                    checksum: 1,
                    kind: FileKind::Sst,
                },
                FileRef {
                    number: 4,
                    level: 6,
                    object: 0,
                    offset: 60,
                    length: 40,
                    checksum: 2,
                    kind: FileKind::Sst,
                },
            ],
        }
    }

    #[test]
    fn metadata_round_trips() {
        let m = sample();
        let bytes = m.encode().unwrap();
        assert_eq!(CheckpointMetadata::decode(&bytes).unwrap(), m);
    }

    #[test]
    fn every_truncation_and_byte_flip_is_a_typed_error() {
        let bytes = sample().encode().unwrap();
        for n in 0..bytes.len() {
            assert!(
                CheckpointMetadata::decode(&bytes[..n]).is_err(),
                "prefix {n}"
            );
        }
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x40;
            assert!(CheckpointMetadata::decode(&b).is_err(), "flip at {i}");
        }
    }

    /// `m` (LSM files only) in format version 1: the version-2 bytes without the file kind bytes.
    fn encode_v1(m: &CheckpointMetadata) -> Vec<u8> {
        assert!(m.files.iter().all(|f| f.kind == FileKind::Sst));
        let v2 = m.encode().unwrap();
        let body = &v2[PREAMBLE_LEN..v2.len() - CHECKSUM_LEN];
        let files_at = body.len() - m.files.len() * (FILE_LEN + 1);
        let mut b = body[..files_at].to_vec();
        for rec in body[files_at..].chunks(FILE_LEN + 1) {
            assert_eq!(rec[FILE_LEN], 0);
            b.extend_from_slice(&rec[..FILE_LEN]);
        }
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&1u16.to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        out.extend_from_slice(&(b.len() as u32).to_le_bytes());
        out.extend_from_slice(&b);
        let sum = xxhash_rust::xxh3::xxh3_64(&out);
        out.extend_from_slice(&sum.to_le_bytes());
        out
    }

    fn heap_sample() -> CheckpointMetadata {
        let mut m = sample();
        m.backend = BackendKind::Heap;
        m.files[0].kind = FileKind::Table {
            state: 0,
            key_group: 3,
        };
        m.files[1].kind = FileKind::Table {
            state: 0,
            key_group: 63,
        };
        m
    }

    fn rocksdb_sample() -> CheckpointMetadata {
        let mut m = sample();
        m.backend = BackendKind::RocksDb;
        m.files[1].kind = FileKind::Named("MANIFEST-000005".into());
        m
    }

    /// `sample()` with its second file read only inside bounds: format version 3.
    fn bounded_sample() -> CheckpointMetadata {
        let mut m = sample();
        m.files[1].kind = FileKind::BoundedSst(KeyBounds::new(vec![0, 0, 3], vec![0, 0, 40]));
        m
    }

    /// `bytes` with the version field set to `v` and the checksum recomputed.
    fn relabel(bytes: &[u8], v: u16) -> Vec<u8> {
        let mut b = bytes[..bytes.len() - CHECKSUM_LEN].to_vec();
        b[8..10].copy_from_slice(&v.to_le_bytes());
        let sum = xxhash_rust::xxh3::xxh3_64(&b);
        b.extend_from_slice(&sum.to_le_bytes());
        b
    }

    #[test]
    fn bounded_files_are_version_3_and_every_byte_flip_or_cut_of_one_is_an_error() {
        let m = bounded_sample();
        let bytes = m.encode().unwrap();
        assert_eq!(u16::from_le_bytes([bytes[8], bytes[9]]), 3);
        assert_eq!(CheckpointMetadata::decode(&bytes).unwrap(), m);
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x40;
            assert!(CheckpointMetadata::decode(&b).is_err(), "flip at {i}");
            assert!(
                CheckpointMetadata::decode(&bytes[..i]).is_err(),
                "cut at {i}"
            );
        }
        // Metadata without bounded files is version 2, as before bounds existed.
        let plain = sample().encode().unwrap();
        assert_eq!(u16::from_le_bytes([plain[8], plain[9]]), 2);
    }

    #[test]
    fn a_bounded_file_outside_version_3_or_the_lsm_backend_or_with_empty_bounds_is_rejected() {
        let bytes = bounded_sample().encode().unwrap();
        let e = CheckpointMetadata::decode(&relabel(&bytes, 2)).unwrap_err();
        assert!(
            e.to_string()
                .contains("unknown file kind 3 in format version 2"),
            "{e}"
        );
        let mut m = bounded_sample();
        m.backend = BackendKind::RocksDb;
        let e = CheckpointMetadata::decode(&m.encode().unwrap()).unwrap_err();
        assert!(e.to_string().contains("rocksdb backend"), "{e}");
        for (lo, hi) in [(vec![0, 0, 9], vec![0, 0, 9]), (vec![1], vec![0])] {
            let mut m = sample();
            m.files[0].kind = FileKind::BoundedSst(KeyBounds::new(lo, hi));
            let e = CheckpointMetadata::decode(&m.encode().unwrap()).unwrap_err();
            assert!(e.to_string().contains("empty file bounds"), "{e}");
        }
    }

    fn fixture(name: &str) -> Vec<u8> {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/checkpoint")
            .join(name);
        std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    /// Writes the fixtures of `tests/fixtures/checkpoint/` (run once per format version, with `--ignored`).
    #[test]
    #[ignore]
    fn write_fixtures() {
        let d = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/checkpoint");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("metadata_v1_lsm.bin"), encode_v1(&sample())).unwrap();
        std::fs::write(d.join("metadata_v2_lsm.bin"), sample().encode().unwrap()).unwrap();
        std::fs::write(
            d.join("metadata_v2_heap.bin"),
            heap_sample().encode().unwrap(),
        )
        .unwrap();
        std::fs::write(
            d.join("metadata_v2_rocksdb.bin"),
            rocksdb_sample().encode().unwrap(),
        )
        .unwrap();
        std::fs::write(
            d.join("metadata_v3_lsm.bin"),
            bounded_sample().encode().unwrap(),
        )
        .unwrap();
    }

    #[test]
    fn every_format_versions_fixture_decodes_and_this_build_writes_versions_2_and_3_bytes_exactly()
    {
        let v1 = fixture("metadata_v1_lsm.bin");
        assert_eq!(u16::from_le_bytes([v1[8], v1[9]]), 1);
        assert_eq!(CheckpointMetadata::decode(&v1).unwrap(), sample());
        for (name, m) in [
            ("metadata_v2_lsm.bin", sample()),
            ("metadata_v2_heap.bin", heap_sample()),
            ("metadata_v2_rocksdb.bin", rocksdb_sample()),
            ("metadata_v3_lsm.bin", bounded_sample()),
        ] {
            let bytes = fixture(name);
            assert_eq!(CheckpointMetadata::decode(&bytes).unwrap(), m, "{name}");
            assert_eq!(m.encode().unwrap(), bytes, "{name}");
        }
    }

    #[test]
    fn heap_and_rocksdb_metadata_round_trip_and_every_byte_flip_is_an_error() {
        for m in [heap_sample(), rocksdb_sample()] {
            let bytes = m.encode().unwrap();
            assert_eq!(CheckpointMetadata::decode(&bytes).unwrap(), m);
            for i in 0..bytes.len() {
                let mut b = bytes.clone();
                b[i] ^= 0x40;
                assert!(CheckpointMetadata::decode(&b).is_err(), "flip at {i}");
            }
        }
    }

    #[test]
    fn file_kinds_are_checked_against_the_backend_range_and_states() {
        let mut m = heap_sample();
        m.files[1].kind = FileKind::Table {
            state: 0,
            key_group: 64,
        };
        let e = CheckpointMetadata::decode(&m.encode().unwrap()).unwrap_err();
        assert!(e.to_string().contains("outside"), "{e}");
        let mut m = heap_sample();
        m.files[1].kind = FileKind::Table {
            state: 1,
            key_group: 4,
        };
        let e = CheckpointMetadata::decode(&m.encode().unwrap()).unwrap_err();
        assert!(e.to_string().contains("1 states"), "{e}");
        let mut m = heap_sample();
        m.files[1].kind = FileKind::Table {
            state: 0,
            key_group: 3,
        };
        m.files[1].number = 9;
        let e = CheckpointMetadata::decode(&m.encode().unwrap()).unwrap_err();
        assert!(e.to_string().contains("twice"), "{e}");
        let mut m = sample();
        m.files[0].kind = FileKind::Named("CURRENT".into());
        let e = CheckpointMetadata::decode(&m.encode().unwrap()).unwrap_err();
        assert!(e.to_string().contains("lsm backend"), "{e}");
        let mut m = rocksdb_sample();
        m.files[1].kind = FileKind::Named("../x".into());
        let e = CheckpointMetadata::decode(&m.encode().unwrap()).unwrap_err();
        assert!(e.to_string().contains("plain name"), "{e}");
    }

    #[test]
    fn a_file_outside_its_object_is_refused() {
        let mut m = sample();
        m.files[1].length = 41;
        let err = CheckpointMetadata::decode(&m.encode().unwrap()).unwrap_err();
        assert!(err.to_string().contains("outside object"), "{err}");
    }
}
