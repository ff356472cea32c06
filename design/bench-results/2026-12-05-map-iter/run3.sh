#!/bin/bash
# Alternated A/B: base (d12c879) and new3 (prefix_iter), map section, heap and LSM+cache.
cd /tmp/mapiter-ab
for n in 1 2 3; do
  for b in base new3; do
    echo "$b run$n start $(date -u +%H:%M:%S) $(cat /proc/loadavg)" >> load3.txt
    BENCH_KINDS=heap,lsm+cache BENCH_ONLY=map BENCH_ROUNDS=3 /tmp/mapiter-$b-bench --bench > ab3-$b-run$n.txt 2> ab3-$b-run$n.err
  done
done
echo "finished $(date -u +%H:%M:%S) $(cat /proc/loadavg)" >> load3.txt
