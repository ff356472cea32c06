#!/bin/bash
# Alternated A/B: base (d12c879) and new (614960a), map section, heap and LSM+cache.
cd /tmp/mapiter-ab
for n in ${RUNS:-1 2 3}; do
  for b in base new; do
    echo "$b run$n start $(date -u +%H:%M:%S) $(cat /proc/loadavg)" >> load.txt
    BENCH_KINDS=heap,lsm+cache BENCH_ONLY=map BENCH_ROUNDS=3 /tmp/mapiter-$b-bench --bench > ab-$b-run$n.txt 2> ab-$b-run$n.err
    echo "$b run$n end $(date -u +%H:%M:%S) $(cat /proc/loadavg)" >> load.txt
  done
done
echo finished >> load.txt
