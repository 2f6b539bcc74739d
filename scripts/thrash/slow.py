"""A slow device without device-mapper (this kernel has no dm_mod): a loop device over a file,
served as a `path=` disk, that vbmq's blkio cgroup (v1) throttles to SLOW_BPS on command. vbmq
is started in the cgroup (each start joins it before exec), so that its O_DIRECT reads and
writes to the loop device, submitted by its threads and io_uring's workers, are the cgroup's.
Each part removes exactly what it made."""

import os
import subprocess
import time

CGROUPS = "/sys/fs/cgroup/blkio"
SLOW_BPS = 1 << 20  # a disk of 1 MiB/s each way: a round takes seconds, a read-back 8


class SlowDevice:
    def __init__(self, workdir, log):
        self.dir = workdir
        self.log = log
        self.loop = None
        self.cgroup = None
        self.why = None
        self.slow = False

    def make(self, mib):
        """The loop device's path, or None (and why) without blkio throttling."""
        if not os.path.exists(os.path.join(CGROUPS, "blkio.throttle.read_bps_device")):
            self.why = f"no {CGROUPS}/blkio.throttle.read_bps_device (cgroup v1 blkio)"
            self.log(f"no slow-device fault: {self.why}")
            return None
        backing = os.path.join(self.dir, "slow.img")
        with open(backing, "wb") as f:
            f.truncate(mib << 20)
        self.loop = subprocess.run(["losetup", "-f", "--show", backing], check=True,
                                   capture_output=True, text=True).stdout.strip()
        cgroup = os.path.join(CGROUPS, f"vbmq-thrash-{os.getpid()}")
        os.mkdir(cgroup)
        self.cgroup = cgroup
        return self.loop

    def join(self):
        """In vbmq's child before exec: into the cgroup (nothing without one)."""
        if self.cgroup:
            with open(os.path.join(self.cgroup, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))

    def device(self):
        st = os.stat(self.loop)
        return f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"

    def set(self, slow):
        """Throttles the loop device to SLOW_BPS each way for vbmq (`slow`), or not."""
        limit = SLOW_BPS if slow else 0
        for knob in ("read_bps_device", "write_bps_device"):
            with open(os.path.join(self.cgroup, f"blkio.throttle.{knob}"), "w") as f:
                f.write(f"{self.device()} {limit}")
        self.slow = slow

    def bytes_served(self):
        """The bytes vbmq's cgroup read and wrote on the loop device, as the throttle counts."""
        total = 0
        with open(os.path.join(self.cgroup, "blkio.throttle.io_service_bytes")) as f:
            for line in f:
                words = line.split()
                if words[:1] == [self.device()] and words[1:2] == ["Total"]:
                    total = int(words[2])
        return total

    def cleanup(self):
        """After every process of the cgroup has exited."""
        if self.cgroup:
            for _ in range(50):
                try:
                    os.rmdir(self.cgroup)
                    break
                except OSError:
                    time.sleep(0.1)
            else:
                self.log(f"could not remove {self.cgroup}")
        if self.loop:
            subprocess.run(["losetup", "-d", self.loop], capture_output=True)
