#!/usr/bin/env bash
# profile-ab.sh's run (`shared` alone, KS_PROFILE_ALLOC=1, the fill sizes), slab on, with memtable arena chunks
# in maps of their own (the branch's experiment) and with KEYED_STATE_ARENA_MAP=off (on the heap), at once.
# Usage: profile-arena-ab.sh MANY_OPERATORS_BENCH_BINARY OUT_PREFIX
set -euo pipefail
bin="$1"; out="$2"
run() {
  echo "load average at start: $(cat /proc/loadavg)" >"$out-arena-map-$1.txt"
  env KEYED_STATE_BLOCK_SLAB=on KEYED_STATE_ARENA_MAP="$1" KS_PROFILE_ALLOC=1 KS_MO_PARTS=2 KS_MO_TOTAL_MB=1024 KS_MO_BUDGET_MB=128 \
    KS_MO_MIX_KEYS=200000 KS_MO_VALUE_POOL=16 KS_MO_VARIANTS=shared KS_MO_VARIANT_ROUNDS=1 \
    nice -n 19 "$bin" --bench >>"$out-arena-map-$1.txt" 2>"$out-arena-map-$1.err"
  echo "load average at end: $(cat /proc/loadavg)" >>"$out-arena-map-$1.txt"
}
run on &
run off &
wait
