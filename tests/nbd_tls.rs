//! NBD over TCP, only with TLS, against the real `vbmq serve` (confined, as by default) and
//! real clients: `qemu-img` and `nbdinfo` read an export over TLS with certificates in QEMU's
//! `tls-creds-x509` layout (made here by `openssl`); a client without TLS is refused before
//! any byte of the export, one that trusts another CA is refused; `--tls-verify-peer` refuses
//! a client without a certificate; a mirror between two vbmq over TLS on loopback reaches
//! ready and the images are equal; silent connections past the limit are closed and leave the
//! export serving.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::ctl::{ctl_json_or_null, free_port};
use common::nbd_wire::{FIXED_NEWSTYLE_NO_ZEROES, read_greeting};
use common::tool::{run_command, run_tool as run};
use common::{ctl, s, serve::serve_one};

/// Runs `openssl ARGS` in `dir`; panics with its stderr if it fails.
fn openssl(dir: &Path, args: &[&str]) {
    run_command(Command::new("openssl").current_dir(dir).args(args));
}

/// `openssl req ARGS` in `dir` with a new P-256 key, written to `key`.
fn req_with_new_key(dir: &Path, key: &str, args: &[&str]) {
    let mut all = vec![
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
    ];
    all.extend_from_slice(&["-nodes", "-keyout", key]);
    all.extend_from_slice(args);
    openssl(dir, &all);
}

/// A CA in `dir` (`ca-key.pem`, `ca-cert.pem`).
fn ca(dir: &Path, name: &str) {
    std::fs::create_dir_all(dir).unwrap();
    req_with_new_key(
        dir,
        "ca-key.pem",
        &[
            "-x509",
            "-out",
            "ca-cert.pem",
            "-days",
            "2",
            "-subj",
            &format!("/CN={name}"),
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ],
    );
}

/// `dir/KIND-cert.pem` and `dir/KIND-key.pem` (`server` for 127.0.0.1 and localhost, or
/// `client`), signed by the CA in `ca_dir`; `dir/ca-cert.pem` is that CA's.
fn issue(ca_dir: &Path, dir: &Path, kind: &str) {
    std::fs::create_dir_all(dir).unwrap();
    let usage = if kind == "server" {
        "extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n"
    } else {
        "extendedKeyUsage=clientAuth\n"
    };
    std::fs::write(
        dir.join("ext.cnf"),
        format!(
            "basicConstraints=critical,CA:FALSE\n\
             keyUsage=critical,digitalSignature,keyEncipherment\n{usage}"
        ),
    )
    .unwrap();
    let (key, cert) = (format!("{kind}-key.pem"), format!("{kind}-cert.pem"));
    req_with_new_key(
        dir,
        &key,
        &["-out", "req.csr", "-subj", &format!("/CN=vbmq-test-{kind}")],
    );
    let ca_cert = ca_dir.join("ca-cert.pem");
    let ca_key = ca_dir.join("ca-key.pem");
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "req.csr",
            "-CA",
            s(&ca_cert),
            "-CAkey",
            s(&ca_key),
            "-set_serial",
            "2",
            "-out",
            &cert,
            "-days",
            "2",
            "-extfile",
            "ext.cnf",
        ],
    );
    std::fs::copy(&ca_cert, dir.join("ca-cert.pem")).unwrap();
}

/// Credentials for one test: a server's and a client's directory under one CA, and a client's
/// under another CA.
struct Creds {
    server: PathBuf,
    client: PathBuf,
    stranger: PathBuf,
}

fn creds(dir: &Path) -> Creds {
    let (authority, other) = (dir.join("ca"), dir.join("other-ca"));
    ca(&authority, "vbmq-test-ca");
    ca(&other, "vbmq-other-ca");
    let creds = Creds {
        server: dir.join("server"),
        client: dir.join("client"),
        stranger: dir.join("stranger"),
    };
    issue(&authority, &creds.server, "server");
    issue(&authority, &creds.client, "client");
    issue(&other, &creds.stranger, "client");
    creds
}

/// `vbmq ctl export-begin SOCKET tcp:127.0.0.1:PORT EXTRA...` on a free port (tried again if
/// another process took it meanwhile); the port.
fn export_on_tcp(control: &Path, socket: &Path, extra: &[&str]) -> u16 {
    for _ in 0..20 {
        let port = free_port();
        let address = format!("tcp:127.0.0.1:{port}");
        let mut args = vec!["export-begin", s(socket), &address];
        args.extend_from_slice(extra);
        let out = ctl(control, &args);
        if out.status.success() {
            return port;
        }
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("in use"), "export-begin {extra:?}: {err}");
    }
    panic!("no free port in 20 tries");
}

fn nbdinfo(uri: &str) -> Output {
    Command::new("nbdinfo")
        .arg(uri)
        .output()
        .expect("nbdinfo (scripts/deps/base.sh installs libnbd-bin)")
}

fn tls_uri(port: u16, dir: &Path) -> String {
    format!("nbds://127.0.0.1:{port}/?tls-certificates={}", s(dir))
}

/// `qemu-img convert` of the export on `port` into `out`, as a client with `dir`'s creds.
fn qemu_img_read(port: u16, dir: &Path, out: &Path) -> Output {
    Command::new("qemu-img")
        .args([
            "convert",
            "--object",
            &format!("tls-creds-x509,id=tls0,dir={},endpoint=client", s(dir)),
            "--image-opts",
            &format!(
                "driver=nbd,server.type=inet,server.host=127.0.0.1,server.port={port},\
                 tls-creds=tls0"
            ),
            "-O",
            "raw",
            s(out),
        ])
        .output()
        .expect("qemu-img")
}

fn assert_failed(out: &Output, what: &str) {
    assert!(
        !out.status.success(),
        "{what}: accepted; stdout {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn qemu_img_and_nbdinfo_read_an_export_over_tls_and_strangers_are_refused() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let creds = creds(dir.path());
    let len = 8 << 20;
    let image = common::image(dir.path(), "a.raw", len, 7);
    let (mut daemon, control, socket) = serve_one(dir.path(), "a", &image);
    // TCP in the clear is refused by ctl, before anything is bound.
    let port = free_port();
    common::ctl::refused(
        &ctl(
            &control,
            &["export-begin", s(&socket), &format!("tcp:127.0.0.1:{port}")],
        ),
        "only with TLS",
    );
    let port = export_on_tcp(&control, &socket, &["--tls-creds", s(&creds.server)]);
    let info = run("nbdinfo", &["--size", &tls_uri(port, &creds.client)]);
    assert_eq!(info.trim(), len.to_string(), "nbdinfo's size");
    let copy = dir.path().join("by-qemu-img.raw");
    let out = qemu_img_read(port, &creds.client, &copy);
    assert!(
        out.status.success(),
        "qemu-img over TLS: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        std::fs::read(&copy).unwrap() == std::fs::read(&image).unwrap(),
        "qemu-img read the disk over TLS"
    );
    // A client without TLS, and clients that trust another CA, are refused.
    assert_failed(
        &nbdinfo(&format!("nbd://127.0.0.1:{port}/")),
        "nbdinfo without TLS",
    );
    assert_failed(
        &nbdinfo(&tls_uri(port, &creds.stranger)),
        "nbdinfo trusting another CA",
    );
    assert_failed(
        &qemu_img_read(port, &creds.stranger, &dir.path().join("no.raw")),
        "qemu-img trusting another CA",
    );
    assert!(daemon.alive());
}

/// Reads one option reply's header after sending `option` with `data`: its type.
fn option_reply_type(stream: &mut TcpStream, option: u32, data: &[u8]) -> u32 {
    let mut header = Vec::new();
    header.extend_from_slice(b"IHAVEOPT");
    header.extend_from_slice(&option.to_be_bytes());
    header.extend_from_slice(&u32::try_from(data.len()).unwrap().to_be_bytes());
    header.extend_from_slice(data);
    stream.write_all(&header).unwrap();
    let mut reply = [0; 20];
    stream.read_exact(&mut reply).unwrap();
    assert_eq!(reply[..8], 0x0003_e889_0455_65a9u64.to_be_bytes());
    assert_eq!(reply[8..12], option.to_be_bytes());
    let length = u32::from_be_bytes(reply[16..20].try_into().unwrap());
    let mut message = vec![0; length as usize];
    stream.read_exact(&mut message).unwrap();
    u32::from_be_bytes(reply[12..16].try_into().unwrap())
}

#[test]
fn before_starttls_the_server_says_nothing_of_the_export() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let creds = creds(dir.path());
    let image = common::image(dir.path(), "a.raw", 1 << 20, 9);
    let (mut daemon, control, socket) = serve_one(dir.path(), "a", &image);
    let port = export_on_tcp(
        &control,
        &socket,
        &["--tls-creds", s(&creds.server), "--tls-verify-peer"],
    );
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    read_greeting(&mut stream).unwrap();
    stream
        .write_all(&FIXED_NEWSTYLE_NO_ZEROES.to_be_bytes())
        .unwrap();
    const ERR_TLS_REQD: u32 = (1 << 31) | 5;
    let go = [0u8, 0, 0, 0, 0, 0];
    for option in [7, 6, 3, 8, 9, 10] {
        // GO, INFO, LIST, STRUCTURED_REPLY, LIST_META_CONTEXT, SET_META_CONTEXT.
        let data: &[u8] = if option == 7 || option == 6 { &go } else { &[] };
        assert_eq!(
            option_reply_type(&mut stream, option, data),
            ERR_TLS_REQD,
            "option {option} before TLS"
        );
    }
    // EXPORT_NAME has no error reply: the server closes, having sent nothing more.
    stream.write_all(b"IHAVEOPT").unwrap();
    stream.write_all(&1u32.to_be_bytes()).unwrap();
    stream.write_all(&0u32.to_be_bytes()).unwrap();
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest);
    assert!(rest.is_empty(), "{} bytes after EXPORT_NAME", rest.len());
    // --tls-verify-peer: a client with no certificate is refused, one with the CA's is served.
    let bare = dir.path().join("bare");
    std::fs::create_dir(&bare).unwrap();
    std::fs::copy(creds.client.join("ca-cert.pem"), bare.join("ca-cert.pem")).unwrap();
    assert_failed(
        &nbdinfo(&tls_uri(port, &bare)),
        "a client with no certificate",
    );
    let info = run("nbdinfo", &["--size", &tls_uri(port, &creds.client)]);
    assert_eq!(info.trim(), (1 << 20).to_string());
    assert!(daemon.alive());
}

#[test]
fn silent_connections_past_the_limit_are_closed_and_the_export_still_serves() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let creds = creds(dir.path());
    let image = common::image(dir.path(), "a.raw", 1 << 20, 3);
    let (mut daemon, control, socket) = serve_one(dir.path(), "a", &image);
    let port = export_on_tcp(&control, &socket, &["--tls-creds", s(&creds.server)]);
    let silent: Vec<TcpStream> = (0..200)
        .filter_map(|_| TcpStream::connect(("127.0.0.1", port)).ok())
        .collect();
    // Past the limit (16), each is closed: its hello never comes, its read ends.
    let closed = silent
        .iter()
        .filter(|&stream| {
            stream
                .set_read_timeout(Some(Duration::from_secs(60)))
                .unwrap();
            let mut hello = [0; 18];
            (&*stream).read_exact(&mut hello).is_err()
        })
        .count();
    assert!(
        closed >= silent.len() - 16,
        "{closed} of {} closed",
        silent.len()
    );
    drop(silent);
    // Once they are gone, a real client is served (their threads see the ends first).
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let out = nbdinfo(&tls_uri(port, &creds.client));
        if out.status.success() {
            break;
        }
        assert!(Instant::now() < deadline, "never served again");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(daemon.alive());
}

#[test]
fn a_mirror_over_tls_reaches_ready_and_the_images_are_equal() {
    let (a, b) = (
        tempfile::tempdir_in("/dev/shm").unwrap(),
        tempfile::tempdir_in("/dev/shm").unwrap(),
    );
    let creds = creds(b.path());
    let len = 16 << 20;
    let image = common::image(a.path(), "src.raw", len, 11);
    let (mut source, control, socket) = serve_one(a.path(), "src", &image);
    let target = common::sparse_image(b.path(), "dst.raw", len as u64);
    let (mut destination, target_control, target_socket) = serve_one(b.path(), "dst", &target);
    let port = export_on_tcp(
        &target_control,
        &target_socket,
        &[
            "--writable",
            "--tls-creds",
            s(&creds.server),
            "--tls-verify-peer",
        ],
    );
    // A source that trusts another CA is refused at mirror-begin.
    common::ctl::refused(
        &ctl(
            &control,
            &[
                "mirror-begin",
                s(&socket),
                &tls_uri(port, &creds.stranger),
                "--wait-ready",
            ],
        ),
        "certificate",
    );
    let uri = format!("nbds://127.0.0.1:{port}/");
    let answer = ctl_json_or_null(
        &control,
        &[
            "mirror-begin",
            s(&socket),
            &uri,
            "--tls-creds",
            s(&creds.client),
            "--wait-ready",
        ],
    );
    assert_eq!(answer["state"], "ready", "{answer}");
    assert_eq!(answer["copied"], len, "{answer}");
    let ended = ctl_json_or_null(&control, &["mirror-end", s(&socket)]);
    assert_eq!(ended["state"], "ready", "{ended}");
    ctl_json_or_null(
        &target_control,
        &[
            "export-end",
            s(&target_socket),
            &format!("tcp:127.0.0.1:{port}"),
        ],
    );
    assert!(
        std::fs::read(&target).unwrap() == std::fs::read(&image).unwrap(),
        "the destination's image is the source's"
    );
    assert!(source.alive() && destination.alive());
}
