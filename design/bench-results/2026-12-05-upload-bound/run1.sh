#!/usr/bin/env bash
# One run of the memory-fill profile command (see run.sh) with binary BIN, named NAME, into OUTDIR.
set -euo pipefail
bin="$1" name="$2" out="$3"
mkdir -p "$out"
export KS_MO_PARTS=2 KS_MO_TOTAL_MB=1024 KS_MO_BUDGET_MB=128 KS_MO_MIX_KEYS=200000 KS_MO_VARIANTS=shared \
  KS_MO_TRACE=1 KS_PROFILE_ALLOC=1
echo "load average at start: $(cat /proc/loadavg)" >"$out/$name.load"
nice -n 19 /usr/bin/time -f "time: %e s wall, %U s user, %S s system, max RSS %M KiB" "$bin" --bench \
  >"$out/$name.txt" 2>"$out/$name.err"
echo "load average at end: $(cat /proc/loadavg)" >>"$out/$name.load"
