//! A kernel without Landlock, for a child process (`#[path]`-included by the tests that need
//! one).

/// A seccomp filter answering `ENOSYS` to `landlock_create_ruleset`, as a kernel without
/// Landlock does; everything else is allowed.
pub fn no_landlock() -> std::io::Result<()> {
    const RET_ERRNO_ENOSYS: u32 = 0x0005_0000 | libc::ENOSYS as u32;
    const RET_ALLOW: u32 = 0x7fff_0000;
    let filter = [
        // Load the system call number (`seccomp_data.nr`).
        libc::sock_filter {
            code: 0x20,
            jt: 0,
            jf: 0,
            k: 0,
        },
        libc::sock_filter {
            code: 0x15,
            jt: 0,
            jf: 1,
            k: libc::SYS_landlock_create_ruleset as u32,
        },
        libc::sock_filter {
            code: 0x06,
            jt: 0,
            jf: 0,
            k: RET_ERRNO_ENOSYS,
        },
        libc::sock_filter {
            code: 0x06,
            jt: 0,
            jf: 0,
            k: RET_ALLOW,
        },
    ];
    let program = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr().cast_mut(),
    };
    // SAFETY: prctl with a filter program that outlives the call.
    let failed = unsafe {
        libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
            || libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &raw const program,
            ) != 0
    };
    if failed {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
