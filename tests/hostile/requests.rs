//! The request-level battery: every class of malformed request from docs/hostile-guest.md, each with
//! the outcome it must get. Valid requests (so the checks can fail the other way) and sector
//! arithmetic are here; layouts and ranges have their own files.

use virtio_bindings::virtio_blk::*;

use super::battery::{Case, Disk, case};
use super::chain::{Ctx, Seg};
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

pub const SHAPES: [Shape; 2] = [Shape::Direct, Shape::Indirect];

/// A read or write of `lens` segments at `sector`; the expected outcome comes from `expect`.
pub fn io(
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
pub fn raw(ctx: &mut Ctx, shape: Shape, segs: &[Seg]) {
    let head = shape.link(ctx, segs);
    ctx.submit(head);
}

pub fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    valid(&mut v);
    arithmetic(&mut v);
    super::layouts::cases(&mut v);
    super::ranges::cases(&mut v);
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
