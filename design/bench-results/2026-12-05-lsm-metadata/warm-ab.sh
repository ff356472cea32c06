#!/bin/sh
# Warm point reads, our engine alone, index and filter resident (A) or in the block cache (B), alternated:
# A B B A A B (lsm_vs_rocksdb at 1M keys, 64 MiB cache, one round per invocation).
for m in resident cached cached resident resident cached; do
  echo "=== KS_BENCH_SST_METADATA=$m; load $(cat /proc/loadavg)"
  KS_BENCH_ONLY=ours KS_BENCH_REPS=1 KS_BENCH_SST_METADATA=$m nice -n 19 "$1" --bench
done
echo "=== end; load $(cat /proc/loadavg)"
