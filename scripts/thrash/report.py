"""The end of a run: the worst pause per event kind and the summary line."""

import os

from .common import MIB, log


class Report:
    """Mixed into Thrash: reads its events, ledger, fault windows and samples."""

    def pauses(self):
        """Per event kind, the longest gap between flushed rounds of any writer across it."""
        worst = {}
        for kind, began, ended in self.events:
            for name in self.writers():
                # A faulted disk's own pause is its fault's length, a rebooting guest's its boot.
                excused = [(a, b) for w, a, b in self.fault_windows if w == name]
                if name in self.faulted:
                    excused.append((self.faulted[name], float("inf")))
                gap = self.ledger.longest_gap(name, began, ended, excused)
                if gap > worst.get(kind, (0.0, ""))[0]:
                    worst[kind] = (gap, name)
        return worst

    def summary(self):
        logs = sum(os.path.getsize(self.path(f"vbmq-{i}.log")) for i in range(1, self.runs + 1))
        if logs > 16 * MIB:
            self.error(f"vbmq logged {logs} bytes in {self.runs} runs")
        pauses = self.pauses()
        for kind in sorted(pauses):
            log(f"worst pause {kind}: {pauses[kind][0]:.1f} s ({pauses[kind][1]})")
        first, last = (self.samples[0], self.samples[-1]) if self.samples else ((0,) * 4,) * 2
        log(f"threads {first[3]}->{last[3]}, logs {logs // 1024} KiB in {self.runs} runs, "
            f"rounds {self.ledger.total_rounds()}")
        counts = " ".join(f"{k}={self.counts[k]}" for k in sorted(self.counts))
        print(f"thrash: {len(self.events)} events ({counts}), {len(self.errors)} errors, "
              f"worst pause {max((p for p, _ in pauses.values()), default=0):.1f} s, "
              f"rss {first[1] // 1024}->{last[1] // 1024} MiB, fds {first[2]}->{last[2]}",
              flush=True)
