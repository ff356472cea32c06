//! A Flink savepoint or checkpoint directory: its `_metadata` decoded, and its operators found by uid or id.

use std::path::{Path, PathBuf};

use crate::metadata::{parse_metadata, CheckpointMetadata, OperatorId, OperatorState};
use crate::operator_id::operator_id_for_uid;
use crate::FlinkError;

/// A Flink savepoint or checkpoint directory with its decoded `_metadata`.
#[derive(Debug, Clone)]
pub struct FlinkSavepoint {
    dir: PathBuf,
    /// The `_metadata` bytes decoded.
    bytes: Vec<u8>,
    /// The decoded `_metadata`.
    pub metadata: CheckpointMetadata,
}

/// Whether `path` is a Flink savepoint or checkpoint: a directory holding `_metadata`, or such a file.
pub fn is_flink_savepoint(path: &Path) -> bool {
    (path.is_dir() && path.join("_metadata").is_file())
        || (path.is_file() && path.file_name().is_some_and(|n| n == "_metadata"))
}

impl FlinkSavepoint {
    /// Opens a savepoint directory (or its `_metadata` file) and decodes `_metadata`.
    pub fn open(path: &Path) -> Result<Self, FlinkError> {
        let (dir, meta) = if path.is_dir() {
            (path.to_path_buf(), path.join("_metadata"))
        } else {
            (
                path.parent()
                    .map(Path::to_path_buf)
                    .unwrap_or_else(|| PathBuf::from(".")),
                path.to_path_buf(),
            )
        };
        let bytes = std::fs::read(&meta).map_err(|e| FlinkError::io(meta.display(), e))?;
        let metadata = parse_metadata(&bytes, "_metadata")?;
        Ok(FlinkSavepoint {
            dir,
            bytes,
            metadata,
        })
    }

    /// From `_metadata` bytes already read; relative handles resolve against `dir`.
    pub fn from_bytes(dir: &Path, bytes: &[u8]) -> Result<Self, FlinkError> {
        Ok(FlinkSavepoint {
            dir: dir.to_path_buf(),
            bytes: bytes.to_vec(),
            metadata: parse_metadata(bytes, "_metadata")?,
        })
    }

    /// The directory relative handles resolve against.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The bytes of operator `i` (of `metadata.operators`) as `_metadata` holds them.
    pub fn operator_bytes(&self, i: usize) -> Option<&[u8]> {
        let span = self.metadata.operator_spans.get(i)?;
        self.bytes.get(span.clone())
    }

    /// The operator with this uid, or with this 32-digit hex id, or whose id Flink derives from this uid.
    pub fn operator(&self, uid_or_id: &str) -> Result<&OperatorState, FlinkError> {
        let ops = &self.metadata.operators;
        if let Some(op) = ops.iter().find(|o| o.uid.as_deref() == Some(uid_or_id)) {
            return Ok(op);
        }
        if let Some(id) = OperatorId::from_hex(uid_or_id) {
            if let Some(op) = ops.iter().find(|o| o.id == id) {
                return Ok(op);
            }
        }
        let derived = operator_id_for_uid(uid_or_id);
        if let Some(op) = ops.iter().find(|o| o.id == derived) {
            return Ok(op);
        }
        let available = ops
            .iter()
            .map(|o| match &o.uid {
                Some(u) => format!("{u} / {}", o.id),
                None => format!("(no uid) / {}", o.id),
            })
            .collect::<Vec<_>>()
            .join(", ");
        Err(FlinkError::OperatorNotFound {
            wanted: uid_or_id.to_string(),
            available: if available.is_empty() {
                "none".into()
            } else {
                available
            },
        })
    }

    /// The operators with managed keyed state, in `_metadata` order.
    pub fn keyed_operators(&self) -> impl Iterator<Item = &OperatorState> + '_ {
        self.metadata
            .operators
            .iter()
            .filter(|o| o.subtasks.iter().any(|s| s.managed_keyed.is_some()))
    }
}
