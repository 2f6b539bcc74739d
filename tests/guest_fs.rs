//! A Linux guest on a vbmq virtio-fs share (`--fs`): files written with verification, the
//! usual namespace operations, a tree copied in and checked on the host, a second VM seeing the
//! first's files, and a read-only share refusing every change.

mod guest;

use guest::{TestDir, Vbmq, Vm, disk_spec, script, tagged};
use std::path::Path;
use std::process::Command;

fn share_spec(socket: &Path, dir: &Path, extra: &str) -> String {
    format!(
        "socket={},dir={},tag=share,queues=2{extra}",
        socket.display(),
        dir.display()
    )
}

/// vbmq serving the one share `shared` on `socket`, with `extra` options, logging in `dir`.
fn serve_share(dir: &TestDir, socket: &Path, shared: &Path, extra: &str) -> Vbmq {
    Vbmq::serve_with(
        &[],
        &[share_spec(socket, shared, extra)],
        dir.join("vbmq.log"),
    )
}

/// `sha256sum` of every file under `dir`, as `HASH  ./path` lines sorted by path.
fn host_sums(dir: &Path) -> Vec<String> {
    let out = Command::new("sh")
        .arg("-c")
        .arg("find . -type f | LC_ALL=C sort | xargs sha256sum")
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
#[cfg_attr(
    not(feature = "guest-tests"),
    ignore = "needs feature guest-tests: QEMU 10 and a guest kernel (scripts/test.sh)"
)]
fn a_guest_works_on_a_share_and_a_second_vm_sees_it() {
    let dir = TestDir::new("fs");
    let shared = dir.join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::write(shared.join("from-host"), "written by the host\n").unwrap();
    let socket = dir.join("fs.sock");
    let vbmq = serve_share(&dir, &socket, &shared, ",mode=adaptive");
    let first = Vm::new(2).share(&socket, "share", 2).run(&script(
        "mount -t virtiofs share /mnt
         cat /mnt/from-host
         # Files written and read back with checksums, from two jobs at once.
         mkdir /mnt/fio
         fio --name=verify --directory=/mnt/fio --size=4M --bs=4k --rw=randwrite \
             --ioengine=psync --numjobs=2 --verify=crc32c --verify_fatal=1 \
             --do_verify=1 --output-format=terse >/dev/null
         # The namespace: create, rename, link, unlink, mkdir, rmdir, readdir, stat.
         mkdir -p /mnt/a/b/c
         echo one >/mnt/a/b/c/f
         mv /mnt/a/b/c/f /mnt/a/g
         ln /mnt/a/g /mnt/a/h
         ln -s g /mnt/a/s
         [ \"$(cat /mnt/a/s)\" = one ]
         [ \"$(stat -c %h /mnt/a/g)\" = 2 ]
         rm /mnt/a/h
         rmdir /mnt/a/b/c /mnt/a/b
         [ \"$(ls /mnt/a | tr '\\n' ' ')\" = 'g s ' ]
         truncate -s 12345 /mnt/a/g
         [ \"$(stat -c %s /mnt/a/g)\" = 12345 ]
         # A tree copied in, its sums kept beside it.
         cp -r /lib/modules /mnt/tree
         (cd /mnt/tree && find . -type f | LC_ALL=C sort | xargs sha256sum >/mnt/tree.sums)
         sed 's/^/SUM /' /mnt/tree.sums
         umount /mnt",
    ));
    first.assert_success();
    assert!(
        first.output.contains("written by the host"),
        "{}",
        first.output
    );
    let guest_sums = tagged(&first.output, "SUM");
    assert!(guest_sums.len() > 10, "{}", first.output);
    assert_eq!(guest_sums, host_sums(&shared.join("tree")));
    assert_eq!(std::fs::metadata(shared.join("a/g")).unwrap().len(), 12345);

    let second = Vm::new(1).share(&socket, "share", 2).run(&script(
        "mount -t virtiofs share /mnt
         (cd /mnt/tree && sha256sum -c -s /mnt/tree.sums) && echo SECOND sums ok
         ls /mnt/fio | wc -l | sed 's/^/SECOND fio files /'
         umount /mnt",
    ));
    second.assert_success();
    assert!(
        second.output.contains("SECOND sums ok"),
        "{}",
        second.output
    );
    assert!(
        second.output.contains("SECOND fio files 2"),
        "{}",
        second.output
    );
    vbmq.stop();
}

#[test]
#[cfg_attr(
    not(feature = "guest-tests"),
    ignore = "needs feature guest-tests: QEMU 10 and a guest kernel (scripts/test.sh)"
)]
fn a_read_only_share_refuses_every_change() {
    let dir = TestDir::new("fs-ro");
    let shared = dir.join("shared");
    std::fs::create_dir_all(shared.join("d")).unwrap();
    std::fs::write(shared.join("f"), "unchanged\n").unwrap();
    let socket = dir.join("fs.sock");
    let vbmq = serve_share(&dir, &socket, &shared, ",readonly=on,mode=event");
    let run = Vm::new(1).share(&socket, "share", 2).run(&script(
        "mount -t virtiofs share /mnt
         cat /mnt/f
         for change in 'echo x >>/mnt/f' 'echo x >/mnt/new' 'mkdir /mnt/e' 'rm /mnt/f' \
                       'mv /mnt/f /mnt/g' 'rmdir /mnt/d' 'truncate -s 0 /mnt/f' \
                       'ln -s f /mnt/l' 'chmod 777 /mnt/f' 'touch /mnt/f'; do
             if sh -c \"$change\" 2>/tmp/err; then
                 echo \"ALLOWED $change\"
             else
                 echo \"REFUSED $(cat /tmp/err)\"
             fi
         done
         umount /mnt",
    ));
    run.assert_success();
    vbmq.stop();
    assert!(run.output.contains("unchanged"), "{}", run.output);
    assert!(!run.output.contains("ALLOWED"), "{}", run.output);
    assert_eq!(tagged(&run.output, "REFUSED").len(), 10, "{}", run.output);
    assert_eq!(
        std::fs::read_to_string(shared.join("f")).unwrap(),
        "unchanged\n"
    );
    let mut names: Vec<_> = std::fs::read_dir(&shared)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["d", "f"]);
}

/// Seed 001's comparison, for correctness (TCG makes its timings meaningless; they are printed,
/// not asserted): the same verified file workload on a share, and on ext4 in the guest over a
/// vbmq block disk (the nested stack a share removes). Both must pass verification.
#[test]
#[cfg_attr(
    not(feature = "guest-tests"),
    ignore = "needs feature guest-tests: QEMU 10 and a guest kernel (scripts/test.sh)"
)]
fn the_same_file_workload_on_a_share_and_on_ext4_over_a_disk() {
    let dir = TestDir::new("fs-vs-ext4");
    let shared = dir.join("shared");
    std::fs::create_dir(&shared).unwrap();
    let image = dir.disk("ext4.img", 128);
    let fs_socket = dir.join("fs.sock");
    let disk_socket = dir.join("disk.sock");
    let vbmq = Vbmq::serve_with(
        &[disk_spec(&disk_socket, &image, ",queues=1")],
        &[share_spec(&fs_socket, &shared, "")],
        dir.join("vbmq.log"),
    );
    let workload = |path: &str| {
        format!(
            "fio --name=seed001 --directory={path} --size=8M --nrfiles=4 --bs=4k \
                 --rw=randrw --ioengine=psync --verify=crc32c --verify_fatal=1 \
                 --runtime=5 --time_based=0 --output-format=terse --terse-version=3 \
                 | awk -F';' '{{print \"IOPS {path} \" $8 + $49}}'"
        )
    };
    let run = Vm::new(1)
        .share(&fs_socket, "share", 2)
        .disk(&disk_socket, 1)
        .run(&script(&format!(
            "mount -t virtiofs share /mnt
             mkdir -p /ext4
             mkfs.ext4 -q /dev/vda
             mount /dev/vda /ext4
             {}
             {}
             umount /mnt /ext4",
            workload("/mnt"),
            workload("/ext4")
        )));
    run.assert_success();
    vbmq.stop();
    let iops = tagged(&run.output, "IOPS");
    assert_eq!(iops.len(), 2, "{}", run.output);
    eprintln!("TCG guest, 1 vCPU, fio randrw 4K psync with verify: {iops:?}");
}
