#!/bin/sh
# many_operators at 1 GiB of raw entries on a 128 MiB budget (compressible values: reads go through the
# cache): shared (indexes and filters resident), shared-cached (in the block cache), rocksdb-flink; two
# rounds, the order reversed in the second. Binary: cargo bench --bench many_operators
# --features rocksdb,bench-malloc-override --no-run (ROCKSDB_LIB_DIR: prebuilt RocksDB 11.8).
cat /proc/loadavg
KS_MO_PARTS=2 KS_MO_TOTAL_MB=1024 KS_MO_BUDGET_MB=128 KS_MO_MIX_KEYS=200000 KS_MO_VALUE_POOL=16 \
KS_MO_VARIANTS=shared,shared-cached,rocksdb-flink KS_MO_VARIANT_ROUNDS=2 KS_MO_TRACE=1 \
nice -n 19 "$1"
cat /proc/loadavg
