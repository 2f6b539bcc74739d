//! `on` or `off`, as every switch key takes it.

use super::spec_error::{SpecError, bad};

/// A switch key's value: `on`, `true`, `yes`, `1` or their opposites.
pub(super) fn on_off(key: &str, value: &str) -> Result<bool, SpecError> {
    match value {
        "on" | "true" | "yes" | "1" => Ok(true),
        "off" | "false" | "no" | "0" => Ok(false),
        _ => Err(bad(key, format!("expected on or off, got {value:?}"))),
    }
}
