//! `vbmq`: serve disks to VMs (`serve`), serve one share as virtiofsd would (`virtiofsd`) or
//! one disk as a QEMU vhost-user block backend program (`vhost-user-blk`), or measure how fast it
//! does (`bench`).

mod cli;
mod config_file;
mod control;
mod ctl;
mod ctl_disk;
mod ctl_export;
mod ctl_fs;
mod ctl_snapshot;
mod ctl_tls;
mod fd_wait;
mod image_create;
mod metrics;
mod state_file;
mod syslog;
mod vhost_user_blk;
mod virtiofsd;
mod virtiofsd_join;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use tracing_subscriber::EnvFilter;

fn main() {
    // Before virtiofsd's: a block backend program is also started with options alone.
    if let Some(args) = vhost_user_blk::arguments() {
        std::process::exit(vhost_user_blk::run(&args));
    }
    if let Some(args) = virtiofsd::arguments() {
        std::process::exit(virtiofsd::run(&args));
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let matches = match cli::command().try_get_matches() {
        Ok(matches) => matches,
        Err(e) => std::process::exit(usage_error(&e)),
    };
    let status = match cli::job(&matches) {
        Some(cli::Job::Serve(options, control, metrics, state)) => {
            serve(&options, control, metrics, state.as_deref())
        }
        Some(cli::Job::Ctl(request)) => ctl::run(&request),
        Some(cli::Job::Bench(options)) => vbmq_bench::run(&options),
        Some(cli::Job::ImageCreate(path, options)) => image_create::run(&path, &options),
        None => 2,
    };
    std::process::exit(status);
}

/// What the control socket is called in errors about socket paths.
const CONTROL_SOCKET: &str = "the control socket (--control)";

/// `vbmq serve`, with its control socket and metrics listener bound before the process is
/// confined, and served once it is.
fn serve(
    options: &vbmq::serve::ServeOptions,
    control: Option<std::path::PathBuf>,
    metrics: Option<std::net::SocketAddr>,
    state: Option<&std::path::Path>,
) -> i32 {
    // The configuration file's disks come first, then --disk; its settings yield to the flags.
    let mut options = options.clone();
    let (mut control, mut metrics) = (control, metrics);
    let mut config_texts = Vec::new();
    if let Some(path) = &options.config {
        let file = match config_file::read(path) {
            Ok(file) => file,
            Err(e) => {
                eprintln!("vbmq: --config {e}");
                return 2;
            }
        };
        let cpus = vbmq::worker::online_cpus();
        let mut specs = Vec::new();
        for text in &file.disk {
            match vbmq::config::DiskSpec::parse(text, &cpus) {
                Ok(spec) => specs.push(spec),
                Err(e) => {
                    eprintln!("vbmq: --config {}: {e}", path.display());
                    return 2;
                }
            }
        }
        let mut shares = Vec::new();
        for text in &file.fs {
            match vbmq::config::FsSpec::parse(text, &cpus) {
                Ok(spec) => shares.push(spec),
                Err(e) => {
                    eprintln!("vbmq: --config {}: {e}", path.display());
                    return 2;
                }
            }
        }
        options.shares.splice(0..0, shares);
        options.share_texts.splice(0..0, file.fs.iter().cloned());
        options.fs_roots.splice(0..0, file.fs_root.iter().cloned());
        options.disks.splice(0..0, specs);
        options.texts.splice(0..0, file.disk.iter().cloned());
        control = control.or(file.control);
        metrics = metrics.or(file.metrics);
        if options.control_dir.is_none() {
            options.control_dir = control.as_deref().map(control::socket_dir);
        }
        config_texts = file.disk;
    }
    // Then the disks `vbmq ctl` added before a restart, unless a line above names their socket.
    if let Some(path) = state {
        let texts = match state_file::read(path) {
            Ok(texts) => texts,
            Err(e) => {
                eprintln!("vbmq: --state {e}");
                return 2;
            }
        };
        let cpus = vbmq::worker::online_cpus();
        for text in texts {
            let spec = match vbmq::config::DiskSpec::parse(&text, &cpus) {
                Ok(spec) => spec,
                Err(e) => {
                    eprintln!("vbmq: --state {}: {e}", path.display());
                    return 2;
                }
            };
            if options.disks.iter().all(|d| d.socket != spec.socket) {
                options.disks.push(spec);
                options.texts.push(text);
            }
        }
    }
    let options = &options;
    // Before this process opens anything: a `socket-fd=` that names no inherited descriptor
    // could otherwise name one of vbmq's own.
    if let Err(e) = check_inherited_sockets(&options.disks) {
        eprintln!("vbmq: --disk socket-fd: {e}");
        return 2;
    }
    // Before the control socket is bound: a disk or share given its path would take it over.
    let control_socket: Vec<(&str, &std::path::Path)> = control
        .as_deref()
        .map(|path| (CONTROL_SOCKET, path))
        .into_iter()
        .collect();
    if let Err(e) = vbmq::config::check_sockets(&options.disks, &options.shares, &control_socket) {
        eprintln!("vbmq: {e}");
        return 2;
    }
    let control_start = match &control {
        Some(path) => match control::Server::bind(path) {
            Ok(server) => Some(server.starter()),
            Err(e) => {
                eprintln!("vbmq: --control {}: {e}", path.display());
                return 2;
            }
        },
        None => None,
    };
    let metrics_server = match metrics {
        Some(addr) => match metrics::Server::bind(addr) {
            Ok(server) => Some(server),
            Err(e) => {
                eprintln!("vbmq: --metrics {addr}: {e}");
                return 2;
            }
        },
        None => None,
    };
    let config_path = options.config.clone();
    let control_path = control.clone();
    let start: Option<vbmq::serve::ControlStart> =
        if control_start.is_none() && metrics_server.is_none() && config_path.is_none() {
            None
        } else {
            Some(Box::new(move |host: std::sync::Arc<vbmq::host::Host>| {
                if let Some(path) = config_path {
                    host.set_config(
                        config_texts,
                        Box::new(move || config_file::read(&path).map(|file| file.disk)),
                    );
                }
                if let Some(server) = metrics_server {
                    server.start(std::sync::Arc::clone(&host));
                }
                if let (Some(start), Some(path)) = (control_start, &control_path) {
                    host.reserve_socket(CONTROL_SOCKET, path.clone());
                    start(host);
                }
            }))
        };
    let status = vbmq::serve::run(options, start);
    if let Some(path) = control {
        let _ = std::fs::remove_file(path);
    }
    status
}

/// Every `socket-fd=` names an inherited open descriptor, and no two disks the same one.
fn check_inherited_sockets(disks: &[vbmq::config::DiskSpec]) -> Result<(), String> {
    let mut seen = Vec::new();
    for name in disks.iter().filter_map(|d| d.socket_fd.as_deref()) {
        let fd = vbmq::systemd::inherited_fd(name).map_err(|e| e.to_string())?;
        if seen.contains(&fd) {
            return Err(format!("descriptor {fd} given to two disks"));
        }
        seen.push(fd);
    }
    Ok(())
}

/// Prints help and version as clap does; any other error as one line naming the flag or key
/// (`vbmq: --disk queues: must be 1..=64`), and returns the exit status.
fn usage_error(e: &clap::Error) -> i32 {
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        let _ = e.print();
        return if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
            2
        } else {
            0
        };
    }
    // A `--disk` value the parser refused: its own message already names the key.
    if e.kind() == ErrorKind::ValueValidation
        && let Some(reason) = std::error::Error::source(e)
        && matches!(e.get(ContextKind::InvalidArg), Some(ContextValue::String(arg)) if arg.starts_with("--disk"))
    {
        eprintln!("vbmq: {reason}");
        return 2;
    }
    if e.kind() == ErrorKind::MissingRequiredArgument
        && let Some(ContextValue::Strings(args)) = e.get(ContextKind::InvalidArg)
    {
        eprintln!("vbmq: required: {}", args.join(", "));
        return 2;
    }
    let text = e.render().to_string();
    let line = text.lines().next().unwrap_or("bad arguments");
    eprintln!("vbmq: {}", line.trim_start_matches("error: "));
    2
}
