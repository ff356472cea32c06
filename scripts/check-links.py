#!/usr/bin/env python3
"""Fails on a reference to a file the repository does not hold.

Checked:
  * README.md, CHANGELOG.md, UNSAFE.md (if present) and design/**/*.md:
    - every markdown link `[text](target)` and `[label]: target` that is not a URL or an anchor, resolved
      against the page's own folder (as a repository browser resolves it);
    - every inline code span that names a repository path (`design/x.md`, `tests/...`, `scripts/...`,
      `src/...`, `crates/...`, a bare `x.md`), resolved against the page's folder, the repository root
      or design/. Brace lists (`src/{a,b}.rs`) expand; `*` globs must match something; a `:LINE` or `::item`
      suffix is ignored. Fenced code blocks are commands, not references, and are skipped.
  * *.rs, *.toml and *.sh files (and .ci/run): every `something.md` and every `design/...` path they
    mention, resolved against the repository root, design/ or the file's folder.

Pages under design/bench-results/ are records of a run: their links and their references to other pages are
checked, but not the source paths they name (`src/...`, `tests/...`), which describe the code at the run's
commit.

Usage: scripts/check-links.py [REPO_ROOT]     exit status 1 and one line per dead reference if any.
"""

import glob
import os
import re
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))

CODE_DIRS = ("src/", "tests/", "benches/", "examples/", "crates/", "fuzz/", "scripts/", ".ci/")
DOC_DIRS = ("design/", "bench-results/", "decisions/")
TOP_FILES = {"Cargo.toml", "Cargo.lock", "README.md", "CHANGELOG.md", "UNSAFE.md", "LICENSE", "rustfmt.toml"}
SKIP_DIRS = {".git", "target", "node_modules"}

LINK = re.compile(r"\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REF_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
DESIGN_PATH = re.compile(r"(?<![\w./${}-])(design/[\w./-]*[\w/])")
MD_IN_CODE = re.compile(r"(?<![\w./${}-])((?:\.\./)*[\w][\w./-]*\.md)\b")


def expand_braces(s):
    m = re.search(r"\{([^{}]*)\}", s)
    if not m:
        return [s]
    r = re.fullmatch(r"(\d+)\.\.(\d+)", m.group(1))
    alts = [str(i) for i in range(int(r.group(1)), int(r.group(2)) + 1)] if r else m.group(1).split(",")
    out = []
    for alt in alts:
        out.extend(expand_braces(s[: m.start()] + alt + s[m.end():]))
    return out


def exists(path):
    if any(c in path for c in "*?["):
        return bool(glob.glob(path))
    return os.path.exists(path)


def resolves(target, bases):
    return any(exists(os.path.normpath(os.path.join(b, t))) for t in expand_braces(target) for b in bases)


def looks_like_path(span, is_record):
    """The repository path an inline code span names, or None."""
    s = span.strip()
    if not s or " " in s or any(c in s for c in "<>$=\"'()") or "..." in s or "…" in s or "NNNN" in s:
        return None
    if s.startswith(("http://", "https://", "s3://", "/", "~")):
        return None
    s = s.split("::")[0]
    s = re.sub(r":[\w\-–]+$", "", s)  # file.rs:123, file.rs:L10
    s = re.sub(r"[,.;]$", "", s)
    bare = s
    while bare.startswith("../"):
        bare = bare[3:]
    if bare in TOP_FILES:
        return s
    if bare.startswith(DOC_DIRS):
        return s
    if bare.startswith(CODE_DIRS):
        return None if is_record else s
    if "/" not in bare and re.fullmatch(r"[\w][\w.-]*\.md", bare):
        return s
    return None


RAW_FILE = re.compile(r"[\w*{},.-]+(?:/[\w*{},.-]+)*\.(?:txt|err|log)")


def raw_file_held(name, here):
    """A raw output a record cites (`run1.txt`, `final/run*.txt`, `val{1,2}.err`, `ab-sb-N.txt`): somewhere
    under the record's folder, or under design/bench-results/ for a citation of another run's file."""
    results = os.path.join(ROOT, "design", "bench-results")
    for name in expand_braces(re.sub(r"(?<=[-a-z])N(?=\.)", "*", name)):
        if not any(glob.glob(os.path.join(top, "**", name), recursive=True) for top in (here, results)):
            return False
    return True


def check_markdown(path, problems):
    rel = os.path.relpath(path, ROOT)
    here = os.path.dirname(path)
    is_record = rel.startswith("design/bench-results/")
    fence = None
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    for n, line in enumerate(lines, 1):
        stripped = line.lstrip()
        m = re.match(r"(`{3,}|~{3,})", stripped)
        if m:
            if fence is None:
                fence = m.group(1)
            elif stripped.startswith(fence):
                fence = None
            continue
        if fence is not None:
            continue
        targets = [t for t in LINK.findall(line)]
        m = REF_DEF.match(line)
        if m:
            targets.append(m.group(1))
        for t in targets:
            if re.match(r"^[a-z][a-z0-9+.-]*:", t) or t.startswith("#"):
                continue
            t = t.split("#")[0]
            if t and not resolves(t, [here]):
                problems.append(f"{rel}:{n}: link to a missing file: {t}")
        # Inline code outside links' targets.
        for _, span in CODE_SPAN.findall(LINK.sub("", line)):
            p = looks_like_path(span, is_record)
            if p and not resolves(p, [here, ROOT, os.path.join(ROOT, "design")]):
                problems.append(f"{rel}:{n}: names a missing file: {p}")
            elif is_record and not p and RAW_FILE.fullmatch(span.strip()) and not raw_file_held(span.strip(), here):
                problems.append(f"{rel}:{n}: cites a raw output the folder does not hold: {span.strip()}")


def check_source(path, problems):
    rel = os.path.relpath(path, ROOT)
    here = os.path.dirname(path)
    with open(path, encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            for t in set(MD_IN_CODE.findall(line)) | set(DESIGN_PATH.findall(line)):
                if not resolves(t.rstrip("."), [ROOT, os.path.join(ROOT, "design"), here]):
                    problems.append(f"{rel}:{n}: names a missing file: {t}")


def walk(top):
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS]
        for name in filenames:
            yield os.path.join(dirpath, name)


def main():
    problems = []
    pages = [os.path.join(ROOT, p) for p in ("README.md", "CHANGELOG.md", "UNSAFE.md")]
    pages = [p for p in pages if os.path.exists(p)]
    pages += sorted(p for p in walk(os.path.join(ROOT, "design")) if p.endswith(".md"))
    for p in pages:
        check_markdown(p, problems)
    sources = [p for p in walk(ROOT) if p.endswith((".rs", ".toml", ".sh"))]
    sources += [p for p in [os.path.join(ROOT, ".ci", "run")] if os.path.exists(p)]
    for p in sorted(sources):
        check_source(p, problems)
    for line in problems:
        print(line)
    if problems:
        print(f"{len(problems)} dead reference(s)", file=sys.stderr)
        return 1
    print(f"links: {len(pages)} pages and {len(sources)} source files, no dead reference")
    return 0


if __name__ == "__main__":
    sys.exit(main())
