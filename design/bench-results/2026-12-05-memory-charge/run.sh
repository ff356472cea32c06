#!/bin/sh
# run.sh BIN NAME [VAR=VALUE ...]: the fill command of ../2026-12-05-memory-together/ (1 GiB of raw entries
# on a 128 MiB budget, pool of 16 values) with the given bench binary; more variables may follow (e.g.
# KS_MO_VARIANTS=shared KS_PROFILE_ALLOC=1). Writes NAME.txt (the table) and NAME.err (trace, profile) here.
set -e
bin=$1; name=$2; shift 2
dir=$(dirname "$0")
env KS_MO_PARTS=2 KS_MO_TOTAL_MB=1024 KS_MO_BUDGET_MB=128 KS_MO_MIX_KEYS=200000 KS_MO_VALUE_POOL=16 \
  KS_MO_VARIANTS=shared,rocksdb-flink KS_MO_VARIANT_ROUNDS=2 KS_MO_TRACE=1 "$@" \
  nice -n 19 "$bin" >"$dir/$name.txt" 2>"$dir/$name.err"
