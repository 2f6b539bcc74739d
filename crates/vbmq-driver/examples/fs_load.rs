//! Random 4 KiB reads of one file through a virtio-fs backend, for profiling the backend:
//! `fs_load SOCKET FILE_NAME SECONDS [DEPTH]` (the file at the share's root, at least 64 MiB).

use std::time::{Duration, Instant};

use vbmq_driver::FsClient;
use vbmq_driver::fuse::ROOT_ID;

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let (socket, name) = (&args[1], &args[2]);
    let seconds: u64 = args[3].parse().unwrap_or(5);
    let depth: u16 = args.get(4).and_then(|d| d.parse().ok()).unwrap_or(32);
    let mut client = FsClient::connect(socket.as_ref())?;
    let entry = client.lookup(ROOT_ID, name)?;
    let fh = client.open(entry.nodeid, libc::O_RDONLY as u32)?;
    let blocks = entry.attr.size / 4096;
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % blocks * 4096
    };
    for slot in 0..depth {
        let request = client.read_request(entry.nodeid, fh, next(), 4096);
        client.submit(slot, &request, 16 + 4096)?;
    }
    client.kick()?;
    let start = Instant::now();
    let mut done = Vec::new();
    let mut count = 0u64;
    while start.elapsed() < Duration::from_secs(seconds) {
        done.clear();
        client.reap(&mut done);
        for &(slot, _) in &done {
            count += 1;
            let request = client.read_request(entry.nodeid, fh, next(), 4096);
            client.submit(slot, &request, 16 + 4096)?;
        }
        if !done.is_empty() {
            client.kick()?;
        }
    }
    println!("{:.0} IOPS", count as f64 / start.elapsed().as_secs_f64());
    Ok(())
}
