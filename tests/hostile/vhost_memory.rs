//! vhost-user cases about guest memory: regions that overlap, wrap, point past their file or
//! carry the wrong fd, slot limits, and memory tables changed under I/O.

use std::os::fd::AsRawFd;
use std::time::Duration;

use vhost::vhost_user::VhostUserFrontend;
use vhost::{VhostBackend, VhostUserMemoryRegionInfo};
use virtio_bindings::virtio_blk::VIRTIO_BLK_T_IN;
use vmm_sys_util::eventfd::EventFd;

use super::chain::{Ctx, Seg};
use super::daemon::QUEUE_SIZE;
use super::memory::{GuestRam, memfd, region};
use super::vhost::{Must, VhostCase, acked, refused, running, vcase};

pub fn cases(v: &mut Vec<VhostCase>) {
    memory(v);
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
