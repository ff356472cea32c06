#!/usr/bin/env bash
# Reruns, on the checked-out commit, every benchmark whose figures design/benchmarks.md shows, each with the
# features and settings its table names, and keeps the raw output in design/bench-results/<date>-all/:
#   run.txt        commit, machine, toolchain, and the exact command of every benchmark
#   load.txt       the load average before and after every benchmark
#   <name>.txt     a benchmark's standard output; <name>.err its standard error when it wrote any
#
#   scripts/bench-all.sh [--quick] [--with-cgroup]
#     --quick        leaves out the 10M-key runs of lsm_vs_rocksdb and checkpoints and nexmark's 10M events
#     --with-cgroup  also runs larger_than_memory and cold_batch_io inside a 256 MiB cgroup; needs root
#                    (both create a child cgroup and drop the page cache)
#
# cold_batch_io drops the page cache between rounds and runs only as root (with or without --with-cgroup);
# nexmark (hosts/timely) launches 2-3 processes per job on loopback and takes about an hour at 10M events.
#
# The RocksDB comparisons build RocksDB 11.8 from source: libclang-dev must be installed
# (scripts/rocksdb-checks.sh installs it). Run it with nothing else of ours on the machine; the load is
# recorded either way. Then write the folder's README.md from the outputs and update design/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/.."

quick=0
cgroup=0
for arg in "$@"; do
  case "$arg" in
    --quick) quick=1 ;;
    --with-cgroup) cgroup=1 ;;
    *)
      echo "unknown argument: $arg (expected --quick or --with-cgroup)" >&2
      exit 2
      ;;
  esac
done
root=0
[ "$(id -u)" = 0 ] && root=1
if [ "$cgroup" = 1 ] && [ "$root" = 0 ]; then
  echo "--with-cgroup needs root: larger_than_memory and cold_batch_io create a cgroup and drop the page cache" >&2
  exit 2
fi
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

# bench NAME FEATURES [PACKAGE:]TARGET [VAR=VALUE ...] [-- ARGS ...]: builds TARGET (of PACKAGE, or of the
# root crate) with FEATURES, then runs it with the variables set, keeping its output as NAME.txt / NAME.err.
bench() {
  local name="$1" features="$2" target="$3"
  shift 3
  local pkg=()
  if [[ "$target" == *:* ]]; then
    pkg=(-p "${target%%:*}")
    target="${target#*:}"
  fi
  local vars=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    vars+=("$1")
    shift
  done
  [ "${1:-}" = "--" ] && shift
  local feat=()
  [ -n "$features" ] && feat=(--features "$features")
  feat=(${pkg[@]+"${pkg[@]}"} ${feat[@]+"${feat[@]}"})
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
# many_operators: part 2 (16 instances on one StateEnv against 16 separate ones), then part 1 with 11
# checkpoints each, with the background work running and settled before each checkpoint.
bench many_operators-instances "" many_operators KS_MO_PARTS=2
bench many_operators-running "" many_operators KS_MO_PARTS=1 KS_MO_ROUNDS=10
bench many_operators-settled "" many_operators KS_MO_PARTS=1 KS_MO_ROUNDS=10 KS_MO_SETTLE=1
# nexmark on the timely host: q3 q5 q7 q8 q11 on heap, LSM and RocksDB, 2 processes x 1 worker.
if [ "$quick" = 1 ]; then
  bench nexmark rocksdb keyed-state-timely:nexmark KS_NEXMARK_EVENTS=1000000
else
  bench nexmark rocksdb keyed-state-timely:nexmark KS_NEXMARK_EVENTS=1000000,10000000
fi
# cold_batch_io: 2 GiB file, 3 rounds x 150 batches of 32 ranges; only as root (it drops the page cache).
if [ "$root" = 1 ]; then
  bench cold_batch_io "" cold_batch_io KS_CBI_FILE_MB=2048 KS_CBI_BATCHES=150 KS_CBI_ROUNDS=3
else
  echo "  cold_batch_io: not run (needs root to drop the page cache)" >>"$out/run.txt"
fi
if [ "$cgroup" = 1 ]; then
  bench cold_batch_io-cgroup "" cold_batch_io KS_CBI_CGROUP_MB=256 KS_CBI_FILE_MB=2048 KS_CBI_BATCHES=150 KS_CBI_ROUNDS=3
  # 10M keys in 512 MiB (3 rounds) and 8 GB in 1 GiB (2 rounds), as the section's source run.
  bench larger_than_memory-10m rocksdb larger_than_memory KS_LTM_CASES=10m KS_LTM_REPS=3
  bench larger_than_memory-8g rocksdb larger_than_memory KS_LTM_CASES=8g KS_LTM_REPS=2
else
  echo "  larger_than_memory, cold_batch_io-cgroup: not run (scripts/bench-all.sh --with-cgroup, as root)" >>"$out/run.txt"
fi

echo "ended:   $(date -u +%Y-%m-%dT%H:%M:%SZ)" >>"$out/run.txt"
echo
echo "Raw outputs, commit and load are in $out/ (run.txt, load.txt)."
echo "Write $out/README.md (what ran, on which commit, the load, what the tables now show), then update the"
echo "tables of design/benchmarks.md from these files and add the folder to design/bench-results/README.md."
