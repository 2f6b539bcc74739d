//! A user namespace built from virtiofsd's `--uid-map`/`--gid-map`, entered by `vbmq virtiofsd`
//! (one share per process) once its share is open and its socket bound, as virtiofsd serves
//! such a share. The kernel then confines the share's file operations: owners outside the map
//! read as the overflow IDs (65534), a request's credentials or a CHOWN to an ID outside the
//! map fail with `EINVAL`, and the namespace's root has no capability over a file whose owner
//! or group is outside the map (it gets the permissions "other" has).

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};

/// One line of a user namespace's map: `count` IDs from `inside` (as the namespace sees them,
/// the guest's) onto `outside` (the host's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdRange {
    /// The first ID inside the namespace.
    pub inside: u32,
    /// The first ID on the host.
    pub outside: u32,
    /// How many IDs.
    pub count: u32,
}

impl IdRange {
    fn end(base: u32, count: u32) -> u64 {
        u64::from(base) + u64::from(count)
    }

    fn overlaps(a: (u32, u32), b: (u32, u32)) -> bool {
        u64::from(a.0) < Self::end(b.0, b.1) && u64::from(b.0) < Self::end(a.0, a.1)
    }
}

/// The user and group maps of the namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UserNamespace {
    /// User IDs (`--uid-map`).
    pub uids: Vec<IdRange>,
    /// Group IDs (`--gid-map`).
    pub gids: Vec<IdRange>,
}

/// The most lines a map may have (user_namespaces(7), since Linux 4.15).
const MAX_LINES: usize = 340;

impl UserNamespace {
    /// Checks the maps as the kernel will when they are written: each one to one (no two
    /// ranges overlap, inside or outside), at most 340 lines; and, for vbmq, ID 0 mapped in
    /// both, since the namespace's root serves the share. An error is one line.
    pub fn check(&self) -> Result<(), String> {
        for (name, map) in [("--uid-map", &self.uids), ("--gid-map", &self.gids)] {
            if map.is_empty() {
                return Err(format!(
                    "{name}: required with {} (the namespace maps both kinds of ID)",
                    if name == "--uid-map" {
                        "--gid-map"
                    } else {
                        "--uid-map"
                    }
                ));
            }
            if map.len() > MAX_LINES {
                return Err(format!("{name}: at most {MAX_LINES} ranges"));
            }
            for (i, a) in map.iter().enumerate() {
                for b in &map[i + 1..] {
                    let inside = IdRange::overlaps((a.inside, a.count), (b.inside, b.count));
                    let outside = IdRange::overlaps((a.outside, a.count), (b.outside, b.count));
                    if inside || outside {
                        return Err(format!(
                            "{name}: :{}:{}:{}: and :{}:{}:{}: overlap (a map is one to one)",
                            a.inside, a.outside, a.count, b.inside, b.outside, b.count
                        ));
                    }
                }
            }
            if !map.iter().any(|r| r.inside == 0) {
                return Err(format!(
                    "{name}: ID 0 must be mapped (the namespace's root serves the share)"
                ));
            }
        }
        Ok(())
    }

    /// Moves this process into a new user namespace with these maps and becomes its root.
    /// The process must have one thread (the kernel refuses `unshare(CLONE_NEWUSER)` otherwise)
    /// and be root outside, to write any map: a child forked first writes them from the
    /// parent namespace, as virtiofsd's sandbox does. Supplementary groups are dropped first, so
    /// none of host root's groups lets the namespace's root reach a file.
    pub fn enter(&self) -> Result<(), String> {
        // SAFETY: setgroups reads no memory with a count of 0.
        if unsafe { libc::setgroups(0, std::ptr::null()) } != 0 {
            return Err(format!(
                "cannot drop supplementary groups: {}",
                io::Error::last_os_error()
            ));
        }
        let (go_read, go_write) = pipe()?;
        let (result_read, result_write) = pipe()?;
        // SAFETY: getpid has no arguments and cannot fail.
        let pid = unsafe { libc::getpid() };
        // SAFETY: the process has one thread (the caller's promise, and unshare fails below
        // otherwise), so the child may allocate and write files before it exits.
        let child = unsafe { libc::fork() };
        if child < 0 {
            return Err(format!("fork: {}", io::Error::last_os_error()));
        }
        if child == 0 {
            drop((go_write, result_read));
            let status = self.write_maps_for(pid, go_read, result_write);
            // SAFETY: ends the child without running the parent's exit handlers.
            unsafe { libc::_exit(status) };
        }
        drop((go_read, result_write));
        // SAFETY: unshare takes flags only.
        let unshared = if unsafe { libc::unshare(libc::CLONE_NEWUSER) } == 0 {
            Ok(())
        } else {
            Err(format!(
                "unshare(CLONE_NEWUSER): {}",
                io::Error::last_os_error()
            ))
        };
        let mut go = File::from(go_write);
        // The child writes nothing when the go byte does not come (the pipe closes).
        let signalled = unshared.and_then(|()| go.write_all(&[1]).map_err(|e| e.to_string()));
        drop(go);
        let mut message = String::new();
        let _ = File::from(result_read).read_to_string(&mut message);
        let mut status = 0;
        // SAFETY: waits for the child forked above.
        unsafe { libc::waitpid(child, &mut status, 0) };
        signalled?;
        if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
            if message.is_empty() {
                message = format!("the child writing the maps failed (wait status {status:#x})");
            }
            return Err(message);
        }
        // SAFETY: setresgid/setresuid take IDs only; the group first, while the process may.
        if unsafe { libc::setresgid(0, 0, 0) } != 0 || unsafe { libc::setresuid(0, 0, 0) } != 0 {
            return Err(format!(
                "cannot become the namespace's root: {}",
                io::Error::last_os_error()
            ));
        }
        Ok(())
    }

    /// The child's part: waits for the parent to unshare, then writes its maps. Returns the
    /// exit status; an error goes to `result` as one line.
    fn write_maps_for(&self, pid: libc::pid_t, go: OwnedFd, result: OwnedFd) -> i32 {
        let mut byte = [0u8];
        if File::from(go).read_exact(&mut byte).is_err() {
            return 1;
        }
        let write = |kind: &str, map: &[IdRange]| {
            let text: String = map
                .iter()
                .map(|r| format!("{} {} {}\n", r.inside, r.outside, r.count))
                .collect();
            let path = format!("/proc/{pid}/{kind}_map");
            // One write: the kernel takes a map whole or not at all.
            std::fs::write(&path, text).map_err(|e| format!("writing {path}: {e}"))
        };
        match write("uid", &self.uids).and_then(|()| write("gid", &self.gids)) {
            Ok(()) => 0,
            Err(e) => {
                let _ = File::from(result).write_all(e.as_bytes());
                1
            }
        }
    }
}

/// A close-on-exec pipe: (read end, write end).
fn pipe() -> Result<(OwnedFd, OwnedFd), String> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors the kernel writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(format!("pipe: {}", io::Error::last_os_error()));
    }
    // SAFETY: two fresh descriptors nothing else owns.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(inside: u32, outside: u32, count: u32) -> IdRange {
        IdRange {
            inside,
            outside,
            count,
        }
    }

    fn ns(uids: Vec<IdRange>) -> UserNamespace {
        UserNamespace {
            uids,
            gids: vec![range(0, 100_000, 65_536)],
        }
    }

    #[test]
    fn maps_are_one_to_one_and_map_root() {
        assert_eq!(ns(vec![range(0, 100_000, 65_536)]).check(), Ok(()));
        assert_eq!(
            ns(vec![range(0, 100_000, 10), range(10, 0, 1)]).check(),
            Ok(())
        );
        let refused = [
            vec![range(0, 100_000, 10), range(5, 200_000, 10)],
            vec![range(0, 100_000, 10), range(20, 100_009, 1)],
            vec![range(1, 100_000, 10)],
            vec![],
        ];
        for map in refused {
            let e = ns(map.clone()).check().unwrap_err();
            assert!(
                e.starts_with("--uid-map: ") && !e.contains('\n'),
                "{map:?}: {e}"
            );
        }
        let top = ns(vec![range(0, 1, 1), range(u32::MAX, u32::MAX, 1)]);
        assert_eq!(top.check(), Ok(()));
    }
}
