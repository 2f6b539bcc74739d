//! Guest memory the frontend cuts under a request: the client's memfd cannot be sealed, so a
//! page past the new end faults in vbmq. The request's page, the reply's page, and a WRITE's
//! data each go; vbmq survives, and the next frontend is served.

use std::time::Duration;

use vbmq_driver::fuse::{self, Opcode, ROOT_ID, WriteIn};
use vbmq_driver::{Buffer, FsClient};

use super::requests::put;
use super::share::Share;

/// Publishes `buffers` in slot 0 without a kick, cuts the memory at `cut`, then kicks; this
/// client is done with afterwards (its memory is gone).
fn cut_under(mut client: FsClient, buffers: &[Buffer], cut: u64) {
    client.submit_wide(0, buffers);
    client.truncate_memory(cut).unwrap();
    client.kick().unwrap();
    // The chain may come back, or the connection may end: either way, give vbmq time.
    let _ = client.wait(Duration::from_millis(500));
}

#[test]
fn memory_cut_under_a_request_leaves_vbmq_serving() {
    for readonly in [false, true] {
        let mut share = Share::start(&format!("cut-{readonly}"), readonly);
        let (req_at, reply_at) = FsClient::slot_addrs(0);

        // The request's page goes.
        let client = share.client();
        let lookup = fuse::request(Opcode::Lookup, 99, ROOT_ID, &[], &[b"file"]);
        put(&client, &lookup, req_at);
        let buffers = [
            Buffer::readable(req_at, lookup.len() as u32),
            Buffer::writable(reply_at, 4096),
        ];
        cut_under(client, &buffers, req_at);
        share.check_anew("the request's page cut");

        // The reply's page goes.
        let client = share.client();
        put(&client, &lookup, req_at);
        cut_under(client, &buffers, reply_at);
        share.check_anew("the reply's page cut");

        // A WRITE whose data is on a page that goes (header and arguments stay).
        let mut client = share.client();
        let inner = client.lookup(ROOT_ID, "sub").unwrap().nodeid;
        let inner = client.lookup(inner, "inner").unwrap().nodeid;
        let flags = if readonly {
            libc::O_RDONLY
        } else {
            libc::O_RDWR
        };
        let fh = client.open(inner, flags as u32).unwrap();
        let write = WriteIn {
            fh,
            size: 4096,
            ..WriteIn::default()
        };
        let head = fuse::request(Opcode::Write, 100, inner, fuse::args(&write), &[]);
        let head_at = reply_at - head.len() as u64;
        let mut whole = head.clone();
        whole.resize(head.len() + 4096, 0x5a);
        let len = whole.len() as u32;
        whole[0..4].copy_from_slice(&len.to_le_bytes());
        put(&client, &whole, head_at);
        let buffers = [
            Buffer::readable(head_at, whole.len() as u32),
            Buffer::writable(reply_at + 8192, 4096),
        ];
        cut_under(client, &buffers, reply_at);
        share.check_anew("a WRITE's data cut");
        let inner = std::fs::read(share.dir.join("share/sub/inner")).unwrap();
        assert!(inner == b"inner", "a WRITE from cut memory wrote {inner:?}");
    }
}
