//! The metadata contexts of an export: `base:allocation`, and `qemu:dirty-bitmap:NAME` for each
//! changed-block map frozen at the export's instant (QEMU's name, which libvirt, `qemu-img map`'s
//! `x-dirty-bitmap` and `nbdinfo --map` ask for). Which contexts a client's query names, their
//! ids on the wire, and a frozen map's extents.

use super::wire::BASE_ALLOCATION;

/// The namespace and prefix of every dirty bitmap's context.
pub const DIRTY_BITMAP: &str = "qemu:dirty-bitmap:";
/// `qemu:dirty-bitmap:*` state bit: the extent changed since the bitmap's checkpoint.
pub const STATE_DIRTY: u32 = 1;

/// The blocks changed between a checkpoint and the export's instant, frozen at that instant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirtyBitmap {
    name: String,
    /// Changed byte ranges as (offset, length): sorted, disjoint, none empty.
    extents: Vec<(u64, u64)>,
}

impl DirtyBitmap {
    /// The map of checkpoint `name`: `extents` (offset, length) sorted and disjoint, as
    /// `ChangeMap::changed_since` gives them.
    pub fn new(name: &str, extents: Vec<(u64, u64)>) -> Self {
        let mut extents = extents;
        extents.retain(|&(_, len)| len != 0);
        extents.sort_unstable();
        DirtyBitmap {
            name: name.to_owned(),
            extents,
        }
    }

    /// Its context's name: `qemu:dirty-bitmap:NAME`.
    pub fn context(&self) -> String {
        format!("{DIRTY_BITMAP}{}", self.name)
    }

    /// Extents from `offset` as (length, [`STATE_DIRTY`] or 0), covering `[offset, offset +
    /// len)` (or less, once `max` extents are made). `len` is not 0.
    pub fn status(&self, offset: u64, len: u64, max: usize) -> Vec<(u32, u32)> {
        let end = offset.saturating_add(len);
        // The first changed extent ending after `offset`.
        let first = self
            .extents
            .partition_point(|&(start, len)| start.saturating_add(len) <= offset);
        let mut out = Vec::new();
        let mut at = offset;
        let mut changed = self.extents[first..].iter();
        while at < end && out.len() < max {
            let (state, upto) = match changed.as_slice().first() {
                Some(&(start, _)) if start > at => (0, start.min(end)),
                Some(&(start, len)) => {
                    changed.next();
                    (STATE_DIRTY, start.saturating_add(len).min(end))
                }
                None => (0, end),
            };
            // An extent's length is a u32: a longer run is told in several.
            let length = u32::try_from(upto - at).unwrap_or(!0xfff);
            out.push((length, state));
            at += u64::from(length);
        }
        out
    }
}

/// One context an export offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Context {
    /// `base:allocation`.
    Allocation,
    /// The dirty bitmap at this index of the export's.
    Dirty(usize),
}

impl Context {
    /// Its id on the wire, the same on every connection: 1, then 2 on for the bitmaps.
    pub fn id(self) -> u32 {
        match self {
            Context::Allocation => 1,
            Context::Dirty(i) => u32::try_from(i).map_or(u32::MAX, |i| i.saturating_add(2)),
        }
    }

    /// Its name.
    pub fn name(self, bitmaps: &[DirtyBitmap]) -> String {
        match self {
            Context::Allocation => BASE_ALLOCATION.to_owned(),
            Context::Dirty(i) => bitmaps.get(i).map(DirtyBitmap::context).unwrap_or_default(),
        }
    }
}

/// The contexts `query` names among an export's, appended to `into` once each. `list`:
/// `NBD_OPT_LIST_META_CONTEXT`, where a namespace alone (`base:`, `qemu:`,
/// `qemu:dirty-bitmap:`) names all of it; `SET` takes whole names only.
pub fn matching(query: &[u8], list: bool, bitmaps: &[DirtyBitmap], into: &mut Vec<Context>) {
    let mut add = |context| {
        if !into.contains(&context) {
            into.push(context);
        }
    };
    let Ok(query) = std::str::from_utf8(query) else {
        return;
    };
    if query == BASE_ALLOCATION || (list && query == "base:") {
        add(Context::Allocation);
        return;
    }
    let every_bitmap = list && (query == "qemu:" || query == DIRTY_BITMAP);
    for (i, bitmap) in bitmaps.iter().enumerate() {
        if every_bitmap || query.strip_prefix(DIRTY_BITMAP) == Some(bitmap.name.as_str()) {
            add(Context::Dirty(i));
        }
    }
}

/// Every context of an export (`LIST` with no query).
pub fn all(bitmaps: &[DirtyBitmap]) -> Vec<Context> {
    std::iter::once(Context::Allocation)
        .chain((0..bitmaps.len()).map(Context::Dirty))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bitmap_tells_changed_and_clean_extents_from_any_offset() {
        let map = DirtyBitmap::new("a", vec![(65536, 65536), (262144, 131072)]);
        assert_eq!(
            map.status(0, 1 << 20, 100),
            vec![
                (65536, 0),
                (65536, STATE_DIRTY),
                (131072, 0),
                (131072, STATE_DIRTY),
                (655360, 0)
            ]
        );
        // From inside a changed extent, clipped to the request.
        assert_eq!(
            map.status(70000, 200000, 100),
            vec![(61072, STATE_DIRTY), (131072, 0), (7856, STATE_DIRTY)]
        );
        assert_eq!(map.status(0, 1 << 20, 1), vec![(65536, 0)]);
        assert_eq!(map.status(0, 4096, 1), vec![(4096, 0)]);
    }

    #[test]
    fn queries_name_whole_contexts_and_list_also_namespaces() {
        let maps = [DirtyBitmap::new("a", vec![]), DirtyBitmap::new("b", vec![])];
        let found = |query: &[u8], list| {
            let mut into = Vec::new();
            matching(query, list, &maps, &mut into);
            into
        };
        assert_eq!(found(b"base:allocation", false), vec![Context::Allocation]);
        assert_eq!(
            found(b"qemu:dirty-bitmap:b", false),
            vec![Context::Dirty(1)]
        );
        assert_eq!(found(b"qemu:dirty-bitmap:", false), vec![]);
        assert_eq!(
            found(b"qemu:", true),
            vec![Context::Dirty(0), Context::Dirty(1)]
        );
        assert_eq!(found(b"base:", true), vec![Context::Allocation]);
        assert_eq!(found(b"qemu:dirty-bitmap:c", true), vec![]);
        assert_eq!(found(b"\xff", true), vec![]);
        assert_eq!(Context::Dirty(1).name(&maps), "qemu:dirty-bitmap:b");
        assert_eq!(Context::Dirty(1).id(), 3);
    }
}
