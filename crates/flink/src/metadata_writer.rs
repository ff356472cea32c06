//! Writing Flink's `_metadata` file: the inverse of [`parse_metadata`](super::parse_metadata) for the handles
//! a canonical or HashMap-native savepoint holds. Layout: `design/flink-interop.md`, "_metadata".

use super::input::encode_modified_utf8;
use super::metadata::{
    CheckpointMetadata, KeyGroupsHandleKind, KeyedHandle, OperatorState, OperatorStateHandle,
    StreamHandle, SubtaskState, MAX_METADATA_VERSION, METADATA_MAGIC, MIN_METADATA_VERSION,
};
use super::FlinkError;
use keyed_state::keygroup::KeyGroupRange;

/// The metadata version Flink 2.3 writes, and [`write_metadata`]'s choice for exports.
pub const EXPORT_METADATA_VERSION: i32 = 6;

/// The trailer of a savepoint Flink 2.3 triggered in the canonical format: `CheckpointProperties`
/// (forced, `SavepointType{name='Savepoint', postCheckpointAction=NONE, formatType=CANONICAL}`, nothing
/// discarded) as `java.io.ObjectOutputStream` writes it. The 745 bytes are copied from the
/// `_metadata` files Flink wrote (`tests/fixtures/flink/*-canonical-savepoint*`, identical in all three);
/// a test checks them against the fixtures.
pub const CANONICAL_SAVEPOINT_PROPERTIES: &[u8] =
    include_bytes!("canonical_savepoint_properties.bin");

fn unsupported(what: &str) -> FlinkError {
    FlinkError::Inconsistent(format!("cannot write {what} into _metadata"))
}

struct Out {
    b: Vec<u8>,
}

impl Out {
    fn u8(&mut self, v: u8) {
        self.b.push(v);
    }
    fn i32(&mut self, v: i32) {
        self.b.extend_from_slice(&v.to_be_bytes());
    }
    fn i64(&mut self, v: i64) {
        self.b.extend_from_slice(&v.to_be_bytes());
    }
    fn utf(&mut self, s: &str) -> Result<(), FlinkError> {
        let e = encode_modified_utf8(s);
        let n = u16::try_from(e.len()).map_err(|_| {
            FlinkError::Inconsistent(format!(
                "string of {} bytes is too long for Java's writeUTF",
                e.len()
            ))
        })?;
        self.b.extend_from_slice(&n.to_be_bytes());
        self.b.extend_from_slice(&e);
        Ok(())
    }
    fn count(&mut self, n: usize, what: &str) -> Result<(), FlinkError> {
        let n = i32::try_from(n).map_err(|_| unsupported(what))?;
        self.i32(n);
        Ok(())
    }
}

/// Encodes `m` as Flink's `_metadata` (`m.version`, 3 to 7), master states as their bytes were read,
/// ending with `m.trailer` as it is. Channel state handles, changelog handles and file segments are not
/// kept by the reader and cannot be written: they give [`FlinkError::Inconsistent`] naming them (a
/// whole-job export copies such operators' bytes instead, [`write_metadata_with`]).
pub fn write_metadata(m: &CheckpointMetadata) -> Result<Vec<u8>, FlinkError> {
    let ops: Vec<EncodedOperator<'_>> = m.operators.iter().map(EncodedOperator::State).collect();
    write_metadata_with(m, &ops)
}

/// One operator of a `_metadata` being written: encoded from its state, or its bytes as another
/// `_metadata` of the same version holds them.
#[derive(Debug, Clone, Copy)]
pub enum EncodedOperator<'a> {
    /// Encoded by [`write_metadata`]'s rules.
    State(&'a OperatorState),
    /// Copied verbatim.
    Bytes(&'a [u8]),
}

/// [`write_metadata`] with the operators given as `ops` (in this order) instead of `m.operators`.
pub fn write_metadata_with(
    m: &CheckpointMetadata,
    ops: &[EncodedOperator<'_>],
) -> Result<Vec<u8>, FlinkError> {
    if !(MIN_METADATA_VERSION..=MAX_METADATA_VERSION).contains(&m.version) {
        return Err(FlinkError::UnsupportedMetadataVersion {
            at: keyed_state::Location::file("_metadata"),
            version: m.version,
        });
    }
    if m.master_states != 0 && m.master_state_bytes.is_empty() {
        return Err(unsupported("master states without their bytes"));
    }
    let mut o = Out { b: Vec::new() };
    o.i32(METADATA_MAGIC as i32);
    o.i32(m.version);
    o.i64(m.checkpoint_id);
    o.count(m.master_states, "master states")?;
    o.b.extend_from_slice(&m.master_state_bytes);
    o.count(ops.len(), "operators")?;
    let w = Writer { version: m.version };
    for op in ops {
        match op {
            EncodedOperator::State(op) => w.operator(&mut o, op)?,
            EncodedOperator::Bytes(b) => o.b.extend_from_slice(b),
        }
    }
    o.b.extend_from_slice(&m.trailer);
    Ok(o.b)
}

struct Writer {
    version: i32,
}

impl Writer {
    fn operator(&self, o: &mut Out, op: &OperatorState) -> Result<(), FlinkError> {
        if self.version >= 5 {
            o.utf(op.name.as_deref().unwrap_or(""))?;
            o.utf(op.uid.as_deref().unwrap_or(""))?;
        }
        o.b.extend_from_slice(&op.id.0);
        o.i32(op.parallelism as i32);
        o.i32(op.max_parallelism as i32);
        self.stream(o, op.coordinator_state.as_ref())?;
        if op.fully_finished {
            o.i32(-1);
            return Ok(());
        }
        o.count(op.subtasks.len(), "subtask states")?;
        for st in &op.subtasks {
            self.subtask(o, st)?;
        }
        Ok(())
    }

    fn subtask(&self, o: &mut Out, st: &SubtaskState) -> Result<(), FlinkError> {
        if st.finished {
            o.i32(-(st.index as i32) - 1);
            return Ok(());
        }
        o.i32(st.index as i32);
        for h in [&st.managed_operator, &st.raw_operator] {
            match h {
                None => o.i32(0),
                Some(h) => {
                    o.i32(1);
                    self.operator_handle(o, h)?;
                }
            }
        }
        self.keyed(o, st.managed_keyed.as_ref())?;
        self.keyed(o, st.raw_keyed.as_ref())?;
        if !st.input_channels.is_empty() || !st.result_subpartitions.is_empty() {
            return Err(unsupported("channel state handles (unaligned checkpoints)"));
        }
        o.i32(0);
        o.i32(0);
        if self.version >= 7 {
            match st.ref_checkpoint_id {
                None => o.u8(0),
                Some(id) => {
                    o.u8(1);
                    o.i64(id);
                }
            }
        }
        Ok(())
    }

    fn operator_handle(&self, o: &mut Out, h: &OperatorStateHandle) -> Result<(), FlinkError> {
        o.u8(4);
        o.count(h.states.len(), "operator states")?;
        for (name, mode, offsets) in &h.states {
            o.utf(name)?;
            o.u8(*mode);
            o.count(offsets.len(), "partition offsets")?;
            for off in offsets {
                o.i64(*off);
            }
        }
        self.stream(o, Some(&h.stream))
    }

    fn key_groups(
        &self,
        o: &mut Out,
        range: KeyGroupRange,
        offsets: &[i64],
    ) -> Result<(), FlinkError> {
        if offsets.len() != range.len() {
            return Err(FlinkError::Inconsistent(format!(
                "{} key-group offsets for key groups {range}",
                offsets.len()
            )));
        }
        o.i32(range.start() as i32);
        o.i32(range.len() as i32);
        for off in offsets {
            o.i64(*off);
        }
        Ok(())
    }

    fn keyed(&self, o: &mut Out, h: Option<&KeyedHandle>) -> Result<(), FlinkError> {
        let Some(h) = h else {
            o.u8(0);
            return Ok(());
        };
        match h {
            KeyedHandle::KeyGroups {
                kind,
                range,
                offsets,
                stream,
                handle_id,
            } => {
                let tag = match (kind, handle_id) {
                    (KeyGroupsHandleKind::Savepoint, None) => 7,
                    (KeyGroupsHandleKind::Checkpoint, Some(_)) => 12,
                    (KeyGroupsHandleKind::Checkpoint, None) => 3,
                    (KeyGroupsHandleKind::Savepoint, Some(_)) => {
                        return Err(unsupported(
                            "a savepoint key-groups handle with a handle id",
                        ))
                    }
                };
                o.u8(tag);
                self.key_groups(o, *range, offsets)?;
                self.stream(o, Some(stream))?;
                if let Some(id) = handle_id {
                    o.utf(id)?;
                }
            }
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
                let v2 = match (checkpointed_size, handle_id) {
                    (Some(_), Some(_)) => true,
                    (None, None) => false,
                    _ => {
                        return Err(unsupported(
                            "an incremental handle with only one of size and id",
                        ))
                    }
                };
                o.u8(if v2 { 11 } else { 5 });
                o.i64(*checkpoint_id);
                o.utf(backend_id)?;
                o.i32(range.start() as i32);
                o.i32(range.len() as i32);
                if let Some(size) = checkpointed_size {
                    o.i64(*size);
                }
                self.stream(o, Some(meta))?;
                for list in [shared, private] {
                    o.count(list.len(), "files")?;
                    for (name, h) in list {
                        o.utf(name)?;
                        self.stream(o, Some(h))?;
                    }
                }
                if let Some(id) = handle_id {
                    o.utf(id)?;
                }
            }
            KeyedHandle::Changelog { type_name, .. } => return Err(unsupported(type_name)),
        }
        Ok(())
    }

    fn stream(&self, o: &mut Out, h: Option<&StreamHandle>) -> Result<(), FlinkError> {
        let Some(h) = h else {
            o.u8(0);
            return Ok(());
        };
        match h {
            StreamHandle::ByteStream { name, data } => {
                o.u8(1);
                o.utf(name)?;
                o.count(data.len(), "inline state bytes")?;
                o.b.extend_from_slice(data);
            }
            StreamHandle::File { path, size } => {
                o.u8(2);
                o.i64(*size);
                o.utf(path)?;
            }
            StreamHandle::Relative { path, size } => {
                o.u8(6);
                o.utf(path)?;
                o.i64(*size);
            }
            StreamHandle::Segment { .. } => return Err(unsupported("file segment handles")),
            StreamHandle::KeyGroups {
                range,
                offsets,
                inner,
            } => {
                o.u8(3);
                self.key_groups(o, *range, offsets)?;
                self.stream(o, Some(inner))?;
            }
        }
        Ok(())
    }
}
