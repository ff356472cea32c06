//! The byte-level folds the store hands to backends for reducing and aggregating states
//! ([`ValueMerge`], `design/merge-operands.md`).

use std::sync::Arc;

use crate::backend::ValueMerge;
use crate::serializer::{from_bytes, TypeSerializer};

/// Combines two values of a state, the older first.
pub(super) type Combine<T> = Arc<dyn Fn(T, T) -> T + Send + Sync>;

/// Folds serialized values of a state with `combine`: the reduce function of a reducing state, `merge` of
/// an aggregating state's function.
pub(super) struct FoldWith<S: TypeSerializer> {
    pub(super) serializer: Arc<S>,
    pub(super) combine: Combine<S::Value>,
    pub(super) associative: bool,
}

impl<S: TypeSerializer> ValueMerge for FoldWith<S> {
    fn fold(&self, base: Option<&[u8]>, operands: &[&[u8]]) -> Option<Vec<u8>> {
        let mut values = base.into_iter().chain(operands.iter().copied());
        let first = values.next()?;
        if base.is_none() && operands.len() == 1 {
            // One operand and nothing below it: the operand is the value.
            return Some(first.to_vec());
        }
        let mut acc = from_bytes(&*self.serializer, first).ok()?;
        for bytes in values {
            let v = from_bytes(&*self.serializer, bytes).ok()?;
            acc = (self.combine)(acc, v);
        }
        let mut out = Vec::with_capacity(first.len());
        self.serializer.serialize(&acc, &mut out).ok()?;
        Some(out)
    }

    fn associative(&self) -> bool {
        self.associative
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serializer::LongSerializer;

    fn bytes(v: i64) -> Vec<u8> {
        v.to_be_bytes().to_vec()
    }

    #[test]
    fn folds_in_order_onto_the_base_and_refuses_bytes_that_do_not_decode() {
        // Not associative: the order of the fold shows in the result.
        let f = FoldWith {
            serializer: Arc::new(LongSerializer),
            combine: Arc::new(|a: i64, b: i64| a * 10 + b),
            associative: false,
        };
        assert_eq!(
            f.fold(Some(&bytes(1)), &[&bytes(2), &bytes(3)]),
            Some(bytes(123))
        );
        assert_eq!(f.fold(None, &[&bytes(4), &bytes(5)]), Some(bytes(45)));
        assert_eq!(f.fold(None, &[&bytes(7)]), Some(bytes(7)));
        assert_eq!(f.fold(Some(&bytes(1)), &[b"abc"]), None);
        assert_eq!(f.fold(Some(&[1, 2]), &[&bytes(1)]), None);
        assert!(!f.associative());
    }
}
