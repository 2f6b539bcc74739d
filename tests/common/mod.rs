//! Shared test helpers: start the real `vbmq serve` process and drive it with libblkio.
#![allow(dead_code)]

pub mod client_reads;
pub mod crash_io;
pub mod ctl;
pub mod disk_spec;
pub mod files;
pub mod fs;
pub mod loop_device;
pub mod nbd_wire;
pub mod run_time;
pub mod serve;
pub mod tool;
pub mod xattr;

// What most test files take; each takes some of them.
#[allow(unused_imports)]
pub use ctl::{ctl, ctl_json, ctl_state, s};
#[allow(unused_imports)]
pub use serve::Serve;

use std::mem::MaybeUninit;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

use blkio::{Blkio, Blkioq, Completion, MemoryRegion, ReqFlags};

pub const BUF_LEN: usize = 4 << 20;

/// A running `vbmq serve`, killed on drop.
pub struct Daemon {
    pub child: Child,
}

impl Daemon {
    /// Starts vbmq with these `--disk` values and waits for every socket to appear.
    pub fn start(disks: &[String]) -> Daemon {
        Serve::new().disks(disks).start()
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn terminate(mut self) -> ExitStatus {
        // SAFETY: sending a signal to our own child.
        unsafe { libc::kill(self.child.id().cast_signed(), libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            assert!(Instant::now() < deadline, "vbmq did not exit after SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn alive(&mut self) -> bool {
        self.child.try_wait().expect("wait").is_none()
    }

    /// Checks that vbmq is still running, then that SIGTERM ends it with success.
    pub fn terminate_alive(mut self) {
        assert!(self.alive());
        assert!(self.terminate().success());
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn wait_for(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A deterministic pattern: byte i of the stream seeded by `seed`.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A raw image of `len` bytes filled with `pattern(seed)`.
pub fn image(dir: &Path, name: &str, len: usize, seed: u64) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, pattern(seed, len)).expect("write image");
    path
}

/// The SHA-256 of a file, as `sha256sum` prints it.
pub fn sha256(path: &Path) -> String {
    let out = std::process::Command::new("sha256sum")
        .arg(path)
        .output()
        .expect("sha256sum");
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// A sparse image of `len` zero bytes.
pub fn sparse_image(dir: &Path, name: &str, len: u64) -> PathBuf {
    let path = dir.join(name);
    std::fs::File::create(&path)
        .and_then(|f| f.set_len(len))
        .expect("create a sparse image");
    path
}

/// A libblkio `virtio-blk-vhost-user` client with one buffer region.
pub struct Client {
    pub blkio: Blkio,
    pub queues: Vec<Blkioq>,
    pub region: MemoryRegion,
}

impl Client {
    pub fn connect(socket: &Path, num_queues: i32, poll: bool) -> blkio::Result<Client> {
        Self::connect_with(socket, num_queues, poll, false)
    }

    pub fn connect_with(
        socket: &Path,
        num_queues: i32,
        poll: bool,
        read_only: bool,
    ) -> blkio::Result<Client> {
        let mut blkio = Blkio::new("virtio-blk-vhost-user")?;
        blkio.set_str("path", socket.to_str().expect("utf-8 path"))?;
        blkio.set_bool("read-only", read_only)?;
        blkio.connect()?;
        if poll {
            blkio.set_i32("num-queues", 0)?;
            blkio.set_i32("num-poll-queues", num_queues)?;
        } else {
            blkio.set_i32("num-queues", num_queues)?;
        }
        let outcome = blkio.start()?;
        let queues = if poll {
            outcome.poll_queues
        } else {
            outcome.queues
        };
        let region = blkio.alloc_mem_region(BUF_LEN)?;
        blkio.map_mem_region(&region)?;
        Ok(Client {
            blkio,
            queues,
            region,
        })
    }

    pub fn capacity(&self) -> u64 {
        self.blkio.get_u64("capacity").expect("capacity")
    }

    /// Connected to a read-only disk: the device offers VIRTIO_BLK_F_RO (libblkio refuses to
    /// drive it read-write), a write is refused and a flush served.
    pub fn read_only(socket: &Path) -> Client {
        assert!(Client::connect(socket, 1, false).is_err(), "RO not offered");
        let mut client = Client::connect_with(socket, 1, false, true).unwrap();
        assert_ne!(client.write(0, 0, &[0xaa; 4096]), 0, "write accepted");
        assert_eq!(client.flush(0), 0);
        client
    }

    /// The disk has `capacity` bytes and its last 64 KiB take `pattern(seed)`, written on queue
    /// 0 and read back on `read_queue`.
    pub fn uses_the_tail(&mut self, capacity: u64, seed: u64, read_queue: usize) {
        assert_eq!(self.capacity(), capacity);
        let tail = pattern(seed, 64 << 10);
        let at = capacity - tail.len() as u64;
        assert_eq!(self.write(0, at, &tail), 0);
        assert!(self.read(read_queue, at, tail.len()).1 == tail);
    }

    fn buf(&self) -> *mut u8 {
        self.region.addr as *mut u8
    }

    /// Waits for the one request just queued on queue `q`; returns its result.
    fn complete(&mut self, q: usize) -> i32 {
        let mut done = [MaybeUninit::<Completion>::uninit(); 1];
        let mut timeout = Duration::from_secs(20);
        let n = self.queues[q]
            .do_io(&mut done, 1, Some(&mut timeout), None)
            .expect("do_io");
        assert_eq!(n, 1, "request timed out");
        // SAFETY: do_io initialised `n` completions.
        unsafe { done[0].assume_init_ref() }.ret
    }

    pub fn read(&mut self, q: usize, offset: u64, len: usize) -> (i32, Vec<u8>) {
        let buf = self.buf();
        self.queues[q].read(offset, buf, len, 0, ReqFlags::empty());
        let ret = self.complete(q);
        // SAFETY: the region holds BUF_LEN >= len bytes.
        let data = unsafe { std::slice::from_raw_parts(buf, len) }.to_vec();
        (ret, data)
    }

    pub fn write(&mut self, q: usize, offset: u64, data: &[u8]) -> i32 {
        let buf = self.buf();
        // SAFETY: the region holds BUF_LEN >= data.len() bytes.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), buf, data.len()) };
        self.queues[q].write(offset, buf, data.len(), 0, ReqFlags::empty());
        self.complete(q)
    }

    pub fn flush(&mut self, q: usize) -> i32 {
        self.queues[q].flush(0, ReqFlags::empty());
        self.complete(q)
    }

    pub fn discard(&mut self, q: usize, offset: u64, len: u64) -> i32 {
        self.queues[q].discard(offset, len, 0, ReqFlags::empty());
        self.complete(q)
    }

    pub fn write_zeroes(&mut self, q: usize, offset: u64, len: u64, unmap: bool) -> i32 {
        let flags = if unmap {
            ReqFlags::empty()
        } else {
            ReqFlags::NO_UNMAP
        };
        self.queues[q].write_zeroes(offset, len, 0, flags);
        self.complete(q)
    }
}

/// Starts `vbmq serve --control DIR/run/ctl.sock` with these disks; returns it and the path.
pub fn serve_with_control(dir: &Path, disks: &[String]) -> (Daemon, PathBuf) {
    let control = dir.join("run/ctl.sock");
    (Serve::new().control(&control).disks(disks).start(), control)
}

/// For speed cases (ignored tests run in release): 4 KiB random I/O at queue depth 32 for `secs` on queue 0 (`stride`: the n-th I/O at
/// `n * stride` instead, until the span is covered once); returns IOPS.
pub fn qd32(client: &mut Client, write: bool, span: u64, secs: f64, stride: Option<u64>) -> f64 {
    const DEPTH: usize = 32;
    let buf = client.region.addr as *mut u8;
    let mut rng = 7u64;
    let mut issued = 0u64;
    let mut queue = |client: &mut Client, slot: usize, rng: &mut u64| {
        let offset = match stride {
            Some(stride) => issued * stride % span,
            None => xorshift(rng) % (span / 4096) * 4096,
        };
        issued += 1;
        // SAFETY: the region holds BUF_LEN >= DEPTH * 4096 bytes.
        let at = unsafe { buf.add(slot * 4096) };
        if write {
            client.queues[0].write(offset, at, 4096, slot, ReqFlags::empty());
        } else {
            client.queues[0].read(offset, at, 4096, slot, ReqFlags::empty());
        }
    };
    for slot in 0..DEPTH {
        queue(client, slot, &mut rng);
    }
    let start = Instant::now();
    let (mut done_count, mut in_flight) = (0u64, DEPTH);
    let mut done = [const { MaybeUninit::<Completion>::uninit() }; DEPTH];
    while in_flight > 0 {
        let n = client.queues[0]
            .do_io(&mut done, 1, None, None)
            .expect("do_io");
        let covered = stride.is_some_and(|stride| (done_count + in_flight as u64) * stride >= span);
        let going = start.elapsed().as_secs_f64() < secs && !covered;
        for c in &done[..n] {
            // SAFETY: do_io initialised `n` completions.
            let c = unsafe { c.assume_init_ref() };
            assert_eq!(c.ret, 0, "I/O failed");
            done_count += 1;
            if going {
                queue(client, c.user_data, &mut rng);
            } else {
                in_flight -= 1;
            }
        }
    }
    done_count as f64 / start.elapsed().as_secs_f64()
}

/// For speed cases: `qd32` on the disk at `socket` of `daemon`, which is then stopped; its IOPS
/// and the daemon's CPU seconds per 10^6 I/O.
pub fn speed(
    daemon: Daemon,
    socket: &Path,
    write: bool,
    (span, secs, stride): (u64, f64, Option<u64>),
) -> (f64, f64) {
    let mut client = Client::connect(socket, 1, false).unwrap();
    let (pid, start) = (daemon.child.id(), Instant::now());
    let cpu_before = cpu_seconds(pid);
    let iops = qd32(&mut client, write, span, secs, stride);
    let ios = iops * start.elapsed().as_secs_f64();
    let cpu = (cpu_seconds(pid) - cpu_before) / ios * 1e6;
    drop(client);
    assert!(daemon.terminate().success());
    (iops, cpu)
}

/// A speed measurement's settings from the environment: `VBMQ_{name}_SECS` a case (default
/// `default_secs`) and `VBMQ_{name}_CPU`, the CPU of vbmq's queue (default 1).
pub fn speed_settings(name: &str, default_secs: f64) -> (f64, String) {
    let secs = std::env::var(format!("VBMQ_{name}_SECS"))
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default_secs);
    let cpu = std::env::var(format!("VBMQ_{name}_CPU")).unwrap_or_else(|_| "1".into());
    (secs, cpu)
}

/// For speed cases: an image of `len` bytes, `pattern(seed)`'s first 4 MiB over and over.
pub fn large_image(path: &Path, len: usize, seed: u64) {
    use std::io::Write;
    let mut file = std::fs::File::create(path).unwrap();
    let chunk = pattern(seed, 4 << 20);
    for _ in 0..len / chunk.len() {
        file.write_all(&chunk).unwrap();
    }
}

/// The next value of a xorshift generator.
fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// CPU seconds (user and system) process `pid` has used.
pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // Fields 14 and 15 of stat (utime, stime), counted after the command's closing parenthesis.
    (ticks(11) + ticks(12)) / 100.0
}

/// Sends one request line `body` to the control socket with `fds` attached, as a client other
/// than `vbmq ctl` could (past ctl's own checks); the JSON reply.
pub fn control_request(
    control: &Path,
    body: &serde_json::Value,
    fds: &[std::os::fd::RawFd],
) -> serde_json::Value {
    use std::io::BufRead;
    use vmm_sys_util::sock_ctrl_msg::ScmSocket;
    let stream = std::os::unix::net::UnixStream::connect(control).expect("connect");
    let line = format!("{body}\n");
    stream
        .send_with_fds(&[line.as_bytes()], fds)
        .expect("send the request");
    let mut reply = String::new();
    std::io::BufReader::new(stream)
        .read_line(&mut reply)
        .expect("the reply");
    serde_json::from_str(&reply).expect("a JSON reply")
}
