//! The ring-level battery: chains that loop or never end, broken indirect tables, bad heads,
//! lying avail indexes and heads reused while in flight.

use virtio_bindings::virtio_blk::VIRTIO_BLK_T_IN;
use virtio_queue::desc::split::Descriptor;

use super::battery::{Case, Disk, case};
use super::chain::{Ctx, INDIRECT, NEXT, Seg, WRITE};
use super::daemon::QUEUE_SIZE;
use super::expect::{Expect, Outcome};
use super::memory::MEMORY_END;

/// Header, one 512-byte read buffer and a status: the raw parts of a read.
fn read_parts(c: &mut Ctx, sector: u64) -> (u64, u64, u64) {
    (
        c.header(VIRTIO_BLK_T_IN, sector),
        c.buffer(512, None),
        c.status(),
    )
}

pub fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    loops(&mut v);
    links(&mut v);
    indirect(&mut v);
    heads(&mut v);
    v
}

fn loops(v: &mut Vec<Case>) {
    // A chain of `len` descriptors whose last links back to `to`.
    for (len, to) in [
        (1u16, 0u16),
        (2, 0),
        (3, 0),
        (3, 1),
        (3, 2),
        (QUEUE_SIZE, 0),
    ] {
        v.push(case(
            format!("chain of {len} looping back to descriptor {to}"),
            Disk::Target,
            move |c, _| {
                let (hdr, buf, st) = read_parts(c, 0);
                let base = c.next_desc;
                for i in 0..len {
                    let (addr, size, flags) = match i {
                        0 => (hdr, 16, 0),
                        i if i + 1 == len => (st, 1, WRITE),
                        _ => (buf, 512, WRITE),
                    };
                    let next = if i + 1 == len {
                        base + to
                    } else {
                        base + i + 1
                    };
                    c.desc_at(base + i, Descriptor::new(addr, size, flags | NEXT, next));
                }
                c.submit(base);
                Expect::broken(Some(st))
            },
        ));
    }
    v.push(case(
        "loop inside an indirect table",
        Disk::Target,
        |c, _| {
            let (hdr, buf, st) = read_parts(c, 0);
            let table = c.table(&[Seg::r(hdr, 16), Seg::w(buf, 512), Seg::w(st, 1)]);
            c.g.write_desc(table, 2, Descriptor::new(st, 1, WRITE | NEXT, 0));
            let head = c.raw_head(Descriptor::new(table, 48, INDIRECT, 0));
            c.submit(head);
            Expect::broken(Some(st))
        },
    ));
    v.push(case(
        "indirect table longer than the queue, all valid links",
        Disk::Target,
        |c, _| {
            let (hdr, _, st) = read_parts(c, 0);
            let buf = c.buffer(512 * 300, None);
            let mut segs = vec![Seg::r(hdr, 16)];
            segs.extend((0..300).map(|i| Seg::w(buf + 512 * i, 512)));
            segs.push(Seg::w(st, 1));
            let head = c.indirect(&segs);
            c.submit(head);
            Expect::ioerr(st)
        },
    ));
    v.push(case(
        "indirect table of 65535 entries, chain ends at the third",
        Disk::Target,
        |c, _| {
            let (hdr, buf, st) = read_parts(c, 0);
            let table = c.table(&[Seg::r(hdr, 16), Seg::w(buf, 512), Seg::w(st, 1)]);
            let head = c.raw_head(Descriptor::new(table, 16 * 65535, INDIRECT, 0));
            c.submit(head);
            Expect::ok_or_ioerr(st).with_read(vec![(buf, 512)], 0)
        },
    ));
}

fn links(v: &mut Vec<Case>) {
    for bad_next in [QUEUE_SIZE, QUEUE_SIZE + 1, u16::MAX] {
        v.push(case(
            format!("data links to descriptor {bad_next} (>= queue size)"),
            Disk::Target,
            move |c, _| {
                let (hdr, buf, st) = read_parts(c, 0);
                let base = c.next_desc;
                c.desc_at(base, Descriptor::new(hdr, 16, NEXT, base + 1));
                c.desc_at(base + 1, Descriptor::new(buf, 512, WRITE | NEXT, bad_next));
                c.desc_at(base + 2, Descriptor::new(st, 1, WRITE, 0));
                c.submit(base);
                Expect::broken(Some(st))
            },
        ));
    }
    v.push(case(
        "status links on past the end of the queue",
        Disk::Target,
        |c, _| {
            let (hdr, buf, st) = read_parts(c, 0);
            let base = c.next_desc;
            c.desc_at(base, Descriptor::new(hdr, 16, NEXT, base + 1));
            c.desc_at(base + 1, Descriptor::new(buf, 512, WRITE | NEXT, base + 2));
            c.desc_at(
                base + 2,
                Descriptor::new(st, 1, WRITE | NEXT, QUEUE_SIZE + 7),
            );
            c.submit(base);
            Expect::broken(Some(st))
        },
    ));
    v.push(case("two heads share a tail", Disk::Target, |c, _| {
        let (hdr, buf, st) = read_parts(c, 0);
        let hdr2 = c.header(VIRTIO_BLK_T_IN, 1);
        let base = c.next_desc;
        c.desc_at(base, Descriptor::new(hdr, 16, NEXT, base + 2));
        c.desc_at(base + 1, Descriptor::new(hdr2, 16, NEXT, base + 2));
        c.desc_at(base + 2, Descriptor::new(buf, 512, WRITE | NEXT, base + 3));
        c.desc_at(base + 3, Descriptor::new(st, 1, WRITE, 0));
        c.submit(base);
        Expect::ok(st).with_read(vec![(buf, 512)], 0)
    }));
}

fn indirect(v: &mut Vec<Case>) {
    for len in [0u32, 8, 15, 24, 33, 40] {
        v.push(case(
            format!("indirect table of {len} bytes"),
            Disk::Target,
            move |c, _| {
                let (hdr, buf, st) = read_parts(c, 0);
                let table = c.table(&[Seg::r(hdr, 16), Seg::w(buf, 512), Seg::w(st, 1)]);
                let head = c.raw_head(Descriptor::new(table, len, INDIRECT, 0));
                c.submit(head);
                Expect::broken(Some(st))
            },
        ));
    }
    v.push(case("indirect inside indirect", Disk::Target, |c, _| {
        let (hdr, buf, st) = read_parts(c, 0);
        let inner = c.table(&[Seg::w(buf, 512), Seg::w(st, 1)]);
        let outer = c.table(&[Seg::r(hdr, 16)]);
        c.g.write_desc(outer, 0, Descriptor::new(hdr, 16, NEXT, 1));
        c.g.write_desc(outer, 1, Descriptor::new(inner, 32, INDIRECT, 0));
        let head = c.raw_head(Descriptor::new(outer, 32, INDIRECT, 0));
        c.submit(head);
        Expect::broken(Some(st))
    }));
    v.push(case(
        "indirect as the second descriptor of a direct chain",
        Disk::Target,
        |c, _| {
            let (hdr, buf, st) = read_parts(c, 0);
            let table = c.table(&[Seg::w(buf, 512), Seg::w(st, 1)]);
            let base = c.next_desc;
            c.desc_at(base, Descriptor::new(hdr, 16, NEXT, base + 1));
            c.desc_at(base + 1, Descriptor::new(table, 32, INDIRECT, 0));
            c.submit(base);
            // Allowed by virtio-queue but not by the spec: refused or served, never a hang.
            Expect::ok_or_ioerr(st).with_read(vec![(buf, 512)], 0)
        },
    ));
    v.push(case(
        "indirect descriptor also flagged NEXT",
        Disk::Target,
        |c, _| {
            let (hdr, buf, st) = read_parts(c, 0);
            let table = c.table(&[Seg::r(hdr, 16), Seg::w(buf, 512), Seg::w(st, 1)]);
            let head = c.raw_head(Descriptor::new(table, 48, INDIRECT | NEXT, 5));
            c.submit(head);
            Expect::ok_or_ioerr(st).with_read(vec![(buf, 512)], 0)
        },
    ));
    v.push(case(
        "indirect table outside guest memory",
        Disk::Target,
        |c, _| {
            let head = c.raw_head(Descriptor::new(MEMORY_END + 4096, 48, INDIRECT, 0));
            c.submit(head);
            Expect::broken(None)
        },
    ));
    v.push(case(
        "indirect table straddling the end of guest memory",
        Disk::Target,
        |c, _| {
            let head = c.raw_head(Descriptor::new(MEMORY_END - 16, 48, INDIRECT, 0));
            c.submit(head);
            Expect::broken(None)
        },
    ));
    v.push(case(
        "indirect table at u64::MAX - 15",
        Disk::Target,
        |c, _| {
            let head = c.raw_head(Descriptor::new(u64::MAX - 15, 32, INDIRECT, 0));
            c.submit(head);
            Expect::broken(None)
        },
    ));
    v.push(case(
        "indirect entry links past the table",
        Disk::Target,
        |c, _| {
            let (hdr, buf, st) = read_parts(c, 0);
            let table = c.table(&[Seg::r(hdr, 16), Seg::w(buf, 512), Seg::w(st, 1)]);
            c.g.write_desc(table, 1, Descriptor::new(buf, 512, WRITE | NEXT, 9));
            let head = c.raw_head(Descriptor::new(table, 48, INDIRECT, 0));
            c.submit(head);
            Expect::broken(Some(st))
        },
    ));
    v.push(case(
        "zero-length descriptors around the status in an indirect table",
        Disk::Target,
        |c, _| {
            let (hdr, buf, st) = read_parts(c, 0);
            let head = c.indirect(&[
                Seg::r(hdr, 16),
                Seg::w(buf, 0),
                Seg::w(buf, 512),
                Seg::w(st, 1),
            ]);
            c.submit(head);
            Expect::ok_or_ioerr(st).with_read(vec![(buf, 512)], 0)
        },
    ));
}

fn heads(v: &mut Vec<Case>) {
    for head in [QUEUE_SIZE, QUEUE_SIZE + 1, 0x7fff, u16::MAX] {
        v.push(case(
            format!("avail head index {head} (>= queue size)"),
            Disk::Target,
            move |c, _| {
                c.submit(head);
                Expect::no_completion()
            },
        ));
    }
    v.push(case(
        "a bad head between two good requests",
        Disk::Target,
        |c, _| {
            let (hdr, buf, st) = read_parts(c, 0);
            let good = c.direct(&[Seg::r(hdr, 16), Seg::w(buf, 512), Seg::w(st, 1)]);
            c.submit(QUEUE_SIZE + 3);
            c.submit(good);
            // The bad head gets nothing; the good one after it completes.
            Expect::ok(st).with_read(vec![(buf, 512)], 0)
        },
    ));
    for jump in [QUEUE_SIZE + 1, QUEUE_SIZE * 2, u16::MAX] {
        v.push(case(
            format!("avail index jumps by {jump}"),
            Disk::Target,
            move |c, _| {
                c.avail_idx_override = Some(c.g.ring.avail_idx().wrapping_add(jump));
                Expect::connection_ends()
            },
        ));
    }
    v.push(case("head reused while in flight", Disk::Target, |c, _| {
        let hdr = c.header(VIRTIO_BLK_T_IN, 0);
        let buf = c.buffer(512 << 10, None);
        let st = c.status();
        let segs: Vec<Seg> = [Seg::r(hdr, 16)]
            .into_iter()
            .chain((0..64).map(|i| Seg::w(buf + (i << 13), 8192)))
            .chain([Seg::w(st, 1)])
            .collect();
        let head = c.direct(&segs);
        c.submit(head);
        c.submit(head);
        Expect {
            outcome: Outcome::Reused { status_at: st },
            ..Expect::ok(st)
        }
    }));
}
