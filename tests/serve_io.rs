//! The real `vbmq serve` process driven through its vhost-user socket by libblkio.

mod common;

use common::{Client, Daemon, image, pattern};

fn disk(dir: &std::path::Path, name: &str, extra: &str) -> (String, std::path::PathBuf) {
    let socket = dir.join(format!("{name}.sock"));
    (format!("socket={},{extra}", socket.display()), socket)
}

#[test]
fn every_queue_reads_what_every_other_queue_wrote() {
    for mode in ["event", "poll", "adaptive"] {
        let dir = tempfile::tempdir().unwrap();
        let file = image(dir.path(), "disk.raw", 8 << 20, 1);
        let (spec, socket) = disk(
            dir.path(),
            "d",
            &format!("path={},queues=2,mode={mode},cpus=0-1", file.display()),
        );
        let daemon = Daemon::start(&[spec]);
        let mut client = Client::connect(&socket, 2, mode == "poll").unwrap();
        assert_eq!(client.capacity(), 8 << 20);
        for q in 0..2 {
            let data = pattern(10 + q as u64, 64 << 10);
            let offset = (q as u64 + 1) * (1 << 20);
            assert_eq!(
                client.write(q, offset, &data),
                0,
                "{mode}: write on queue {q}"
            );
            let (ret, back) = client.read(1 - q, offset, data.len());
            assert_eq!(ret, 0, "{mode}: read on queue {}", 1 - q);
            assert!(back == data, "{mode}: queue {} read other data", 1 - q);
        }
        // Untouched data reads as the image was written.
        let (ret, back) = client.read(0, 4 << 20, 4096);
        assert_eq!(ret, 0);
        assert_eq!(back, pattern(1, 8 << 20)[4 << 20..(4 << 20) + 4096]);
        assert_eq!(client.flush(0), 0);
        drop(client);
        assert!(daemon.terminate().success(), "{mode}: exit status");
        // Writes reached the file.
        let contents = std::fs::read(&file).unwrap();
        assert_eq!(
            contents[1 << 20..(1 << 20) + (64 << 10)],
            pattern(10, 64 << 10)[..]
        );
    }
}
