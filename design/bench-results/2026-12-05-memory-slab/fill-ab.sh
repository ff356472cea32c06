#!/usr/bin/env bash
# The memory-fill command of ../2026-12-05-memory-fill/ (1 GiB of compressible state on a 128 MiB budget,
# `shared` and `rocksdb-flink` in one invocation, two rounds, the order reversed in the second), run twice at
# the same time from one bench binary: with the block cache's slab (the default) and with
# KEYED_STATE_BLOCK_SLAB=off (blocks on the heap), so that both see the same machine load.
# Usage: fill-ab.sh MANY_OPERATORS_BENCH_BINARY OUT_PREFIX [extra VAR=value ...]
set -euo pipefail
bin="$1"; out="$2"; shift 2
run() { # $1 = slab on|off, then the extra variables
  local slab="$1"; shift
  echo "load average at start: $(cat /proc/loadavg)" >"$out-slab-$slab.txt"
  env KEYED_STATE_BLOCK_SLAB="$slab" KS_MO_PARTS=2 KS_MO_TOTAL_MB=1024 KS_MO_BUDGET_MB=128 KS_MO_MIX_KEYS=200000 \
    KS_MO_VALUE_POOL=16 KS_MO_VARIANTS=shared,rocksdb-flink KS_MO_VARIANT_ROUNDS=2 KS_MO_TRACE=1 "$@" \
    nice -n 19 "$bin" --bench >>"$out-slab-$slab.txt" 2>"$out-slab-$slab.err"
  echo "load average at end: $(cat /proc/loadavg)" >>"$out-slab-$slab.txt"
}
run on "$@" &
run off "$@" &
wait
