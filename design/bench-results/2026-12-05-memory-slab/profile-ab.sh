#!/usr/bin/env bash
# The profile run of ../2026-12-05-memory-fill/ (`shared` alone, the same sizes, KS_PROFILE_ALLOC=1: live heap
# bytes at each phase's peak RssAnon), with the slab and with KEYED_STATE_BLOCK_SLAB=off, at the same time.
# Usage: profile-ab.sh MANY_OPERATORS_BENCH_BINARY OUT_PREFIX
set -euo pipefail
bin="$1"; out="$2"
run() {
  echo "load average at start: $(cat /proc/loadavg)" >"$out-slab-$1.txt"
  env KEYED_STATE_BLOCK_SLAB="$1" KS_PROFILE_ALLOC=1 KS_MO_PARTS=2 KS_MO_TOTAL_MB=1024 KS_MO_BUDGET_MB=128 \
    KS_MO_MIX_KEYS=200000 KS_MO_VALUE_POOL=16 KS_MO_VARIANTS=shared KS_MO_VARIANT_ROUNDS=1 \
    nice -n 19 "$bin" --bench >>"$out-slab-$1.txt" 2>"$out-slab-$1.err"
  echo "load average at end: $(cat /proc/loadavg)" >>"$out-slab-$1.txt"
}
run on &
run off &
wait
