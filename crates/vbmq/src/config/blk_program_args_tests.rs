//! The command lines QEMU's backend program conventions give a `block` backend, read into the
//! disk they mean; everything else refused with one line.

use super::*;
use crate::worker::WaitMode;

fn parse(line: &str) -> Result<BlkProgramCommand, String> {
    let args: Vec<String> = line.split_whitespace().map(String::from).collect();
    parse_blk_program_args(&args, &[0, 1, 2, 3])
}

fn serve(line: &str) -> BlkProgramArgs {
    match parse(line) {
        Ok(BlkProgramCommand::Serve(args)) => *args,
        other => panic!("{line}: {other:?}"),
    }
}

fn refused(line: &str) -> String {
    match parse(line) {
        Err(e) => e,
        other => panic!("{line}: accepted: {other:?}"),
    }
}

#[test]
fn socket_path_and_blk_file() {
    for line in [
        "--socket-path=/run/vm1.sock --blk-file=/var/lib/vm1.raw",
        "--socket-path /run/vm1.sock --blk-file /var/lib/vm1.raw",
    ] {
        let a = serve(line);
        assert_eq!(a.spec.socket, PathBuf::from("/run/vm1.sock"));
        assert_eq!(a.spec.storage, Storage::File("/var/lib/vm1.raw".into()));
        assert_eq!(a.spec.socket_fd, None);
        assert!(!a.spec.readonly);
        assert_eq!(a.text, "socket=/run/vm1.sock,path=/var/lib/vm1.raw");
    }
}

#[test]
fn an_inherited_socket_and_read_only() {
    let a = serve("--fd=5 --blk-file=/img --read-only");
    assert_eq!(a.spec.socket_fd.as_deref(), Some("5"));
    assert_eq!(a.spec.socket, PathBuf::from("/dev/fd/5"));
    assert!(a.spec.readonly);
    assert_eq!(a.text, "socket=/dev/fd/5,path=/img,readonly=on,socket-fd=5");
}

#[test]
fn a_comma_in_a_path_is_part_of_the_path() {
    let a = serve("--socket-path=/run/a,socket-fd=3 --blk-file=/img,readonly=off,null=1G");
    assert_eq!(a.spec.socket, PathBuf::from("/run/a,socket-fd=3"));
    assert_eq!(a.spec.socket_fd, None);
    assert_eq!(
        a.spec.storage,
        Storage::File("/img,readonly=off,null=1G".into())
    );
}

#[test]
fn vbmqs_own_disk_options() {
    let a = serve(
        "--socket-path /s --blk-file /img --queues 2 --mode=poll --cpus 2,3 \
         --disk-option direct=off --disk-option=serial=vm1,queue-size=128",
    );
    assert_eq!((a.spec.queues, a.spec.mode), (2, WaitMode::Poll));
    assert_eq!(a.spec.cpus, vec![2, 3]);
    assert!(!a.spec.direct);
    assert_eq!(a.spec.serial.as_deref(), Some("vm1"));
    assert_eq!(a.spec.queue_size, 128);
}

#[test]
fn print_capabilities_and_help() {
    assert_eq!(
        parse("--print-capabilities"),
        Ok(BlkProgramCommand::PrintCapabilities)
    );
    assert_eq!(
        parse("--socket-path /s --print-capabilities"),
        Ok(BlkProgramCommand::PrintCapabilities)
    );
    // Every other argument is ignored then, even one that would be refused.
    assert_eq!(
        parse("--frob --fd=1 --print-capabilities"),
        Ok(BlkProgramCommand::PrintCapabilities)
    );
    assert_eq!(parse("--help"), Ok(BlkProgramCommand::Help));
    assert!(BLK_PROGRAM_CAPABILITIES.contains("\"block\""));
}

#[test]
fn anything_else_is_refused_with_one_line() {
    for (line, why) in [
        ("--blk-file /img", "missing --socket-path or --fd"),
        ("--socket-path /s", "missing --blk-file"),
        (
            "--socket-path /s --fd 3 --blk-file /i",
            "exclude each other",
        ),
        ("--fd 2 --blk-file /i", "from 3"),
        ("--fd x --blk-file /i", "from 3"),
        (
            "--socket-path /s --blk-file /i --frob",
            "--frob: not an option",
        ),
        (
            "--socket-path /s --blk-file /i --read-only=on",
            "takes no value",
        ),
        (
            "--socket-path /s --blk-file /i --blk-file /j",
            "given twice",
        ),
        ("--socket-path /s --blk-file", "a value is required"),
        (
            "--socket-path /s --blk-file /i --queues 0",
            "--queues: must be",
        ),
        ("--socket-path /s --blk-file /i --mode fast", "--mode"),
        ("--socket-path /s --blk-file /i --cpus 9", "--cpus"),
        // A value that smuggles another key in is refused, not obeyed.
        (
            "--socket-path /s --blk-file /i --queues 2,socket-fd=3",
            "--disk-option socket-fd",
        ),
        (
            "--socket-path /s --blk-file /i --disk-option path=/etc/shadow",
            "--disk-option path",
        ),
        (
            "--socket-path /s --blk-file /i --disk-option serial=a,readonly=off",
            "--disk-option readonly",
        ),
        (
            "--socket-path /s --blk-file /i --disk-option mem=1G",
            "--disk-option mem",
        ),
        (
            "--socket-path /s --blk-file /i --disk-option frob=1",
            "--disk-option frob",
        ),
        (
            "--socket-path /s --blk-file /i --disk-option direct",
            "--disk-option",
        ),
        (
            "--fd 3 --blk-file /i --disk-option socket-mode=0660",
            "not with --fd",
        ),
    ] {
        let e = refused(line);
        assert!(e.contains(why), "{line}: {e}");
        assert_eq!(e.lines().count(), 1, "{line}: {e}");
    }
}
