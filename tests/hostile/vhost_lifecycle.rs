//! vhost-user cases about the connection's life: hang-ups mid-I/O, descriptor and mapping
//! floods, vrings outside memory, and a guest racing the device.

use std::time::Duration;

use vhost::vhost_user::VhostUserFrontend;
use vhost::{VhostBackend, VringConfigData};
use virtio_bindings::virtio_blk::VIRTIO_BLK_T_IN;
use vmm_sys_util::eventfd::EventFd;

use super::chain::{Ctx, Seg};
use super::frontend::Guest;
use super::raw::Raw;
use super::vhost::{Must, VhostCase, mapped, refused, running, vcase};

pub fn cases(v: &mut Vec<VhostCase>) {
    lifecycle(v);
    racing(v);
}

/// Publishes 64 reads of `len` bytes each, 8 KiB apart.
fn reads_in_flight(g: &mut Guest, len: u32) {
    let mut ctx = Ctx::new(g);
    let mut heads = Vec::new();
    for i in 0..64u64 {
        let hdr = ctx.header(VIRTIO_BLK_T_IN, i * 16);
        let buf = ctx.buffer(u64::from(len), None);
        let st = ctx.status();
        heads.push(ctx.direct(&[Seg::r(hdr, 16), Seg::w(buf, len), Seg::w(st, 1)]));
    }
    g.publish(&heads);
}

fn lifecycle(v: &mut Vec<VhostCase>) {
    // A frontend stops a ring with GET_VRING_BASE and restarts from the index it returns (on
    // migration or reconnect): a request taken from the ring but not completed by then is lost,
    // and the guest hangs.
    v.push(vcase(
        "GET_VRING_BASE with requests in flight",
        Must::Survive,
        |s| {
            let mut g = running(s)?;
            reads_in_flight(&mut g, 32 << 10);
            let base = g.frontend.get_vring_base(0).map_err(|e| e.to_string())?;
            let used = g.used_idx();
            if u32::from(used) != base {
                return Err(format!(
                    "GET_VRING_BASE answered {base} while only {used} requests were completed"
                ));
            }
            Ok(false)
        },
    ));
    v.push(vcase(
        "connect and hang up at once, 20 times",
        Must::Survive,
        |s| {
            for _ in 0..20 {
                drop(Raw::connect(s));
            }
            Ok(true)
        },
    ));
    v.push(vcase("hang up after SET_MEM_TABLE", Must::Survive, |s| {
        mapped(s)?;
        Ok(true)
    }));
    v.push(vcase(
        "hang up with requests in flight",
        Must::Survive,
        |s| {
            let mut g = running(s)?;
            reads_in_flight(&mut g, 8 << 10);
            Ok(true)
        },
    ));
    v.push(vcase(
        "SET_VRING_KICK 300 times with new eventfds (fd leak)",
        Must::Survive,
        |s| {
            let g = running(s)?;
            for _ in 0..300 {
                let kick = EventFd::new(libc::EFD_NONBLOCK).unwrap();
                g.frontend
                    .set_vring_kick(0, &kick)
                    .map_err(|e| e.to_string())?;
            }
            Ok(false)
        },
    ));
    v.push(vcase(
        "SET_MEM_TABLE 100 times (mapping leak)",
        Must::Survive,
        |s| {
            let g = running(s)?;
            for _ in 0..100 {
                g.frontend
                    .set_mem_table(&g.ram.regions())
                    .map_err(|e| e.to_string())?;
            }
            Ok(false)
        },
    ));
    v.push(vcase(
        "vring addresses outside guest memory",
        Must::BeRefused,
        |s| {
            let mut g = mapped(s)?;
            g.frontend.set_vring_num(0, 64).map_err(|e| e.to_string())?;
            let mut config: VringConfigData = g.vring_config(64);
            config.used_ring_addr = 0x1000;
            refused(g.frontend.set_vring_addr(0, &config))
        },
    ));
    v.push(vcase(
        "vring that straddles the end of guest memory",
        Must::Survive,
        |s| {
            let mut g = mapped(s)?;
            g.frontend
                .set_vring_num(0, 256)
                .map_err(|e| e.to_string())?;
            let mut config: VringConfigData = g.vring_config(256);
            config.used_ring_addr = g.ram.host_addr(super::memory::MEMORY_END - 64);
            let refused_addr = g.frontend.set_vring_addr(0, &config).is_err();
            if !refused_addr {
                let _ = g.frontend.set_vring_base(0, 0);
                let _ = g.frontend.set_vring_kick(0, &EventFd::new(0).unwrap());
                let _ = g.frontend.set_vring_enable(0, true);
            }
            Ok(refused_addr)
        },
    ));
    v.push(vcase(
        "SET_VRING_BASE far ahead of the ring",
        Must::Survive,
        |s| {
            let g = running(s)?;
            let _ = g.frontend.get_vring_base(0);
            let _ = g.frontend.set_vring_base(0, 40000);
            g.kick();
            std::thread::sleep(Duration::from_millis(50));
            Ok(false)
        },
    ));
    v.push(vcase("RESET_OWNER mid-session", Must::Survive, |s| {
        let g = running(s)?;
        Ok(g.frontend.reset_owner().is_err())
    }));
}

/// A guest that rewrites its descriptors and headers while vbmq reads them (double fetches):
/// lengths, addresses, sectors and types change under the device. Only request types that do
/// not write the disk are used, so the disk must come out unchanged.
fn racing(v: &mut Vec<VhostCase>) {
    v.push(vcase(
        "a guest rewriting descriptors and headers while vbmq reads them",
        Must::Survive,
        |s| {
            use virtio_bindings::virtio_blk::{VIRTIO_BLK_T_FLUSH, VIRTIO_BLK_T_GET_ID};
            use vm_memory::{Bytes, GuestAddress};
            let mut g = running(s)?;
            const REQUESTS: u16 = 32;
            const ROUNDS: usize = 100;
            let mut parts = Vec::new();
            let mut heads = Vec::new();
            {
                let mut ctx = Ctx::new(&mut g);
                for i in 0..u64::from(REQUESTS) {
                    let hdr = ctx.header(VIRTIO_BLK_T_IN, i);
                    let buf = ctx.buffer(4096, None);
                    let st = ctx.status();
                    heads.push(ctx.direct(&[Seg::r(hdr, 16), Seg::w(buf, 4096), Seg::w(st, 1)]));
                    parts.push(hdr);
                }
            }
            let stop = std::sync::atomic::AtomicBool::new(false);
            let mem = g.ram.mem.clone();
            let mut returned = 0usize;
            std::thread::scope(|scope| {
                scope.spawn(|| {
                    let mut x = 0x9e37_79b9_7f4a_7c15u64;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let i = (x % u64::from(REQUESTS)) as usize;
                        let types = [
                            VIRTIO_BLK_T_IN,
                            VIRTIO_BLK_T_GET_ID,
                            VIRTIO_BLK_T_FLUSH,
                            0xff,
                        ];
                        let _ = mem.write_obj(types[(x >> 8) as usize % 4], GuestAddress(parts[i]));
                        let sectors = [0, 7, u64::MAX, 1 << 55, (x >> 20) % 4096];
                        let _ = mem
                            .write_obj(sectors[(x >> 12) as usize % 5], GuestAddress(parts[i] + 8));
                        // The data descriptor's len and addr fields (index 3 * i + 1 of the table).
                        let desc = super::frontend::RING_BASE + 16 * (3 * i as u64 + 1);
                        let lens = [4096u32, 0, 1, 511, u32::MAX, 1 << 31];
                        let _ = mem.write_obj(lens[(x >> 16) as usize % 6], GuestAddress(desc + 8));
                        let addrs = [
                            parts[i] + 4096,
                            1 << 40,
                            u64::MAX - 8,
                            super::memory::MEMORY_END - 100,
                        ];
                        if x.is_multiple_of(7) {
                            let _ =
                                mem.write_obj(addrs[(x >> 24) as usize % 4], GuestAddress(desc));
                        }
                    }
                });
                for _ in 0..ROUNDS {
                    g.publish(&heads);
                    returned += g.wait_used(heads.len(), Duration::from_secs(5)).len();
                }
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
            });
            if returned != ROUNDS * heads.len() {
                return Err(format!(
                    "{} of {} racing requests were returned",
                    returned,
                    ROUNDS * heads.len()
                ));
            }
            Ok(false)
        },
    ));
}
