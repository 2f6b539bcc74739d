//! The vhost-user battery: a frontend that lies. Each case gets a fresh connection; afterwards
//! the next frontend must be served, with the checks of every request case.

use std::path::Path;

use vhost::VhostBackend;
use vhost::vhost_user::VhostUserFrontend;
use vmm_sys_util::eventfd::EventFd;

use super::daemon::{QUEUE_SIZE, TARGET_QUEUES};
use super::frontend::Guest;
use super::memory::GuestRam;

/// What a hostile frontend must get.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Must {
    /// An error reply or the connection closed.
    BeRefused,
    /// Anything, as long as vbmq survives and serves the next frontend.
    Survive,
}

pub type Attack = Box<dyn Fn(&Path) -> Result<bool, String>>;

/// A case: `attack` returns whether the backend refused.
pub struct VhostCase {
    pub name: String,
    pub must: Must,
    pub attack: Attack,
}

pub fn vcase(
    name: impl Into<String>,
    must: Must,
    attack: impl Fn(&Path) -> Result<bool, String> + 'static,
) -> VhostCase {
    VhostCase {
        name: name.into(),
        must,
        attack: Box::new(attack),
    }
}

/// A negotiated frontend with acknowledgements on, memory not yet sent.
pub fn acked(socket: &Path) -> Result<Guest, String> {
    let guest = Guest::handshake(socket, GuestRam::new()).map_err(|e| format!("handshake: {e}"))?;
    if !guest.want_acks(true) {
        return Err("vbmq does not offer REPLY_ACK".into());
    }
    Ok(guest)
}

/// As [`acked`], with the guest's memory table sent.
pub fn mapped(socket: &Path) -> Result<Guest, String> {
    let guest = acked(socket)?;
    guest
        .frontend
        .set_mem_table(&guest.ram.regions())
        .map_err(|e| e.to_string())?;
    Ok(guest)
}

/// A frontend with memory and queue 0 set up, acknowledgements on.
pub fn running(socket: &Path) -> Result<Guest, String> {
    let guest = Guest::connect(socket, QUEUE_SIZE).map_err(|e| format!("connect: {e}"))?;
    guest.want_acks(true);
    Ok(guest)
}

pub fn refused<T>(result: vhost::Result<T>) -> Result<bool, String> {
    Ok(result.is_err())
}

pub fn cases() -> Vec<VhostCase> {
    let mut v = Vec::new();
    vring_index(&mut v);
    vring_num(&mut v);
    super::vhost_memory::cases(&mut v);
    super::vhost_raw::cases(&mut v);
    super::vhost_lifecycle::cases(&mut v);
    super::vhost_values::cases(&mut v);
    super::vhost_inflight::cases(&mut v);
    super::dirty_log::cases(&mut v);
    v
}

fn vring_index(v: &mut Vec<VhostCase>) {
    let bad = [
        usize::from(TARGET_QUEUES),
        usize::from(TARGET_QUEUES) + 1,
        255,
        0xffff,
        u32::MAX as usize,
    ];
    for index in bad {
        v.push(vcase(
            format!("SET_VRING_NUM on vring {index}"),
            Must::BeRefused,
            move |s| refused(acked(s)?.frontend.set_vring_num(index, 64)),
        ));
        v.push(vcase(
            format!("SET_VRING_BASE on vring {index}"),
            Must::BeRefused,
            move |s| refused(acked(s)?.frontend.set_vring_base(index, 0)),
        ));
        v.push(vcase(
            format!("SET_VRING_ADDR on vring {index}"),
            Must::BeRefused,
            move |s| {
                let mut g = mapped(s)?;
                let config = g.vring_config(64);
                refused(g.frontend.set_vring_addr(index, &config))
            },
        ));
        v.push(vcase(
            format!("GET_VRING_BASE on vring {index}"),
            Must::BeRefused,
            move |s| refused(acked(s)?.frontend.get_vring_base(index)),
        ));
        v.push(vcase(
            format!("SET_VRING_ENABLE on vring {index}"),
            Must::BeRefused,
            move |s| refused(acked(s)?.frontend.set_vring_enable(index, true)),
        ));
    }
    // Call/kick/err carry the index in the low byte of a u64; 255 is past any queue count.
    for index in [usize::from(TARGET_QUEUES), 255] {
        v.push(vcase(
            format!("SET_VRING_KICK on vring {index}"),
            Must::BeRefused,
            move |s| {
                refused(
                    acked(s)?
                        .frontend
                        .set_vring_kick(index, &EventFd::new(0).unwrap()),
                )
            },
        ));
        v.push(vcase(
            format!("SET_VRING_CALL on vring {index}"),
            Must::BeRefused,
            move |s| {
                refused(
                    acked(s)?
                        .frontend
                        .set_vring_call(index, &EventFd::new(0).unwrap()),
                )
            },
        ));
        v.push(vcase(
            format!("SET_VRING_ERR on vring {index}"),
            Must::BeRefused,
            move |s| {
                refused(
                    acked(s)?
                        .frontend
                        .set_vring_err(index, &EventFd::new(0).unwrap()),
                )
            },
        ));
    }
}

fn vring_num(v: &mut Vec<VhostCase>) {
    for num in [0u16, QUEUE_SIZE * 2, 32768, u16::MAX] {
        v.push(vcase(
            format!("SET_VRING_NUM {num}"),
            Must::BeRefused,
            move |s| refused(acked(s)?.frontend.set_vring_num(0, num)),
        ));
    }
}
