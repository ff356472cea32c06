#!/usr/bin/env bash
# Long-running checks that stay out of `cargo test` and CI: fuzz every decoder of bytes from disk, model-check
# the memtable's atomics, run Miri on the unit tests of the unsafe code (scripts/miri-checks.sh), run the
# stress, crash and model tests with many more iterations, and check the memory and throughput targets of many
# operators in one process at 10 GiB (scripts/many-operators-check.sh). Ends with a table of the campaigns it
# ran, built from the `campaign NAME key=value ...` lines the tests print.
#
#   scripts/long-checks.sh [SECONDS_PER_FUZZ_TARGET]     (default 300)
#
# Needs the nightly toolchain with Miri (`rustup +nightly component add miri rust-src`) and cargo-fuzz
# (`cargo install cargo-fuzz --locked`, done here if missing).
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-300}"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT

# Runs a command, shows its output, and keeps its `campaign ...` lines for the table at the end; a command
# that fails adds a row of its own (and the script exits non-zero after the table).
failed=0
campaign() {
  if ! "$@" 2>&1 | tee -a "$log"; then
    echo "campaign failed:$(basename "$1")${4:+:$4} command_failed=1 failures=1" | tee -a "$log"
    failed=1
  fi
}

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "installing cargo-fuzz" >&2
  nice -n 19 cargo install cargo-fuzz --locked
fi

# Every target of fuzz/Cargo.toml, one at a time, from its seed corpus (fuzz/corpus, see fuzz/README.md).
(cd fuzz && nice -n 19 cargo +nightly fuzz build)
for target in $(sed -n 's/^name = "\(.*\)"$/\1/p' fuzz/Cargo.toml | grep -v '^keyed-state-fuzz$'); do
  echo "== fuzz $target for ${secs}s"
  campaign scripts/fuzz-target.sh "$target" "$secs"
done

echo "== kill -9 campaign: 1000 kills (prints the inconsistencies found)"
KEYED_STATE_KILL9_ITERS=1000 campaign nice -n 19 cargo test --release --test reliability kill9_campaign -- --nocapture

echo "== timely host: 100 kill -9s of random processes at random moments, restarts at random parallelisms"
KEYED_STATE_TIMELY_KILLS=100 campaign nice -n 19 cargo test --release -p keyed-state-timely --test timely kill_campaign -- --nocapture

echo "== crash consistency by enumeration: 2000 steps, 1000 random crash points per mode"
KEYED_STATE_CRASH_STEPS=2000 KEYED_STATE_CRASH_POINTS=1000 campaign nice -n 19 cargo test --release --test lsm crash_consistency -- --nocapture
echo "== crash at every storage operation of object-store checkpoints and restores of an LSM backend on FaultFs"
campaign nice -n 19 cargo test --release --test checkpoint checkpoints_on_fault_fs -- --nocapture

echo "== loom model checks of the memtable (skiplist, version chains, point index, its growth) and the writer fast path"
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/loom" \
  campaign nice -n 19 cargo test --release -p keyed-state-lsm --lib loom_ -- --nocapture --test-threads=1

echo "== Miri on the unit tests of the unsafe code (UNSAFE.md): Stacked Borrows, Tree Borrows for the memtable (crossbeam-epoch)"
campaign scripts/miri-checks.sh

echo "== stress: concurrent writers, readers, snapshots, flushes, compactions for 120 s"
KEYED_STATE_STRESS_SECS=120 campaign nice -n 19 cargo test --release --test lsm lsm_stress -- --nocapture

echo "== checkpoint crash test: 200 children SIGKILLed during checkpoints"
KEYED_STATE_CKPT_CRASH_ITERS=200 campaign nice -n 19 cargo test --release --test checkpoint checkpoint_crash -- --nocapture

echo "== bit flips: every bit of files and blocks up to 4 KiB, 10,000 of larger ones, in every file kind"
KEYED_STATE_BITFLIP_FULL=1 campaign nice -n 19 cargo test --release --test reliability bitflips -- --nocapture

echo "== one model, every backend: 10,000 sequences (and 5000 on the LSM engine's own model)"
PROPTEST_CASES=10000 campaign nice -n 19 cargo test --release --test state model::every_backend -- --nocapture
PROPTEST_CASES=5000 campaign nice -n 19 cargo test --release --test lsm lsm_model -- --nocapture

echo "== many operators: 16 LSM instances x 3 states, 10 GiB on one 512 MiB budget; peak RssAnon <= 1.1 x budget + baseline, throughput >= 0.9 x 16 separate engines"
campaign scripts/many-operators-check.sh

# The table: one row per `campaign NAME k=v ...` line; "failures" is the first of findings=, failures=,
# differences=, inconsistencies= that the line has. Add a campaign by printing such a line from its test.
echo
echo "| campaign | what was tried | failures found |"
echo "| --- | --- | --- |"
grep -o 'campaign [^ ]* .*' "$log" | while read -r _ name rest; do
  failures="-"
  tried=""
  for kv in $rest; do
    case "$kv" in
      findings=*|failures=*|differences=*|inconsistencies=*) [ "$failures" = "-" ] && failures="${kv#*=}" ;;
      *) tried="$tried $kv" ;;
    esac
  done
  echo "| $name |${tried} | $failures |"
done
exit "$failed"
