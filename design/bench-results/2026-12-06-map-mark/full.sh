#!/bin/bash
# One run of the four kinds on the final binary (value, list and map sections), to check that no other op
# got slower. The binary was built as the README says and copied to /tmp, which does not persist.
OUT=$(dirname "$0")
echo "full start $(date -u +%H:%M:%S) $(cat /proc/loadavg)" >> $OUT/load-full.txt
BENCH_KINDS=heap,lsm,lsm+cache,rocksdb BENCH_ONLY=value,list,map BENCH_ROUNDS=3 /tmp/mapmark-new-bench --bench \
  > $OUT/full-new.txt 2> $OUT/full-new.err
echo "full end $(date -u +%H:%M:%S) $(cat /proc/loadavg)" >> $OUT/load-full.txt
