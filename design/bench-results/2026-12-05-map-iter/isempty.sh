#!/bin/bash
# Alternated A/B of the map read ops alone (one setup), base and new, heap and LSM+cache.
cd /tmp/mapiter-ab
for n in 1 2 3 4; do
  for b in base new; do
    echo "$b reads$n start $(date -u +%H:%M:%S) $(cat /proc/loadavg)" >> load-reads.txt
    BENCH_KINDS=heap,lsm+cache BENCH_ONLY=map BENCH_OP=mapGet,mapContains,mapIsEmpty BENCH_ROUNDS=3 /tmp/mapiter-$b-bench --bench > reads-$b-run$n.txt 2> reads-$b-run$n.err
  done
done
echo "finished $(date -u +%H:%M:%S) $(cat /proc/loadavg)" >> load-reads.txt
