//! Descriptors another, more privileged process opened for vbmq and passed over the control
//! socket (`SCM_RIGHTS`: `vbmq ctl add-disk` and `add-fs`): each is checked to be what the request
//! says before it is served, with the calls a confined vbmq may make (`fstat`, `fcntl`,
//! `getsockopt`), never by its path. vbmq opens and binds nothing of its own after start. Whoever
//! can reach the control socket may choose disks and shares; the checks catch a wrong descriptor
//! (a directory, a connected socket, two different files), not a malicious peer, which could name
//! any file it can open anyway.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::net::UnixListener;

/// What a run-time disk's client passed along with the request; `None` where it passed nothing.
/// Each file the disk opens beside its image is one more named descriptor here (and in the
/// control protocol's `Passed`).
#[derive(Debug, Default)]
pub struct PassedDisk {
    /// The disk's vhost-user socket, bound and listening.
    pub socket: Option<OwnedFd>,
    /// The image, opened without `O_DIRECT` (read-only when the disk is).
    pub image: Option<OwnedFd>,
    /// The same image opened with `O_DIRECT`.
    pub image_direct: Option<OwnedFd>,
    /// `base=`: the base image, read-only, without `O_DIRECT`.
    pub base: Option<OwnedFd>,
    /// `base=`: the same base with `O_DIRECT`.
    pub base_direct: Option<OwnedFd>,
    /// `base=`: the image's map (`DISK.map`), read-write.
    pub map: Option<OwnedFd>,
    /// `key-file=`: the key file or pipe, opened to read.
    pub key: Option<OwnedFd>,
    /// `track-changes=on`: the image's changed-block maps (`DISK.changes`), read-write.
    pub changes: Option<OwnedFd>,
    /// A qcow2 image's or base's backing chain, read-only, top's backing file first.
    pub backing: Vec<OwnedFd>,
    /// The user the control client runs as (`SO_PEERCRED`): the map, the changes file and a
    /// regular key file must be its or root's, with one link. `None`: copies of files the
    /// daemon holds already (`reload --replace`), not checked again.
    pub client_uid: Option<u32>,
}

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

/// The descriptor as a listener, if it is a Unix stream socket that listens (see
/// [`check_listening_socket`]).
pub fn listening_unix_socket(fd: OwnedFd) -> io::Result<UnixListener> {
    check_listening_socket(fd.as_fd())?;
    Ok(UnixListener::from(fd))
}

/// The descriptor as a stream, if it is a Unix stream socket that does not listen (connected
/// by the sender: a mirror's destination).
pub fn connected_unix_socket(fd: OwnedFd) -> io::Result<std::os::unix::net::UnixStream> {
    const WHAT: &str = "a connected Unix stream socket";
    let kind = file_type(fd.as_fd())?;
    if kind != libc::S_IFSOCK {
        return Err(refused(WHAT, type_name(kind)));
    }
    if socket_option(fd.as_fd(), libc::SO_DOMAIN)? != libc::AF_UNIX
        || socket_option(fd.as_fd(), libc::SO_TYPE)? != libc::SOCK_STREAM
        || socket_option(fd.as_fd(), libc::SO_ACCEPTCONN)? != 0
    {
        return Err(refused(WHAT, "not a connected Unix stream socket"));
    }
    Ok(std::os::unix::net::UnixStream::from(fd))
}

/// The descriptor as a TCP socket (IPv4 or IPv6) that listens (`listening`: an NBD export's
/// over TLS) or is connected (a mirror's destination over TLS).
pub fn tcp_socket(fd: OwnedFd, listening: bool) -> io::Result<OwnedFd> {
    let what = if listening {
        "a listening TCP socket"
    } else {
        "a connected TCP socket"
    };
    let kind = file_type(fd.as_fd())?;
    if kind != libc::S_IFSOCK {
        return Err(refused(what, type_name(kind)));
    }
    let domain = socket_option(fd.as_fd(), libc::SO_DOMAIN)?;
    if (domain != libc::AF_INET && domain != libc::AF_INET6)
        || socket_option(fd.as_fd(), libc::SO_TYPE)? != libc::SOCK_STREAM
        || (socket_option(fd.as_fd(), libc::SO_ACCEPTCONN)? != 0) != listening
    {
        return Err(refused(what, "another kind of socket"));
    }
    Ok(fd)
}

fn refused_image(what: &str, why: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, format!("passed {what}: {why}"))
}

/// The image's two descriptors as files, if they are one regular file or block device (same
/// device and inode), opened read-only when `readonly` and read-write otherwise, the second
/// with `O_DIRECT`.
pub fn image_files(
    image: OwnedFd,
    direct: Option<OwnedFd>,
    readonly: bool,
) -> io::Result<(File, Option<File>)> {
    file_pair("image", image, direct, readonly)
}

/// A `base=` disk's base as files: as [`image_files`], read-only.
pub fn base_files(base: OwnedFd, direct: Option<OwnedFd>) -> io::Result<(File, Option<File>)> {
    file_pair("base", base, direct, true)
}

fn file_pair(
    what: &str,
    image: OwnedFd,
    direct: Option<OwnedFd>,
    readonly: bool,
) -> io::Result<(File, Option<File>)> {
    let image = File::from(image);
    check_image_file(what, &image, readonly, false)?;
    let Some(direct) = direct else {
        return Ok((image, None));
    };
    let direct = File::from(direct);
    check_image_file(&format!("O_DIRECT {what}"), &direct, readonly, true)?;
    let (a, b) = (image.metadata()?, direct.metadata()?);
    if (a.dev(), a.ino(), a.rdev()) != (b.dev(), b.ino(), b.rdev()) {
        return Err(refused_image(
            &format!("{what}s"),
            "the two descriptors are different files",
        ));
    }
    Ok((image, Some(direct)))
}

/// A qcow2 backing chain's files, if each is a regular file or block device opened read-only
/// (without `O_DIRECT`: the qcow2 reader reads them on the queue's thread).
pub fn backing_files(chain: Vec<OwnedFd>) -> io::Result<Vec<File>> {
    chain
        .into_iter()
        .map(|fd| {
            let file = File::from(fd);
            check_image_file("backing file", &file, true, false)?;
            Ok(file)
        })
        .collect()
}

/// A `base=` disk's map (`DISK.map`) as a file, if it is a regular file opened read-write,
/// the client's own (see [`check_owner`]).
pub fn map_file(map: OwnedFd, client_uid: Option<u32>) -> io::Result<File> {
    read_write_file("map", map, client_uid)
}

/// A `track-changes=on` disk's map file (`DISK.changes`) as a file, if it is a regular file
/// opened read-write, the client's own (see [`check_owner`]).
pub fn changes_file(changes: OwnedFd, client_uid: Option<u32>) -> io::Result<File> {
    read_write_file("changes file", changes, client_uid)
}

fn read_write_file(what: &str, fd: OwnedFd, client_uid: Option<u32>) -> io::Result<File> {
    let file = File::from(fd);
    let metadata = file.metadata()?;
    if !metadata.is_file() {
        return Err(refused_image(what, "not a regular file"));
    }
    if access_mode(&file)? != libc::O_RDWR {
        return Err(refused_image(what, "not opened read-write"));
    }
    check_owner(what, &metadata, client_uid)?;
    Ok(file)
}

/// A file vbmq writes or trusts beside an image (a map, a changes file, a regular key file)
/// must have one link, and be owned by the control client's user (`client_uid`) or root: a
/// name planted by someone else (a hard link to their file, or a file of theirs) is refused,
/// as lock files are. `None`: not checked (the daemon's own copies).
pub fn check_owner(
    what: &str,
    metadata: &std::fs::Metadata,
    client_uid: Option<u32>,
) -> io::Result<()> {
    let Some(uid) = client_uid else {
        return Ok(());
    };
    if metadata.nlink() != 1 {
        return Err(refused_image(
            what,
            format!(
                "{} links (one name is not enough to know which file it is)",
                metadata.nlink()
            ),
        ));
    }
    if metadata.uid() != uid && metadata.uid() != 0 {
        return Err(refused_image(
            what,
            format!(
                "owned by uid {}, neither the control client's (uid {uid}) nor root's",
                metadata.uid()
            ),
        ));
    }
    Ok(())
}

/// A `key-file=` as a file, if it is a regular file (the client's own, see [`check_owner`])
/// or a pipe opened to read.
pub fn key_file(key: OwnedFd, client_uid: Option<u32>) -> io::Result<File> {
    let key = File::from(key);
    let metadata = key.metadata()?;
    let kind = metadata.file_type();
    if !kind.is_file() && !kind.is_fifo() {
        return Err(refused_image("key file", "not a regular file or a pipe"));
    }
    if kind.is_file() {
        check_owner("key file", &metadata, client_uid)?;
    }
    if access_mode(&key)? == libc::O_WRONLY {
        return Err(refused_image("key file", "not opened to read"));
    }
    Ok(key)
}

fn file_flags(file: &File) -> io::Result<libc::c_int> {
    // SAFETY: F_GETFL on a descriptor `file` owns; no memory is passed.
    let flags = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(flags)
}

fn access_mode(file: &File) -> io::Result<libc::c_int> {
    Ok(file_flags(file)? & libc::O_ACCMODE)
}

fn check_image_file(what: &str, file: &File, readonly: bool, direct: bool) -> io::Result<()> {
    let metadata = file.metadata()?;
    let kind = metadata.file_type();
    if !metadata.is_file() && !kind.is_block_device() {
        return Err(refused_image(what, "not a regular file or a block device"));
    }
    let flags = file_flags(file)?;
    let wanted = if readonly {
        libc::O_RDONLY
    } else {
        libc::O_RDWR
    };
    if flags & libc::O_ACCMODE != wanted {
        let mode = if readonly { "read-only" } else { "read-write" };
        return Err(refused_image(
            what,
            if what.ends_with("base") {
                format!("not opened {mode} (a base is never written)")
            } else if what == "backing file" {
                format!("not opened {mode} (a backing file is never written)")
            } else {
                format!("not opened {mode} (readonly= says it must be)")
            },
        ));
    }
    if direct != (flags & libc::O_DIRECT != 0) {
        let how = if direct { "without" } else { "with" };
        return Err(refused_image(what, format!("opened {how} O_DIRECT")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::OpenOptions;
    use std::os::unix::fs::OpenOptionsExt;
    use std::os::unix::net::{UnixDatagram, UnixStream};

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
        assert!(e.to_string().contains("does not listen"), "{e}");
        let datagram = UnixDatagram::unbound().unwrap();
        let e = listening_unix_socket(datagram.into()).unwrap_err();
        assert!(e.to_string().contains("not a stream socket"), "{e}");
        let file = File::open(dir.path()).unwrap();
        let e = listening_unix_socket(file.into()).unwrap_err();
        assert!(e.to_string().contains("a directory"), "{e}");
    }

    #[test]
    fn a_changes_file_is_a_regular_file_opened_read_write() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("vm.raw.changes");
        std::fs::write(&path, b"").unwrap();
        assert!(changes_file(open(&path, true, false), None).is_ok());
        let e = changes_file(open(&path, false, false), None).unwrap_err();
        assert_eq!(e.to_string(), "passed changes file: not opened read-write");
        let e = changes_file(File::open(dir.path()).unwrap().into(), None).unwrap_err();
        assert_eq!(e.to_string(), "passed changes file: not a regular file");
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
