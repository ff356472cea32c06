//! Exporting our savepoints as a Flink canonical savepoint directory: `_metadata` plus one keyed-state
//! file per subtask (`KeyGroupsSavepointStateHandle` over a `RelativeFileStateHandle`), for one operator
//! uid at a chosen parallelism, plain or Snappy-framed per key group. Flink 2.3 restores it on any state
//! backend. Layout and choices: `design/flink-interop.md`, "Export".

use std::io::Write as _;
use std::path::Path;

use super::keyed_stream::{END_OF_KEY_GROUP_MARK, FIRST_BIT_IN_BYTE_MASK};
use super::metadata::{
    CheckpointMetadata, KeyGroupsHandleKind, KeyedHandle, OperatorId, OperatorState, StreamHandle,
    SubtaskState,
};
use super::metadata_writer::{
    write_metadata, CANONICAL_SAVEPOINT_PROPERTIES, EXPORT_METADATA_VERSION,
};
use super::operator_id::{murmur3_x64_128, operator_id_for_uid};
use super::proxy_writer::{flink_state_meta, write_proxy};
use super::snappy::FramedWriter;
use super::FlinkError;
use keyed_state::keygroup::{key_group_range_for_operator, KeyGroup, KeyGroupRange};
use keyed_state::meta::StateMetaInfo;
use keyed_state::savepoint::SavepointReader;
use keyed_state::serializer::SerializerSnapshot;

/// What to export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportOptions {
    /// The operator uid; the operator id is the one Flink derives from it.
    pub operator_uid: String,
    /// The parallelism of the exported operator (one keyed-state file per subtask).
    pub parallelism: u32,
    /// Snappy-frame every key group (Flink's `execution.checkpointing.snapshot-compression`).
    pub compress: bool,
    /// The checkpoint id written into `_metadata`.
    pub checkpoint_id: i64,
}

impl ExportOptions {
    /// Uncompressed, checkpoint id 0.
    pub fn new(operator_uid: impl Into<String>, parallelism: u32) -> Self {
        ExportOptions {
            operator_uid: operator_uid.into(),
            parallelism,
            compress: false,
            checkpoint_id: 0,
        }
    }
}

/// One keyed-state file written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportedFile {
    /// The file name inside the savepoint directory.
    pub name: String,
    /// The subtask index.
    pub subtask: u32,
    /// The subtask's key groups.
    pub key_groups: KeyGroupRange,
    /// Key groups with data.
    pub key_groups_with_data: usize,
    /// Entries written.
    pub entries: u64,
    /// File size in bytes.
    pub bytes: u64,
}

/// What an export wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportSummary {
    /// The operator id written (derived from the uid).
    pub operator_id: OperatorId,
    /// Max parallelism (number of key groups).
    pub max_parallelism: u32,
    /// Number of states.
    pub states: usize,
    /// The keyed-state files, by subtask.
    pub files: Vec<ExportedFile>,
    /// Size of `_metadata`.
    pub metadata_bytes: u64,
}

impl ExportSummary {
    /// Entries over all files.
    pub fn entries(&self) -> u64 {
        self.files.iter().map(|f| f.entries).sum()
    }

    /// Bytes over all keyed-state files.
    pub fn bytes(&self) -> u64 {
        self.files.iter().map(|f| f.bytes).sum()
    }
}

/// The states of several savepoints merged by name, and each source's state index → merged index.
struct Merged {
    max_parallelism: u32,
    key_serializer: SerializerSnapshot,
    states: Vec<StateMetaInfo>,
    maps: Vec<Vec<usize>>,
}

fn merge(sources: &[(&str, &SavepointReader)]) -> Result<Merged, FlinkError> {
    let Some((first_name, first)) = sources.first() else {
        return Err(FlinkError::Inconsistent("no savepoint to export".into()));
    };
    let h0 = first.header();
    let mut states: Vec<StateMetaInfo> = Vec::new();
    let mut origin: Vec<&str> = Vec::new();
    let mut maps = Vec::new();
    for (name, r) in sources {
        let h = r.header();
        if h.max_parallelism != h0.max_parallelism {
            return Err(FlinkError::Inconsistent(format!(
                "{name} has max parallelism {}, {first_name} has {}",
                h.max_parallelism, h0.max_parallelism
            )));
        }
        if h.key_serializer != h0.key_serializer {
            return Err(FlinkError::Inconsistent(format!(
                "{name}'s key serializer ({}) differs from {first_name}'s ({})",
                h.key_serializer, h0.key_serializer
            )));
        }
        let mut map = Vec::with_capacity(h.states.len());
        for meta in &h.states {
            match states.iter().position(|m| m.name == meta.name) {
                Some(i) if states[i] != *meta => {
                    return Err(FlinkError::StateMismatch {
                        state: meta.name.clone(),
                        first: origin[i].to_string(),
                        second: name.to_string(),
                    })
                }
                Some(i) => map.push(i),
                None => {
                    map.push(states.len());
                    states.push(meta.clone());
                    origin.push(name);
                }
            }
        }
        maps.push(map);
    }
    Ok(Merged {
        max_parallelism: h0.max_parallelism,
        key_serializer: h0.key_serializer.clone(),
        states,
        maps,
    })
}

/// A file name in UUID form, derived from the operator id, the parallelism and the subtask index (the
/// same export gives the same names).
fn file_name(id: &OperatorId, parallelism: u32, subtask: u32) -> String {
    let mut seed = id.0.to_vec();
    seed.extend_from_slice(&parallelism.to_be_bytes());
    seed.extend_from_slice(&subtask.to_be_bytes());
    let mut h = murmur3_x64_128(&seed);
    h[6] = (h[6] & 0x0f) | 0x40;
    h[8] = (h[8] & 0x3f) | 0x80;
    let x: String = h.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &x[0..8],
        &x[8..12],
        &x[12..16],
        &x[16..20],
        &x[20..32]
    )
}

/// Builds one key group's canonical bytes from every source holding it.
struct KeyGroupEncoder {
    per_state: Vec<Vec<u8>>,
    last_key_at: Vec<usize>,
    owner: Vec<Option<usize>>,
    raw: Vec<u8>,
    snappy: FramedWriter,
}

impl KeyGroupEncoder {
    fn new(n_states: usize) -> Self {
        KeyGroupEncoder {
            per_state: vec![Vec::new(); n_states],
            last_key_at: vec![0; n_states],
            owner: vec![None; n_states],
            raw: Vec::new(),
            snappy: FramedWriter::new(),
        }
    }

    /// Appends the canonical bytes of key group `kg` to `out`; returns the entries written (0: nothing
    /// written, the key group is empty).
    fn encode(
        &mut self,
        kg: KeyGroup,
        sources: &[(&str, &SavepointReader)],
        merged: &Merged,
        compress: bool,
        out: &mut Vec<u8>,
    ) -> Result<u64, FlinkError> {
        for b in &mut self.per_state {
            b.clear();
        }
        self.owner.iter_mut().for_each(|o| *o = None);
        let mut entries = 0u64;
        for (si, (name, r)) in sources.iter().enumerate() {
            if r.key_groups()
                .binary_search_by_key(&kg, |b| b.key_group)
                .is_err()
            {
                continue;
            }
            let map = &merged.maps[si];
            let per_state = &mut self.per_state;
            let last = &mut self.last_key_at;
            let owner = &mut self.owner;
            r.read_key_group(kg, &mut |s, key, value| {
                let m = map[s];
                match owner[m] {
                    Some(o) if o != si => {
                        return Err(FlinkError::Inconsistent(format!(
                            "state '{}' has entries in key group {kg} in both {} and {name}",
                            merged.states[m].name, sources[o].0
                        ))
                        .into())
                    }
                    _ => owner[m] = Some(si),
                }
                let b = &mut per_state[m];
                b.extend_from_slice(&(key.len() as i32).to_be_bytes());
                last[m] = b.len();
                b.extend_from_slice(key);
                b.extend_from_slice(&(value.len() as i32).to_be_bytes());
                b.extend_from_slice(value);
                entries += 1;
                Ok(())
            })?;
        }
        if entries == 0 {
            return Ok(0);
        }
        let raw = if compress {
            self.raw.clear();
            &mut self.raw
        } else {
            &mut *out
        };
        for (m, b) in self.per_state.iter_mut().enumerate() {
            if b.is_empty() {
                continue;
            }
            b[self.last_key_at[m]] |= FIRST_BIT_IN_BYTE_MASK;
            raw.extend_from_slice(&(m as u16).to_be_bytes());
            raw.extend_from_slice(b);
        }
        raw.extend_from_slice(&END_OF_KEY_GROUP_MARK.to_be_bytes());
        if compress {
            self.snappy.begin(out);
            self.snappy.write(&self.raw, out);
            self.snappy.flush(out);
        }
        Ok(entries)
    }
}

pub(crate) fn io(path: &Path) -> impl Fn(std::io::Error) -> FlinkError + '_ {
    move |e| FlinkError::io(path.display(), e)
}

/// Creates `out_dir`, which must not exist or be empty.
pub(crate) fn prepare_out_dir(out_dir: &Path) -> Result<(), FlinkError> {
    if out_dir.exists() {
        let mut it = std::fs::read_dir(out_dir).map_err(io(out_dir))?;
        if it.next().is_some() {
            return Err(FlinkError::Inconsistent(format!(
                "{} exists and is not empty",
                out_dir.display()
            )));
        }
    }
    std::fs::create_dir_all(out_dir).map_err(io(out_dir))
}

/// Writes `metadata` as `out_dir/_metadata` (through `_metadata.inprogress`, renamed, the directory
/// synced): the last step of an export.
pub(crate) fn commit_metadata(out_dir: &Path, bytes: &[u8]) -> Result<(), FlinkError> {
    let tmp = out_dir.join("_metadata.inprogress");
    {
        let mut f = std::fs::File::create(&tmp).map_err(io(&tmp))?;
        f.write_all(bytes).map_err(io(&tmp))?;
        f.sync_all().map_err(io(&tmp))?;
    }
    let meta_path = out_dir.join("_metadata");
    std::fs::rename(&tmp, &meta_path).map_err(io(&meta_path))?;
    keyed_state_lsm::util::sync_dir(out_dir).map_err(io(out_dir))
}

/// The merged states of `sources`, checked for a Flink export: every serializer has a Flink counterpart.
pub(crate) struct Prepared<'s> {
    pub(crate) sources: &'s [(&'s str, &'s SavepointReader)],
    merged: Merged,
    header: Vec<u8>,
}

impl<'s> Prepared<'s> {
    /// Merges `sources` by state name and writes the serialization proxy.
    pub(crate) fn new(
        sources: &'s [(&'s str, &'s SavepointReader)],
        compress: bool,
    ) -> Result<Self, FlinkError> {
        let merged = merge(sources)?;
        let flink_states = merged
            .states
            .iter()
            .map(|m| flink_state_meta(m, &merged.key_serializer))
            .collect::<Result<Vec<_>, _>>()?;
        let mut header = Vec::new();
        write_proxy(compress, &merged.key_serializer, &flink_states, &mut header)?;
        Ok(Prepared {
            sources,
            merged,
            header,
        })
    }

    /// The sources' max parallelism.
    pub(crate) fn max_parallelism(&self) -> u32 {
        self.merged.max_parallelism
    }

    /// The number of states merged.
    pub(crate) fn states(&self) -> usize {
        self.merged.states.len()
    }
}

/// Writes one keyed-state file per subtask of an operator with id `id` at `parallelism` into `out_dir`;
/// returns each subtask's state (its keyed handle only) and what each file holds.
pub(crate) fn write_keyed_files(
    p: &Prepared<'_>,
    id: &OperatorId,
    parallelism: u32,
    compress: bool,
    out_dir: &Path,
) -> Result<(Vec<SubtaskState>, Vec<ExportedFile>), FlinkError> {
    let max_p = p.merged.max_parallelism;
    if parallelism == 0 || parallelism > max_p {
        return Err(FlinkError::Inconsistent(format!(
            "parallelism {parallelism} must be between 1 and the max parallelism {max_p}"
        )));
    }
    let mut enc = KeyGroupEncoder::new(p.merged.states.len());
    let mut files = Vec::new();
    let mut subtasks = Vec::new();
    let mut buf = Vec::with_capacity(1 << 20);
    for i in 0..parallelism {
        let range = key_group_range_for_operator(max_p, parallelism, i)
            .map_err(|e| FlinkError::Inconsistent(e.to_string()))?;
        let name = file_name(id, parallelism, i);
        let path = out_dir.join(&name);
        if path.exists() {
            return Err(FlinkError::Inconsistent(format!(
                "{} exists already: two operators with id {id}?",
                path.display()
            )));
        }
        let file = std::fs::File::create(&path).map_err(io(&path))?;
        let mut w = std::io::BufWriter::with_capacity(1 << 20, file);
        w.write_all(&p.header).map_err(io(&path))?;
        let mut pos = p.header.len() as u64;
        let mut offsets = Vec::with_capacity(range.len());
        let mut entries = 0u64;
        let mut with_data = 0usize;
        for kg in range.iter() {
            buf.clear();
            let n = enc.encode(kg, p.sources, &p.merged, compress, &mut buf)?;
            if n == 0 {
                offsets.push(0);
                continue;
            }
            offsets.push(pos as i64);
            w.write_all(&buf).map_err(io(&path))?;
            pos += buf.len() as u64;
            entries += n;
            with_data += 1;
        }
        let file = w.into_inner().map_err(|e| io(&path)(e.into_error()))?;
        file.sync_all().map_err(io(&path))?;
        subtasks.push(SubtaskState {
            index: i,
            finished: false,
            managed_operator: None,
            raw_operator: None,
            managed_keyed: Some(KeyedHandle::KeyGroups {
                kind: KeyGroupsHandleKind::Savepoint,
                range,
                offsets,
                stream: StreamHandle::Relative {
                    path: name.clone(),
                    size: pos as i64,
                },
                handle_id: None,
            }),
            raw_keyed: None,
            input_channels: Vec::new(),
            result_subpartitions: Vec::new(),
            ref_checkpoint_id: None,
        });
        files.push(ExportedFile {
            name,
            subtask: i,
            key_groups: range,
            key_groups_with_data: with_data,
            entries,
            bytes: pos,
        });
    }
    Ok((subtasks, files))
}

/// Writes the keyed state of `sources` (our savepoints, each named for errors) as a Flink canonical
/// savepoint into `out_dir` (created; it must not exist or be empty). States are merged by name (a state
/// described differently in two sources is an error), the sources' key groups must not overlap per state,
/// and all must share max parallelism and key serializer. Each subtask `i` of `parallelism` gets the key
/// groups Flink assigns it (`computeKeyGroupRangeForOperatorIndex`); `_metadata` is written last. For
/// several operators, or to carry a job's other operators over from one of Flink's savepoints, see
/// [`export_job`](crate::job::export_job).
pub fn export_canonical(
    sources: &[(&str, &SavepointReader)],
    opts: &ExportOptions,
    out_dir: &Path,
) -> Result<ExportSummary, FlinkError> {
    let prepared = Prepared::new(sources, opts.compress)?;
    let max_p = prepared.max_parallelism();
    if opts.parallelism == 0 || opts.parallelism > max_p {
        return Err(FlinkError::Inconsistent(format!(
            "parallelism {} must be between 1 and the max parallelism {max_p}",
            opts.parallelism
        )));
    }
    if opts.checkpoint_id < 0 {
        return Err(FlinkError::Inconsistent(format!(
            "checkpoint id {} is negative",
            opts.checkpoint_id
        )));
    }
    prepare_out_dir(out_dir)?;
    let id = operator_id_for_uid(&opts.operator_uid);
    let (subtasks, files) =
        write_keyed_files(&prepared, &id, opts.parallelism, opts.compress, out_dir)?;
    let metadata = CheckpointMetadata {
        version: EXPORT_METADATA_VERSION,
        checkpoint_id: opts.checkpoint_id,
        master_states: 0,
        master_state_bytes: Vec::new(),
        operator_spans: Vec::new(),
        operators: vec![OperatorState {
            name: Some(opts.operator_uid.clone()),
            uid: Some(opts.operator_uid.clone()),
            id,
            parallelism: opts.parallelism,
            max_parallelism: max_p,
            coordinator_state: None,
            fully_finished: false,
            subtasks,
        }],
        trailer: CANONICAL_SAVEPOINT_PROPERTIES.to_vec(),
    };
    let bytes = write_metadata(&metadata)?;
    commit_metadata(out_dir, &bytes)?;
    Ok(ExportSummary {
        operator_id: id,
        max_parallelism: max_p,
        states: prepared.states(),
        files,
        metadata_bytes: bytes.len() as u64,
    })
}
