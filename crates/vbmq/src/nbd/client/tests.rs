//! The client against scripted hostile servers: what real servers never send (replies out of
//! order, to no request, cut short, oversized, malformed handshakes). The client against real
//! servers (qemu-nbd, qemu-storage-daemon, vbmq's export) is in `tests/nbd_client.rs`.
#![allow(clippy::cast_possible_truncation)] // Small test lengths and markers.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::{Mutex, mpsc};
use std::thread::JoinHandle;

use super::*;
use crate::nbd::wire::{OptionHeader, handshake, info, opt, rep};

const SIZE: u64 = 1 << 20;
const FLAGS: u16 = flag::HAS_FLAGS | flag::SEND_FLUSH | flag::SEND_TRIM;

/// A connector that hands out the client's ends of `count` socket pairs, and the server ends.
fn pairs(count: usize) -> (Connector, Vec<UnixStream>) {
    let (mut clients, mut servers) = (Vec::new(), Vec::new());
    for _ in 0..count {
        let (c, s) = UnixStream::pair().unwrap();
        clients.push(c);
        servers.push(s);
    }
    clients.reverse();
    let clients = Mutex::new(clients);
    let connector: Connector = Box::new(move || {
        lock(&clients)
            .pop()
            .ok_or_else(|| io::Error::from(io::ErrorKind::ConnectionRefused))
    });
    (connector, servers)
}

fn hello(s: &mut UnixStream) {
    s.write_all(&wire::NBD_MAGIC.to_be_bytes()).unwrap();
    s.write_all(&wire::IHAVEOPT.to_be_bytes()).unwrap();
    s.write_all(&(handshake::FIXED_NEWSTYLE | handshake::NO_ZEROES).to_be_bytes())
        .unwrap();
    let mut client = [0; 4];
    s.read_exact(&mut client).unwrap();
    let mut header = [0; OptionHeader::SIZE];
    s.read_exact(&mut header).unwrap();
    let header = OptionHeader::decode(&header);
    assert_eq!(header.option, opt::GO);
    let mut data = vec![0; header.length as usize];
    s.read_exact(&mut data).unwrap();
}

fn option_reply(s: &mut UnixStream, kind: u32, data: &[u8]) {
    s.write_all(&wire::option_reply(opt::GO, kind, data.len() as u32))
        .unwrap();
    s.write_all(data).unwrap();
}

/// A well-behaved handshake for an export of `size` bytes.
fn handshake_ok(s: &mut UnixStream, size: u64, flags: u16) {
    hello(s);
    let mut export = info::EXPORT.to_be_bytes().to_vec();
    export.extend_from_slice(&size.to_be_bytes());
    export.extend_from_slice(&flags.to_be_bytes());
    option_reply(s, rep::INFO, &export);
    option_reply(s, rep::ACK, &[]);
}

fn request(s: &mut UnixStream) -> Request {
    let mut header = [0; Request::SIZE];
    s.read_exact(&mut header).unwrap();
    Request::decode(&header)
}

fn scripted(
    mut s: UnixStream,
    script: impl FnOnce(&mut UnixStream) + Send + 'static,
) -> JoinHandle<()> {
    std::thread::spawn(move || script(&mut s))
}

/// Submits a read and returns where its outcome arrives.
fn read_later(
    client: &Client,
    offset: u64,
    len: u32,
) -> mpsc::Receiver<Result<Vec<u8>, ClientError>> {
    let (tx, rx) = mpsc::channel();
    client.submit(
        Command::Read { offset, len },
        Box::new(move |r| {
            let _ = tx.send(r);
        }),
    );
    rx
}

#[test]
fn replies_out_of_order_reach_their_own_requests() {
    let (connector, mut servers) = pairs(1);
    let server = scripted(servers.remove(0), |s| {
        handshake_ok(s, SIZE, FLAGS);
        let requests: Vec<Request> = (0..3).map(|_| request(s)).collect();
        for r in requests.iter().rev() {
            s.write_all(&wire::simple_reply(0, r.cookie)).unwrap();
            s.write_all(&vec![(r.offset / 4096) as u8 + 1; r.length as usize])
                .unwrap();
        }
        // DISC at the client's drop.
        assert_eq!(request(s).kind, cmd::DISC);
    });
    let client = Client::connect(connector, "").unwrap();
    assert_eq!(client.info().size, SIZE);
    let pending: Vec<_> = (0..3).map(|i| read_later(&client, i * 4096, 512)).collect();
    for (i, rx) in pending.into_iter().enumerate() {
        assert_eq!(rx.recv().unwrap().unwrap(), vec![i as u8 + 1; 512]);
    }
    drop(client);
    server.join().unwrap();
}

#[test]
fn a_reply_to_no_request_ends_the_connection_and_fails_what_is_in_flight() {
    let (connector, mut servers) = pairs(1);
    let server = scripted(servers.remove(0), |s| {
        handshake_ok(s, SIZE, FLAGS);
        let r = request(s);
        let mut reply = wire::simple_reply(0, r.cookie ^ 0xffff).to_vec();
        // Data the client must not take for its read's; it may hang up before it is written.
        reply.extend_from_slice(&[0xee; 512]);
        let _ = s.write_all(&reply);
    });
    let client = Client::connect(connector, "").unwrap();
    let result = read_later(&client, 0, 512).recv().unwrap();
    assert!(
        matches!(result, Err(ClientError::Disconnected)),
        "{result:?}"
    );
    assert!(!client.is_connected());
    // A new request on the lost connection fails at once.
    assert!(matches!(
        client.read(0, &mut [0; 512]),
        Err(ClientError::Disconnected)
    ));
    server.join().unwrap();
}

#[test]
fn a_read_cut_short_fails_and_a_reconnection_serves_it() {
    let (connector, mut servers) = pairs(2);
    let second = servers.pop().unwrap();
    let first = scripted(servers.remove(0), |s| {
        handshake_ok(s, SIZE, FLAGS);
        let r = request(s);
        s.write_all(&wire::simple_reply(0, r.cookie)).unwrap();
        s.write_all(&[7; 100]).unwrap();
        // Then gone, mid-data.
    });
    let client = Client::connect(connector, "").unwrap();
    let mut buf = [0; 512];
    assert!(matches!(
        client.read(0, &mut buf),
        Err(ClientError::Disconnected)
    ));
    first.join().unwrap();
    let second = scripted(second, |s| {
        handshake_ok(s, SIZE, FLAGS);
        let r = request(s);
        s.write_all(&wire::simple_reply(0, r.cookie)).unwrap();
        s.write_all(&[9; 512]).unwrap();
    });
    client.reconnect().unwrap();
    client.read(0, &mut buf).unwrap();
    assert_eq!(buf, [9; 512]);
    drop(client);
    second.join().unwrap();
}

#[test]
fn a_reconnection_to_an_export_of_another_size_is_refused() {
    let (connector, mut servers) = pairs(2);
    let second = servers.pop().unwrap();
    let first = scripted(servers.remove(0), |s| handshake_ok(s, SIZE, FLAGS));
    let client = Client::connect(connector, "").unwrap();
    first.join().unwrap();
    // The first server's end is dropped: the connection is lost.
    while client.is_connected() {
        std::thread::yield_now();
    }
    let second = scripted(second, |s| handshake_ok(s, SIZE * 2, FLAGS));
    let refused = client.reconnect();
    assert!(
        matches!(refused, Err(ClientError::Protocol(_))),
        "{refused:?}"
    );
    second.join().unwrap();
}

#[test]
fn server_errors_and_local_checks() {
    let (connector, mut servers) = pairs(1);
    let server = scripted(servers.remove(0), |s| {
        handshake_ok(s, SIZE, FLAGS | flag::READ_ONLY);
        let r = request(s);
        s.write_all(&wire::simple_reply(5, r.cookie)).unwrap();
        // No data after an error: the next reply follows at once.
        let r = request(s);
        assert_eq!(r.kind, cmd::FLUSH);
        s.write_all(&wire::simple_reply(0, r.cookie)).unwrap();
        // Nothing else reaches the server before the client's DISC.
        assert_eq!(request(s).kind, cmd::DISC);
    });
    let client = Client::connect(connector, "").unwrap();
    assert!(matches!(
        client.read(0, &mut [0; 512]),
        Err(ClientError::Server(5))
    ));
    client.flush().unwrap();
    let invalid =
        |r: Result<(), ClientError>| assert!(matches!(r, Err(ClientError::Invalid(_))), "{r:?}");
    invalid(client.write(0, &[0; 512], false));
    invalid(client.read(SIZE - 256, &mut [0; 512]));
    invalid(client.read(u64::MAX - 100, &mut [0; 512]));
    invalid(client.read(0, &mut []));
    invalid(client.write_zeroes(0, 512, true));
    let mut huge = vec![0; MAX_REQUEST as usize + 512];
    invalid(client.read(0, &mut huge));
    assert!(client.is_connected());
    drop(client);
    server.join().unwrap();
}

/// Connects to a server that runs `script` after its hello; the handshake's outcome.
fn handshake_against(script: impl FnOnce(&mut UnixStream) + Send + 'static) -> ClientError {
    let (connector, mut servers) = pairs(1);
    let server = scripted(servers.remove(0), script);
    let error = Client::connect(connector, "name")
        .err()
        .expect("the handshake fails");
    server.join().unwrap();
    error
}

#[test]
fn broken_handshakes_are_errors() {
    let e = handshake_against(|s| {
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\n\r\n");
    });
    assert!(matches!(e, ClientError::Protocol(_)), "{e:?}");
    let e = handshake_against(|s| {
        s.write_all(&wire::NBD_MAGIC.to_be_bytes()).unwrap();
        s.write_all(&0x0000_4202_8186_1253u64.to_be_bytes())
            .unwrap();
        s.write_all(&[0; 2]).unwrap();
    });
    assert!(
        matches!(e, ClientError::Protocol(m) if m.contains("oldstyle")),
        "{e:?}"
    );
    let e = handshake_against(|s| {
        hello(s);
        s.write_all(&wire::option_reply(opt::GO, rep::INFO, u32::MAX))
            .unwrap();
    });
    assert!(
        matches!(e, ClientError::Protocol(m) if m.contains("too long")),
        "{e:?}"
    );
    let e = handshake_against(|s| {
        hello(s);
        option_reply(s, rep::ERR_UNKNOWN, b"no such export");
    });
    assert!(
        matches!(&e, ClientError::Refused { message, .. } if message == "no such export"),
        "{e:?}"
    );
    let e = handshake_against(|s| {
        hello(s);
        option_reply(s, rep::ACK, &[]);
    });
    assert!(matches!(e, ClientError::Protocol(_)), "{e:?}");
    let e = handshake_against(|s| {
        hello(s);
        let mut sizes = info::BLOCK_SIZE.to_be_bytes().to_vec();
        for v in [3u32, 4096, 1 << 20] {
            sizes.extend_from_slice(&v.to_be_bytes());
        }
        option_reply(s, rep::INFO, &sizes);
        handshake_ok_tail(s);
    });
    assert!(
        matches!(e, ClientError::Protocol(m) if m.contains("minimum")),
        "{e:?}"
    );
    let e = handshake_against(|s| {
        hello(s);
        let mut replies = Vec::new();
        for _ in 0..100 {
            replies.extend_from_slice(&wire::option_reply(opt::GO, rep::INFO, 2));
            replies.extend_from_slice(&99u16.to_be_bytes());
        }
        // The client hangs up part way: the rest may not be written.
        let _ = s.write_all(&replies);
    });
    assert!(
        matches!(e, ClientError::Protocol(m) if m.contains("too many")),
        "{e:?}"
    );
    // A server gone mid-handshake.
    let e = handshake_against(|s| {
        hello(s);
        s.write_all(&wire::OPTION_REPLY_MAGIC.to_be_bytes())
            .unwrap();
    });
    assert!(matches!(e, ClientError::Io(_)), "{e:?}");
}

/// The export item and the ACK.
fn handshake_ok_tail(s: &mut UnixStream) {
    let mut export = info::EXPORT.to_be_bytes().to_vec();
    export.extend_from_slice(&SIZE.to_be_bytes());
    export.extend_from_slice(&FLAGS.to_be_bytes());
    option_reply(s, rep::INFO, &export);
    option_reply(s, rep::ACK, &[]);
}
