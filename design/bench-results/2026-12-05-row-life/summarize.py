#!/usr/bin/env python3
"""Ratios per round of compressible-shares-9afaa4c.txt (or the file named after the mode): each share's ops/s
against share 1/2 in the same round, median (min-max). `summarize.py` by wall time, `summarize.py cpu` by the
client thread's CPU time; `summarize.py cpu occupancy-0541e8a.txt` for that file's runs."""
import os, re, statistics as st, sys
from collections import defaultdict

CPU = len(sys.argv) > 1 and sys.argv[1] == "cpu"
NAME = sys.argv[2] if len(sys.argv) > 2 else "compressible-shares-9afaa4c.txt"
runs = defaultdict(dict)  # (keys, round, share) -> phase -> ops/s (flush_compact: seconds)
cur = None
for line in open(os.path.join(os.path.dirname(os.path.abspath(__file__)), NAME)):
    m = re.match(r"######## (\d+) keys, round (\d+), share ([0-9.]+)", line)
    if m:
        cur = m.groups()
        continue
    p = line.split()
    if cur and len(p) >= 6 and p[0] == "PHASE":
        name, ops, wall, cpu = p[1], float(p[2]), float(p[4]), float(p[5])
        t = cpu if CPU else wall
        runs[cur][name] = t if name in ("flush_compact", "checkpoint") else ops / t
phases = ["put", "get_uniform", "get_hot", "scan", "merge", "get_merged", "flush_compact"]
for keys in sorted({k for k, _, _ in runs}, key=int, reverse=True):
    rounds = sorted({r for k, r, _ in runs if k == keys}, key=int)
    print(f"\n### {keys} keys, {len(rounds)} rounds, {'client-thread CPU' if CPU else 'wall'}")
    print("| phase | 1/2: ops/s median (min-max) | 1/4 / 1/2 | 1/8 / 1/2 |\n|---|---|---|---|")
    for ph in phases:
        base = [runs[(keys, r, "0.5")][ph] for r in rounds]
        if ph == "flush_compact":
            cells = [f"{st.median(base):.2f} s ({min(base):.2f}-{max(base):.2f})"]
        else:
            cells = [f"{st.median(base)/1e3:.0f}k ({min(base)/1e3:.0f}-{max(base)/1e3:.0f})"]
        for s in ("0.25", "0.125"):
            rat = [runs[(keys, r, s)][ph] / runs[(keys, r, "0.5")][ph] for r in rounds]
            if ph == "flush_compact":
                rat = [1 / x for x in rat]  # > 1: faster
            cells.append(f"{st.median(rat):.2f} ({min(rat):.2f}-{max(rat):.2f})")
        print(f"| {ph} | " + " | ".join(cells) + " |")
