//! Request cases about discard and write-zeroes ranges, and the read-only disk.

use virtio_bindings::virtio_blk::*;

use super::battery::{Case, Disk, case};
use super::chain::Seg;
use super::expect::{Expect, FileChange};
use super::memory::MEMORY_END;
use super::requests::{SHAPES, Shape, io, raw};

pub fn cases(v: &mut Vec<Case>) {
    ranges(v);
    readonly(v);
}

fn ranges(v: &mut Vec<Case>) {
    let unmap = VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP;
    for (t, name) in [
        (VIRTIO_BLK_T_DISCARD, "discard"),
        (VIRTIO_BLK_T_WRITE_ZEROES, "write-zeroes"),
    ] {
        let is_wz = t == VIRTIO_BLK_T_WRITE_ZEROES;
        let effect = move |offset: u64, len: u64| {
            if is_wz {
                FileChange::Zero { offset, len }
            } else {
                FileChange::Undefined { offset, len }
            }
        };
        v.push(case(
            format!("valid {name} of one range"),
            Disk::Target,
            move |c, _| {
                let r = c.ranges(&[(256, 16, 0)]);
                let hdr = c.header(t, 0);
                let st = c.status();
                raw(
                    c,
                    Shape::Direct,
                    &[Seg::r(hdr, 16), Seg::r(r, 16), Seg::w(st, 1)],
                );
                Expect::ok(st).with_change(effect(256 * 512, 16 * 512))
            },
        ));
        v.push(case(
            format!("valid {name} of max_seg ranges"),
            Disk::Target,
            move |c, cfg| {
                let max = if is_wz {
                    cfg.max_write_zeroes_seg
                } else {
                    cfg.max_discard_seg
                };
                let list: Vec<_> = (0..u64::from(max)).map(|i| (300 + i * 4, 4, 0)).collect();
                let r = c.ranges(&list);
                let hdr = c.header(t, 0);
                let st = c.status();
                raw(
                    c,
                    Shape::Indirect,
                    &[Seg::r(hdr, 16), Seg::r(r, 16 * max), Seg::w(st, 1)],
                );
                Expect::ok(st).with_change(effect(300 * 512, u64::from(max) * 4 * 512))
            },
        ));
        // (description, ranges given capacity, byte length of the range descriptor or None)
        type Ranges = fn(u64) -> Vec<(u64, u32, u32)>;
        let bad: [(&str, Ranges, Option<u32>, u8); 12] = [
            ("range at capacity", |cap| vec![(cap, 1, 0)], None, IOERR_),
            (
                "range crossing the end",
                |cap| vec![(cap - 1, 2, 0)],
                None,
                IOERR_,
            ),
            ("sector u64::MAX", |_| vec![(u64::MAX, 1, 0)], None, IOERR_),
            (
                "sector + num overflowing",
                |_| vec![(u64::MAX - 2, u32::MAX, 0)],
                None,
                IOERR_,
            ),
            (
                "num_sectors u32::MAX",
                |_| vec![(0, u32::MAX, 0)],
                None,
                IOERR_,
            ),
            (
                "second range bad",
                |cap| vec![(0, 1, 0), (cap + 5, 1, 0)],
                None,
                IOERR_,
            ),
            ("zero ranges", |_| vec![(0, 1, 0)], Some(0), IOERR_),
            ("8-byte range list", |_| vec![(0, 1, 0)], Some(8), IOERR_),
            (
                "24-byte range list",
                |_| vec![(0, 1, 0), (2, 1, 0)],
                Some(24),
                IOERR_,
            ),
            (
                "max_seg + 1 ranges",
                |_| (0..64).map(|i| (i * 2, 1, 0)).collect(),
                Some(17 * 16),
                IOERR_,
            ),
            ("reserved flag bit 1", |_| vec![(0, 1, 2)], None, UNSUPP_),
            (
                "flags 0xffffffff",
                |_| vec![(0, 1, u32::MAX)],
                None,
                UNSUPP_,
            ),
        ];
        for (what, list_of, len, status) in bad {
            v.push(case(
                format!("{name} with {what}"),
                Disk::Target,
                move |c, cfg| {
                    let list = list_of(cfg.capacity);
                    let r = c.ranges(&list);
                    let len = len.unwrap_or(16 * list.len() as u32);
                    let hdr = c.header(t, 0);
                    let st = c.status();
                    raw(
                        c,
                        Shape::Direct,
                        &[Seg::r(hdr, 16), Seg::r(r, len), Seg::w(st, 1)],
                    );
                    Expect::status(st, status)
                },
            ));
        }
        v.push(case(
            format!("{name} ranges far beyond max_seg (4096)"),
            Disk::Target,
            move |c, _| {
                let r = c.alloc(4096 * 16, 16);
                let hdr = c.header(t, 0);
                let st = c.status();
                raw(
                    c,
                    Shape::Direct,
                    &[Seg::r(hdr, 16), Seg::r(r, 4096 * 16), Seg::w(st, 1)],
                );
                Expect::ioerr(st)
            },
        ));
        v.push(case(
            format!("{name} range list device-writable"),
            Disk::Target,
            move |c, _| {
                let r = c.ranges(&[(0, 1, 0)]);
                let hdr = c.header(t, 0);
                let st = c.status();
                raw(
                    c,
                    Shape::Direct,
                    &[Seg::r(hdr, 16), Seg::w(r, 16), Seg::w(st, 1)],
                );
                Expect::ioerr(st)
            },
        ));
        v.push(case(
            format!("{name} range list in two descriptors"),
            Disk::Target,
            move |c, _| {
                // Adjacent ranges, so what they change is one run of sectors.
                let r = c.ranges(&[(0, 1, 0), (1, 1, 0)]);
                let hdr = c.header(t, 0);
                let st = c.status();
                raw(
                    c,
                    Shape::Direct,
                    &[
                        Seg::r(hdr, 16),
                        Seg::r(r, 16),
                        Seg::r(r + 16, 16),
                        Seg::w(st, 1),
                    ],
                );
                // Legal framing (a list may be split anywhere): both ranges are carried out.
                Expect::ok(st).with_change(effect(0, 2 * 512))
            },
        ));
        v.push(case(
            format!("{name} range list outside guest memory"),
            Disk::Target,
            move |c, _| {
                let hdr = c.header(t, 0);
                let st = c.status();
                raw(
                    c,
                    Shape::Direct,
                    &[Seg::r(hdr, 16), Seg::r(MEMORY_END - 8, 16), Seg::w(st, 1)],
                );
                Expect::ioerr(st)
            },
        ));
        v.push(case(
            format!("{name} with no range list"),
            Disk::Target,
            move |c, _| {
                let hdr = c.header(t, 0);
                let st = c.status();
                raw(c, Shape::Direct, &[Seg::r(hdr, 16), Seg::w(st, 1)]);
                Expect::ioerr(st)
            },
        ));
        v.push(case(
            format!("{name} of a range longer than max sectors"),
            Disk::Target,
            move |c, _| {
                let r = c.ranges(&[(0, (1 << 21) + 1, 0)]);
                let hdr = c.header(t, 0);
                let st = c.status();
                raw(
                    c,
                    Shape::Direct,
                    &[Seg::r(hdr, 16), Seg::r(r, 16), Seg::w(st, 1)],
                );
                Expect::ioerr(st)
            },
        ));
    }
    v.push(case(
        "discard with the UNMAP flag",
        Disk::Target,
        move |c, _| {
            let r = c.ranges(&[(0, 1, unmap)]);
            let hdr = c.header(VIRTIO_BLK_T_DISCARD, 0);
            let st = c.status();
            raw(
                c,
                Shape::Direct,
                &[Seg::r(hdr, 16), Seg::r(r, 16), Seg::w(st, 1)],
            );
            Expect::unsupp(st)
        },
    ));
    v.push(case(
        "write-zeroes with UNMAP",
        Disk::Target,
        move |c, _| {
            let r = c.ranges(&[(512, 8, unmap)]);
            let hdr = c.header(VIRTIO_BLK_T_WRITE_ZEROES, 0);
            let st = c.status();
            raw(
                c,
                Shape::Direct,
                &[Seg::r(hdr, 16), Seg::r(r, 16), Seg::w(st, 1)],
            );
            Expect::ok(st).with_change(FileChange::Zero {
                offset: 512 * 512,
                len: 8 * 512,
            })
        },
    ));
}

fn readonly(v: &mut Vec<Case>) {
    for shape in SHAPES {
        v.push(case(
            format!("write to the read-only disk ({shape:?})"),
            Disk::ReadOnly,
            move |c, _| io(c, shape, true, 0, &[4096], Expect::ioerr),
        ));
        v.push(case(
            format!("read from the read-only disk ({shape:?})"),
            Disk::ReadOnly,
            move |c, _| io(c, shape, false, 8, &[4096], Expect::ok),
        ));
        v.push(case(
            format!("flush on the read-only disk ({shape:?})"),
            Disk::ReadOnly,
            move |c, _| {
                let hdr = c.header(VIRTIO_BLK_T_FLUSH, 0);
                let st = c.status();
                raw(c, shape, &[Seg::r(hdr, 16), Seg::w(st, 1)]);
                Expect::ok(st)
            },
        ));
        v.push(case(
            format!("get-id on the read-only disk ({shape:?})"),
            Disk::ReadOnly,
            move |c, _| {
                let hdr = c.header(VIRTIO_BLK_T_GET_ID, 0);
                let buf = c.buffer(20, None);
                let st = c.status();
                raw(c, shape, &[Seg::r(hdr, 16), Seg::w(buf, 20), Seg::w(st, 1)]);
                Expect::ok(st)
            },
        ));
        for (t, name) in [
            (VIRTIO_BLK_T_DISCARD, "discard"),
            (VIRTIO_BLK_T_WRITE_ZEROES, "write-zeroes"),
        ] {
            v.push(case(
                format!("{name} on the read-only disk ({shape:?})"),
                Disk::ReadOnly,
                move |c, _| {
                    let r = c.ranges(&[(0, 8, 0)]);
                    let hdr = c.header(t, 0);
                    let st = c.status();
                    raw(c, shape, &[Seg::r(hdr, 16), Seg::r(r, 16), Seg::w(st, 1)]);
                    // vbmq offers no discard on read-only disks: UNSUPP is as good as IOERR here.
                    Expect::ioerr(st)
                },
            ));
        }
    }
}

const IOERR_: u8 = super::expect::IOERR;
const UNSUPP_: u8 = super::expect::UNSUPP;
