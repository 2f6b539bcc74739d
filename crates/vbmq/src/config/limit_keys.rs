//! The I/O limit keys, shared by `--disk` and `vbmq ctl set-limits`.

use super::size::parse_size;
use super::spec_error::SpecError;
use crate::limits::Limits;

/// The keys, as `--disk` and `set-limits` take them.
pub const LIMIT_KEYS: &[&str] = &[
    "iops",
    "read-iops",
    "write-iops",
    "bps",
    "read-bps",
    "write-bps",
    "iops-burst",
    "bps-burst",
];

/// Sets one limit from `key=value` (requests a second for `*iops*`, a size such as `200M` for
/// `*bps*`; 0 removes the limit). Returns false for a key that is not a limit.
pub fn set_limit(limits: &mut Limits, key: &str, value: &str) -> Result<bool, SpecError> {
    let slot = match key {
        "iops" => &mut limits.iops,
        "read-iops" => &mut limits.read_iops,
        "write-iops" => &mut limits.write_iops,
        "bps" => &mut limits.bps,
        "read-bps" => &mut limits.read_bps,
        "write-bps" => &mut limits.write_bps,
        "iops-burst" => &mut limits.iops_burst,
        "bps-burst" => &mut limits.bps_burst,
        _ => return Ok(false),
    };
    let parsed = if key.contains("iops") {
        value.parse::<u64>().ok()
    } else {
        parse_size(value)
    };
    *slot = parsed.ok_or_else(|| SpecError {
        key: key.into(),
        reason: if key.contains("iops") {
            format!("{value:?} is not a number of requests a second")
        } else {
            format!("{value:?} is not a size such as 200M")
        },
    })?;
    Ok(true)
}

/// `set-limits` text: `iops=20000,bps=200M`, or `none` to remove every limit. Keys not given
/// are not limited.
pub fn parse_limits(text: &str) -> Result<Limits, SpecError> {
    let mut limits = Limits::default();
    if text.trim() == "none" {
        return Ok(limits);
    }
    for item in text.split(',').filter(|item| !item.is_empty()) {
        let (key, value) = item.split_once('=').ok_or_else(|| SpecError {
            key: item.into(),
            reason: "expected key=value".into(),
        })?;
        if !set_limit(&mut limits, key, value)? {
            return Err(SpecError {
                key: key.into(),
                reason: format!("not a limit ({})", LIMIT_KEYS.join(", ")),
            });
        }
    }
    Ok(limits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_parse_and_name_the_bad_key() {
        let l = parse_limits("iops=20000,bps=200M,write-iops=5,bps-burst=1M").unwrap();
        assert_eq!(
            (l.iops, l.bps, l.write_iops, l.bps_burst),
            (20000, 200 << 20, 5, 1 << 20)
        );
        assert_eq!(parse_limits("none").unwrap(), Limits::default());
        assert_eq!(parse_limits("iops=lots").unwrap_err().key, "iops");
        assert_eq!(parse_limits("speed=1").unwrap_err().key, "speed");
        assert_eq!(parse_limits("bps").unwrap_err().key, "bps");
    }
}
