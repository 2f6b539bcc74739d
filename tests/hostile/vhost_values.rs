//! Values the virtio spec or the device forbid, in otherwise well-formed vhost-user messages:
//! each must be refused (an error reply, or the connection closed).

use vhost::VhostBackend;
use vhost::vhost_user::VhostUserFrontend;
use vhost::vhost_user::message::VhostUserConfigFlags;
use virtio_bindings::virtio_config::VIRTIO_F_VERSION_1;

use super::daemon::QUEUE_SIZE;
use super::frontend::wanted_features;
use super::memory::MEMORY_END;
use super::raw::{Answer, NEED_REPLY, Raw, VERSION};
use super::vhost::{Must, VhostCase, acked, mapped, refused, vcase};

const GET_FEATURES: u32 = 1;
const SET_VRING_BASE: u32 = 10;

pub fn cases(v: &mut Vec<VhostCase>) {
    for num in [3u16, 100, 255] {
        v.push(vcase(
            format!("SET_VRING_NUM {num} (not a power of two)"),
            Must::BeRefused,
            move |s| refused(acked(s)?.frontend.set_vring_num(0, num)),
        ));
    }
    for base in [0x1_0000u32, 0x8000_0000, u32::MAX] {
        v.push(vcase(
            format!("SET_VRING_BASE {base:#x} (past 16 bits)"),
            Must::BeRefused,
            move |s| {
                let raw = Raw::connect(s);
                raw.handshake(wanted_features());
                let body: Vec<u8> = [0u32.to_le_bytes(), base.to_le_bytes()].concat();
                raw.message(SET_VRING_BASE, VERSION | NEED_REPLY, 8, &body, &[]);
                Ok(raw.answer().is_refusal())
            },
        ));
    }
    let size = u64::from(QUEUE_SIZE);
    // Each ring starting inside guest memory and ending past it.
    for (ring, len) in [
        ("descriptor table", 16 * size),
        ("avail ring", 6 + 2 * size),
        ("used ring", 6 + 8 * size),
    ] {
        v.push(vcase(
            format!("SET_VRING_ADDR with the {ring} running past guest memory"),
            Must::BeRefused,
            move |s| {
                let mut g = mapped(s)?;
                g.frontend
                    .set_vring_num(0, QUEUE_SIZE)
                    .map_err(|e| e.to_string())?;
                let mut config = g.vring_config(QUEUE_SIZE);
                // Aligned as each ring must be, so that only its end is wrong.
                let at = g.ram.host_addr(MEMORY_END - (len / 2) / 16 * 16);
                match ring {
                    "descriptor table" => config.desc_table_addr = at,
                    "avail ring" => config.avail_ring_addr = at,
                    _ => config.used_ring_addr = at,
                }
                refused(g.frontend.set_vring_addr(0, &config))
            },
        ));
    }
    for (offset, len) in [(0u32, 8usize), (20, 4), (32, 1), (0, 60)] {
        v.push(vcase(
            format!("SET_CONFIG of {len} bytes at {offset} (read-only fields)"),
            Must::BeRefused,
            move |s| {
                let mut g = acked(s)?;
                let buf = vec![0x5a; len];
                refused(
                    g.frontend
                        .set_config(offset, VhostUserConfigFlags::WRITABLE, &buf),
                )
            },
        ));
    }
    v.push(vcase(
        "SET_FEATURES without VIRTIO_F_VERSION_1",
        Must::BeRefused,
        |s| {
            let raw = Raw::connect(s);
            // The crate acknowledges SET_FEATURES itself; vbmq then closes the connection,
            // so the next request gets no answer.
            raw.handshake(wanted_features() & !(1 << VIRTIO_F_VERSION_1));
            std::thread::sleep(std::time::Duration::from_millis(100));
            raw.message(GET_FEATURES, VERSION, 0, &[], &[]);
            Ok(raw.answer() == Answer::Closed)
        },
    ));
}
