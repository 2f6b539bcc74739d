//! An unprivileged local user who connects, as fast as it can, to every name that appears in a
//! directory. It runs in a forked child as `nobody` (65534); after the fork it makes raw system
//! calls on memory prepared beforehand and allocates nothing (another thread of the test may
//! have held the allocator's lock at the fork). Its counters live in a shared mapping.

use std::cell::UnsafeCell;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const NOBODY: libc::uid_t = 65534;
/// sun_path's size: a path with its NUL.
const PATH_ROOM: usize = 108;
/// Names tried at once; the oldest is forgotten when a new one needs room.
const SLOTS: usize = 64;
/// Passes on which a new socket is tried, about as many microseconds.
const FRESH_TRIES: u32 = 20_000;
/// VHOST_USER_GET_FEATURES, version 1, no payload: the first message of every frontend.
const GET_FEATURES: [u8; 12] = [1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0];

/// What the child reports: counters, and the first name it got into.
#[repr(C)]
struct Shared {
    stop: AtomicU32,
    ready: AtomicU32,
    /// The set-up step that failed (its errno in `setup_errno`).
    setup_step: AtomicU32,
    setup_errno: AtomicI32,
    attempts: AtomicU64,
    names_seen: AtomicU64,
    refused: AtomicU64,
    connected: AtomicU64,
    exchanged: AtomicU64,
    first_in: UnsafeCell<[u8; PATH_ROOM]>,
}

/// What the attacker achieved.
#[derive(Debug)]
pub struct Outcome {
    /// connect() calls made.
    pub attempts: u64,
    /// Distinct names it saw appear in the directory (or found there).
    pub names_seen: u64,
    /// Attempts refused for want of permission (EACCES).
    pub refused: u64,
    /// Attempts that connected.
    pub connected: u64,
    /// Connections on which a vhost-user reply came back.
    pub exchanged: u64,
    /// The first path it connected to.
    pub first_in: String,
}

/// The running attacker; killed on drop.
pub struct Attacker {
    pid: libc::pid_t,
    shared: *mut Shared,
}

impl Attacker {
    /// Forks the attacker on `dir` (which `nobody` must be able to read) and waits until it
    /// watches the directory.
    pub fn start(dir: &Path) -> Attacker {
        let bytes = dir.as_os_str().as_bytes();
        assert!(bytes.len() < PATH_ROOM - 20, "directory path too long");
        let mut path = [0u8; PATH_ROOM];
        path[..bytes.len()].copy_from_slice(bytes);
        // SAFETY: a fresh anonymous shared mapping, zero-filled, of the struct's size; an
        // all-zero Shared is valid (atomics and bytes).
        let shared = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size_of::<Shared>(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(shared, libc::MAP_FAILED, "mmap");
        let shared = shared.cast::<Shared>();
        // SAFETY: fork; the child only runs `attack`, which ends in _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork");
        if pid == 0 {
            // SAFETY: the mapping outlives the child, which never returns.
            attack(unsafe { &*shared }, &path, bytes.len());
        }
        let attacker = Attacker { pid, shared };
        let deadline = Instant::now() + Duration::from_secs(10);
        while attacker.shared().ready.load(Ordering::Acquire) == 0 {
            let step = attacker.shared().setup_step.load(Ordering::Acquire);
            assert!(
                step == 0,
                "the attacker's set-up step {step} failed: {}",
                std::io::Error::from_raw_os_error(
                    attacker.shared().setup_errno.load(Ordering::Acquire)
                )
            );
            assert!(Instant::now() < deadline, "the attacker never started");
            std::thread::sleep(Duration::from_millis(5));
        }
        attacker
    }

    fn shared(&self) -> &Shared {
        // SAFETY: mapped in `start`, unmapped in drop only.
        unsafe { &*self.shared }
    }

    /// Stops the attacker and returns what it achieved.
    pub fn stop(self) -> Outcome {
        self.shared().stop.store(1, Ordering::Release);
        let mut status = 0;
        // SAFETY: waits for our own child.
        unsafe { libc::waitpid(self.pid, &mut status, 0) };
        let shared = self.shared();
        // SAFETY: the child has exited: nothing writes the bytes any more.
        let first = unsafe { *shared.first_in.get() };
        let len = first.iter().position(|&b| b == 0).unwrap_or(PATH_ROOM);
        Outcome {
            attempts: shared.attempts.load(Ordering::Acquire),
            names_seen: shared.names_seen.load(Ordering::Acquire),
            refused: shared.refused.load(Ordering::Acquire),
            connected: shared.connected.load(Ordering::Acquire),
            exchanged: shared.exchanged.load(Ordering::Acquire),
            first_in: String::from_utf8_lossy(&first[..len]).into_owned(),
        }
    }
}

impl Drop for Attacker {
    fn drop(&mut self) {
        // SAFETY: our own child (already reaped after `stop`: then both calls fail harmlessly).
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
            libc::waitpid(self.pid, std::ptr::null_mut(), libc::WNOHANG);
            libc::munmap(self.shared.cast(), size_of::<Shared>());
        }
    }
}

/// The names being tried: full paths, NUL-terminated.
struct Names {
    paths: [[u8; PATH_ROOM]; SLOTS],
    used: [bool; SLOTS],
    /// Tries left on every pass, for a socket that has just appeared.
    fresh: [u32; SLOTS],
    next: usize,
}

impl Names {
    /// Adds `dir/name` unless it is known, `.` or `..`, or too long; its slot if it was new.
    fn add(&mut self, dir: &[u8], name: &[u8]) -> Option<usize> {
        if name.is_empty() || name == b"." || name == b".." {
            return None;
        }
        let len = dir.len() + 1 + name.len();
        if len >= PATH_ROOM {
            return None;
        }
        let mut path = [0u8; PATH_ROOM];
        path[..dir.len()].copy_from_slice(dir);
        path[dir.len()] = b'/';
        path[dir.len() + 1..len].copy_from_slice(name);
        if (0..SLOTS).any(|i| self.used[i] && self.paths[i] == path) {
            return None;
        }
        let slot = (0..SLOTS)
            .find(|&i| !self.used[i])
            .unwrap_or(self.next % SLOTS);
        self.next = self.next.wrapping_add(1);
        self.paths[slot] = path;
        self.used[slot] = true;
        self.fresh[slot] = 0;
        Some(slot)
    }
}

fn fail(shared: &Shared, step: u32) -> ! {
    shared.setup_errno.store(
        std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
        Ordering::Release,
    );
    shared.setup_step.store(step, Ordering::Release);
    // SAFETY: ends the child without running the parent's exit handlers.
    unsafe { libc::_exit(1) }
}

/// The child: drops to `nobody`, watches `path` (`dir_len` bytes, then NULs) and connects to
/// every name in it until told to stop.
fn attack(shared: &Shared, path: &[u8; PATH_ROOM], dir_len: usize) -> ! {
    let dir = &path[..dir_len];
    // SAFETY: plain system calls on values and on NUL-terminated buffers owned here.
    unsafe {
        if libc::setgroups(0, std::ptr::null()) != 0 {
            fail(shared, 1);
        }
        if libc::setresgid(NOBODY, NOBODY, NOBODY) != 0 {
            fail(shared, 2);
        }
        if libc::setresuid(NOBODY, NOBODY, NOBODY) != 0 {
            fail(shared, 3);
        }
        let inotify = libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC);
        if inotify < 0 {
            fail(shared, 4);
        }
        let watched = libc::IN_CREATE | libc::IN_MOVED_TO;
        if libc::inotify_add_watch(inotify, path.as_ptr().cast(), watched) < 0 {
            fail(shared, 5);
        }
        let dir_fd = libc::open(
            path.as_ptr().cast(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        );
        if dir_fd < 0 {
            fail(shared, 6);
        }
        shared.ready.store(1, Ordering::Release);
        let mut names = Names {
            paths: [[0; PATH_ROOM]; SLOTS],
            used: [false; SLOTS],
            fresh: [0; SLOTS],
            next: 0,
        };
        let mut buf = [0u8; 8192];
        let mut socket = new_socket();
        let mut round = 0u64;
        while shared.stop.load(Ordering::Acquire) == 0 {
            // New names as they are made (bind makes the socket file): each new socket is tried
            // on every pass for a while, the window between its bind and its chmod included.
            let n = libc::read(inotify, buf.as_mut_ptr().cast(), buf.len());
            for name in inotify_names(&buf[..usize::try_from(n).unwrap_or(0)]) {
                if let Some(slot) = names.add(dir, name) {
                    shared.names_seen.fetch_add(1, Ordering::Relaxed);
                    if is_socket(&names.paths[slot]) {
                        names.fresh[slot] = FRESH_TRIES;
                    }
                }
            }
            // Every name now and then, and what is there (an overflowed event queue loses names).
            let sweep = round.is_multiple_of(128);
            if round.is_multiple_of(1024) {
                libc::lseek(dir_fd, 0, libc::SEEK_SET);
                loop {
                    let n =
                        libc::syscall(libc::SYS_getdents64, dir_fd, buf.as_mut_ptr(), buf.len());
                    if n <= 0 {
                        break;
                    }
                    for name in dirent_names(&buf[..usize::try_from(n).unwrap_or(0)]) {
                        if names.add(dir, name).is_some() {
                            shared.names_seen.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            }
            for slot in 0..SLOTS {
                if !names.used[slot] || (!sweep && names.fresh[slot] == 0) {
                    continue;
                }
                names.fresh[slot] = names.fresh[slot].saturating_sub(1);
                shared.attempts.fetch_add(1, Ordering::Relaxed);
                if try_connect(socket, &names.paths[slot]) {
                    if shared.connected.fetch_add(1, Ordering::AcqRel) == 0 {
                        *shared.first_in.get() = names.paths[slot];
                    }
                    if exchange(socket) {
                        shared.exchanged.fetch_add(1, Ordering::Relaxed);
                    }
                    libc::close(socket);
                    socket = new_socket();
                    continue;
                }
                match *libc::__errno_location() {
                    libc::ENOENT => {
                        names.used[slot] = false;
                        names.fresh[slot] = 0;
                    }
                    libc::EACCES => {
                        shared.refused.fetch_add(1, Ordering::Relaxed);
                    }
                    libc::ECONNREFUSED | libc::EAGAIN => {}
                    _ => {
                        libc::close(socket);
                        socket = new_socket();
                    }
                }
            }
            round += 1;
        }
        libc::_exit(0)
    }
}

/// Whether the NUL-terminated `path` is a socket (not following a symlink).
fn is_socket(path: &[u8; PATH_ROOM]) -> bool {
    // SAFETY: an all-zero stat is valid; fstatat fills it from a NUL-terminated path.
    unsafe {
        let mut stat: libc::stat = std::mem::zeroed();
        libc::fstatat(
            libc::AT_FDCWD,
            path.as_ptr().cast(),
            &mut stat,
            libc::AT_SYMLINK_NOFOLLOW,
        ) == 0
            && stat.st_mode & libc::S_IFMT == libc::S_IFSOCK
    }
}

fn new_socket() -> libc::c_int {
    // SAFETY: socket(2) with constant arguments.
    unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) }
}

/// connect() to the NUL-terminated `path`.
fn try_connect(socket: libc::c_int, path: &[u8; PATH_ROOM]) -> bool {
    // SAFETY: an all-zero sockaddr_un is valid; the path fits sun_path with its NUL.
    unsafe {
        let mut address: libc::sockaddr_un = std::mem::zeroed();
        address.sun_family = libc::AF_UNIX as libc::sa_family_t;
        for (to, &from) in address.sun_path.iter_mut().zip(path.iter()) {
            *to = libc::c_char::from_ne_bytes([from]);
        }
        let len = size_of::<libc::sockaddr_un>() as libc::socklen_t;
        libc::connect(socket, (&raw const address).cast(), len) == 0
    }
}

/// Sends GET_FEATURES on a connected socket; whether a reply came within 200 ms.
fn exchange(socket: libc::c_int) -> bool {
    // SAFETY: send, poll and recv on a socket we own, with buffers of the lengths given.
    unsafe {
        let sent = libc::send(
            socket,
            GET_FEATURES.as_ptr().cast(),
            GET_FEATURES.len(),
            libc::MSG_NOSIGNAL,
        );
        if sent != isize::try_from(GET_FEATURES.len()).unwrap() {
            return false;
        }
        let mut poll = libc::pollfd {
            fd: socket,
            events: libc::POLLIN,
            revents: 0,
        };
        if libc::poll(&mut poll, 1, 200) != 1 {
            return false;
        }
        let mut reply = [0u8; 64];
        libc::recv(
            socket,
            reply.as_mut_ptr().cast(),
            reply.len(),
            libc::MSG_DONTWAIT,
        ) >= 12
    }
}

/// The names of a buffer of inotify events.
fn inotify_names(mut events: &[u8]) -> impl Iterator<Item = &[u8]> {
    std::iter::from_fn(move || {
        // struct inotify_event: wd, mask, cookie, len (4 bytes each), then len bytes of name.
        let len = u32::from_ne_bytes(events.get(12..16)?.try_into().ok()?) as usize;
        let name = events.get(16..16 + len)?;
        events = &events[16 + len..];
        Some(until_nul(name))
    })
}

/// The names of a buffer of getdents64 records.
fn dirent_names(mut records: &[u8]) -> impl Iterator<Item = &[u8]> {
    std::iter::from_fn(move || {
        // struct linux_dirent64: ino (8), off (8), reclen (2), type (1), then the name.
        let reclen = u16::from_ne_bytes(records.get(16..18)?.try_into().ok()?) as usize;
        let name = records.get(19..reclen)?;
        records = &records[reclen..];
        Some(until_nul(name))
    })
}

fn until_nul(bytes: &[u8]) -> &[u8] {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    &bytes[..end]
}
