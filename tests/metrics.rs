//! `vbmq serve --metrics ADDR`: Prometheus text at /metrics with per-queue counters that follow
//! the I/O done, a latency histogram, and `vbmq ctl stats` with latency percentiles.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use common::ctl::{free_port, http_get};
use common::{Client, Serve, ctl, image, pattern, s};

/// The value of the sample line that starts with `prefix`.
fn sample(text: &str, prefix: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(prefix))
        .and_then(|rest| rest.trim().parse().ok())
        .unwrap_or_else(|| panic!("no sample {prefix} in:\n{text}"))
}

#[test]
fn metrics_follow_the_io_and_stats_give_percentiles() {
    let dir = tempfile::tempdir().unwrap();
    let file = image(dir.path(), "d.raw", 4 << 20, 3);
    let socket = dir.path().join("d.sock");
    let control = dir.path().join("ctl.sock");
    let port = free_port();
    let daemon = Serve::new()
        .control(&control)
        .opt("--metrics", format!("127.0.0.1:{port}"))
        .disk(&format!("socket={},path={},queues=2", s(&socket), s(&file)))
        .start();
    let disk = format!("disk=\"{}\",kind=\"disk\"", socket.display());
    let before = http_get(port, "/metrics");
    assert!(before.starts_with("HTTP/1.1 200"), "{before}");
    let reads = format!("vbmq_requests_total{{{disk},queue=\"0\",op=\"read\"}}");
    let writes = format!("vbmq_requests_total{{{disk},queue=\"0\",op=\"write\"}}");
    assert_eq!(sample(&before, &reads), 0.0);

    let mut client = Client::connect(&socket, 2, false).unwrap();
    for i in 0..10u64 {
        assert_eq!(client.read(0, i * 4096, 4096).0, 0);
    }
    for i in 0..5u64 {
        assert_eq!(client.write(0, i * 8192, &pattern(i, 8192)), 0);
    }
    let after = http_get(port, "/metrics");
    assert_eq!(sample(&after, &reads), 10.0);
    assert_eq!(sample(&after, &writes), 5.0);
    let read_bytes = format!("vbmq_bytes_total{{{disk},queue=\"0\",direction=\"read\"}}");
    assert_eq!(sample(&after, &read_bytes), 40960.0);
    let count = format!("vbmq_request_latency_seconds_count{{{disk},queue=\"0\"}}");
    assert_eq!(sample(&after, &count), 15.0);
    let ioerr = format!("vbmq_errors_total{{{disk},queue=\"0\",status=\"ioerr\"}}");
    assert_eq!(sample(&after, &ioerr), 0.0);
    let slept = format!("vbmq_sleep_seconds_total{{{disk},queue=\"1\"}}");
    assert!(sample(&after, &slept) >= 0.0);
    let busy = format!("vbmq_busy_passes_total{{{disk},queue=\"0\"}}");
    assert!(sample(&after, &busy) >= 1.0);
    assert!(http_get(port, "/other").starts_with("HTTP/1.1 404"));
    // A client that sends a huge request is dropped; the next scrape is answered.
    if let Ok(mut junk) = TcpStream::connect(("127.0.0.1", port)) {
        let _ = junk.write_all(&vec![b'x'; 1 << 20]);
    }
    assert!(http_get(port, "/metrics").starts_with("HTTP/1.1 200"));

    let out = ctl(&control, &["stats", s(&socket)]);
    assert!(out.status.success());
    let stats: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    eprintln!("vbmq ctl stats: {stats}");
    let queue = &stats[0]["queues"][0];
    assert_eq!(queue["ops"]["read"], 10);
    assert!(queue["latency_us"]["p50"].as_u64().is_some(), "{stats}");
    assert!(queue["latency_us"]["p999"].as_u64() >= queue["latency_us"]["p50"].as_u64());
    drop(client);
    assert!(daemon.terminate().success());
}

/// A client that connects and sends nothing, or sends its request and reads nothing, holds
/// only its own connection: another scraper is answered at once, not after their time-outs.
#[test]
fn an_idle_or_slow_client_does_not_hold_the_metrics_endpoint() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("d.sock");
    let port = free_port();
    let daemon = Serve::new()
        .opt("--metrics", format!("127.0.0.1:{port}"))
        .disk(&format!("socket={},null=1G", s(&socket)))
        .start();
    assert!(http_get(port, "/metrics").starts_with("HTTP/1.1 200"));
    let idle: Vec<TcpStream> = (0..4)
        .map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap())
        .collect();
    let mut slow = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(slow, "GET /metrics HTTP/1.1\r\n").unwrap();
    for round in 0..3 {
        let started = std::time::Instant::now();
        let reply = http_get(port, "/metrics");
        assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
        // Served in turn, the scrape would wait out the idle clients' 5 s read timeouts, 25 s
        // in all; 10 s leaves a loaded machine room on both sides.
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "round {round}: answered after {:?}, behind the idle clients",
            started.elapsed()
        );
    }
    drop((idle, slow));
    assert!(daemon.terminate().success());
}
