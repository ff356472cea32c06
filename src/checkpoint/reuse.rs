//! What a checkpoint may reference instead of uploading: the files of its incremental base and of an
//! uploaded background materialization, identified across checkpoints by [`ReuseKey`].

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use super::format::{CheckpointMetadata, FileKind, FileRef, ObjectRef};
use super::registry::{Materializing, Refs};
use crate::backend::{CapturedFile, FileSource};

/// What identifies a file of the backend across its checkpoints: an SST by its number alone (a number
/// names one file with fixed bytes for the engine's life; the bounds a restore listed may be dropped by the
/// engine when they cover the whole file), a heap table by number, state and key group; a named file is
/// never reused.
pub(super) type ReuseKey = (u64, Option<(u32, u32)>);

pub(super) fn reuse_key(number: u64, kind: &FileKind) -> Option<ReuseKey> {
    match kind {
        FileKind::Sst | FileKind::BoundedSst(_) => Some((number, None)),
        FileKind::Table { state, key_group } => {
            Some((number, Some((*state, u32::from(*key_group)))))
        }
        FileKind::Named(_) => None,
    }
}

/// The metadata's kind of a captured file.
pub(super) fn file_kind(s: &FileSource) -> FileKind {
    match s {
        FileSource::Sst(_) => FileKind::Sst,
        FileSource::BoundedSst { bounds, .. } => FileKind::BoundedSst(bounds.clone()),
        FileSource::Table { state, key_group } => FileKind::Table {
            state: *state,
            key_group: *key_group,
        },
        FileSource::Named { name, .. } => FileKind::Named(name.clone()),
    }
}

/// The references of the files packed, in order, into object `object` (`uploaded`: each file's length and
/// checksum as the upload read it), at their offsets in it.
pub(super) fn packed_file_refs(
    group: &[&CapturedFile],
    uploaded: &[(u64, u64)],
    object: u32,
) -> Vec<FileRef> {
    let mut offset = 0u64;
    group
        .iter()
        .zip(uploaded)
        .map(|(f, &(length, checksum))| {
            let r = FileRef {
                number: f.number,
                level: f.level as u8,
                object,
                offset,
                length,
                checksum,
                kind: file_kind(&f.source),
            };
            offset += length;
            r
        })
        .collect()
}

/// The uploaded materialization's files for a checkpoint's reuse, protected as the checkpoint's own from now
/// on (the registry's `mat`, locked; `protect`: the checkpoint's protect set).
pub(super) fn refs_for(
    mat: &Option<Materializing>,
    protect: &mut BTreeSet<String>,
) -> Option<Arc<Refs>> {
    let refs = mat.as_ref()?.refs.clone()?;
    protect.extend(refs.objects.iter().map(|o| o.path.clone()));
    Some(refs)
}

/// The references of the last confirmed checkpoint (`current`) when it is newer than a checkpoint's `base`
/// (confirmed after that checkpoint began), its objects added to the checkpoint's `protect` (call with the
/// registry locked: every sweep's snapshot keeps the last confirmed checkpoint's objects, `sweeper.rs`
/// `prepare`, whether or not its metadata is still there when the sweep lists the root). `None`
/// for a checkpoint without a base (a full one).
pub(super) fn newer_base_refs(
    base: Option<&CheckpointMetadata>,
    current: Option<&CheckpointMetadata>,
    protect: &mut BTreeSet<String>,
) -> Option<Refs> {
    let (base, current) = (base?, current?);
    if current.checkpoint_id <= base.checkpoint_id || current.run != base.run {
        return None;
    }
    protect.extend(current.objects.iter().map(|o| o.path.clone()));
    Some(Refs {
        objects: current.objects.clone(),
        files: current.files.clone(),
    })
}

/// The reuse table of a checkpoint: the base's files, and those of `more` (an uploaded materialization's,
/// flagged `true`, or a newer confirmed checkpoint's) not in it, each with its object and whether it came
/// from a materialization.
pub(super) fn reuse_table<'a>(
    base: Option<&'a CheckpointMetadata>,
    more: Option<(&'a Refs, bool)>,
) -> HashMap<ReuseKey, (&'a FileRef, &'a ObjectRef, bool)> {
    let mut out = HashMap::new();
    let sources = more
        .map(|(m, from_mat)| (&m.files, &m.objects, from_mat))
        .into_iter()
        .chain(base.map(|b| (&b.files, &b.objects, false)));
    for (files, objects, from_mat) in sources {
        for r in files {
            if let (Some(k), Some(o)) =
                (reuse_key(r.number, &r.kind), objects.get(r.object as usize))
            {
                out.insert(k, (r, o, from_mat));
            }
        }
    }
    out
}
