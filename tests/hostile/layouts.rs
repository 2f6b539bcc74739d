//! Request cases about layout: header, status and data descriptors (sizes, directions, places
//! in and outside guest memory), request types and segment counts.

use virtio_bindings::virtio_blk::*;

use super::battery::{Case, Disk, case};
use super::chain::{Seg, WRITE};
use super::expect::{Expect, FileChange};
use super::memory::{MEMORY_END, REGION1_GPA};
use super::requests::{SHAPES, Shape, io, raw};

const T_IN: u32 = VIRTIO_BLK_T_IN;
const T_OUT: u32 = VIRTIO_BLK_T_OUT;

pub fn cases(v: &mut Vec<Case>) {
    layout(v);
    super::framing::cases(v);
    addresses(v);
    types(v);
    segments(v);
}

fn layout(v: &mut Vec<Case>) {
    for shape in SHAPES {
        for hlen in [0u32, 1, 8, 15] {
            v.push(case(
                format!("header of {hlen} bytes ({shape:?})"),
                Disk::Target,
                move |c, _| {
                    let hdr = c.header(T_OUT, 0);
                    let buf = c.buffer(512, Some(1));
                    let st = c.status();
                    raw(
                        c,
                        shape,
                        &[Seg::r(hdr, hlen), Seg::r(buf, 512), Seg::w(st, 1)],
                    );
                    // The header is the first 16 readable bytes wherever they are: with fewer
                    // than 4 from `hdr`, its type comes from the data (unknown: UNSUPP); with
                    // more, its sector does (past the end), and the data is not whole sectors.
                    if hlen < 4 {
                        Expect::unsupp(st)
                    } else {
                        Expect::ioerr(st)
                    }
                },
            ));
        }
        v.push(case(
            format!("header split 8+8 ({shape:?})"),
            Disk::Target,
            move |c, _| {
                let hdr = c.header(T_IN, 2);
                let buf = c.buffer(512, None);
                let st = c.status();
                raw(
                    c,
                    shape,
                    &[
                        Seg::r(hdr, 8),
                        Seg::r(hdr + 8, 8),
                        Seg::w(buf, 512),
                        Seg::w(st, 1),
                    ],
                );
                Expect::ok(st).with_read(vec![(buf, 512)], 2 * 512)
            },
        ));
        v.push(case(
            format!("header device-writable ({shape:?})"),
            Disk::Target,
            move |c, _| {
                let hdr = c.header(T_IN, 0);
                let buf = c.buffer(512, None);
                let st = c.status();
                raw(
                    c,
                    shape,
                    &[Seg::w(hdr, 16), Seg::w(buf, 512), Seg::w(st, 1)],
                );
                Expect::ioerr(st)
            },
        ));
        v.push(case(
            format!("read into a device-readable buffer ({shape:?})"),
            Disk::Target,
            move |c, _| {
                let hdr = c.header(T_IN, 0);
                let buf = c.buffer(512, Some(9));
                let st = c.status();
                raw(
                    c,
                    shape,
                    &[Seg::r(hdr, 16), Seg::r(buf, 512), Seg::w(st, 1)],
                );
                Expect::ioerr(st)
            },
        ));
        v.push(case(
            format!("write from a device-writable buffer ({shape:?})"),
            Disk::Target,
            move |c, _| {
                let hdr = c.header(T_OUT, 0);
                let buf = c.buffer(512, Some(9));
                let st = c.status();
                raw(
                    c,
                    shape,
                    &[Seg::r(hdr, 16), Seg::w(buf, 512), Seg::w(st, 1)],
                );
                Expect::ioerr(st)
            },
        ));
        v.push(case(
            format!("read with mixed-direction data ({shape:?})"),
            Disk::Target,
            move |c, _| {
                let hdr = c.header(T_IN, 0);
                let a = c.buffer(512, None);
                let b = c.buffer(512, Some(3));
                let st = c.status();
                raw(
                    c,
                    shape,
                    &[
                        Seg::r(hdr, 16),
                        Seg::w(a, 512),
                        Seg::r(b, 512),
                        Seg::w(st, 1),
                    ],
                );
                Expect::ioerr(st)
            },
        ));
        v.push(case(
            format!("status not writable ({shape:?})"),
            Disk::Target,
            move |c, _| {
                let hdr = c.header(T_OUT, 0);
                let buf = c.buffer(512, Some(4));
                let st = c.status();
                raw(
                    c,
                    shape,
                    &[Seg::r(hdr, 16), Seg::r(buf, 512), Seg::r(st, 1)],
                );
                Expect::broken(Some(st))
            },
        ));
        v.push(case(
            format!("status of 0 bytes ({shape:?})"),
            Disk::Target,
            move |c, _| {
                let hdr = c.header(T_OUT, 0);
                let buf = c.buffer(512, Some(4));
                let st = c.status();
                raw(
                    c,
                    shape,
                    &[Seg::r(hdr, 16), Seg::r(buf, 512), Seg::w(st, 0)],
                );
                Expect::broken(None)
            },
        ));
        v.push(case(
            format!("read whose data is its only writable buffer ({shape:?})"),
            Disk::Target,
            move |c, _| {
                // No separate status: the last byte of the buffer is the status, or it is refused.
                let hdr = c.header(T_IN, 0);
                let buf = c.buffer(512, None);
                raw(c, shape, &[Seg::r(hdr, 16), Seg::w(buf, 512)]);
                Expect::broken(Some(buf + 511))
            },
        ));
        v.push(case(
            format!("status of 16 bytes gets exactly one byte ({shape:?})"),
            Disk::Target,
            move |c, _| {
                let hdr = c.header(VIRTIO_BLK_T_FLUSH, 0);
                let st = c.alloc(16, 16);
                raw(c, shape, &[Seg::r(hdr, 16), Seg::w(st, 16)]);
                // The status is the chain's last byte (virtio 1.x: no assumption about descriptor
                // boundaries). Only that byte may change: the other 15 are not status.
                c.writable.retain(|&(addr, _)| addr != st);
                c.writable.push((st + 15, 1));
                // A FLUSH with 15 writable data bytes may be refused; it must not be corrupted.
                Expect::ok_or_ioerr(st + 15)
            },
        ));
        v.push(case(
            format!("header only ({shape:?})"),
            Disk::Target,
            move |c, _| {
                let hdr = c.header(VIRTIO_BLK_T_FLUSH, 0);
                raw(c, shape, &[Seg::r(hdr, 16)]);
                Expect::broken(None)
            },
        ));
        v.push(case(
            format!("status only ({shape:?})"),
            Disk::Target,
            move |c, _| {
                let st = c.status();
                raw(c, shape, &[Seg::w(st, 1)]);
                Expect::broken(None)
            },
        ));
        v.push(case(
            format!("single zero-length descriptor ({shape:?})"),
            Disk::Target,
            move |c, _| {
                let st = c.status();
                raw(c, shape, &[Seg::r(st, 0)]);
                Expect::broken(None)
            },
        ));
        v.push(case(
            format!("flush carrying data ({shape:?})"),
            Disk::Target,
            move |c, _| {
                let hdr = c.header(VIRTIO_BLK_T_FLUSH, 0);
                let buf = c.buffer(512, Some(2));
                let st = c.status();
                raw(
                    c,
                    shape,
                    &[Seg::r(hdr, 16), Seg::r(buf, 512), Seg::w(st, 1)],
                );
                Expect::ok(st)
            },
        ));
        v.push(case(
            format!("get-id into a device-readable buffer ({shape:?})"),
            Disk::Target,
            move |c, _| {
                let hdr = c.header(VIRTIO_BLK_T_GET_ID, 0);
                let buf = c.buffer(20, Some(1));
                let st = c.status();
                raw(c, shape, &[Seg::r(hdr, 16), Seg::r(buf, 20), Seg::w(st, 1)]);
                Expect::ioerr(st)
            },
        ));
        v.push(case(
            format!("get-id with no buffer ({shape:?})"),
            Disk::Target,
            move |c, _| {
                let hdr = c.header(VIRTIO_BLK_T_GET_ID, 0);
                let st = c.status();
                raw(c, shape, &[Seg::r(hdr, 16), Seg::w(st, 1)]);
                Expect::ioerr(st)
            },
        ));
    }
}

fn addresses(v: &mut Vec<Case>) {
    type At = fn() -> u64;
    let places: [(&str, At, u32); 7] = [
        ("just past guest memory", || MEMORY_END, 512),
        (
            "straddling the end of guest memory",
            || MEMORY_END - 256,
            512,
        ),
        ("far outside guest memory", || 1 << 40, 512),
        ("at u64::MAX - 100 (wrapping)", || u64::MAX - 100, 512),
        ("at 0xffff_ffff_ffff_fe00", || 0xffff_ffff_ffff_fe00, 512),
        ("in the gap below 2^32", || 0xfee0_0000, 4096),
        ("2^63", || 1 << 63, 512),
    ];
    for shape in SHAPES {
        for write in [false, true] {
            let op = if write { "write" } else { "read" };
            for (what, at, len) in places {
                v.push(case(
                    format!("{op} data {what} ({shape:?})"),
                    Disk::Target,
                    move |c, _| {
                        let hdr = c.header(if write { T_OUT } else { T_IN }, 0);
                        let st = c.status();
                        let data = if write {
                            Seg::r(at(), len)
                        } else {
                            Seg {
                                addr: at(),
                                len,
                                flags: WRITE,
                            }
                        };
                        raw(c, shape, &[Seg::r(hdr, 16), data, Seg::w(st, 1)]);
                        Expect::ioerr(st)
                    },
                ));
            }
            v.push(case(
                format!("{op} data straddling guest regions 0 and 1 ({shape:?})"),
                Disk::Target,
                move |c, _| {
                    let hdr = c.header(if write { T_OUT } else { T_IN }, 0);
                    let st = c.status();
                    let buf = REGION1_GPA - 256;
                    let data = if write {
                        Seg::r(buf, 512)
                    } else {
                        Seg::w(buf, 512)
                    };
                    let content = c.ram().read(buf, 512);
                    raw(c, shape, &[Seg::r(hdr, 16), data, Seg::w(st, 1)]);
                    let e = Expect::ok_or_ioerr(st);
                    if write {
                        e.with_change(FileChange::Write {
                            offset: 0,
                            data: content,
                        })
                    } else {
                        e.with_read(vec![(buf, 512)], 0)
                    }
                },
            ));
        }
        v.push(case(
            format!("header outside guest memory ({shape:?})"),
            Disk::Target,
            move |c, _| {
                let st = c.status();
                raw(c, shape, &[Seg::r(MEMORY_END + 4096, 16), Seg::w(st, 1)]);
                Expect::ioerr(st)
            },
        ));
        v.push(case(
            format!("header straddling the end of guest memory ({shape:?})"),
            Disk::Target,
            move |c, _| {
                let st = c.status();
                raw(c, shape, &[Seg::r(MEMORY_END - 8, 16), Seg::w(st, 1)]);
                Expect::ioerr(st)
            },
        ));
        v.push(case(
            format!("status outside guest memory ({shape:?})"),
            Disk::Target,
            move |c, _| {
                let hdr = c.header(VIRTIO_BLK_T_FLUSH, 0);
                raw(c, shape, &[Seg::r(hdr, 16), Seg::w(MEMORY_END + 64, 1)]);
                Expect::broken(None)
            },
        ));
        v.push(case(
            format!("get-id buffer outside guest memory ({shape:?})"),
            Disk::Target,
            move |c, _| {
                let hdr = c.header(VIRTIO_BLK_T_GET_ID, 0);
                let st = c.status();
                raw(
                    c,
                    shape,
                    &[Seg::r(hdr, 16), Seg::w(MEMORY_END - 4, 20), Seg::w(st, 1)],
                );
                Expect::ioerr(st)
            },
        ));
    }
}

fn types(v: &mut Vec<Case>) {
    let unknown = [
        2u32,
        3,
        5,
        6,
        7,
        9,
        10,
        12,
        14,
        15,
        16,
        18,
        24,
        26,
        100,
        0x8000_0000,
        0x8000_0001,
        u32::MAX,
    ];
    for t in unknown {
        v.push(case(
            format!("unknown request type {t:#x}"),
            Disk::Target,
            move |c, _| {
                let hdr = c.header(t, 0);
                let buf = c.buffer(512, Some(1));
                let st = c.status();
                raw(
                    c,
                    Shape::Direct,
                    &[Seg::r(hdr, 16), Seg::r(buf, 512), Seg::w(st, 1)],
                );
                Expect::unsupp(st)
            },
        ));
    }
}

fn segments(v: &mut Vec<Case>) {
    for shape in SHAPES {
        for extra in [1usize, 2, 60] {
            for write in [false, true] {
                let op = if write { "write" } else { "read" };
                v.push(case(
                    format!("{op} with seg_max + {extra} segments ({shape:?})"),
                    Disk::Target,
                    move |c, cfg| {
                        io(
                            c,
                            shape,
                            write,
                            0,
                            &vec![512; cfg.seg_max as usize + extra],
                            Expect::ioerr,
                        )
                    },
                ));
            }
        }
    }
}
