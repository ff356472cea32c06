//! Flink's `_metadata` file (`Checkpoints` / `MetadataV3Serializer` … `MetadataV7Serializer`): operators,
//! subtask states and state handles. Byte layout: `design/flink-interop.md`, "_metadata".

use super::input::DataInput;
use super::FlinkError;
use keyed_state::keygroup::KeyGroupRange;
use keyed_state::Location;

/// `Checkpoints.HEADER_MAGIC_NUMBER`.
pub const METADATA_MAGIC: u32 = 0x4960_672d;
/// The oldest metadata version read (Flink 1.14 and 1.15 write 3, 1.16 to 1.20 write 4).
pub const MIN_METADATA_VERSION: i32 = 3;
/// The newest metadata version read (7 adds a per-subtask reference checkpoint id).
pub const MAX_METADATA_VERSION: i32 = 7;

const MASTER_STATE_MAGIC: u32 = 0xc96b_1696;

/// A decoded `_metadata` file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointMetadata {
    /// The metadata format version.
    pub version: i32,
    /// The checkpoint (or savepoint) id.
    pub checkpoint_id: i64,
    /// Number of master (coordinator-side) states, kept opaque.
    pub master_states: usize,
    /// The master states as they are encoded (magic, length, bytes each), written back verbatim.
    pub master_state_bytes: Vec<u8>,
    /// Every operator with state.
    pub operators: Vec<OperatorState>,
    /// Where each operator's encoding lies in the `_metadata` read (same order as `operators`; empty for
    /// metadata built in memory): what a whole-job export copies byte for byte.
    pub operator_spans: Vec<std::ops::Range<usize>>,
    /// The bytes after the operator states, kept as they are (v4+: Java-serialized `CheckpointProperties`).
    pub trailer: Vec<u8>,
}

/// A Flink `OperatorID`: 16 bytes, printed as 32 hex digits in file order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OperatorId(pub [u8; 16]);

impl OperatorId {
    /// The 32 lowercase hex digits Flink prints.
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Parses 32 hex digits.
    pub fn from_hex(s: &str) -> Option<Self> {
        let s = s.trim();
        if s.len() != 32 || !s.is_ascii() {
            return None;
        }
        let mut id = [0u8; 16];
        for (i, b) in id.iter_mut().enumerate() {
            *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
        }
        Some(OperatorId(id))
    }
}

impl std::fmt::Display for OperatorId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_hex())
    }
}

/// One operator's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorState {
    /// The operator name (metadata v5+; `None` when absent or empty).
    pub name: Option<String>,
    /// The operator uid (metadata v5+; `None` when absent or empty).
    pub uid: Option<String>,
    /// The operator id.
    pub id: OperatorId,
    /// Parallelism when the snapshot was taken.
    pub parallelism: u32,
    /// Max parallelism (number of key groups).
    pub max_parallelism: u32,
    /// Operator coordinator state, if any.
    pub coordinator_state: Option<StreamHandle>,
    /// Every subtask of the operator was finished (`numSubtasks == -1`).
    pub fully_finished: bool,
    /// The subtask states present.
    pub subtasks: Vec<SubtaskState>,
}

impl OperatorState {
    /// `uid` if it has one, else the hex id.
    pub fn label(&self) -> String {
        match &self.uid {
            Some(u) => u.clone(),
            None => self.id.to_hex(),
        }
    }
}

/// One subtask's state handles.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubtaskState {
    /// The subtask index.
    pub index: u32,
    /// The subtask had finished (no handles follow in the file).
    pub finished: bool,
    /// Managed operator state.
    pub managed_operator: Option<OperatorStateHandle>,
    /// Raw operator state.
    pub raw_operator: Option<OperatorStateHandle>,
    /// Managed keyed state: what import reads.
    pub managed_keyed: Option<KeyedHandle>,
    /// Raw keyed state.
    pub raw_keyed: Option<KeyedHandle>,
    /// Input channel state handles (unaligned checkpoints).
    pub input_channels: Vec<ChannelHandle>,
    /// Result subpartition state handles (unaligned checkpoints).
    pub result_subpartitions: Vec<ChannelHandle>,
    /// The regional checkpoint reference id (metadata v7).
    pub ref_checkpoint_id: Option<i64>,
}

/// Where bytes of state live (Flink's `StreamStateHandle`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamHandle {
    /// Tag 1: the bytes inline in `_metadata`.
    ByteStream {
        /// The handle name (the path the file would have had).
        name: String,
        /// The bytes.
        data: Vec<u8>,
    },
    /// Tag 2: a file by absolute path or URI (re-rooted on read).
    File {
        /// The path or URI as written.
        path: String,
        /// Its size in bytes.
        size: i64,
    },
    /// Tag 6: a file relative to the directory of `_metadata`.
    Relative {
        /// The relative path.
        path: String,
        /// Its size in bytes.
        size: i64,
    },
    /// Tags 15/16: a segment of a (merged) file.
    Segment {
        /// The file path or URI.
        path: String,
        /// Start offset within the file.
        start: i64,
        /// Segment length.
        size: i64,
    },
    /// Tag 3 in stream position: key-group offsets around another stream handle.
    KeyGroups {
        /// The key groups.
        range: KeyGroupRange,
        /// Offsets per key group.
        offsets: Vec<i64>,
        /// The stream.
        inner: Box<StreamHandle>,
    },
}

impl StreamHandle {
    /// Flink's class name for the handle.
    pub fn type_name(&self) -> &'static str {
        match self {
            StreamHandle::ByteStream { .. } => "ByteStreamStateHandle",
            StreamHandle::File { .. } => "FileStateHandle",
            StreamHandle::Relative { .. } => "RelativeFileStateHandle",
            StreamHandle::Segment { .. } => "SegmentFileStateHandle",
            StreamHandle::KeyGroups { .. } => "KeyGroupsStateHandle",
        }
    }

    /// The stored size in bytes (inline length, or the size recorded for files).
    pub fn size(&self) -> i64 {
        match self {
            StreamHandle::ByteStream { data, .. } => data.len() as i64,
            StreamHandle::File { size, .. }
            | StreamHandle::Relative { size, .. }
            | StreamHandle::Segment { size, .. } => *size,
            StreamHandle::KeyGroups { inner, .. } => inner.size(),
        }
    }

    /// A one-line description (`RelativeFileStateHandle 8b16… (14508 bytes)`).
    pub fn describe(&self) -> String {
        match self {
            StreamHandle::ByteStream { name, data } => {
                format!(
                    "ByteStreamStateHandle inline '{name}' ({} bytes)",
                    data.len()
                )
            }
            StreamHandle::File { path, size } => format!("FileStateHandle {path} ({size} bytes)"),
            StreamHandle::Relative { path, size } => {
                format!("RelativeFileStateHandle {path} ({size} bytes)")
            }
            StreamHandle::Segment { path, start, size } => {
                format!("SegmentFileStateHandle {path} @{start} ({size} bytes)")
            }
            StreamHandle::KeyGroups { range, inner, .. } => {
                format!("KeyGroupsStateHandle {range} via {}", inner.describe())
            }
        }
    }
}

/// Which key-groups handle a tag stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyGroupsHandleKind {
    /// Tag 7, `KeyGroupsSavepointStateHandle`: a canonical savepoint.
    Savepoint,
    /// Tag 12 (or 3 before 1.15), `KeyGroupsStateHandle`: a heap checkpoint or native savepoint.
    Checkpoint,
}

/// A keyed state handle (Flink's `KeyedStateHandle`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyedHandle {
    /// Tags 3, 7, 12: one stream with an offset per key group.
    KeyGroups {
        /// Savepoint (canonical) or checkpoint (heap native).
        kind: KeyGroupsHandleKind,
        /// The key groups.
        range: KeyGroupRange,
        /// Stream offset of each key group, in range order (0 = no data in the canonical format).
        offsets: Vec<i64>,
        /// The stream.
        stream: StreamHandle,
        /// Flink's state handle id (tag 12).
        handle_id: Option<String>,
    },
    /// Tags 5, 11: RocksDB incremental checkpoint or native savepoint.
    Incremental {
        /// The checkpoint id.
        checkpoint_id: i64,
        /// The backend UUID.
        backend_id: String,
        /// The key groups.
        range: KeyGroupRange,
        /// Checkpointed size (tag 11).
        checkpointed_size: Option<i64>,
        /// The meta-data file (serialization proxy).
        meta: StreamHandle,
        /// Shared files (SSTs) by local file name.
        shared: Vec<(String, StreamHandle)>,
        /// Private files (MANIFEST, CURRENT, OPTIONS) by local file name.
        private: Vec<(String, StreamHandle)>,
        /// Flink's state handle id (tag 11).
        handle_id: Option<String>,
    },
    /// Tags 8–10, 13, 14: changelog state backend handles (read over, never imported).
    Changelog {
        /// Flink's class name.
        type_name: &'static str,
        /// The key groups.
        range: KeyGroupRange,
    },
}

impl KeyedHandle {
    /// Flink's class name for the handle.
    pub fn type_name(&self) -> &'static str {
        match self {
            KeyedHandle::KeyGroups {
                kind: KeyGroupsHandleKind::Savepoint,
                ..
            } => "KeyGroupsSavepointStateHandle",
            KeyedHandle::KeyGroups { .. } => "KeyGroupsStateHandle",
            KeyedHandle::Incremental { .. } => "IncrementalRemoteKeyedStateHandle",
            KeyedHandle::Changelog { type_name, .. } => type_name,
        }
    }

    /// The key groups it covers.
    pub fn range(&self) -> KeyGroupRange {
        match self {
            KeyedHandle::KeyGroups { range, .. }
            | KeyedHandle::Incremental { range, .. }
            | KeyedHandle::Changelog { range, .. } => *range,
        }
    }
}

/// An operator state handle (read over; operator state is not imported).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorStateHandle {
    /// State names with their distribution mode and partition offsets.
    pub states: Vec<(String, u8, Vec<i64>)>,
    /// The stream.
    pub stream: StreamHandle,
}

/// A channel state handle of an unaligned checkpoint (read over, never imported).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelHandle {
    /// The subtask index.
    pub subtask: i32,
    /// The stream.
    pub stream: StreamHandle,
}

fn key_group_range(
    start: i32,
    num: i32,
    d: &DataInput<'_>,
    at: usize,
) -> Result<KeyGroupRange, FlinkError> {
    if start < 0 || num < 0 || start.checked_add(num).is_none() || start + num > 32768 {
        return Err(d.malformed(
            at,
            "key-group range",
            format!("start {start}, {num} key groups"),
        ));
    }
    if num == 0 {
        return Err(d.malformed(at, "key-group range", "no key groups"));
    }
    Ok(KeyGroupRange::new(start as u16, (start + num - 1) as u16))
}

/// Parses a `_metadata` file. `file` names it in errors.
pub fn parse_metadata(data: &[u8], file: &str) -> Result<CheckpointMetadata, FlinkError> {
    let mut d = DataInput::new(data, file);
    let magic = d.i32("magic number")? as u32;
    if magic != METADATA_MAGIC {
        return Err(FlinkError::BadMagic {
            at: Location::at(file, 0),
            found: magic,
        });
    }
    let version = d.i32("metadata version")?;
    if !(MIN_METADATA_VERSION..=MAX_METADATA_VERSION).contains(&version) {
        return Err(FlinkError::UnsupportedMetadataVersion {
            at: Location::at(file, 4),
            version,
        });
    }
    let p = Parser { version };
    let at = d.pos();
    let checkpoint_id = d.i64("checkpoint id")?;
    if checkpoint_id < 0 {
        return Err(d.malformed(at, "checkpoint id", format!("negative: {checkpoint_id}")));
    }
    let master_states = d.count("number of master states", 12)?;
    let masters_start = d.pos();
    for _ in 0..master_states {
        let at = d.pos();
        if d.i32("master state magic")? as u32 != MASTER_STATE_MAGIC {
            return Err(d.malformed(at, "master state", "bad magic number"));
        }
        let body = d.len_bytes("master state bytes")?;
        if body.is_empty() {
            return Err(d.malformed(at, "master state", "empty"));
        }
    }
    let master_state_bytes = d.data()[masters_start..d.pos()].to_vec();
    let n = d.count("number of operator states", 30)?;
    let mut operators = Vec::with_capacity(n);
    let mut operator_spans = Vec::with_capacity(n);
    for _ in 0..n {
        let start = d.pos();
        operators.push(p.operator(&mut d)?);
        operator_spans.push(start..d.pos());
    }
    // V4+ append Java-serialized CheckpointProperties: kept as bytes, not decoded.
    let trailer = d.bytes(d.remaining(), "checkpoint properties")?.to_vec();
    Ok(CheckpointMetadata {
        version,
        checkpoint_id,
        master_states,
        master_state_bytes,
        operators,
        operator_spans,
        trailer,
    })
}

struct Parser {
    version: i32,
}

fn opt(s: String) -> Option<String> {
    (!s.is_empty()).then_some(s)
}

impl Parser {
    fn operator(&self, d: &mut DataInput<'_>) -> Result<OperatorState, FlinkError> {
        let (name, uid) = if self.version >= 5 {
            (opt(d.utf("operator name")?), opt(d.utf("operator uid")?))
        } else {
            (None, None)
        };
        let id: [u8; 16] = d
            .bytes(16, "operator id")?
            .try_into()
            .map_err(|_| d.truncated("operator id"))?;
        let at = d.pos();
        let parallelism = d.i32("parallelism")?;
        let max_parallelism = d.i32("max parallelism")?;
        if parallelism <= 0 || max_parallelism <= 0 || max_parallelism > 32768 {
            return Err(d.malformed(
                at,
                "operator parallelism",
                format!("parallelism {parallelism}, max parallelism {max_parallelism}"),
            ));
        }
        let at = d.pos();
        let coordinator_state = self.stream_handle(d)?;
        if !matches!(
            coordinator_state,
            None | Some(StreamHandle::ByteStream { .. })
        ) {
            return Err(d.malformed(at, "coordinator state", "not an inline byte stream handle"));
        }
        let at = d.pos();
        let num = d.i32("number of subtask states")?;
        let mut subtasks = Vec::new();
        let fully_finished = num == -1;
        if num < -1 || num as i64 > d.remaining() as i64 / 4 {
            return Err(d.malformed(at, "number of subtask states", format!("{num}")));
        }
        for _ in 0..num.max(0) {
            let at = d.pos();
            let idx = d.i32("subtask index")?;
            if idx < 0 {
                // -(index + 1): a finished subtask, no state follows.
                let index = (-(idx as i64) - 1) as u32;
                subtasks.push(SubtaskState::finished(index));
                continue;
            }
            if idx >= parallelism.max(max_parallelism) {
                return Err(d.malformed(at, "subtask index", format!("{idx} of {parallelism}")));
            }
            subtasks.push(self.subtask(d, idx as u32)?);
        }
        Ok(OperatorState {
            name,
            uid,
            id: OperatorId(id),
            parallelism: parallelism as u32,
            max_parallelism: max_parallelism as u32,
            coordinator_state,
            fully_finished,
            subtasks,
        })
    }

    fn subtask(&self, d: &mut DataInput<'_>, index: u32) -> Result<SubtaskState, FlinkError> {
        let managed_operator = if d.i32("managed operator state flag")? != 0 {
            self.operator_handle(d)?
        } else {
            None
        };
        let raw_operator = if d.i32("raw operator state flag")? != 0 {
            self.operator_handle(d)?
        } else {
            None
        };
        let managed_keyed = self.keyed_handle(d, 0)?;
        let raw_keyed = self.keyed_handle(d, 0)?;
        let input_channels = self.channel_handles(d)?;
        let result_subpartitions = self.channel_handles(d)?;
        let ref_checkpoint_id = if self.version >= 7 {
            match d.u8("reference checkpoint id marker")? {
                0 => None,
                1 => Some(d.i64("reference checkpoint id")?),
                m => {
                    return Err(d.malformed(
                        d.pos() - 1,
                        "reference checkpoint id marker",
                        format!("{m}"),
                    ))
                }
            }
        } else {
            None
        };
        Ok(SubtaskState {
            index,
            finished: false,
            managed_operator,
            raw_operator,
            managed_keyed,
            raw_keyed,
            input_channels,
            result_subpartitions,
            ref_checkpoint_id,
        })
    }

    fn operator_handle(
        &self,
        d: &mut DataInput<'_>,
    ) -> Result<Option<OperatorStateHandle>, FlinkError> {
        let at = d.pos();
        let tag = d.u8("operator state handle type")?;
        match tag {
            0 => Ok(None),
            4 | 17 => {
                let n = d.count("number of operator states", 7)?;
                let mut states = Vec::with_capacity(n);
                for _ in 0..n {
                    let name = d.utf("operator state name")?;
                    let mode = d.u8("distribution mode")?;
                    if mode > 2 {
                        return Err(d.malformed(
                            d.pos() - 1,
                            "distribution mode",
                            format!("{mode}"),
                        ));
                    }
                    let k = d.count("number of partition offsets", 8)?;
                    let mut offs = Vec::with_capacity(k);
                    for _ in 0..k {
                        offs.push(d.i64("partition offset")?);
                    }
                    states.push((name, mode, offs));
                }
                if tag == 17 {
                    d.utf("task-owned directory")?;
                    d.utf("shared directory")?;
                    d.bool("empty flag")?;
                }
                let stream = self.required_stream(d, "operator state stream")?;
                Ok(Some(OperatorStateHandle { states, stream }))
            }
            _ => Err(FlinkError::UnknownHandleType {
                at: Location::at(d.file(), at as u64),
                kind: "operator state",
                tag,
            }),
        }
    }

    fn channel_handles(&self, d: &mut DataInput<'_>) -> Result<Vec<ChannelHandle>, FlinkError> {
        let n = d.count("number of channel state handles", 4)?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let merged = if self.version >= 6 {
                let at = d.pos();
                match d.u8("channel state handle type")? {
                    1 | 2 => false,
                    3 | 4 => true,
                    tag => {
                        return Err(FlinkError::UnknownHandleType {
                            at: Location::at(d.file(), at as u64),
                            kind: "channel state",
                            tag,
                        })
                    }
                }
            } else {
                false
            };
            let subtask = d.i32("channel subtask index")?;
            if merged {
                d.i64("channel state size")?;
                let stream = self.required_stream(d, "channel state stream")?;
                d.len_bytes("channel offsets")?;
                out.push(ChannelHandle { subtask, stream });
            } else {
                d.i32("channel info")?;
                d.i32("channel info")?;
                let k = d.count("number of channel offsets", 8)?;
                d.bytes(k * 8, "channel offsets")?;
                d.i64("channel state size")?;
                let stream = self.required_stream(d, "channel state stream")?;
                out.push(ChannelHandle { subtask, stream });
            }
        }
        Ok(out)
    }

    fn key_groups(&self, d: &mut DataInput<'_>) -> Result<(KeyGroupRange, Vec<i64>), FlinkError> {
        let at = d.pos();
        let start = d.i32("first key group")?;
        let num = d.i32("number of key groups")?;
        let range = key_group_range(start, num, d, at)?;
        let body = d.bytes(num as usize * 8, "key-group offsets")?;
        let offsets = body
            .chunks_exact(8)
            .map(|c| i64::from_be_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
            .collect::<Vec<_>>();
        if let Some(o) = offsets.iter().find(|o| **o < 0) {
            return Err(d.malformed(at, "key-group offsets", format!("negative offset {o}")));
        }
        Ok((range, offsets))
    }

    fn keyed_handle(
        &self,
        d: &mut DataInput<'_>,
        depth: u32,
    ) -> Result<Option<KeyedHandle>, FlinkError> {
        let at = d.pos();
        let tag = d.u8("keyed state handle type")?;
        if depth > 4 {
            return Err(d.malformed(at, "keyed state handle", "nested too deeply"));
        }
        Ok(Some(match tag {
            0 => return Ok(None),
            3 | 7 | 12 => {
                let (range, offsets) = self.key_groups(d)?;
                let stream = self.required_stream(d, "keyed state stream")?;
                let handle_id = if tag == 12 {
                    Some(d.utf("state handle id")?)
                } else {
                    None
                };
                KeyedHandle::KeyGroups {
                    kind: if tag == 7 {
                        KeyGroupsHandleKind::Savepoint
                    } else {
                        KeyGroupsHandleKind::Checkpoint
                    },
                    range,
                    offsets,
                    stream,
                    handle_id,
                }
            }
            5 | 11 => {
                let v2 = tag == 11;
                let checkpoint_id = d.i64("checkpoint id")?;
                let backend_id = d.utf("backend id")?;
                let at = d.pos();
                let start = d.i32("first key group")?;
                let num = d.i32("number of key groups")?;
                let range = key_group_range(start, num, d, at)?;
                let checkpointed_size = if v2 {
                    Some(d.i64("checkpointed size")?)
                } else {
                    None
                };
                let meta = self.required_stream(d, "meta-data stream")?;
                let shared = self.file_list(d)?;
                let private = self.file_list(d)?;
                let handle_id = if v2 {
                    Some(d.utf("state handle id")?)
                } else {
                    None
                };
                KeyedHandle::Incremental {
                    checkpoint_id,
                    backend_id,
                    range,
                    checkpointed_size,
                    meta,
                    shared,
                    private,
                    handle_id,
                }
            }
            8 | 14 => {
                let at = d.pos();
                let start = d.i32("first key group")?;
                let num = d.i32("number of key groups")?;
                let range = key_group_range(start, num, d, at)?;
                d.i64("checkpointed size")?;
                for _ in 0..2 {
                    let n = d.count("number of changelog handles", 1)?;
                    for _ in 0..n {
                        self.keyed_handle(d, depth + 1)?;
                    }
                }
                d.i64("materialization id")?;
                if tag == 14 {
                    d.i64("checkpoint id")?;
                }
                d.utf("state handle id")?;
                KeyedHandle::Changelog {
                    type_name: "ChangelogStateBackendHandle",
                    range,
                }
            }
            9 => {
                let at = d.pos();
                let start = d.i32("first key group")?;
                let num = d.i32("number of key groups")?;
                let range = key_group_range(start, num, d, at)?;
                d.i64("from sequence number")?;
                d.i64("to sequence number")?;
                let n = d.count("number of changes", 8)?;
                for _ in 0..n {
                    d.i32("change key group")?;
                    d.len_bytes("change bytes")?;
                }
                d.utf("state handle id")?;
                KeyedHandle::Changelog {
                    type_name: "InMemoryChangelogStateHandle",
                    range,
                }
            }
            10 | 13 => {
                let at = d.pos();
                let start = d.i32("first key group")?;
                let num = d.i32("number of key groups")?;
                let range = key_group_range(start, num, d, at)?;
                let n = d.count("number of changelog streams", 9)?;
                for _ in 0..n {
                    d.i64("changelog offset")?;
                    self.required_stream(d, "changelog stream")?;
                }
                d.i64("state size")?;
                d.i64("checkpointed size")?;
                d.utf("state handle id")?;
                if tag == 13 {
                    d.utf("storage identifier")?;
                }
                KeyedHandle::Changelog {
                    type_name: "ChangelogStateHandleStreamImpl",
                    range,
                }
            }
            _ => {
                return Err(FlinkError::UnknownHandleType {
                    at: Location::at(d.file(), at as u64),
                    kind: "keyed state",
                    tag,
                })
            }
        }))
    }

    fn file_list(&self, d: &mut DataInput<'_>) -> Result<Vec<(String, StreamHandle)>, FlinkError> {
        let n = d.count("number of files", 3)?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let name = d.utf("local file name")?;
            let h = self.required_stream(d, "file handle")?;
            out.push((name, h));
        }
        Ok(out)
    }

    fn required_stream(
        &self,
        d: &mut DataInput<'_>,
        what: &'static str,
    ) -> Result<StreamHandle, FlinkError> {
        let at = d.pos();
        self.stream_handle(d)?
            .ok_or_else(|| d.malformed(at, what, "null stream handle"))
    }

    fn stream_handle(&self, d: &mut DataInput<'_>) -> Result<Option<StreamHandle>, FlinkError> {
        self.stream_handle_depth(d, 0)
    }

    fn stream_handle_depth(
        &self,
        d: &mut DataInput<'_>,
        depth: u32,
    ) -> Result<Option<StreamHandle>, FlinkError> {
        let at = d.pos();
        let tag = d.u8("stream state handle type")?;
        Ok(Some(match tag {
            0 => return Ok(None),
            1 => {
                let name = d.utf("byte stream handle name")?;
                let data = d.len_bytes("inline state bytes")?.to_vec();
                StreamHandle::ByteStream { name, data }
            }
            2 => {
                let size = d.i64("file size")?;
                let path = d.utf("file path")?;
                StreamHandle::File { path, size }
            }
            6 => {
                let path = d.utf("relative file path")?;
                let size = d.i64("file size")?;
                StreamHandle::Relative { path, size }
            }
            15 | 16 => {
                let start = d.i64("segment start")?;
                let size = d.i64("segment size")?;
                d.i32("segment scope")?;
                let path = d.utf("segment file path")?;
                d.utf("segment logical id")?;
                StreamHandle::Segment { path, start, size }
            }
            3 if depth < 4 => {
                let (range, offsets) = self.key_groups(d)?;
                let inner = self.stream_handle_depth(d, depth + 1)?.ok_or_else(|| {
                    d.malformed(at, "key-groups stream handle", "null inner handle")
                })?;
                StreamHandle::KeyGroups {
                    range,
                    offsets,
                    inner: Box::new(inner),
                }
            }
            _ => {
                return Err(FlinkError::UnknownHandleType {
                    at: Location::at(d.file(), at as u64),
                    kind: "stream state",
                    tag,
                })
            }
        }))
    }
}

impl SubtaskState {
    fn finished(index: u32) -> Self {
        SubtaskState {
            index,
            finished: true,
            managed_operator: None,
            raw_operator: None,
            managed_keyed: None,
            raw_keyed: None,
            input_channels: Vec::new(),
            result_subpartitions: Vec::new(),
            ref_checkpoint_id: None,
        }
    }
}
