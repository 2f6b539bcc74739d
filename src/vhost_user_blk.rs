//! `vbmq vhost-user-blk`, and the vbmq binary started as `vbmq-vhost-user-blk` or
//! `vhost-user-blk`: one disk, served with QEMU's vhost-user backend program conventions, for a
//! management stack that finds vbmq through the vhost-user descriptor of type `block`.

use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use tracing_subscriber::EnvFilter;
use vbmq::config::{
    BLK_PROGRAM_CAPABILITIES, BLK_PROGRAM_HELP, BlkProgramCommand, parse_blk_program_args,
};

/// The arguments after the program name when this process is a block backend program: started
/// by a name ending in `vhost-user-blk` (the descriptor's binary, a link to vbmq), or as
/// `vbmq vhost-user-blk`.
pub fn arguments() -> Option<Vec<String>> {
    let mut args = std::env::args_os().map(|a| a.to_string_lossy().into_owned());
    let program = args.next()?;
    let rest: Vec<String> = args.collect();
    let name = std::path::Path::new(&program).file_name()?;
    if name.as_bytes().ends_with(b"vhost-user-blk") {
        return Some(rest);
    }
    (rest.first().map(String::as_str) == Some("vhost-user-blk")).then(|| rest[1..].to_vec())
}

/// Runs the block backend's command line `args`; returns the exit status (1 on any error).
pub fn run(args: &[String]) -> i32 {
    let command = match parse_blk_program_args(args, &vbmq::worker::online_cpus()) {
        Ok(command) => command,
        Err(e) => {
            eprintln!("vbmq vhost-user-blk: {e}");
            return 1;
        }
    };
    let mut args = match command {
        BlkProgramCommand::PrintCapabilities => {
            println!("{BLK_PROGRAM_CAPABILITIES}");
            return 0;
        }
        BlkProgramCommand::Help => {
            print!("{BLK_PROGRAM_HELP}");
            return 0;
        }
        BlkProgramCommand::Serve(args) => args,
    };
    // Before this process opens anything: `--fd` could otherwise name one of vbmq's own.
    if let Some(name) = &args.spec.socket_fd {
        match vbmq::systemd::inherited_fd(name) {
            Ok(fd) => {
                if let Some(path) = bound_path(fd) {
                    let unnamed = format!("socket={}", args.spec.socket.display());
                    args.text =
                        args.text
                            .replacen(&unnamed, &format!("socket={}", path.display()), 1);
                    args.spec.socket = path;
                }
            }
            Err(e) => {
                eprintln!("vbmq vhost-user-blk: --fd: {e}");
                return 1;
            }
        }
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn")),
        )
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .init();
    tracing::info!("serving {}", args.text);
    let options = vbmq::serve::ServeOptions {
        disks: vec![args.spec.clone()],
        texts: vec![args.text.clone()],
        shares: Vec::new(),
        share_texts: Vec::new(),
        fs_roots: Vec::new(),
        seccomp: true,
        control_dir: None,
        config: None,
        ready_line: None,
        // No control socket: no disk is added at run time.
        run_time_rings: 0,
        user_namespace: None,
        landlock_required: None,
    };
    match vbmq::serve::run(&options, None) {
        0 => 0,
        _ => 1,
    }
}

/// The path a Unix socket is bound to, if it has one (the inherited socket's name in logs and
/// metrics; the confinement leaves its file to its owner).
fn bound_path(fd: std::os::fd::RawFd) -> Option<PathBuf> {
    // SAFETY: sockaddr_un is plain data; getsockname writes at most `len` bytes into it.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    let mut len = libc::socklen_t::try_from(std::mem::size_of::<libc::sockaddr_un>()).ok()?;
    // SAFETY: as above; a descriptor that is no socket only makes it fail.
    let rc = unsafe { libc::getsockname(fd, (&raw mut addr).cast(), &mut len) };
    if rc != 0 || addr.sun_family != libc::AF_UNIX as libc::sa_family_t {
        return None;
    }
    let offset = std::mem::offset_of!(libc::sockaddr_un, sun_path);
    let len = usize::try_from(len).ok()?.checked_sub(offset)?;
    let bytes: Vec<u8> = addr.sun_path[..len.min(addr.sun_path.len())]
        .iter()
        .map(|&c| c.cast_unsigned())
        .take_while(|&b| b != 0)
        .collect();
    // Unnamed, or abstract (a leading NUL): no path.
    (!bytes.is_empty() && bytes[0] == b'/')
        .then(|| PathBuf::from(std::ffi::OsStr::from_bytes(&bytes)))
}
