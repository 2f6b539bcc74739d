//! The wire format of every request and reply, both ways, and the refusals.

use serde_json::{Value, json};

use super::*;

fn requests() -> Vec<(Request, Value)> {
    vec![
        (
            Request::AddDisk {
                spec: "socket=/r/a.sock,null=1G".into(),
                fds: vec![],
            },
            json!({"command": "add-disk", "spec": "socket=/r/a.sock,null=1G"}),
        ),
        (
            Request::AddDisk {
                spec: "socket=/r/a.sock,path=/i.raw".into(),
                fds: vec![Passed::Socket, Passed::Image, Passed::ImageDirect],
            },
            json!({"command": "add-disk", "spec": "socket=/r/a.sock,path=/i.raw",
                "fds": ["socket", "image", "image-direct"]}),
        ),
        (
            Request::AddDisk {
                spec: "socket=/r/a.sock,path=/i.raw,base=/b.raw,encrypt=aes-xts,key-file=/k".into(),
                fds: vec![
                    Passed::Image,
                    Passed::ImageDirect,
                    Passed::Base,
                    Passed::BaseDirect,
                    Passed::Map,
                    Passed::Key,
                    Passed::Changes,
                    Passed::Socket,
                ],
            },
            json!({"command": "add-disk",
                "spec": "socket=/r/a.sock,path=/i.raw,base=/b.raw,encrypt=aes-xts,key-file=/k",
                "fds": ["image", "image-direct", "base", "base-direct", "map", "key", "changes",
                    "socket"]}),
        ),
        (
            Request::RemoveDisk {
                socket: "/r/a.sock".into(),
            },
            json!({"command": "remove-disk", "socket": "/r/a.sock"}),
        ),
        (
            Request::AddFs {
                spec: "socket=/r/f.sock,dir=/srv/f,tag=t".into(),
                mount: false,
            },
            json!({"command": "add-fs", "spec": "socket=/r/f.sock,dir=/srv/f,tag=t"}),
        ),
        (
            Request::AddFs {
                spec: "socket=/r/f.sock,dir=/srv/f,tag=t".into(),
                mount: true,
            },
            json!({"command": "add-fs", "spec": "socket=/r/f.sock,dir=/srv/f,tag=t",
                "mount": true}),
        ),
        (
            Request::RemoveFs {
                socket: "/r/f.sock".into(),
            },
            json!({"command": "remove-fs", "socket": "/r/f.sock"}),
        ),
        (
            Request::Resize {
                socket: "/r/a.sock".into(),
                size: Some(Size::Text("40G".into())),
                force: true,
            },
            json!({"command": "resize", "socket": "/r/a.sock", "size": "40G", "force": true}),
        ),
        (
            Request::Resize {
                socket: "/r/a.sock".into(),
                size: Some(Size::Bytes(4096)),
                force: false,
            },
            json!({"command": "resize", "socket": "/r/a.sock", "size": 4096, "force": false}),
        ),
        (
            Request::SetLimits {
                socket: "/r/a.sock".into(),
                limits: "iops=10".into(),
            },
            json!({"command": "set-limits", "socket": "/r/a.sock", "limits": "iops=10"}),
        ),
        (
            Request::Reload { replace: false },
            json!({"command": "reload"}),
        ),
        (
            Request::Reload { replace: true },
            json!({"command": "reload", "replace": true}),
        ),
        (
            Request::Snapshot {
                socket: "/r/a.sock".into(),
                name: None,
            },
            json!({"command": "snapshot", "socket": "/r/a.sock"}),
        ),
        (
            Request::Snapshot {
                socket: "/r/a.sock".into(),
                name: Some("monday".into()),
            },
            json!({"command": "snapshot", "socket": "/r/a.sock", "name": "monday"}),
        ),
        (
            Request::ExportBegin {
                socket: "/r/a.sock".into(),
                address: "unix:/r/a.nbd".into(),
                tls_verify_peer: false,
                bitmaps: Vec::new(),
                checkpoint: None,
            },
            json!({"command": "export-begin", "socket": "/r/a.sock", "address": "unix:/r/a.nbd"}),
        ),
        (
            Request::ExportBegin {
                socket: "/r/a.sock".into(),
                address: "unix:/r/a.nbd".into(),
                tls_verify_peer: false,
                bitmaps: vec!["mon".into(), "tue".into()],
                checkpoint: Some("wed".into()),
            },
            json!({"command": "export-begin", "socket": "/r/a.sock", "address": "unix:/r/a.nbd",
                   "bitmaps": ["mon", "tue"], "checkpoint": "wed"}),
        ),
        (
            Request::ExportBeginWritable {
                socket: "/r/a.sock".into(),
                address: "unix:/r/a.nbd".into(),
                tls_verify_peer: false,
            },
            json!({"command": "export-begin-writable", "socket": "/r/a.sock", "address": "unix:/r/a.nbd"}),
        ),
        (
            Request::ExportBeginWritable {
                socket: "/r/a.sock".into(),
                address: "tcp:[::1]:10809".into(),
                tls_verify_peer: true,
            },
            json!({"command": "export-begin-writable", "socket": "/r/a.sock",
                   "address": "tcp:[::1]:10809", "tls_verify_peer": true}),
        ),
        (
            Request::MirrorBegin {
                socket: "/r/a.sock".into(),
                destination: "nbd+unix:///?socket=/r/b.nbd".into(),
                wait_ready: true,
                resume: false,
                timeout_secs: None,
            },
            json!({"command": "mirror-begin", "socket": "/r/a.sock",
                   "destination": "nbd+unix:///?socket=/r/b.nbd", "wait_ready": true}),
        ),
        (
            Request::MirrorEnd {
                socket: "/r/a.sock".into(),
            },
            json!({"command": "mirror-end", "socket": "/r/a.sock"}),
        ),
        (
            Request::ExportEnd {
                socket: "/r/a.sock".into(),
                address: "unix:/r/a.nbd".into(),
            },
            json!({"command": "export-end", "socket": "/r/a.sock", "address": "unix:/r/a.nbd"}),
        ),
        (
            Request::Checkpoint {
                socket: "/r/a.sock".into(),
                name: "nightly-1".into(),
            },
            json!({"command": "checkpoint", "socket": "/r/a.sock", "name": "nightly-1"}),
        ),
        (
            Request::ChangedBlocks {
                socket: "/r/a.sock".into(),
                since: "nightly-1".into(),
            },
            json!({"command": "changed-blocks", "socket": "/r/a.sock", "since": "nightly-1"}),
        ),
        (
            Request::ForgetCheckpoint {
                socket: "/r/a.sock".into(),
                name: "nightly-1".into(),
            },
            json!({"command": "forget-checkpoint", "socket": "/r/a.sock", "name": "nightly-1"}),
        ),
        (Request::List, json!({"command": "list"})),
        (Request::Stats { socket: None }, json!({"command": "stats"})),
        (
            Request::Stats {
                socket: Some("/r/a.sock".into()),
            },
            json!({"command": "stats", "socket": "/r/a.sock"}),
        ),
    ]
}

#[test]
fn every_request_goes_out_as_documented_and_comes_back_the_same() {
    for (request, mut wire) in requests() {
        let sent = serde_json::to_vec(&Versioned {
            version: VERSION,
            request: &request,
        })
        .unwrap();
        wire["version"] = json!(1);
        assert_eq!(serde_json::from_slice::<Value>(&sent).unwrap(), wire);
        assert_eq!(Request::parse(&sent), Ok(request.clone()));
        // `version` is optional.
        wire.as_object_mut().unwrap().remove("version");
        assert_eq!(Request::parse(wire.to_string().as_bytes()), Ok(request));
    }
}

#[test]
fn optional_arguments_of_the_wrong_type_read_as_absent_and_extra_keys_are_ignored() {
    let parse = |v: Value| Request::parse(v.to_string().as_bytes());
    assert_eq!(
        parse(json!({"command": "stats", "socket": 5, "extra": [1]})),
        Ok(Request::Stats { socket: None })
    );
    assert_eq!(
        parse(json!({"command": "resize", "socket": "s", "size": -1, "force": "yes"})),
        Ok(Request::Resize {
            socket: "s".into(),
            size: None,
            force: false
        })
    );
    assert_eq!(
        parse(json!({"command": "resize", "socket": "s"})),
        Ok(Request::Resize {
            socket: "s".into(),
            size: None,
            force: false
        })
    );
    assert_eq!(
        parse(json!({"command": "list", "socket": "s"})),
        Ok(Request::List)
    );
}

#[test]
fn refused_requests_get_the_documented_errors() {
    for (line, error) in [
        (
            &b"not json"[..],
            "malformed request: expected ident at line 1 column 2",
        ),
        (b"[1,2]", "a request is a JSON object"),
        (
            b"{\"command\":\"format-c\"}",
            "unknown command \"format-c\"",
        ),
        (
            b"{\"version\":2,\"command\":\"list\"}",
            "unsupported version 2: this vbmq speaks 1",
        ),
        (
            b"{\"version\":\"1\",\"command\":\"list\"}",
            "unsupported version \"1\": this vbmq speaks 1",
        ),
        (b"{\"spec\":\"x\"}", "missing \"command\""),
        (b"{\"command\":7}", "missing \"command\""),
        (
            b"{\"command\":\"add-disk\"}",
            "add-disk: missing string \"spec\"",
        ),
        (
            b"{\"command\":\"remove-disk\"}",
            "remove-disk: missing string \"socket\"",
        ),
        (
            b"{\"command\":\"set-limits\",\"socket\":\"s\"}",
            "set-limits: missing string \"limits\"",
        ),
        (
            b"{\"command\":\"snapshot\"}",
            "snapshot: missing string \"socket\"",
        ),
    ] {
        assert_eq!(
            Request::parse(line),
            Err(error.to_string()),
            "{}",
            String::from_utf8_lossy(line)
        );
    }
    // A required argument of the wrong type is named for what it is.
    let wrong = Request::parse(b"{\"command\":\"add-disk\",\"spec\":5}").unwrap_err();
    assert!(wrong.starts_with("add-disk: invalid type"), "{wrong}");
}

fn entry() -> DiskEntry {
    DiskEntry {
        socket: "/r/a.sock".into(),
        spec: "socket=/r/a.sock,null=1G".into(),
        size: 1 << 30,
        queues: 2,
        connected: true,
        limits: [("iops".to_string(), 10)].into(),
        checkpoints: vec![],
        mirror: None,
    }
}

fn share() -> ShareEntry {
    ShareEntry {
        socket: "/r/f.sock".into(),
        spec: "socket=/r/f.sock,dir=/srv/f,tag=t".into(),
        tag: "t".into(),
        dir: "/srv/f".into(),
        queues: 1,
        readonly: false,
        connected: false,
    }
}

fn disk_stats() -> DiskStats {
    DiskStats {
        socket: "/r/a.sock".into(),
        kind: Kind::Disk,
        queues: vec![QueueStats {
            queue: 0,
            requests: 3,
            errors: 1,
            read_bytes: 4096,
            write_bytes: 512,
            ops: [("read".to_string(), 2), ("write".to_string(), 1)].into(),
            in_flight: 0,
            passes: 9,
            busy_passes: 3,
            unsupported: 0,
            sleep_ms: 5,
            latency_us: Latency {
                p50: Some(8),
                p90: Some(16),
                p99: None,
                p999: None,
            },
        }],
        engine: [("hits".to_string(), 7)].into(),
    }
}

#[test]
fn every_reply_goes_out_as_documented_and_comes_back_the_same() {
    let replies = [
        (
            Reply::done(Answer::Nothing),
            json!({"version": 1, "ok": true, "result": null}),
        ),
        (
            Reply::done(Answer::Disk(entry())),
            json!({"version": 1, "ok": true, "result": {
                "socket": "/r/a.sock", "spec": "socket=/r/a.sock,null=1G", "size": 1u64 << 30,
                "queues": 2, "connected": true, "limits": {"iops": 10}}}),
        ),
        (
            Reply::done(Answer::Share(share())),
            json!({"version": 1, "ok": true, "result": {
                "socket": "/r/f.sock", "spec": "socket=/r/f.sock,dir=/srv/f,tag=t", "tag": "t",
                "dir": "/srv/f", "queues": 1, "readonly": false, "connected": false}}),
        ),
        (
            Reply::done(Answer::Devices(vec![])),
            json!({"version": 1, "ok": true, "result": []}),
        ),
        (
            Reply::done(Answer::Devices(vec![
                DeviceEntry::Disk(entry()),
                DeviceEntry::Fs(share()),
            ])),
            json!({"version": 1, "ok": true, "result": [
                {"kind": "disk", "socket": "/r/a.sock", "spec": "socket=/r/a.sock,null=1G",
                    "size": 1u64 << 30, "queues": 2, "connected": true, "limits": {"iops": 10}},
                {"kind": "fs", "socket": "/r/f.sock", "spec": "socket=/r/f.sock,dir=/srv/f,tag=t",
                    "tag": "t", "dir": "/srv/f", "queues": 1, "readonly": false,
                    "connected": false}]}),
        ),
        (
            Reply::done(Answer::Stats(vec![disk_stats()])),
            json!({"version": 1, "ok": true, "result": [{
                "socket": "/r/a.sock",
                "kind": "disk",
                "queues": [{"queue": 0, "requests": 3, "errors": 1, "read_bytes": 4096,
                    "write_bytes": 512, "ops": {"read": 2, "write": 1}, "in_flight": 0,
                    "passes": 9, "busy_passes": 3, "unsupported": 0, "sleep_ms": 5,
                    "latency_us": {"p50": 8, "p90": 16, "p99": null, "p999": null}}],
                "engine": {"hits": 7}}]}),
        ),
        (
            Reply::done(Answer::Disk(DiskEntry {
                checkpoints: vec![
                    CheckpointEntry {
                        name: "a".into(),
                        valid: true,
                        reason: None,
                    },
                    CheckpointEntry {
                        name: "b".into(),
                        valid: false,
                        reason: Some("vbmq did not stop cleanly".into()),
                    },
                ],
                ..entry()
            })),
            json!({"version": 1, "ok": true, "result": {
                "socket": "/r/a.sock", "spec": "socket=/r/a.sock,null=1G", "size": 1u64 << 30,
                "queues": 2, "connected": true, "limits": {"iops": 10},
                "checkpoints": [{"name": "a", "valid": true},
                    {"name": "b", "valid": false, "reason": "vbmq did not stop cleanly"}]}}),
        ),
        (
            Reply::done(Answer::Changes(ChangedBlocks {
                name: "a".into(),
                block_size: 65536,
                capacity: 1 << 20,
                extents: vec![Extent {
                    offset: 65536,
                    length: 131072,
                }],
            })),
            json!({"version": 1, "ok": true, "result": {"name": "a", "block_size": 65536,
                "capacity": 1u64 << 20, "extents": [{"offset": 65536, "length": 131072}]}}),
        ),
        (
            Reply::done(Answer::Notes(vec!["added /r/b.sock".into()])),
            json!({"version": 1, "ok": true, "result": ["added /r/b.sock"]}),
        ),
        (
            Reply::done(Answer::Snapshot(SnapshotEntry {
                method: "copy".into(),
                bytes: 1 << 30,
                duration_ms: 1200,
                copied_before_write: 3,
            })),
            json!({"version": 1, "ok": true, "result": {"method": "copy", "bytes": 1u64 << 30,
                "duration_ms": 1200, "copied_before_write": 3}}),
        ),
        (
            Reply::refused("unknown command \"x\""),
            json!({"version": 1, "ok": false, "error": "unknown command \"x\""}),
        ),
    ];
    for (reply, wire) in replies {
        let text = serde_json::to_string(&reply).unwrap();
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), wire);
        assert_eq!(
            serde_json::from_str::<Reply>(&text).unwrap(),
            reply,
            "{text}"
        );
    }
}
