//! The LSM backend's merge operator: list appends for list states (Flink's `stringappendtest`, joining with
//! `0x2C`) and the folds of reducing and aggregating states whose adds are merge operands
//! (`design/merge-operands.md`). The engine key's two-byte state prefix picks the state.
//!
//! A reducing or aggregating state whose fold is not known yet (restored, its descriptor not registered
//! again) keeps its operands as written: flushes and compactions leave them ([`MergeOperator::can_merge`]),
//! and a read of them fails with the engine's `MergeFailed` error instead of returning a wrong value.

use std::sync::Arc;

use parking_lot::RwLock;

use super::value_merge::ValueMerge;
use super::StateId;
use crate::meta::StateKind;
use keyed_state_lsm::{ListAppendOperator, MergeOperator};

/// What the operands of one state are.
#[derive(Clone, Default)]
enum Slot {
    /// List elements (and any state the backend has not mapped: only lists write operands then).
    #[default]
    List,
    /// Operands of a reducing or aggregating state whose fold is not known yet.
    FoldUnknown,
    /// Operands folded by the state's function.
    Fold(Arc<dyn ValueMerge>),
}

/// The operand kind of every state of one backend, shared with the engine's merge operator.
#[derive(Default)]
pub(crate) struct ValueMerges {
    by_state: RwLock<Vec<Slot>>,
}

impl ValueMerges {
    /// Maps `state` of `kind`: reducing and aggregating states fold (once their fold is known), the others
    /// append. A fold already installed stays.
    pub(crate) fn register(&self, state: StateId, kind: StateKind) {
        let mut v = self.by_state.write();
        if v.len() <= state {
            v.resize(state + 1, Slot::List);
        }
        let folds = matches!(kind, StateKind::Reducing | StateKind::Aggregating);
        match (&v[state], folds) {
            (Slot::Fold(_), true) => {}
            (_, true) => v[state] = Slot::FoldUnknown,
            (_, false) => v[state] = Slot::List,
        }
    }

    /// Installs the fold of reducing or aggregating `state`.
    pub(crate) fn set_fold(&self, state: StateId, merge: Arc<dyn ValueMerge>) {
        let mut v = self.by_state.write();
        if v.len() <= state {
            v.resize(state + 1, Slot::List);
        }
        v[state] = Slot::Fold(merge);
    }

    /// The fold of `state`, if it has one.
    pub(crate) fn fold_of(&self, state: StateId) -> Option<Arc<dyn ValueMerge>> {
        match self.by_state.read().get(state) {
            Some(Slot::Fold(f)) => Some(Arc::clone(f)),
            _ => None,
        }
    }

    fn slot(&self, key: &[u8]) -> Slot {
        let (Some(&a), Some(&b)) = (key.first(), key.get(1)) else {
            return Slot::List;
        };
        let state = usize::from(u16::from_be_bytes([a, b]));
        self.by_state.read().get(state).cloned().unwrap_or_default()
    }
}

/// The merge operator the LSM backend installs in its engine.
pub(crate) struct StateMergeOperator(pub(crate) Arc<ValueMerges>);

impl MergeOperator for StateMergeOperator {
    fn name(&self) -> &str {
        "keyed-state.state-merge"
    }

    fn full_merge(
        &self,
        key: &[u8],
        existing: Option<&[u8]>,
        operands: &[&[u8]],
    ) -> Option<Vec<u8>> {
        match self.0.slot(key) {
            Slot::List => ListAppendOperator.full_merge(key, existing, operands),
            Slot::Fold(f) => f.fold(existing, operands),
            Slot::FoldUnknown => None,
        }
    }

    fn partial_merge(&self, key: &[u8], operands: &[&[u8]]) -> Option<Vec<u8>> {
        match self.0.slot(key) {
            Slot::List => ListAppendOperator.partial_merge(key, operands),
            Slot::Fold(f) if f.associative() => f.fold(None, operands),
            Slot::Fold(_) | Slot::FoldUnknown => None,
        }
    }

    fn can_merge(&self, key: &[u8]) -> bool {
        !matches!(self.0.slot(key), Slot::FoldUnknown)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sums of decimal numbers, optionally declared associative.
    struct Sum(bool);

    impl ValueMerge for Sum {
        fn fold(&self, base: Option<&[u8]>, operands: &[&[u8]]) -> Option<Vec<u8>> {
            let parse = |b: &[u8]| std::str::from_utf8(b).ok()?.parse::<i64>().ok();
            let mut acc = match base {
                Some(b) => parse(b)?,
                None => 0,
            };
            for o in operands {
                acc += parse(o)?;
            }
            Some(acc.to_string().into_bytes())
        }
        fn associative(&self) -> bool {
            self.0
        }
    }

    fn key(state: u16) -> Vec<u8> {
        let mut k = state.to_be_bytes().to_vec();
        k.extend_from_slice(b"key");
        k
    }

    #[test]
    fn each_state_merges_by_its_kind() {
        let m = Arc::new(ValueMerges::default());
        m.register(0, StateKind::List);
        m.register(1, StateKind::Reducing);
        m.register(2, StateKind::Aggregating);
        m.set_fold(2, Arc::new(Sum(true)));
        let op = StateMergeOperator(Arc::clone(&m));
        assert_eq!(op.full_merge(&key(0), Some(b"1"), &[b"2"]).unwrap(), b"1,2");
        // A reducing state whose fold is not known: nothing is merged, reads fail.
        assert!(!op.can_merge(&key(1)));
        assert_eq!(op.full_merge(&key(1), Some(b"1"), &[b"2"]), None);
        assert_eq!(op.partial_merge(&key(1), &[b"1", b"2"]), None);
        assert!(op.can_merge(&key(2)));
        assert_eq!(
            op.full_merge(&key(2), Some(b"1"), &[b"2", b"3"]).unwrap(),
            b"6"
        );
        assert_eq!(op.partial_merge(&key(2), &[b"2", b"3"]).unwrap(), b"5");
        // Unmapped states and short keys append, as before.
        assert_eq!(op.full_merge(&key(9), None, &[b"a", b"b"]).unwrap(), b"a,b");
        assert_eq!(op.full_merge(b"x", None, &[b"a", b"b"]).unwrap(), b"a,b");
        // Registering the kind again keeps the fold; a fold that is not associative is never partial.
        m.register(2, StateKind::Aggregating);
        assert!(op.can_merge(&key(2)));
        m.set_fold(1, Arc::new(Sum(false)));
        assert_eq!(op.partial_merge(&key(1), &[b"1", b"2"]), None);
        assert_eq!(op.full_merge(&key(1), None, &[b"1", b"2"]).unwrap(), b"3");
    }
}
