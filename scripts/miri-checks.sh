#!/usr/bin/env bash
# Miri on the unit tests that cover the workspace's `unsafe` (UNSAFE.md names the tests of each file). Too
# slow for CI (about 11 minutes on 2 cores); scripts/long-checks.sh runs it. Prints each set's libtest output
# and one `campaign miri-NAME model=SB|TB tests=N ignored=I failures=F` line per set (a set that aborts, on
# undefined behaviour or an operation Miri does not support, counts one failure; so does a set whose count of
# passed tests is not the one it expects, e.g. after a test was renamed or removed).
#
#   scripts/miri-checks.sh [SET...]      (the sets below: keyed-state, lsm, memtable; default all)
#
# Needs the nightly toolchain with Miri and the standard library's source (`rustup +nightly component add
# miri rust-src`); exits 2 without them. `cargo miri setup` builds Miri's standard library first (once).
#
# Stacked Borrows (SB), with the flags of the engine's earlier runs. The memtable's tests run under Tree
# Borrows (TB): its point index pins crossbeam-epoch, which trips Stacked Borrows inside crossbeam-epoch
# (`design/lsm-engine.md`, "The skiplist"); `-Zmiri-ignore-leaks` because epoch-deferred frees never run at
# exit. Calls Miri cannot run (madvise, sched_setscheduler, mincore, file-backed maps) are left out under
# `cfg(miri)` or their tests are `#[cfg_attr(miri, ignore)]` (the test that calls mallinfo2 is `#[ignore]`d
# everywhere); anonymous maps run under Miri.
set -uo pipefail
cd "$(dirname "$0")/.."
cargo +nightly miri setup </dev/null >/dev/null || {
  echo "miri-checks.sh needs the nightly toolchain with miri and rust-src" >&2
  exit 2
}
# `-Zmiri-disable-isolation` lets the environment reach the tests: with `KEYED_STATE_ARENA_MAP=off` the large
# arrays and arena chunks would stay on the heap, and words.rs's and arena.rs's tests (which expect what
# `maps_on()` says) would pass without Miri checking a map.
unset KEYED_STATE_ARENA_MAP

SB="-Zmiri-permissive-provenance -Zmiri-disable-isolation"
TB="-Zmiri-tree-borrows -Zmiri-ignore-leaks $SB"
failed=0
sets=("$@")

# miri_set NAME FLAGS CRATE PASSES LIBTEST_ARGS...: runs the crate's library tests selected by LIBTEST_ARGS;
# the set fails unless exactly PASSES of them pass.
miri_set() {
  local name=$1 flags=$2 crate=$3 expected=$4
  shift 4
  if [[ ${#sets[@]} -gt 0 && " ${sets[*]} " != *" $name "* ]]; then
    return
  fi
  local out model=SB
  out="$(mktemp)"
  [[ $flags == *tree-borrows* ]] && model=TB
  echo "== miri $name: MIRIFLAGS=\"$flags\" cargo +nightly miri test -p $crate --lib -- $*"
  MIRIFLAGS="$flags" PROPTEST_CASES="${PROPTEST_CASES:-16}" \
    nice -n 19 cargo +nightly miri test -p "$crate" --lib -- "$@" 2>&1 | tee "$out"
  local rc=${PIPESTATUS[0]} summary passed ignored failures
  summary="$(grep '^test result:' "$out" | tail -n 1)"
  rm -f "$out"
  passed="$(sed -n 's/.* \([0-9]*\) passed.*/\1/p' <<<"$summary")"
  ignored="$(sed -n 's/.* \([0-9]*\) ignored.*/\1/p' <<<"$summary")"
  failures="$(sed -n 's/.* \([0-9]*\) failed.*/\1/p' <<<"$summary")"
  if [[ $rc -ne 0 && ${failures:-0} -eq 0 ]]; then
    failures=1 # aborted before its summary
  fi
  if [[ ${passed:-0} -ne $expected ]]; then
    echo "miri $name: ${passed:-0} tests passed, expected $expected" >&2
    [[ ${failures:-1} -eq 0 ]] && failures=1
  fi
  [[ ${failures:-1} -ne 0 ]] && failed=1
  echo "campaign miri-$name model=$model tests=${passed:-0} ignored=${ignored:-0} failures=${failures:-1}"
}

# keyed-state: `SmallBytes`' shared buffers (heap/bytes.rs), the RMW cache's slot table on mapped buckets
# (lsm_cache/buckets.rs, storage.rs) and the cache's own tests. The hand-off tests open their engine only for
# the write-back at their end, left out under Miri; the three that need an engine throughout are ignored
# under Miri (its background threads' scheduling calls and its SST file maps: Miri runs neither).
miri_set keyed-state "$SB" keyed-state 17 \
  backend::heap::bytes:: backend::lsm_cache::buckets:: backend::lsm_cache::slot_table:: \
  backend::lsm_cache::tests:: backend::lsm_cache::growth::

# keyed-state-lsm: arrays and arena chunks in maps (words.rs, arena.rs), the skiplist, the memtable's entries
# (arena views only: no point index, so Stacked Borrows); sst/backing.rs's test is ignored under Miri
# (mincore, posix_fadvise, statfs).
miri_set lsm "$SB" keyed-state-lsm 13 \
  words::tests arena::tests skiplist::tests memtable::entry::tests sst::backing::

# keyed-state-lsm: the memtable's version chains (published while two readers run, too), cursor, point index
# and key filter, under Tree Borrows, with fewer keys under Miri where the tests are large. Not in the set:
# the tests that grow the point index (too slow under Miri).
miri_set memtable "$TB" keyed-state-lsm 11 --exact \
  memtable::tests::concurrent_reader_sees_a_sorted_consistent_view_while_the_writer_pushes \
  memtable::tests::lookups_and_cursor_mix_inline_and_heap_entries \
  memtable::key_filter::tests::key_filter_keeps_every_inserted_key_and_rules_out_most_others \
  memtable::key_filter::tests::new_keys_skip_the_index_probe_and_are_still_published \
  memtable::versions::tests::versions_newest_first_and_snapshot_bounded \
  memtable::versions::tests::an_out_of_order_version_of_a_key_is_refused \
  memtable::cursor::tests::cursor_keeps_its_table_alive_and_sees_later_inserts_ahead \
  memtable::tests::versions_of_one_key_come_newest_first_in_cursor_order \
  memtable::tests::read_at_older_snapshot_skips_newer_chain_versions \
  memtable::indexing::tests::key_whose_probe_window_is_full_is_still_found_via_the_skiplist \
  memtable::indexing::tests::dropping_a_memtable_frees_its_index

exit "$failed"
