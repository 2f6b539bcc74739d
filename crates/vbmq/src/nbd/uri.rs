//! NBD URIs (the NetworkBlockDevice project's `doc/uri.md`, over RFC 3986), the form in which an
//! operator names a remote export: `nbd+unix:///NAME?socket=PATH`. Only Unix sockets are served
//! this round: `nbd://`, `nbds://`, `nbds+unix://` and `nbd+vsock://` are refused with a line
//! that says so, as is anything the spec says a parser should diagnose (an unknown query
//! parameter, a host on a Unix socket).

use std::fmt;
use std::path::PathBuf;

use super::wire::MAX_NAME;

/// A parsed `nbd+unix` URI.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NbdUri {
    /// The server's Unix socket (an absolute path).
    pub socket: PathBuf,
    /// The export's name (the URI's path without its leading `/`, decoded).
    pub export: String,
}

/// Why a URI is refused: a line for the operator.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct UriError(String);

fn refuse<T>(why: impl Into<String>) -> Result<T, UriError> {
    Err(UriError(why.into()))
}

const FORM: &str = "nbd+unix:///NAME?socket=PATH";

impl std::str::FromStr for NbdUri {
    type Err = UriError;

    fn from_str(uri: &str) -> Result<Self, UriError> {
        let Some((scheme, rest)) = uri.split_once("://") else {
            return refuse(format!("not an NBD URI (expected {FORM})"));
        };
        match scheme.to_ascii_lowercase().as_str() {
            "nbd+unix" => {}
            "nbd" => return refuse(format!("nbd:// (TCP) is not supported yet: use {FORM}")),
            "nbds" | "nbds+unix" => {
                return refuse(format!(
                    "{scheme}:// (TLS) is not supported yet: use {FORM}"
                ));
            }
            "nbd+vsock" => return refuse(format!("nbd+vsock:// is not supported: use {FORM}")),
            _ => return refuse(format!("unknown scheme {scheme:?} (expected {FORM})")),
        }
        if rest.contains('#') {
            return refuse("an NBD URI has no fragment (#)");
        }
        let (authority_and_path, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, path) = match authority_and_path.find('/') {
            Some(at) => authority_and_path.split_at(at),
            None => (authority_and_path, ""),
        };
        if !authority.is_empty() {
            return refuse(format!(
                "nbd+unix takes no host ({authority:?}): use {FORM}"
            ));
        }
        let export = decode(path.strip_prefix('/').unwrap_or(path), "the export name")?;
        let export =
            String::from_utf8(export).or_else(|_| refuse("the export name is not UTF-8"))?;
        if export.len() > MAX_NAME {
            return refuse("the export name is longer than 4096 bytes");
        }
        let socket = socket(query)?;
        Ok(NbdUri { socket, export })
    }
}

/// The `socket=` parameter, the only one an `nbd+unix` URI without TLS takes.
fn socket(query: &str) -> Result<PathBuf, UriError> {
    let mut socket = None;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "socket" if socket.is_some() => return refuse("socket= is given twice"),
            "socket" => socket = Some(decode(value, "socket=")?),
            key if key.starts_with("tls-") => {
                return refuse(format!("{key}= needs TLS, which is not supported yet"));
            }
            key => return refuse(format!("unknown query parameter {key:?}")),
        }
    }
    let Some(socket) = socket else {
        return refuse(format!("socket= is missing: {FORM}"));
    };
    if socket.first() == Some(&0) {
        return refuse("abstract sockets (socket=%00...) are not supported");
    }
    let socket = PathBuf::from(std::ffi::OsString::from(
        String::from_utf8(socket).or_else(|_| refuse("socket= is not UTF-8"))?,
    ));
    if !socket.is_absolute() {
        return refuse("socket= must be an absolute path");
    }
    Ok(socket)
}

/// Percent-decodes `s` (RFC 3986: `+` is itself); no NUL may result.
fn decode(s: &str, what: &str) -> Result<Vec<u8>, UriError> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            let Some(byte) = hex else {
                return refuse(format!("{what}: a % not followed by two hex digits"));
            };
            out.push(byte);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    // A leading NUL (an abstract socket) is the caller's to judge.
    if out.iter().skip(1).any(|&b| b == 0) || (what != "socket=" && out.first() == Some(&0)) {
        return refuse(format!("{what} holds a NUL byte"));
    }
    Ok(out)
}

impl fmt::Display for NbdUri {
    /// The URI again, with the characters that need it percent-encoded.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let encode = |s: &str| -> String {
            s.bytes()
                .map(|b| match b {
                    b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'/' => {
                        char::from(b).to_string()
                    }
                    _ => format!("%{b:02X}"),
                })
                .collect()
        };
        write!(
            f,
            "nbd+unix:///{}?socket={}",
            encode(&self.export),
            encode(&self.socket.to_string_lossy())
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<NbdUri, UriError> {
        s.parse()
    }

    #[test]
    fn unix_uris_as_the_spec_reads_them() {
        let u = parse("nbd+unix:///disk?socket=/run/nbd.sock").unwrap();
        assert_eq!(u.export, "disk");
        assert_eq!(u.socket, PathBuf::from("/run/nbd.sock"));
        assert_eq!(parse("nbd+unix:///?socket=/s").unwrap().export, "");
        assert_eq!(parse("nbd+unix://?socket=/s").unwrap().export, "");
        assert_eq!(
            parse("nbd+unix:////disk?socket=/s").unwrap().export,
            "/disk"
        );
        let u = parse("NBD+UNIX:///hello%20world+x?socket=/a%20b/c.sock").unwrap();
        assert_eq!(u.export, "hello world+x");
        assert_eq!(u.socket, PathBuf::from("/a b/c.sock"));
        assert_eq!(parse(&u.to_string()).unwrap(), u, "Display parses back");
    }

    #[test]
    fn what_is_not_served_is_refused_with_a_reason() {
        for (uri, why) in [
            ("nbd://host:10809/disk", "TCP"),
            ("nbds://host/disk", "TLS"),
            ("nbds+unix:///disk?socket=/s", "TLS"),
            ("nbd+vsock://2/disk", "vsock"),
            ("http://x/y", "unknown scheme"),
            ("/run/nbd.sock", "not an NBD URI"),
            ("nbd+unix://host/disk?socket=/s", "no host"),
            ("nbd+unix:///disk", "socket= is missing"),
            ("nbd+unix:///disk?socket=/s&socket=/t", "twice"),
            ("nbd+unix:///disk?socket=rel.sock", "absolute"),
            ("nbd+unix:///disk?socket=%00abstract", "abstract"),
            ("nbd+unix:///disk?socket=/s&tls-type=x509", "TLS"),
            (
                "nbd+unix:///disk?socket=/s&color=red",
                "unknown query parameter",
            ),
            ("nbd+unix:///disk?socket=/s#frag", "fragment"),
            ("nbd+unix:///d%zz?socket=/s", "hex"),
            ("nbd+unix:///d%?socket=/s", "hex"),
            ("nbd+unix:///d%00x?socket=/s", "NUL"),
            ("nbd+unix:///d?socket=/s%00x", "NUL"),
            ("nbd+unix:///%FF?socket=/s", "UTF-8"),
        ] {
            let e = parse(uri).expect_err(uri);
            assert!(e.to_string().contains(why), "{uri}: {e}");
        }
        let long = format!("nbd+unix:///{}?socket=/s", "a".repeat(MAX_NAME + 1));
        assert!(parse(&long).is_err());
    }
}
