#!/usr/bin/env python3
"""Tabulates the checkpoint phase of every run in a results folder (rN-{before,after}.err/.txt): the trace's
maxima during phase 2, the profile line at the checkpoint's peak RssAnon, and the phase's wall and CPU time."""
import glob, os, re, sys

d = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
num = lambda pat, s: float(re.search(pat, s).group(1)) if re.search(pat, s) else float("nan")
print("| run | checkpoint wall (s) | checkpoint CPU (s) | max charged (MiB) | max reserved (MiB) | max live heap (MiB) | max RssAnon (MiB) | at the peak: RssAnon / charged / live (MiB) | RssAnon after (MiB) | whole-run peak / (budget + before) |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for err in sorted(glob.glob(os.path.join(d, "r*-*.err"))):
    run = os.path.basename(err)[:-4]
    e = open(err).read()
    txt = open(err[:-4] + ".txt").read() if os.path.exists(err[:-4] + ".txt") else ""
    ph2 = [l for l in e.splitlines() if l.startswith("trace") and " phase 2 " in l]
    mx = lambda pat: max((num(pat, l) for l in ph2), default=float("nan"))
    peak = next((l for l in e.splitlines() if "at the peak RssAnon of the checkpoint" in l), "")
    ck = re.search(r"checkpoint phase ([\d.]+) s wall, ([\d.]+) s CPU", e)
    ratio = re.search(r"\| shared \|.*", txt)
    cols = ratio.group(0).split("|") if ratio else []
    print("| %s | %s | %s | %.1f | %.1f | %.1f | %.1f | %.1f / %.1f / %.1f | %.1f | %s |" % (
        run, ck.group(1) if ck else "-", ck.group(2) if ck else "-",
        mx(r"charged ([\d.]+) MiB"), mx(r"reserved ([\d.]+)\)"), mx(r"live ([\d.]+) MiB"),
        mx(r"RssAnon ([\d.]+) MiB"),
        num(r"checkpoint: ([\d.]+) MiB", peak), num(r"charged ([\d.]+) MiB", peak), num(r"live heap ([\d.]+) MiB", peak),
        num(r"RssAnon ([\d.]+) MiB", ph2[-1]) if ph2 else float("nan"),
        cols[13].strip() if len(cols) > 13 else "-"))
