#!/bin/sh
# Cold point reads at 10M keys in a 512 MiB cgroup (larger_than_memory, as root): ours (indexes and filters
# resident) against ours+meta (in the 64 MiB block cache), reading the same files, alternated, two rounds.
cat /proc/loadavg
KS_LTM_CASES=10m KS_LTM_REPS=2 KS_LTM_ENGINES=ours,ours+meta KS_LTM_DIR=/tmp/ks-meta-ltm nice -n 19 "$1" --bench
cat /proc/loadavg
