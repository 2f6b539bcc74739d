//! Descriptors handed to a confined vbmq by a more privileged client (`vbmq ctl`, over the
//! control socket with `SCM_RIGHTS`), checked before they are used: vbmq opens and binds
//! nothing of its own after start. Whoever can reach the control socket may choose disks; the
//! checks catch a wrong descriptor (a directory, a connected socket, two different files), not
//! a malicious peer, which could name any file it can open anyway.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::net::UnixListener;

/// What a run-time disk's client passed along with the request; `None` where it passed nothing.
#[derive(Debug, Default)]
pub struct PassedDisk {
    /// The disk's vhost-user socket, bound and listening.
    pub socket: Option<OwnedFd>,
    /// The image, opened without `O_DIRECT` (read-only when the disk is).
    pub image: Option<OwnedFd>,
    /// The same image opened with `O_DIRECT`.
    pub image_direct: Option<OwnedFd>,
}

fn refused(what: &str, why: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, format!("passed {what}: {why}"))
}

fn socket_option(fd: &OwnedFd, option: libc::c_int) -> io::Result<libc::c_int> {
    let mut value: libc::c_int = 0;
    let mut len = libc::socklen_t::try_from(std::mem::size_of::<libc::c_int>())
        .map_err(|_| io::ErrorKind::InvalidInput)?;
    // SAFETY: getsockopt writes at most `len` bytes into `value`, an int.
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

/// The descriptor as a listener, if it is a Unix stream socket that listens (`SO_DOMAIN`,
/// `SO_TYPE`, `SO_ACCEPTCONN`).
pub fn listening_unix_socket(fd: OwnedFd) -> io::Result<UnixListener> {
    let what = "socket";
    let metadata = File::from(fd.try_clone()?).metadata()?;
    if !metadata.file_type().is_socket() {
        return Err(refused(what, "not a socket"));
    }
    let check = |option, expected, why: &str| match socket_option(&fd, option) {
        Ok(value) if value == expected => Ok(()),
        Ok(_) => Err(refused(what, why)),
        Err(e) => Err(refused(what, e)),
    };
    check(libc::SO_DOMAIN, libc::AF_UNIX, "not a Unix socket")?;
    check(libc::SO_TYPE, libc::SOCK_STREAM, "not a stream socket")?;
    check(libc::SO_ACCEPTCONN, 1, "not listening")?;
    Ok(UnixListener::from(fd))
}

/// The image's two descriptors as files, if they are one regular file or block device (same
/// device and inode), opened read-only when `readonly` and read-write otherwise, the second
/// with `O_DIRECT`.
pub fn image_files(
    image: OwnedFd,
    direct: Option<OwnedFd>,
    readonly: bool,
) -> io::Result<(File, Option<File>)> {
    let image = File::from(image);
    check_image_file("image", &image, readonly, false)?;
    let Some(direct) = direct else {
        return Ok((image, None));
    };
    let direct = File::from(direct);
    check_image_file("O_DIRECT image", &direct, readonly, true)?;
    let (a, b) = (image.metadata()?, direct.metadata()?);
    if (a.dev(), a.ino(), a.rdev()) != (b.dev(), b.ino(), b.rdev()) {
        return Err(refused("images", "the two descriptors are different files"));
    }
    Ok((image, Some(direct)))
}

fn check_image_file(what: &str, file: &File, readonly: bool, direct: bool) -> io::Result<()> {
    let metadata = file.metadata()?;
    let kind = metadata.file_type();
    if !metadata.is_file() && !kind.is_block_device() {
        return Err(refused(what, "not a regular file or a block device"));
    }
    // SAFETY: F_GETFL on a descriptor `file` owns; no memory is passed.
    let flags = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    let wanted = if readonly {
        libc::O_RDONLY
    } else {
        libc::O_RDWR
    };
    if flags & libc::O_ACCMODE != wanted {
        let mode = if readonly { "read-only" } else { "read-write" };
        return Err(refused(
            what,
            format!("not opened {mode} (readonly= says it must be)"),
        ));
    }
    if direct != (flags & libc::O_DIRECT != 0) {
        let how = if direct { "without" } else { "with" };
        return Err(refused(what, format!("opened {how} O_DIRECT")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::OpenOptions;
    use std::os::unix::fs::OpenOptionsExt;
    use std::os::unix::net::UnixDatagram;

    fn open(path: &std::path::Path, write: bool, direct: bool) -> OwnedFd {
        let mut options = OpenOptions::new();
        options.read(true).write(write);
        if direct {
            options.custom_flags(libc::O_DIRECT);
        }
        options.open(path).unwrap().into()
    }

    #[test]
    fn only_a_listening_unix_stream_socket_passes() {
        let dir = tempfile::tempdir().unwrap();
        let listening = UnixListener::bind(dir.path().join("l.sock")).unwrap();
        assert!(listening_unix_socket(listening.into()).is_ok());
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let e = listening_unix_socket(a.into()).unwrap_err();
        assert!(e.to_string().contains("not listening"), "{e}");
        let datagram = UnixDatagram::unbound().unwrap();
        let e = listening_unix_socket(datagram.into()).unwrap_err();
        assert!(e.to_string().contains("not a stream socket"), "{e}");
        let file = File::open(dir.path()).unwrap();
        let e = listening_unix_socket(file.into()).unwrap_err();
        assert!(e.to_string().contains("not a socket"), "{e}");
    }

    #[test]
    fn image_descriptors_must_be_one_file_opened_as_the_disk_needs() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a.raw"), dir.path().join("b.raw"));
        std::fs::write(&a, vec![0u8; 1 << 16]).unwrap();
        std::fs::write(&b, vec![0u8; 1 << 16]).unwrap();
        // tmpfs refuses O_DIRECT: the checks are on the buffered pair there.
        let direct_works = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(&a)
            .is_ok();
        assert!(image_files(open(&a, true, false), None, false).is_ok());
        assert!(image_files(open(&a, false, false), None, true).is_ok());
        let e = image_files(open(&a, false, false), None, false).unwrap_err();
        assert!(e.to_string().contains("read-write"), "{e}");
        let e = image_files(open(&a, true, false), None, true).unwrap_err();
        assert!(e.to_string().contains("read-only"), "{e}");
        let e = image_files(File::open(dir.path()).unwrap().into(), None, true).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        let e = image_files(open(&a, true, false), Some(open(&a, true, false)), false);
        assert!(e.unwrap_err().to_string().contains("without O_DIRECT"));
        if direct_works {
            let both = image_files(open(&a, true, false), Some(open(&a, true, true)), false);
            assert!(both.is_ok());
            let e = image_files(open(&a, true, false), Some(open(&b, true, true)), false);
            assert!(e.unwrap_err().to_string().contains("different files"));
        }
    }
}
