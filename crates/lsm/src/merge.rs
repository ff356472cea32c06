//! Pluggable merge operators, applied on read and during compaction.

use std::sync::Arc;

use crate::LsmError;

/// Combines merge operands with an optional existing value.
///
/// Operands are passed oldest first. Returning `None` reports a failed merge, surfaced as
/// [`LsmError::MergeFailed`](super::LsmError::MergeFailed).
pub trait MergeOperator: Send + Sync {
    /// A stable name, recorded nowhere yet but useful in diagnostics.
    fn name(&self) -> &str;
    /// Merges `operands` (oldest first) onto `existing` into a full value.
    fn full_merge(
        &self,
        key: &[u8],
        existing: Option<&[u8]>,
        operands: &[&[u8]],
    ) -> Option<Vec<u8>>;
    /// Combines adjacent operands (oldest first) into one operand, if the operator is associative.
    fn partial_merge(&self, key: &[u8], operands: &[&[u8]]) -> Option<Vec<u8>>;
    /// Whether flushes and compactions may merge the operands of `key` now. `false` keeps them (and the
    /// value below them) as written, for an operator that cannot merge this key yet (its function is not
    /// known yet); reads still call [`full_merge`](Self::full_merge). Default: always.
    fn can_merge(&self, key: &[u8]) -> bool {
        let _ = key;
        true
    }
}

/// The list-append operator Flink uses for list state (RocksDB's `stringappendtest`): joins the existing
/// value and the operands with the delimiter byte `,` (0x2C); no leading delimiter without an existing value.
#[derive(Debug, Clone, Copy, Default)]
pub struct ListAppendOperator;

/// The list delimiter byte.
const LIST_DELIMITER: u8 = 0x2C;

fn join(existing: Option<&[u8]>, operands: &[&[u8]]) -> Vec<u8> {
    let cap =
        existing.map_or(0, |e| e.len() + 1) + operands.iter().map(|o| o.len() + 1).sum::<usize>();
    let mut out = Vec::with_capacity(cap);
    let mut first = true;
    if let Some(e) = existing {
        out.extend_from_slice(e);
        first = false;
    }
    for op in operands {
        if !first {
            out.push(LIST_DELIMITER);
        }
        out.extend_from_slice(op);
        first = false;
    }
    out
}

impl MergeOperator for ListAppendOperator {
    fn name(&self) -> &str {
        "stringappendtest"
    }
    fn full_merge(
        &self,
        _key: &[u8],
        existing: Option<&[u8]>,
        operands: &[&[u8]],
    ) -> Option<Vec<u8>> {
        Some(join(existing, operands))
    }
    fn partial_merge(&self, _key: &[u8], operands: &[&[u8]]) -> Option<Vec<u8>> {
        Some(join(None, operands))
    }
}

/// Full-merges operands (collected newest first) onto `base`.
pub(crate) fn full_merge(
    op: Option<&Arc<dyn MergeOperator>>,
    key: &[u8],
    base: Option<&[u8]>,
    operands_newest_first: &[impl AsRef<[u8]>],
) -> Result<Vec<u8>, LsmError> {
    let op = op.ok_or_else(|| LsmError::NoMergeOperator { key: key.to_vec() })?;
    let ops: Vec<&[u8]> = operands_newest_first
        .iter()
        .rev()
        .map(|o| o.as_ref())
        .collect();
    op.full_merge(key, base, &ops)
        .ok_or_else(|| LsmError::MergeFailed {
            operator: op.name().to_string(),
            key: key.to_vec(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_append_matches_stringappendtest() {
        let op = ListAppendOperator;
        assert_eq!(op.full_merge(b"k", None, &[b"a", b"b"]).unwrap(), b"a,b");
        assert_eq!(op.full_merge(b"k", Some(b"x"), &[b"a"]).unwrap(), b"x,a");
        assert_eq!(op.full_merge(b"k", Some(b""), &[b"a"]).unwrap(), b",a");
        assert_eq!(op.partial_merge(b"k", &[b"a", b"b"]).unwrap(), b"a,b");
    }
}
