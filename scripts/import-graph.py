#!/usr/bin/env python3
"""The import graph of each crate's modules, drawn from its `crate::`, `super::` and `self::` paths
(in `use` lines and in code, tests included).

A module is a top-level file or directory under the crate's `src/`. Prints every module and the
modules it imports, then fails (exit 1) on:
- a circle between modules, or between the children (files, directories) of one directory module,
  at any depth (`backend/crypt/wide.rs` <-> `backend/crypt/xts.rs` is a circle in `backend/crypt`);
- more than one arrow running against the crate's layer order declared below (an arrow between
  modules of one layer runs sideways and is allowed; a module missing from the order fails).

Usage: scripts/import-graph.py [-v|-q]   (-v: the arrows inside directory modules too;
                                          -q: only what fails)
"""

import os
import re
import sys

# Bottom to top; modules in one tuple are one layer. `None`: circles are checked, not the order.
LAYERS = {
    "crates/vbmq/src": [
        # Files beside an image: how they are opened, and which ones the process uses.
        ("own_files", "held_files"),
        # Helpers to the side of everything: log rate limits, clocks, socket files, systemd,
        # the process's confinement.
        ("log_limit", "timer", "socket_files", "systemd", "confine", "passed_fds"),
        # Guest memory: the memory table, its fault guard, the dirty log, the in-flight record.
        ("guest",),
        # I/O limits, shared by the device (its buckets) and the queue core (the waits).
        ("limits",),
        # The NBD protocol: its wire format and a server over an export trait.
        ("nbd",),
        # The storage engines.
        ("backend",),
        # The device-neutral queue core: the loop, waiting, CPU pinning and the shared per-CPU
        # threads, ring checks, statistics; each device plugs its handler in.
        ("worker",),
        # The device models and their queue handlers: virtio-blk, virtio-fs.
        ("virtio_blk", "virtio_fs"),
        # The vhost-user transport: the protocol glue and the socket servers.
        ("vhost_user",),
        # The specs the command line and the configuration file give.
        ("config",),
        # Building a disk or a share from its spec.
        ("devices",),
        # The running devices: the disks and shares the control plane lists, adds and removes.
        ("host",),
        # The `serve` command.
        ("serve",),
        # Test support and the fuzz targets' bodies, over everything.
        ("test_utils",),
    ],
    "crates/vbmq-bench/src": None,
    "crates/vbmq-driver/src": None,
    "src": None,
}
BACK_ARROWS_ALLOWED = 1

PATH = re.compile(r"(?<![\w$:])(crate|super|self)\s*::")
INLINE_MOD = re.compile(r"\bmod\s+(\w+)\s*\{")
STRING = re.compile(r'b?(?:r(#*))?"')
CHAR = re.compile(r"'(\\\\(u\\{[0-9a-fA-F]+\\}|x[0-9a-fA-F]{2}|.)|[^\\\\'])'")
IDENT = re.compile(r"[A-Za-z_]\w*|\*")


def strip(text):
    """`text` with comments, strings and char literals blanked (newlines kept)."""
    out, i, n = [], 0, len(text)
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
        elif (m := STRING.match(text, i)) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            if m.group(1) is not None:  # raw: ends at the quote and as many #s
                end = text.find('"' + m.group(1), m.end())
                j = n if end < 0 else end + 1 + len(m.group(1))
            else:
                j = m.end()
                while j < n and text[j] != '"':
                    j += 2 if text[j] == "\\" else 1
                j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "'" and (m := CHAR.match(text, i)):
            out.append(" " * (m.end() - i))
            i = m.end()
        else:
            out.append(c)
            i += 1
    return "".join(out)


def skip_ws(text, i):
    while i < len(text) and text[i].isspace():
        i += 1
    return i


def parse_tree(text, i):
    """The paths of the use tree (or code path) at `i`: lists of segments, each with its alias."""
    segments = []
    while True:
        i = skip_ws(text, i)
        if text.startswith("{", i):
            paths, i = [], i + 1
            while True:
                i = skip_ws(text, i)
                if text.startswith("}", i):
                    return [(segments + p, a) for p, a in paths], i + 1
                sub, i = parse_tree(text, i)
                paths.extend(sub)
                i = skip_ws(text, i)
                if text.startswith(",", i):
                    i += 1
                elif not text.startswith("}", i):
                    return [(segments + p, a) for p, a in paths], i
        m = IDENT.match(text, i)
        if not m:
            return ([(segments, None)] if segments else []), i
        segments.append(m.group())
        i = skip_ws(text, m.end())
        if text.startswith("::", i):
            i += 2
            continue
        alias = re.match(r"as\s+(\w+)", text[i:])
        if alias:
            return [(segments, alias.group(1))], i + alias.end()
        return [(segments, None)], i


def inline_mod_spans(text):
    """(start, end, name) of every `mod name { ... }` in stripped `text`."""
    spans = []
    for m in INLINE_MOD.finditer(text):
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        spans.append((m.start(), j, m.group(1)))
    return spans


def module_path(rel):
    """The module path of a file relative to `src/`: `a/b.rs` and `a/b/mod.rs` are [a, b]."""
    parts = rel[:-3].split(os.sep)
    if parts[-1] in ("mod", "lib", "main") and (parts[-1] == "mod" or len(parts) == 1):
        parts = parts[:-1]
    return parts


def references(src):
    """Every resolved path in the crate at `src`: (file, line, from module path, to path)."""
    found = []
    for dirpath, _, files in os.walk(src):
        for name in sorted(files):
            if not name.endswith(".rs"):
                continue
            file = os.path.join(dirpath, name)
            with open(file, encoding="utf-8") as f:
                text = strip(f.read())
            base = module_path(os.path.relpath(file, src))
            spans = inline_mod_spans(text)
            for m in PATH.finditer(text):
                inner = [s[2] for s in spans if s[0] < m.start() < s[1]]
                here = base + inner
                for segments, alias in parse_tree(text, m.start())[0]:
                    target = resolve(here, segments)
                    if target:
                        line = text.count("\n", 0, m.start()) + 1
                        found.append((file, line, here, target, alias))
    return found


def resolve(here, segments):
    if not segments:
        return None
    if segments[0] == "crate":
        path = segments[1:]
    elif segments[0] == "self":
        path = here + segments[1:]
    elif segments[0] == "super":
        up = 0
        while up < len(segments) and segments[up] == "super":
            up += 1
        if up > len(here):
            return None
        path = here[: len(here) - up] + segments[up:]
    else:
        return None
    return [s for s in path if s != "self"] or None


def children(src, module):
    """The files and directories of the directory module at path `module` (a list), by name."""
    d = os.path.join(src, *module)
    if not os.path.isdir(d):
        return set()
    return {n[:-3] if n.endswith(".rs") else n for n in os.listdir(d)
            if n not in ("mod.rs", "lib.rs", "main.rs") and (n.endswith(".rs") or
                                                           os.path.isdir(os.path.join(d, n)))}


def reexports(src, module):
    """The names the module at path `module` re-exports (`pub use`), each with the absolute path
    it stands for. The module's own file is `mod.rs` in its directory, `lib.rs`/`main.rs` at the
    crate root, or the `.rs` file beside its directory."""
    names = {}
    files = [os.path.join(src, *module, r) for r in ("mod.rs", "lib.rs", "main.rs")]
    if module:
        files.append(os.path.join(src, *module[:-1], module[-1] + ".rs"))
    for file in files:
        if not os.path.isfile(file):
            continue
        with open(file, encoding="utf-8") as f:
            text = strip(f.read())
        for m in re.finditer(r"\bpub(\([\w\s]+\))?\s+use\s+", text):
            for segments, alias in parse_tree(text, m.end())[0]:
                if not segments or segments[-1] == "*":
                    continue
                if segments[0] in ("crate", "super", "self"):
                    target = resolve(module, segments)
                else:
                    target = module + segments
                if target:
                    names[alias or segments[-1]] = target
    return names


class Tree:
    """The crate's directory modules, their children and their re-exports, read once each."""

    def __init__(self, src):
        self.src, self.kids, self.names = src, {}, {}

    def children(self, module):
        key = tuple(module)
        if key not in self.kids:
            self.kids[key] = children(self.src, module)
        return self.kids[key]

    def reexports(self, module):
        key = tuple(module)
        if key not in self.names:
            self.names[key] = reexports(self.src, module)
        return self.names[key]


def arrow(tree, here, path):
    """The arrow a reference from module `here` to `path` draws: (the directory module both lie
    in, the child holding `here`, the child holding `path`), or None when both lie in one file or
    the path leaves the crate. A re-exported name stands for the path it re-exports, so the
    arrow ends where the item is defined, however deep."""
    level = []
    for _ in range(64):  # re-exports of re-exports, bounded
        k = len(level)
        if k >= len(here) or k >= len(path):
            return None
        kids = tree.children(level)
        if not kids:
            return None
        name = path[k]
        if name not in kids:
            target = tree.reexports(level).get(name)
            if not target or target[:k] != level or len(target) <= k:
                return None
            path = target + path[k + 1:]
            continue
        if here[k] not in kids:  # an inline module of the directory's own file
            return None
        if here[k] != name:
            return level, here[k], name
        level = level + [name]
    return None


def graph(src):
    """Arrows between modules, and between the children of each directory module, at any depth
    (`backend/crypt/wide.rs` -> `backend/crypt/xts.rs` is an arrow in `backend/crypt`)."""
    tree = Tree(src)
    modules = sorted(tree.children([]))
    arrows, inner = {}, {}
    for file, line, here, path, _ in references(src):
        found = arrow(tree, here, path)
        if not found:
            continue
        level, a, b = found
        where = f"{file}:{line}"
        if not level:
            arrows.setdefault((a, b), []).append(where)
        else:
            inner.setdefault("/".join(level), {}).setdefault((a, b), []).append(where)
    return modules, arrows, inner


def circles(nodes, arrows):
    """The strongly connected components of more than one node (Tarjan)."""
    out = {n: sorted(b for a, b in arrows if a == n) for n in nodes}
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in out.get(v, []):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for n in sorted(nodes):
        if n not in index:
            visit(n)
    return found


def show_circle(prefix, component, arrows, root):
    """Prints the shortest circles through each node of a strongly connected component."""
    shown = set()
    for start in component:
        paths, seen = [[start]], {start}
        while paths:
            path = paths.pop(0)
            nxt = sorted(b for a, b in arrows if a == path[-1] and b in component)
            if start in nxt:
                cycle = path + [start]
                key = frozenset(zip(cycle, cycle[1:]))
                if key not in shown:
                    shown.add(key)
                    where = [os.path.relpath(arrows[(a, b)][0], root) for a, b in zip(cycle, cycle[1:])]
                    print(f"  circle: {' -> '.join(prefix + n for n in cycle)}  ({'; '.join(where)})")
                break
            for b in nxt:
                if b not in seen:
                    seen.add(b)
                    paths.append(path + [b])


def main():
    verbose = "-v" in sys.argv[1:]
    quiet = "-q" in sys.argv[1:]
    say = (lambda *_: None) if quiet else print
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    failures = []
    for crate, layers in LAYERS.items():
        src = os.path.join(root, crate)
        modules, arrows, inner = graph(src)
        layer = {m: i for i, group in enumerate(layers or []) for m in group}
        say(f"{crate}: {len(modules)} modules, {len(arrows)} arrows")
        if layers:
            for m in modules:
                if m not in layer:
                    failures.append(f"{crate}: module {m} is not in the layer order")
            for m in layer:
                if m not in modules:
                    failures.append(f"{crate}: the layer order names {m}, which is gone")
            modules = sorted(modules, key=lambda m: (layer.get(m, len(layers)), m))
        back = []
        for m in modules:
            to = sorted((b for a, b in arrows if a == m), key=lambda b: (layer.get(b, 0), b))
            marks = []
            for b in to:
                up = layers and layer.get(b, -1) > layer.get(m, -1)
                marks.append(b + (" (BACK UP)" if up else ""))
                if up:
                    back.append((m, b))
            where = f"[{layer[m]}] " if m in layer else ""
            say(f"  {where}{m} -> {', '.join(marks) if marks else '-'}")
        for a, b in back:
            print(f"  back up: {a} -> {b}, from {os.path.relpath(arrows[(a, b)][0], root)}")
        if len(back) > BACK_ARROWS_ALLOWED:
            failures.append(f"{crate}: {len(back)} arrows run back up (at most "
                            f"{BACK_ARROWS_ALLOWED})")
        for c in circles(modules, arrows):
            failures.append(f"{crate}: circle between {', '.join(c)}")
            show_circle("", c, arrows, root)
        for module, edges in sorted(inner.items()):
            nodes = {n for e in edges for n in e}
            if verbose:
                for (a, b) in sorted(edges):
                    say(f"    {module}/{a} -> {module}/{b}")
            for c in circles(nodes, edges):
                failures.append(f"{crate}: circle in {module}/ between {', '.join(c)}")
                show_circle(module + "/", c, edges, root)
    for f in failures:
        print(f"import-graph: {f}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
