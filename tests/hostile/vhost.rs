//! The vhost-user battery: a frontend that lies. Each case gets a fresh connection; afterwards
//! the next frontend must be served, with the checks of every request case.

use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::Duration;

use vhost::vhost_user::VhostUserFrontend;
use vhost::{VhostBackend, VhostUserMemoryRegionInfo, VringConfigData};
use virtio_bindings::virtio_blk::VIRTIO_BLK_T_IN;
use vmm_sys_util::eventfd::EventFd;

use super::chain::{Ctx, Seg};
use super::daemon::{QUEUE_SIZE, TARGET_QUEUES};
use super::frontend::{Guest, wanted_features};
use super::memory::{GuestRam, memfd};
use super::raw::{Answer, NEED_REPLY, Raw, VERSION};

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

fn vcase(
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
fn acked(socket: &Path) -> Result<Guest, String> {
    let guest = Guest::handshake(socket, GuestRam::new()).map_err(|e| format!("handshake: {e}"))?;
    if !guest.want_acks(true) {
        return Err("vbmq does not offer REPLY_ACK".into());
    }
    Ok(guest)
}

/// A frontend with memory and queue 0 set up, acknowledgements on.
fn running(socket: &Path) -> Result<Guest, String> {
    let guest = Guest::connect(socket, QUEUE_SIZE).map_err(|e| format!("connect: {e}"))?;
    guest.want_acks(true);
    Ok(guest)
}

fn refused<T>(result: vhost::Result<T>) -> Result<bool, String> {
    Ok(result.is_err())
}

pub fn cases() -> Vec<VhostCase> {
    let mut v = Vec::new();
    vring_index(&mut v);
    vring_num(&mut v);
    memory(&mut v);
    raw_messages(&mut v);
    lifecycle(&mut v);
    racing(&mut v);
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
                let mut g = acked(s)?;
                g.frontend
                    .set_mem_table(&g.ram.regions())
                    .map_err(|e| e.to_string())?;
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
    // Not a power of two: refused, or the queue never runs; either way nothing breaks.
    for num in [3u16, 100, 255] {
        v.push(vcase(
            format!("SET_VRING_NUM {num} then I/O"),
            Must::Survive,
            move |s| {
                let mut g = acked(s)?;
                g.frontend
                    .set_mem_table(&g.ram.regions())
                    .map_err(|e| e.to_string())?;
                if g.start_queue(0, num).is_err() {
                    return Ok(true);
                }
                let mut ctx = Ctx::new(&mut g);
                let hdr = ctx.header(VIRTIO_BLK_T_IN, 0);
                let buf = ctx.buffer(512, None);
                let st = ctx.status();
                let head = ctx.direct(&[Seg::r(hdr, 16), Seg::w(buf, 512), Seg::w(st, 1)]);
                g.publish(&[head]);
                g.wait_used(1, Duration::from_millis(300));
                Ok(false)
            },
        ));
    }
}

fn region(gpa: u64, size: u64, va: u64, offset: u64, fd: i32) -> VhostUserMemoryRegionInfo {
    VhostUserMemoryRegionInfo {
        guest_phys_addr: gpa,
        memory_size: size,
        userspace_addr: va,
        mmap_offset: offset,
        mmap_handle: fd,
    }
}

fn memory(v: &mut Vec<VhostCase>) {
    type Regions = fn(&GuestRam, i32) -> Vec<VhostUserMemoryRegionInfo>;
    let bad: [(&str, Regions); 11] = [
        ("two regions overlapping", |r, fd| {
            let mut regions = r.regions();
            regions[1].guest_phys_addr -= 4096;
            let _ = fd;
            regions
        }),
        ("the same region twice", |r, _| {
            let regions = r.regions();
            vec![regions[0], regions[0]]
        }),
        ("a region wrapping the guest address space", |r, _| {
            let mut regions = r.regions();
            regions[1].guest_phys_addr = u64::MAX - 4095;
            regions
        }),
        ("a region wrapping the frontend address space", |r, _| {
            let mut regions = r.regions();
            regions[1].userspace_addr = u64::MAX - 4095;
            regions
        }),
        ("an mmap offset of 2^64 - 4096", |r, _| {
            let mut regions = r.regions();
            regions[1].mmap_offset = u64::MAX - 4095;
            regions
        }),
        ("an mmap offset of 2^62", |r, _| {
            let mut regions = r.regions();
            regions[1].mmap_offset = 1 << 62;
            regions
        }),
        ("an mmap offset + size past the end of the file", |r, _| {
            let mut regions = r.regions();
            regions[1].mmap_offset = 64 << 20;
            regions
        }),
        ("a region larger than its file", |r, _| {
            let mut regions = r.regions();
            regions[1].memory_size = 256 << 20;
            regions
        }),
        ("a region of 2^63 bytes", |r, _| {
            let mut regions = r.regions();
            regions[1].memory_size = 1 << 63;
            regions
        }),
        ("a region whose fd is an eventfd", |r, fd| {
            let mut regions = r.regions();
            regions[1].mmap_handle = fd;
            regions
        }),
        ("a region whose fd is read-only", |r, _| {
            let mut regions = r.regions();
            let ro = std::fs::File::open("/proc/self/exe").unwrap();
            regions[1].mmap_handle = ro.as_raw_fd();
            std::mem::forget(ro);
            regions
        }),
    ];
    for (what, regions_of) in bad {
        v.push(vcase(
            format!("SET_MEM_TABLE with {what}"),
            Must::BeRefused,
            move |s| {
                let g = acked(s)?;
                let efd = EventFd::new(0).unwrap();
                let regions = regions_of(&g.ram, efd.as_raw_fd());
                refused(g.frontend.set_mem_table(&regions))
            },
        ));
    }
    v.push(vcase(
        "SET_MEM_TABLE with 8 tiny regions",
        Must::Survive,
        |s| {
            let g = acked(s)?;
            let file = memfd(c"tiny", 8 * 4096);
            let base = g.ram.host_addr(0);
            let regions: Vec<_> = (0..8u64)
                .map(|i| {
                    region(
                        i * 0x10_0000,
                        4096,
                        base + i * 4096,
                        i * 4096,
                        file.as_raw_fd(),
                    )
                })
                .collect();
            refused(g.frontend.set_mem_table(&regions))
        },
    ));
    v.push(vcase(
        "SET_MEM_TABLE while requests are in flight",
        Must::Survive,
        |s| {
            let mut g = running(s)?;
            let mut ctx = Ctx::new(&mut g);
            let mut heads = Vec::new();
            for i in 0..32u64 {
                let hdr = ctx.header(VIRTIO_BLK_T_IN, i * 64);
                let buf = ctx.buffer(32 << 10, None);
                let st = ctx.status();
                heads.push(ctx.direct(&[Seg::r(hdr, 16), Seg::w(buf, 32 << 10), Seg::w(st, 1)]));
            }
            g.publish(&heads);
            let fresh = GuestRam::new();
            let result = g.frontend.set_mem_table(&fresh.regions());
            g.wait_used(heads.len(), Duration::from_secs(2));
            // The old memory stays mapped in this process; vbmq may have finished into either map.
            Ok(result.is_err())
        },
    ));
    // Accepted or not, a mapping the file cannot back must not let a guest crash vbmq (SIGBUS).
    type Beyond = fn(&mut VhostUserMemoryRegionInfo);
    let beyond: [(&str, Beyond); 2] = [
        ("larger than its file", |r| r.memory_size = 64 << 20),
        ("at an mmap offset past the end of its file", |r| {
            r.mmap_offset = 1 << 40
        }),
    ];
    for (what, edit) in beyond {
        v.push(vcase(
            format!("a request into a region {what}"),
            Must::Survive,
            move |s| {
                let mut g = acked(s)?;
                let mut regions = g.ram.regions();
                edit(&mut regions[1]);
                if g.frontend.set_mem_table(&regions).is_err() {
                    return Ok(true);
                }
                g.start_queue(0, QUEUE_SIZE).map_err(|e| e.to_string())?;
                // Header, data and status all in the part of region 1 the file does not back.
                let past = super::memory::REGION1_GPA + (2 << 20);
                let mut ctx = Ctx::new(&mut g);
                let head = ctx.direct(&[
                    Seg::r(past, 16),
                    Seg::w(past + 4096, 512),
                    Seg::w(past + 8192, 1),
                ]);
                g.publish(&[head]);
                g.wait_used(1, Duration::from_millis(500));
                Ok(false)
            },
        ));
    }
    v.push(vcase(
        "REM_MEM_REG of a region that was never added",
        Must::Survive,
        |s| {
            let mut g = acked(s)?;
            let regions = g.ram.regions();
            refused(g.frontend.remove_mem_region(&regions[1]))
        },
    ));
    v.push(vcase(
        "ADD_MEM_REG overlapping an existing region",
        Must::BeRefused,
        |s| {
            let mut g = acked(s)?;
            let regions = g.ram.regions();
            g.frontend
                .add_mem_region(&regions[0])
                .map_err(|e| format!("first ADD_MEM_REG: {e}"))?;
            let mut overlap = regions[1];
            overlap.guest_phys_addr = regions[0].guest_phys_addr + 4096;
            refused(g.frontend.add_mem_region(&overlap))
        },
    ));
    v.push(vcase(
        "ADD_MEM_REG beyond the slot limit",
        Must::BeRefused,
        |s| {
            let mut g = acked(s)?;
            let file = memfd(c"slots", 4096);
            let base = g.ram.host_addr(0);
            for i in 0..600u64 {
                let r = region(i << 20, 4096, base + (i << 12), 0, file.as_raw_fd());
                if g.frontend.add_mem_region(&r).is_err() {
                    return Ok(true);
                }
            }
            Ok(false)
        },
    ));
}

fn raw_messages(v: &mut Vec<VhostCase>) {
    let features = wanted_features();
    v.push(vcase(
        "a header cut short, then hang up",
        Must::Survive,
        |s| {
            let raw = Raw::connect(s);
            raw.send(&[1, 0, 0, 0, 1, 0], &[]);
            Ok(true)
        },
    ));
    v.push(vcase(
        "a header claiming 4 GiB of payload",
        Must::BeRefused,
        |s| {
            let raw = Raw::connect(s);
            raw.message(2, VERSION | NEED_REPLY, u32::MAX, &[0; 8], &[]);
            Ok(raw.answer().is_refusal())
        },
    ));
    v.push(vcase(
        "a header claiming 4096 bytes, 8 sent, then hang up",
        Must::Survive,
        |s| {
            let raw = Raw::connect(s);
            raw.message(2, VERSION | NEED_REPLY, 4096, &[0; 8], &[]);
            Ok(true)
        },
    ));
    v.push(vcase(
        "SET_FEATURES with a 0-byte body",
        Must::BeRefused,
        move |s| {
            let raw = Raw::connect(s);
            raw.handshake(features);
            raw.message(2, VERSION | NEED_REPLY, 0, &[], &[]);
            Ok(raw.answer().is_refusal())
        },
    ));
    v.push(vcase(
        "SET_FEATURES with a 4-byte body",
        Must::BeRefused,
        move |s| {
            let raw = Raw::connect(s);
            raw.handshake(features);
            raw.message(2, VERSION | NEED_REPLY, 4, &[0; 4], &[]);
            Ok(raw.answer().is_refusal())
        },
    ));
    for code in [0u32, 99, 0x7fff_ffff, u32::MAX] {
        v.push(vcase(
            format!("unknown request {code:#x}"),
            Must::BeRefused,
            move |s| {
                let raw = Raw::connect(s);
                raw.handshake(features);
                raw.message(code, VERSION | NEED_REPLY, 8, &[0; 8], &[]);
                Ok(raw.answer().is_refusal())
            },
        ));
    }
    v.push(vcase(
        "a reply flag on a request",
        Must::Survive,
        move |s| {
            let raw = Raw::connect(s);
            raw.message(1, VERSION | 0x4, 0, &[], &[]);
            Ok(raw.answer().is_refusal())
        },
    ));
    v.push(vcase("protocol version 2", Must::BeRefused, move |s| {
        let raw = Raw::connect(s);
        raw.message(1, 0x2, 0, &[], &[]);
        Ok(raw.answer() == Answer::Closed)
    }));
    // SET_MEM_TABLE: num_regions, padding, then 32-byte regions.
    let table = |n: u32, regions: &[VhostUserMemoryRegionInfo]| -> Vec<u8> {
        let mut body = n.to_le_bytes().to_vec();
        body.extend_from_slice(&[0; 4]);
        for r in regions {
            for field in [
                r.guest_phys_addr,
                r.memory_size,
                r.userspace_addr,
                r.mmap_offset,
            ] {
                body.extend_from_slice(&field.to_le_bytes());
            }
        }
        body
    };
    type Table = fn(&GuestRam) -> (u32, Vec<VhostUserMemoryRegionInfo>, usize);
    let tables: [(&str, Table); 6] = [
        ("0 regions", |_| (0, vec![], 0)),
        ("num_regions 9 (above the limit of 8)", |r| {
            (9, vec![r.regions()[0]; 9], 9)
        }),
        ("num_regions 2 but one region in the body", |r| {
            (2, vec![r.regions()[0]], 2)
        }),
        ("one region and three fds", |r| (1, vec![r.regions()[0]], 3)),
        ("two regions and one fd", |r| (2, r.regions(), 1)),
        ("a region of size 0", |r| {
            let mut regions = r.regions();
            regions[1].memory_size = 0;
            (2, regions, 2)
        }),
    ];
    for (what, table_of) in tables {
        v.push(vcase(
            format!("raw SET_MEM_TABLE with {what}"),
            Must::BeRefused,
            move |s| {
                let raw = Raw::connect(s);
                raw.handshake(features);
                let ram = GuestRam::new();
                let (n, regions, fds) = table_of(&ram);
                let body = table(n, &regions);
                let fd_list = vec![ram.file.as_raw_fd(); fds];
                raw.message(5, VERSION | NEED_REPLY, body.len() as u32, &body, &fd_list);
                Ok(raw.answer().is_refusal())
            },
        ));
    }
    v.push(vcase(
        "SET_VRING_KICK carrying two fds",
        Must::Survive,
        move |s| {
            let raw = Raw::connect(s);
            raw.handshake(features);
            let (a, b) = (EventFd::new(0).unwrap(), EventFd::new(0).unwrap());
            raw.message(
                12,
                VERSION | NEED_REPLY,
                8,
                &0u64.to_le_bytes(),
                &[a.as_raw_fd(), b.as_raw_fd()],
            );
            Ok(raw.answer().is_refusal())
        },
    ));
    v.push(vcase(
        "GET_CONFIG of 4096 bytes at offset 2^32 - 16",
        Must::BeRefused,
        move |s| {
            let raw = Raw::connect(s);
            raw.handshake(features);
            let mut body = (u32::MAX - 15).to_le_bytes().to_vec();
            body.extend_from_slice(&4096u32.to_le_bytes());
            body.extend_from_slice(&0u32.to_le_bytes());
            body.extend_from_slice(&[0; 4096]);
            raw.message(24, VERSION, body.len() as u32, &body, &[]);
            // Refused, or answered without crashing; a reply must not exceed what was asked.
            Ok(match raw.answer() {
                Answer::Reply { payload, .. } => payload.len() > 12 + 4096,
                other => other != Answer::Silent,
            })
        },
    ));
    v.push(vcase(
        "SET_CONFIG writing 256 bytes at offset 2^32 - 1",
        Must::BeRefused,
        move |s| {
            let raw = Raw::connect(s);
            raw.handshake(features);
            let mut body = u32::MAX.to_le_bytes().to_vec();
            body.extend_from_slice(&256u32.to_le_bytes());
            body.extend_from_slice(&0u32.to_le_bytes());
            body.extend_from_slice(&[0xff; 256]);
            raw.message(25, VERSION | NEED_REPLY, body.len() as u32, &body, &[]);
            Ok(raw.answer().is_refusal())
        },
    ));
    v.push(vcase(
        "SET_LOG_FD without LOG_SHMFD",
        Must::BeRefused,
        move |s| {
            let raw = Raw::connect(s);
            raw.handshake(features);
            let fd = EventFd::new(0).unwrap();
            raw.message(7, VERSION | NEED_REPLY, 0, &[], &[fd.as_raw_fd()]);
            Ok(raw.answer().is_refusal())
        },
    ));
    v.push(vcase("250 fds on one message", Must::Survive, move |s| {
        let raw = Raw::connect(s);
        raw.handshake(features);
        let fds: Vec<EventFd> = (0..250).map(|_| EventFd::new(0).unwrap()).collect();
        let raw_fds: Vec<i32> = fds.iter().map(|f| f.as_raw_fd()).collect();
        raw.message(12, VERSION | NEED_REPLY, 8, &0u64.to_le_bytes(), &raw_fds);
        Ok(raw.answer().is_refusal())
    }));
}

fn lifecycle(v: &mut Vec<VhostCase>) {
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
        let g = acked(s)?;
        g.frontend
            .set_mem_table(&g.ram.regions())
            .map_err(|e| e.to_string())?;
        Ok(true)
    }));
    v.push(vcase(
        "hang up with requests in flight",
        Must::Survive,
        |s| {
            let mut g = running(s)?;
            let mut ctx = Ctx::new(&mut g);
            let mut heads = Vec::new();
            for i in 0..64u64 {
                let hdr = ctx.header(VIRTIO_BLK_T_IN, i * 16);
                let buf = ctx.buffer(8 << 10, None);
                let st = ctx.status();
                heads.push(ctx.direct(&[Seg::r(hdr, 16), Seg::w(buf, 8 << 10), Seg::w(st, 1)]));
            }
            g.publish(&heads);
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
            let mut g = acked(s)?;
            g.frontend
                .set_mem_table(&g.ram.regions())
                .map_err(|e| e.to_string())?;
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
            let mut g = acked(s)?;
            g.frontend
                .set_mem_table(&g.ram.regions())
                .map_err(|e| e.to_string())?;
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
