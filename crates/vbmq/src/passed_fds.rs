//! Descriptors another process opened for vbmq and passed over the control socket
//! (`SCM_RIGHTS`): each is checked to be what the request says before it is served, with the
//! calls a confined vbmq may make (`fstat`, `getsockopt`), never by its path.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// Why a passed descriptor is refused: what it should have been, and what it is.
fn refused(what: &str, found: impl std::fmt::Display) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("the descriptor passed is not {what}: {found}"),
    )
}

fn file_type(fd: BorrowedFd<'_>) -> io::Result<libc::mode_t> {
    // SAFETY: an all-zero stat is a valid value; fstat writes it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat on a borrowed, open descriptor into a local struct.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st.st_mode & libc::S_IFMT)
}

fn type_name(mode: libc::mode_t) -> &'static str {
    match mode {
        libc::S_IFREG => "a regular file",
        libc::S_IFDIR => "a directory",
        libc::S_IFSOCK => "a socket",
        libc::S_IFBLK => "a block device",
        libc::S_IFCHR => "a character device",
        libc::S_IFIFO => "a FIFO",
        libc::S_IFLNK => "a symbolic link",
        _ => "of an unknown type",
    }
}

/// A directory (opened `O_PATH` or to read).
pub fn check_directory(fd: BorrowedFd<'_>) -> io::Result<()> {
    match file_type(fd)? {
        libc::S_IFDIR => Ok(()),
        other => Err(refused("a directory", type_name(other))),
    }
}

/// A regular file (a socket's lock file).
pub fn check_regular_file(fd: BorrowedFd<'_>) -> io::Result<()> {
    match file_type(fd)? {
        libc::S_IFREG => Ok(()),
        other => Err(refused("a regular file", type_name(other))),
    }
}

fn socket_option(fd: BorrowedFd<'_>, option: libc::c_int) -> io::Result<libc::c_int> {
    let mut value: libc::c_int = 0;
    let mut len = libc::socklen_t::try_from(size_of::<libc::c_int>()).unwrap_or(4);
    // SAFETY: getsockopt writes at most `len` bytes into the local `value`.
    let ret = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            option,
            (&raw mut value).cast(),
            &mut len,
        )
    };
    if ret != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(value)
}

/// A Unix stream socket that listens (bound and `listen`ed by the sender): `SO_DOMAIN`,
/// `SO_TYPE` and `SO_ACCEPTCONN`.
pub fn check_listening_socket(fd: BorrowedFd<'_>) -> io::Result<()> {
    const WHAT: &str = "a listening Unix stream socket";
    let kind = file_type(fd)?;
    if kind != libc::S_IFSOCK {
        return Err(refused(WHAT, type_name(kind)));
    }
    if socket_option(fd, libc::SO_DOMAIN)? != libc::AF_UNIX {
        return Err(refused(WHAT, "not a Unix socket"));
    }
    if socket_option(fd, libc::SO_TYPE)? != libc::SOCK_STREAM {
        return Err(refused(WHAT, "not a stream socket"));
    }
    if socket_option(fd, libc::SO_ACCEPTCONN)? == 0 {
        return Err(refused(WHAT, "a socket that does not listen"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use std::os::unix::net::{UnixListener, UnixStream};

    #[test]
    fn each_check_takes_what_it_names_and_refuses_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let file = std::fs::File::create(dir.path().join("f")).unwrap();
        let opened_dir = std::fs::File::open(dir.path()).unwrap();
        let listener = UnixListener::bind(dir.path().join("s")).unwrap();
        let (stream, _) = UnixStream::pair().unwrap();
        assert!(check_directory(opened_dir.as_fd()).is_ok());
        let error = check_directory(file.as_fd()).unwrap_err().to_string();
        assert_eq!(
            error,
            "the descriptor passed is not a directory: a regular file"
        );
        assert!(check_regular_file(file.as_fd()).is_ok());
        assert!(check_regular_file(opened_dir.as_fd()).is_err());
        assert!(check_listening_socket(listener.as_fd()).is_ok());
        let error = check_listening_socket(stream.as_fd()).unwrap_err();
        assert!(error.to_string().contains("does not listen"), "{error}");
        assert!(check_listening_socket(file.as_fd()).is_err());
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let error = check_listening_socket(udp.as_fd()).unwrap_err();
        assert!(error.to_string().contains("not a Unix socket"), "{error}");
    }
}
