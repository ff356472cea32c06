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

/// A Flink savepoint or checkpoint directory with its decoded `_metadata`.
#[derive(Debug, Clone)]
pub struct FlinkSavepoint {
    dir: PathBuf,
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
        Ok(FlinkSavepoint { dir, metadata })
    }

    /// From `_metadata` bytes already read; relative handles resolve against `dir`.
    pub fn from_bytes(dir: &Path, bytes: &[u8]) -> Result<Self, FlinkError> {
        Ok(FlinkSavepoint {
            dir: dir.to_path_buf(),
            metadata: parse_metadata(bytes, "_metadata")?,
        })
    }

    /// The directory relative handles resolve against.
    pub fn dir(&self) -> &Path {
        &self.dir
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

    /// Opens every managed keyed-state handle of `op` and prepares the import.
    pub fn import(&self, op: &OperatorState) -> Result<FlinkImport, FlinkError> {
        let label = op.label();
        let mut files = Vec::new();
        for st in &op.subtasks {
            let Some(h) = &st.managed_keyed else { continue };
            files.push(KeyedFile::open(
                self,
                &label,
                st.index,
                h,
                op.max_parallelism,
            )?);
        }
        if files.is_empty() {
            return Err(FlinkError::NoKeyedState { operator: label });
        }
        FlinkImport::new(op.max_parallelism, files)
    }
}

/// One subtask's canonical keyed-state stream.
#[derive(Debug)]
pub struct KeyedFile {
    /// The file name (or `inline:<name>`).
    pub name: String,
    /// The subtask index.
    pub subtask: u32,
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
    /// The HashMap backend's native format (`KeyGroupsStateHandle`) rather than the canonical one.
    pub native: bool,
    /// For a RocksDB native savepoint or incremental checkpoint (`IncrementalRemoteKeyedStateHandle`):
    /// its SST files read and folded (`data` is then the meta-data file, `offsets` empty).
    pub rocks: Option<RocksNativeState>,
}

impl KeyedFile {
    /// Opens a key-groups handle — canonical (`KeyGroupsSavepointStateHandle`) or the HashMap backend's
    /// native format (`KeyGroupsStateHandle`, uncompressed or Snappy) — or a RocksDB native savepoint or incremental
    /// checkpoint (`IncrementalRemoteKeyedStateHandle`, its SST files read whole). Other handle types give
    /// [`FlinkError::UnsupportedHandle`] naming them.
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
        let (range, offsets, stream, native) = match h {
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
        let header_end = offsets
            .iter()
            .filter(|o| **o != 0)
            .min()
            .map(|o| *o as usize);
        let proxy = read_proxy(&data, &name, header_end)?;
        let metas = proxy
            .states
            .iter()
            .map(|s| s.to_meta(&name))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(KeyedFile {
            name,
            subtask,
            data,
            range,
            offsets,
            proxy,
            metas,
            native,
            rocks: None,
        })
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
        let off = self.offsets[(kg - self.range.start()) as usize];
        if off == 0 {
            return Ok(None);
        }
        if self.native {
            let j = (kg - self.range.start()) as usize;
            let next = self
                .offsets
                .get(j + 1)
                .map(|o| *o as usize)
                .unwrap_or(self.data.len());
            // Compressed: the key group id, then per state one Snappy framed stream (state id, count,
            // entries); decoded back to back they are the uncompressed layout.
            let decoded;
            let (data, start, want_end): (&[u8], usize, usize) = if self.proxy.compressed {
                let off = off as usize;
                let Some(framed) = self.data.get(off + 4..next).filter(|_| off + 4 <= next) else {
                    return Err(FlinkError::BadKeyGroup {
                        file: self.name.clone(),
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
                return Err(FlinkError::BadKeyGroup {
                    file: self.name.clone(),
                    key_group: kg,
                    detail: if self.proxy.compressed {
                        format!(
                            "its decoded state streams hold {want_end} bytes, the entries end at {end}"
                        )
                    } else {
                        format!("ends at byte {end}, the next key group starts at {next}")
                    },
                });
            }
            return Ok(Some(KeyGroupStats {
                entries,
                bytes,
                end: next.max(end),
            }));
        }
        read_key_group(
            &self.data,
            off as usize,
            kg,
            max_parallelism,
            self.proxy.compressed,
            self.proxy.states.len(),
            &self.name,
            f,
        )
        .map(Some)
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
}

impl FlinkImport {
    fn new(max_parallelism: u32, files: Vec<KeyedFile>) -> Result<Self, FlinkError> {
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
        file.read_key_group(kg, self.config.max_parallelism, &mut |sid, k, v| {
            out[map[sid]].push(k, v);
            Ok(())
        })?;
        for (i, entries) in out.iter_mut().enumerate() {
            if let Some(k) = entries.sort_and_find_duplicate() {
                return Err(FlinkError::BadKeyGroup {
                    file: file.name.clone(),
                    key_group: kg,
                    detail: format!("state '{}' holds key {:02x?} twice", self.states[i].name, k),
                });
            }
        }
        Ok(())
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
