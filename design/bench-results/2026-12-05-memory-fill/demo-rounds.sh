#!/usr/bin/env bash
# `keyed-state demo --instances 16 --memory-budget 64MiB --records 2000000` with the demo's allocator settings
# (transparent huge pages off, purge delay 0) and with mimalloc's defaults (--allocator-defaults), alternated.
# Usage: demo-rounds.sh KEYED_STATE_BINARY ROUNDS OUT_FILE
set -euo pipefail
bin="$1"; rounds="$2"; out="$3"
: >"$out"
for ((r = 0; r < rounds; r++)); do
  if (( r % 2 == 0 )); then order=("" "--allocator-defaults"); else order=("--allocator-defaults" ""); fi
  for flag in "${order[@]}"; do
    echo "== round $r ${flag:-host settings} load $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out"
    /usr/bin/time -f "cpu user %U s, system %S s, wall %e s, max RSS %M KiB" nice -n 19 \
      "$bin" demo --instances 16 --memory-budget 64MiB --records 2000000 $flag >>"$out" 2>&1
  done
done
