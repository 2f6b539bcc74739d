"""The command line: `python3 -m thrash [--minutes N] [--seed S] [--inflight off] [--only KINDS]`.

`VBMQ_THRASH_BREAK=KIND` breaks that event on purpose (events/breaks.py): a mutation check."""

import argparse
import os
import signal
import sys

from .common import Failed, log
from .thrash import Thrash
from .thrash import __doc__ as DOC


def main():
    parser = argparse.ArgumentParser(description=DOC.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=3)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--inflight", default="on", choices=["on", "off"],
                        help="off: the mutation check (the disks keep no in-flight record)")
    parser.add_argument("--only", default=None,
                        help="KIND,KIND...: only these events (an event's own run, a mutation's)")
    args = parser.parse_args()
    if args.seed is None:
        args.seed = int.from_bytes(os.urandom(4), "little")
    args.inflight = args.inflight == "on"
    args.only = args.only.split(",") if args.only else None
    log(f"seed {args.seed} (reproduce with --seed {args.seed})")
    thrash = Thrash(args)

    def interrupted(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupted)
    try:
        thrash.run()
    except Failed as e:
        if str(e) not in thrash.errors:
            thrash.error(str(e))
    except KeyboardInterrupt:
        thrash.error("interrupted")
    except Exception as e:  # noqa: BLE001 - any driver failure fails the run, cleaned up
        thrash.error(f"{type(e).__name__}: {e}")
        raise
    finally:
        thrash.stopping = True
        try:
            thrash.summary()
        finally:
            thrash.cleanup()
    sys.exit(1 if thrash.errors else 0)
