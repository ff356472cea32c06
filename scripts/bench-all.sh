#!/usr/bin/env bash
# Reruns, on the checked-out commit, every benchmark whose figures design/benchmarks.md shows, each with the
# features and settings its table names, and keeps the raw output in design/bench-results/<date>-all/:
#   run.txt        commit, machine, toolchain, and the exact command of every benchmark
#   load.txt       the load average before and after every benchmark
#   <name>.txt     a benchmark's standard output; <name>.err its standard error when it wrote any
#
#   scripts/bench-all.sh [--quick]      --quick leaves out the two 10M-key runs (about half the time)
#
# The RocksDB comparisons build RocksDB 11.8 from source: libclang-dev must be installed
# (scripts/rocksdb-checks.sh installs it). Run it with nothing else of ours on the machine; the load is
# recorded either way. Then write the folder's README.md from the outputs and update design/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/.."

quick=0
[ "${1:-}" = "--quick" ] && quick=1
out="design/bench-results/$(date -u +%Y-%m-%d)-all"
mkdir -p "$out"
export CARGO_TERM_COLOR=never

dirty=$(git status --porcelain --untracked-files=no | wc -l)
{
  echo "commit:  $(git rev-parse HEAD)$([ "$dirty" -gt 0 ] && echo " plus $dirty files with uncommitted changes")"
  echo "started: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo), $(uname -sr)"
  echo "rustc:   $(rustc --version)"
  echo
  echo "commands (each after a build with the same features):"
} >"$out/run.txt"

load() { echo "$(date -u +%H:%M:%S) $1: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/load.txt"; }

# bench NAME FEATURES TARGET [VAR=VALUE ...] [-- ARGS ...]: builds TARGET with FEATURES, then runs it with
# the variables set, keeping its output as NAME.txt / NAME.err.
bench() {
  local name="$1" features="$2" target="$3"
  shift 3
  local vars=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    vars+=("$1")
    shift
  done
  [ "${1:-}" = "--" ] && shift
  local feat=()
  [ -n "$features" ] && feat=(--features "$features")
  echo "== $name"
  cargo bench -q ${feat[@]+"${feat[@]}"} --bench "$target" --no-run
  local args=""
  [ $# -gt 0 ] && args=" --$(printf ' %q' "$@")"
  echo "  $name: ${vars[*]+${vars[*]} }cargo bench ${feat[*]+${feat[*]} }--bench $target$args" >>"$out/run.txt"
  load "before $name"
  env ${vars[@]+"${vars[@]}"} cargo bench -q ${feat[@]+"${feat[@]}"} --bench "$target" -- "$@" \
    >"$out/$name.txt" 2>"$out/$name.err"
  load "after $name"
  [ -s "$out/$name.err" ] || rm -f "$out/$name.err"
}

both="rocksdb,bench-malloc-override"

bench heap_state "" heap_state -- 'value/|yardstick'
bench savepoint "" savepoint
bench state_backends "$both" state_backends
bench lsm_vs_rocksdb-1m "$both" lsm_vs_rocksdb
[ "$quick" = 1 ] || bench lsm_vs_rocksdb-10m "$both" lsm_vs_rocksdb KS_BENCH_KEYS=10000000 KS_BENCH_REPS=1
bench checkpoints-1m rocksdb checkpoints
[ "$quick" = 1 ] ||
  bench checkpoints-10m rocksdb checkpoints KS_CKPT_BENCH_KEYS=10000000 KS_CKPT_BENCH_BACKENDS=lsm,rocksdb
bench flink_interop "" flink_interop
bench flink_native_import "" flink_native_import
bench state_backends-ttl rocksdb state_backends BENCH_TTL=expire3 BENCH_KINDS=lsm,rocksdb BENCH_ONLY=value,list,map
bench ttl_expiry rocksdb ttl_expiry
bench timers rocksdb timers BENCH_REPS=2

echo "ended:   $(date -u +%Y-%m-%dT%H:%M:%SZ)" >>"$out/run.txt"
echo
echo "Raw outputs, commit and load are in $out/ (run.txt, load.txt)."
echo "Write $out/README.md (what ran, on which commit, the load, what the tables now show), then update the"
echo "tables of design/benchmarks.md from these files and add the folder to design/bench-results/README.md."
