#!/usr/bin/env python3
"""Prints, per mode and op, the LSM+cache / heap ratio by thread CPU time of every run of two binaries.

Usage: summary.py [DIR [A B]]: the `<mode>-<binary>-run<n>.txt` files of DIR (default: this folder), binaries A
and B (default: base, new). The review's A/B: `summary.py after-review prev fix`.
"""
import glob, os, re, sys
from collections import defaultdict
here = os.path.dirname(os.path.abspath(__file__))
folder = os.path.join(here, sys.argv[1]) if len(sys.argv) > 1 else here
a, b = sys.argv[2:4] if len(sys.argv) > 3 else ("base", "new")
ratios = defaultdict(lambda: defaultdict(list))
ops, modes = [], []
for f in sorted(glob.glob(os.path.join(folder, "*-run*.txt"))):
    mode, binary, run = re.match(r"(\w+)-(\w+)-run(\d+)\.txt", os.path.basename(f)).groups()
    if mode not in modes:
        modes.append(mode)
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
for mode in [m for m in ["dirty", "held", "clean"] if m in modes]:
    print(f"## {mode}: LSM+cache / heap by CPU, each run ({a} | {b})")
    for op in ops:
        r = ratios.get((mode, op))
        if r:
            print(f"| {op} | {', '.join(r[a])} | {', '.join(r[b])} |")
