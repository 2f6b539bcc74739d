//! `base=` and `encrypt=` disks added at run time on a vbmq started with its defaults (confined:
//! Landlock and seccomp): `vbmq ctl add-disk` opens the base, the image and its map, and the key
//! file or pipe, and passes them; vbmq checks each descriptor and serves the disk. Descriptors
//! that are not what the disk needs are refused with their reason, and the daemon goes on; a
//! `base=` disk recorded with `--state` comes back with its map after a restart.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

use crate::common::ctl::{each_refused, engine_stat, ok, refused, write_config};
use crate::common::run_time::{self, fill_and_copy_on_read, mkfifo, open};
use crate::common::{
    Client, Serve, ctl, ctl_state, image, pattern, s, serve_with_control as serve, sha256,
    sparse_image, wait_for,
};
use serde_json::Value;

const SIZE: usize = 4 << 20;
const BLOCK: usize = 64 << 10;

/// Whether `needle` occurs anywhere in `hay`.
fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn a_base_disk_added_at_run_time_reads_the_base_writes_disk_and_keeps_its_map() {
    let dir = tempfile::tempdir().unwrap();
    let (daemon, control) = serve(dir.path(), &[]);
    let base = image(dir.path(), "golden.raw", SIZE, 1);
    let before = sha256(&base);
    // Neither DISK nor its map exists: `vbmq ctl` makes both.
    let disk = dir.path().join("vm.raw");
    let socket = dir.path().join("elsewhere/vm.sock");
    let spec = format!("socket={},path={},base={}", s(&socket), s(&disk), s(&base));
    ok(&ctl(&control, &["add-disk", &spec]));
    let mut expected = pattern(1, SIZE);
    let mut client = Client::connect(&socket, 1, false).expect("connect");
    assert_eq!(client.capacity(), SIZE as u64);
    client.assert_reads(0, 0, &expected[..BLOCK], "untouched blocks read the base");
    // Part of a block (copied from the base first), and a whole block.
    let part = pattern(50, 4096);
    let at = BLOCK + 512;
    assert_eq!(client.write(0, at as u64, &part), 0);
    expected[at..at + 4096].copy_from_slice(&part);
    let whole = pattern(51, BLOCK);
    assert_eq!(client.write(0, 3 * BLOCK as u64, &whole), 0);
    expected[3 * BLOCK..4 * BLOCK].copy_from_slice(&whole);
    assert_eq!(client.flush(0), 0);
    let (ret, back) = client.read(0, 0, 4 * BLOCK);
    assert_eq!(ret, 0);
    assert!(back == expected[..4 * BLOCK], "what was written reads back");
    assert_eq!(engine_stat(&control, &socket, "thin_present_blocks"), 2);
    // Served through io_uring on a spare ring (base and image in its slots).
    assert_eq!(engine_stat(&control, &socket, "pooled_ring_queues"), 1);
    drop(client);
    // The writes are in DISK, not in the base.
    let on_disk = std::fs::read(&disk).unwrap();
    assert!(on_disk[3 * BLOCK..4 * BLOCK] == whole[..]);
    assert!(on_disk[BLOCK..2 * BLOCK] == expected[BLOCK..2 * BLOCK]);
    assert_eq!(sha256(&base), before, "the base changed");
    assert!(
        std::fs::metadata(format!("{}.map", s(&disk)))
            .unwrap()
            .is_file()
    );

    // Removed and added again: the map comes back with the blocks DISK holds.
    ok(&ctl(&control, &["remove-disk", s(&socket)]));
    ok(&ctl(&control, &["add-disk", &spec]));
    assert_eq!(engine_stat(&control, &socket, "thin_present_blocks"), 2);
    let mut client = Client::connect(&socket, 1, false).expect("connect again");
    let (ret, back) = client.read(0, 0, 6 * BLOCK);
    assert_eq!(ret, 0);
    assert!(back == expected[..6 * BLOCK], "the written data came back");
    // Grown past the base: the new blocks are DISK's, zeros until written; no shrink.
    ok(&ctl(&control, &["resize", s(&socket), "6M"]));
    refused(
        &ctl(&control, &["resize", s(&socket), "5M", "--force"]),
        "does not shrink",
    );
    drop(client);
    let mut client = Client::connect(&socket, 1, false).expect("connect grown");
    assert_eq!(client.capacity(), 6 << 20);
    let (ret, past) = client.read(0, SIZE as u64 - 4096, 2 * 4096);
    assert_eq!(ret, 0);
    assert!(
        past[..4096] == expected[SIZE - 4096..],
        "the base's last bytes"
    );
    assert!(
        past[4096..].iter().all(|b| *b == 0),
        "past the base reads zeros"
    );
    let beyond = pattern(52, 3 * 4096);
    assert_eq!(client.write(0, (5 << 20) + 512, &beyond), 0);
    assert_eq!(client.flush(0), 0);
    expected.resize(6 << 20, 0);
    expected[(5 << 20) + 512..(5 << 20) + 512 + beyond.len()].copy_from_slice(&beyond);
    drop(client);
    let on_disk = std::fs::read(&disk).unwrap();
    assert_eq!(on_disk.len(), 6 << 20);
    assert!(
        on_disk[5 << 20..] == expected[5 << 20..],
        "past the base, in DISK"
    );
    assert_eq!(sha256(&base), before, "the base changed");
    // Removed and added again: still grown, the data there.
    ok(&ctl(&control, &["remove-disk", s(&socket)]));
    ok(&ctl(&control, &["add-disk", &spec]));
    let mut client = Client::connect(&socket, 1, false).expect("connect again");
    assert_eq!(client.capacity(), 6 << 20);
    client.assert_reads(0, 4 << 20, &expected[4 << 20..], "the grown part came back");
    drop(client);
    ok(&ctl(&control, &["remove-disk", s(&socket)]));

    // base-fill= and base-copy-on-read= at run time too.
    let (filled, read) = (dir.path().join("filled.raw"), dir.path().join("read.raw"));
    let (fsock, rsock) = (dir.path().join("f/f.sock"), dir.path().join("r/r.sock"));
    let fspec = format!(
        "socket={},path={},base={},base-fill=on",
        s(&fsock),
        s(&filled),
        s(&base)
    );
    let rspec = format!(
        "socket={},path={},base={},base-copy-on-read=on",
        s(&rsock),
        s(&read),
        s(&base)
    );
    ok(&ctl(&control, &["add-disk", &fspec]));
    ok(&ctl(&control, &["add-disk", &rspec]));
    fill_and_copy_on_read(&control, &fsock, &rsock, &pattern(1, SIZE), BLOCK);
    assert!(std::fs::read(&filled).unwrap() == pattern(1, SIZE));
    assert_eq!(sha256(&base), before, "the base changed");
    daemon.terminate_alive();
}

#[test]
fn an_encrypted_disk_added_at_run_time_takes_its_key_from_a_pipe() {
    let dir = tempfile::tempdir().unwrap();
    let (daemon, control) = serve(dir.path(), &[]);
    let image = sparse_image(dir.path(), "secret.raw", SIZE as u64);
    let fifo = dir.path().join("key.fifo");
    mkfifo(&fifo);
    let socket = dir.path().join("vm/e.sock");
    let state = dir.path().join("state.toml");
    let spec = format!(
        "socket={},path={},encrypt=aes-xts,key-file={}",
        s(&socket),
        s(&image),
        s(&fifo)
    );
    let feed = |key: Vec<u8>| {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::write(fifo, key).unwrap())
    };
    let writer = feed(pattern(77, 64));
    let out = ctl_state(&control, &state, &["add-disk", &spec]);
    ok(&out);
    writer.join().unwrap();
    // A pipe's key cannot be read again at a restart: not recorded, and said.
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not recorded in --state"), "{err}");
    assert!(
        !std::fs::read_to_string(&state)
            .unwrap_or_default()
            .contains("e.sock")
    );

    let mut marker = b"PLAINTEXT-MARKER-".repeat(4096 / 17 + 1);
    marker.truncate(4096);
    let mut client = Client::connect(&socket, 1, false).expect("connect");
    assert_eq!(client.write(0, 1 << 20, &marker), 0);
    assert_eq!(client.flush(0), 0);
    let (ret, back) = client.read(0, 1 << 20, 4096);
    assert_eq!(ret, 0);
    assert!(back == marker, "what was written does not read back");
    drop(client);
    ok(&ctl(&control, &["remove-disk", s(&socket)]));
    let raw = std::fs::read(&image).unwrap();
    assert!(
        !contains(&raw, b"PLAINTEXT-MARKER"),
        "plaintext in the image"
    );

    // Added again with the same key: the data reads back; with another: noise.
    for (seed, reads_back) in [(77, true), (78, false)] {
        let writer = feed(pattern(seed, 64));
        ok(&ctl(&control, &["add-disk", &spec]));
        writer.join().unwrap();
        let mut client = Client::connect(&socket, 1, false).expect("connect");
        let (ret, back) = client.read(0, 1 << 20, 4096);
        assert_eq!(ret, 0);
        assert_eq!(back == marker, reads_back, "key {seed}");
        drop(client);
        ok(&ctl(&control, &["remove-disk", s(&socket)]));
    }
    // A key of the wrong size, through the pipe and in a file: refused, with the reason.
    let writer = feed(vec![1u8; 32]);
    refused(&ctl(&control, &["add-disk", &spec]), "64 bytes");
    writer.join().unwrap();
    let short = dir.path().join("short.key");
    std::fs::write(&short, [1u8; 65]).unwrap();
    let long_spec = spec.replace(s(&fifo), s(&short));
    refused(&ctl(&control, &["add-disk", &long_spec]), "64 bytes");
    assert!(!socket.exists(), "a refused disk's socket is left behind");

    // With base= too: seven descriptors (socket, image and base twice, map, key).
    let key = dir.path().join("thin.key");
    std::fs::write(&key, pattern(79, 64)).unwrap();
    let base = crate::common::image(dir.path(), "golden.raw", SIZE, 8);
    let thin = dir.path().join("thin.raw");
    let thin_spec = format!(
        "socket={},path={},base={},encrypt=aes-xts,key-file={}",
        s(&socket),
        s(&thin),
        s(&base),
        s(&key)
    );
    let out = ctl_state(&control, &state, &["add-disk", &thin_spec]);
    ok(&out);
    // A key file's path is recorded (a restart reads it again), never the key.
    let recorded = std::fs::read_to_string(&state).unwrap();
    assert!(recorded.contains(s(&key)), "{recorded}");
    let mut client = Client::connect(&socket, 1, false).expect("connect");
    assert_eq!(client.write(0, 2 * BLOCK as u64 + 512, &marker), 0);
    assert_eq!(client.flush(0), 0);
    client.assert_reads(
        0,
        2 * BLOCK as u64 + 512,
        &marker,
        "an encrypted base= disk reads back",
    );
    drop(client);
    ok(&ctl(&control, &["remove-disk", s(&socket)]));
    let raw = std::fs::read(&thin).unwrap();
    assert!(!contains(&raw, b"PLAINTEXT-MARKER"), "plaintext in DISK");
    daemon.terminate_alive();
}

#[test]
fn bad_bases_maps_and_keys_are_refused_and_the_daemon_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let (mut daemon, control) = serve(dir.path(), &[]);
    let base = image(dir.path(), "golden.raw", SIZE, 3);
    let disk = dir.path().join("vm.raw");
    let sock = dir.path().join("d.sock");
    let thin = |base: &Path| {
        format!(
            "socket={},path={},base={},direct=off",
            s(&sock),
            s(&disk),
            s(base)
        )
    };
    // Through `vbmq ctl`: a directory as the base, a FIFO as DISK.map (ctl checks both; vbmq
    // checks the map again, below).
    refused(
        &ctl(&control, &["add-disk", &thin(dir.path())]),
        "not a regular file or a block device",
    );
    let map = PathBuf::from(format!("{}.map", s(&disk)));
    std::fs::File::create(&disk).unwrap();
    mkfifo(&map);
    refused(
        &ctl(&control, &["add-disk", &thin(&base)]),
        "map: not a regular file",
    );
    std::fs::remove_file(&map).unwrap();

    // Straight to the control socket, past ctl's own checks.
    let listening = UnixListener::bind(&sock).unwrap();
    let map_file = map.clone();
    std::fs::File::create(&map_file).unwrap();
    let add =
        |spec: String, names: &[&str], fds: &[RawFd]| run_time::add(&control, &spec, names, fds);
    let (disk_rw, base_ro, base_rw) = (open(&disk, true), open(&base, false), open(&base, true));
    let (map_rw, map_ro, dir_fd) = (open(&map, true), open(&map, false), open(dir.path(), false));
    let key = dir.path().join("k");
    std::fs::write(&key, pattern(5, 64)).unwrap();
    let names = ["socket", "image", "base", "map"];
    let l = listening.as_raw_fd();
    let (pipe_read, _pipe_write) = {
        let mut fds = [0; 2];
        // SAFETY: pipe2 fills two descriptors, owned below.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        use std::os::fd::FromRawFd;
        // SAFETY: just made, owned here only.
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
    };
    let encrypted = format!(
        "socket={},path={},direct=off,encrypt=aes-xts,key-file={}",
        s(&sock),
        s(&base),
        s(&key)
    );
    // A map with a second name, a map and a key file of another user (the client is root).
    let linked_map = dir.path().join("linked.map");
    std::fs::File::create(&linked_map).unwrap();
    std::fs::hard_link(&linked_map, dir.path().join("linked.map.other-name")).unwrap();
    let others_map = dir.path().join("others.map");
    std::fs::File::create(&others_map).unwrap();
    std::os::unix::fs::chown(&others_map, Some(4242), Some(4242)).unwrap();
    let others_key = dir.path().join("others.key");
    std::fs::write(&others_key, pattern(5, 64)).unwrap();
    std::os::unix::fs::chown(&others_key, Some(4242), Some(4242)).unwrap();
    let (linked_map, others_map) = (open(&linked_map, true), open(&others_map, true));
    let others_key = open(&others_key, false);
    let cases: Vec<(Value, &str)> = vec![
        (
            add(
                thin(&base),
                &names,
                &[
                    l,
                    disk_rw.as_raw_fd(),
                    base_ro.as_raw_fd(),
                    linked_map.as_raw_fd(),
                ],
            ),
            "passed map: 2 links",
        ),
        (
            add(
                thin(&base),
                &names,
                &[
                    l,
                    disk_rw.as_raw_fd(),
                    base_ro.as_raw_fd(),
                    others_map.as_raw_fd(),
                ],
            ),
            "passed map: owned by uid 4242, neither the control client's (uid 0) nor root's",
        ),
        (
            add(
                encrypted.clone(),
                &["socket", "image", "key"],
                &[l, base_rw.as_raw_fd(), others_key.as_raw_fd()],
            ),
            "passed key file: owned by uid 4242",
        ),
        (
            add(
                thin(&base),
                &names,
                &[
                    l,
                    disk_rw.as_raw_fd(),
                    dir_fd.as_raw_fd(),
                    map_rw.as_raw_fd(),
                ],
            ),
            "passed base: not a regular file or a block device",
        ),
        (
            add(
                thin(&base),
                &names,
                &[
                    l,
                    disk_rw.as_raw_fd(),
                    base_rw.as_raw_fd(),
                    map_rw.as_raw_fd(),
                ],
            ),
            "passed base: not opened read-only",
        ),
        (
            add(
                thin(&base),
                &names,
                &[
                    l,
                    disk_rw.as_raw_fd(),
                    base_ro.as_raw_fd(),
                    map_ro.as_raw_fd(),
                ],
            ),
            "passed map: not opened read-write",
        ),
        (
            add(thin(&base), &["socket", "image"], &[l, disk_rw.as_raw_fd()]),
            "a confined vbmq opens no base or map at run time",
        ),
        (
            add(
                thin(&base),
                &["socket", "image", "base"],
                &[l, disk_rw.as_raw_fd(), base_ro.as_raw_fd()],
            ),
            "image, base and map are passed together",
        ),
        (
            add(
                format!("socket={},path={},direct=off", s(&sock), s(&disk)),
                &names,
                &[
                    l,
                    disk_rw.as_raw_fd(),
                    base_ro.as_raw_fd(),
                    map_rw.as_raw_fd(),
                ],
            ),
            "passed for a disk without base=",
        ),
        (
            add(
                encrypted.clone(),
                &["socket", "image"],
                &[l, base_rw.as_raw_fd()],
            ),
            "a confined vbmq reads no key file at run time",
        ),
        (
            add(
                encrypted.clone(),
                &["socket", "image", "key"],
                &[l, base_rw.as_raw_fd(), dir_fd.as_raw_fd()],
            ),
            "passed key file: not a regular file or a pipe",
        ),
        // A pipe that never gives its key: refused once the wait is over.
        (
            add(
                encrypted.clone(),
                &["socket", "image", "key"],
                &[l, base_rw.as_raw_fd(), pipe_read.as_raw_fd()],
            ),
            "gave no key and end in time",
        ),
    ];
    each_refused(&cases, &mut daemon);
    // The base never changed; a good set after the refusals is served.
    assert!(std::fs::read(&base).unwrap() == pattern(3, SIZE));
    let reply = add(
        thin(&base),
        &names,
        &[
            l,
            disk_rw.as_raw_fd(),
            base_ro.as_raw_fd(),
            map_rw.as_raw_fd(),
        ],
    );
    assert_eq!(reply["ok"], true, "{reply}");
    let mut client = Client::connect(&sock, 1, false).expect("connect");
    client.assert_reads(0, 0, &pattern(3, 4096), "the base's bytes");
    drop(client);
    assert!(daemon.terminate().success());
}

#[test]
fn a_base_disk_added_at_run_time_comes_back_from_the_state_file_with_its_map() {
    let dir = tempfile::tempdir().unwrap();
    let control = dir.path().join("run/ctl.sock");
    let state = dir.path().join("state.toml");
    let socket = dir.path().join("vm/vm.sock");
    let daemon = Serve::new()
        .control(&control)
        .opt("--state", &state)
        .start();
    let base = image(dir.path(), "golden.raw", SIZE, 4);
    let before = sha256(&base);
    let disk = dir.path().join("vm.raw");
    let spec = format!("socket={},path={},base={}", s(&socket), s(&disk), s(&base));
    let out = ctl_state(&control, &state, &["add-disk", &spec]);
    ok(&out);
    let mut client = Client::connect(&socket, 1, false).expect("connect");
    let data = pattern(60, 8192);
    assert_eq!(client.write(0, 5 * BLOCK as u64 + 1024, &data), 0);
    assert_eq!(client.flush(0), 0);
    drop(client);
    assert!(daemon.terminate().success());

    // Started again: the state file gives the disk at start, its map with it.
    let _ = std::fs::remove_file(&socket);
    let daemon = Serve::new()
        .control(&control)
        .opt("--state", &state)
        .wait(&socket)
        .start();
    assert_eq!(engine_stat(&control, &socket, "thin_present_blocks"), 1);
    let mut client = Client::connect(&socket, 1, false).expect("connect after restart");
    let mut expected = pattern(4, SIZE);
    expected[5 * BLOCK + 1024..5 * BLOCK + 1024 + 8192].copy_from_slice(&data);
    client.assert_reads(
        0,
        4 * BLOCK as u64,
        &expected[4 * BLOCK..7 * BLOCK],
        "the data came back with its map",
    );
    drop(client);
    assert_eq!(sha256(&base), before, "the base changed");
    assert!(daemon.terminate().success());
}

#[test]
fn without_a_spare_ring_a_base_disk_is_refused_at_run_time() {
    let dir = tempfile::tempdir().unwrap();
    let control = dir.path().join("run/ctl.sock");
    let daemon = Serve::new()
        .control(&control)
        .opt("--run-time-rings", "0")
        .start();
    let base = image(dir.path(), "golden.raw", SIZE, 6);
    let disk = dir.path().join("vm.raw");
    let socket = dir.path().join("vm/vm.sock");
    let spec = format!("socket={},path={},base={}", s(&socket), s(&disk), s(&base));
    refused(
        &ctl(&control, &["add-disk", &spec]),
        "no spare io_uring ring",
    );
    // What ctl made for the refused disk is gone again.
    assert!(
        !disk.exists(),
        "the image made for a refused disk is left behind"
    );
    assert!(!PathBuf::from(format!("{}.map", s(&disk))).exists());
    daemon.terminate_alive();
}

#[test]
fn a_confined_reload_replaces_a_base_disk_with_its_map_and_refuses_to_reread_a_key() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let control = run.join("ctl.sock");
    let base = image(dir.path(), "golden.raw", SIZE, 11);
    let disk = dir.path().join("vm.raw");
    let secret = sparse_image(dir.path(), "secret.raw", SIZE as u64);
    let key = dir.path().join("k");
    std::fs::write(&key, pattern(12, 64)).unwrap();
    let (t, e) = (run.join("t.sock"), run.join("e.sock"));
    let thin = |extra: &str| {
        format!(
            "socket={},path={},base={}{extra}",
            s(&t),
            s(&disk),
            s(&base)
        )
    };
    let encrypted = |extra: &str| {
        format!(
            "socket={},path={},encrypt=aes-xts,key-file={}{extra}",
            s(&e),
            s(&secret),
            s(&key)
        )
    };
    let conf = dir.path().join("vbmq.toml");
    write_config(&conf, &control, &[thin(""), encrypted("")]);
    let daemon = Serve::config(&conf, &[&control, &t, &e]).start();
    let data = pattern(13, 8192);
    let mut client = Client::connect(&t, 1, false).expect("connect");
    assert_eq!(client.write(0, 7 * BLOCK as u64, &data), 0);
    assert_eq!(client.flush(0), 0);
    drop(client);

    // Another option of the base= disk: served again from its own files, map included.
    write_config(
        &conf,
        &control,
        &[thin(",base-copy-on-read=on"), encrypted("")],
    );
    refused(&ctl(&control, &["reload"]), "--replace");
    let out = ctl(&control, &["reload", "--replace"]);
    ok(&out);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("replaced"), "{said}");
    wait_for(&t);
    let mut client = Client::connect(&t, 1, false).expect("connect again");
    client.assert_reads(0, 7 * BLOCK as u64, &data, "the replaced disk lost its map");
    client.assert_reads(0, 0, &pattern(11, 4096), "untouched blocks read the base");
    drop(client);

    // The encrypted disk's key was read once: not read again, and nothing changes.
    write_config(
        &conf,
        &control,
        &[thin(",base-copy-on-read=on"), encrypted(",serial=other")],
    );
    refused(
        &ctl(&control, &["reload", "--replace"]),
        "reads no key file at run time",
    );
    let mut client = Client::connect(&e, 1, false).expect("the encrypted disk still serves");
    assert_eq!(client.read(0, 0, 4096).0, 0);
    drop(client);
    daemon.terminate_alive();
}
