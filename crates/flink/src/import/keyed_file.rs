//! One subtask's keyed-state handle of a Flink savepoint, opened: its stream (canonical or the HashMap
//! backend's native format) or RocksDB files, its header, and its key groups read one at a time.

use super::savepoint_dir::FlinkSavepoint;
use crate::heap_native::read_native_key_group;
use crate::keyed_stream::{read_key_group, KeyGroupStats};
use crate::location::{display_name, map_stream, StreamBytes};
use crate::metadata::{KeyGroupsHandleKind, KeyedHandle, StreamHandle};
use crate::proxy::{read_proxy, KeyedProxy};
use crate::rocksdb_native::RocksNativeState;
use crate::FlinkError;
use keyed_state::keygroup::{KeyGroup, KeyGroupRange};
use keyed_state::meta::StateMetaInfo;
use keyed_state::Location;

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
                buf.extend_from_slice(&crate::snappy::decode_all(framed, &self.name)?);
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
