//! vhost-user cases written byte by byte: lying sizes, unknown requests, wrong fd counts.

use std::os::fd::AsRawFd;

use vhost::VhostUserMemoryRegionInfo;
use vmm_sys_util::eventfd::EventFd;

use super::frontend::wanted_features;
use super::memory::GuestRam;
use super::raw::{Answer, NEED_REPLY, Raw, VERSION};
use super::vhost::{Must, VhostCase, vcase};

pub fn cases(v: &mut Vec<VhostCase>) {
    raw_messages(v);
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
