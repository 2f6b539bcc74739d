//! `vbmq bench` end to end on one case: it runs every system it can, prints its tables and writes
//! a well-formed report. Speed is never asserted: the figures of a test run mean nothing.

use std::process::Command;

#[test]
fn quick_bench_of_one_case_writes_a_well_formed_report() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("report");
    let run = Command::new(env!("CARGO_BIN_EXE_vbmq"))
        .args([
            "bench",
            "--quick",
            "--only",
            "matrix/randread-4k-qd1/",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("client on CPU"), "{stdout}");
    assert!(stdout.contains("== Goals"), "{stdout}");

    let json = std::fs::read_to_string(out.join("report.json")).unwrap();
    let report: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(report["complete"], true);
    let cases = report["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 1);
    for point in cases[0]["points"].as_array().unwrap() {
        let system = point["system"].as_str().unwrap();
        let runs = point["runs"].as_array().unwrap();
        if system.starts_with("qsd-") && !point["skipped"].is_null() {
            // qemu-storage-daemon is optional; its absence must be said.
            assert!(
                point["skipped"]
                    .as_str()
                    .unwrap()
                    .contains("qemu-storage-daemon")
            );
            continue;
        }
        // Bare metal and every vbmq mode must have run three times; on a loaded machine a run
        // may stall and be retried, and a missing run must be explained in `errors`.
        let errors = point["errors"].as_array().unwrap();
        assert!(!runs.is_empty(), "{system}: {errors:?}");
        assert!(runs.len() == 3 || !errors.is_empty(), "{system}");
        for r in runs {
            assert!(r["iops"].as_f64().unwrap() > 0.0, "{system}");
            assert!(r["p50_us"].as_f64().unwrap() <= r["p99_us"].as_f64().unwrap());
        }
        let median = point["summary"]["iops"]["median"].as_f64().unwrap();
        assert!(point["summary"]["iops"]["min"].as_f64().unwrap() <= median);
        if system.starts_with("vbmq") {
            assert!(point["summary"]["backend_cpu_s_per_mio"]["median"].is_number());
        }
    }
    // The case measured holds the QD1 latency goal's both sides: it must have a ratio.
    let goals = report["goals"].as_array().unwrap();
    let qd1 = goals
        .iter()
        .find(|g| g["goal"] == "randread 4K QD1 p50, polling client, mode=poll")
        .unwrap();
    assert!(qd1["ratio"].as_f64().unwrap() > 0.0, "{qd1}");
    assert!(qd1["met"].is_boolean());
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(
        md.contains("## Goals") && md.contains("| bare metal |"),
        "{md}"
    );
    let svg = std::fs::read_to_string(out.join("matrix.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    // The disk it created (`creating ... disk PATH`) is gone.
    let disk = stdout
        .lines()
        .find(|l| l.starts_with("creating"))
        .and_then(|l| l.split_whitespace().last())
        .unwrap();
    assert!(disk.ends_with(".raw"), "{disk}");
    assert!(!std::path::Path::new(disk).exists(), "{disk} left behind");
}

#[test]
fn bench_rejects_unknown_arguments() {
    let run = Command::new(env!("CARGO_BIN_EXE_vbmq"))
        .args(["bench", "--fast"])
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&run.stderr).contains("--fast"));
}
