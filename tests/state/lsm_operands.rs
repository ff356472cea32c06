//! Merge operands of reducing and aggregating state on the LSM backend (`design/merge-operands.md`): where
//! flushes and compactions fold them, and what happens to operands whose fold is not known yet.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use keyed_state::backend::lsm::LsmBackend;
use keyed_state::keygroup::KeyGroupRange;
use keyed_state::serializer::LongSerializer;
use keyed_state::state::{KeyedStateStore, OperandFolding, ReducingStateDescriptor};

/// `a * 3 + b` (not associative), counting its calls.
fn counted(calls: &Arc<AtomicUsize>) -> impl Fn(&i64, &i64) -> i64 + Send + Sync + 'static {
    let calls = Arc::clone(calls);
    move |a, b| {
        calls.fetch_add(1, Ordering::Relaxed);
        a.wrapping_mul(3).wrapping_add(*b)
    }
}

fn sum(calls: &Arc<AtomicUsize>) -> impl Fn(&i64, &i64) -> i64 + Send + Sync + 'static {
    let calls = Arc::clone(calls);
    move |a, b| {
        calls.fetch_add(1, Ordering::Relaxed);
        a + b
    }
}

/// An LSM backend that compacts only when told to, so that the tests see where operands are folded.
fn backend() -> LsmBackend {
    let cfg = KeyedStateStore::config_for(&LongSerializer, 128, KeyGroupRange::all(128));
    let options = keyed_state_lsm::Options {
        auto_compaction: false,
        ..LsmBackend::small_options()
    };
    // Without the read-modify-write cache: the tests watch operands in the engine (the cache folds an add
    // into a value it holds).
    LsmBackend::temp_with(cfg, options)
        .unwrap()
        .with_rmw_cache(0)
        .unwrap()
}

/// Reads every key and returns how many times the reduce function ran.
fn reads_cost(
    s: &mut KeyedStateStore<LongSerializer>,
    r: &keyed_state::state::ReducingState<LongSerializer>,
    calls: &AtomicUsize,
    keys: i64,
    expect: &dyn Fn(i64) -> i64,
) -> usize {
    let before = calls.load(Ordering::Relaxed);
    for k in 0..keys {
        s.set_current_key(&k).unwrap();
        assert_eq!(
            s.reducing(r).unwrap().get().unwrap(),
            Some(expect(k)),
            "key {k}"
        );
    }
    calls.load(Ordering::Relaxed) - before
}

#[test]
fn in_order_operands_are_folded_on_read_until_a_compaction_reaches_the_last_level() {
    let calls = Arc::new(AtomicUsize::new(0));
    let b = backend();
    let engine = b.engine();
    let mut s = KeyedStateStore::new(Box::new(b), LongSerializer).unwrap();
    let r = s
        .register_reducing(
            ReducingStateDescriptor::new("r", LongSerializer, counted(&calls))
                .with_merge_operands(OperandFolding::InOrder),
        )
        .unwrap();
    let (keys, rounds) = (50i64, 8i64);
    for round in 0..rounds {
        for k in 0..keys {
            s.set_current_key(&k).unwrap();
            s.reducing(&r).unwrap().add(&(k + round)).unwrap();
        }
        engine.flush().unwrap();
    }
    assert_eq!(
        calls.load(Ordering::Relaxed),
        0,
        "neither adds nor flushes fold"
    );
    let expect = |k: i64| (1..rounds).fold(k, |a, round| a * 3 + k + round);
    // Not associative: flushes keep every operand, a read folds all of them.
    let n = reads_cost(&mut s, &r, &calls, keys, &expect);
    assert_eq!(n, (keys * (rounds - 1)) as usize);
    engine.compact_all().unwrap();
    assert_eq!(reads_cost(&mut s, &r, &calls, keys, &expect), 0);
}

#[test]
fn associative_operands_are_folded_by_flushes_and_compactions() {
    let calls = Arc::new(AtomicUsize::new(0));
    let b = backend();
    let engine = b.engine();
    let mut s = KeyedStateStore::new(Box::new(b), LongSerializer).unwrap();
    let r = s
        .register_reducing(
            ReducingStateDescriptor::new("r", LongSerializer, sum(&calls))
                .with_merge_operands(OperandFolding::Associative),
        )
        .unwrap();
    let (keys, rounds, per_round) = (50i64, 4i64, 5i64);
    for _ in 0..rounds {
        for k in 0..keys {
            s.set_current_key(&k).unwrap();
            for _ in 0..per_round {
                s.reducing(&r).unwrap().add(&k).unwrap();
            }
        }
        engine.flush().unwrap();
    }
    let expect = |k: i64| k * rounds * per_round;
    // Each flush wrote one operand per key: a read folds one per flush.
    assert_eq!(
        reads_cost(&mut s, &r, &calls, keys, &expect),
        (keys * (rounds - 1)) as usize
    );
    engine.compact_all().unwrap();
    assert_eq!(reads_cost(&mut s, &r, &calls, keys, &expect), 0);
}

#[test]
fn operands_whose_fold_is_not_known_stay_through_compactions_and_fold_once_registered() {
    let calls = Arc::new(AtomicUsize::new(0));
    let dir = tempfile::tempdir().unwrap();
    let ck = dir.path().join("ck");
    let b = backend();
    let engine = b.engine();
    // Operands written through a store, then a checkpoint of the engine.
    let mut s = KeyedStateStore::new(Box::new(b), LongSerializer).unwrap();
    let desc = || {
        ReducingStateDescriptor::new("r", LongSerializer, counted(&calls))
            .with_merge_operands(OperandFolding::InOrder)
    };
    let r = s.register_reducing(desc()).unwrap();
    for round in 0..5i64 {
        for k in 0..40i64 {
            s.set_current_key(&k).unwrap();
            s.reducing(&r).unwrap().add(&(k - round)).unwrap();
        }
        engine.flush().unwrap();
    }
    let states = s.states().to_vec();
    engine.checkpoint(&ck).unwrap();
    drop(s);
    let cfg = KeyedStateStore::config_for(&LongSerializer, 128, KeyGroupRange::all(128));
    let opened =
        LsmBackend::open_checkpoint(&ck, cfg, states, LsmBackend::small_options()).unwrap();
    // No fold is known: a compaction down to the last level keeps every operand.
    opened.db().compact_all().unwrap();
    let mut t = KeyedStateStore::new(Box::new(opened), LongSerializer).unwrap();
    // Nor can a savepoint be written: an error, never a wrong value.
    let snap = t.snapshot().unwrap();
    let mut bytes = Vec::new();
    assert!(keyed_state::savepoint::encode(&*snap, &Default::default(), &mut bytes).is_err());
    drop(snap);
    let r = t.register_reducing(desc()).unwrap();
    let expect = |k: i64| (1..5).fold(k, |a, round| a * 3 + k - round);
    let before = calls.load(Ordering::Relaxed);
    for k in 0..40i64 {
        t.set_current_key(&k).unwrap();
        assert_eq!(t.reducing(&r).unwrap().get().unwrap(), Some(expect(k)));
    }
    assert!(
        calls.load(Ordering::Relaxed) > before,
        "the operands were still there"
    );
}
