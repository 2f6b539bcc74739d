//! `vbmq vhost-user-blk`: the command line QEMU's vhost-user "backend program conventions"
//! (`docs/interop/vhost-user.rst`) give a `block` backend, read into one disk's [`DiskSpec`].
//! A management stack that finds vbmq through a vhost-user descriptor of type `block` starts it
//! with `--socket-path=PATH` or `--fd=FDNUM`, `--blk-file=PATH` and `--read-only`, after asking
//! `--print-capabilities`.

use std::path::PathBuf;

use super::disk_spec::{DiskSpec, Storage};

/// What `vbmq vhost-user-blk` was asked to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BlkProgramCommand {
    /// Serve one disk.
    Serve(Box<BlkProgramArgs>),
    /// `--print-capabilities`: print the vhost-user backend capabilities (JSON) and exit.
    PrintCapabilities,
    /// `-h`, `--help`.
    Help,
}

/// The disk to serve.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlkProgramArgs {
    /// The disk. With `--fd`, `socket` is `/dev/fd/N` until the caller names the socket better.
    pub spec: DiskSpec,
    /// The disk as a `--disk` value, for logs.
    pub text: String,
}

/// The vhost-user backend capabilities `--print-capabilities` prints (QEMU's
/// `docs/interop/vhost-user.json`: a `block` backend's `blk-file` and `read-only`).
pub const BLK_PROGRAM_CAPABILITIES: &str =
    "{\n  \"type\": \"block\",\n  \"features\": [\n    \"blk-file\",\n    \"read-only\"\n  ]\n}";

/// The options, for `--help`.
pub const BLK_PROGRAM_HELP: &str = "\
Usage: vbmq vhost-user-blk (--socket-path PATH | --fd N) --blk-file FILE [OPTIONS]
       (or the vbmq binary started as `vbmq-vhost-user-blk` or `vhost-user-blk`)

One disk, served in the foreground until SIGTERM, with QEMU's vhost-user backend conventions:
  --socket-path PATH          the vhost-user socket to listen on
  --fd N                      an inherited socket, already listening (3 or more)
  --blk-file FILE             the raw image file or block device
  --read-only                 refuse writes (the image is opened read-only)
  --print-capabilities        print the vhost-user backend capabilities (JSON) and exit,
                              ignoring every other argument
vbmq's own:
  --queues N                  request queues, each on its own thread (default 1)
  --mode event|poll|adaptive  how the queue threads wait (default adaptive)
  --cpus LIST                 pin the queue threads
  --disk-option KEY=VALUE     any other `vbmq serve --disk` key (vbmq serve --help lists them),
                              but not socket, socket-fd, path, null, mem, rbd, image, readonly
Every other option is refused.
";

/// The `--disk` keys the conventions' own options set, or that make no sense for one image file.
const RESERVED_KEYS: &[&str] = &[
    "socket",
    "socket-fd",
    "path",
    "null",
    "mem",
    "rbd",
    "image",
    "readonly",
];

/// Reads the arguments after the program name (and after `vhost-user-blk`). An error is one
/// line.
pub fn parse_blk_program_args(
    args: &[String],
    online_cpus: &[usize],
) -> Result<BlkProgramCommand, String> {
    // The conventions: with --print-capabilities, every other argument is ignored.
    if args.iter().any(|arg| arg == "--print-capabilities") {
        return Ok(BlkProgramCommand::PrintCapabilities);
    }
    let mut socket: Option<PathBuf> = None;
    let mut fd: Option<i32> = None;
    let mut file: Option<PathBuf> = None;
    let mut readonly = false;
    let mut options: Vec<String> = Vec::new();
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        let (name, attached) = match arg.split_once('=') {
            Some((name, value)) if name.starts_with("--") => (name, Some(value.to_string())),
            _ => (arg.as_str(), None),
        };
        let takes_value = matches!(
            name,
            "--socket-path"
                | "--fd"
                | "--blk-file"
                | "--queues"
                | "--mode"
                | "--cpus"
                | "--disk-option"
        );
        if !takes_value {
            if attached.is_some() {
                return Err(format!("{name} takes no value"));
            }
            match name {
                "-h" | "--help" => return Ok(BlkProgramCommand::Help),
                "--read-only" => readonly = true,
                _ => return Err(format!("{name}: not an option vbmq vhost-user-blk takes")),
            }
            continue;
        }
        let value = match attached {
            Some(value) => value,
            None => rest
                .next()
                .cloned()
                .ok_or_else(|| format!("{name}: a value is required"))?,
        };
        if value.is_empty() {
            return Err(format!("{name}: a value is required"));
        }
        let once = |slot: bool| {
            if slot {
                Err(format!("{name}: given twice"))
            } else {
                Ok(())
            }
        };
        match name {
            "--socket-path" => {
                once(socket.is_some())?;
                socket = Some(PathBuf::from(value));
            }
            "--fd" => {
                once(fd.is_some())?;
                fd =
                    Some(
                        value.parse().ok().filter(|fd| *fd >= 3).ok_or_else(|| {
                            format!("--fd: {value:?}: a descriptor number from 3")
                        })?,
                    );
            }
            "--blk-file" => {
                once(file.is_some())?;
                file = Some(PathBuf::from(value));
            }
            "--disk-option" => options.push(value),
            // --queues N is --disk-option queues=N.
            _ => options.push(format!("{}={value}", &name[2..])),
        }
    }
    let socket = match (socket, fd) {
        (Some(_), Some(_)) => return Err("--fd and --socket-path exclude each other".into()),
        (None, None) => return Err("missing --socket-path or --fd".into()),
        (Some(socket), None) => socket,
        (None, Some(fd)) => PathBuf::from(format!("/dev/fd/{fd}")),
    };
    let file = file.ok_or("missing --blk-file")?;
    for option in &options {
        check_option(option, fd.is_some())?;
    }
    // The paths go into the spec after parsing: a comma in one must not read as another key.
    let mut text = String::from("socket=/,path=/");
    let mut shown = format!("socket={},path={}", socket.display(), file.display());
    let own = readonly
        .then(|| "readonly=on".to_string())
        .into_iter()
        .chain(fd.map(|fd| format!("socket-fd={fd}")));
    for option in own.chain(options) {
        for line in [&mut text, &mut shown] {
            line.push(',');
            line.push_str(&option);
        }
    }
    let mut spec = DiskSpec::parse(&text, online_cpus).map_err(|e| {
        let name = match e.key.as_str() {
            "queues" | "mode" | "cpus" => format!("--{}", e.key),
            key => format!("--disk-option {key}"),
        };
        format!("{name}: {}", e.reason)
    })?;
    spec.socket = socket;
    spec.storage = Storage::File(file);
    Ok(BlkProgramCommand::Serve(Box::new(BlkProgramArgs {
        spec,
        text: shown,
    })))
}

/// A `--disk-option` sets only keys the conventions' options leave alone.
fn check_option(option: &str, inherited: bool) -> Result<(), String> {
    let pairs =
        DiskSpec::pairs(option).map_err(|e| format!("--disk-option {option:?}: {}", e.reason))?;
    if pairs.is_empty() {
        return Err("--disk-option: expected KEY=VALUE".into());
    }
    for (key, _) in pairs {
        if RESERVED_KEYS.contains(&key) {
            return Err(format!(
                "--disk-option {key}: set by --socket-path, --fd, --blk-file or --read-only"
            ));
        }
        if inherited && matches!(key, "socket-mode" | "socket-group") {
            return Err(format!(
                "--disk-option {key}: not with --fd (the socket is not vbmq's)"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "blk_program_args_tests.rs"]
mod tests;
