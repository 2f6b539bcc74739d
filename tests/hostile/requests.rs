//! The request-level battery: valid requests (so the checks can fail the other way), then every
//! class of malformed request from HOSTILE-GUEST.md, each with the outcome it must get.

use virtio_bindings::virtio_blk::*;

use super::battery::{Case, Disk, case};
use super::chain::{Ctx, Seg, WRITE};
use super::expect::{Expect, FileChange};
use super::memory::{MEMORY_END, REGION1_GPA};

const T_IN: u32 = VIRTIO_BLK_T_IN;
const T_OUT: u32 = VIRTIO_BLK_T_OUT;

/// Direct chain or one indirect table: most shapes are tried both ways.
#[derive(Clone, Copy, Debug)]
pub enum Shape {
    Direct,
    Indirect,
}

impl Shape {
    fn link(self, ctx: &mut Ctx, segs: &[Seg]) -> u16 {
        match self {
            Shape::Direct => ctx.direct(segs),
            Shape::Indirect => ctx.indirect(segs),
        }
    }
}

const SHAPES: [Shape; 2] = [Shape::Direct, Shape::Indirect];

/// A read or write of `lens` segments at `sector`; the expected outcome comes from `expect`.
fn io(
    ctx: &mut Ctx,
    shape: Shape,
    write: bool,
    sector: u64,
    lens: &[u32],
    expect: impl FnOnce(u64) -> Expect,
) -> Expect {
    let hdr = ctx.header(if write { T_OUT } else { T_IN }, sector);
    let mut segs = vec![Seg::r(hdr, 16)];
    let mut iov = Vec::new();
    let mut data = Vec::new();
    for (i, &len) in lens.iter().enumerate() {
        let buf = ctx.buffer(u64::from(len), write.then_some(i as u8 + 1));
        if write {
            data.extend(ctx.ram().read(buf, len as usize));
            segs.push(Seg::r(buf, len));
        } else {
            segs.push(Seg::w(buf, len));
        }
        iov.push((buf, len));
    }
    let st = ctx.status();
    segs.push(Seg::w(st, 1));
    let head = shape.link(ctx, &segs);
    ctx.submit(head);
    let e = expect(st);
    let offset = sector.wrapping_mul(512);
    if write {
        e.with_change(FileChange::Write { offset, data })
    } else {
        e.with_read(iov, offset)
    }
}

/// A request whose chain is exactly `segs` (the status is the caller's business).
fn raw(ctx: &mut Ctx, shape: Shape, segs: &[Seg]) {
    let head = shape.link(ctx, segs);
    ctx.submit(head);
}

pub fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    valid(&mut v);
    arithmetic(&mut v);
    layout(&mut v);
    addresses(&mut v);
    types(&mut v);
    segments(&mut v);
    ranges(&mut v);
    readonly(&mut v);
    v
}

fn valid(v: &mut Vec<Case>) {
    for shape in SHAPES {
        for write in [false, true] {
            let op = if write { "write" } else { "read" };
            v.push(case(
                format!("valid {op} 1 sector at 0 ({shape:?})"),
                Disk::Target,
                move |c, _| io(c, shape, write, 0, &[512], Expect::ok),
            ));
            v.push(case(
                format!("valid {op} last sector ({shape:?})"),
                Disk::Target,
                move |c, cfg| io(c, shape, write, cfg.capacity - 1, &[512], Expect::ok),
            ));
            v.push(case(
                format!("valid {op} 64 KiB in 16 segments ({shape:?})"),
                Disk::Target,
                move |c, _| io(c, shape, write, 64, &[4096; 16], Expect::ok),
            ));
            v.push(case(
                format!("valid {op} exactly seg_max segments ({shape:?})"),
                Disk::Target,
                move |c, cfg| {
                    io(
                        c,
                        shape,
                        write,
                        8,
                        &vec![512; cfg.seg_max as usize],
                        Expect::ok,
                    )
                },
            ));
            v.push(case(
                format!("valid {op} 512 bytes as 2x256 ({shape:?})"),
                Disk::Target,
                move |c, _| io(c, shape, write, 3, &[256, 256], Expect::ok),
            ));
            v.push(case(
                format!("valid {op} with no data ({shape:?})"),
                Disk::Target,
                move |c, _| io(c, shape, write, 0, &[], Expect::ok),
            ));
            v.push(case(
                format!("{op} with a zero-length data descriptor ({shape:?})"),
                Disk::Target,
                move |c, _| io(c, shape, write, 16, &[512, 0, 512], Expect::ok_or_ioerr),
            ));
            // Guest buffers need no alignment: an odd guest address must work with O_DIRECT too.
            v.push(case(
                format!("valid {op} from an unaligned guest buffer ({shape:?})"),
                Disk::Target,
                move |c, _| {
                    let hdr = c.header(if write { T_OUT } else { T_IN }, 40);
                    let buf = c.buffer(1024 + 1, None) + 1;
                    if write {
                        c.g.ram.write(buf, &[0x5a; 1024]);
                    }
                    let st = c.status();
                    let data = if write {
                        Seg::r(buf, 1024)
                    } else {
                        Seg::w(buf, 1024)
                    };
                    raw(c, shape, &[Seg::r(hdr, 16), data, Seg::w(st, 1)]);
                    let e = Expect::ok(st);
                    if write {
                        e.with_change(FileChange::Write {
                            offset: 40 * 512,
                            data: vec![0x5a; 1024],
                        })
                    } else {
                        e.with_read(vec![(buf, 1024)], 40 * 512)
                    }
                },
            ));
            v.push(case(
                format!("valid {op} into guest region 1 ({shape:?})"),
                Disk::Target,
                move |c, _| {
                    let hdr = c.header(if write { T_OUT } else { T_IN }, 80);
                    let buf = REGION1_GPA + 4096;
                    let st = c.status();
                    let data = if write {
                        Seg::r(buf, 4096)
                    } else {
                        Seg::w(buf, 4096)
                    };
                    let content = c.ram().read(buf, 4096);
                    raw(c, shape, &[Seg::r(hdr, 16), data, Seg::w(st, 1)]);
                    let e = Expect::ok(st);
                    if write {
                        e.with_change(FileChange::Write {
                            offset: 80 * 512,
                            data: content,
                        })
                    } else {
                        e.with_read(vec![(buf, 4096)], 80 * 512)
                    }
                },
            ));
        }
        v.push(case(
            format!("valid flush ({shape:?})"),
            Disk::Target,
            move |c, _| {
                let hdr = c.header(VIRTIO_BLK_T_FLUSH, 0);
                let st = c.status();
                raw(c, shape, &[Seg::r(hdr, 16), Seg::w(st, 1)]);
                Expect::ok(st)
            },
        ));
        for len in [20u32, 64, 8] {
            v.push(case(
                format!("get-id into {len} bytes ({shape:?})"),
                Disk::Target,
                move |c, _| {
                    let hdr = c.header(VIRTIO_BLK_T_GET_ID, 0);
                    let buf = c.buffer(u64::from(len), None);
                    let st = c.status();
                    raw(
                        c,
                        shape,
                        &[Seg::r(hdr, 16), Seg::w(buf, len), Seg::w(st, 1)],
                    );
                    if len >= VIRTIO_BLK_ID_BYTES {
                        Expect::ok(st)
                    } else {
                        Expect::ok_or_ioerr(st)
                    }
                },
            ));
        }
        v.push(case(
            format!("valid status at the last byte of guest memory ({shape:?})"),
            Disk::Target,
            move |c, _| {
                let hdr = c.header(T_IN, 0);
                let buf = c.buffer(512, None);
                let st = MEMORY_END - 1;
                raw(
                    c,
                    shape,
                    &[Seg::r(hdr, 16), Seg::w(buf, 512), Seg::w(st, 1)],
                );
                Expect::ok(st).with_read(vec![(buf, 512)], 0)
            },
        ));
    }
}

fn arithmetic(v: &mut Vec<Case>) {
    // Sectors relative to capacity, and absolute ones chosen to overflow sector * 512 + len.
    type SectorOf = fn(u64) -> u64;
    let sectors: [(&str, SectorOf); 12] = [
        ("at capacity", |cap| cap),
        ("one past capacity", |cap| cap + 1),
        ("twice capacity", |cap| cap * 2),
        ("2^32", |_| 1 << 32),
        ("2^54 (x512 = 2^63)", |_| 1 << 54),
        ("2^55 (x512 overflows)", |_| 1 << 55),
        ("u64::MAX / 512", |_| u64::MAX / 512),
        ("u64::MAX / 512 + 1", |_| u64::MAX / 512 + 1),
        ("u64::MAX - 1", |_| u64::MAX - 1),
        ("u64::MAX", |_| u64::MAX),
        ("(u64::MAX - 4095) / 512", |_| (u64::MAX - 4095) / 512),
        ("2^63", |_| 1 << 63),
    ];
    for shape in SHAPES {
        for write in [false, true] {
            let op = if write { "write" } else { "read" };
            for (what, sector_of) in sectors {
                v.push(case(
                    format!("{op} sector {what} ({shape:?})"),
                    Disk::Target,
                    move |c, cfg| {
                        io(
                            c,
                            shape,
                            write,
                            sector_of(cfg.capacity),
                            &[4096],
                            Expect::ioerr,
                        )
                    },
                ));
            }
            v.push(case(
                format!("{op} crossing the end ({shape:?})"),
                Disk::Target,
                move |c, cfg| io(c, shape, write, cfg.capacity - 1, &[1024], Expect::ioerr),
            ));
            v.push(case(
                format!("{op} of 2^32 - 512 bytes past the end ({shape:?})"),
                Disk::Target,
                move |c, cfg| {
                    io(
                        c,
                        shape,
                        write,
                        cfg.capacity - 8,
                        &[4096, 4096],
                        Expect::ioerr,
                    )
                },
            ));
            for len in [1u32, 511, 513, 1000, 4095] {
                v.push(case(
                    format!("{op} of {len} bytes, not a multiple of 512 ({shape:?})"),
                    Disk::Target,
                    move |c, _| io(c, shape, write, 0, &[len], Expect::ioerr),
                ));
            }
        }
    }
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
                    Expect::ioerr(st)
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
                Expect::ok_or_ioerr(st).with_read(vec![(buf, 512)], 2 * 512)
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
                let r = c.ranges(&[(0, 1, 0), (8, 1, 0)]);
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
                Expect::ok_or_ioerr(st).with_change(effect(0, 9 * 512))
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

const IOERR_: u8 = super::expect::IOERR;
const UNSUPP_: u8 = super::expect::UNSUPP;

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
