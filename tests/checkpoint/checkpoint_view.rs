//! The engine's checkpoint view through the checkpointer (`design/checkpoint-view.md`): a checkpoint after a
//! compaction uploads its flush and references the files the compaction replaced; a materialization says
//! so in the summary; either way the checkpoint restores to the state of its moment.

use std::sync::Arc;

use crate::common::*;

use keyed_state::backend::lsm::LsmBackend;
use keyed_state::checkpoint::{restore_lsm_temp, CheckpointStorage};
use keyed_state::serializer::LongSerializer;
use keyed_state::state::KeyedStateStore;
use keyed_state_lsm::Options;

fn instance(storage: &Arc<CheckpointStorage>, view: bool) -> Inst {
    let cfg = KeyedStateStore::config_for(&LongSerializer, MAX_P, all());
    let b = LsmBackend::temp_with(
        cfg.clone(),
        Options {
            checkpoint_view: view,
            // The compaction below replaces every file: the view pins more than the version holds.
            checkpoint_view_max_pinned_ratio: 10.0,
            // In band only: the materializations of this test are the captures' own.
            checkpoint_view_background_l0_runs: usize::MAX,
            checkpoint_view_background_pinned_ratio: f64::INFINITY,
            auto_compaction: false,
            ..options()
        },
    )
    .unwrap();
    let engine = Some(b.engine());
    inst_on(Box::new(b), engine, storage, &cfg, 2)
}

/// Writes `keys` keys with `round` as the value, checkpoints as `id` and confirms.
fn round(
    a: &mut Inst,
    id: u64,
    keys: i64,
    round: i64,
) -> keyed_state::checkpoint::CheckpointSummary {
    for k in 0..keys {
        assert!(a.put(k, round));
    }
    let s = a.checkpoint(id);
    a.ck.notify_complete(id).unwrap();
    s
}

#[test]
fn with_the_view_a_checkpoint_after_a_compaction_uploads_its_flush_not_the_compaction() {
    for view in [false, true] {
        let storage = Arc::new(CheckpointStorage::in_memory().unwrap());
        let mut a = instance(&storage, view);
        let first = round(&mut a, 1, 3000, 1);
        assert_eq!(
            first.view_materialized, view,
            "the first capture takes the version"
        );
        if view {
            assert_eq!(first.bytes_materialization, first.bytes_new_files);
        }
        for k in 0..300 {
            assert!(a.put(k, 2));
        }
        let engine = a.engine.clone().unwrap();
        engine.flush().unwrap();
        engine.compact_all().unwrap();
        let second = round(&mut a, 2, 100, 3);
        assert!(!second.view_materialized);
        assert_eq!(second.bytes_materialization, 0);
        if view {
            // The flushes since the first checkpoint; its files are referenced.
            assert_eq!(second.files_reused, first.files_new, "{second:?}");
            assert!(
                second.bytes_new_files < first.bytes_new_files / 4,
                "{second:?}"
            );
        } else {
            // The compaction's output replaced every file of the first checkpoint.
            assert_eq!(second.files_reused, 0, "{second:?}");
            assert!(
                second.bytes_new_files > first.bytes_new_files / 2,
                "{second:?}"
            );
        }
        let (b, _) = restore_lsm_temp(
            &storage,
            2,
            KeyedStateStore::config_for(&LongSerializer, MAX_P, all()),
            options(),
        )
        .unwrap();
        let mut r = inst_on(
            Box::new(b),
            None,
            &storage,
            &KeyedStateStore::config_for(&LongSerializer, MAX_P, all()),
            2,
        );
        for k in [0, 99, 100, 299, 300, 2999] {
            let want = match k {
                0..100 => 3,
                100..300 => 2,
                _ => 1,
            };
            assert_eq!(r.get(k), Some(want), "view {view}, key {k}");
        }
        assert_eq!(r.store.num_entries().unwrap(), 3000);
    }
}
