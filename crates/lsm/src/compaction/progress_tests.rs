//! Automatic compaction always finishes: for random trigger settings, level shapes and write patterns,
//! `Db::wait_for_background_work` returns, leaves no flush and no compaction pending (the picker has no
//! plan), and the data reads as a `BTreeMap` model says.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;

use crate::db::Db;
use crate::options::{CompactionPriority, Options, ReadOptions};
use crate::sst::{Compression, SstOptions};

/// How one batch of writes chooses its keys (4-byte keys after a 2-byte "state" prefix).
#[derive(Debug, Clone)]
enum Pattern {
    /// Keys after every key written before (in the last "state"): each flush a run of its own keys and
    /// sequence numbers, as an append-only state (timers, a log) writes them.
    Ascending,
    /// Keys anywhere in a key space of this size.
    Random(u32),
    /// Overwrites of the first this-many keys.
    Hot(u32),
}

#[derive(Debug, Clone)]
struct Batch {
    pattern: Pattern,
    /// How many "states" (2-byte key prefixes) the batch spreads over.
    states: u16,
    puts: u32,
    /// Every this-many puts is a delete of the key instead (0: none).
    delete_every: u32,
    /// Whether the batch ends with an explicit flush (one small run, as a checkpoint makes).
    flush: bool,
}

fn batch() -> impl Strategy<Value = Batch> {
    (
        prop_oneof![
            3 => Just(Pattern::Ascending),
            1 => (10u32..5000).prop_map(Pattern::Random),
            1 => (1u32..200).prop_map(Pattern::Hot),
        ],
        1u16..30,
        1u32..1500,
        prop_oneof![Just(0u32), 2u32..20],
        any::<bool>(),
    )
        .prop_map(|(pattern, states, puts, delete_every, flush)| Batch {
            pattern,
            states,
            puts,
            delete_every,
            flush,
        })
}

/// (l0_compaction_trigger, l0_stop_writes_trigger): the defaults, the tests' 2/8, and random ones.
fn triggers() -> impl Strategy<Value = (usize, usize)> {
    let d = Options::default();
    prop_oneof![
        Just((d.l0_compaction_trigger, d.l0_stop_writes_trigger)),
        Just((2, 8)),
        (1usize..6, 0usize..24).prop_map(|(t, extra)| (t, t + extra)),
    ]
}

fn options() -> impl Strategy<Value = Options> {
    (
        triggers(),
        prop_oneof![
            Just(Options::default().l0_base_ratio),
            Just(0.0),
            Just(0.05),
            Just(1.0),
            Just(4.0)
        ],
        any::<bool>(),
        3usize..8,
        prop_oneof![Just(16u64 << 10), Just(64 << 10), Just(256 << 10)],
        prop_oneof![Just(2u64), Just(4), Just(10)],
        // The target file size against the memtable size: a half, the same (a run cut into files along
        // its own flushes' sequence numbers), 4 times.
        prop_oneof![Just(1usize), Just(2), Just(2), Just(8)],
        prop_oneof![Just(8usize << 10), Just(16 << 10), Just(32 << 10)],
        prop_oneof![Just(0usize), Just(2)],
        any::<bool>(),
    )
        .prop_map(
            |(
                (trigger, stop),
                ratio,
                dynamic,
                num_levels,
                base,
                mult,
                file_halves,
                mem,
                prefix,
                round_robin,
            )| Options {
                l0_compaction_trigger: trigger,
                l0_stop_writes_trigger: stop,
                l0_base_ratio: ratio,
                dynamic_level_bytes: dynamic,
                num_levels,
                level_base_size: base,
                level_multiplier: mult,
                target_file_size: (mem * file_halves / 2) as u64,
                memtable_size: mem,
                partition_prefix_len: prefix,
                compaction_priority: if round_robin {
                    CompactionPriority::RoundRobin
                } else {
                    CompactionPriority::MinOverlappingRatio
                },
                sst: SstOptions {
                    block_size: 1024,
                    compression: Compression::None,
                    ..SstOptions::default()
                },
                block_cache_size: 1 << 20,
                ..Options::default()
            },
        )
}

fn key(state: u16, k: u32) -> Vec<u8> {
    let mut v = state.to_be_bytes().to_vec();
    v.extend_from_slice(&k.to_be_bytes());
    v
}

/// Writes the batches into `db` and `model`.
fn write(db: &Db, model: &mut BTreeMap<Vec<u8>, Vec<u8>>, batches: &[Batch], rng: &mut u64) {
    let mut next_ascending = 0u32;
    let mut rand = || {
        // xorshift64: deterministic per case.
        *rng ^= *rng << 13;
        *rng ^= *rng >> 7;
        *rng ^= *rng << 17;
        *rng
    };
    for (b, batch) in batches.iter().enumerate() {
        for i in 0..batch.puts {
            let state = (rand() % u64::from(batch.states)) as u16;
            let k = match batch.pattern {
                Pattern::Ascending => {
                    next_ascending += 1;
                    key(u16::MAX, next_ascending)
                }
                Pattern::Random(space) => key(state, (rand() % u64::from(space)) as u32),
                Pattern::Hot(n) => key(state, (rand() % u64::from(n)) as u32),
            };
            if batch.delete_every > 0 && i % batch.delete_every == 0 {
                db.delete(&k).unwrap();
                model.remove(&k);
            } else {
                let v = format!("{b}-{i}-{}", "v".repeat(60)).into_bytes();
                db.put(&k, &v).unwrap();
                model.insert(k, v);
            }
        }
        if batch.flush {
            db.flush().unwrap();
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn waiting_for_background_work_returns_with_no_compaction_pending(
        opts in options(),
        batches in proptest::collection::vec(batch(), 1..12),
        seed in 1u64..u64::MAX,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(Db::open(dir.path(), opts.clone()).unwrap());
        let mut model = BTreeMap::new();
        let mut rng = seed;
        write(&db, &mut model, &batches, &mut rng);
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = Arc::clone(&db);
        std::thread::spawn(move || {
            let _ = tx.send(waiter.wait_for_background_work());
        });
        let waited = rx.recv_timeout(Duration::from_secs(60));
        prop_assert!(waited.is_ok(), "wait_for_background_work did not return: {:?}", db.stats());
        prop_assert!(waited.unwrap().is_ok());
        {
            let st = db.inner().state.lock();
            prop_assert!(st.imm.is_empty());
            prop_assert!(
                !super::needs_compaction(&st.version, &opts),
                "levels {:?}, runs {}",
                st.version.level_bytes(),
                st.version.l0_runs
            );
            let mut pointers = vec![Vec::new(); opts.num_levels];
            prop_assert!(super::pick::pick(&st.version, &opts, &mut pointers).is_none());
            // Held back or not, L0 never reaches the stop trigger once the work is done.
            prop_assert!(st.version.l0_runs < opts.l0_stop_writes_trigger.max(opts.l0_compaction_trigger));
        }
        let stats = db.stats();
        prop_assert!(!stats.compaction_pending);
        let mut it = db.iter(ReadOptions::default());
        it.seek_to_first();
        let mut got = Vec::new();
        while it.valid() {
            got.push((it.key().to_vec(), it.value().to_vec()));
            it.next();
        }
        prop_assert!(it.status().is_ok());
        let want: Vec<(Vec<u8>, Vec<u8>)> = model.into_iter().collect();
        prop_assert_eq!(got, want);
    }
}
