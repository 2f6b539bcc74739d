//! Not a test: the speed of reads of a `base=nbd` disk's fetched blocks against a local
//! `base=` disk's, both filled first (`base-fill=on`), so that every read is served from DISK:
//! 4 KiB random reads at QD32 over a 256 MiB image in /dev/shm, one queue on CPU 1
//! (`VBMQ_NBD_BASE_CPU`), 3 s a case (`VBMQ_NBD_BASE_SECS`), 3 rounds, medians. Run in release:
//! `cargo test --release --test nbd_base_speed -- --ignored --nocapture`.

mod common;
#[path = "common/nbd_servers.rs"]
mod nbd_servers;

use std::path::Path;
use std::time::{Duration, Instant};

use common::ctl::engine_stat;
use common::disk_spec;
use common::serve_with_control;
use nbd_servers::NbdServer;

const SIZE: usize = 256 << 20;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// A thin disk over `base` (a path or an NBD URI), filled, then measured; DISK made afresh.
fn filled_randread(dir: &Path, base: &str, cpu: &str, secs: f64) -> f64 {
    let (disk, socket) = (dir.join("vm.raw"), dir.join("vm.sock"));
    let _ = std::fs::remove_file(&disk);
    let _ = std::fs::remove_file(dir.join("vm.raw.map"));
    let _ = std::fs::remove_dir_all(dir.join("run"));
    let spec = disk_spec::with(
        &socket,
        &disk,
        &format!(",base={base},base-fill=on,queues=1,cpus={cpu},mode=adaptive"),
    );
    let (daemon, control) = serve_with_control(dir, &[spec]);
    let blocks = engine_stat(&control, &socket, "thin_blocks");
    let deadline = Instant::now() + Duration::from_secs(300);
    while engine_stat(&control, &socket, "thin_present_blocks") < blocks {
        assert!(Instant::now() < deadline, "the fill never finished");
        std::thread::sleep(Duration::from_millis(50));
    }
    common::speed(daemon, &socket, false, (SIZE as u64, secs, None)).0
}

#[test]
#[ignore]
fn nbd_base_fetched_reads_against_a_local_base() {
    let (secs, cpu) = common::speed_settings("NBD_BASE", 3.0);
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let golden = dir.path().join("golden.raw");
    common::large_image(&golden, SIZE, 35);
    let nbd = dir.path().join("nbd.sock");
    let _server = NbdServer::qemu_nbd(&golden, &nbd, "golden", true);
    let uri = format!("nbd+unix:///golden?socket={}", nbd.display());
    let (mut local, mut remote) = (Vec::new(), Vec::new());
    for round in 0..3 {
        local.push(filled_randread(
            dir.path(),
            golden.to_str().unwrap(),
            &cpu,
            secs,
        ));
        remote.push(filled_randread(dir.path(), &uri, &cpu, secs));
        eprintln!(
            "round {round}: local base {:.0} IOPS, NBD base {:.0} IOPS",
            local[round], remote[round]
        );
    }
    let (local, remote) = (median(local), median(remote));
    eprintln!("| base | 4K QD32 randread of filled blocks, IOPS (median of 3) |");
    eprintln!("|---|---|");
    eprintln!("| local file | {local:.0} |");
    eprintln!(
        "| NBD (qemu-nbd, Unix socket) | {remote:.0} ({:.2}x) |",
        remote / local
    );
}
