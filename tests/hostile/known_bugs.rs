//! Cases vbmq fails today, reported to the lead with the exact case. They still run: while a
//! listed case fails it is reported as a known bug; once it passes the battery fails until the
//! entry is removed, so a fix is never silently lost and a regression never silently accepted.

/// (case name prefix, what is wrong).
pub const KNOWN_BUGS: &[(&str, &str)] = &[];

/// Known bugs that depend on timing (the battery does not fail when they happen to pass).
pub const TIMING_DEPENDENT: &[&str] = &[];

pub fn known_bug(case: &str) -> Option<&'static str> {
    KNOWN_BUGS
        .iter()
        .find(|(prefix, _)| case.starts_with(prefix))
        .map(|(_, why)| *why)
}
