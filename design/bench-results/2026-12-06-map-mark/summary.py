#!/usr/bin/env python3
"""Prints, per mode and op, the LSM+cache / heap ratio by thread CPU time of every run of base and new."""
import glob, os, re, sys
from collections import defaultdict
here = os.path.dirname(os.path.abspath(__file__))
ratios = defaultdict(lambda: defaultdict(list))
ops = []
for f in sorted(glob.glob(os.path.join(here, "*-run*.txt"))):
    mode, binary, run = re.match(r"(\w+)-(\w+)-run(\d+)\.txt", os.path.basename(f)).groups()
    cpu = False
    for line in open(f):
        if line.startswith("## Throughput") and "CPU" in line:
            cpu = True
        elif line.startswith("##"):
            cpu = False
        elif cpu and line.startswith("| map"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            op = cells[0]
            if op not in ops:
                ops.append(op)
            ratios[(mode, op)][binary].append(cells[5])
for mode in ["dirty", "held", "clean"]:
    print(f"## {mode}: LSM+cache / heap by CPU, each run (base | new)")
    for op in ops:
        r = ratios.get((mode, op))
        if r:
            print(f"| {op} | {', '.join(r['base'])} | {', '.join(r['new'])} |")
