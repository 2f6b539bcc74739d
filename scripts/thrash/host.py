"""What the thrasher makes on the host: a small file system to fill, a device-mapper device to
fail or slow (when the kernel has device-mapper), and the guest. Each removes exactly what it
made."""

import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import time

QEMU = "qemu-system-x86_64"


def die_with_parent():
    """In a child before exec: SIGKILL when the thrasher dies, even by SIGKILL."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def run(*cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip()


class Host:
    def __init__(self, workdir, log):
        self.dir = workdir
        self.log = log
        self.loops = []
        self.mounts = []
        self.dm_name = None
        self.dm_mode = None
        self.dm_why = None

    def small_fs(self):
        """A 96 MiB ext4 on a loop device (no blocks reserved for root: vbmq runs as root)."""
        image = os.path.join(self.dir, "fs.img")
        with open(image, "wb") as f:
            f.truncate(96 << 20)
        loop = run("losetup", "-f", "--show", image)
        self.loops.append(loop)
        run("mkfs.ext4", "-q", "-F", "-m", "0", loop)
        mount = os.path.join(self.dir, "full")
        os.makedirs(mount)
        run("mount", loop, mount)
        self.mounts.append(mount)
        self.full = mount
        return mount

    def fill(self):
        """Takes every free block of the small file system."""
        filler = os.path.join(self.full, "filler")
        st = os.statvfs(self.full)
        with open(filler, "wb") as f:
            try:
                os.posix_fallocate(f.fileno(), 0, max(st.f_bavail * st.f_frsize - (1 << 20), 4096))
            except OSError:
                pass
            chunk = b"\xff" * 4096
            try:
                while True:
                    f.write(chunk)
                    f.flush()
            except OSError:
                pass
        os.sync()

    def unfill(self):
        try:
            os.unlink(os.path.join(self.full, "filler"))
        except FileNotFoundError:
            pass
        os.sync()

    def dm_device(self, mib):
        """A device-mapper linear device of `mib` MiB over a loop device, or None (and why)
        when the kernel has no device-mapper."""
        backing = os.path.join(self.dir, "dm.img")
        with open(backing, "wb") as f:
            f.truncate(mib << 20)
        self.dm_sectors = mib << 11
        name = f"vbmq-thrash-{os.getpid()}"
        try:
            run("dmsetup", "version")  # fails at once without the kernel's driver
            loop = run("losetup", "-f", "--show", backing)
            self.loops.append(loop)
            self.dm_loop = loop
            run("dmsetup", "create", name, "--table", self.table("linear"))
        except (subprocess.CalledProcessError, FileNotFoundError) as e:
            self.dm_why = (getattr(e, "stderr", "") or str(e)).strip().splitlines()[0]
            self.log(f"no device-mapper faults: {self.dm_why}")
            return None
        self.dm_name = name
        self.dm_mode = "linear"
        return f"/dev/mapper/{name}"

    def table(self, mode):
        total, loop = self.dm_sectors, self.dm_loop
        if mode == "linear":
            return f"0 {total} linear {loop} 0"
        if mode == "delay":
            return f"0 {total} delay {loop} 0 200"
        quarter = total // 4  # the second quarter returns EIO
        return (f"0 {quarter} linear {loop} 0\n{quarter} {quarter} error\n"
                f"{2 * quarter} {total - 2 * quarter} linear {loop} {2 * quarter}")

    def dm_set(self, mode):
        run("dmsetup", "load", self.dm_name, "--table", self.table(mode))
        run("dmsetup", "resume", self.dm_name)
        self.dm_mode = mode

    def cleanup(self):
        if self.dm_name:
            for _ in range(50):
                if subprocess.run(["dmsetup", "remove", self.dm_name],
                                  capture_output=True).returncode == 0:
                    break
                time.sleep(0.1)
        for mount in reversed(self.mounts):
            for _ in range(50):
                if subprocess.run(["umount", mount], capture_output=True).returncode == 0:
                    break
                time.sleep(0.1)
            else:
                self.log(f"could not unmount {mount}")
        for loop in reversed(self.loops):
            subprocess.run(["losetup", "-d", loop], capture_output=True)


def guest_kernel():
    cache = os.environ.get("VBMQ_GUEST_CACHE", os.path.expanduser("~/.cache/vbmq-guest"))
    boot = os.path.join(cache, "kernel/boot")
    kernels = [n for n in os.listdir(boot) if n.startswith("vmlinuz-")]
    if not kernels:
        raise RuntimeError(f"no guest kernel in {boot}: run scripts/deps/guest.sh")
    return cache, os.path.join(boot, kernels[0])


class Guest:
    """One TCG guest whose /test.sh runs the stamp writer on its only disk, `reconnect-ms=`
    so that it comes through vbmq's restarts. Its console is a file, read as it grows."""

    def __init__(self, workdir, socket, blocks, seed, root):
        cache, kernel = guest_kernel()
        base = os.path.join(workdir, "base.cpio")
        run(os.path.join(root, "scripts/guest/build-initramfs.sh"), base)
        stage = os.path.join(workdir, "guest-stage")
        os.makedirs(stage)
        run("cc", "-O2", "-static", "-Wall", "-o", os.path.join(stage, "thrash-writer"),
            os.path.join(root, "scripts/thrash/guest_writer.c"))
        with open(os.path.join(stage, "test.sh"), "w") as f:
            f.write(f"echo THRASH-WRITER-START\nexec /thrash-writer /dev/vda {blocks} {seed}\n")
        archive = subprocess.run("find . -mindepth 1 -printf '%P\\n' | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet",
                                 shell=True, cwd=stage, check=True, capture_output=True).stdout
        initrd = os.path.join(workdir, "initrd.cpio")
        with open(initrd, "wb") as out, open(base, "rb") as first:
            shutil.copyfileobj(first, out)
            out.write(archive)
        self.dir = workdir
        self.kernel = kernel
        self.initrd = initrd
        self.console = os.path.join(workdir, "console.log")
        self.starts = 0
        self.proc, self.qmp_socket, self.stderr = self.start(socket)
        self.socket = socket

    def start(self, socket, incoming=None, paused=False):
        """Starts a QEMU of this guest on vbmq's `socket`; with `incoming` (a Unix socket's
        path), one waiting there for the guest's live migration (`paused`: and paused once it
        has it, `-S`, until QMP `cont`). Every QEMU of the guest appends to the one console
        file, so that its lines read on across a migration."""
        self.starts += 1
        qmp_socket = os.path.join(self.dir, f"qmp-{self.starts}.sock")
        stderr = open(os.path.join(self.dir, f"qemu-{self.starts}.log"), "wb")
        proc = subprocess.Popen(
            [QEMU, "-nodefaults", "-nographic", "-accel", "tcg", "-cpu", "max",
             "-smp", "1", "-m", "512M",
             "-object", "memory-backend-memfd,id=mem,size=512M,share=on",
             "-numa", "node,memdev=mem", "-kernel", self.kernel, "-initrd", self.initrd,
             "-append", "console=ttyS0 quiet panic=-1",
             "-chardev", f"file,id=console,path={self.console},append=on",
             "-serial", "chardev:console",
             "-qmp", f"unix:{qmp_socket},server=on,wait=off",
             "-chardev", f"socket,id=disk0,path={socket},reconnect-ms=500",
             "-device", "vhost-user-blk-pci,chardev=disk0,num-queues=1",
             *(["-incoming", f"unix:{incoming}"] if incoming else []),
             *(["-S"] if paused else [])],
            stdin=subprocess.DEVNULL, stdout=stderr, stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent)
        return proc, qmp_socket, stderr

    def take_over(self, proc, qmp_socket, stderr, socket):
        """The destination of a completed migration becomes this guest; its source QEMU (the
        one this guest started) is stopped by its PID."""
        old, old_stderr = self.proc, self.stderr
        self.proc, self.qmp_socket, self.stderr, self.socket = proc, qmp_socket, stderr, socket
        old.kill()
        old.wait()
        old_stderr.close()

    def lines(self, stopping):
        """The console's lines as they come, until QEMU exits or `stopping()`."""
        pending = b""
        offset = 0
        while not stopping():
            try:
                with open(self.console, "rb") as f:
                    f.seek(offset)
                    data = f.read()
            except FileNotFoundError:
                data = b""
            offset += len(data)
            pending += data
            *complete, pending = pending.split(b"\n")
            for line in complete:
                yield line.decode(errors="replace").replace("\r", "")
            if not data:
                if self.proc.poll() is not None:
                    return
                time.sleep(0.1)

    def qmp(self, command, timeout=60, qmp_socket=None, **arguments):
        """Runs one QMP command (on this guest's QEMU, or the one at `qmp_socket`); returns its
        `return`, raises RuntimeError on its `error`."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(timeout)
            conn.connect(qmp_socket or self.qmp_socket)
            replies = conn.makefile("r")
            replies.readline()  # the greeting
            for execute, args in (("qmp_capabilities", {}), (command, arguments)):
                request = {"execute": execute, **({"arguments": args} if args else {})}
                conn.sendall(json.dumps(request).encode() + b"\n")
                while True:
                    reply = json.loads(replies.readline())
                    if "error" in reply:
                        raise RuntimeError(f"QMP {execute}: {reply['error']}")
                    if "return" in reply:
                        break  # events before it are skipped
            return reply["return"]

    def tail(self):
        try:
            with open(self.console, "rb") as f:
                text = f.read().decode(errors="replace")
        except FileNotFoundError:
            text = ""
        return " | ".join(text.strip().splitlines()[-5:])

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.stderr.close()
