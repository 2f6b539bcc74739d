use std::io::Write;
use std::os::fd::{FromRawFd, OwnedFd};
use std::time::Instant;

use super::*;

fn pipe() -> (File, File) {
    let mut fds = [0; 2];
    // SAFETY: room for the two descriptors the kernel writes.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: two fresh descriptors nothing else owns.
    unsafe {
        (
            File::from(OwnedFd::from_raw_fd(fds[0])),
            File::from(OwnedFd::from_raw_fd(fds[1])),
        )
    }
}

fn device() -> (tempfile::TempDir, Arc<FsDevice>) {
    let dir = tempfile::tempdir().unwrap();
    let device = FsDevice::open(dir.path(), "t", 1, false).unwrap();
    (dir, Arc::new(device))
}

#[test]
fn a_saved_state_loads_through_pipes() {
    let (_dir, source) = device();
    let transfer = StateTransfer::default();
    let (mut read, write) = pipe();
    transfer
        .start(source.clone(), Direction::Save, write)
        .unwrap();
    let mut bytes = Vec::new();
    read.read_to_end(&mut bytes).unwrap();
    transfer.check().unwrap();
    assert_eq!(ShareState::decode(&bytes), Ok(ShareState::default()));

    let (read, mut write) = pipe();
    transfer.start(source, Direction::Load, read).unwrap();
    write.write_all(&bytes).unwrap();
    drop(write);
    transfer.check().unwrap();
    // Each transfer is checked once.
    assert!(transfer.check().is_err());
}

#[test]
fn a_frontend_that_sends_nothing_and_keeps_the_pipe_is_given_up_on() {
    let (_dir, destination) = device();
    let transfer = StateTransfer::default();
    let (read, write) = pipe();
    transfer
        .start(destination.clone(), Direction::Load, read)
        .unwrap();
    // While it runs, a second transfer is refused.
    let (other, _keep) = pipe();
    let busy = transfer.start(destination, Direction::Load, other);
    assert_eq!(busy.unwrap_err().kind(), io::ErrorKind::ResourceBusy);
    let start = Instant::now();
    let checked = transfer.check();
    assert_eq!(checked.unwrap_err().kind(), io::ErrorKind::TimedOut);
    assert!(start.elapsed() < Duration::from_secs(10));
    drop(write);
}

#[test]
fn a_frontend_that_never_reads_the_state_is_given_up_on() {
    let (_dir, source) = device();
    let transfer = StateTransfer::default();
    let (read, write) = pipe();
    // A pipe already full: the state cannot be written.
    // SAFETY: F_SETPIPE_SZ on a descriptor `write` owns.
    unsafe { libc::fcntl(write.as_raw_fd(), libc::F_SETPIPE_SZ, 4096) };
    set_nonblocking(&write).unwrap();
    let mut full = &write;
    while full.write(&[0; 4096]).is_ok() {}
    transfer.start(source, Direction::Save, write).unwrap();
    let checked = transfer.check();
    assert_eq!(checked.unwrap_err().kind(), io::ErrorKind::TimedOut);
    drop(read);
}

#[test]
fn a_state_longer_than_the_limit_is_refused_as_it_arrives() {
    let (_dir, destination) = device();
    let transfer = StateTransfer::default();
    let (read, write) = pipe();
    transfer
        .start(destination.clone(), Direction::Load, read)
        .unwrap();
    let writer = std::thread::spawn(move || {
        let mut write = write;
        let chunk = vec![b' '; 1 << 20];
        let mut sent = 0;
        while sent < 2 * MAX_STATE && write.write_all(&chunk).is_ok() {
            sent += chunk.len();
        }
        sent
    });
    let checked = transfer.check();
    assert_eq!(checked.unwrap_err().kind(), io::ErrorKind::InvalidData);
    // The reader stopped (the pipe broke) soon after the limit, not at the end of the stream.
    assert!(writer.join().unwrap() < 2 * MAX_STATE);
    assert_eq!(destination.session(), None);
}
