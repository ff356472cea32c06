#!/usr/bin/env bash
# Miri on the unit tests that cover the workspace's `unsafe` (UNSAFE.md names the tests of each file). Too
# slow for CI (about 9 minutes on 2 cores); scripts/long-checks.sh runs it. Prints each set's libtest output
# and one `campaign miri-NAME model=SB|TB tests=N ignored=I failures=F` line per set (a set that aborts, on
# undefined behaviour or an operation Miri does not support, counts one failure).
#
#   scripts/miri-checks.sh [SET...]      (the sets below: keyed-state, lsm, memtable; default all)
#
# Needs the nightly toolchain with Miri (`rustup +nightly component add miri`).
#
# Stacked Borrows (SB), with the flags of the engine's earlier runs. The memtable's tests run under Tree
# Borrows (TB): its point index pins crossbeam-epoch, which trips Stacked Borrows inside crossbeam-epoch
# (`design/lsm-engine.md`, "The skiplist"); `-Zmiri-ignore-leaks` because epoch-deferred frees never run at
# exit. Calls Miri cannot run (madvise, mincore, mallinfo2, file-backed maps) are left out under `cfg(miri)`
# or their tests are `#[cfg_attr(miri, ignore)]`; anonymous maps run under Miri.
set -uo pipefail
cd "$(dirname "$0")/.."

SB="-Zmiri-permissive-provenance -Zmiri-disable-isolation"
TB="-Zmiri-tree-borrows -Zmiri-ignore-leaks $SB"
failed=0
sets=("$@")

# miri_set NAME FLAGS CRATE LIBTEST_ARGS...: runs the crate's library tests selected by LIBTEST_ARGS.
miri_set() {
  local name=$1 flags=$2 crate=$3
  shift 3
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
  [[ ${failures:-1} -ne 0 ]] && failed=1
  echo "campaign miri-$name model=$model tests=${passed:-0} ignored=${ignored:-0} failures=${failures:-1}"
}

# keyed-state: `SmallBytes`' shared buffers (heap/bytes.rs), the RMW cache's slot table on mapped buckets
# (lsm_cache/buckets.rs, storage.rs) and the cache's own tests; those that open an engine are ignored under
# Miri (its background threads' scheduling calls and its SST file maps: Miri runs neither).
miri_set keyed-state "$SB" keyed-state \
  backend::heap::bytes:: backend::lsm_cache::buckets:: backend::lsm_cache::slot_table:: \
  backend::lsm_cache::tests:: backend::lsm_cache::growth::

# keyed-state-lsm: arrays and arena chunks in maps (words.rs, arena.rs), the skiplist; sst/backing.rs's test
# is ignored under Miri (mincore, posix_fadvise, statfs).
miri_set lsm "$SB" keyed-state-lsm words::tests arena::tests skiplist::tests sst::backing::

# keyed-state-lsm: the memtable's entries, version chains, cursor and point index, under Tree Borrows. Not in
# the set: the tests that grow the point index (too slow under Miri), the key filter's two tests (not done
# in 3 minutes each), `lookups_and_cursor_mix_inline_and_heap_entries` and
# `concurrent_reader_sees_a_sorted_consistent_view_while_the_writer_pushes` (not done in 4 minutes each).
miri_set memtable "$TB" keyed-state-lsm --exact \
  memtable::entry::tests::entry_stays_small_and_long_entries_go_to_the_arena \
  memtable::entry::tests::entry_order_against_a_user_key_is_bytewise \
  memtable::entry::tests::word_comparison_agrees_with_bytewise \
  memtable::versions::tests::versions_newest_first_and_snapshot_bounded \
  memtable::versions::tests::an_out_of_order_version_of_a_key_is_refused \
  memtable::cursor::tests::cursor_keeps_its_table_alive_and_sees_later_inserts_ahead \
  memtable::tests::versions_of_one_key_come_newest_first_in_cursor_order \
  memtable::tests::read_at_older_snapshot_skips_newer_chain_versions \
  memtable::indexing::tests::key_whose_probe_window_is_full_is_still_found_via_the_skiplist \
  memtable::indexing::tests::dropping_a_memtable_frees_its_index

exit "$failed"
