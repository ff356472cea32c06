#!/usr/bin/env bash
# Long-running checks that stay out of `cargo test` and CI: fuzz every decoder of bytes from disk, and run
# the crash and model tests with many more iterations.
#
#   scripts/long-checks.sh [SECONDS_PER_FUZZ_TARGET]     (default 300)
#
# Needs the nightly toolchain (present on the machine) and cargo-fuzz (`cargo install cargo-fuzz`).
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-300}"

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "installing cargo-fuzz" >&2
  cargo install cargo-fuzz --locked
fi

# Seed the SST fuzzer with the format fixtures (every format version, and a format-3 prefix filter).
mkdir -p fuzz/corpus/sst_open_scan
cp tests/fixtures/*.sst fuzz/corpus/sst_open_scan/

for target in savepoint_decode sst_block sst_open_scan manifest_decode; do
  echo "== fuzz $target for ${secs}s"
  (cd fuzz && cargo +nightly fuzz run "$target" -- -max_total_time="$secs")
done

echo "== kill -9 campaign: 1000 kills (prints the inconsistencies found)"
KEYED_STATE_KILL9_ITERS=1000 cargo test --release --test kill9_campaign -- --nocapture 2>&1 | grep -E "campaign|test result"

echo "== crash consistency by enumeration: 2000 steps, 1000 random crash points per mode"
KEYED_STATE_CRASH_STEPS=2000 KEYED_STATE_CRASH_POINTS=1000 cargo test --release --test crash_consistency -- --nocapture 2>&1 | grep -E "crash points|test result"

echo "== checkpoint crash test: 200 children SIGKILLed during checkpoints"
KEYED_STATE_CKPT_CRASH_ITERS=200 cargo test --release --test checkpoint_crash

echo "== bit flips: every bit of files and blocks up to 4 KiB, 10,000 of larger ones, in every file kind"
KEYED_STATE_BITFLIP_FULL=1 cargo test --release --test bitflips -- --nocapture

echo "== model tests with 5000 cases"
PROPTEST_CASES=5000 cargo test --release --test model --test lsm_model
