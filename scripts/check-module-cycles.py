#!/usr/bin/env python3
"""Fails when the modules of a crate depend on each other in a cycle.

The rule (design/architecture.md, "Module dependencies"): at every level of a crate's module tree, the
dependency graph between sibling modules is acyclic. A module with children counts, seen from its siblings,
as one node (itself and everything below it); seen from its children, its own file is one more node.

What is a dependency: a path that names an item of another module (`crate::a::b::f`, `super::x::T`,
`self::c::g`, and the trees of `use` declarations), outside comments, string literals and `#[cfg(test)]`
items (test-only references do not count). A module's `pub use` of its own descendants (a re-export) is not a
dependency on them. Everything else is, including a parent's own code calling into a child.

Usage: scripts/check-module-cycles.py [SRC_DIR ...]   (default: every crate's src/ in the workspace)
Prints each cycle as `level: a -> b -> a` with one reference per edge, and exits 1 if there is any.
"""

import os
import re
import sys
from collections import defaultdict

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def strip_comments_and_strings(text):
    """Replaces comments, string and char literals by spaces (line structure kept)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "r" and re.match(r'r#*"', text[i:i + 10]) and (i == 0 or not re.match(r"[A-Za-z0-9_]", text[i - 1])):
            m = re.match(r'r(#*)"', text[i:])
            close = '"' + m.group(1)
            j = text.find(close, i + len(m.group(0)))
            j = n if j < 0 else j + len(close)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == '"' or (c == "b" and text.startswith('b"', i)):
            j = i + (2 if c == "b" else 1)
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "'":
            # A char literal ('a', '\n', '\u{1F}'), not a lifetime ('a).
            m = re.match(r"'(\\.|\\u\{[0-9a-fA-F]+\}|[^\\'])'", text[i:])
            if m:
                out.append(" " * len(m.group(0)))
                i += len(m.group(0))
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def matching_brace(text, open_at):
    depth = 0
    for j in range(open_at, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return len(text) - 1


TEST_CFG = re.compile(r"#\[cfg\((test|all\(test[^\]]*\)|any\(test\)|loom|all\(loom[^\]]*\))\)\]")


def strip_test_items(text):
    """Removes items under #[cfg(test)] (and loom-only cfgs): inline modules, functions, impls, uses."""
    out, pos = [], 0
    for m in TEST_CFG.finditer(text):
        if m.start() < pos:
            continue
        out.append(text[pos:m.start()])
        j = m.end()
        # Skip further attributes, then the item: up to `;` or a braced block, whichever comes first.
        while True:
            rest = text[j:]
            a = re.match(r"\s*#\[[^\]]*\]", rest)
            if not a:
                break
            j += a.end()
        semi = text.find(";", j)
        brace = text.find("{", j)
        if brace >= 0 and (semi < 0 or brace < semi):
            end = matching_brace(text, brace) + 1
        else:
            end = (semi + 1) if semi >= 0 else len(text)
        out.append(re.sub(r"[^\n]", " ", text[m.start():end]))
        pos = end
    out.append(text[pos:])
    return "".join(out)


def test_only_children(text):
    """Names of child modules declared under a test-only cfg (`#[cfg(test)] mod tests;`)."""
    names = set()
    for m in re.finditer(r"(#\[[^\]]*\]\s*)+(pub(\([^)]*\))?\s+)?mod\s+(" + IDENT + r")\s*;", text):
        if TEST_CFG.search(m.group(0)):
            names.add(m.group(4))
    return names


def parse_use_tree(s):
    """Expands a use tree (`crate::{a::{b, c}, d as e}`) into full paths (lists of segments)."""
    toks = re.findall(IDENT + r"|::|[{},*]", s)
    pos = [0]
    paths = []

    def peek():
        return toks[pos[0]] if pos[0] < len(toks) else None

    def tree(prefix):
        segs = list(prefix)
        while True:
            t = peek()
            if t == "{":
                pos[0] += 1
                while peek() not in (None, "}"):
                    tree(segs)
                    if peek() == ",":
                        pos[0] += 1
                pos[0] += 1
                return
            if t is None or t in (",", "}"):
                break
            if t == "*":
                pos[0] += 1
                break
            if t == "::":
                pos[0] += 1
                continue
            if t == "as":
                pos[0] += 2
                break
            segs.append(t)
            pos[0] += 1
        paths.append(segs)

    while peek() is not None:
        tree([])
        if peek() == ",":
            pos[0] += 1
        elif peek() is not None and peek() not in ("{",):
            pos[0] += 1
    return paths


USE = re.compile(r"(?P<vis>\bpub(\([^)]*\))?\s+)?\buse\s+(?P<tree>[^;]+);")
PATH = re.compile(r"(?<![A-Za-z0-9_:])((?:crate|super|self)(?:::" + IDENT + r")+)")


class Crate:
    def __init__(self, src):
        self.src = src
        self.modules = {}  # tuple path -> file
        root = "lib.rs" if os.path.exists(os.path.join(src, "lib.rs")) else "main.rs"
        self.load(os.path.join(src, root), ())

    def load(self, file, path):
        self.modules[path] = file
        text = open(file, encoding="utf-8").read()
        skip = test_only_children(text)
        base = os.path.dirname(file) if os.path.basename(file) in ("lib.rs", "main.rs", "mod.rs") else file[:-3]
        for m in re.finditer(r"(?:#\[path\s*=\s*\"([^\"]+)\"\]\s*)?(?:pub(?:\([^)]*\))?\s+)?\bmod\s+(" + IDENT + r")\s*;", text):
            name = m.group(2)
            if name in skip:
                continue
            if m.group(1):
                child = os.path.join(os.path.dirname(file), m.group(1))
            else:
                a, b = os.path.join(base, name + ".rs"), os.path.join(base, name, "mod.rs")
                child = a if os.path.exists(a) else b
            if os.path.exists(child):
                self.load(child, path + (name,))

    def resolve(self, here, segs):
        """The deepest module a path names, as a tuple, or None for paths outside the crate."""
        if not segs:
            return None
        if segs[0] == "crate":
            cur, rest = (), segs[1:]
        elif segs[0] in ("super", "self"):
            cur, rest = here, segs
            while rest and rest[0] in ("super", "self"):
                if rest[0] == "super":
                    cur = cur[:-1]
                rest = rest[1:]
        elif (here + (segs[0],)) in self.modules:
            cur, rest = here, segs  # a child module named without `self::`
        else:
            return None
        for s in rest:
            if cur + (s,) in self.modules:
                cur = cur + (s,)
            else:
                break
        return cur

    def references(self):
        """(from module, to module, reexport?, text) for every reference between distinct modules."""
        refs = []
        for path, file in self.modules.items():
            text = strip_test_items(strip_comments_and_strings(open(file, encoding="utf-8").read()))
            spans = []
            for m in USE.finditer(text):
                spans.append((m.start(), m.end()))
                reexport = bool(m.group("vis"))
                for segs in parse_use_tree(m.group("tree")):
                    to = self.resolve(path, segs)
                    if to is not None and to != path:
                        refs.append((path, to, reexport, "use " + "::".join(segs)))
            for m in PATH.finditer(text):
                if any(a <= m.start() < b for a, b in spans):
                    continue
                segs = m.group(1).split("::")
                to = self.resolve(path, segs)
                if to is not None and to != path:
                    refs.append((path, to, False, m.group(1)))
        return refs


def edges_by_level(crate):
    """level (module tuple) -> {(node, node): example}; nodes are child names or '<self>'."""
    levels = defaultdict(dict)
    for a, b, reexport, what in crate.references():
        k = 0
        while k < min(len(a), len(b)) and a[k] == b[k]:
            k += 1
        level = a[:k]
        if len(a) == k and reexport:
            continue  # a module re-exporting its descendants
        na = a[k] if len(a) > k else "<self>"
        nb = b[k] if len(b) > k else "<self>"
        if na != nb:
            levels[level].setdefault((na, nb), "%s: %s" % (crate.modules[a], what))
    return levels


def cycles(edges):
    """The strongly connected components with more than one node (Tarjan)."""
    graph = defaultdict(set)
    for a, b in edges:
        graph[a].add(b)
        graph.setdefault(b, set())
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    dirs = sys.argv[1:]
    if not dirs:
        dirs = [os.path.join(root, "src")]
        for group in ("crates", "hosts"):
            g = os.path.join(root, group)
            if os.path.isdir(g):
                dirs += [os.path.join(g, d, "src") for d in sorted(os.listdir(g)) if os.path.isdir(os.path.join(g, d, "src"))]
    found = 0
    for d in dirs:
        crate = Crate(d)
        for level, edges in sorted(edges_by_level(crate).items()):
            for comp in cycles(edges):
                found += 1
                name = "::".join(level) or "<crate root>"
                print("cycle in %s at %s: %s" % (os.path.relpath(d, root), name, " <-> ".join(comp)))
                for (a, b), ex in sorted(edges.items()):
                    if a in comp and b in comp:
                        print("    %s -> %s   (%s)" % (a, b, os.path.relpath(ex, root) if os.path.isabs(ex) else ex))
        print("%s: %d modules checked" % (os.path.relpath(d, root), len(crate.modules)))
    if found:
        print("%d module cycle(s): see design/architecture.md, \"Module dependencies\"" % found)
        return 1
    print("no module cycles")
    return 0


if __name__ == "__main__":
    sys.exit(main())
