//! Many queues on one CPU: every polling or adaptive queue pinned to a CPU is served by that CPU's
//! one thread, whatever disk it belongs to. Four disks on CPU 1, each driven by its own libblkio
//! client from its own thread at once: each reads back what it wrote, and one thread spins for
//! them all, not four.

mod common;

use std::time::Duration;

use common::disk_spec;
use common::{Client, Daemon, image, pattern};

/// CPU time (user + system, in clock ticks) of each thread of `pid`, by thread name.
fn thread_cpu(pid: u32) -> Vec<(String, u64)> {
    let mut threads = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
    {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ... utime stime at fields 14 and 15 (after the closing parenthesis).
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let name = stat[open + 1..close].to_string();
        let fields: Vec<&str> = stat[close + 2..].split_whitespace().collect();
        let ticks = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
        threads.push((name, ticks));
    }
    threads.sort();
    threads
}

/// Threads that used more than a tenth of a CPU over `span` (a spinning thread uses all it
/// gets: half beside another spinner, a fifth on a CPU four builds share; an idle one next to
/// nothing).
fn spinning_threads(pid: u32, span: Duration) -> Vec<String> {
    let before = thread_cpu(pid);
    std::thread::sleep(span);
    let after = thread_cpu(pid);
    // SAFETY: sysconf has no memory-safety effect.
    let hz = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).unwrap();
    let tenth = hz * u64::try_from(span.as_millis()).unwrap() / 10000;
    after
        .iter()
        .filter(|(name, ticks)| {
            let was = before
                .iter()
                .find(|(n, _)| n == name)
                .map_or(0, |(_, t)| *t);
            ticks - was > tenth
        })
        .map(|(name, _)| name.clone())
        .collect()
}

fn four_disks_on_one_cpu(mode: &'static str) {
    let dir = tempfile::tempdir().unwrap();
    let mut specs = Vec::new();
    let mut sockets = Vec::new();
    for disk in 0..4 {
        let file = image(dir.path(), &format!("{disk}.raw"), 4 << 20, disk);
        let socket = dir.path().join(format!("{disk}.sock"));
        specs.push(disk_spec::with(
            &socket,
            &file,
            &format!(",mode={mode},cpus=1"),
        ));
        sockets.push(socket);
    }
    let daemon = Daemon::start(&specs);
    let clients: Vec<_> = sockets
        .iter()
        .enumerate()
        .map(|(disk, socket)| {
            let socket = socket.clone();
            std::thread::spawn(move || {
                let mut client = Client::connect(&socket, 1, mode == "poll").unwrap();
                for round in 0..200u64 {
                    let offset = (round % 32) * 65536;
                    let data = pattern(disk as u64 * 1000 + round, 16384);
                    assert_eq!(client.write(0, offset, &data), 0, "disk {disk}");
                    let (ret, back) = client.read(0, offset, data.len());
                    assert_eq!(ret, 0, "disk {disk}");
                    assert!(back == data, "disk {disk} round {round}: other data");
                }
                // Untouched data is still the image's.
                let (ret, back) = client.read(0, 4 << 19, 4096);
                assert_eq!(ret, 0);
                assert!(back == pattern(disk as u64, 4 << 20)[4 << 19..(4 << 19) + 4096]);
                client
            })
        })
        .collect();
    let clients: Vec<Client> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    if mode == "poll" {
        // Connected and idle, the queues are polled: by one thread.
        let spinning = spinning_threads(daemon.child.id(), Duration::from_millis(600));
        assert_eq!(spinning, vec!["vbmq-cpu1".to_string()], "threads spinning");
    }
    drop(clients);
    assert!(daemon.terminate().success(), "{mode}: exit status");
}

#[test]
fn four_polling_disks_share_one_cpu_thread() {
    four_disks_on_one_cpu("poll");
}

#[test]
fn four_adaptive_disks_share_one_cpu_thread() {
    four_disks_on_one_cpu("adaptive");
}

/// A disk and a share, both `mode=poll` on CPU 1, connected and both serving: one thread
/// spins for them, the CPU's; no queue thread of the share's own serves (or spins for) it.
#[test]
fn a_polling_disk_and_a_polling_share_share_one_cpu_thread() {
    use vbmq_driver::FsClient;
    use vbmq_driver::fuse::ROOT_ID;

    let dir = tempfile::tempdir().unwrap();
    let file = image(dir.path(), "disk.raw", 4 << 20, 7);
    let (disk_socket, fs_socket) = (dir.path().join("disk.sock"), dir.path().join("fs.sock"));
    let shared = dir.path().join("share");
    std::fs::create_dir(&shared).unwrap();
    let content = pattern(9, 65536);
    std::fs::write(shared.join("file"), &content).unwrap();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_vbmq"))
        .arg("serve")
        .arg("--disk")
        .arg(disk_spec::with(&disk_socket, &file, ",mode=poll,cpus=1"))
        .arg("--fs")
        .arg(format!(
            "socket={},dir={},tag=t,mode=poll,cpus=1",
            fs_socket.display(),
            shared.display()
        ))
        .stdin(std::process::Stdio::null())
        .spawn()
        .expect("spawn vbmq");
    let daemon = Daemon { child };
    common::wait_for(&disk_socket);
    common::wait_for(&fs_socket);

    let mut disk = Client::connect(&disk_socket, 1, true).unwrap();
    let data = pattern(11, 16384);
    assert_eq!(disk.write(0, 65536, &data), 0);
    let (ret, back) = disk.read(0, 65536, data.len());
    assert_eq!(ret, 0);
    assert!(back == data, "the disk read back other data");

    let mut share = FsClient::connect(&fs_socket).unwrap();
    let entry = share.lookup(ROOT_ID, "file").unwrap();
    assert_eq!(entry.attr.size, content.len() as u64);
    let fh = share.open(entry.nodeid, libc::O_RDONLY as u32).unwrap();
    let request = share.read_request(entry.nodeid, fh, 4096, 4096);
    share.submit(0, &request, 16 + 4096).unwrap();
    share.kick().unwrap();
    let (slot, written) = share
        .wait(Duration::from_secs(20))
        .expect("no reply to READ");
    assert_eq!((slot, written), (0, 16 + 4096));
    let read = common::fs::reply_data(&share);
    assert!(
        read == content[4096..8192],
        "the share read back other data"
    );

    // Both connected and idle, both polled: by one thread.
    let pid = daemon.child.id();
    let spinning = spinning_threads(pid, Duration::from_millis(1000));
    assert_eq!(spinning, vec!["vbmq-cpu1".to_string()], "threads spinning");
    // The high-priority queue (FORGET, INTERRUPT) waits for kicks on a thread of its own,
    // `vbmq-fs-q0`; the request queue has none.
    let names: Vec<String> = thread_cpu(pid).into_iter().map(|(name, _)| name).collect();
    assert!(
        !names.iter().any(|name| name == "vbmq-fs-q1"),
        "the share's request queue has a thread of its own: {names:?}"
    );
    // And both still serve.
    assert_eq!(
        share.getattr(entry.nodeid).unwrap().attr.size,
        content.len() as u64
    );
    let (ret, back) = disk.read(0, 65536, data.len());
    assert!(ret == 0 && back == data);
    share.release(entry.nodeid, fh).unwrap();
    drop((disk, share));
    assert!(daemon.terminate().success(), "exit status");
}
