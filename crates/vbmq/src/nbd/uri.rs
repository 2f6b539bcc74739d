//! NBD URIs (the NetworkBlockDevice project's `doc/uri.md`, over RFC 3986), the form in which an
//! operator names a remote export: `nbd+unix:///NAME?socket=PATH` ([`NbdUri`]) and, over TCP,
//! only with TLS, `nbds://HOST[:PORT]/NAME` ([`TlsUri`]). `nbd://` (TCP in the clear),
//! `nbds+unix://` and `nbd+vsock://` are refused with a line that says so, as is anything the
//! spec says a parser should diagnose (an unknown query parameter, a host on a Unix socket).

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
const TLS_FORM: &str = "nbds://HOST:PORT/NAME";
const NO_CLEAR_TCP: &str =
    "nbd:// (TCP) is refused: NBD over TCP is only with TLS: use nbds://HOST:PORT/NAME";

/// The NBD protocol's port, when a URI names none.
pub const DEFAULT_PORT: u16 = 10809;

/// A parsed `nbds://HOST[:PORT]/NAME` URI: an export over TCP, with TLS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsUri {
    /// The server's host name or address (an IPv6 address without its brackets).
    pub host: String,
    /// Its port ([`DEFAULT_PORT`] when none is given).
    pub port: u16,
    /// The export's name.
    pub export: String,
    /// `tls-certificates=DIR`: the client's credentials in QEMU's layout (`ca-cert.pem`,
    /// optionally `client-cert.pem` and `client-key.pem`).
    pub certificates: Option<PathBuf>,
    /// `tls-hostname=NAME`: the name the server's certificate must carry, if not `host`.
    pub hostname: Option<String>,
}

impl TlsUri {
    /// The name the server's certificate is checked against.
    pub fn server_name(&self) -> &str {
        self.hostname.as_deref().unwrap_or(&self.host)
    }
}

/// A URI of either kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AnyUri {
    /// `nbd+unix://`.
    Unix(NbdUri),
    /// `nbds://`.
    Tls(TlsUri),
}

impl std::str::FromStr for AnyUri {
    type Err = UriError;

    fn from_str(uri: &str) -> Result<Self, UriError> {
        let scheme = uri.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
        match scheme.as_deref() {
            Some("nbds") => uri.parse().map(AnyUri::Tls),
            _ => uri.parse().map(AnyUri::Unix),
        }
    }
}

impl std::str::FromStr for TlsUri {
    type Err = UriError;

    fn from_str(uri: &str) -> Result<Self, UriError> {
        let rest = match uri.split_once("://") {
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case("nbds") => rest,
            _ => return refuse(format!("not an nbds:// URI (expected {TLS_FORM})")),
        };
        let (authority, path, query) = split_after_scheme(rest)?;
        let (host, port) = host_and_port(authority)?;
        let export = decode(path.strip_prefix('/').unwrap_or(path), "the export name")?;
        let export =
            String::from_utf8(export).or_else(|_| refuse("the export name is not UTF-8"))?;
        if export.len() > MAX_NAME {
            return refuse("the export name is longer than 4096 bytes");
        }
        let mut parsed = TlsUri {
            host,
            port,
            export,
            certificates: None,
            hostname: None,
        };
        tls_query(query, &mut parsed)?;
        Ok(parsed)
    }
}

/// `HOST[:PORT]`, `[IPV6][:PORT]`; no user (TLS with a username is PSK, not served).
fn host_and_port(authority: &str) -> Result<(String, u16), UriError> {
    if authority.contains('@') {
        return refuse("a user in the URI (TLS-PSK) is not supported: use X.509 certificates");
    }
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let Some((host, after)) = v6.split_once(']') else {
            return refuse("an IPv6 address without its closing ]");
        };
        let port = match after.strip_prefix(':') {
            Some(port) => Some(port),
            None if after.is_empty() => None,
            None => return refuse(format!("{authority:?}: not HOST[:PORT]")),
        };
        (host, port)
    } else {
        match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return refuse(format!("nbds:// needs a host: {TLS_FORM}"));
    }
    let port = match port {
        None | Some("") => DEFAULT_PORT,
        Some(port) => match port.parse::<u16>() {
            Ok(port) if port > 0 => port,
            _ => return refuse(format!("{port:?} is not a TCP port")),
        },
    };
    let host = String::from_utf8(decode(host, "the host")?)
        .or_else(|_| refuse("the host is not UTF-8"))?;
    Ok((host, port))
}

/// The query of an `nbds://` URI: `tls-certificates=DIR`, `tls-hostname=NAME`,
/// `tls-type=x509`, `tls-verify-peer=true`; nothing else.
fn tls_query(query: &str, uri: &mut TlsUri) -> Result<(), UriError> {
    let text = |value: &str, what: &str| -> Result<String, UriError> {
        String::from_utf8(decode(value, what)?).or_else(|_| refuse(format!("{what} is not UTF-8")))
    };
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "tls-certificates" if uri.certificates.is_none() => {
                uri.certificates = Some(PathBuf::from(text(value, "tls-certificates=")?));
            }
            "tls-hostname" if uri.hostname.is_none() => {
                uri.hostname = Some(text(value, "tls-hostname=")?);
            }
            "tls-certificates" | "tls-hostname" => return refuse(format!("{key}= is given twice")),
            "tls-type" if value == "x509" => {}
            "tls-type" => return refuse("tls-type= must be x509 (TLS-PSK is not supported)"),
            "tls-verify-peer" if value == "true" => {}
            "tls-verify-peer" => {
                return refuse("tls-verify-peer= must be true: vbmq always verifies the server");
            }
            "socket" => return refuse("nbds:// takes no socket=: it is TCP"),
            key => return refuse(format!("unknown query parameter {key:?}")),
        }
    }
    Ok(())
}

impl std::str::FromStr for NbdUri {
    type Err = UriError;

    fn from_str(uri: &str) -> Result<Self, UriError> {
        let Some((scheme, rest)) = uri.split_once("://") else {
            return refuse(format!("not an NBD URI (expected {FORM})"));
        };
        match scheme.to_ascii_lowercase().as_str() {
            "nbd+unix" => {}
            "nbd" => return refuse(NO_CLEAR_TCP),
            "nbds" => return refuse(format!("nbds:// (TLS) is not taken here: use {FORM}")),
            "nbds+unix" => {
                return refuse(format!(
                    "nbds+unix:// (TLS on a Unix socket) is not supported: use {FORM}"
                ));
            }
            "nbd+vsock" => return refuse(format!("nbd+vsock:// is not supported: use {FORM}")),
            _ => return refuse(format!("unknown scheme {scheme:?} (expected {FORM})")),
        }
        let (authority, path, query) = split_after_scheme(rest)?;
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

/// What follows `SCHEME://`, split as RFC 3986 does: authority, path (from its `/`) and query;
/// a fragment is refused.
fn split_after_scheme(rest: &str) -> Result<(&str, &str, &str), UriError> {
    if rest.contains('#') {
        return refuse("an NBD URI has no fragment (#)");
    }
    let (authority_and_path, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (authority, path) = match authority_and_path.find('/') {
        Some(at) => authority_and_path.split_at(at),
        None => (authority_and_path, ""),
    };
    Ok((authority, path, query))
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
            ("nbd://host:10809/disk", "only with TLS"),
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

    #[test]
    fn tls_uris_as_the_spec_reads_them() {
        let u: TlsUri = "nbds://backup.example:10810/disk%201?tls-certificates=/etc/pki/vbmq"
            .parse()
            .unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.export.as_str()),
            ("backup.example", 10810, "disk 1")
        );
        assert_eq!(u.certificates, Some(PathBuf::from("/etc/pki/vbmq")));
        assert_eq!(u.server_name(), "backup.example");
        let u: TlsUri = "NBDS://[::1]/?tls-hostname=localhost&tls-type=x509"
            .parse()
            .unwrap();
        assert_eq!((u.host.as_str(), u.port), ("::1", DEFAULT_PORT));
        assert_eq!((u.export.as_str(), u.server_name()), ("", "localhost"));
        let u: TlsUri = "nbds://127.0.0.1:7000".parse().unwrap();
        assert_eq!((u.host.as_str(), u.port), ("127.0.0.1", 7000));
        assert!(matches!("nbds://h/x".parse::<AnyUri>(), Ok(AnyUri::Tls(_))));
        assert!(matches!(
            "nbd+unix:///x?socket=/s".parse::<AnyUri>(),
            Ok(AnyUri::Unix(_))
        ));
        for (uri, why) in [
            ("nbds:///disk", "needs a host"),
            ("nbds://h:0/d", "not a TCP port"),
            ("nbds://h:99999/d", "not a TCP port"),
            ("nbds://user@h/d", "PSK"),
            ("nbds://[::1/d", "closing"),
            ("nbds://h/d?tls-type=psk", "x509"),
            ("nbds://h/d?tls-verify-peer=false", "always verifies"),
            ("nbds://h/d?socket=/s", "TCP"),
            ("nbds://h/d?tls-hostname=a&tls-hostname=b", "twice"),
            ("nbds://h/d?color=red", "unknown query parameter"),
            ("nbds://h/d#f", "fragment"),
            ("nbd://h/d", "only with TLS"),
        ] {
            let e = uri.parse::<AnyUri>().expect_err(uri);
            assert!(e.to_string().contains(why), "{uri}: {e}");
        }
    }
}
