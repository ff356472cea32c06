//! The Flink commands: `import-flink`, `export-flink`, and `inspect` on a Flink savepoint or checkpoint
//! directory.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use keyed_state_flink::FlinkError;

type Result<T, E = FlinkError> = std::result::Result<T, E>;
use keyed_state::savepoint::{write_savepoint, Compression, SavepointReader, WriteOptions};
use keyed_state_flink::location::{display_name, open_stream};
use keyed_state_flink::metadata::{KeyedHandle, OperatorState, SubtaskState};
use keyed_state_flink::proxy::{read_proxy, KeyedProxy};
use keyed_state_flink::{export_canonical, ExportOptions, FlinkSavepoint};

/// `import-flink`: one operator's keyed state into one of our savepoints. Returns the summary printed.
pub fn import(dir: &Path, operator: &str, out: &Path, lz4: bool) -> Result<String> {
    let sp = FlinkSavepoint::open(dir)?;
    let op = sp.operator(operator)?;
    let import = sp.import(op)?;
    for w in import.warnings() {
        eprintln!("warning: {w}");
    }
    let options = WriteOptions {
        compression: if lz4 {
            Compression::Lz4
        } else {
            Compression::None
        },
    };
    let summary = write_savepoint(out, &import, &options)?;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "imported operator {} ({}) from {} subtask stream(s): {} states, {} entries in {} key groups -> {} ({} bytes)",
        op.label(),
        op.id,
        import.files().len(),
        keyed_state::backend::BackendSnapshot::states(&import).len(),
        summary.total_entries(),
        summary.key_groups_written,
        out.display(),
        summary.bytes_written
    );
    Ok(s)
}

/// `export-flink`: our savepoints as a Flink canonical savepoint directory. Returns the summary printed.
pub fn export(
    savepoints: &[PathBuf],
    uid: &str,
    parallelism: u32,
    out: &Path,
    compress: bool,
) -> Result<String> {
    let readers = savepoints
        .iter()
        .map(|p| {
            SavepointReader::open(p)
                .map(|r| (p.display().to_string(), r))
                .map_err(FlinkError::from)
        })
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
                "    sst {} ({}): column family {}, {} records, {} range tombstones, {} bytes",
                f.local_name, f.stored_as, f.column_family, f.records, f.range_tombstones, f.bytes
            );
        }
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
        for st in &op.subtasks {
            subtask_report(&mut s, &sp, op, st)?;
        }
    }
    Ok(s)
}
