#!/bin/bash
# Alternated A/B, map section, heap and LSM+cache: base (b23c999) and new, each mode in turn. MODES: "dirty"
# (the default setup: every map dirty in the cache), "held" (BENCH_MAP_ENGINE_HELD: in the engine, one dirty
# entry per map), "clean" (BENCH_MAP_ENGINE_CLEAN: written back, none dirty). The base binary is b23c999
# with this branch's bench file, so that it has the clean mode. The binaries were built as the README says
# and copied to /tmp, which does not persist.
OUT=$(dirname "$0")
for n in ${RUNS:-1 2}; do
  for mode in ${MODES:-dirty held clean}; do
    for b in base new; do
      case $mode in
        dirty) env=() ;;
        held) env=(BENCH_MAP_ENGINE_HELD=1) ;;
        clean) env=(BENCH_MAP_ENGINE_CLEAN=1 BENCH_SAMPLES=1) ;;
      esac
      echo "$b $mode$n start $(date -u +%H:%M:%S) $(cat /proc/loadavg)" >> $OUT/load.txt
      env "${env[@]}" BENCH_KINDS=heap,lsm+cache BENCH_ONLY=map BENCH_ROUNDS=3 ${OPS:+BENCH_OP=$OPS} \
        /tmp/mapmark-$b-bench --bench > $OUT/$mode-$b-run$n.txt 2> $OUT/$mode-$b-run$n.err
    done
  done
done
echo "finished $(date -u +%H:%M:%S) $(cat /proc/loadavg)" >> $OUT/load.txt
