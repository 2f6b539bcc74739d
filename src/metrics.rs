//! `--metrics ADDR`: Prometheus (OpenMetrics text) at `http://ADDR/metrics`, per device (label
//! `disk`, its socket path, and `kind`, `disk` or `fs`) and queue (label `queue`): a share has
//! the families that apply to it (requests, without `op`; passes; busy passes; sleep). Encoded by the `prometheus-client` crate
//! from a snapshot of the per-queue counters taken at each scrape: the data path only bumps its
//! own queue's counters. The listener is bound before the process is confined; each scrape is
//! answered on a thread of its own, with bounded request size and time and a bound on the
//! scrapes answered at once: a client that sends nothing or reads slowly holds only its own.

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use vbmq::host::{DeviceKind, DiskCounters, Host};
use vbmq::worker::OpKind;

/// The longest request head read; the rest is not looked at.
const MAX_REQUEST: usize = 8 * 1024;
/// How long a scraper has to send its request and read the reply.
const TIMEOUT: Duration = Duration::from_secs(5);
/// Scrapes answered at once; a connection past them is closed at once.
const MAX_CLIENTS: usize = 64;

/// The disks' and shares' counters, read at each scrape.
struct Disks(Arc<Host>);

impl std::fmt::Debug for Disks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Disks")
    }
}

type Labels = Vec<(&'static str, String)>;

fn labels(disk: &DiskCounters, queue: usize) -> Labels {
    vec![
        ("disk", disk.socket.display().to_string()),
        ("kind", disk.kind.name().to_string()),
        ("queue", queue.to_string()),
    ]
}

/// What a family gives for one queue: samples, each with an extra label or none.
type Samples = Vec<(Option<(&'static str, &'static str)>, u64)>;

/// One counter family over every device's queues (`values` gets the device's kind: a share
/// has no samples of the families that do not apply to it).
fn counter(
    encoder: &mut DescriptorEncoder,
    disks: &[DiskCounters],
    (name, help): (&str, &str),
    values: impl Fn(DeviceKind, &vbmq::host::QueueCounters) -> Samples,
) -> std::fmt::Result {
    let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
    for disk in disks {
        for (index, queue) in disk.queues.iter().enumerate() {
            for (extra, value) in values(disk.kind, queue) {
                let mut set = labels(disk, index);
                if let Some((key, label)) = extra {
                    set.push((key, label.to_string()));
                }
                family
                    .encode_family(&set)?
                    .encode_counter::<NoLabelSet, _, u64>(&value, None)?;
            }
        }
    }
    Ok(())
}

impl Collector for Disks {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let disks = self.0.stats(None).unwrap_or_default();
        counter(
            &mut encoder,
            &disks,
            (
                "vbmq_requests",
                "Requests completed, by operation (a share's: all FUSE requests, no op label)",
            ),
            |kind, q| {
                if kind == DeviceKind::Fs {
                    return vec![(None, q.requests)];
                }
                OpKind::NAMES
                    .iter()
                    .zip(q.ops)
                    .map(|(name, count)| (Some(("op", *name)), count))
                    .collect()
            },
        )?;
        counter(
            &mut encoder,
            &disks,
            ("vbmq_bytes", "Bytes moved, by direction"),
            |kind, q| {
                if kind == DeviceKind::Fs {
                    return Vec::new();
                }
                vec![
                    (Some(("direction", "read")), q.read_bytes),
                    (Some(("direction", "write")), q.write_bytes),
                ]
            },
        )?;
        counter(
            &mut encoder,
            &disks,
            (
                "vbmq_errors",
                "Requests completed with an error status, by status",
            ),
            |kind, q| {
                if kind == DeviceKind::Fs {
                    return Vec::new();
                }
                vec![
                    (
                        Some(("status", "ioerr")),
                        q.errors - q.unsupported.min(q.errors),
                    ),
                    (Some(("status", "unsupp")), q.unsupported),
                ]
            },
        )?;
        let mut sleep = encoder.encode_descriptor(
            "vbmq_sleep_seconds",
            "Time the serving thread slept waiting for the queue (the rest it polled or worked)",
            None,
            MetricType::Counter,
        )?;
        for disk in &disks {
            for (index, queue) in disk.queues.iter().enumerate() {
                let seconds = queue.sleep_ns as f64 / 1e9;
                sleep
                    .encode_family(&labels(disk, index))?
                    .encode_counter::<NoLabelSet, _, u64>(&seconds, None)?;
            }
        }
        counter(
            &mut encoder,
            &disks,
            (
                "vbmq_passes",
                "Passes of the serving thread over the queue's ring",
            ),
            |_, q| vec![(None, q.passes)],
        )?;
        counter(
            &mut encoder,
            &disks,
            (
                "vbmq_busy_passes",
                "Passes that found work (poll efficiency = busy_passes / passes)",
            ),
            |_, q| vec![(None, q.busy_passes)],
        )?;
        let mut in_flight = encoder.encode_descriptor(
            "vbmq_in_flight",
            "Requests in flight",
            None,
            MetricType::Gauge,
        )?;
        for disk in disks.iter().filter(|d| d.kind == DeviceKind::Disk) {
            for (index, queue) in disk.queues.iter().enumerate() {
                in_flight
                    .encode_family(&labels(disk, index))?
                    .encode_gauge(&i64::try_from(queue.in_flight).unwrap_or(i64::MAX))?;
            }
        }
        let mut latency = encoder.encode_descriptor(
            "vbmq_request_latency_seconds",
            "Time from taking a request off the ring to completing it",
            None,
            MetricType::Histogram,
        )?;
        for disk in disks.iter().filter(|d| d.kind == DeviceKind::Disk) {
            for (index, queue) in disk.queues.iter().enumerate() {
                let buckets: Vec<(f64, u64)> = queue
                    .latency_buckets
                    .iter()
                    .enumerate()
                    .map(|(i, &count)| {
                        let bound = if i + 1 == queue.latency_buckets.len() {
                            f64::INFINITY
                        } else {
                            (1u64 << i) as f64 / 1e6
                        };
                        (bound, count)
                    })
                    .collect();
                let count = queue.latency_buckets.iter().sum();
                latency
                    .encode_family(&labels(disk, index))?
                    .encode_histogram::<NoLabelSet>(
                        queue.latency_ns as f64 / 1e9,
                        count,
                        &buckets,
                        None,
                    )?;
            }
        }
        Ok(())
    }
}

/// A bound metrics listener, not yet served.
pub struct Server {
    listener: TcpListener,
}

impl Server {
    /// Binds `addr` (before confinement).
    pub fn bind(addr: SocketAddr) -> io::Result<Self> {
        Ok(Server {
            listener: TcpListener::bind(addr)?,
        })
    }

    /// Serves scrapes on a thread of its own, with the disks and shares of `host`.
    pub fn start(self, host: Arc<Host>) {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Disks(host)));
        let registry = Arc::new(registry);
        let clients = Arc::new(AtomicUsize::new(0));
        let spawned = std::thread::Builder::new()
            .name("vbmq-metrics".into())
            .spawn(move || {
                for stream in self.listener.incoming() {
                    match stream {
                        Ok(stream) => answer(stream, &registry, &clients),
                        Err(_) => std::thread::sleep(Duration::from_millis(10)),
                    }
                }
            });
        if let Err(e) = spawned {
            eprintln!("vbmq: cannot start the metrics thread: {e}");
        }
    }
}

/// Answers `stream` on a thread of its own, unless [`MAX_CLIENTS`] are being answered (it is
/// closed then).
fn answer(stream: TcpStream, registry: &Arc<Registry>, clients: &Arc<AtomicUsize>) {
    if clients.fetch_add(1, Ordering::AcqRel) >= MAX_CLIENTS {
        clients.fetch_sub(1, Ordering::AcqRel);
        return;
    }
    let (registry, done) = (Arc::clone(registry), Arc::clone(clients));
    let spawned = std::thread::Builder::new()
        .name("vbmq-scrape".into())
        .stack_size(256 << 10)
        .spawn(move || {
            scrape(stream, &registry);
            done.fetch_sub(1, Ordering::AcqRel);
        });
    if spawned.is_err() {
        clients.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Answers one HTTP request: the metrics for `GET /metrics`, 404 otherwise.
fn scrape(stream: TcpStream, registry: &Registry) {
    if stream.set_nonblocking(true).is_err() {
        return;
    }
    let deadline = Instant::now() + TIMEOUT;
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_REQUEST {
        match io_wait(&stream, libc::POLLIN, deadline).and_then(|()| read(&stream, &mut buf)) {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let reply = if line.starts_with(b"GET /metrics ") || line == b"GET /metrics" {
        let mut body = String::new();
        match prometheus_client::encoding::text::encode(&mut body, registry) {
            Ok(()) => format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/openmetrics-text; version=1.0.0; \
                 charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            ),
            Err(_) => "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n".into(),
        }
    } else {
        "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".into()
    };
    let mut sent = 0;
    let bytes = reply.as_bytes();
    while sent < bytes.len() {
        match io_wait(&stream, libc::POLLOUT, deadline)
            .and_then(|()| write(&stream, &bytes[sent..]))
        {
            Ok(0) | Err(_) => return,
            Ok(n) => sent += n,
        }
    }
}

/// `read(2)` and `write(2)` on the socket (the calls a confined vbmq may make on any stream).
fn read(stream: &TcpStream, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: reads into a local buffer of `buf.len()` bytes from a descriptor we borrow.
    let n = unsafe { libc::read(stream.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

fn write(stream: &TcpStream, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: writes from a local buffer of `buf.len()` bytes to a descriptor we borrow.
    let n = unsafe { libc::write(stream.as_raw_fd(), buf.as_ptr().cast(), buf.len()) };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// Waits until the socket is ready or the deadline passed (an error then).
fn io_wait(stream: &TcpStream, events: libc::c_short, deadline: Instant) -> io::Result<()> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(io::ErrorKind::TimedOut.into());
    }
    crate::fd_wait::wait(stream.as_raw_fd(), events, left);
    Ok(())
}
