#!/usr/bin/env bash
# Runs one fuzz target for a while and prints its campaign line:
#
#   scripts/fuzz-target.sh TARGET SECONDS
#   -> campaign fuzz:TARGET execs=N cov=C ft=F corpus=K findings=X cpu_s=S secs=T
#
# The fuzzer starts from the committed seeds (fuzz/corpus/TARGET, see fuzz/README.md) and the inputs earlier
# runs found (fuzz/work/TARGET, kept out of git), and adds what it finds to the latter. Crashes go to
# fuzz/artifacts/TARGET/. The full libFuzzer log is fuzz/work/TARGET.log.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
target="$1"
secs="$2"
mkdir -p "work/$target" "artifacts/$target" "corpus/$target"
before="$(find "artifacts/$target" -type f | wc -l)"
log="work/$target.log"
status=0
# Build first (not timed; FUZZ_NO_BUILD=1 keeps the binary there is), then time the fuzzer binary alone:
# cpu_s is fuzzing CPU time only.
: >"$log"
if [ -z "${FUZZ_NO_BUILD:-}" ]; then
  nice -n 19 cargo +nightly fuzz build "$target" >>"$log" 2>&1
fi
bin="target/x86_64-unknown-linux-gnu/release/$target"
/usr/bin/time -f 'cpu_s=%U+%S' -o "work/$target.time" \
  nice -n 19 "$bin" -artifact_prefix="artifacts/$target/" -max_total_time="$secs" -timeout=30 \
  -print_final_stats=1 "work/$target" "corpus/$target" >>"$log" 2>&1 || status=$?
after="$(find "artifacts/$target" -type f | wc -l)"
execs="$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)"
last="$(grep -E '^#[0-9]+' "$log" | tail -1)"
cov="$(grep -o 'cov: [0-9]*' <<<"$last" | grep -o '[0-9]*' || true)"
ft="$(grep -o 'ft: [0-9]*' <<<"$last" | grep -o '[0-9]*' || true)"
corpus="$(find "work/$target" -type f | wc -l)"
cpu="$(sed -n 's/^cpu_s=\(.*\)+\(.*\)$/\1 \2/p' "work/$target.time" | awk '{printf "%.0f", $1 + $2}')"
echo "campaign fuzz:$target execs=${execs:-0} cov=${cov:-0} ft=${ft:-0} corpus=$corpus findings=$((after - before)) cpu_s=${cpu:-0} secs=$secs exit=$status"
