//! `vbmq image create PATH --size N [--backing FILE [--backing-format F]] [--cluster-size N]`:
//! a new qcow2 v3 image, as `qemu-img create -f qcow2` makes it (`backend::qcow2::create`).

use std::path::{Path, PathBuf};

use clap::{Arg, ArgMatches, Command, value_parser};
use vbmq::backend::Qcow2CreateOptions;
use vbmq::config::parse_size;

fn size(text: &str) -> Result<u64, String> {
    parse_size(text).ok_or_else(|| format!("{text:?} is not a size (4096, 512K, 8G, 1T)"))
}

/// `vbmq image`: its one subcommand, `create`.
pub fn command() -> Command {
    Command::new("image")
        .about("Make disk images for vbmq (and QEMU) to serve")
        .subcommand_required(true)
        .subcommand(
            Command::new("create")
                .about(
                    "Write a new, empty qcow2 v3 image (as qemu-img create -f qcow2 does), \
                     optionally over a backing file; PATH must not exist",
                )
                .arg(
                    Arg::new("path")
                        .value_name("PATH")
                        .required(true)
                        .value_parser(value_parser!(PathBuf)),
                )
                .arg(
                    Arg::new("size")
                        .long("size")
                        .value_name("SIZE")
                        .value_parser(size)
                        .required_unless_present("backing")
                        .help("The guest's size (8G, 512M); default: the backing file's"),
                )
                .arg(Arg::new("backing").long("backing").value_name("FILE").help(
                    "The backing file, as the image keeps its name: relative to the \
                             image's directory, or absolute (QEMU resolves it so)",
                ))
                .arg(
                    Arg::new("backing-format")
                        .long("backing-format")
                        .value_name("FORMAT")
                        .requires("backing")
                        .value_parser(["qcow2", "raw"])
                        .help("The backing file's format; default: probed, and written down"),
                )
                .arg(
                    Arg::new("cluster-size")
                        .long("cluster-size")
                        .value_name("SIZE")
                        .value_parser(size)
                        .help("Bytes per cluster, a power of two from 512 to 2M (default 64K)"),
                ),
        )
}

/// The image `vbmq image create` asks for: its path and options.
pub fn job(matches: &ArgMatches) -> Option<(PathBuf, Qcow2CreateOptions)> {
    let ("create", m) = matches.subcommand()? else {
        return None;
    };
    let defaults = Qcow2CreateOptions::default();
    let options = Qcow2CreateOptions {
        size: m.get_one::<u64>("size").copied(),
        cluster_size: m
            .get_one::<u64>("cluster-size")
            .copied()
            .unwrap_or(defaults.cluster_size),
        backing: m.get_one::<String>("backing").cloned(),
        backing_format: m.get_one::<String>("backing-format").cloned(),
    };
    Some((m.get_one::<PathBuf>("path")?.clone(), options))
}

/// Writes the image: 0, or 1 with one line saying why not.
pub fn run(path: &Path, options: &Qcow2CreateOptions) -> i32 {
    match vbmq::backend::create_qcow2_image(path, options) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("vbmq image create: {}: {e}", path.display());
            1
        }
    }
}
