#!/usr/bin/env bash
# Alternated rounds of `many_operators` part 2 (one child per line, the order rotated every round):
# `shared` and `separate` at mimalloc's purge delay 0, and `shared` at purge delays 10 ms, 50 ms and the
# default (1000 ms). Transparent huge pages off in every child. Usage: rounds.sh BENCH_BINARY ROUNDS OUT_DIR
set -euo pipefail
bin="$1"; rounds="$2"; out="$3"
mkdir -p "$out"
export KS_MO_PARTS=2 KS_MO_TOTAL_MB="${KS_MO_TOTAL_MB:-1024}" KS_MO_BUDGET_MB="${KS_MO_BUDGET_MB:-256}" \
  KS_MO_MIX_KEYS="${KS_MO_MIX_KEYS:-200000}" MIMALLOC_ALLOW_THP=0
runs=("shared 0" "separate 0" "shared 1000" "shared 50" "shared 10")
for ((r = 0; r < rounds; r++)); do
  for ((i = 0; i < ${#runs[@]}; i++)); do
    set -- ${runs[$(( (i + r) % ${#runs[@]} ))]}
    variant="$1"; delay="$2"
    echo "round $r $variant purge_delay=$delay start $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
    MIMALLOC_PURGE_DELAY="$delay" KS_MO_VARIANTS="$variant" KS_MO_CHECK=0 \
      nice -n 19 "$bin" --bench >"$out/r$r-$variant-p$delay.txt" 2>"$out/r$r-$variant-p$delay.err"
    grep "^| $variant " "$out/r$r-$variant-p$delay.txt" || echo "failed"
  done
done
