//! vbmq's NBD client (`vbmq::nbd::client`) against real servers over Unix sockets: qemu-nbd,
//! qemu-storage-daemon and vbmq's own export. Pipelined reads return the image exactly; writes,
//! write zeroes and trims land in the image; a server killed mid-use fails the requests in
//! flight and a restarted one serves them again after `reconnect`.

mod common;
#[path = "common/nbd_servers.rs"]
mod nbd_servers;

use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{ctl_json, pattern, s, serve_with_control};
use nbd_servers::NbdServer;
use vbmq::nbd::client::{Client, ClientError, Command};

const LEN: usize = 8 << 20;
const CHUNK: u32 = 64 << 10;

/// Reads the whole export with `depth` requests in flight at once.
fn read_all_pipelined(client: &Client, depth: usize) -> Vec<u8> {
    let size = usize::try_from(client.info().size).unwrap();
    let mut out = vec![0; size];
    let (tx, rx) = mpsc::channel();
    let chunks = size.div_ceil(CHUNK as usize);
    let mut sent = 0;
    let mut received = 0;
    while received < chunks {
        while sent < chunks && sent - received < depth {
            let offset = (sent * CHUNK as usize) as u64;
            let len = CHUNK.min(u32::try_from(size - sent * CHUNK as usize).unwrap());
            let tx = tx.clone();
            client.submit(
                Command::Read { offset, len },
                Box::new(move |r| {
                    let _ = tx.send((offset, r));
                }),
            );
            sent += 1;
        }
        let (offset, data) = rx.recv().unwrap();
        let data = data.unwrap_or_else(|e| panic!("read at {offset}: {e}"));
        let offset = usize::try_from(offset).unwrap();
        out[offset..offset + data.len()].copy_from_slice(&data);
        received += 1;
    }
    out
}

fn image(dir: &Path) -> (std::path::PathBuf, Vec<u8>) {
    let data = pattern(35, LEN);
    let path = dir.join("remote.raw");
    std::fs::write(&path, &data).unwrap();
    (path, data)
}

#[test]
fn qemu_nbd_pipelined_reads_are_the_image_and_writes_land_in_it() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let (path, mut expected) = image(dir.path());
    let socket = dir.path().join("nbd.sock");
    let _server = NbdServer::qemu_nbd(&path, &socket, "remote", false);
    let client = Client::connect_unix(socket.clone(), "remote").unwrap();
    assert_eq!(client.info().size, LEN as u64);
    assert!(!client.info().read_only());
    assert!(
        read_all_pipelined(&client, 32) == expected,
        "the export reads as the image"
    );

    let block = pattern(36, 4096);
    client.write(1 << 20, &block, false).unwrap();
    expected[1 << 20..(1 << 20) + 4096].copy_from_slice(&block);
    client.write_zeroes(2 << 20, 8192, false).unwrap();
    expected[2 << 20..(2 << 20) + 8192].fill(0);
    client.trim(4 << 20, 65536).unwrap();
    client.flush().unwrap();
    let mut back = vec![0; 4096];
    client.read(1 << 20, &mut back).unwrap();
    assert_eq!(back, block);
    let on_disk = std::fs::read(&path).unwrap();
    assert!(
        on_disk[..4 << 20] == expected[..4 << 20]
            && on_disk[(4 << 20) + 65536..] == expected[(4 << 20) + 65536..],
        "writes and write zeroes land in the image, nothing else changes"
    );
    let unknown = Client::connect_unix(socket, "nothing");
    assert!(
        matches!(unknown, Err(ClientError::Refused { .. })),
        "{:?}",
        unknown.err()
    );
}

#[test]
fn a_killed_server_fails_requests_and_a_restarted_one_serves_them_after_reconnect() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let (path, expected) = image(dir.path());
    let socket = dir.path().join("nbd.sock");
    let server = NbdServer::qemu_nbd(&path, &socket, "remote", true);
    let client = Client::connect_unix(socket.clone(), "remote").unwrap();
    assert!(client.info().read_only());
    assert!(matches!(
        client.write(0, &[0; 512], false),
        Err(ClientError::Invalid(_))
    ));
    server.kill();
    let mut buf = vec![0; 65536];
    assert!(matches!(
        client.read(0, &mut buf),
        Err(ClientError::Disconnected)
    ));
    assert!(!client.is_connected());
    assert!(client.reconnect().is_err(), "no server: no connection");
    let _server = NbdServer::qemu_nbd(&path, &socket, "remote", true);
    client.reconnect().unwrap();
    client.read(65536, &mut buf).unwrap();
    assert!(buf[..] == expected[65536..131072]);
    assert!(read_all_pipelined(&client, 16) == expected);
}

#[test]
fn a_read_waits_out_a_server_restart_until_its_deadline() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let (path, expected) = image(dir.path());
    let socket = dir.path().join("nbd.sock");
    let client = Client::connect_unix(socket.clone(), "remote");
    assert!(client.is_err(), "no server yet");
    let server = NbdServer::qemu_nbd(&path, &socket, "remote", true);
    let client = std::sync::Arc::new(Client::connect_unix(socket.clone(), "remote").unwrap());
    server.kill();
    // No server until the deadline: the read fails, and not before its deadline.
    let start = Instant::now();
    let deadline = start + Duration::from_millis(300);
    let mut buf = vec![0; 4096];
    let lost = client.with_reconnect(deadline, |c| c.read(0, &mut buf));
    assert!(matches!(lost, Err(ClientError::Disconnected)), "{lost:?}");
    assert!(Instant::now() >= deadline);
    // A server back before the deadline: the read returns the image's bytes.
    let reader = client.clone();
    let waiting = std::thread::spawn(move || {
        let mut buf = vec![0; 4096];
        let deadline = Instant::now() + Duration::from_secs(120);
        reader
            .with_reconnect(deadline, |c| c.read(8192, &mut buf))
            .map(|()| buf)
    });
    let _server = NbdServer::qemu_nbd(&path, &socket, "remote", true);
    let read = waiting.join().unwrap().unwrap();
    assert!(read[..] == expected[8192..8192 + 4096]);
}

#[test]
fn qemu_storage_daemon_takes_pipelined_writes() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let (path, _) = image(dir.path());
    let socket = dir.path().join("qsd.sock");
    let _server = NbdServer::storage_daemon(&path, &socket, "disk");
    // Named as an operator names it: a URI, the export name percent-encoded.
    let uri = format!("nbd+unix:///d%69sk?socket={}", s(&socket));
    let client = Client::connect_uri(&uri.parse().unwrap()).unwrap();
    assert_eq!(client.info().size, LEN as u64);
    let data = pattern(37, LEN);
    let (tx, rx) = mpsc::channel();
    for (i, chunk) in data.chunks(CHUNK as usize).enumerate() {
        let tx = tx.clone();
        client.submit(
            Command::Write {
                offset: (i * CHUNK as usize) as u64,
                data: chunk,
                fua: false,
            },
            Box::new(move |r| {
                let _ = tx.send(r);
            }),
        );
    }
    drop(tx);
    for result in rx {
        result.unwrap();
    }
    client.flush().unwrap();
    assert!(read_all_pipelined(&client, 32) == data);
    assert!(
        std::fs::read(&path).unwrap() == data,
        "every write is in the image"
    );
}

#[test]
fn vbmq_export_reads_as_its_disk() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let (path, expected) = image(dir.path());
    let disk = dir.path().join("disk.sock");
    let (_daemon, control) = serve_with_control(
        dir.path(),
        &[format!("socket={},path={}", s(&disk), s(&path))],
    );
    let export = dir.path().join("export.sock");
    ctl_json(
        &control,
        &["export-begin", s(&disk), &format!("unix:{}", s(&export))],
    );
    let client = Client::connect_unix(export, "").unwrap();
    assert_eq!(client.info().size, LEN as u64);
    assert!(client.info().read_only());
    assert!(read_all_pipelined(&client, 32) == expected);
    client.flush().unwrap();
}
