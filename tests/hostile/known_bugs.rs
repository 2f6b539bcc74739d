//! Cases vbmq fails today, reported to the lead with the exact case. They still run: while a
//! listed case fails it is reported as a known bug; once it passes the battery fails until the
//! entry is removed, so a fix is never silently lost and a regression never silently accepted.

/// (case name prefix, what is wrong).
pub const KNOWN_BUGS: &[(&str, &str)] = &[
    (
        "SET_MEM_TABLE with an mmap offset of 2^62",
        "a region the memfd cannot back is mapped without checking the file size",
    ),
    (
        "SET_MEM_TABLE with an mmap offset + size past the end of the file",
        "a region whose mmap_offset + memory_size exceeds the file size is accepted",
    ),
    (
        "SET_MEM_TABLE with a region larger than its file",
        "a region larger than its file is accepted",
    ),
    (
        "a request into a region larger than its file",
        "CRASH: vbmq dies with SIGBUS (every disk of the process goes down) when a request's \
         header lies in the part of a region its file does not back",
    ),
    (
        "ADD_MEM_REG beyond the slot limit",
        "GET_MAX_MEM_SLOTS says 509 but 600 ADD_MEM_REGs are all accepted: memory regions per \
         connection are unbounded (vhost-user-backend does not enforce its own limit)",
    ),
    (
        "connect and hang up at once",
        "each connection that hangs up before sending a message leaks 2 eventfds; a frontend \
         looping on connect/close exhausts vbmq's descriptors",
    ),
];

/// Known bugs that depend on timing (the battery does not fail when they happen to pass).
pub const TIMING_DEPENDENT: &[&str] = &["connect and hang up at once"];

pub fn known_bug(case: &str) -> Option<&'static str> {
    KNOWN_BUGS
        .iter()
        .find(|(prefix, _)| case.starts_with(prefix))
        .map(|(_, why)| *why)
}
