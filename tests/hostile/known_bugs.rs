//! Cases vbmq fails today, reported to the lead with the exact case. They still run: while a
//! listed case fails it is reported as a known bug; once it passes the battery fails until the
//! entry is removed, so a fix is never silently lost and a regression never silently accepted.

/// (case name prefix, what is wrong).
pub const KNOWN_BUGS: &[(&str, &str)] = &[
    (
        "read whose data is its only writable buffer",
        "a chain with no separate status descriptor is completed as an empty read: OK is written \
         into the first byte of the data buffer and used length 1 (the status belongs in the \
         last byte, or the chain is broken)",
    ),
    (
        "status outside guest memory",
        "the status byte cannot be written, yet the chain is returned with used length 1",
    ),
    (
        "chain of 3 looping back to descriptor 1",
        "a looping chain is cut by virtio-queue's TTL and then parsed as complete: the status \
         goes to whatever writable descriptor came last",
    ),
    (
        "loop inside an indirect table",
        "a looping indirect chain is completed with OK (used length 513)",
    ),
    (
        "data links to descriptor",
        "a chain whose next index is >= queue size is truncated by virtio-queue and then parsed \
         as complete (its data buffer gets the status)",
    ),
    (
        "status links on past the end of the queue",
        "a status descriptor with NEXT to an invalid index is completed with OK",
    ),
    (
        "indirect entry links past the table",
        "an indirect entry linking past the table is truncated and parsed as complete",
    ),
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
