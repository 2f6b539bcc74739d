//! io_uring restrictions: a ring created with `setup_r_disabled()` only accepts the opcodes vbmq
//! submits, so a bug that lets a guest steer an SQE still cannot open files or sockets.

use io_uring::{Submitter, opcode, register::Restriction, squeue::Flags};

/// The SQE opcodes vbmq's storage engine submits.
pub const URING_OPCODES: &[u8] = &[
    opcode::Read::CODE,
    opcode::Write::CODE,
    opcode::Readv::CODE,
    opcode::Writev::CODE,
    opcode::ReadFixed::CODE,
    opcode::WriteFixed::CODE,
    opcode::Fsync::CODE,
    opcode::Fallocate::CODE,
    opcode::Nop::CODE,
];

/// What a restricted ring may still do besides [`URING_OPCODES`].
#[derive(Clone, Copy, Debug, Default)]
pub struct RingPolicy<'a> {
    /// More SQE opcodes the engine uses.
    pub extra_ops: &'a [u8],
    /// `io_uring_register` operations still needed after enabling (e.g. re-registering buffers
    /// when the guest memory table changes). Everything else is refused.
    pub register_ops: &'a [u8],
    /// Every SQE must use `IOSQE_FIXED_FILE`: only registered files are reachable.
    pub fixed_files_only: bool,
}

/// Registers the policy on a ring built with `setup_r_disabled()` and enables the ring.
/// Requires Linux 5.10; a ring not created disabled gets `EBADFD`.
pub fn restrict_ring(submitter: &Submitter<'_>, policy: &RingPolicy<'_>) -> std::io::Result<()> {
    let mut restrictions: Vec<Restriction> = URING_OPCODES
        .iter()
        .chain(policy.extra_ops)
        .map(|&op| Restriction::sqe_op(op))
        .chain(
            policy
                .register_ops
                .iter()
                .map(|&op| Restriction::register_op(op)),
        )
        .collect();
    if policy.fixed_files_only {
        restrictions.push(Restriction::sqe_flags_required(Flags::FIXED_FILE.bits()));
    }
    restrictions.push(Restriction::sqe_flags_allowed(
        (Flags::FIXED_FILE | Flags::IO_LINK | Flags::IO_DRAIN | Flags::ASYNC).bits(),
    ));
    submitter.register_restrictions(&mut restrictions)?;
    submitter.register_enable_rings()
}
