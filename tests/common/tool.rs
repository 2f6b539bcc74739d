//! Host tools the tests run to their end (`qemu-img`, `nbdcopy`, `qemu-nbd`, …).

use std::ffi::OsStr;
use std::fmt::Debug;
use std::path::Path;
use std::process::Command;

/// Runs `program` to its end; its stdout. Panics with its stderr if it fails.
pub fn run_tool<A: AsRef<OsStr> + Debug>(program: &str, args: &[A]) -> String {
    run_command(Command::new(program).args(args))
}

/// Runs `command` to its end; its stdout. Panics with its stderr if it fails or cannot start.
pub fn run_command(command: &mut Command) -> String {
    let out = command.output().unwrap_or_else(|e| {
        panic!("{command:?}: {e} (scripts/install-test-deps.sh installs the tools)")
    });
    assert!(
        out.status.success(),
        "{command:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The URI of the NBD export on the Unix socket `socket`, for libnbd and QEMU.
pub fn nbd_uri(socket: &Path) -> String {
    let socket = socket.to_str().expect("utf-8 path");
    format!("nbd+unix:///?socket={socket}")
}

/// `qemu-img create` of the qcow2 `image` over `backing` (the name its header keeps) of
/// `backing_format`, with `options` (`-o …`).
pub fn qcow2_over(image: &Path, backing_format: &str, backing: &str, options: &[&str]) {
    let mut args = vec!["create", "-f", "qcow2", "-F", backing_format, "-b", backing];
    args.extend(options);
    args.push(image.to_str().unwrap());
    run_tool("qemu-img", &args);
}
