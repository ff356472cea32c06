//! [`ValueMerge`]: how the values of a reducing or aggregating state fold, at the byte level, for backends
//! that store an add as a merge operand instead of reading, folding and writing the value
//! (`design/merge-operands.md`).

/// Folds serialized values of one reducing or aggregating state: the typed layer builds one from the
/// state's serializer and its reduce function (or its aggregate function's `merge`), and hands it to the
/// backend with [`StateBackend::set_value_merge`](super::StateBackend::set_value_merge).
pub trait ValueMerge: Send + Sync {
    /// Folds `operands` (oldest first) onto `base` in order: `f(f(base, o1), o2)...`, or without a base
    /// `f(f(o1, o2), o3)...`. `None`: a value or an operand does not decode with the state's serializer.
    fn fold(&self, base: Option<&[u8]>, operands: &[&[u8]]) -> Option<Vec<u8>>;

    /// Whether adjacent operands may be folded into one without the value below them: true only when
    /// the function is associative (the state's descriptor says so). Otherwise operands are folded only
    /// onto the value below them (reads, and compactions that reach that value or the last level).
    fn associative(&self) -> bool;
}
