//! Legal descriptor layouts that are not one descriptor per part (virtio 1.x message framing:
//! the device assumes no arrangement): a split header, header and data in one buffer, data and
//! status in one buffer, GET_ID and range lists split anywhere. Each must succeed, read the
//! disk's bytes into the right guest bytes, and write exactly the guest's bytes to the file.

use virtio_bindings::virtio_blk::{
    VIRTIO_BLK_T_GET_ID, VIRTIO_BLK_T_IN, VIRTIO_BLK_T_OUT, VIRTIO_BLK_T_WRITE_ZEROES,
};

use super::battery::{Case, Disk, case};
use super::chain::{Ctx, Seg};
use super::expect::{Expect, FileChange};
use super::requests::{SHAPES, raw};

/// A buffer holding a request header followed by `data_len` bytes of data (pattern `seed`).
fn header_with_data(c: &mut Ctx, type_: u32, sector: u64, data_len: u32, seed: u8) -> u64 {
    let hdr = c.header(type_, sector);
    let bytes = c.ram().read(hdr, 16);
    let buf = c.buffer(16 + u64::from(data_len), Some(seed));
    c.ram().write(buf, &bytes);
    buf
}

/// `data` (guest range) as the disk bytes a successful write at `sector` leaves.
fn written(c: &Ctx, sector: u64, data: &[(u64, u32)]) -> FileChange {
    let bytes = data
        .iter()
        .flat_map(|&(gpa, len)| c.ram().read(gpa, len as usize))
        .collect();
    FileChange::Write {
        offset: sector * 512,
        data: bytes,
    }
}

pub fn cases(v: &mut Vec<Case>) {
    for shape in SHAPES {
        for cut in [1u32, 4, 7, 8, 12, 15] {
            v.push(case(
                format!("legal: read, header split at byte {cut} ({shape:?})"),
                Disk::Target,
                move |c, _| {
                    let hdr = c.header(VIRTIO_BLK_T_IN, 5);
                    let buf = c.buffer(1024, None);
                    let st = c.status();
                    let segs = [
                        Seg::r(hdr, cut),
                        Seg::r(hdr + u64::from(cut), 16 - cut),
                        Seg::w(buf, 1024),
                        Seg::w(st, 1),
                    ];
                    raw(c, shape, &segs);
                    Expect::ok(st).with_read(vec![(buf, 1024)], 5 * 512)
                },
            ));
            v.push(case(
                format!("legal: write, header split at byte {cut} ({shape:?})"),
                Disk::Target,
                move |c, _| {
                    let hdr = c.header(VIRTIO_BLK_T_OUT, 40 + u64::from(cut));
                    let buf = c.buffer(1024, Some(cut as u8));
                    let st = c.status();
                    let segs = [
                        Seg::r(hdr, cut),
                        Seg::r(hdr + u64::from(cut), 16 - cut),
                        Seg::r(buf, 1024),
                        Seg::w(st, 1),
                    ];
                    raw(c, shape, &segs);
                    let change = written(c, 40 + u64::from(cut), &[(buf, 1024)]);
                    Expect::ok(st).with_change(change)
                },
            ));
        }
        v.push(case(
            format!("legal: write, header and data in one buffer ({shape:?})"),
            Disk::Target,
            move |c, _| {
                let buf = header_with_data(c, VIRTIO_BLK_T_OUT, 70, 2048, 0x5a);
                let st = c.status();
                raw(c, shape, &[Seg::r(buf, 16 + 2048), Seg::w(st, 1)]);
                let change = written(c, 70, &[(buf + 16, 2048)]);
                Expect::ok(st).with_change(change)
            },
        ));
        v.push(case(
            format!("legal: write, header split, its tail with the data ({shape:?})"),
            Disk::Target,
            move |c, _| {
                let buf = header_with_data(c, VIRTIO_BLK_T_OUT, 90, 512, 0x33);
                let more = c.buffer(512, Some(0x44));
                let st = c.status();
                let segs = [
                    Seg::r(buf, 3),
                    Seg::r(buf + 3, 13 + 512),
                    Seg::r(more, 512),
                    Seg::w(st, 1),
                ];
                raw(c, shape, &segs);
                let change = written(c, 90, &[(buf + 16, 512), (more, 512)]);
                Expect::ok(st).with_change(change)
            },
        ));
        v.push(case(
            format!("legal: read, data and status in one buffer ({shape:?})"),
            Disk::Target,
            move |c, _| {
                let hdr = c.header(VIRTIO_BLK_T_IN, 7);
                let buf = c.buffer(2048 + 1, None);
                raw(c, shape, &[Seg::r(hdr, 16), Seg::w(buf, 2048 + 1)]);
                Expect::ok(buf + 2048).with_read(vec![(buf, 2048)], 7 * 512)
            },
        ));
        v.push(case(
            format!(
                "legal: read, header split, data split at odd bytes, status with data ({shape:?})"
            ),
            Disk::Target,
            move |c, _| {
                let hdr = c.header(VIRTIO_BLK_T_IN, 11);
                let buf = c.buffer(1536 + 1, None);
                let segs = [
                    Seg::r(hdr, 9),
                    Seg::r(hdr + 9, 7),
                    Seg::w(buf, 100),
                    Seg::w(buf + 100, 901),
                    Seg::w(buf + 1001, 535 + 1),
                ];
                raw(c, shape, &segs);
                Expect::ok(buf + 1536).with_read(vec![(buf, 1536)], 11 * 512)
            },
        ));
        for cut in [1u32, 10, 19] {
            v.push(case(
                format!("legal: get-id split at byte {cut} ({shape:?})"),
                Disk::Target,
                move |c, _| {
                    let hdr = c.header(VIRTIO_BLK_T_GET_ID, 0);
                    let a = c.buffer(u64::from(cut), None);
                    let b = c.buffer(u64::from(20 - cut) + 1, None);
                    let segs = [Seg::r(hdr, 16), Seg::w(a, cut), Seg::w(b, 20 - cut + 1)];
                    raw(c, shape, &segs);
                    Expect::ok(b + u64::from(20 - cut))
                },
            ));
        }
        v.push(case(
            format!(
                "legal: write-zeroes, header and ranges in one buffer, split at byte 21 ({shape:?})"
            ),
            Disk::Target,
            move |c, _| {
                let hdr = c.header(VIRTIO_BLK_T_WRITE_ZEROES, 0);
                // Two adjacent ranges, so the zeroed bytes are one run.
                let ranges = c.ranges(&[(512, 8, 0), (520, 16, 0)]);
                let mut bytes = c.ram().read(hdr, 16);
                bytes.extend(c.ram().read(ranges, 32));
                let buf = c.buffer(48, None);
                c.ram().write(buf, &bytes);
                let st = c.status();
                raw(
                    c,
                    shape,
                    &[Seg::r(buf, 21), Seg::r(buf + 21, 27), Seg::w(st, 1)],
                );
                Expect::ok(st).with_change(FileChange::Zero {
                    offset: 512 * 512,
                    len: 24 * 512,
                })
            },
        ));
    }
}
