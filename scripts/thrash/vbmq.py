"""Process control of vbmq: start it, stop it by a signal, send it control commands, sample its
resident memory, descriptors and threads."""

import os
import signal
import subprocess
import time

from . import host
from .common import VBMQ, Failed
from .world import qcow2_check


class VbmqControl:
    """Mixed into Thrash: `self.vbmq` is the running `vbmq serve`, `self.runs` its starts."""

    def ctl(self, *args, ok=True, timeout=120):
        cmd = [VBMQ, "ctl", "--control", self.sock("ctl"), "--state", self.path("state.toml"),
               *args]
        try:
            run = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            self.error(f"vbmq ctl {' '.join(args)}: no answer in {timeout} s")
            return None
        if ok and run.returncode != 0:
            self.error(f"vbmq ctl {' '.join(args)}: exit {run.returncode}: {run.stderr.strip()}")
            return None
        return run

    def start_vbmq(self, binary=None, state=True):
        """Starts `vbmq serve` (`binary`: another build of it, used from then on; `state`
        False: without `--state`, a broken upgrade's)."""
        self.binary = binary or self.binary
        self.runs += 1
        logfile = open(self.path(f"vbmq-{self.runs}.log"), "wb")
        try:
            os.unlink(self.sock("ctl"))  # a killed process leaves it behind
        except FileNotFoundError:
            pass
        self.vbmq = subprocess.Popen(
            [self.binary, "serve", "--config", self.path("etc/vbmq.toml"),
             *(["--state", self.path("state.toml")] if state else [])],
            stdout=logfile, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, "RUST_LOG": "info"}, preexec_fn=self.in_child)
        logfile.close()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.vbmq.poll() is not None:
                raise Failed(f"vbmq exited at start: {self.vbmq.returncode} "
                             f"(see {self.path(f'vbmq-{self.runs}.log')})")
            if os.path.exists(self.sock("ctl")):
                run = self.ctl("list", ok=False, timeout=30)
                if run is not None and run.returncode == 0:
                    break
            time.sleep(0.05)
        else:
            raise Failed("vbmq did not answer on its control socket within 120 s")
        if self.share_added:
            self.add_share()

    def in_child(self):
        """Before exec of vbmq: dies with the thrasher, joins the slow device's cgroup."""
        host.die_with_parent()
        self.slow_device.join()

    def stop_vbmq(self, sig):
        self.vbmq.send_signal(sig)
        try:
            status = self.vbmq.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.error(f"vbmq did not exit within 120 s of signal {sig}")
            self.vbmq.kill()
            status = self.vbmq.wait()
        if sig == signal.SIGTERM and status != 0:
            self.error(f"vbmq exited {status} on SIGTERM")
        if self.checkpoint and sig == signal.SIGKILL:
            self.kills_since_checkpoint += 1
        # Whatever stopped it, the qcow2 image's metadata must be consistent before the next
        # start reads it (a kill -9 may leak clusters, never corrupt).
        self.qcow2_status, bad = qcow2_check(self.path("qcow2.img"))
        if bad:
            self.error(f"qcow2 after signal {sig}: {bad}")

    def add_share(self):
        spec = f"socket={self.sock('share')},dir={self.path('shares/one')},tag=one"
        self.ctl("add-fs", spec)

    def sample(self):
        pid = self.vbmq.pid
        try:
            with open(f"/proc/{pid}/status") as f:
                status = dict(line.split(":", 1) for line in f if ":" in line)
            rss = int(status["VmRSS"].split()[0])
            threads = int(status["Threads"])
            fds = len(os.listdir(f"/proc/{pid}/fd"))
        except (OSError, KeyError, ValueError):
            return
        self.samples.append((time.monotonic(), rss, fds, threads))
        first = self.samples[0]
        # Bounded, not equal: restarts, run-time disks and shares move the counts a little.
        if rss > 4 * first[1] + 64 * 1024 or fds > 2 * first[2] + 64:
            self.error(f"vbmq grew: rss {first[1] // 1024}->{rss // 1024} MiB, "
                       f"fds {first[2]}->{fds}")
