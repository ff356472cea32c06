#!/bin/bash
# Alternated A/B after the review's fixes, map section, heap and LSM+cache: "prev" is the branch before
# them (5b00182, the binary of the runs in ../), "fix" is 4b712da (review findings 1-3). Modes as ../ab.sh:
# "dirty" (default setup), "clean" (BENCH_MAP_ENGINE_CLEAN). Binaries copied to /tmp, which does not persist.
OUT=$(dirname "$0")
for n in ${RUNS:-1 2}; do
  for mode in ${MODES:-dirty clean}; do
    for b in prev fix; do
      case $mode in
        dirty) env=() ;;
        clean) env=(BENCH_MAP_ENGINE_CLEAN=1 BENCH_SAMPLES=1) ;;
      esac
      echo "$b $mode$n start $(date -u +%H:%M:%S) $(cat /proc/loadavg)" >> $OUT/load.txt
      env "${env[@]}" BENCH_KINDS=heap,lsm+cache BENCH_ONLY=map BENCH_ROUNDS=3 \
        /tmp/mapmark-$b-bench --bench > $OUT/$mode-$b-run$n.txt 2> $OUT/$mode-$b-run$n.err
    done
  done
done
echo "finished $(date -u +%H:%M:%S) $(cat /proc/loadavg)" >> $OUT/load.txt
