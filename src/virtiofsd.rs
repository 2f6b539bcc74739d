//! `vbmq virtiofsd`, and the vbmq binary started as `virtiofsd`: one share, served with
//! virtiofsd's command line, for the management stacks that start virtiofsd themselves.

use tracing_subscriber::EnvFilter;
use vbmq::config::{
    VIRTIOFSD_CAPABILITIES, VIRTIOFSD_HELP, VirtiofsdArgs, VirtiofsdCommand, parse_virtiofsd_args,
};

/// virtiofsd's readiness line, which Kata's runtime-rs waits for on stderr.
const READY_LINE: &str = "Waiting for vhost-user socket connection...";

/// The arguments after the program name when this process is virtiofsd: started by that name,
/// as `vbmq virtiofsd`, or given an option before any subcommand other than vbmq's own `-h`,
/// `--help`, `-V`, `--version` (libvirt runs `<binary path='/usr/local/bin/vbmq'/>` and a QEMU
/// vhost-user descriptor's binary with virtiofsd's options alone: `vbmq --fd=31 -o source=D`).
pub fn arguments() -> Option<Vec<String>> {
    let mut args = std::env::args_os().map(|a| a.to_string_lossy().into_owned());
    let program = args.next()?;
    let rest: Vec<String> = args.collect();
    let name = std::path::Path::new(&program)
        .file_name()?
        .to_string_lossy()
        .into_owned();
    if name == "virtiofsd" {
        return Some(rest);
    }
    match rest.first().map(String::as_str) {
        Some("virtiofsd") => Some(rest[1..].to_vec()),
        Some("-h" | "--help" | "-V" | "--version") => None,
        Some(option) if option.starts_with('-') => Some(rest),
        _ => None,
    }
}

/// Runs virtiofsd's command line `args`; returns the exit status (1 on a refused option, as
/// virtiofsd's own errors).
pub fn run(args: &[String]) -> i32 {
    let command = match parse_virtiofsd_args(args, &vbmq::worker::online_cpus()) {
        Ok(command) => command,
        Err(e) => {
            eprintln!("vbmq virtiofsd: {e}");
            return 1;
        }
    };
    let args = match command {
        VirtiofsdCommand::PrintCapabilities => {
            println!("{VIRTIOFSD_CAPABILITIES}");
            return 0;
        }
        VirtiofsdCommand::Help => {
            print!("{VIRTIOFSD_HELP}");
            return 0;
        }
        VirtiofsdCommand::Version => {
            println!(
                "vbmq {} (virtiofsd 1.14 command line)",
                env!("CARGO_PKG_VERSION")
            );
            return 0;
        }
        VirtiofsdCommand::Serve(args) => args,
    };
    init_logging(&args);
    for note in &args.notes {
        tracing::warn!("{note}");
    }
    if let Some(control) = &args.join {
        return crate::virtiofsd_join::run(&args, control, READY_LINE);
    }
    if let Some(limit) = args.rlimit_nofile.filter(|&n| n > 0)
        && let Err(e) = set_descriptor_limit(limit)
    {
        tracing::error!("--rlimit-nofile {limit}: {e}");
        eprintln!("vbmq virtiofsd: --rlimit-nofile {limit}: {e}");
        return 1;
    }
    let options = vbmq::serve::ServeOptions {
        disks: Vec::new(),
        texts: Vec::new(),
        shares: vec![args.spec.clone()],
        // One share, no control socket: nothing lists it, nothing is added at run time.
        share_texts: Vec::new(),
        fs_roots: Vec::new(),
        seccomp: args.seccomp,
        control_dir: None,
        config: None,
        ready_line: Some(READY_LINE.to_string()),
        run_time_rings: 0,
        user_namespace: args.user_namespace.clone().map(Box::new),
        landlock_required: args.sandbox.clone(),
    };
    match vbmq::serve::run(&options, None) {
        0 => 0,
        _ => 1,
    }
}

/// Logs at `--log-level` (RUST_LOG wins, as in virtiofsd) to stderr, or to syslog (stderr
/// when syslog cannot be reached, as virtiofsd does).
fn init_logging(args: &VirtiofsdArgs) {
    let filter =
        || EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(&args.log_level));
    let syslog = match args.syslog.then(crate::syslog::Syslog::open) {
        Some(Ok(syslog)) => Some(syslog),
        Some(Err(e)) => {
            eprintln!("vbmq virtiofsd: cannot log to syslog (/dev/log: {e}): logging to stderr");
            None
        }
        None => None,
    };
    let builder = tracing_subscriber::fmt().with_env_filter(filter());
    if let Some(syslog) = syslog {
        builder
            .with_ansi(false)
            .without_time()
            .with_writer(syslog)
            .init();
    } else {
        use std::io::IsTerminal;
        builder
            .with_ansi(std::io::stderr().is_terminal())
            .with_writer(std::io::stderr)
            .init();
    }
}

/// Sets the soft and hard descriptor limits to `limit` (raising the hard limit needs
/// `CAP_SYS_RESOURCE`).
fn set_descriptor_limit(limit: u64) -> std::io::Result<()> {
    let value = libc::rlimit {
        rlim_cur: limit,
        rlim_max: limit,
    };
    // SAFETY: setrlimit reads the struct passed.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &value) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
