//! The Flink commands: `import-flink`, `export-flink`, and `inspect` on a Flink savepoint or checkpoint
//! directory.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use keyed_state_flink::FlinkError;

type Result<T, E = FlinkError> = std::result::Result<T, E>;
use keyed_state::savepoint::{Compression, SavepointReader, WriteOptions};
use keyed_state_flink::job::OperatorOutcome;
use keyed_state_flink::location::{display_name, open_stream};
use keyed_state_flink::metadata::{KeyedHandle, OperatorState, SubtaskState};
use keyed_state_flink::proxy::{read_proxy, KeyedProxy};
use keyed_state_flink::{
    export_canonical, export_job, ExportOptions, FlinkSavepoint, JobExportOptions, OperatorSources,
};

/// The write options of `--lz4`.
fn write_options(lz4: bool) -> WriteOptions {
    WriteOptions {
        compression: if lz4 {
            Compression::Lz4
        } else {
            Compression::None
        },
    }
}

/// Imports `op` into `out`; returns the line printed.
fn import_one(sp: &FlinkSavepoint, op: &OperatorState, out: &Path, lz4: bool) -> Result<String> {
    let import = sp.import(op)?;
    for w in import.warnings() {
        eprintln!("warning: {w}");
    }
    let (summary, _) = import.write_savepoint(out, &write_options(lz4))?;
    Ok(format!(
        "imported operator {} ({}) from {} subtask stream(s): {} states, {} entries in {} key groups -> {} ({} bytes)\n",
        op.label(),
        op.id,
        import.files().len(),
        keyed_state::backend::BackendSnapshot::states(&import).len(),
        summary.total_entries(),
        summary.key_groups_written,
        out.display(),
        summary.bytes_written
    ))
}

/// `import-flink --operator`: one operator's keyed state into one of our savepoints. Returns the summary
/// printed.
pub fn import(dir: &Path, operator: &str, out: &Path, lz4: bool) -> Result<String> {
    let sp = FlinkSavepoint::open(dir)?;
    let op = sp.operator(operator)?;
    import_one(&sp, op, out, lz4)
}

/// The file name of an operator's savepoint in `--out-dir`: the uid (or hex id) with every character that
/// is not a letter, digit, `-`, `_` or a non-leading `.` written as `%XX` (its UTF-8 bytes), then `.sp`;
/// distinct uids give distinct names.
pub fn savepoint_file_name(label: &str) -> String {
    let mut out = String::with_capacity(label.len() + 3);
    for (i, c) in label.chars().enumerate() {
        if c.is_ascii_alphanumeric() || c == '-' || c == '_' || (c == '.' && i > 0) {
            out.push(c);
        } else {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("%{b:02X}"));
            }
        }
    }
    out.push_str(".sp");
    out
}

/// `import-flink --all --out-dir`: every keyed operator into `out_dir/<uid>.sp`. Returns the summary.
pub fn import_all(dir: &Path, out_dir: &Path, lz4: bool) -> Result<String> {
    let sp = FlinkSavepoint::open(dir)?;
    let ops: Vec<&OperatorState> = sp.keyed_operators().collect();
    if ops.is_empty() {
        return Err(FlinkError::NoKeyedState {
            operator: format!("any operator of {}", dir.display()),
        });
    }
    std::fs::create_dir_all(out_dir).map_err(|e| FlinkError::io(out_dir.display(), e))?;
    let mut s = String::new();
    let mut names = std::collections::BTreeSet::new();
    for op in &ops {
        let name = savepoint_file_name(&op.label());
        if !names.insert(name.clone()) {
            return Err(FlinkError::Inconsistent(format!(
                "two operators would both be written to {name}"
            )));
        }
        s.push_str(&import_one(&sp, op, &out_dir.join(name), lz4)?);
    }
    let _ = writeln!(
        s,
        "imported {} keyed operator(s) of {} into {}",
        ops.len(),
        sp.metadata.operators.len(),
        out_dir.display()
    );
    Ok(s)
}

/// What `export-flink` was asked.
#[derive(Debug, Clone)]
pub struct ExportRequest {
    /// Positional savepoints (with `operator_uid`).
    pub savepoints: Vec<PathBuf>,
    /// `--operator-uid`.
    pub operator_uid: Option<String>,
    /// `--operator UID=SAVEPOINT[,SAVEPOINT...]`, each.
    pub operators: Vec<String>,
    /// `--parallelism`.
    pub parallelism: Option<u32>,
    /// `--template`.
    pub template: Option<PathBuf>,
    /// `--out`.
    pub out: PathBuf,
    /// `--compress`.
    pub compress: bool,
}

fn open_ours(p: &Path) -> Result<(String, SavepointReader)> {
    SavepointReader::open(p)
        .map(|r| (p.display().to_string(), r))
        .map_err(FlinkError::from)
}

/// The operator groups of a request: `(operator, savepoint paths)`.
fn groups(r: &ExportRequest) -> Result<Vec<(String, Vec<PathBuf>)>> {
    let mut out = Vec::new();
    match (&r.operator_uid, r.savepoints.is_empty()) {
        (Some(uid), false) => out.push((uid.clone(), r.savepoints.clone())),
        (Some(_), true) => {
            return Err(FlinkError::Inconsistent(
                "--operator-uid names the operator of the savepoint files given before it; none is given".into(),
            ))
        }
        (None, false) => {
            return Err(FlinkError::Inconsistent(
                "savepoint files without --operator-uid: give --operator-uid UID, or --operator UID=SAVEPOINT".into(),
            ))
        }
        (None, true) => {}
    }
    for g in &r.operators {
        let Some((op, list)) = g.split_once('=') else {
            return Err(FlinkError::Inconsistent(format!(
                "--operator {g}: expected UID=SAVEPOINT[,SAVEPOINT...]"
            )));
        };
        let paths: Vec<PathBuf> = list
            .split(',')
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
            .collect();
        if op.is_empty() || paths.is_empty() {
            return Err(FlinkError::Inconsistent(format!(
                "--operator {g}: expected UID=SAVEPOINT[,SAVEPOINT...]"
            )));
        }
        out.push((op.to_string(), paths));
    }
    if out.is_empty() {
        return Err(FlinkError::Inconsistent(
            "nothing to export: give SAVEPOINT... --operator-uid UID, or --operator UID=SAVEPOINT[,SAVEPOINT...]".into(),
        ));
    }
    Ok(out)
}

/// `export-flink`: our savepoints as a Flink savepoint directory. Returns the summary printed.
pub fn export(r: &ExportRequest) -> Result<String> {
    let groups = groups(r)?;
    // One operator, no template: the single-operator export (the operator id always derived from the uid).
    if let ([(uid, paths)], None, true) = (groups.as_slice(), &r.template, r.operators.is_empty()) {
        let parallelism = r.parallelism.ok_or_else(|| {
            FlinkError::Inconsistent("--parallelism is needed without --template".into())
        })?;
        return export_one(paths, uid, parallelism, &r.out, r.compress);
    }
    let template = match &r.template {
        Some(t) => Some(FlinkSavepoint::open(t)?),
        None => None,
    };
    let readers: Vec<Vec<(String, SavepointReader)>> = groups
        .iter()
        .map(|(_, paths)| {
            paths
                .iter()
                .map(|p| open_ours(p))
                .collect::<Result<Vec<_>>>()
        })
        .collect::<Result<_>>()?;
    let ops: Vec<OperatorSources<'_>> = groups
        .iter()
        .zip(&readers)
        .map(|((op, _), rs)| OperatorSources {
            operator: op.clone(),
            savepoints: rs.iter().map(|(n, r)| (n.as_str(), r)).collect(),
        })
        .collect();
    let opts = JobExportOptions {
        parallelism: r.parallelism,
        compress: r.compress,
    };
    let summary = export_job(&ops, template.as_ref(), &opts, &r.out)?;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "exported {} operator(s){} -> {} (_metadata version {}, {} bytes{})",
        ops.len(),
        match &r.template {
            Some(t) => format!(
                ", {} carried over from template {}",
                summary.operators.len() - ops.len(),
                t.display()
            ),
            None => String::new(),
        },
        r.out.display(),
        summary.metadata_version,
        summary.metadata_bytes,
        if r.compress { ", snappy" } else { "" }
    );
    for op in &summary.operators {
        let what = match &op.outcome {
            OperatorOutcome::Replaced {
                states,
                files,
                kept_files,
            } => format!(
                "replaced: {states} states, {} entries in {} keyed-state file(s){}",
                op.entries(),
                files.len(),
                if *kept_files > 0 {
                    format!(", {kept_files} file(s) of the template's operator state kept")
                } else {
                    String::new()
                }
            ),
            OperatorOutcome::Carried {
                verbatim,
                files,
                bytes,
            } => format!(
                "carried over{}: {files} file(s), {bytes} bytes copied",
                if *verbatim {
                    " byte for byte"
                } else {
                    " (absolute file handles made relative to copies)"
                }
            ),
        };
        let _ = writeln!(
            s,
            "  operator {} ({}) parallelism {}, max parallelism {}{}: {what}",
            op.label,
            op.id,
            op.parallelism,
            op.max_parallelism,
            if op.coordinator_state {
                ", coordinator state"
            } else {
                ""
            }
        );
    }
    Ok(s)
}

/// The single-operator export (no template). Returns the summary printed.
fn export_one(
    savepoints: &[PathBuf],
    uid: &str,
    parallelism: u32,
    out: &Path,
    compress: bool,
) -> Result<String> {
    let readers = savepoints
        .iter()
        .map(|p| open_ours(p))
        .collect::<Result<Vec<_>>>()?;
    let sources: Vec<(&str, &SavepointReader)> =
        readers.iter().map(|(n, r)| (n.as_str(), r)).collect();
    let opts = ExportOptions {
        compress,
        ..ExportOptions::new(uid, parallelism)
    };
    let summary = export_canonical(&sources, &opts, out)?;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "exported {} states, {} entries from {} savepoint(s) as operator {uid} ({}) at parallelism {parallelism}, max parallelism {}{} -> {}",
        summary.states,
        summary.entries(),
        savepoints.len(),
        summary.operator_id,
        summary.max_parallelism,
        if compress { ", snappy" } else { "" },
        out.display()
    );
    for f in &summary.files {
        let _ = writeln!(
            s,
            "  subtask {}: key groups {}, {} with data, {} entries, {} bytes -> {}",
            f.subtask, f.key_groups, f.key_groups_with_data, f.entries, f.bytes, f.name
        );
    }
    let _ = writeln!(s, "  _metadata: {} bytes", summary.metadata_bytes);
    Ok(s)
}

fn handle_line(h: &KeyedHandle) -> String {
    match h {
        KeyedHandle::KeyGroups { range, offsets, stream, .. } => format!(
            "{} key groups {range} ({} with data) via {}",
            h.type_name(),
            offsets.iter().filter(|o| **o != 0).count(),
            stream.describe()
        ),
        KeyedHandle::Incremental {
            checkpoint_id,
            backend_id,
            range,
            meta,
            shared,
            private,
            ..
        } => format!(
            "{} key groups {range}, checkpoint {checkpoint_id}, backend {backend_id}, meta-data {}, {} shared and {} private files",
            h.type_name(),
            meta.describe(),
            shared.len(),
            private.len()
        ),
        KeyedHandle::Changelog { range, .. } => format!("{} key groups {range}", h.type_name()),
    }
}

fn proxy_lines(s: &mut String, proxy: &KeyedProxy, indent: &str) {
    let _ = writeln!(
        s,
        "{indent}serialization proxy v{}, key-group compression {}, key serializer {}",
        proxy.version,
        if proxy.compressed { "snappy" } else { "off" },
        proxy.key_serializer.snapshot
    );
}

fn subtask_report(
    s: &mut String,
    sp: &FlinkSavepoint,
    op: &OperatorState,
    st: &SubtaskState,
) -> Result<()> {
    if st.finished {
        let _ = writeln!(s, "  subtask {}: finished", st.index);
        return Ok(());
    }
    let _ = writeln!(
        s,
        "  subtask {}: managed operator state {}, raw operator state {}, raw keyed state {}, {} input channel and {} result subpartition handles",
        st.index,
        if st.managed_operator.is_some() { "yes" } else { "no" },
        if st.raw_operator.is_some() { "yes" } else { "no" },
        st.raw_keyed.as_ref().map(|h| h.type_name()).unwrap_or("none"),
        st.input_channels.len(),
        st.result_subpartitions.len()
    );
    for (what, h) in [("managed", &st.managed_operator), ("raw", &st.raw_operator)] {
        let Some(h) = h else { continue };
        let data = open_stream(&h.stream, sp.dir())?;
        let states: Vec<String> = h
            .states
            .iter()
            .map(|(name, mode, offsets)| {
                let mode = match mode {
                    0 => "SPLIT_DISTRIBUTE",
                    1 => "UNION",
                    _ => "BROADCAST",
                };
                format!("{name} ({mode}, {} partition(s))", offsets.len())
            })
            .collect();
        let _ = writeln!(
            s,
            "    {what} operator state: {}; {} bytes, crc32c {:08x}, via {}",
            states.join(", "),
            data.len(),
            keyed_state_flink::snappy::crc32c(&data),
            h.stream.describe()
        );
    }
    let Some(h) = &st.managed_keyed else {
        return Ok(());
    };
    let _ = writeln!(s, "    managed keyed state: {}", handle_line(h));
    let (stream, header_end) = match h {
        KeyedHandle::KeyGroups {
            offsets, stream, ..
        } => (
            stream,
            offsets
                .iter()
                .filter(|o| **o != 0)
                .min()
                .map(|o| *o as usize),
        ),
        KeyedHandle::Incremental { meta, .. } => (meta, None),
        KeyedHandle::Changelog { .. } => return Ok(()),
    };
    let name = display_name(stream);
    let data = open_stream(stream, sp.dir())?;
    let proxy = read_proxy(&data, &name, header_end)?;
    proxy_lines(s, &proxy, "    ");
    let canonical = matches!(
        h,
        KeyedHandle::KeyGroups {
            kind: keyed_state_flink::metadata::KeyGroupsHandleKind::Savepoint,
            ..
        }
    );
    let mut entries = vec![0u64; proxy.states.len()];
    let mut bytes = vec![0u64; proxy.states.len()];
    let mut groups = 0usize;
    let mut sst_bytes = 0u64;
    if let KeyedHandle::Incremental {
        range,
        shared,
        private,
        ..
    } = h
    {
        let rocks = keyed_state_flink::RocksNativeState::read(
            shared,
            private,
            sp.dir(),
            &proxy.states,
            *range,
            op.max_parallelism,
        )?;
        for f in &rocks.files {
            sst_bytes += f.bytes;
            let _ = writeln!(
                s,
                "    sst {} ({}): column family {}, {} records, {} range tombstones, {} bytes, level {}, {}",
                f.local_name,
                f.stored_as,
                f.column_family,
                f.records,
                f.range_tombstones,
                f.bytes,
                f.level,
                if f.private { "private" } else { "shared" }
            );
        }
        let _ = writeln!(s, "    live files from {}", rocks.manifest);
        let _ = writeln!(
            s,
            "    folded {} versions ({} merge operands, {} deleted keys, {} keys outside the key groups skipped)",
            rocks.versions, rocks.merge_operands, rocks.deleted, rocks.skipped_outside_range
        );
        for kg in rocks.key_groups().collect::<Vec<_>>() {
            groups += 1;
            rocks.read_key_group(kg, &mut |sid, k, v| {
                entries[sid] += 1;
                bytes[sid] += (k.len() + v.len()) as u64;
                Ok(())
            })?;
        }
    }
    let counted = canonical || matches!(h, KeyedHandle::Incremental { .. });
    if let (true, KeyedHandle::KeyGroups { range, offsets, .. }) = (canonical, h) {
        for (j, off) in offsets.iter().enumerate() {
            if *off == 0 {
                continue;
            }
            let kg = range.start() + j as u16;
            groups += 1;
            keyed_state_flink::keyed_stream::read_key_group(
                &data,
                *off as usize,
                kg,
                op.max_parallelism,
                proxy.compressed,
                proxy.states.len(),
                &name,
                &mut |sid, k, v| {
                    entries[sid] += 1;
                    bytes[sid] += (k.len() + v.len()) as u64;
                    Ok(())
                },
            )?;
        }
    }
    let _ = writeln!(s, "    states: {}", proxy.states.len());
    for (i, st) in proxy.states.iter().enumerate() {
        let kind = st
            .option("KEYED_STATE_TYPE")
            .map(str::to_string)
            .unwrap_or_else(|| format!("{:?}", st.backend_type));
        let _ = writeln!(s, "      [{i}] {} ({kind})", st.name);
        for (key, ser) in &st.serializers {
            let raw = match &ser.raw_because {
                Some(c) => format!(" [raw: {c} has no known layout]"),
                None => String::new(),
            };
            let _ = writeln!(s, "          {key}: {}{raw}", ser.snapshot);
        }
        if counted {
            let _ = writeln!(
                s,
                "          entries: {}, key+value bytes: {}",
                entries[i], bytes[i]
            );
        }
    }
    if canonical {
        let _ = writeln!(
            s,
            "    key groups with data: {groups}; total {} entries, {} key+value bytes, stream {} bytes",
            entries.iter().sum::<u64>(),
            bytes.iter().sum::<u64>(),
            data.len()
        );
    } else if counted {
        let _ = writeln!(
            s,
            "    key groups with data: {groups}; total {} live entries, {} key+value bytes, SST files {} bytes",
            entries.iter().sum::<u64>(),
            bytes.iter().sum::<u64>(),
            sst_bytes
        );
    }
    Ok(())
}

/// `inspect` of a Flink savepoint or checkpoint directory.
pub fn inspect(dir: &Path) -> Result<String> {
    let sp = FlinkSavepoint::open(dir)?;
    let m = &sp.metadata;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Flink _metadata version {}, checkpoint id {}",
        m.version, m.checkpoint_id
    );
    let _ = writeln!(s, "master states: {}", m.master_states);
    let _ = writeln!(s, "operators: {}", m.operators.len());
    for op in &m.operators {
        let _ = writeln!(
            s,
            "operator {} uid={} name={} parallelism={} max parallelism={} subtask states={}{}",
            op.id,
            op.uid.as_deref().unwrap_or("-"),
            op.name.as_deref().unwrap_or("-"),
            op.parallelism,
            op.max_parallelism,
            op.subtasks.len(),
            if op.fully_finished { " (finished)" } else { "" }
        );
        if let Some(c) = &op.coordinator_state {
            let data = open_stream(c, sp.dir())?;
            let _ = writeln!(
                s,
                "  coordinator state: {} bytes, crc32c {:08x}",
                data.len(),
                keyed_state_flink::snappy::crc32c(&data)
            );
        }
        for st in &op.subtasks {
            subtask_report(&mut s, &sp, op, st).map_err(|e| {
                let handle = st
                    .managed_keyed
                    .as_ref()
                    .map_or("subtask state", |h| h.type_name());
                e.in_handle(&op.label(), st.index, handle)
            })?;
        }
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::savepoint_file_name;

    #[test]
    fn savepoint_file_names_keep_plain_uids_and_escape_the_rest() {
        assert_eq!(savepoint_file_name("keyed-a"), "keyed-a.sp");
        assert_eq!(
            savepoint_file_name("14725b7741e1a536207c2c73a13e02c9"),
            "14725b7741e1a536207c2c73a13e02c9.sp"
        );
        assert_eq!(savepoint_file_name("a/b c"), "a%2Fb%20c.sp");
        assert_eq!(savepoint_file_name("..x"), "%2E.x.sp");
        assert_eq!(savepoint_file_name("é%"), "%C3%A9%25.sp");
        // Distinct uids, distinct names.
        assert_ne!(savepoint_file_name("a/b"), savepoint_file_name("a%2Fb"));
    }
}
