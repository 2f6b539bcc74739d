//! Descriptors sent with a control request (`SCM_RIGHTS`), both ends: the client attaches them
//! to the request line's first bytes; the server collects what arrives with a line's bytes.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

/// The most descriptors one request may carry; more and the client is dropped.
pub const MAX_FDS: usize = 4;

/// Room for a control message of `MAX_FDS` descriptors, aligned as `cmsghdr` needs.
#[repr(C, align(8))]
struct CmsgBuffer([u8; 64]);

fn cmsg_space(count: usize) -> usize {
    let bytes = u32::try_from(count * std::mem::size_of::<RawFd>()).unwrap_or(u32::MAX);
    // SAFETY: CMSG_SPACE only computes a size.
    unsafe { libc::CMSG_SPACE(bytes) as usize }
}

/// Sends `bytes` on `stream`, with `fds` (at most [`MAX_FDS`]) attached to the first of them.
pub fn send(stream: &UnixStream, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    if fds.len() > MAX_FDS {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "too many descriptors",
        ));
    }
    let mut sent = 0;
    while sent < bytes.len() {
        let rest = &bytes[sent..];
        let mut iov = libc::iovec {
            iov_base: rest.as_ptr().cast_mut().cast(),
            iov_len: rest.len(),
        };
        let mut control = CmsgBuffer([0; 64]);
        // SAFETY: an all-zero msghdr is valid; the pointers set below outlive the call.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &raw mut iov;
        msg.msg_iovlen = 1;
        if sent == 0 && !fds.is_empty() {
            let space = cmsg_space(fds.len());
            msg.msg_control = control.0.as_mut_ptr().cast();
            msg.msg_controllen = space;
            let data_len = u32::try_from(std::mem::size_of_val(fds)).unwrap_or(u32::MAX);
            // SAFETY: `msg_control` has `space` bytes, room for one header and the descriptors;
            // CMSG_FIRSTHDR is then non-null and CMSG_DATA points inside the buffer.
            unsafe {
                let header = libc::CMSG_FIRSTHDR(&msg);
                (*header).cmsg_level = libc::SOL_SOCKET;
                (*header).cmsg_type = libc::SCM_RIGHTS;
                (*header).cmsg_len = libc::CMSG_LEN(data_len) as usize;
                let data = libc::CMSG_DATA(header).cast::<RawFd>();
                for (i, fd) in fds.iter().enumerate() {
                    data.add(i).write_unaligned(fd.as_raw_fd());
                }
            }
        }
        // SAFETY: `msg` points to a live iovec and control buffer.
        let n = unsafe { libc::sendmsg(stream.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        sent += n.unsigned_abs();
    }
    Ok(())
}

/// Reads into `buf`; descriptors that came with the bytes are added to `fds` (close-on-exec).
/// More than [`MAX_FDS`] in all, or a truncated control message, is an error (the extra
/// descriptors are closed).
pub fn recv(stream: &UnixStream, buf: &mut [u8], fds: &mut Vec<OwnedFd>) -> io::Result<usize> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut control = CmsgBuffer([0; 64]);
    // SAFETY: an all-zero msghdr is valid; the pointers set below outlive the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &raw mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.0.as_mut_ptr().cast();
    msg.msg_controllen = cmsg_space(MAX_FDS);
    // SAFETY: `msg` points to a live buffer and control buffer of the sizes it gives.
    let n = unsafe { libc::recvmsg(stream.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel filled `msg`'s control buffer; the CMSG macros walk it within
    // `msg_controllen`, and each SCM_RIGHTS payload holds descriptors now ours.
    unsafe {
        let mut header = libc::CMSG_FIRSTHDR(&msg);
        while !header.is_null() {
            if (*header).cmsg_level == libc::SOL_SOCKET && (*header).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(header).cast::<RawFd>();
                let payload = (*header).cmsg_len - libc::CMSG_LEN(0) as usize;
                for i in 0..payload / std::mem::size_of::<RawFd>() {
                    fds.push(OwnedFd::from_raw_fd(data.add(i).read_unaligned()));
                }
            }
            header = libc::CMSG_NXTHDR(&msg, header);
        }
    }
    if msg.msg_flags & libc::MSG_CTRUNC != 0 || fds.len() > MAX_FDS {
        fds.clear();
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("more than {MAX_FDS} descriptors with one request"),
        ));
    }
    Ok(n.unsigned_abs())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn descriptors_arrive_with_the_bytes_they_were_sent_with() {
        let (a, b) = UnixStream::pair().unwrap();
        let file = std::fs::File::open("/proc/self/exe").unwrap();
        send(&a, b"line\n", &[file.as_fd(), a.as_fd()]).unwrap();
        let (mut buf, mut fds) = ([0u8; 16], Vec::new());
        let n = recv(&b, &mut buf, &mut fds).unwrap();
        assert_eq!(&buf[..n], b"line\n");
        assert_eq!(fds.len(), 2);
        let same = |x: &OwnedFd, y: &std::fs::File| {
            use std::os::unix::fs::MetadataExt;
            let x = std::fs::File::from(x.try_clone().unwrap())
                .metadata()
                .unwrap();
            let y = y.metadata().unwrap();
            (x.dev(), x.ino()) == (y.dev(), y.ino())
        };
        assert!(same(&fds[0], &file));
        // Too many in all is refused and closes them.
        let five: Vec<_> = (0..4).map(|_| file.as_fd()).collect();
        send(&a, b"x", &five).unwrap();
        assert!(recv(&b, &mut buf, &mut fds).is_err());
        assert!(fds.is_empty());
    }
}
