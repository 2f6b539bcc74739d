//! Every command line the management stacks run virtiofsd with (issue 26's table), read into
//! the share they mean.

use super::*;
use crate::worker::WaitMode;

fn parse(line: &str) -> Result<VirtiofsdCommand, String> {
    let args: Vec<String> = line.split_whitespace().map(String::from).collect();
    parse_virtiofsd_args(&args, &[0, 1])
}

fn serve(line: &str) -> VirtiofsdArgs {
    match parse(line) {
        Ok(VirtiofsdCommand::Serve(args)) => *args,
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
fn libvirt_separate_options() {
    let a = serve(
        "--fd=31 --shared-dir /srv/share --cache always --sandbox chroot --xattr \
         --thread-pool-size=4 --rlimit-nofile=4096 --log-level debug",
    );
    assert_eq!(a.spec.listen_fd, Some(31));
    assert_eq!(a.spec.dir, PathBuf::from("/srv/share"));
    assert_eq!(a.spec.cache, FsCache::Always);
    assert!(a.spec.xattr && !a.spec.posix_acl && !a.spec.readonly);
    assert_eq!(a.rlimit_nofile, Some(4096));
    assert_eq!(a.log_level, "debug");
    assert!(a.seccomp);
    let a = serve("--fd=31 --shared-dir=/srv/share --cache=never");
    assert_eq!(a.spec.cache, FsCache::Never);
    assert!(!a.spec.xattr, "virtiofsd's default: no xattrs");
    // <idmap>: virtiofsd's user namespace maps: a namespace, no translation by vbmq.
    let a = serve("--fd=31 --shared-dir /d --uid-map=:0:100000:65536: --gid-map=:0:100000:65536:");
    let range = crate::confine::IdRange {
        inside: 0,
        outside: 100_000,
        count: 65_536,
    };
    let namespace = a.user_namespace.unwrap();
    assert_eq!((namespace.uids, namespace.gids), (vec![range], vec![range]));
    assert!(a.spec.uid_map.is_empty() && a.spec.gid_map.is_empty());
    let sandbox = |line: &str| serve(&format!("--fd=31 --shared-dir /d {line}")).sandbox;
    assert_eq!(
        sandbox("--sandbox chroot").as_deref(),
        Some("--sandbox chroot")
    );
    assert_eq!(
        sandbox("-o sandbox=namespace").as_deref(),
        Some("-o sandbox=namespace")
    );
    let e = refused("--fd=31 --shared-dir /d --uid-map=:0:100000:10: --uid-map=:5:200000:10:");
    assert!(e.starts_with("--uid-map") && e.contains("overlap"), "{e}");
    assert_eq!(sandbox("--sandbox none"), None);
}

#[test]
fn libvirt_legacy_options() {
    // What Debian 12's libvirt 9.0 runs (/work/shared/recipes/libvirt-virtiofs.sh).
    let a = serve("--fd=31 -o source=/srv/share");
    assert_eq!(
        (a.spec.listen_fd, a.spec.dir.clone()),
        (Some(31), PathBuf::from("/srv/share"))
    );
    assert_eq!(a.spec.cache, FsCache::Auto);
    let a = serve(
        "--fd=31 -o source=/srv/share,cache=always,sandbox=chroot,xattr --thread-pool-size=4",
    );
    assert_eq!(a.spec.cache, FsCache::Always);
    assert!(a.spec.xattr);
    let a = serve("--fd=31 -o source=/srv/share,cache=none,no_xattr,flock,posix_lock -d");
    assert_eq!(a.spec.cache, FsCache::Never);
    assert!(!a.spec.xattr);
    assert_eq!(a.log_level, "debug");
    assert_eq!(
        a.notes.len(),
        2,
        "flock and posix_lock are noted: {:?}",
        a.notes
    );
    let a = serve("--fd=31 -o source=/srv/share,no_flock,no_posix_lock,cache=metadata");
    assert_eq!(a.spec.cache, FsCache::Metadata);
    assert!(a.notes.is_empty());
}

#[test]
fn kata_containers() {
    let a = serve(
        "--syslog --cache=auto --shared-dir=/run/kata-containers/shared/sandboxes/x/shared \
         --fd=3 --thread-pool-size=1 --announce-submounts",
    );
    assert!(a.syslog);
    assert_eq!(a.spec.listen_fd, Some(3));
    assert!(a.spec.announce_submounts);
    let a = serve(
        "--syslog --cache=always --shared-dir=/s --fd=3 -o announce_submounts --inode-file-handles=prefer",
    );
    assert_eq!(a.spec.cache, FsCache::Always);
    assert!(a.spec.announce_submounts);
    let a = serve("--syslog --cache=metadata --shared-dir=/s --fd=3 --inode-file-handles=never");
    assert_eq!(a.spec.cache, FsCache::Metadata);
    let e = refused("--shared-dir=/s --fd=3 --inode-file-handles=mandatory");
    assert!(e.contains("O_PATH"), "{e}");
}

#[test]
fn kata_runtime_rs() {
    let a = serve(
        "--socket-path /run/kata/vm/root/virtiofsd.sock --shared-dir /run/kata/shared \
         --cache never --sandbox none --seccomp none",
    );
    assert_eq!(
        a.spec.socket,
        PathBuf::from("/run/kata/vm/root/virtiofsd.sock")
    );
    assert_eq!(a.spec.listen_fd, None);
    assert_eq!(a.spec.cache, FsCache::Never);
    assert!(!a.seccomp);
}

#[test]
fn kubevirt() {
    let a = serve(
        "--socket-path=/var/run/kubevirt/virtiofs-containers/disk0.sock \
         --shared-dir=/var/run/kubevirt-private/vmi-disks/disk0 --sandbox=none --cache=auto",
    );
    assert_eq!(a.spec.cache, FsCache::Auto);
    assert_eq!(a.spec.socket_mode, 0o600);
    assert!(a.spec.announce_submounts, "virtiofsd 1.14's default");
}

#[test]
fn proxmox() {
    let a = serve(
        "--fd=7 --shared-dir=/mnt/share --xattr --posix-acl --announce-submounts \
         --allow-direct-io --cache=always --syslog",
    );
    assert!(a.spec.xattr && a.spec.posix_acl && a.spec.direct_io && a.syslog);
    let a = serve("--fd=7 --shared-dir=/mnt/share --posix-acl --announce-submounts --syslog");
    assert!(a.spec.xattr, "--posix-acl implies --xattr");
    assert!(!a.spec.direct_io, "virtiofsd's default: O_DIRECT dropped");
    assert!(
        !serve("--fd=7 --shared-dir=/s --posix-acl=never")
            .spec
            .posix_acl
    );
}

#[test]
fn the_rest_of_virtiofsd_and_vbmqs_own() {
    let a = serve(
        "--socket-path /s --socket-group 0 --shared-dir /d --tag myfs --readonly \
         --no-announce-submounts -f --seccomp=kill --queues 2 --mode poll --cpus 0,1",
    );
    assert_eq!(a.spec.tag, "myfs");
    assert!(a.spec.offer_config, "--tag offers CONFIG, as in virtiofsd");
    assert!(a.spec.readonly && !a.spec.announce_submounts);
    assert_eq!((a.spec.socket_group, a.spec.socket_mode), (Some(0), 0o660));
    assert_eq!((a.spec.queues, a.spec.mode), (2, WaitMode::Poll));
    assert_eq!(a.spec.cpus, vec![0, 1]);
    assert!(
        serve("--socket-path /s --shared-dir /d --seccomp log")
            .notes
            .len()
            == 1
    );
    assert_eq!(
        parse("--print-capabilities").unwrap(),
        VirtiofsdCommand::PrintCapabilities
    );
    assert_eq!(
        parse("--fd=3 --print-capabilities").unwrap(),
        VirtiofsdCommand::PrintCapabilities
    );
    assert_eq!(parse("--help").unwrap(), VirtiofsdCommand::Help);
    let a = serve(
        "--socket-path /s --shared-dir /d --translate-uid map:0:1000:1 --translate-gid guest:0:1000:1",
    );
    assert_eq!((a.spec.uid_map.len(), a.spec.gid_map.len()), (1, 1));
    let e = refused("--socket-path /s --shared-dir /d --translate-uid map:0:1000:1 --posix-acl");
    assert!(e.starts_with("--posix-acl"), "{e}");
    let a = serve("--socket-path /s --shared-dir /d --xattrmap=:prefix:all:trusted.:user.vm.:");
    assert_eq!(
        a.spec.xattrmap.as_deref(),
        Some(":prefix:all:trusted.:user.vm.:")
    );
    assert!(a.spec.xattr, "--xattrmap implies --xattr");
    let a = serve("--fd=3 -o source=/d,xattrmap=:map::user.virtiofs.:");
    assert!(a.spec.xattrmap.is_some() && a.spec.xattr);
}

#[test]
fn what_vbmq_does_not_do_is_refused_with_one_line() {
    for (line, start) in [
        ("--socket-path /s --shared-dir /d --frob", "--frob"),
        ("--socket-path /s --shared-dir /d -o bogus", "-o bogus"),
        (
            "--socket-path /s --shared-dir /d -o modcaps=+sys_admin",
            "-o modcaps",
        ),
        // An unknown rule type; a rule missing its last field.
        (
            "--socket-path /s --shared-dir /d --xattrmap :frob:all:a:b:",
            "--xattrmap",
        ),
        (
            "--socket-path /s --shared-dir /d --xattrmap :prefix:all:a:",
            "--xattrmap",
        ),
        (
            "--socket-path /s --shared-dir /d --translate-uid squash-guest:0:1000:1",
            "--translate-uid",
        ),
        (
            "--socket-path /s --shared-dir /d --cache sometimes",
            "--cache",
        ),
        (
            "--socket-path /s --shared-dir /d --sandbox jail",
            "--sandbox",
        ),
        ("--socket-path /s --shared-dir /d --xattr=on", "--xattr"),
        ("--socket-path /s --shared-dir /d --cpus 7", "--cpus"),
        ("--socket-path /s --shared-dir /d --mode poll", "--cpus"),
        ("--socket-path /s", "missing --shared-dir"),
        ("--shared-dir /d", "missing --socket-path"),
        (
            "--shared-dir /d --fd 3 --socket-path /s",
            "--fd and --socket-path",
        ),
        ("--shared-dir /d --fd 3 --socket-group 0", "--socket-group"),
        ("--shared-dir /d --fd three", "--fd"),
        ("--shared-dir /d --socket-path", "--socket-path"),
    ] {
        let e = refused(line);
        assert!(e.starts_with(start), "{line}: {e}");
        assert!(!e.contains('\n'), "{line}: {e}");
    }
}

#[test]
fn the_capabilities_offer_separate_options_and_migration() {
    let text = VIRTIOFSD_CAPABILITIES;
    assert!(text.contains("\"type\": \"fs\""));
    assert!(text.contains("\"separate-options\""));
    assert!(text.contains("\"migrate-precopy\""));
}

#[test]
fn migration_options_as_virtiofsd_takes_them() {
    let args = serve(
        "--shared-dir /d --socket-path /s --migration-mode find-paths \
         --migration-on-error guest-error --migration-verify-handles --migration-confirm-paths",
    );
    assert_eq!(args.spec.migration_on_error, OnError::GuestError);
    let args = serve("--shared-dir /d --socket-path /s --migration-on-error=abort");
    assert_eq!(args.spec.migration_on_error, OnError::Abort);
    for line in [
        "--shared-dir /d --socket-path /s --migration-mode file-handles",
        "--shared-dir /d --socket-path /s --migration-mode guess",
        "--shared-dir /d --socket-path /s --migration-on-error ignore",
    ] {
        let e = refused(line);
        assert!(e.starts_with("--migration-"), "{line}: {e}");
    }
}

#[test]
fn join_names_a_control_socket() {
    let a = serve("--join /run/vbmq/ctl.sock --fd=3 --shared-dir /srv/d");
    assert_eq!(a.join, Some(PathBuf::from("/run/vbmq/ctl.sock")));
    let a = serve("--socket-path /s --shared-dir /srv/d --join=/c");
    assert_eq!(a.join, Some(PathBuf::from("/c")));
    assert_eq!(serve("--socket-path /s --shared-dir /d").join, None);
    assert!(refused("--socket-path /s --shared-dir /d --join").contains("--join"));
}
