//! Requests and replies as JSON values; the daemon's typed API does the work.

use std::path::Path;

use serde_json::{Value, json};
use vbmq::host::{DiskCounters, DiskInfo, Host};

/// The protocol version every reply carries; a request naming another is refused.
pub const VERSION: u64 = 1;

/// Answers one request line.
pub fn answer(host: &Host, line: &[u8]) -> Value {
    match serde_json::from_slice::<Value>(line) {
        Ok(request) => match dispatch(host, &request) {
            Ok(result) => json!({"version": VERSION, "ok": true, "result": result}),
            Err(error) => error_reply(&error),
        },
        Err(e) => error_reply(&format!("malformed request: {e}")),
    }
}

/// A failed request's reply.
pub fn error_reply(error: &str) -> Value {
    json!({"version": VERSION, "ok": false, "error": error})
}

fn dispatch(host: &Host, request: &Value) -> Result<Value, String> {
    let object = request.as_object().ok_or("a request is a JSON object")?;
    match object.get("version") {
        None => {}
        Some(v) if v.as_u64() == Some(VERSION) => {}
        Some(v) => {
            return Err(format!(
                "unsupported version {v}: this vbmq speaks {VERSION}"
            ));
        }
    }
    let command = object
        .get("command")
        .and_then(Value::as_str)
        .ok_or("missing \"command\"")?;
    let text = |key: &str| {
        object
            .get(key)
            .and_then(Value::as_str)
            .ok_or_else(|| format!("{command}: missing string \"{key}\""))
    };
    match command {
        "add-disk" => host
            .add_disk(text("spec")?)
            .map(|info| disk_json(&info))
            .map_err(|e| e.to_string()),
        "remove-disk" => host
            .remove_disk(Path::new(text("socket")?))
            .map(|()| Value::Null)
            .map_err(|e| e.to_string()),
        "resize" => {
            let size = match object.get("size") {
                Some(Value::Number(n)) => n.as_u64(),
                Some(Value::String(text)) => vbmq::config::parse_size(text),
                _ => None,
            }
            .ok_or("resize: \"size\" must be bytes or a size such as 40G")?;
            let force = object
                .get("force")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            host.resize(Path::new(text("socket")?), size, force)
                .map(|info| disk_json(&info))
                .map_err(|e| e.to_string())
        }
        "set-limits" => {
            let limits = vbmq::config::parse_limits(text("limits")?).map_err(|e| e.to_string())?;
            host.set_limits(Path::new(text("socket")?), limits)
                .map(|info| disk_json(&info))
                .map_err(|e| e.to_string())
        }
        "reload" => host
            .reload()
            .map(|done| json!(done))
            .map_err(|e| e.to_string()),
        "list" => Ok(Value::Array(host.list().iter().map(disk_json).collect())),
        "stats" => {
            let socket = object.get("socket").and_then(Value::as_str).map(Path::new);
            host.stats(socket)
                .map(|disks| Value::Array(disks.iter().map(stats_json).collect()))
                .map_err(|e| e.to_string())
        }
        other => Err(format!("unknown command {other:?}")),
    }
}

fn disk_json(info: &DiskInfo) -> Value {
    json!({
        "socket": info.socket.display().to_string(),
        "spec": info.spec,
        "size": info.size,
        "queues": info.queues,
        "connected": info.connected,
        "limits": limits_json(&info.limits),
    })
}

/// The limits set (zero: none), by their `--disk` key.
fn limits_json(limits: &vbmq::worker::Limits) -> Value {
    let all = [
        ("iops", limits.iops),
        ("read-iops", limits.read_iops),
        ("write-iops", limits.write_iops),
        ("bps", limits.bps),
        ("read-bps", limits.read_bps),
        ("write-bps", limits.write_bps),
        ("iops-burst", limits.iops_burst),
        ("bps-burst", limits.bps_burst),
    ];
    Value::Object(
        all.iter()
            .filter(|(_, value)| *value > 0)
            .map(|(key, value)| ((*key).to_string(), json!(value)))
            .collect(),
    )
}

fn stats_json(disk: &DiskCounters) -> Value {
    let queues: Vec<Value> = disk
        .queues
        .iter()
        .enumerate()
        .map(|(index, q)| {
            let ops: serde_json::Map<String, Value> = vbmq::worker::OpKind::NAMES
                .iter()
                .zip(q.ops)
                .map(|(name, count)| ((*name).to_string(), json!(count)))
                .collect();
            let [p50, p90, p99, p999] = q.latency_us;
            json!({
                "queue": index,
                "requests": q.requests,
                "errors": q.errors,
                "read_bytes": q.read_bytes,
                "write_bytes": q.write_bytes,
                "ops": ops,
                "in_flight": q.in_flight,
                "passes": q.passes,
                "busy_passes": q.busy_passes,
                "unsupported": q.unsupported,
                "sleep_ms": q.sleep_ns / 1_000_000,
                "latency_us": {"p50": p50, "p90": p90, "p99": p99, "p999": p999},
            })
        })
        .collect();
    let engine: serde_json::Map<String, Value> = disk
        .engine
        .iter()
        .map(|(name, value)| ((*name).to_string(), json!(value)))
        .collect();
    json!({
        "socket": disk.socket.display().to_string(),
        "queues": queues,
        "engine": engine,
    })
}
