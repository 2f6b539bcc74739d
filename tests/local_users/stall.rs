//! Stalls the calls that follow a socket's bind (chmod, chown, rename) in a process started by
//! the test, as a busy host may preempt it there, so a window between bind and chmod is held
//! open every time: a seccomp filter installed before exec sends those calls to the test (user
//! notification), which lets each go on after a delay.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// Where the child keeps the filter's listener for the test to take (`pidfd_getfd`).
const LISTENER_FD: libc::c_int = 900;

/// The calls that are held: everything vbmq may do to a socket file between bind and rename.
/// (The filter does not check the architecture: the test's own.)
const STALLED: &[libc::c_long] = &[
    #[cfg(target_arch = "x86_64")]
    libc::SYS_chmod,
    libc::SYS_fchmodat,
    452, // fchmodat2
    #[cfg(target_arch = "x86_64")]
    libc::SYS_chown,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_lchown,
    libc::SYS_fchownat,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_rename,
    libc::SYS_renameat,
    libc::SYS_renameat2,
];

/// Has `command`'s process install the filter before exec.
pub fn install(command: &mut Command) {
    let mut program: Vec<libc::sock_filter> = Vec::new();
    let load_nr = libc::BPF_LD | libc::BPF_W | libc::BPF_ABS;
    program.push(statement(load_nr as u16, 0));
    for (i, &nr) in STALLED.iter().enumerate() {
        // Equal: jump to the last instruction (notify); else on to the next test.
        let to_notify = u8::try_from(STALLED.len() - i).unwrap();
        program.push(libc::sock_filter {
            code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
            jt: to_notify,
            jf: 0,
            k: u32::try_from(nr).unwrap(),
        });
    }
    program.push(statement(libc::BPF_RET as u16, libc::SECCOMP_RET_ALLOW));
    program.push(statement(
        libc::BPF_RET as u16,
        libc::SECCOMP_RET_USER_NOTIF,
    ));
    // SAFETY: seccomp(2) and dup2 are async-signal-safe; `program` lives in the closure.
    unsafe {
        command.pre_exec(move || {
            let fprog = libc::sock_fprog {
                len: u16::try_from(program.len()).unwrap_or(0),
                filter: program.as_ptr().cast_mut(),
            };
            let listener = libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
                &raw const fprog,
            );
            if listener < 0 || libc::dup2(listener as libc::c_int, LISTENER_FD) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            libc::close(listener as libc::c_int);
            Ok(())
        });
    }
}

fn statement(code: u16, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

/// Lets each stalled call of process `pid` go on after `delay`. Drop it only once the process
/// is gone: the process holds the listener too, so a call made later would wait for ever.
pub struct Staller {
    stop: Arc<AtomicBool>,
    held: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl Staller {
    pub fn start(pid: u32, delay: Duration) -> Staller {
        // SAFETY: pidfd_open and pidfd_getfd on our own child; the results are checked.
        let listener = unsafe {
            let pidfd = libc::syscall(libc::SYS_pidfd_open, pid, 0);
            assert!(
                pidfd >= 0,
                "pidfd_open: {}",
                std::io::Error::last_os_error()
            );
            let fd = libc::syscall(libc::SYS_pidfd_getfd, pidfd, LISTENER_FD, 0);
            let error = std::io::Error::last_os_error();
            libc::close(pidfd as libc::c_int);
            assert!(fd >= 0, "pidfd_getfd: {error}");
            OwnedFd::from_raw_fd(fd as libc::c_int)
        };
        let stop = Arc::new(AtomicBool::new(false));
        let held = Arc::new(AtomicU64::new(0));
        let (stopped, count) = (Arc::clone(&stop), Arc::clone(&held));
        let thread = std::thread::spawn(move || serve(&listener, &stopped, &count, delay));
        Staller {
            stop,
            held,
            thread: Some(thread),
        }
    }

    /// How many calls have been held so far.
    pub fn held(&self) -> u64 {
        self.held.load(Ordering::Acquire)
    }
}

impl Drop for Staller {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn serve(listener: &OwnedFd, stop: &AtomicBool, held: &AtomicU64, delay: Duration) {
    while !stop.load(Ordering::Acquire) {
        let mut poll = libc::pollfd {
            fd: listener.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd, for its length.
        if unsafe { libc::poll(&mut poll, 1, 20) } != 1 || poll.revents & libc::POLLIN == 0 {
            if poll.revents & libc::POLLHUP != 0 {
                return;
            }
            continue;
        }
        // SAFETY: RECV fills a zeroed seccomp_notif; SEND reads the response given.
        unsafe {
            let mut notif: libc::seccomp_notif = std::mem::zeroed();
            if libc::ioctl(
                listener.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_RECV,
                &mut notif,
            ) != 0
            {
                continue;
            }
            std::thread::sleep(delay);
            let mut response: libc::seccomp_notif_resp = std::mem::zeroed();
            response.id = notif.id;
            response.flags = libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32;
            libc::ioctl(
                listener.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_SEND,
                &response,
            );
            held.fetch_add(1, Ordering::AcqRel);
        }
    }
}
