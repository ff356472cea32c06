#!/usr/bin/env bash
# `keyed-state demo --instances 16 --memory-budget 64MiB --records 2000000` with transparent huge pages off and
# mimalloc's purge delay at 0, 10, 50 and 1000 ms (MIMALLOC_PURGE_DELAY, which the demo keeps when set),
# the order rotated every round. Usage: demo-purge.sh KEYED_STATE_BINARY ROUNDS OUT_FILE
set -euo pipefail
bin="$1"; rounds="$2"; out="$3"
: >"$out"
delays=(0 10 50 1000)
for ((r = 0; r < rounds; r++)); do
  for ((i = 0; i < ${#delays[@]}; i++)); do
    d="${delays[$(( (i + r) % ${#delays[@]} ))]}"
    echo "== round $r purge delay $d load $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out"
    MIMALLOC_PURGE_DELAY="$d" /usr/bin/time -f "cpu user %U s, system %S s, wall %e s, max RSS %M KiB" \
      nice -n 19 "$bin" demo --instances 16 --memory-budget 64MiB --records 2000000 >>"$out" 2>&1
  done
done
