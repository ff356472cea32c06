//! Importing one operator's keyed state from a Flink savepoint directory into one of our savepoints:
//! [`FlinkSavepoint`] opens `_metadata`, [`FlinkSavepoint::import`] opens the operator's keyed-state
//! streams and gives a [`FlinkImport`], a [`BackendSnapshot`] that our savepoint writer encodes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::heap_native::read_native_key_group;
use super::keyed_stream::{read_key_group, KeyGroupStats};
use super::location::{display_name, map_stream, StreamBytes};
use super::metadata::{
    parse_metadata, CheckpointMetadata, KeyGroupsHandleKind, KeyedHandle, OperatorId,
    OperatorState, StreamHandle,
};
use super::operator_id::operator_id_for_uid;
use super::proxy::{read_proxy, KeyedProxy};
use super::rocksdb_native::RocksNativeState;
use super::FlinkError;
use keyed_state::backend::{BackendConfig, BackendSnapshot, StateId};
use keyed_state::keygroup::{KeyGroup, KeyGroupRange};
use keyed_state::meta::StateMetaInfo;
use keyed_state::savepoint::{write_savepoint, SavepointSummary, WriteOptions};
use keyed_state::Location;

/// A Flink savepoint or checkpoint directory with its decoded `_metadata`.
#[derive(Debug, Clone)]
pub struct FlinkSavepoint {
    dir: PathBuf,
    /// The `_metadata` bytes decoded.
    bytes: Vec<u8>,
    /// The decoded `_metadata`.
    pub metadata: CheckpointMetadata,
}

/// Whether `path` is a Flink savepoint or checkpoint: a directory holding `_metadata`, or such a file.
pub fn is_flink_savepoint(path: &Path) -> bool {
    (path.is_dir() && path.join("_metadata").is_file())
        || (path.is_file() && path.file_name().is_some_and(|n| n == "_metadata"))
}

impl FlinkSavepoint {
    /// Opens a savepoint directory (or its `_metadata` file) and decodes `_metadata`.
    pub fn open(path: &Path) -> Result<Self, FlinkError> {
        let (dir, meta) = if path.is_dir() {
            (path.to_path_buf(), path.join("_metadata"))
        } else {
            (
                path.parent()
                    .map(Path::to_path_buf)
                    .unwrap_or_else(|| PathBuf::from(".")),
                path.to_path_buf(),
            )
        };
        let bytes = std::fs::read(&meta).map_err(|e| FlinkError::io(meta.display(), e))?;
        let metadata = parse_metadata(&bytes, "_metadata")?;
        Ok(FlinkSavepoint {
            dir,
            bytes,
            metadata,
        })
    }

    /// From `_metadata` bytes already read; relative handles resolve against `dir`.
    pub fn from_bytes(dir: &Path, bytes: &[u8]) -> Result<Self, FlinkError> {
        Ok(FlinkSavepoint {
            dir: dir.to_path_buf(),
            bytes: bytes.to_vec(),
            metadata: parse_metadata(bytes, "_metadata")?,
        })
    }

    /// The directory relative handles resolve against.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The bytes of operator `i` (of `metadata.operators`) as `_metadata` holds them.
    pub fn operator_bytes(&self, i: usize) -> Option<&[u8]> {
        let span = self.metadata.operator_spans.get(i)?;
        self.bytes.get(span.clone())
    }

    /// The operator with this uid, or with this 32-digit hex id, or whose id Flink derives from this uid.
    pub fn operator(&self, uid_or_id: &str) -> Result<&OperatorState, FlinkError> {
        let ops = &self.metadata.operators;
        if let Some(op) = ops.iter().find(|o| o.uid.as_deref() == Some(uid_or_id)) {
            return Ok(op);
        }
        if let Some(id) = OperatorId::from_hex(uid_or_id) {
            if let Some(op) = ops.iter().find(|o| o.id == id) {
                return Ok(op);
            }
        }
        let derived = operator_id_for_uid(uid_or_id);
        if let Some(op) = ops.iter().find(|o| o.id == derived) {
            return Ok(op);
        }
        let available = ops
            .iter()
            .map(|o| match &o.uid {
                Some(u) => format!("{u} / {}", o.id),
                None => format!("(no uid) / {}", o.id),
            })
            .collect::<Vec<_>>()
            .join(", ");
        Err(FlinkError::OperatorNotFound {
            wanted: uid_or_id.to_string(),
            available: if available.is_empty() {
                "none".into()
            } else {
                available
            },
        })
    }

    /// Opens every managed keyed-state handle of `op` and prepares the import. Raw keyed state (which only
    /// the operator that wrote it can read) is an error rather than left behind; operator state (not keyed)
    /// gives a warning, as it has no place in one of our savepoints.
    pub fn import(&self, op: &OperatorState) -> Result<FlinkImport, FlinkError> {
        let label = op.label();
        let mut files = Vec::new();
        let mut warnings = Vec::new();
        for st in &op.subtasks {
            if let Some(h) = &st.raw_keyed {
                return Err(FlinkError::UnsupportedHandle {
                    operator: label,
                    subtask: st.index,
                    handle: h.type_name(),
                    detail: "raw keyed state is written and read by the operator's own code; it cannot be imported, and an import never leaves state behind".into(),
                });
            }
            for (what, h) in [("managed", &st.managed_operator), ("raw", &st.raw_operator)] {
                if let Some(h) = h {
                    let names: Vec<&str> = h.states.iter().map(|(n, _, _)| n.as_str()).collect();
                    warnings.push(format!(
                        "operator {label} subtask {}: {what} operator state ({}) is not keyed state and is not imported (export-flink --template carries it over)",
                        st.index,
                        if names.is_empty() { "no named states".to_string() } else { names.join(", ") }
                    ));
                }
            }
            let Some(h) = &st.managed_keyed else { continue };
            files.push(
                KeyedFile::open(self, &label, st.index, h, op.max_parallelism)
                    .map_err(|e| e.in_handle(&label, st.index, h.type_name()))?,
            );
        }
        if files.is_empty() {
            return Err(FlinkError::NoKeyedState { operator: label });
        }
        let mut import = FlinkImport::new(label, op.max_parallelism, files)?;
        import.warnings.extend(warnings);
        Ok(import)
    }

    /// The operators with managed keyed state, in `_metadata` order.
    pub fn keyed_operators(&self) -> impl Iterator<Item = &OperatorState> + '_ {
        self.metadata
            .operators
            .iter()
            .filter(|o| o.subtasks.iter().any(|s| s.managed_keyed.is_some()))
    }
}

/// How a keyed-state stream lays out its key groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamFormat {
    /// Flink's canonical format (canonical savepoints, and full checkpoints of the RocksDB backend).
    Canonical,
    /// The HashMap backend's native format (its checkpoints and native savepoints).
    HeapNative,
    /// A RocksDB directory (`IncrementalRemoteKeyedStateHandle`): SST files.
    RocksDb,
}

/// One subtask's keyed-state handle, opened: its stream (or RocksDB files) and header.
#[derive(Debug)]
pub struct KeyedFile {
    /// The file name (or `inline:<name>`; for RocksDB, the meta-data file).
    pub name: String,
    /// The subtask index.
    pub subtask: u32,
    /// Flink's class name of the handle.
    pub handle: &'static str,
    /// The stream's bytes (a file is memory-mapped).
    pub data: StreamBytes,
    /// The handle's key groups.
    pub range: KeyGroupRange,
    /// Offsets per key group (0 = empty).
    pub offsets: Vec<i64>,
    /// The stream's header.
    pub proxy: KeyedProxy,
    /// The header's states mapped to ours, by Flink state id.
    pub metas: Vec<StateMetaInfo>,
    /// The HashMap backend's native format rather than the canonical one.
    pub native: bool,
    /// For a RocksDB native savepoint or incremental checkpoint (`IncrementalRemoteKeyedStateHandle`):
    /// its SST files read and folded (`data` is then the meta-data file, `offsets` empty).
    pub rocks: Option<RocksNativeState>,
}

impl KeyedFile {
    /// Opens a key-groups handle — canonical (`KeyGroupsSavepointStateHandle`, or a `KeyGroupsStateHandle`
    /// of the RocksDB backend's full checkpoints) or the HashMap backend's native format
    /// (`KeyGroupsStateHandle`, uncompressed or Snappy; told apart by content) — or a RocksDB native
    /// savepoint or checkpoint (`IncrementalRemoteKeyedStateHandle`, its files read whole). The key-group
    /// offsets must increase with the key group and the header must end at the first; other handle types
    /// give [`FlinkError::UnsupportedHandle`] naming them.
    pub fn open(
        sp: &FlinkSavepoint,
        operator: &str,
        subtask: u32,
        h: &KeyedHandle,
        max_parallelism: u32,
    ) -> Result<Self, FlinkError> {
        let unsupported = |detail: &str| FlinkError::UnsupportedHandle {
            operator: operator.to_string(),
            subtask,
            handle: h.type_name(),
            detail: detail.to_string(),
        };
        let (range, offsets, stream, checkpoint) = match h {
            KeyedHandle::KeyGroups {
                kind,
                range,
                offsets,
                stream,
                ..
            } => (
                *range,
                offsets.clone(),
                stream,
                *kind == KeyGroupsHandleKind::Checkpoint,
            ),
            KeyedHandle::Incremental {
                range,
                meta,
                shared,
                private,
                ..
            } => {
                return Self::open_incremental(
                    sp,
                    subtask,
                    *range,
                    meta,
                    shared,
                    private,
                    max_parallelism,
                )
            }
            KeyedHandle::Changelog { .. } => {
                return Err(unsupported(
                    "changelog state backend handles are not imported",
                ))
            }
        };
        if range.end() as u32 >= max_parallelism {
            return Err(FlinkError::Inconsistent(format!(
                "subtask {subtask}: key groups {range} exceed max parallelism {max_parallelism}"
            )));
        }
        let name = display_name(stream);
        let data = map_stream(stream, sp.dir())?;
        let mut last = 0i64;
        for (j, off) in offsets.iter().enumerate() {
            if *off == 0 {
                continue;
            }
            if *off <= last || *off as u64 >= data.len() as u64 {
                return Err(FlinkError::BadKeyGroup {
                    at: Location::at(name.as_str(), *off as u64),
                    key_group: range.start() + j as KeyGroup,
                    detail: format!(
                        "offset {off} is not after the previous key group's ({last}) and inside the stream of {} bytes",
                        data.len()
                    ),
                });
            }
            last = *off;
        }
        let header_end = offsets
            .iter()
            .filter(|o| **o != 0)
            .min()
            .map(|o| *o as usize);
        let proxy = read_proxy(&data, &name, header_end)?;
        if header_end.is_none() && proxy.end != data.len() {
            return Err(FlinkError::UnreadData {
                file: name,
                detail: format!(
                    "{} bytes after the header, but no key group offset points into them",
                    data.len() - proxy.end
                ),
            });
        }
        let metas = proxy
            .states
            .iter()
            .map(|s| s.to_meta(&name))
            .collect::<Result<Vec<_>, _>>()?;
        let mut file = KeyedFile {
            name,
            subtask,
            handle: h.type_name(),
            data,
            range,
            offsets,
            proxy,
            metas,
            native: false,
            rocks: None,
        };
        if checkpoint {
            file.native = file.detect_heap_native(max_parallelism)?;
        }
        if file.native {
            // The native format holds no value lengths: a serializer kept raw cannot be read past.
            if let Some((state, class)) = file.proxy.raw_serializers().into_iter().next() {
                return Err(FlinkError::UnsupportedState {
                    file: file.name,
                    state,
                    detail: format!(
                        "the native heap format can only be imported when every serializer is known; {class} is not"
                    ),
                });
            }
        }
        Ok(file)
    }

    /// The format of the stream.
    pub fn format(&self) -> StreamFormat {
        match (&self.rocks, self.native) {
            (Some(_), _) => StreamFormat::RocksDb,
            (None, true) => StreamFormat::HeapNative,
            (None, false) => StreamFormat::Canonical,
        }
    }

    /// Where the bytes of the `j`-th key group of the range end: the next key group's offset, or the end of
    /// the stream.
    fn key_group_end(&self, j: usize) -> usize {
        self.offsets[j + 1..]
            .iter()
            .find(|o| **o != 0)
            .map(|o| *o as usize)
            .unwrap_or(self.data.len())
    }

    /// A `KeyGroupsStateHandle` holds either the HashMap backend's native format (every key group written,
    /// each starting with its own key-group id) or the canonical format (the RocksDB backend's full
    /// checkpoints: empty key groups have offset 0, each starts with a state id, compressed ones with a
    /// Snappy stream identifier). Decided on the first key group; both or neither fitting is an error.
    fn detect_heap_native(&self, max_parallelism: u32) -> Result<bool, FlinkError> {
        let Some(j) = self.offsets.iter().position(|o| *o != 0) else {
            return Ok(false);
        };
        if self.offsets.contains(&0) {
            return Ok(false);
        }
        let kg = self.range.start() + j as KeyGroup;
        let off = self.offsets[j] as usize;
        let heap = self.data.get(off..off + 4) == Some(&i32::from(kg).to_be_bytes()[..]);
        let canonical = read_key_group(
            &self.data,
            off,
            kg,
            max_parallelism,
            self.proxy.compressed,
            self.proxy.states.len(),
            &self.name,
            &mut |_, _, _| Ok(()),
        )
        .is_ok_and(|st| st.end == self.key_group_end(j));
        match (heap, canonical) {
            (true, false) => Ok(true),
            (false, true) => Ok(false),
            (true, true) | (false, false) => Err(FlinkError::BadKeyGroup {
                at: Location::at(self.name.as_str(), off as u64),
                key_group: kg,
                detail: format!(
                    "the stream is {} the HashMap backend's native format and {} the canonical one",
                    if heap { "both" } else { "neither" },
                    if heap { "" } else { "nor" },
                ),
            }),
        }
    }

    fn open_incremental(
        sp: &FlinkSavepoint,
        subtask: u32,
        range: KeyGroupRange,
        meta: &StreamHandle,
        shared: &[(String, StreamHandle)],
        private: &[(String, StreamHandle)],
        max_parallelism: u32,
    ) -> Result<Self, FlinkError> {
        if range.end() as u32 >= max_parallelism {
            return Err(FlinkError::Inconsistent(format!(
                "subtask {subtask}: key groups {range} exceed max parallelism {max_parallelism}"
            )));
        }
        let name = display_name(meta);
        let data = map_stream(meta, sp.dir())?;
        let proxy = read_proxy(&data, &name, Some(data.len()))?;
        let metas = proxy
            .states
            .iter()
            .map(|s| s.to_meta(&name))
            .collect::<Result<Vec<_>, _>>()?;
        let rocks = RocksNativeState::read(
            shared,
            private,
            sp.dir(),
            &proxy.states,
            range,
            max_parallelism,
        )?;
        Ok(KeyedFile {
            name,
            subtask,
            handle: "IncrementalRemoteKeyedStateHandle",
            data,
            range,
            offsets: Vec::new(),
            proxy,
            metas,
            native: false,
            rocks: Some(rocks),
        })
    }

    /// Key groups of this file that hold data.
    pub fn key_groups_with_data(&self) -> Vec<KeyGroup> {
        match &self.rocks {
            Some(r) => r.key_groups().collect(),
            None => self
                .offsets
                .iter()
                .enumerate()
                .filter(|(_, o)| **o != 0)
                .map(|(j, _)| self.range.start() + j as KeyGroup)
                .collect(),
        }
    }

    /// Reads key group `kg` of this file, calling `f(flink state id, key, value)`.
    pub fn read_key_group(
        &self,
        kg: KeyGroup,
        max_parallelism: u32,
        f: &mut dyn FnMut(usize, &[u8], &[u8]) -> Result<(), FlinkError>,
    ) -> Result<Option<KeyGroupStats>, FlinkError> {
        if !self.range.contains(kg) {
            return Ok(None);
        }
        if let Some(r) = &self.rocks {
            let (entries, bytes) = r.read_key_group(kg, f)?;
            return Ok((entries > 0).then_some(KeyGroupStats {
                entries,
                bytes,
                end: 0,
            }));
        }
        let j = (kg - self.range.start()) as usize;
        let off = self.offsets[j];
        if off == 0 {
            return Ok(None);
        }
        let next = self.key_group_end(j);
        let at = Location::at(self.name.as_str(), off as u64);
        if self.native {
            // Compressed: the key group id, then per state one Snappy framed stream (state id, count,
            // entries); decoded back to back they are the uncompressed layout.
            let decoded;
            let (data, start, want_end): (&[u8], usize, usize) = if self.proxy.compressed {
                let off = off as usize;
                let Some(framed) = self.data.get(off + 4..next).filter(|_| off + 4 <= next) else {
                    return Err(FlinkError::BadKeyGroup {
                        at,
                        key_group: kg,
                        detail: format!(
                            "key group at byte {off} ends at {next}, before its compressed state streams"
                        ),
                    });
                };
                let mut buf = self.data[off..off + 4].to_vec();
                buf.extend_from_slice(&super::snappy::decode_all(framed, &self.name)?);
                decoded = buf;
                (&decoded, 0, decoded.len())
            } else {
                (&self.data, off as usize, next)
            };
            let mut entries = 0u64;
            let mut bytes = 0u64;
            let end = read_native_key_group(
                data,
                start,
                kg,
                max_parallelism,
                &self.proxy.key_serializer.snapshot,
                &self.metas,
                &self.name,
                &mut |s, k, v| {
                    entries += 1;
                    bytes += (k.len() + v.len()) as u64;
                    f(s, &k, &v)
                },
            )?;
            if end != want_end {
                return Err(FlinkError::UnreadData {
                    file: self.name.clone(),
                    detail: if self.proxy.compressed {
                        format!(
                            "key group {kg}: its decoded state streams hold {want_end} bytes, the entries end at {end}"
                        )
                    } else {
                        format!("key group {kg} ends at byte {end}, the next key group starts at {next}: {} bytes in no key group", next.abs_diff(end))
                    },
                });
            }
            return Ok(Some(KeyGroupStats {
                entries,
                bytes,
                end: next.max(end),
            }));
        }
        let stats = read_key_group(
            &self.data,
            off as usize,
            kg,
            max_parallelism,
            self.proxy.compressed,
            self.proxy.states.len(),
            &self.name,
            f,
        )?;
        if stats.end != next {
            return Err(FlinkError::UnreadData {
                file: self.name.clone(),
                detail: format!(
                    "key group {kg} ends at byte {}, the next key group (or the stream) at {next}: {} bytes in no key group",
                    stats.end,
                    next.abs_diff(stats.end)
                ),
            });
        }
        Ok(Some(stats))
    }
}

/// One state's entries of one key group: the bytes of every key and value, and per entry
/// `(key offset, key length, value length)` (the value follows its key), sorted by key.
#[derive(Debug, Default, Clone)]
pub struct StateEntries {
    data: Vec<u8>,
    index: Vec<(usize, u32, u32)>,
}

impl StateEntries {
    fn clear(&mut self) {
        self.data.clear();
        self.index.clear();
    }

    fn push(&mut self, key: &[u8], value: &[u8]) {
        self.index
            .push((self.data.len(), key.len() as u32, value.len() as u32));
        self.data.extend_from_slice(key);
        self.data.extend_from_slice(value);
    }

    fn key(&self, e: &(usize, u32, u32)) -> &[u8] {
        &self.data[e.0..e.0 + e.1 as usize]
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// The entries as `(key, value)`, in key order once decoded.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        self.index.iter().map(|&(at, kl, vl)| {
            let k_end = at + kl as usize;
            (
                &self.data[at..k_end],
                &self.data[k_end..k_end + vl as usize],
            )
        })
    }

    /// Sorts by key (a no-op for the sorted key groups Flink's RocksDB backend writes); returns a key
    /// that occurs twice, if any.
    fn sort_and_find_duplicate(&mut self) -> Option<Vec<u8>> {
        let sorted = self
            .index
            .windows(2)
            .all(|w| self.key(&w[0]) < self.key(&w[1]));
        if !sorted {
            let mut index = std::mem::take(&mut self.index);
            index.sort_unstable_by(|a, b| self.key(a).cmp(self.key(b)));
            self.index = index;
        }
        self.index
            .windows(2)
            .find(|w| self.key(&w[0]) == self.key(&w[1]))
            .map(|w| self.key(&w[0]).to_vec())
    }
}

/// Per our state index, its entries of one key group.
pub type Entries = Vec<StateEntries>;

/// The keyed state of one Flink operator as a [`BackendSnapshot`]: every key group of every subtask
/// handle, states merged by name (in the order the first handle lists them), entries sorted per state and
/// key group as our format requires. Key groups are decoded one at a time when visited.
#[derive(Debug)]
pub struct FlinkImport {
    operator: String,
    config: BackendConfig,
    states: Vec<StateMetaInfo>,
    files: Vec<KeyedFile>,
    /// Per file: Flink state id → our state index.
    maps: Vec<Vec<usize>>,
    /// Per key group of the range: the file holding data for it.
    owners: BTreeMap<KeyGroup, usize>,
    warnings: Vec<String>,
    /// The key group decoded last (`None`: none is valid), with its entries; buffers are reused.
    cache: Mutex<(Option<KeyGroup>, Entries)>,
    /// Key groups with data decoded so far, with their entries.
    read: Mutex<BTreeMap<KeyGroup, u64>>,
}

/// What an import read, once every key group was: [`FlinkImport::finish`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImportReport {
    /// Subtask handles read.
    pub handles: usize,
    /// Key groups with data.
    pub key_groups: usize,
    /// Entries read.
    pub entries: u64,
}

impl FlinkImport {
    fn new(
        operator: String,
        max_parallelism: u32,
        files: Vec<KeyedFile>,
    ) -> Result<Self, FlinkError> {
        let first = &files[0];
        let key_serializer = first.proxy.key_serializer.snapshot.clone();
        let mut states: Vec<StateMetaInfo> = Vec::new();
        let mut origin: Vec<String> = Vec::new();
        let mut maps = Vec::new();
        let mut warnings = Vec::new();
        for f in &files {
            if f.proxy.key_serializer.snapshot != key_serializer {
                return Err(FlinkError::Inconsistent(format!(
                    "key serializer of {} ({}) differs from {}'s ({})",
                    f.name, f.proxy.key_serializer.snapshot, first.name, key_serializer
                )));
            }
            let mut map = Vec::with_capacity(f.proxy.states.len());
            for meta in f.metas.iter().cloned() {
                match states.iter().position(|m| m.name == meta.name) {
                    Some(i) => {
                        if states[i] != meta {
                            return Err(FlinkError::StateMismatch {
                                state: meta.name,
                                first: origin[i].clone(),
                                second: f.name.clone(),
                            });
                        }
                        map.push(i);
                    }
                    None => {
                        map.push(states.len());
                        states.push(meta);
                        origin.push(f.name.clone());
                    }
                }
            }
            maps.push(map);
        }
        for (place, class) in files.iter().flat_map(|f| f.proxy.raw_serializers()) {
            let w = format!(
                "state '{place}': serializer {class} has no known layout; its snapshot and values are kept as raw bytes"
            );
            if !warnings.contains(&w) {
                warnings.push(w);
            }
        }
        for f in &files {
            if let Some(r) = f.rocks.as_ref().filter(|r| r.skipped_outside_range > 0) {
                warnings.push(format!(
                    "subtask {}: {} keys outside its key groups {} skipped (left in its SST files after a rescale; Flink's restore clips them too)",
                    f.subtask, r.skipped_outside_range, f.range
                ));
            }
        }
        let mut owners = BTreeMap::new();
        for (i, f) in files.iter().enumerate() {
            for kg in f.key_groups_with_data() {
                if let Some(prev) = owners.insert(kg, i) {
                    return Err(FlinkError::Inconsistent(format!(
                        "key group {kg} has data in both {} and {}",
                        files[prev].name, f.name
                    )));
                }
            }
        }
        let start = files.iter().map(|f| f.range.start()).min().unwrap_or(0);
        let end = files.iter().map(|f| f.range.end()).max().unwrap_or(0);
        Ok(FlinkImport {
            operator,
            config: BackendConfig {
                max_parallelism,
                key_group_range: KeyGroupRange::new(start, end),
                key_serializer,
            },
            states,
            files,
            maps,
            owners,
            warnings,
            cache: Mutex::new((None, Vec::new())),
            read: Mutex::new(BTreeMap::new()),
        })
    }

    /// Serializers kept as raw bytes, as messages for the user.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The subtask streams read.
    pub fn files(&self) -> &[KeyedFile] {
        &self.files
    }

    /// Key groups with data.
    pub fn key_groups(&self) -> impl Iterator<Item = KeyGroup> + '_ {
        self.owners.keys().copied()
    }

    /// Decodes key group `kg`: per our state index, its entries sorted by key. Duplicate keys are errors.
    pub fn decode_key_group(&self, kg: KeyGroup) -> Result<Entries, FlinkError> {
        let mut out: Entries = vec![StateEntries::default(); self.states.len()];
        self.decode_key_group_into(kg, &mut out)?;
        Ok(out)
    }

    /// [`decode_key_group`](Self::decode_key_group) into `out` (one slot per state), reusing its buffers.
    fn decode_key_group_into(&self, kg: KeyGroup, out: &mut Entries) -> Result<(), FlinkError> {
        out.resize_with(self.states.len(), StateEntries::default);
        out.iter_mut().for_each(StateEntries::clear);
        let Some(&fi) = self.owners.get(&kg) else {
            return Ok(());
        };
        let file = &self.files[fi];
        let map = &self.maps[fi];
        let in_handle = |e: FlinkError| e.in_handle(&self.operator, file.subtask, file.handle);
        let mut n = 0u64;
        file.read_key_group(kg, self.config.max_parallelism, &mut |sid, k, v| {
            out[map[sid]].push(k, v);
            n += 1;
            Ok(())
        })
        .map_err(in_handle)?;
        for (i, entries) in out.iter_mut().enumerate() {
            if let Some(k) = entries.sort_and_find_duplicate() {
                return Err(in_handle(FlinkError::BadKeyGroup {
                    at: Location::file(file.name.as_str()),
                    key_group: kg,
                    detail: format!("state '{}' holds key {:02x?} twice", self.states[i].name, k),
                }));
            }
        }
        if let Ok(mut read) = self.read.lock() {
            read.insert(kg, n);
        }
        Ok(())
    }

    /// The end-of-import check: every key group that holds data was read (by the savepoint writer's
    /// visits, or by [`decode_key_group`](Self::decode_key_group)). An import that left data unread is an
    /// error naming the file and key group, never a success with fewer entries.
    pub fn finish(&self) -> Result<ImportReport, FlinkError> {
        let read = self
            .read
            .lock()
            .map_err(|_| FlinkError::Inconsistent("Flink import after a panic".into()))?;
        for (kg, &fi) in &self.owners {
            if !read.contains_key(kg) {
                let f = &self.files[fi];
                return Err(FlinkError::UnreadData {
                    file: f.name.clone(),
                    detail: format!("key group {kg} holds data but was never read"),
                }
                .in_handle(&self.operator, f.subtask, f.handle));
            }
        }
        Ok(ImportReport {
            handles: self.files.len(),
            key_groups: read.len(),
            entries: read.values().sum(),
        })
    }

    /// Writes the import as one of our savepoints at `path`, then checks that nothing was left unread
    /// ([`finish`](Self::finish)); on any failure no file is left at `path`.
    pub fn write_savepoint(
        &self,
        path: &Path,
        options: &WriteOptions,
    ) -> Result<(SavepointSummary, ImportReport), FlinkError> {
        let summary = write_savepoint(path, self, options)?;
        match self.finish() {
            Ok(report) if report.entries == summary.total_entries() => Ok((summary, report)),
            Ok(report) => {
                let _ = std::fs::remove_file(path);
                Err(FlinkError::UnreadData {
                    file: path.display().to_string(),
                    detail: format!(
                        "{} entries were read from Flink's files, {} written",
                        report.entries,
                        summary.total_entries()
                    ),
                })
            }
            Err(e) => {
                let _ = std::fs::remove_file(path);
                Err(e)
            }
        }
    }
}

impl BackendSnapshot for FlinkImport {
    fn config(&self) -> &BackendConfig {
        &self.config
    }

    fn states(&self) -> &[StateMetaInfo] {
        &self.states
    }

    fn visit(
        &self,
        state: StateId,
        kg: KeyGroup,
        f: &mut dyn FnMut(&[u8], &[u8]) -> keyed_state::Result<()>,
    ) -> keyed_state::Result<()> {
        let mut cache = self
            .cache
            .lock()
            .map_err(|_| keyed_state::Error::Closed("Flink import after a panic"))?;
        let (at, entries) = &mut *cache;
        if *at != Some(kg) {
            *at = None;
            self.decode_key_group_into(kg, entries)?;
            *at = Some(kg);
        }
        if let Some(list) = entries.get(state) {
            for (k, v) in list.iter() {
                f(k, v)?;
            }
        }
        Ok(())
    }
}
