#!/usr/bin/env bash
# Runs two builds of the same bench binaries alternately (A, B, A, B, ...) and keeps every output, so that a
# change is compared with the code before it under the same machine conditions.
#
#   scripts/bench-ab.sh DIR_A DIR_B OUT_DIR ROUNDS BENCH [BENCH ...]
#
# DIR_A and DIR_B each hold one executable per BENCH name (e.g. copied from target/release/deps/ after
# `cargo bench --no-run`); OUT_DIR gets <bench>-<A|B>-<round>.txt (stdout) and .err (stderr), and load.txt
# with the load average before every run.
set -euo pipefail
a="$1"; b="$2"; out="$3"; rounds="$4"; shift 4
mkdir -p "$out"
for r in $(seq 1 "$rounds"); do
  for bench in "$@"; do
    for side in A B; do
      dir="$a"; [ "$side" = B ] && dir="$b"
      echo "$(date -u +%H:%M:%S) $bench $side round $r: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/load.txt"
      (cd "$dir" && "./$bench" --bench > "$out/$bench-$side-$r.txt" 2> "$out/$bench-$side-$r.err")
    done
  done
done
