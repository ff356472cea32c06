#!/bin/bash
# Alternated A/B of the value and list sections, base and new, heap and LSM+cache.
cd /tmp/mapiter-ab
for n in ${RUNS:-1 2 3}; do
  for b in base new; do
    echo "$b vl$n start $(date -u +%H:%M:%S) $(cat /proc/loadavg)" >> load-vl.txt
    BENCH_KINDS=heap,lsm+cache BENCH_ONLY=value,list BENCH_ROUNDS=3 /tmp/mapiter-$b-bench --bench > vl-$b-run$n.txt 2> vl-$b-run$n.err
  done
done
echo "finished $(date -u +%H:%M:%S) $(cat /proc/loadavg)" >> load-vl.txt
