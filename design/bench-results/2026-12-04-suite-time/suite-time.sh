#!/usr/bin/env bash
# suite-time.sh NAME DIR: times the README's `cargo test` build on the checkout DIR from a clean target dir
# (default profile): the clean build of every test binary, then a rebuild after touching src/lib.rs.
set -u
name=$1; dir=$2
out=/work/notes/suite-time-$name.txt
export CARGO_TARGET_DIR=/work/suite-target-$name
rm -rf "$CARGO_TARGET_DIR"
cd "$dir"
{
echo "commit: $(git rev-parse HEAD)  started $(date -u +%H:%M:%S)  load $(cut -d' ' -f1-3 /proc/loadavg)"
cargo fetch -q 2>/dev/null
/usr/bin/time -f "clean build (cargo test --no-run): wall %e s, user %U s, sys %S s" cargo test --no-run -q 2>&1 | grep -E "wall|^error"
echo "load $(cut -d' ' -f1-3 /proc/loadavg)"
touch src/lib.rs
/usr/bin/time -f "rebuild after touching src/lib.rs: wall %e s, user %U s, sys %S s" cargo test --no-run -q 2>&1 | grep -E "wall|^error"
echo "test binaries linked: $(find $CARGO_TARGET_DIR/debug/deps -maxdepth 1 -type f -executable -newer src/lib.rs | wc -l)"
echo "target size: $(du -sh $CARGO_TARGET_DIR | cut -f1)"
echo "load $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/time -f "run of the built suite (cargo test, no S3 endpoint): wall %e s, user %U s, sys %S s" cargo test -q > /work/notes/suite-run-$name.log 2>&1; tail -1 /work/notes/suite-run-$name.log
grep -c "^test result" /work/notes/suite-run-$name.log | sed 's/^/test result lines: /'
grep -E "^test result: FAILED|^error" /work/notes/suite-run-$name.log | head -3
echo "ended $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
} > "$out" 2>&1
rm -rf "$CARGO_TARGET_DIR"
