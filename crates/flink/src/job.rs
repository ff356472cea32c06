//! Whole-job export: several operators' keyed state written into one Flink savepoint directory, and, with a
//! template (one of Flink's savepoints or checkpoints of the job), every operator not replaced carried
//! over unchanged — its keyed and operator state, its coordinator state — so that the result is the same
//! job with some keyed operators' state replaced (the State Processor API's main use, without a JVM).
//!
//! Carried operators keep their `_metadata` bytes exactly as the template holds them, and the files their
//! relative handles name are copied byte for byte. Operators whose handles name files by absolute path
//! (a checkpoint's `shared/` files) are written again with those handles made relative to copies of the
//! files in the new directory, so the savepoint stands alone; their state bytes are still the template's.
//! A replaced operator keeps the template's id, uid, name and parallelism, its coordinator state, and per
//! subtask its operator state and raw keyed state; only its managed keyed state is ours. Layout and
//! choices: `design/flink-interop.md`, "Whole jobs".

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::path::{Path, PathBuf};

use super::export::{
    commit_metadata, io, prepare_out_dir, write_keyed_files, ExportedFile, Prepared,
};
use super::location::{relative, reroot};
use super::metadata::{
    CheckpointMetadata, KeyedHandle, OperatorId, OperatorState, StreamHandle, SubtaskState,
};
use super::metadata_writer::{
    write_metadata_with, EncodedOperator, CANONICAL_SAVEPOINT_PROPERTIES, EXPORT_METADATA_VERSION,
};
use super::operator_id::operator_id_for_uid;
use super::{FlinkError, FlinkSavepoint};
use keyed_state::savepoint::SavepointReader;

/// One operator to write: who it is and the savepoints holding its keyed state.
#[derive(Debug, Clone)]
pub struct OperatorSources<'a> {
    /// The operator: a uid, or 32 hex digits of an operator id. With a template, matched as
    /// [`FlinkSavepoint::operator`] matches; without, a 32-digit hex id is that id, anything else a uid
    /// whose id Flink derives.
    pub operator: String,
    /// Our savepoints holding its keyed state (each named for errors).
    pub savepoints: Vec<(&'a str, &'a SavepointReader)>,
}

/// How to write a job.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobExportOptions {
    /// The parallelism of every operator written. Without a template it is needed; with one it may only
    /// repeat each replaced operator's parallelism there.
    pub parallelism: Option<u32>,
    /// Snappy-frame every key group written.
    pub compress: bool,
}

/// What became of one operator of the job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OperatorOutcome {
    /// Its managed keyed state was written from our savepoints.
    Replaced {
        /// Number of states.
        states: usize,
        /// The keyed-state files, by subtask.
        files: Vec<ExportedFile>,
        /// Files of the template's operator kept for it (operator state, raw keyed state).
        kept_files: usize,
    },
    /// Carried over from the template.
    Carried {
        /// `_metadata` bytes copied verbatim (false: written again with absolute file handles made
        /// relative).
        verbatim: bool,
        /// Files copied.
        files: usize,
        /// Their bytes.
        bytes: u64,
    },
}

/// One operator of the job written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobOperator {
    /// The uid, or the hex id without one.
    pub label: String,
    /// The operator id.
    pub id: OperatorId,
    /// Its parallelism.
    pub parallelism: u32,
    /// Its max parallelism.
    pub max_parallelism: u32,
    /// Whether it has coordinator state.
    pub coordinator_state: bool,
    /// What was written.
    pub outcome: OperatorOutcome,
}

impl JobOperator {
    /// Entries written (replaced operators).
    pub fn entries(&self) -> u64 {
        match &self.outcome {
            OperatorOutcome::Replaced { files, .. } => files.iter().map(|f| f.entries).sum(),
            OperatorOutcome::Carried { .. } => 0,
        }
    }
}

/// What a whole-job export wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobExportSummary {
    /// Every operator, in `_metadata` order.
    pub operators: Vec<JobOperator>,
    /// The `_metadata` version written (the template's, else 6).
    pub metadata_version: i32,
    /// Size of `_metadata`.
    pub metadata_bytes: u64,
}

/// Copies the files of carried handles into the new directory, each once, synced.
struct Copier<'t> {
    template: &'t Path,
    out: &'t Path,
    /// Destination name → source path.
    done: BTreeMap<String, PathBuf>,
    files: usize,
    bytes: u64,
}

impl Copier<'_> {
    fn copy(&mut self, src: &Path, name: &str) -> Result<(), FlinkError> {
        if let Some(prev) = self.done.get(name) {
            if prev == src {
                return Ok(());
            }
            return Err(FlinkError::Inconsistent(format!(
                "two files of the template, {} and {}, would both be {name} in the new savepoint",
                prev.display(),
                src.display()
            )));
        }
        let dst = self.out.join(name);
        if dst.exists() {
            return Err(FlinkError::Inconsistent(format!(
                "{} exists already in the new savepoint",
                dst.display()
            )));
        }
        if let Some(parent) = dst.parent() {
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        let mut from = std::fs::File::open(src).map_err(io(src))?;
        let mut to = std::fs::File::create(&dst).map_err(io(&dst))?;
        let n = std::io::copy(&mut from, &mut to).map_err(io(&dst))?;
        to.flush().map_err(io(&dst))?;
        to.sync_all().map_err(io(&dst))?;
        self.done.insert(name.to_string(), src.to_path_buf());
        self.files += 1;
        self.bytes += n;
        Ok(())
    }

    /// Copies the file of a relative handle under the same name.
    fn relative(&mut self, path: &str) -> Result<(), FlinkError> {
        let src = relative(path, self.template)?;
        self.copy(&src, path)
    }

    /// Copies the file of an absolute handle and returns the relative handle of the copy.
    fn absolute(&mut self, path: &str, size: i64) -> Result<StreamHandle, FlinkError> {
        let src = reroot(path, self.template)?;
        let base = path.rsplit('/').next().unwrap_or(path);
        let mut name = base.to_string();
        let mut n = 1;
        loop {
            let free = match self.done.get(&name) {
                Some(p) => *p == src,
                None => !self.out.join(&name).exists(),
            };
            if free {
                break;
            }
            name = format!("{base}-{n}");
            n += 1;
        }
        self.copy(&src, &name)?;
        Ok(StreamHandle::Relative { path: name, size })
    }

    /// Copies every file `h` names; returns `h` with absolute paths made relative to the copies.
    fn handle(&mut self, h: &StreamHandle) -> Result<StreamHandle, FlinkError> {
        Ok(match h {
            StreamHandle::ByteStream { .. } => h.clone(),
            StreamHandle::Relative { path, .. } => {
                self.relative(path)?;
                h.clone()
            }
            StreamHandle::File { path, size } => self.absolute(path, *size)?,
            StreamHandle::Segment { path, .. } => {
                return Err(FlinkError::UnsupportedLocation {
                    uri: path.clone(),
                    detail: "file-merged segments (execution.checkpointing.file-merging) cannot be carried over into a savepoint".into(),
                })
            }
            StreamHandle::KeyGroups {
                range,
                offsets,
                inner,
            } => StreamHandle::KeyGroups {
                range: *range,
                offsets: offsets.clone(),
                inner: Box::new(self.handle(inner)?),
            },
        })
    }

    fn keyed(&mut self, op: &str, h: &KeyedHandle) -> Result<KeyedHandle, FlinkError> {
        Ok(match h {
            KeyedHandle::KeyGroups {
                kind,
                range,
                offsets,
                stream,
                handle_id,
            } => KeyedHandle::KeyGroups {
                kind: *kind,
                range: *range,
                offsets: offsets.clone(),
                stream: self.handle(stream)?,
                handle_id: handle_id.clone(),
            },
            KeyedHandle::Incremental {
                checkpoint_id,
                backend_id,
                range,
                checkpointed_size,
                meta,
                shared,
                private,
                handle_id,
            } => {
                let mut list = |l: &[(String, StreamHandle)]| -> Result<_, FlinkError> {
                    l.iter()
                        .map(|(n, h)| Ok((n.clone(), self.handle(h)?)))
                        .collect::<Result<Vec<_>, FlinkError>>()
                };
                let shared = list(shared)?;
                let private = list(private)?;
                KeyedHandle::Incremental {
                    checkpoint_id: *checkpoint_id,
                    backend_id: backend_id.clone(),
                    range: *range,
                    checkpointed_size: *checkpointed_size,
                    meta: self.handle(meta)?,
                    shared,
                    private,
                    handle_id: handle_id.clone(),
                }
            }
            KeyedHandle::Changelog { type_name, .. } => {
                return Err(FlinkError::UnsupportedHandle {
                    operator: op.to_string(),
                    subtask: 0,
                    handle: type_name,
                    detail: "changelog state backend handles cannot be carried over (the files they name are not read)".into(),
                })
            }
        })
    }

    /// The non-keyed handles of a subtask (operator state, raw keyed state, channel state) with their
    /// files copied.
    fn subtask_rest(&mut self, op: &str, st: &SubtaskState) -> Result<SubtaskState, FlinkError> {
        let mut out = st.clone();
        for h in [&mut out.managed_operator, &mut out.raw_operator]
            .into_iter()
            .flatten()
        {
            h.stream = self.handle(&h.stream)?;
        }
        if let Some(h) = &st.raw_keyed {
            out.raw_keyed = Some(self.keyed(op, h)?);
        }
        for c in out
            .input_channels
            .iter_mut()
            .chain(out.result_subpartitions.iter_mut())
        {
            c.stream = self.handle(&c.stream)?;
        }
        Ok(out)
    }
}

/// Whether every stream handle of `op` is inline or relative (its `_metadata` bytes can be copied as they
/// are), and whether it holds handles whose files are not known (changelog).
fn relocatable_verbatim(op: &OperatorState) -> bool {
    fn stream(h: &StreamHandle) -> bool {
        match h {
            StreamHandle::ByteStream { .. } | StreamHandle::Relative { .. } => true,
            StreamHandle::KeyGroups { inner, .. } => stream(inner),
            StreamHandle::File { .. } | StreamHandle::Segment { .. } => false,
        }
    }
    fn keyed(h: &KeyedHandle) -> bool {
        match h {
            KeyedHandle::KeyGroups { stream: s, .. } => stream(s),
            KeyedHandle::Incremental {
                meta,
                shared,
                private,
                ..
            } => stream(meta) && shared.iter().chain(private).all(|(_, h)| stream(h)),
            KeyedHandle::Changelog { .. } => true,
        }
    }
    op.coordinator_state.as_ref().is_none_or(stream)
        && op.subtasks.iter().all(|st| {
            [&st.managed_operator, &st.raw_operator]
                .into_iter()
                .flatten()
                .all(|h| stream(&h.stream))
                && [&st.managed_keyed, &st.raw_keyed]
                    .into_iter()
                    .flatten()
                    .all(keyed)
                && st
                    .input_channels
                    .iter()
                    .chain(&st.result_subpartitions)
                    .all(|c| stream(&c.stream))
        })
}

/// An operator's state, carried over: every file copied; the `_metadata` bytes verbatim when all its
/// handles are relative or inline, else the operator written again with its handles made relative.
fn carry(
    template: &FlinkSavepoint,
    i: usize,
    copier: &mut Copier<'_>,
) -> Result<(Option<OperatorState>, bool), FlinkError> {
    let op = &template.metadata.operators[i];
    let label = op.label();
    let verbatim = relocatable_verbatim(op) && template.operator_bytes(i).is_some();
    let mut out = op.clone();
    if let Some(c) = &op.coordinator_state {
        out.coordinator_state = Some(copier.handle(c)?);
    }
    for (st, new) in op.subtasks.iter().zip(out.subtasks.iter_mut()) {
        let rest = copier.subtask_rest(&label, st)?;
        let managed_keyed = match &st.managed_keyed {
            Some(h) => Some(copier.keyed(&label, h)?),
            None => None,
        };
        *new = SubtaskState {
            managed_keyed,
            ..rest
        };
    }
    Ok(if verbatim {
        (None, true)
    } else {
        (Some(out), false)
    })
}

/// Where a replaced operator goes: the template's operator, or a new one.
struct Target<'t> {
    label: String,
    template: Option<(usize, &'t OperatorState)>,
    id: OperatorId,
    name: Option<String>,
    uid: Option<String>,
    parallelism: u32,
}

fn target<'t>(
    ops: &OperatorSources<'_>,
    prepared: &Prepared<'_>,
    template: Option<&'t FlinkSavepoint>,
    opts: &JobExportOptions,
) -> Result<Target<'t>, FlinkError> {
    let max_p = prepared.max_parallelism();
    match template {
        Some(t) => {
            let op = t.operator(&ops.operator)?;
            let i = t
                .metadata
                .operators
                .iter()
                .position(|o| std::ptr::eq(o, op))
                .unwrap_or(0);
            let label = op.label();
            if op.max_parallelism != max_p {
                return Err(FlinkError::Inconsistent(format!(
                    "operator '{label}': the savepoint(s) given for it have max parallelism {max_p}, the template's operator has {}; max parallelism cannot change across a restore",
                    op.max_parallelism
                )));
            }
            if let Some(p) = opts.parallelism.filter(|p| *p != op.parallelism) {
                return Err(FlinkError::Inconsistent(format!(
                    "operator '{label}': parallelism {p} differs from its parallelism {} in the template",
                    op.parallelism
                )));
            }
            if op.fully_finished {
                return Err(FlinkError::Inconsistent(format!(
                    "operator '{label}' had finished when the template was taken; Flink restores no state into it"
                )));
            }
            Ok(Target {
                label,
                template: Some((i, op)),
                id: op.id,
                name: op.name.clone(),
                uid: op.uid.clone(),
                parallelism: op.parallelism,
            })
        }
        None => {
            let parallelism = opts.parallelism.ok_or_else(|| {
                FlinkError::Inconsistent(format!(
                    "operator '{}': a parallelism is needed without a template",
                    ops.operator
                ))
            })?;
            if parallelism == 0 || parallelism > max_p {
                return Err(FlinkError::Inconsistent(format!(
                    "operator '{}': parallelism {parallelism} must be between 1 and the max parallelism {max_p}",
                    ops.operator
                )));
            }
            let (id, uid) = match OperatorId::from_hex(&ops.operator) {
                Some(id) => (id, None),
                None => (
                    operator_id_for_uid(&ops.operator),
                    Some(ops.operator.clone()),
                ),
            };
            Ok(Target {
                label: ops.operator.clone(),
                template: None,
                id,
                name: uid.clone(),
                uid,
                parallelism,
            })
        }
    }
}

/// Writes a job into `out_dir` (created; it must not exist or be empty): every operator of `operators`
/// from our savepoints (its managed keyed state, as [`export_canonical`](crate::export_canonical) writes
/// it), and, with `template`, every other operator of the template carried over unchanged (module docs).
/// With a template, operators are matched by uid or id and must be in it; their max parallelism must be
/// the template's, and so must `opts.parallelism` when given; the `_metadata` version, checkpoint id,
/// master states and properties are the template's. Without one, every operator needs `opts.parallelism`.
/// Errors name the operator.
pub fn export_job(
    operators: &[OperatorSources<'_>],
    template: Option<&FlinkSavepoint>,
    opts: &JobExportOptions,
    out_dir: &Path,
) -> Result<JobExportSummary, FlinkError> {
    if operators.is_empty() && template.is_none() {
        return Err(FlinkError::Inconsistent("no operator to export".into()));
    }
    let mut prepared = Vec::with_capacity(operators.len());
    let mut targets = Vec::with_capacity(operators.len());
    let mut seen = BTreeSet::new();
    for ops in operators {
        if ops.savepoints.is_empty() {
            return Err(FlinkError::Inconsistent(format!(
                "operator '{}': no savepoint given",
                ops.operator
            )));
        }
        let p = Prepared::new(&ops.savepoints, opts.compress)
            .map_err(|e| e.for_operator(&ops.operator))?;
        let t = target(ops, &p, template, opts)?;
        if !seen.insert(t.id) {
            return Err(FlinkError::Inconsistent(format!(
                "operator '{}' ({}) is given twice",
                t.label, t.id
            )));
        }
        prepared.push(p);
        targets.push(t);
    }
    prepare_out_dir(out_dir)?;
    let template_dir = template.map(|t| t.dir().to_path_buf()).unwrap_or_default();
    let mut copier = Copier {
        template: &template_dir,
        out: out_dir,
        done: BTreeMap::new(),
        files: 0,
        bytes: 0,
    };
    // Each replaced operator's state, by its index in the template (or after the template's operators).
    let mut written: BTreeMap<usize, (OperatorState, JobOperator)> = BTreeMap::new();
    let base = template.map_or(0, |t| t.metadata.operators.len());
    for (k, (t, p)) in targets.iter().zip(&prepared).enumerate() {
        let (mut subtasks, files) =
            write_keyed_files(p, &t.id, t.parallelism, opts.compress, out_dir)
                .map_err(|e| e.for_operator(&t.label))?;
        let mut coordinator_state = None;
        let before = copier.files;
        if let Some((_, top)) = t.template {
            for st in &top.subtasks {
                if st.finished {
                    continue;
                }
                if !st.input_channels.is_empty() || !st.result_subpartitions.is_empty() {
                    return Err(FlinkError::Inconsistent(format!(
                        "operator '{}' subtask {} holds in-flight channel state (an unaligned checkpoint); its keyed state cannot be replaced",
                        t.label, st.index
                    )));
                }
                let rest = copier
                    .subtask_rest(&t.label, st)
                    .map_err(|e| e.for_operator(&t.label))?;
                if let Some(s) = subtasks.iter_mut().find(|s| s.index == st.index) {
                    s.managed_operator = rest.managed_operator;
                    s.raw_operator = rest.raw_operator;
                    s.raw_keyed = rest.raw_keyed;
                }
            }
            if let Some(c) = &top.coordinator_state {
                coordinator_state = Some(copier.handle(c).map_err(|e| e.for_operator(&t.label))?);
            }
        }
        let state = OperatorState {
            name: t.name.clone(),
            uid: t.uid.clone(),
            id: t.id,
            parallelism: t.parallelism,
            max_parallelism: p.max_parallelism(),
            coordinator_state,
            fully_finished: false,
            subtasks,
        };
        let summary = JobOperator {
            label: t.label.clone(),
            id: t.id,
            parallelism: t.parallelism,
            max_parallelism: p.max_parallelism(),
            coordinator_state: state.coordinator_state.is_some(),
            outcome: OperatorOutcome::Replaced {
                states: p.states(),
                files,
                kept_files: copier.files - before,
            },
        };
        written.insert(t.template.map_or(base + k, |(i, _)| i), (state, summary));
    }
    // The operators in `_metadata` order: the template's (replaced or carried), then new ones.
    let mut carried: Vec<(usize, Option<OperatorState>, JobOperator)> = Vec::new();
    if let Some(t) = template {
        for (i, op) in t.metadata.operators.iter().enumerate() {
            if written.contains_key(&i) {
                continue;
            }
            let (files, bytes) = (copier.files, copier.bytes);
            let (state, verbatim) =
                carry(t, i, &mut copier).map_err(|e| e.for_operator(&op.label()))?;
            carried.push((
                i,
                state,
                JobOperator {
                    label: op.label(),
                    id: op.id,
                    parallelism: op.parallelism,
                    max_parallelism: op.max_parallelism,
                    coordinator_state: op.coordinator_state.is_some(),
                    outcome: OperatorOutcome::Carried {
                        verbatim,
                        files: copier.files - files,
                        bytes: copier.bytes - bytes,
                    },
                },
            ));
        }
    }
    let mut order: Vec<(usize, EncodedOperator<'_>, JobOperator)> = Vec::new();
    for (i, (state, summary)) in &written {
        order.push((*i, EncodedOperator::State(state), summary.clone()));
    }
    for (i, state, summary) in &carried {
        let enc = match (state, template.and_then(|t| t.operator_bytes(*i))) {
            (Some(s), _) => EncodedOperator::State(s),
            (None, Some(b)) => EncodedOperator::Bytes(b),
            (None, None) => {
                return Err(FlinkError::Inconsistent(format!(
                    "operator '{}': no template bytes",
                    summary.label
                )))
            }
        };
        order.push((*i, enc, summary.clone()));
    }
    order.sort_by_key(|(i, _, _)| *i);
    let meta = match template {
        Some(t) => CheckpointMetadata {
            version: t.metadata.version,
            checkpoint_id: t.metadata.checkpoint_id,
            master_states: t.metadata.master_states,
            master_state_bytes: t.metadata.master_state_bytes.clone(),
            operators: Vec::new(),
            operator_spans: Vec::new(),
            trailer: t.metadata.trailer.clone(),
        },
        None => CheckpointMetadata {
            version: EXPORT_METADATA_VERSION,
            checkpoint_id: 0,
            master_states: 0,
            master_state_bytes: Vec::new(),
            operators: Vec::new(),
            operator_spans: Vec::new(),
            trailer: CANONICAL_SAVEPOINT_PROPERTIES.to_vec(),
        },
    };
    let encoded: Vec<EncodedOperator<'_>> = order.iter().map(|(_, e, _)| *e).collect();
    let bytes = write_metadata_with(&meta, &encoded)?;
    commit_metadata(out_dir, &bytes)?;
    Ok(JobExportSummary {
        operators: order.into_iter().map(|(_, _, s)| s).collect(),
        metadata_version: meta.version,
        metadata_bytes: bytes.len() as u64,
    })
}
