#!/bin/sh
# Warm point reads, our engine alone, resident index and filter: main (e954ac3: flat arrays, 16-byte handles)
# against this branch (packed index buffer), alternated main, branch, branch, main
# (lsm_vs_rocksdb at 1M keys, 64 MiB cache, one round per invocation). $1 = main's binary, $2 = the branch's.
for b in main branch branch main; do
  if [ $b = main ]; then exe=$1; else exe=$2; fi
  echo "=== $b; load $(cat /proc/loadavg)"
  KS_BENCH_ONLY=ours KS_BENCH_REPS=1 nice -n 19 "$exe" --bench
done
echo "=== end; load $(cat /proc/loadavg)"
