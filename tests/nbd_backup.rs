//! Full and incremental backups through `vbmq ctl export-begin --bitmaps A --checkpoint B`, read
//! by stock clients as libvirt's and Proxmox's backup flows do: `nbdinfo --map` and `qemu-img
//! map` (QEMU's `x-dirty-bitmap`) list exactly the blocks written between checkpoint A and the
//! export's instant; `nbdcopy` takes the full backup; `qemu-img convert` copies only the dirty
//! extents of the next export into it, which then is the disk of the second instant.

mod common;

use std::path::Path;

use common::ctl::ok;
use common::disk_spec;
use common::tool::{nbd_uri as uri, run_tool as run};
use common::{Client, ctl, ctl_json, s, serve_with_control as serve};
use serde_json::Value;

/// The maps' block (`track-block=`'s default).
const MAP_BLOCK: u64 = 64 << 10;
const SIZE: u64 = 64 * MAP_BLOCK;

/// The disk and what the test knows its bytes to be.
struct Disk {
    client: Client,
    model: Vec<u8>,
}

impl Disk {
    /// Writes `len` bytes of a pattern at `offset`, into the disk and the model.
    fn write(&mut self, offset: u64, len: usize, seed: u64) {
        let data = common::pattern(seed, len);
        assert_eq!(self.client.write(0, offset, &data), 0, "write at {offset}");
        let at = usize::try_from(offset).unwrap();
        self.model[at..at + len].copy_from_slice(&data);
    }
}

/// The map blocks `[first, last]` as one byte range each run, merged.
fn blocks(runs: &[(u64, u64)]) -> Vec<(u64, u64)> {
    runs.iter()
        .map(|&(first, last)| (first * MAP_BLOCK, (last - first + 1) * MAP_BLOCK))
        .collect()
}

/// Adjacent ranges merged.
fn merged(mut ranges: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    ranges.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::new();
    for (offset, len) in ranges {
        match out.last_mut() {
            Some((o, l)) if *o + *l == offset => *l += len,
            _ => out.push((offset, len)),
        }
    }
    out
}

/// The dirty extents of `qemu:dirty-bitmap:NAME` as `nbdinfo --map` gives them.
fn dirty_by_nbdinfo(export: &Path, name: &str) -> Vec<(u64, u64)> {
    let map = format!("--map=qemu:dirty-bitmap:{name}");
    let out = run("nbdinfo", &["--json", &map, &uri(export)]);
    let extents: Value = serde_json::from_str(&out).expect("nbdinfo's JSON");
    let mut covered = 0;
    let mut dirty = Vec::new();
    for e in extents.as_array().expect("a list of extents") {
        let (offset, length) = (e["offset"].as_u64().unwrap(), e["length"].as_u64().unwrap());
        assert_eq!(offset, covered, "extents in order, without gaps: {out}");
        covered += length;
        if e["type"].as_u64().unwrap() & 1 != 0 {
            dirty.push((offset, length));
        }
    }
    assert_eq!(covered, SIZE, "the map covers the export: {out}");
    merged(dirty)
}

/// The same by `qemu-img map` with QEMU's `x-dirty-bitmap`, where a dirty extent reads as
/// `"data": false` (the dirty bit is the allocation context's hole bit).
fn dirty_by_qemu_img(export: &Path, name: &str) -> Vec<(u64, u64)> {
    let opts = format!(
        "driver=nbd,server.type=unix,server.path={},x-dirty-bitmap=qemu:dirty-bitmap:{name}",
        s(export)
    );
    let out = run("qemu-img", &["map", "--output=json", "--image-opts", &opts]);
    let extents: Value = serde_json::from_str(&out).expect("qemu-img map's JSON");
    let dirty = extents
        .as_array()
        .expect("a list of extents")
        .iter()
        .filter(|e| e["data"] == false)
        .map(|e| (e["start"].as_u64().unwrap(), e["length"].as_u64().unwrap()))
        .collect();
    merged(dirty)
}

/// Copies the extents `dirty` of the export into the backup `into`, as an incremental backup
/// does: `qemu-img convert` from the export's range to the same range of the file.
fn copy_extents(export: &Path, dirty: &[(u64, u64)], into: &Path) {
    for &(offset, len) in dirty {
        let from = format!(
            "driver=raw,offset={offset},size={len},file.driver=nbd,file.server.type=unix,\
             file.server.path={}",
            s(export)
        );
        let to = format!(
            "driver=raw,offset={offset},size={len},file.driver=file,file.filename={}",
            s(into)
        );
        run(
            "qemu-img",
            &[
                "convert",
                "-n",
                "--image-opts",
                &from,
                "--target-image-opts",
                &to,
            ],
        );
    }
}

/// A `BLOCK_STATUS` chunk: its flags, its context's name, its extents as (length, flags).
type StatusChunk = (u16, String, Vec<(u32, u32)>);

/// One client's raw exchange: structured replies, `SET_META_CONTEXT` of `contexts`, `GO`, then
/// one `BLOCK_STATUS` of the whole export: its chunks.
fn block_status_of(export: &Path, contexts: &[&str]) -> Vec<StatusChunk> {
    use std::io::{Read, Write};
    let mut stream = std::os::unix::net::UnixStream::connect(export).unwrap();
    let mut hello = [0; 18];
    stream.read_exact(&mut hello).unwrap();
    stream.write_all(&3u32.to_be_bytes()).unwrap();
    // Each option's replies up to its final one; the META_CONTEXT ones as (id, name).
    let mut option = |code: u32, data: &[u8]| {
        let mut out = b"IHAVEOPT".to_vec();
        out.extend_from_slice(&code.to_be_bytes());
        out.extend_from_slice(&u32::try_from(data.len()).unwrap().to_be_bytes());
        out.extend_from_slice(data);
        stream.write_all(&out).unwrap();
        let mut named = Vec::new();
        loop {
            let mut head = [0; 20];
            stream.read_exact(&mut head).unwrap();
            let kind = u32::from_be_bytes(head[12..16].try_into().unwrap());
            let len = u32::from_be_bytes(head[16..20].try_into().unwrap());
            let mut data = vec![0; len as usize];
            stream.read_exact(&mut data).unwrap();
            match kind {
                1 => return named,
                3 => {}
                4 => named.push((
                    u32::from_be_bytes(data[..4].try_into().unwrap()),
                    String::from_utf8(data[4..].to_vec()).unwrap(),
                )),
                _ => panic!("option {code}: reply {kind:#x}"),
            }
        }
    };
    option(8, &[]);
    let mut query = 0u32.to_be_bytes().to_vec();
    query.extend_from_slice(&u32::try_from(contexts.len()).unwrap().to_be_bytes());
    for context in contexts {
        query.extend_from_slice(&u32::try_from(context.len()).unwrap().to_be_bytes());
        query.extend_from_slice(context.as_bytes());
    }
    let ids = option(10, &query);
    assert_eq!(ids.len(), contexts.len(), "{ids:?}");
    option(7, &[0, 0, 0, 0, 0, 0]);
    let mut request = 0x2560_9513u32.to_be_bytes().to_vec();
    request.extend_from_slice(&[0, 0, 0, 7]);
    request.extend_from_slice(&9u64.to_be_bytes());
    request.extend_from_slice(&0u64.to_be_bytes());
    request.extend_from_slice(&u32::try_from(SIZE).unwrap().to_be_bytes());
    stream.write_all(&request).unwrap();
    let mut chunks = Vec::new();
    loop {
        let mut head = [0; 20];
        stream.read_exact(&mut head).unwrap();
        let flags = u16::from_be_bytes([head[4], head[5]]);
        assert_eq!(
            u16::from_be_bytes([head[6], head[7]]),
            5,
            "a BLOCK_STATUS chunk"
        );
        let len = u32::from_be_bytes(head[16..20].try_into().unwrap());
        let mut data = vec![0; len as usize];
        stream.read_exact(&mut data).unwrap();
        let id = u32::from_be_bytes(data[..4].try_into().unwrap());
        let name = ids
            .iter()
            .find(|(i, _)| *i == id)
            .expect("a selected id")
            .1
            .clone();
        let extents = data[4..]
            .chunks(8)
            .map(|e| {
                (
                    u32::from_be_bytes(e[..4].try_into().unwrap()),
                    u32::from_be_bytes(e[4..].try_into().unwrap()),
                )
            })
            .collect();
        chunks.push((flags, name, extents));
        if flags & 1 != 0 {
            return chunks;
        }
    }
}

/// `vbmq ctl export-begin` of the disk on `socket` at `address`, with the blocks written since
/// checkpoint `since`, setting checkpoint `checkpoint`.
fn export_since(control: &Path, socket: &Path, address: &str, since: &str, checkpoint: &str) {
    ctl_json(
        control,
        &[
            "export-begin",
            s(socket),
            address,
            "--bitmaps",
            since,
            "--checkpoint",
            checkpoint,
        ],
    );
}

#[test]
fn dirty_bitmaps_list_the_blocks_written_since_a_checkpoint_and_rebuild_the_next_instant() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let image = common::image(dir.path(), "a.raw", SIZE as usize, 5);
    let (a, export) = (dir.path().join("a.sock"), dir.path().join("export.sock"));
    let (mut daemon, control) = serve(
        dir.path(),
        &[disk_spec::with(&a, &image, ",track-changes=on")],
    );
    let model = std::fs::read(&image).unwrap();
    let mut disk = Disk {
        client: Client::connect(&a, 1, false).unwrap(),
        model,
    };
    let address = format!("unix:{}", s(&export));
    common::run_time::checkpoint(&control, &a, "A");
    // Written between A and the instant: part of block 3, blocks 10 to 12 (one write across
    // three), the last block's last sector.
    disk.write(3 * MAP_BLOCK + 512, 4096, 1);
    disk.write(10 * MAP_BLOCK + 4096, 2 * MAP_BLOCK as usize, 2);
    disk.write(SIZE - 512, 512, 3);
    let first_instant = disk.model.clone();
    export_since(&control, &a, &address, "A", "B");
    // After the instant: in B, not in A's bitmap nor in the export.
    disk.write(20 * MAP_BLOCK, 4096, 4);
    let since_a = blocks(&[(3, 3), (10, 12), (63, 63)]);
    assert_eq!(dirty_by_nbdinfo(&export, "A"), since_a, "nbdinfo --map");
    assert_eq!(dirty_by_qemu_img(&export, "A"), since_a, "qemu-img map");
    // Both contexts in one request: a chunk each, the last one flagged done.
    let chunks = block_status_of(&export, &["qemu:dirty-bitmap:A", "base:allocation"]);
    let names: Vec<(u16, &str)> = chunks.iter().map(|(f, n, _)| (*f, n.as_str())).collect();
    assert_eq!(
        names,
        [(0, "qemu:dirty-bitmap:A"), (1, "base:allocation")],
        "{chunks:?}"
    );
    let mut at = 0;
    let mut dirty = Vec::new();
    for &(length, flags) in &chunks[0].2 {
        if flags & 1 != 0 {
            dirty.push((at, u64::from(length)));
        }
        at += u64::from(length);
    }
    assert_eq!(merged(dirty), since_a, "one request, two contexts");
    let list = run("nbdinfo", &["--json", &uri(&export)]);
    assert!(list.contains("qemu:dirty-bitmap:A"), "{list}");
    assert!(list.contains("base:allocation"), "{list}");
    // The full backup.
    let backup = dir.path().join("backup.raw");
    run("nbdcopy", &[&uri(&export), s(&backup)]);
    assert!(
        std::fs::read(&backup).unwrap() == first_instant,
        "the full backup is the disk at the first export's instant"
    );
    ok(&ctl(&control, &["export-end", s(&a), &address]));

    // More writes, then the incremental backup of B's dirty extents.
    disk.write(0, 512, 5);
    disk.write(30 * MAP_BLOCK + MAP_BLOCK - 4096, 8192, 6);
    let second_instant = disk.model.clone();
    export_since(&control, &a, &address, "B", "C");
    disk.write(40 * MAP_BLOCK, 4096, 7);
    let since_b = blocks(&[(0, 0), (20, 20), (30, 31)]);
    let dirty = dirty_by_nbdinfo(&export, "B");
    assert_eq!(dirty, since_b, "nbdinfo --map of B");
    copy_extents(&export, &dirty, &backup);
    assert!(
        std::fs::read(&backup).unwrap() == second_instant,
        "the full backup and the incremental extents are the disk at the second instant"
    );
    ok(&ctl(&control, &["export-end", s(&a), &address]));
    // C began at the second instant: it holds only the write after it.
    let (_, extents) = common::run_time::changed_blocks(&control, &a, "C");
    assert_eq!(extents, blocks(&[(40, 40)]));
    assert!(daemon.alive());
}

/// A bitmap that is unknown, named twice or asked of an untracked disk, and a checkpoint whose
/// name is taken, refuse the export with a reason, leave no socket, and begin no checkpoint.
#[test]
fn bad_bitmaps_and_checkpoints_refuse_the_export_and_change_nothing() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let image = common::image(dir.path(), "a.raw", SIZE as usize, 5);
    let plain = common::image(dir.path(), "p.raw", SIZE as usize, 6);
    let (a, p) = (dir.path().join("a.sock"), dir.path().join("p.sock"));
    let (mut daemon, control) = serve(
        dir.path(),
        &[
            format!("socket={},path={},track-changes=on", s(&a), s(&image)),
            format!("socket={},path={}", s(&p), s(&plain)),
        ],
    );
    common::run_time::checkpoint(&control, &a, "A");
    let export = dir.path().join("export.sock");
    let address = format!("unix:{}", s(&export));
    let cases: [(&Path, &[&str], &str); 5] = [
        (&a, &["--bitmaps", "nope"], "no checkpoint named \"nope\""),
        (&a, &["--bitmaps", "A,A"], "twice"),
        (&a, &["--bitmaps", "A", "--checkpoint", "A"], "exists"),
        (
            &a,
            &["--bitmaps", "A", "--checkpoint", "bad name"],
            "checkpoint name",
        ),
        (&p, &["--bitmaps", "A"], "track-changes"),
    ];
    for (disk, extra, says) in cases {
        let mut args = vec!["export-begin", s(disk), &address];
        args.extend_from_slice(extra);
        let out = ctl(&control, &args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{extra:?} accepted");
        assert!(stderr.contains(says), "{extra:?}: {stderr}");
        assert!(
            !export.exists(),
            "{extra:?}: a refused export leaves no socket"
        );
    }
    // A checkpoint begun for an export the disk then refuses (one runs) is forgotten again.
    ctl_json(
        &control,
        &["export-begin", s(&a), &address, "--bitmaps", "A"],
    );
    let second = format!("unix:{}", s(&dir.path().join("second.sock")));
    let out = ctl(
        &control,
        &["export-begin", s(&a), &second, "--checkpoint", "N"],
    );
    assert!(!out.status.success(), "two exports of one disk at once");
    let checkpoints = ctl_json(&control, &["list"]).to_string();
    assert!(checkpoints.contains("\"A\""), "{checkpoints}");
    assert!(!checkpoints.contains("\"N\""), "{checkpoints}");
    ok(&ctl(&control, &["export-end", s(&a), &address]));
    assert!(daemon.alive());
}

/// An export serves what the guest sees at the instant on every composition: an encrypted
/// disk's plaintext (its fleece holds ciphertext), a `cache=` disk's, a `base=` thin disk's;
/// reads cutting sectors included, and writes after the instant not.
#[test]
fn exports_of_encrypted_cache_and_base_disks_serve_the_guests_view_at_the_instant() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let key = common::image(dir.path(), "key", 64, 33);
    let base = common::image(dir.path(), "golden.raw", SIZE as usize, 34);
    let encrypt = format!(",encrypt=aes-xts,key-file={}", s(&key));
    let thin = format!(",base={}", s(&base));
    let kinds = [
        ("encrypted", encrypt.clone()),
        ("cached", ",cache=1M".to_owned()),
        ("thin", thin.clone()),
        ("encrypted-thin-cached", format!("{encrypt}{thin},cache=1M")),
    ];
    let mut specs = Vec::new();
    for (name, extra) in &kinds {
        let image = dir.path().join(format!("{name}.raw"));
        if !extra.contains("base=") {
            common::image(dir.path(), &format!("{name}.raw"), SIZE as usize, 35);
        }
        let socket = dir.path().join(format!("{name}.sock"));
        specs.push(format!("socket={},path={}{extra}", s(&socket), s(&image)));
    }
    let (mut daemon, control) = serve(dir.path(), &specs);
    let export = dir.path().join("export.sock");
    let address = format!("unix:{}", s(&export));
    for (n, (name, _)) in kinds.iter().enumerate() {
        let socket = dir.path().join(format!("{name}.sock"));
        let mut client = Client::connect(&socket, 1, false).unwrap();
        let data = common::pattern(40 + n as u64, 300 << 10);
        assert_eq!(client.write(0, 8192, &data), 0, "{name}");
        let (ret, expected) = client.read(0, 0, SIZE as usize);
        assert_eq!(ret, 0, "{name}");
        ctl_json(&control, &["export-begin", s(&socket), &address]);
        // After the instant: not in the export.
        let later = common::pattern(50 + n as u64, 128 << 10);
        assert_eq!(client.write(0, 0, &later), 0, "{name}");
        assert_eq!(client.write(0, SIZE - (64 << 10), &later[..64 << 10]), 0);
        let backup = dir.path().join(format!("{name}.backup"));
        run("nbdcopy", &[&uri(&export), s(&backup)]);
        assert!(
            std::fs::read(&backup).unwrap() == expected,
            "{name}: the export is not the guest's view at the instant"
        );
        // A range that starts and ends inside sectors.
        let part = dir.path().join(format!("{name}.part"));
        let from = format!(
            "driver=raw,offset=1000,size=3072,file.driver=nbd,file.server.type=unix,\
             file.server.path={}",
            s(&export)
        );
        run(
            "qemu-img",
            &["convert", "-O", "raw", "--image-opts", &from, s(&part)],
        );
        assert!(
            std::fs::read(&part).unwrap() == expected[1000..4072],
            "{name}: a read cutting sectors"
        );
        ok(&ctl(&control, &["export-end", s(&socket), &address]));
    }
    assert!(daemon.alive());
}

/// `kill -9` of vbmq while an export is read leaves what a crash always leaves: the next start
/// serves every acknowledged write, the checkpoints (the export's bitmap and the one it began)
/// are invalid, never wrong, and refused to a new export with the reason; no scratch is left;
/// a new export with a new checkpoint serves the disk as it is.
#[test]
fn kill_9_during_an_export_leaves_the_disk_and_its_maps_as_a_crash_does() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let image = common::image(dir.path(), "a.raw", SIZE as usize, 8);
    let a = dir.path().join("a.sock");
    let spec = [disk_spec::with(&a, &image, ",track-changes=on,direct=off")];
    let (mut daemon, control) = serve(dir.path(), &spec);
    let mut disk = Disk {
        client: Client::connect(&a, 1, false).unwrap(),
        model: std::fs::read(&image).unwrap(),
    };
    common::run_time::checkpoint(&control, &a, "A");
    disk.write(5 * MAP_BLOCK, 8192, 1);
    let export = dir.path().join("export.sock");
    let address = format!("unix:{}", s(&export));
    export_since(&control, &a, &address, "A", "B");
    // Saved into the scratch before they land, then acknowledged.
    disk.write(0, 128 << 10, 2);
    disk.write(SIZE - 4096, 4096, 3);
    let backup = dir.path().join("backup.raw");
    run("nbdcopy", &[&uri(&export), s(&backup)]);
    daemon.child.kill().unwrap();
    let _ = daemon.child.wait();
    drop(disk.client);
    // The killed process leaves its sockets; the export's is replaced by the next export-begin
    // (no one listens on it).
    assert!(export.exists());
    for socket in [&a, &control] {
        let _ = std::fs::remove_file(socket);
    }
    let (mut daemon, control) = serve(dir.path(), &spec);
    let mut client = Client::connect(&a, 1, false).unwrap();
    client.assert_reads(0, 0, &disk.model, "an acknowledged write is lost");
    for name in ["A", "B"] {
        let err = common::run_time::no_extents(&control, &a, name);
        assert!(err.contains("did not stop cleanly"), "{name}: {err}");
    }
    let out = ctl(
        &control,
        &["export-begin", s(&a), &address, "--bitmaps", "B"],
    );
    common::ctl::refused(&out, "did not stop cleanly");
    assert!(!export.exists(), "a refused export leaves no socket");
    // Only the image and its map hold bytes: the scratch had no name.
    let mut files: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.metadata().unwrap().is_file() && e.metadata().unwrap().len() > 0)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name != "backup.raw")
        .collect();
    files.sort();
    assert_eq!(files, ["a.raw", "a.raw.changes"]);
    // A full backup again, with a new checkpoint.
    ctl_json(
        &control,
        &["export-begin", s(&a), &address, "--checkpoint", "C"],
    );
    run("nbdcopy", &[&uri(&export), s(&backup)]);
    assert!(std::fs::read(&backup).unwrap() == disk.model);
    ok(&ctl(&control, &["export-end", s(&a), &address]));
    assert_eq!(client.write(0, 9 * MAP_BLOCK, &[7; 4096]), 0);
    let (_, extents) = common::run_time::changed_blocks(&control, &a, "C");
    assert_eq!(extents, blocks(&[(9, 9)]));
    drop(client);
    assert!(daemon.alive());
}

/// A `base=` disk's `base:allocation`: a hole where the block is read from a hole of whichever
/// file its map names (DISK once written, BASE before), data elsewhere.
#[test]
fn a_thin_disks_export_reports_the_holes_of_its_disk_and_base() {
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    // BASE: data in blocks 0 to 3, a hole after.
    let base = dir.path().join("golden.raw");
    let file = std::fs::File::create(&base).unwrap();
    file.set_len(SIZE).unwrap();
    file.write_all_at(&common::pattern(61, 4 * MAP_BLOCK as usize), 0)
        .unwrap();
    drop(file);
    let (disk, socket) = (dir.path().join("thin.raw"), dir.path().join("thin.sock"));
    let (mut daemon, control) = serve(
        dir.path(),
        &[format!(
            "socket={},path={},base={},base-block={MAP_BLOCK}",
            s(&socket),
            s(&disk),
            s(&base)
        )],
    );
    // Block 10 written (DISK holds it), block 1 overwritten (from BASE to DISK).
    let mut client = Client::connect(&socket, 1, false).unwrap();
    let data = common::pattern(62, MAP_BLOCK as usize);
    assert_eq!(client.write(0, 10 * MAP_BLOCK, &data), 0);
    assert_eq!(client.write(0, MAP_BLOCK, &data), 0);
    let export = dir.path().join("export.sock");
    let address = format!("unix:{}", s(&export));
    ctl_json(&control, &["export-begin", s(&socket), &address]);
    let chunks = block_status_of(&export, &["base:allocation"]);
    let mut allocation = Vec::new();
    let mut at = 0;
    for (length, flags) in &chunks[0].2 {
        allocation.push((at / MAP_BLOCK, u64::from(*length) / MAP_BLOCK, *flags));
        at += u64::from(*length);
    }
    // Data 0..4 and 10..11; holes reading as zeros (3) between and after.
    assert_eq!(
        allocation,
        vec![
            (0, 4, 0),
            (4, 6, 3),
            (10, 1, 0),
            (11, SIZE / MAP_BLOCK - 11, 3)
        ],
        "(first block, blocks, flags)"
    );
    ok(&ctl(&control, &["export-end", s(&socket), &address]));
    assert!(daemon.alive());
}
