//! The `vbmq bench` command line.

use std::path::PathBuf;

use super::error::{BenchError, Result};

/// Usage text for `vbmq bench --help`.
pub const USAGE: &str = "\
usage: vbmq bench [--quick] [--out DIR] [--only TEXT]

Measures vbmq against bare metal and qemu-storage-daemon on a 1 GiB random-filled file on tmpfs,
with the same libblkio client, file and CPUs for every system, and writes report.json, report.md
and SVG charts.

  --quick      about a minute instead of a few minutes (shorter runs, fewer cases)
  --out DIR    where the report goes (default: ./vbmq-bench-<date>/)
  --only TEXT  run only the cases and systems whose identifier contains TEXT
               (e.g. matrix/randread-4k-qd32, qsd-vbdp, vbmq-poll)
  -h, --help   this text";

/// Parsed options.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// The short variant.
    pub quick: bool,
    /// Report directory; `None` picks `./vbmq-bench-<date>/`.
    pub out: Option<PathBuf>,
    /// Run only cases or systems whose identifier contains this.
    pub only: Option<String>,
    /// Print usage and do nothing else.
    pub help: bool,
}

impl Options {
    /// Parses the arguments that follow `bench`.
    pub fn parse(args: &[String]) -> Result<Options> {
        let mut opts = Options::default();
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            match arg.as_str() {
                "--quick" => opts.quick = true,
                "-h" | "--help" => opts.help = true,
                "--out" => {
                    let dir = it
                        .next()
                        .ok_or_else(|| BenchError::Usage("--out needs a directory".into()))?;
                    opts.out = Some(PathBuf::from(dir));
                }
                "--only" => {
                    let text = it
                        .next()
                        .ok_or_else(|| BenchError::Usage("--only needs a text".into()))?;
                    opts.only = Some(text.clone());
                }
                other => {
                    if let Some(dir) = other.strip_prefix("--out=") {
                        opts.out = Some(PathBuf::from(dir));
                    } else {
                        return Err(BenchError::Usage(format!("unknown argument: {other}")));
                    }
                }
            }
        }
        Ok(opts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Options> {
        Options::parse(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn parses_flags() {
        assert_eq!(parse(&[]).unwrap(), Options::default());
        let o = parse(&["--quick", "--out", "r"]).unwrap();
        assert!(o.quick);
        assert_eq!(o.out, Some(PathBuf::from("r")));
        assert_eq!(parse(&["--out=x"]).unwrap().out, Some(PathBuf::from("x")));
        assert!(parse(&["-h"]).unwrap().help);
        assert_eq!(
            parse(&["--only", "qsd"]).unwrap().only.as_deref(),
            Some("qsd")
        );
    }

    #[test]
    fn rejects_bad_arguments() {
        assert!(parse(&["--out"]).unwrap_err().to_string().contains("--out"));
        assert!(
            parse(&["--fast"])
                .unwrap_err()
                .to_string()
                .contains("--fast")
        );
    }
}
