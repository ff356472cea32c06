#!/bin/bash
# Alternated A/B with every map in the engine and one dirty entry per map in the cache (BENCH_MAP_ENGINE_HELD):
# base (d12c879 + the switch) and new, the map read ops, heap and LSM+cache. The committed series ran
# BINS="base2 new3": new3 is 2fc5526 (the default new2, 614960a + the switch, e7157a0, with the separate
# check, is held.sh's series).
# The binaries were built as the README says and copied to /tmp, which does not persist.
cd /tmp/mapiter-ab
for n in ${RUNS:-1 2 3 4}; do
  for b in ${BINS:-base2 new2}; do
    echo "$b held$n start $(date -u +%H:%M:%S) $(cat /proc/loadavg)" >> load-held.txt
    BENCH_MAP_ENGINE_HELD=1 BENCH_SHAPE=1 BENCH_KINDS=heap,lsm+cache BENCH_ONLY=map BENCH_OP=mapGet,mapContains,mapIsEmpty,mapKeys,mapValues,mapEntries,mapIterator BENCH_ROUNDS=3 /tmp/mapiter-$b-bench --bench > held-$b-run$n.txt 2> held-$b-run$n.err
  done
done
echo "finished $(date -u +%H:%M:%S) $(cat /proc/loadavg)" >> load-held.txt
