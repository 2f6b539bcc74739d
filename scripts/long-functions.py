#!/usr/bin/env python3
"""List the production functions of crates/ longer than a limit (default 120 lines).

A function runs from its `fn` line to the first line that closes it at the same indentation,
both counted. Test code is left out: files named `tests.rs` or `*_tests.rs`, `test_utils/`,
`benches/`, and everything from a file's first `#[cfg(test)]` on. Exits 1 when any is found.
Usage: scripts/long-functions.py [--limit N] [ROOT]   (ROOT defaults to crates/)
"""
import os
import re
import sys

FN = re.compile(r'^(\s*)(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?(extern\s+"[^"]*"\s+)?fn\s+(\w+)')


def is_test_path(path):
    name = os.path.basename(path)
    parts = path.split(os.sep)
    return (name == 'tests.rs' or name.endswith('_tests.rs') or 'test_utils' in parts
            or 'benches' in parts or 'tests' in parts)


def long_functions(path, limit):
    with open(path, encoding='utf-8') as f:
        lines = f.read().split('\n')
    for i, line in enumerate(lines):
        if line.strip().startswith('#[cfg(test)]'):
            lines = lines[:i]
            break
    found = []
    for start, line in enumerate(lines):
        m = FN.match(line)
        if not m or line.rstrip().endswith(';'):
            continue
        indent = m.group(1)
        for end in range(start, len(lines)):
            if lines[end] == indent + '}' or (end == start and line.rstrip().endswith('}')):
                length = end - start + 1
                if length > limit:
                    found.append((length, path, start + 1, m.group(8)))
                break
    return found


def main():
    args = sys.argv[1:]
    limit = 120
    if args[:1] == ['--limit']:
        limit = int(args[1])
        args = args[2:]
    root = args[0] if args else os.path.join(os.path.dirname(__file__), '..', 'crates')
    found = []
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(folder, name)
            if name.endswith('.rs') and not is_test_path(os.path.relpath(path, root)):
                found += long_functions(path, limit)
    for length, path, line, name in sorted(found, reverse=True):
        print(f'{length:5} {os.path.relpath(path)}:{line} {name}')
    print(f'{len(found)} production functions over {limit} lines')
    return 1 if found else 0


if __name__ == '__main__':
    sys.exit(main())
