//! Importing one operator's keyed state from a Flink savepoint directory into one of our savepoints:
//! [`FlinkSavepoint`] opens `_metadata`, [`FlinkSavepoint::import`] opens the operator's keyed-state
//! streams and gives a [`FlinkImport`], a [`BackendSnapshot`] that our savepoint writer encodes.
//!
//! The parts, below this module: `savepoint_dir` (the directory and its `_metadata`), `keyed_file` (one
//! subtask's keyed-state handle, opened and read by key group) and `entries` (a key group's entries per
//! state); this module joins a savepoint's handles into the import.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;

use super::metadata::OperatorState;
use super::FlinkError;
use keyed_state::backend::{BackendConfig, BackendSnapshot, StateId};
use keyed_state::keygroup::{KeyGroup, KeyGroupRange};
use keyed_state::meta::StateMetaInfo;
use keyed_state::savepoint::{write_savepoint, SavepointSummary, WriteOptions};
use keyed_state::Location;

mod entries;
mod keyed_file;
mod savepoint_dir;

pub use entries::{Entries, StateEntries};
pub use keyed_file::{KeyedFile, StreamFormat};
pub use savepoint_dir::{is_flink_savepoint, FlinkSavepoint};

impl FlinkSavepoint {
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
}

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
