"""What the thrasher knows of each writer, from its lines, and the checks made with it."""

import bisect
import struct

BLOCK = 4096


def stamped_blocks(count, generation=0):
    """`count` blocks, block B holding (B, generation) repeated: a base image's content."""
    return b"".join(struct.pack("<QQ", b, generation) * (BLOCK // 16) for b in range(count))


def block_fits(data, block, low, high):
    """Whether `data` is what block `block` may hold: a generation from its last flushed one
    (`low`) to the last written (`high`); anything unstamped while nothing was flushed there
    (zeros, a base's bytes); anything torn while a write is outstanding. The client and the
    guest writer apply the same rule."""
    number, generation = struct.unpack_from("<QQ", data)
    uniform = data == data[:16] * (BLOCK // 16)
    stamped_here = uniform and number == block
    if stamped_here and low <= generation <= high:
        return True
    if low == 0 and not (stamped_here and generation > high):
        return True
    return not uniform and low < high


def check_snapshot(path, blocks, low, high):
    """A snapshot taken between two instants: each block holds at least what was flushed at
    the request (`low`) and at most what was written by the reply (`high`). Returns what is
    wrong, or None."""
    with open(path, "rb") as f:
        data = f.read(blocks * BLOCK)
    if len(data) < blocks * BLOCK:
        return f"{len(data)} bytes, expected at least {blocks * BLOCK}"
    for block in range(blocks):
        chunk = data[block * BLOCK:(block + 1) * BLOCK]
        lo, hi = low.get(block, 0), high.get(block, 0)
        if not block_fits(chunk, block, lo, hi):
            number, generation = struct.unpack_from("<QQ", chunk)
            return (f"block {block} holds ({number}, {generation}) where a generation in "
                    f"{lo}..={hi} was due")
    return None


def differing_blocks(first, second):
    """Blocks whose bytes differ between two files (a block past one file's end differs)."""
    with open(first, "rb") as a, open(second, "rb") as b:
        x, y = a.read(), b.read()
    count = max(len(x), len(y)) // BLOCK
    return {i for i in range(count) if x[i * BLOCK:(i + 1) * BLOCK] != y[i * BLOCK:(i + 1) * BLOCK]}


class Writer:
    def __init__(self):
        self.flushed = {}  # block -> generation of its last flushed write
        self.written = {}  # block -> generation of its last write submitted
        self.rounds = {}  # generation -> its blocks, until flushed
        self.progress = []  # monotonic times of flushed rounds
        self.drops = []  # monotonic times its frontend closed the connection on request
        self.connects = []  # monotonic times it connected and read every block back


class Ledger:
    """Per writer: what it wrote and flushed, and when it made progress."""

    def __init__(self):
        self.writers = {}

    def _w(self, name):
        return self.writers.setdefault(name, Writer())

    def written(self, name, generation, blocks):
        w = self._w(name)
        w.rounds[generation] = blocks
        for b in blocks:
            w.written[b] = generation

    def flushed(self, name, generation, now):
        w = self._w(name)
        for b in w.rounds.pop(generation, []):
            w.flushed[b] = generation
        w.progress.append(now)

    def failed(self, name, now):
        self._w(name)

    def disconnected(self, name, now, why):
        if why == "dropped":
            self._w(name).drops.append(now)

    def connected(self, name, now):
        self._w(name).connects.append(now)

    def reconnected_after_drop(self, name, drops):
        """Whether `name` dropped more than `drops` times and connected again after the last."""
        w = self._w(name)
        return len(w.drops) > drops and bool(w.connects) and w.connects[-1] > w.drops[-1]

    def last_connect(self, name):
        connects = self._w(name).connects
        return connects[-1] if connects else 0.0

    def unflushed(self, name):
        """Whether `name` has a round written and not yet flushed."""
        return bool(self._w(name).rounds)

    def drops(self, name):
        return len(self._w(name).drops)

    def flushed_map(self, name):
        return dict(self._w(name).flushed)

    def written_map(self, name):
        return dict(self._w(name).written)

    def rounds(self, name):
        return len(self._w(name).progress)

    def total_rounds(self):
        return sum(len(w.progress) for w in self.writers.values())

    def last_progress(self, name):
        progress = self._w(name).progress
        return progress[-1] if progress else None

    def longest_gap(self, name, began, ended, excused=()):
        """The longest time between two flushed rounds of `name` around [began, ended], gaps
        that overlap a window of `excused` (a fault's, a reboot's) left out."""
        times = self._w(name).progress
        if not times:
            return 0.0
        first = max(bisect.bisect_right(times, began) - 1, 0)
        last = min(bisect.bisect_left(times, ended) + 1, len(times) - 1)
        return max((times[i + 1] - times[i] for i in range(first, last)
                    if not any(a <= times[i + 1] and b >= times[i] for a, b in excused)),
                   default=0.0)
