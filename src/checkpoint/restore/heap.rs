//! Restore and rescale from a heap checkpoint into a heap backend (`design/checkpoints.md`, "Heap
//! checkpoints"): a new instance reads exactly the (state, key group) tables of the key groups it owns.

use std::path::Path;

use super::parts::{
    check_backend, check_fetched, damaged_metadata, object_of, select_parts, RestoreInfo,
};
use crate::backend::heap::table_file;
use crate::backend::heap::HeapBackend;
use crate::backend::{BackendConfig, BackendKind, StateBackend};
use crate::checkpoint::format::{CheckpointMetadata, FileKind, FileRef};
use crate::checkpoint::storage::CheckpointStorage;
use crate::error::Result;
use crate::keygroup::{key_group_prefix_len, write_key_group_prefix, KeyGroup};

/// One table to load.
struct Wanted<'a> {
    part: &'a CheckpointMetadata,
    /// The part's index in `parts`, and the table's file record in it.
    part_index: usize,
    file: &'a FileRef,
    state: usize,
    key_group: KeyGroup,
    number: u64,
    object: String,
    offset: u64,
    length: u64,
}

/// Restores the key groups of `config` from heap checkpoint `id` into a new heap backend: the tables of
/// every old instance for the key groups `config` owns (nothing else is read). Read from one part, the
/// tables keep their checkpoint file numbers; from several, whose numbers may collide, they are numbered
/// afresh. `RestoreInfo::parts` lists them so, and a claiming checkpointer references them while unchanged.
pub fn restore_heap(
    storage: &CheckpointStorage,
    id: u64,
    config: BackendConfig,
) -> Result<(HeapBackend, RestoreInfo)> {
    let target = config.key_group_range;
    let _span =
        tracing::debug_span!("checkpoint_restore", id, backend = "heap", key_groups = %target)
            .entered();
    let parts = select_parts(storage, id, &config)?;
    check_backend(&parts, BackendKind::Heap)?;
    let prefix_len = key_group_prefix_len(config.max_parallelism);
    let mut backend = HeapBackend::new(config)?;
    let mut info = RestoreInfo {
        parts: parts.clone(),
        ..RestoreInfo::default()
    };
    // State ids of every part in the new backend, by name (instances may have registered in other orders).
    let mut ids: Vec<Vec<usize>> = Vec::with_capacity(parts.len());
    for m in &parts {
        let mut row = Vec::with_capacity(m.states.len());
        for meta in &m.states {
            row.push(backend.register_state(meta.clone())?);
        }
        ids.push(row);
    }
    let mut wanted: Vec<Wanted<'_>> = Vec::new();
    for (pi, m) in parts.iter().enumerate() {
        for f in &m.files {
            let FileKind::Table { state, key_group } = f.kind else {
                return Err(damaged_metadata(
                    m,
                    format!("file {} of a heap checkpoint is not a heap table", f.number),
                ));
            };
            if !target.contains(key_group) {
                continue;
            }
            let o = object_of(m, f)?;
            let state = ids[pi].get(state as usize).copied().ok_or_else(|| {
                damaged_metadata(
                    m,
                    format!("file {} names state {state} of {}", f.number, ids[pi].len()),
                )
            })?;
            wanted.push(Wanted {
                part: m,
                part_index: pi,
                file: f,
                state,
                key_group,
                number: f.number,
                object: o.path.clone(),
                offset: f.offset,
                length: f.length,
            });
        }
        info.adopted.push(m.instance.clone());
    }
    let mut key = Vec::new();
    let ranges: Vec<(String, u64, u64)> = wanted
        .iter()
        .map(|w| (w.object.clone(), w.offset, w.length))
        .collect();
    super::parts::fetch_in_batches(storage, &ranges, |i, bytes| {
        let Some(w) = wanted.get(i) else {
            return Ok(());
        };
        check_fetched(w.part, w.file, &w.object, &bytes)?;
        info.bytes_fetched += bytes.len() as u64;
        table_file::decode(Path::new(&w.object), &bytes, &mut |k, v| {
            key.clear();
            write_key_group_prefix(&mut key, w.key_group, prefix_len);
            key.extend_from_slice(k);
            backend.load_entry(w.state, w.key_group, &key, v)
        })?;
        info.tables_read += 1;
        Ok(())
    })?;
    backend.finish_load()?;
    for p in &mut info.parts {
        p.files.clear();
    }
    for (n, w) in wanted.iter().enumerate() {
        let number = if parts.len() == 1 {
            w.number
        } else {
            n as u64 + 1
        };
        backend.set_table_number(w.state, w.key_group, number);
        info.parts[w.part_index].files.push(FileRef {
            number,
            kind: FileKind::Table {
                state: w.state as u32,
                key_group: w.key_group,
            },
            ..w.file.clone()
        });
    }
    Ok((backend, info))
}
