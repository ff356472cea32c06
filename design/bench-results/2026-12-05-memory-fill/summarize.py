#!/usr/bin/env python3
"""Summarizes rounds/*.txt (one `many_operators` part 2 row each): per variant and purge delay, the median and
range of load CPU, mix CPU, load and mix throughput and the peak ratio. Usage: summarize.py ROUNDS_DIR"""
import glob, os, re, statistics, sys

rows = {}
for path in sorted(glob.glob(os.path.join(sys.argv[1], "r*-*.txt"))):
    m = re.match(r"r(\d+)-(\w+)-p(\d+)\.txt", os.path.basename(path))
    for line in open(path):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) > 12 and cells[0] == m.group(2):
            rows.setdefault((m.group(2), int(m.group(3))), []).append({
                "round": int(m.group(1)),
                "load_kps": float(cells[4].split()[0]), "load_cpu": float(cells[5].split()[0]),
                "mix_kps": float(cells[6].split()[0]), "mix_cpu": float(cells[7].split()[0]),
                "peak": float(cells[11]), "ratio": cells[12], "stalls": cells[15]})

def fmt(vals):
    if len(vals) == 1:
        return f"{vals[0]:.1f}"
    return f"{statistics.median(vals):.1f} ({min(vals):.1f}–{max(vals):.1f})"

print("| variant | purge delay (ms) | runs | load CPU (s) | mix CPU (s) | load + mix CPU (s) | load k puts/s | mix k ops/s | peak RssAnon (MiB) | peak / (budget + before) | write stalls |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for (variant, delay), rs in sorted(rows.items()):
    print(f"| {variant} | {delay} | {len(rs)} | {fmt([r['load_cpu'] for r in rs])} | {fmt([r['mix_cpu'] for r in rs])} | "
          f"{fmt([r['load_cpu'] + r['mix_cpu'] for r in rs])} | {fmt([r['load_kps'] for r in rs])} | "
          f"{fmt([r['mix_kps'] for r in rs])} | {fmt([r['peak'] for r in rs])} | {', '.join(r['ratio'] for r in rs)} | "
          f"{', '.join(r['stalls'] for r in rs)} |")
