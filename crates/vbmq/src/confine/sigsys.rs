//! Names the forbidden system call before the process dies, so a missing allowlist entry is one
//! log line instead of a silent kill.

use std::io;

use super::SECCOMP_EXIT_STATUS;

/// Offset of `si_syscall` in a SIGSYS `siginfo_t` on 64-bit Linux: three `int`s, padding, then
/// the `_sigsys` union member `{ void *call_addr; int syscall; unsigned int arch; }`.
const SI_SYSCALL_OFFSET: usize = 24;

pub(super) fn install() -> io::Result<()> {
    // SAFETY: a zeroed sigaction is a valid "no flags, empty mask" value; we set the handler and
    // flags before passing it to the kernel, and the handler only calls async-signal-safe code.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = handle_sigsys as *const () as libc::sighandler_t;
        action.sa_flags = libc::SA_SIGINFO;
        libc::sigemptyset(&mut action.sa_mask);
        if libc::sigaction(libc::SIGSYS, &action, std::ptr::null_mut()) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

extern "C" fn handle_sigsys(
    _sig: libc::c_int,
    info: *mut libc::siginfo_t,
    _ctx: *mut libc::c_void,
) {
    // SAFETY: the kernel passes a valid siginfo_t for SIGSYS delivered by seccomp (SA_SIGINFO),
    // whose `_sigsys.syscall` field is at SI_SYSCALL_OFFSET.
    let nr = unsafe {
        info.cast::<u8>()
            .add(SI_SYSCALL_OFFSET)
            .cast::<i32>()
            .read_unaligned()
    };
    let mut digits = [0u8; 10];
    let mut first = digits.len();
    let mut value = nr.unsigned_abs();
    loop {
        first -= 1;
        digits[first] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 || first == 0 {
            break;
        }
    }
    let prefix = b"vbmq: seccomp: forbidden system call ";
    // SAFETY: write(2) and _exit(2) are async-signal-safe and allowed by the filter; the buffer
    // are live arrays.
    unsafe {
        libc::write(libc::STDERR_FILENO, prefix.as_ptr().cast(), prefix.len());
        libc::write(
            libc::STDERR_FILENO,
            digits[first..].as_ptr().cast(),
            digits.len() - first,
        );
        libc::write(libc::STDERR_FILENO, b"\n".as_ptr().cast(), 1);
        libc::_exit(SECCOMP_EXIT_STATUS);
    }
}
