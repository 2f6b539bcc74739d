//! The engine's contract with the worker: an operation that `push` accepted completes only
//! through `reap`, whatever the kernel says when it is submitted. With `batch=off` each push
//! submits at once; a refused submit must leave the operation queued, not report it failed (the
//! worker would complete the request early and credit its late completion to the next request
//! on that descriptor head).

#![allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // Test sizes are small.

use std::collections::BTreeMap;
use std::io::Write;

use seccompiler::{BpfProgram, SeccompAction, SeccompFilter, TargetArch};
use vbmq::backend::{Disk, EngineOptions, FileDisk, IoOp, IovList};

const LEN: usize = 4096;

/// A filter for the calling thread alone: every `io_uring_enter` fails with EAGAIN.
fn refuse_io_uring_enter() -> BpfProgram {
    let rules = BTreeMap::from([(libc::SYS_io_uring_enter, vec![])]);
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EAGAIN as u32),
        TargetArch::x86_64,
    )
    .expect("filter");
    filter.try_into().expect("compiled filter")
}

#[test]
fn a_pushed_operation_completes_through_reap_even_when_its_submit_is_refused() {
    let mut image = tempfile::NamedTempFile::new_in("/var/tmp").expect("image");
    let pattern: Vec<u8> = (0..LEN * 2).map(|i| (i % 251) as u8).collect();
    image.write_all(&pattern).expect("fill");
    // Buffered and ring-only: the read goes through io_uring on any file system.
    let disk = FileDisk::open(image.path(), true, false)
        .expect("open")
        .ring_only();
    let engine = disk
        .engine(EngineOptions {
            depth: 8,
            batch: false,
            notify: false,
        })
        .expect("engine");
    let mut buffer = vec![0u8; LEN];
    let iov = libc::iovec {
        iov_base: buffer.as_mut_ptr().cast(),
        iov_len: LEN,
    };
    let iov_addr = &iov as *const libc::iovec as usize;

    // A thread of its own carries the filter; this one stays free to submit afterwards.
    let (engine, pushed, submit_refused) = std::thread::spawn(move || {
        let mut engine = engine;
        seccompiler::apply_filter(&refuse_io_uring_enter()).expect("apply filter");
        // SAFETY: `iov` and `buffer` outlive the operation: the test thread keeps both until
        // the completion is reaped below.
        let list = unsafe { IovList::new(iov_addr as *const libc::iovec, 1) };
        let op = IoOp::Read {
            offset: LEN as u64,
            iov: list,
        };
        let pushed = engine.push(op, 7).map_err(|e| e.to_string());
        // The filter works: a submit of the still-queued entry is refused too.
        let submit_refused = engine.submit().is_err();
        (engine, pushed, submit_refused)
    })
    .join()
    .expect("filtered thread");
    let mut engine = engine;
    assert!(
        submit_refused,
        "io_uring_enter was not refused: the test proves nothing"
    );
    assert_eq!(pushed, Ok(()), "push reported a queued operation as failed");

    let mut done = Vec::new();
    while done.is_empty() {
        engine.wait().expect("wait");
        engine.reap(&mut |tag, result| done.push((tag, result)));
    }
    assert_eq!(
        done,
        vec![(7, i32::try_from(LEN).unwrap())],
        "one completion, the pushed read's"
    );
    assert_eq!(buffer, pattern[LEN..], "the read's data");
}
