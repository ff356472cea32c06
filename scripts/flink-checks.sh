#!/usr/bin/env bash
# Flink restores our exports:
# * one operator: imports the fixture job's state (tests/fixtures/flink/rocksdb-canonical-savepoint, written
#   by Flink 2.3.0) with `keyed-state import-flink`, exports it with `keyed-state export-flink` at parallelism
#   2 and 3 (plain, and Snappy at 3), has Flink 2.3.0 itself restore every export into the fixture job on the
#   HashMap and on the RocksDB backend at that parallelism (run.sh's VERIFY_ONLY mode), and checks
#     1. what Flink restored (a CANONICAL savepoint Flink writes of it) against expected.json
#        (check_canonical.py),
#     2. that our import of Flink's savepoint dumps exactly the entries of our import of the fixture
#        (`dump --json` lines, TTL timestamps included, compared sorted: Flink's HashMap backend lists the
#        states in another order);
# * a whole job (tests/fixtures/flink/job: a FLIP-27 source with operator and coordinator state, keyed
#   operators keyed-a and keyed-b): `import-flink --all`, then `export-flink --template` replacing both keyed
#   operators (canonical template) or keyed-a only (native template: keyed-b's RocksDB files carried over),
#   and Flink 2.3.0 restores the result into the job (run.sh's VERIFY_JOB mode) on HashMap and RocksDB (the
#   native template's carried RocksDB handles: RocksDB only), once with no new record and once with 60
#   more. Checked: every keyed operator's state, imported by us from Flink's savepoint of the restored job,
#   against job/expected.json (check_job.py: "initial", or "after_extra" — the source resumed where the
#   template's source state left it), and with no new record the source's coordinator and operator state
#   bytes equal the template's (checksums in `inspect`);
# * the state kinds (tests/fixtures/flink/kinds: TTL'd lists and maps, null map values, String namespaces,
#   incremental checkpoints across a compaction): each imported and exported at parallelism 3, Flink 2.3.0
#   restores the export into that job at parallelism 2 (run.sh's VERIFY_KINDS mode) on RocksDB (then a
#   canonical savepoint) and on HashMap (then a native one: HashMap's canonical writer fails on null map
#   values), and our import of what Flink wrote dumps exactly the entries of our import of the fixture (TTL
#   timestamps included);
# * Flink 1.15.4, 1.18.1 and 1.20.3 (tests/fixtures/flink/flink-<version>, `_metadata` version 3, 4, 4; run.sh
#   with FLINK_VERSION=<version> fetches that Flink's jars, about 230 MB each, into $FLINK_WORK_1X-<version>,
#   default /tmp/flink-<version>): each version's canonical savepoint of the fixture job imported and
#   exported with itself as --template (so the result keeps its `_metadata` version and properties), and
#   that Flink restores it on HashMap and RocksDB: checked against expected.json, and our import of what
#   Flink wrote dumps the entries of our import of the fixture.
# Not part of `cargo test`: needs Java 17 and the PyPI wheel apache-flink-libraries==2.3.0 that run.sh
# fetches into FLINK_WORK (default /tmp/flink; about 330 MB, downloaded once).
#
#   scripts/flink-checks.sh            # WORK=/tmp/flink-checks by default
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK="${WORK:-/tmp/flink-checks}"
FIX="$ROOT/tests/fixtures/flink"
RUN="$FIX/generator/run.sh"

echo "== building keyed-state"
(cd "$ROOT" && nice -n 19 cargo build --quiet -p keyed-state-cli --bin keyed-state)
BIN="${CARGO_TARGET_DIR:-$ROOT/target}/debug/keyed-state"

rm -rf "$WORK" && mkdir -p "$WORK"
"$BIN" import-flink "$FIX/rocksdb-canonical-savepoint" --operator state-op --out "$WORK/state.sp"
"$BIN" dump "$WORK/state.sp" --json > "$WORK/state.json"

fail=0
results=()
for variant in "2" "3" "3 --compress"; do
  read -r p z <<< "$variant"
  tag="p$p${z:+-snappy}"
  "$BIN" export-flink "$WORK/state.sp" --operator-uid state-op --parallelism "$p" --out "$WORK/$tag" ${z:+--compress}
  for backend in hashmap rocksdb; do
    dst="$WORK/$tag-restored-on-$backend"
    if VERIFY_PARALLELISM="$p" VERIFY_ONLY="$backend=$WORK/$tag=$dst" \
        VERIFY_RUN_INFO="$FIX/rocksdb-canonical-savepoint/run-info.json" "$RUN" > "$WORK/$tag-$backend.log" 2>&1; then
      flink="$(grep -E '^/.*entries.*keys' "$WORK/$tag-$backend.log" | sed 's/^.*: //')"
    else
      flink="FAILED ($(tail -1 "$WORK/$tag-$backend.log"))"; fail=1
    fi
    if "$BIN" import-flink "$dst" --operator state-op --out "$dst.sp" > /dev/null &&
        "$BIN" dump "$dst.sp" --json > "$dst.json" && cmp -s <(sort "$WORK/state.json") <(sort "$dst.json"); then
      ours="dump equal ($(wc -l < "$dst.json") entries)"
    else
      ours="DUMP DIFFERS"; fail=1
    fi
    results+=("export parallelism $p${z:+ snappy}, Flink 2.3.0 restores on $backend at parallelism $p: expected.json $flink; re-import $ours")
  done
done

JOBFIX="$FIX/job"
source_state() { "$BIN" inspect "$1" | awk '/^operator /{s = ($0 ~ / uid=source /)} s' | sed 's/, via .*//'; }
for t in canonical-savepoint native-savepoint; do
  ours="$WORK/job-$t-ours"
  "$BIN" import-flink "$JOBFIX/$t" --all --out-dir "$ours" > /dev/null
  if [[ $t == canonical-savepoint ]]; then
    replaced="keyed-a keyed-b"; backends="hashmap rocksdb"
  else
    replaced="keyed-a"; backends="rocksdb"
  fi
  args=()
  for op in $replaced; do args+=(--operator "$op=$ours/$op.sp"); done
  export="$WORK/job-$t-export"
  "$BIN" export-flink --template "$JOBFIX/$t" "${args[@]}" --out "$export"
  for backend in $backends; do
    for extra in 0 60; do
      dst="$WORK/job-$t-restored-on-$backend-then-$extra"
      phase=initial; [[ $extra != 0 ]] && phase=after_extra
      if VERIFY_JOB="$backend=$export=$dst=$extra" "$RUN" > "$dst.log" 2>&1 &&
          "$BIN" import-flink "$dst" --all --out-dir "$dst.ours" > /dev/null &&
          "$BIN" dump "$dst.ours/keyed-a.sp" --json > "$dst.keyed-a.json" &&
          "$BIN" dump "$dst.ours/keyed-b.sp" --json > "$dst.keyed-b.json" &&
          python3 "$FIX/generator/check_job.py" "$JOBFIX/expected.json" "$phase" \
            keyed-a="$dst.keyed-a.json" keyed-b="$dst.keyed-b.json" > "$dst.check" 2>&1; then
        state="$(paste -sd ';' "$dst.check" | sed 's/;/; /g')"
      else
        state="FAILED ($(tail -1 "$dst.check" 2>/dev/null || tail -1 "$dst.log"))"; fail=1
      fi
      if [[ $extra == 0 ]]; then
        if cmp -s <(source_state "$JOBFIX/$t") <(source_state "$dst"); then
          state="$state; source coordinator and operator state byte-equal to the template's"
        else
          state="$state; SOURCE STATE DIFFERS"; fail=1
        fi
      fi
      results+=("job, template $t, replaced: ${replaced// /+}; Flink 2.3.0 restores on $backend, then $extra more records ($phase): $state")
    done
  done
done

KINDS="$FIX/kinds"
for f in rocksdb-canonical-savepoint rocksdb-native-savepoint hashmap-native-savepoint \
    rocksdb-incremental-checkpoints/chk-3 rocksdb-incremental-checkpoints/chk-4; do
  tag="kinds-${f//\//-}"
  "$BIN" import-flink "$KINDS/$f" --operator kinds --out "$WORK/$tag.sp" > /dev/null
  "$BIN" dump "$WORK/$tag.sp" --json | sort > "$WORK/$tag.json"
  "$BIN" export-flink "$WORK/$tag.sp" --operator-uid kinds --parallelism 3 --out "$WORK/$tag-export" > /dev/null
  for bf in rocksdb=canonical hashmap=native; do
    backend="${bf%%=*}"; format="${bf##*=}"
    dst="$WORK/$tag-restored-on-$backend"
    if VERIFY_KINDS="$backend=$WORK/$tag-export=$dst=$format" "$RUN" > "$dst.log" 2>&1 &&
        "$BIN" import-flink "$dst" --operator kinds --out "$dst.sp" > /dev/null &&
        "$BIN" dump "$dst.sp" --json | sort > "$dst.json" && cmp -s "$WORK/$tag.json" "$dst.json"; then
      state="re-import dump equal ($(wc -l < "$dst.json") entries)"
    else
      state="FAILED or DUMP DIFFERS (see $dst.log)"; fail=1
    fi
    results+=("kinds $f, export parallelism 3, Flink 2.3.0 restores on $backend at parallelism 2 ($format savepoint): $state")
  done
done

# Flink 1.x: each version's canonical savepoint imported and exported with itself as template, restored by
# that Flink (its jars in $FLINK_WORK_1X-<version>; FLINK_WORK_1X defaults to /tmp/flink).
for v in 1.15.4 1.18.1 1.20.3; do
  F1="$FIX/flink-$v"
  t="f${v//./}"
  mdv=4; [[ $v == 1.15.* ]] && mdv=3
  "$BIN" import-flink "$F1/rocksdb-canonical-savepoint" --operator state-op --out "$WORK/$t.sp" > /dev/null
  "$BIN" dump "$WORK/$t.sp" --json | sort > "$WORK/$t.json"
  "$BIN" export-flink --template "$F1/rocksdb-canonical-savepoint" --operator "state-op=$WORK/$t.sp" \
    --out "$WORK/$t-export" > /dev/null
  for backend in hashmap rocksdb; do
    dst="$WORK/$t-restored-on-$backend"
    if FLINK_VERSION=$v FLINK_WORK="${FLINK_WORK_1X:-/tmp/flink}-$v" OUT="$F1" VERIFY_ONLY="$backend=$WORK/$t-export=$dst" \
        VERIFY_RUN_INFO="$F1/rocksdb-canonical-savepoint/run-info.json" "$RUN" > "$dst.log" 2>&1; then
      flink="$(grep -E '^/.*entries.*keys' "$dst.log" | sed 's/^.*: //')"
    else
      flink="FAILED ($(tail -1 "$dst.log"))"; fail=1
    fi
    if "$BIN" import-flink "$dst" --operator state-op --out "$dst.sp" > /dev/null &&
        "$BIN" dump "$dst.sp" --json | sort > "$dst.json" && cmp -s "$WORK/$t.json" "$dst.json"; then
      ours="dump equal ($(wc -l < "$dst.json") entries)"
    else
      ours="DUMP DIFFERS"; fail=1
    fi
    results+=("Flink $v savepoint, exported with itself as template (_metadata v$mdv), Flink $v restores on $backend: expected.json $flink; re-import $ours")
  done
done

echo "== results"
printf '%s\n' "${results[@]}" | tee "$WORK/RESULTS.txt"
if [[ $fail != 0 ]]; then
  echo "!! some check failed (logs in $WORK)"; exit 1
fi
echo "== all checks passed"
