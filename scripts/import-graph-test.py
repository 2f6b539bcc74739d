#!/usr/bin/env python3
"""Checks scripts/import-graph.py against small made-up crates: a circle between the files of a
nested directory module (`a/b/x.rs` <-> `a/b/y.rs`) and one through a re-export are found; a
crate without a circle has none. Run by scripts/test.sh; exit 1 on a failed check."""

import importlib.util
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SPEC = importlib.util.spec_from_file_location("import_graph", os.path.join(HERE, "import-graph.py"))
graph_module = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(graph_module)


def crate(files):
    """A crate's `src/` in a temporary directory, from {relative path: text}."""
    src = tempfile.mkdtemp(prefix="import-graph-test-")
    for path, text in files.items():
        os.makedirs(os.path.dirname(os.path.join(src, path)), exist_ok=True)
        with open(os.path.join(src, path), "w", encoding="utf-8") as f:
            f.write(text)
    return src


def inner_circles(src):
    _, _, inner = graph_module.graph(src)
    return {m: graph_module.circles({n for e in edges for n in e}, edges)
            for m, edges in inner.items()}


def main():
    failures = []
    nested = crate({
        "lib.rs": "mod a;\n",
        "a/mod.rs": "mod b;\n",
        "a/b/mod.rs": "mod x;\nmod y;\n",
        "a/b/x.rs": "use super::y::Y;\npub struct X;\n",
        "a/b/y.rs": "use crate::a::b::x::X;\npub struct Y;\n",
    })
    if inner_circles(nested).get("a/b") != [["x", "y"]]:
        failures.append(f"a/b/x.rs <-> a/b/y.rs not found: {inner_circles(nested)}")
    reexported = crate({
        "lib.rs": "mod a;\n",
        "a/mod.rs": "mod b;\npub use b::x::X;\n",
        "a/b/mod.rs": "pub mod x;\nmod y;\n",
        "a/b/x.rs": "use super::y::Y;\npub struct X;\n",
        "a/b/y.rs": "use crate::a::X;\npub struct Y;\n",
    })
    if inner_circles(reexported).get("a/b") != [["x", "y"]]:
        failures.append(f"the circle through a re-export not found: {inner_circles(reexported)}")
    clean = crate({
        "lib.rs": "mod a;\n",
        "a/mod.rs": "mod b;\n",
        "a/b/mod.rs": "mod x;\nmod y;\n",
        "a/b/x.rs": "use super::y::Y;\npub struct X;\n// crate::a::b::x in a comment\n",
        "a/b/y.rs": "pub struct Y;\nfn f() { let _ = \"super::x\"; }\n",
    })
    if any(inner_circles(clean).values()):
        failures.append(f"a circle found where there is none: {inner_circles(clean)}")
    for f in failures:
        print(f"import-graph-test: {f}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
