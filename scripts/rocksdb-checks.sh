#!/usr/bin/env bash
# The RocksDB-backed variant (cargo feature `rocksdb`): installs libclang-dev if needed, then
#   scripts/rocksdb-checks.sh tests    conformance and backend-swap suites against RocksDB 11.8
#   scripts/rocksdb-checks.sh bench    our engine vs RocksDB, and the three-backend state benchmark (both on
#                                      mimalloc, RocksDB's C++ allocations too: feature bench-malloc-override)
#   scripts/rocksdb-checks.sh          both
# The first build compiles RocksDB from source (release profile, shared by tests and benches). Set
# CARGO_TARGET_DIR to keep that build outside the clone.
set -euo pipefail
cd "$(dirname "$0")/.."
what="${1:-all}"

if ! dpkg -s libclang-dev >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq libclang-dev
fi

if [ "$what" = "tests" ] || [ "$what" = "all" ]; then
  cargo test --release --features rocksdb --test state --test checkpoint
  cargo clippy --release --features rocksdb --workspace --all-targets -- -D warnings
fi
if [ "$what" = "bench" ] || [ "$what" = "all" ]; then
  cargo bench --features rocksdb,bench-malloc-override --bench lsm_vs_rocksdb
  cargo bench --features rocksdb,bench-malloc-override --bench state_backends
fi
