//! Descriptors sent with a control request (`SCM_RIGHTS`): `vbmq ctl` opens what a confined
//! vbmq may not (a shared directory, a socket bound where the operator names it) and sends the
//! descriptors with the request line; the daemon takes those that arrive while it reads the
//! line as that request's.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

/// The most descriptors one request may carry; a message with more is refused whole. (A
/// tracked `base=` disk with `key-file=` passes eight: socket, image and base twice, map, key,
/// changes.)
pub const MAX_FDS: usize = 10;

/// Room for [`MAX_FDS`] descriptors in a control message, aligned for `cmsghdr`.
#[repr(C)]
struct ControlBuffer {
    _align: libc::cmsghdr,
    bytes: [u8; 64],
}

// The buffer holds CMSG_SPACE(MAX_FDS descriptors) (16-byte header, data padded to 8).
const _: () = assert!(16 + (MAX_FDS * 4).next_multiple_of(8) <= 64);

fn space(fds: usize) -> usize {
    let len = u32::try_from(fds * size_of::<RawFd>()).unwrap_or(u32::MAX);
    // SAFETY: CMSG_SPACE is arithmetic on its argument.
    unsafe { libc::CMSG_SPACE(len) as usize }
}

/// Sends `bytes` (all of them, or an error) with `fds` attached to the first part sent.
pub fn send(stream: &UnixStream, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    if fds.len() > MAX_FDS {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "too many descriptors",
        ));
    }
    let mut sent = 0;
    let mut fds = fds;
    while sent < bytes.len() {
        let mut iov = libc::iovec {
            iov_base: bytes[sent..].as_ptr().cast_mut().cast(),
            iov_len: bytes.len() - sent,
        };
        // SAFETY: an all-zero buffer and msghdr are valid values.
        let mut control: ControlBuffer = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &raw mut iov;
        msg.msg_iovlen = 1;
        if !fds.is_empty() {
            msg.msg_control = (&raw mut control).cast();
            msg.msg_controllen = space(fds.len());
            // SAFETY: the control buffer holds CMSG_SPACE(fds) bytes: the first header and its
            // data are inside it.
            unsafe {
                let header = libc::CMSG_FIRSTHDR(&msg);
                (*header).cmsg_level = libc::SOL_SOCKET;
                (*header).cmsg_type = libc::SCM_RIGHTS;
                let len = u32::try_from(std::mem::size_of_val(fds)).unwrap_or(u32::MAX);
                (*header).cmsg_len = libc::CMSG_LEN(len) as usize;
                let data = libc::CMSG_DATA(header).cast::<RawFd>();
                for (i, fd) in fds.iter().enumerate() {
                    data.add(i).write_unaligned(fd.as_raw_fd());
                }
            }
        }
        // SAFETY: `msg` points at live buffers of the lengths it gives.
        let n = unsafe { libc::sendmsg(stream.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
        if n < 0 {
            let error = io::Error::last_os_error();
            if error.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(error);
        }
        sent += usize::try_from(n).unwrap_or(0);
        fds = &[];
    }
    Ok(())
}

/// Reads into `buf` with `recvmsg`, adding the descriptors that came with the bytes to `fds`
/// (close-on-exec). More than [`MAX_FDS`] in one message is an error (those that came are
/// closed).
pub fn recv(stream: &UnixStream, buf: &mut [u8], fds: &mut Vec<OwnedFd>) -> io::Result<usize> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: an all-zero buffer and msghdr are valid values.
    let mut control: ControlBuffer = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &raw mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = (&raw mut control).cast();
    msg.msg_controllen = space(MAX_FDS);
    // SAFETY: `msg` points at live buffers of the lengths it gives.
    let n = unsafe { libc::recvmsg(stream.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut received = Vec::new();
    // SAFETY: the kernel filled the control buffer and `msg_controllen`; each header lies in
    // it, and an SCM_RIGHTS header's data is an array of descriptors now ours.
    unsafe {
        let mut header = libc::CMSG_FIRSTHDR(&msg);
        while !header.is_null() {
            if (*header).cmsg_level == libc::SOL_SOCKET && (*header).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(header).cast::<RawFd>();
                let header_len = libc::CMSG_LEN(0) as usize;
                let count =
                    ((*header).cmsg_len as usize).saturating_sub(header_len) / size_of::<RawFd>();
                for i in 0..count {
                    received.push(OwnedFd::from_raw_fd(data.add(i).read_unaligned()));
                }
            }
            header = libc::CMSG_NXTHDR(&msg, header);
        }
    }
    if msg.msg_flags & libc::MSG_CTRUNC != 0 || fds.len() + received.len() > MAX_FDS {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("more than {MAX_FDS} descriptors with a request"),
        ));
    }
    fds.extend(received);
    Ok(usize::try_from(n).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn descriptors_arrive_with_the_bytes_and_too_many_are_refused() {
        let (a, b) = UnixStream::pair().unwrap();
        let file = tempfile::tempfile().unwrap();
        send(&a, b"hello\n", &[file.as_fd(), a.as_fd()]).unwrap();
        let (mut buf, mut fds) = ([0u8; 64], Vec::new());
        let n = recv(&b, &mut buf, &mut fds).unwrap();
        assert_eq!(&buf[..n], b"hello\n");
        assert_eq!(fds.len(), 2);
        let file_ino = |fd: BorrowedFd<'_>| {
            let file = std::fs::File::from(fd.try_clone_to_owned().unwrap());
            std::os::unix::fs::MetadataExt::ino(&file.metadata().unwrap())
        };
        assert_eq!(file_ino(fds[0].as_fd()), file_ino(file.as_fd()));
        // One too many in one message: refused, none kept.
        let too_many = [file.as_fd(); MAX_FDS + 1];
        assert!(send(&a, b"x", &too_many).is_err());
        let (a2, b2) = UnixStream::pair().unwrap();
        let raw: Vec<BorrowedFd<'_>> = (0..=MAX_FDS).map(|_| file.as_fd()).collect();
        send_unchecked(&a2, &raw);
        let mut fds = Vec::new();
        assert!(recv(&b2, &mut buf, &mut fds).is_err());
        assert!(fds.is_empty());
    }

    /// Descriptors in one message, past `send`'s own check (at most 24).
    fn send_unchecked(stream: &UnixStream, fds: &[BorrowedFd<'_>]) {
        #[repr(C)]
        struct Big {
            _align: libc::cmsghdr,
            bytes: [u8; 112],
        }
        let byte = [b'x'];
        let mut iov = libc::iovec {
            iov_base: byte.as_ptr().cast_mut().cast(),
            iov_len: 1,
        };
        // SAFETY: zeroed plain structs, filled as `send` does, with room for five.
        unsafe {
            let mut control: Big = std::mem::zeroed();
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_iov = &raw mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = (&raw mut control).cast();
            msg.msg_controllen = space(fds.len());
            let header = libc::CMSG_FIRSTHDR(&msg);
            (*header).cmsg_level = libc::SOL_SOCKET;
            (*header).cmsg_type = libc::SCM_RIGHTS;
            (*header).cmsg_len = libc::CMSG_LEN((fds.len() * 4) as u32) as usize;
            let data = libc::CMSG_DATA(header).cast::<RawFd>();
            for (i, fd) in fds.iter().enumerate() {
                data.add(i).write_unaligned(fd.as_raw_fd());
            }
            assert!(libc::sendmsg(stream.as_raw_fd(), &msg, 0) > 0);
        }
    }
}
