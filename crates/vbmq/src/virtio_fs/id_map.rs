//! User and group IDs translated between the guest and the host (virtiofsd's
//! `--translate-uid map:GUEST:HOST:COUNT`, `guest:`, `host:`): the IDs of the guest's requests
//! (the credentials files are made with, and CHOWN's) go guest to host, the owners in replies
//! host to guest. An ID no rule covers passes unchanged: this renames IDs and confines nothing.
//! virtiofsd's `--uid-map :GUEST:HOST:COUNT:` is not this but a user namespace
//! (`confine::UserNamespace`), which the kernel enforces.

/// One range of IDs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdRule {
    /// The first ID of the range as the guest sees it.
    pub guest: u32,
    /// The first ID of the range on the host.
    pub host: u32,
    /// How many IDs.
    pub count: u32,
    /// Applied to the guest's IDs (guest to host).
    pub to_host: bool,
    /// Applied to the host's IDs in replies (host to guest).
    pub to_guest: bool,
}

impl IdRule {
    /// virtiofsd's `--translate-uid` form: `map:GUEST:HOST:COUNT` (both ways),
    /// `guest:GUEST:HOST:COUNT` (guest to host only), `host:HOST:GUEST:COUNT` (host to guest
    /// only). `squash-*` and `forbid-guest` are refused.
    pub fn parse_translate(text: &str) -> Result<Self, String> {
        let fields: Vec<&str> = text.split(':').collect();
        let [kind, a, b, count] = fields[..] else {
            return Err("expected TYPE:BASE:BASE:COUNT".into());
        };
        let (a, b, count) = (number(a)?, number(b)?, number(count)?);
        let rule = match kind {
            "map" => IdRule::new(a, b, count, true, true),
            "guest" => IdRule::new(a, b, count, true, false),
            "host" => IdRule::new(b, a, count, false, true),
            "squash-guest" | "squash-host" | "forbid-guest" => {
                return Err(format!(
                    "{kind}: not implemented in vbmq (map, guest, host are)"
                ));
            }
            _ => return Err(format!("{kind}: not a type (map, guest, host)")),
        };
        rule.check()
    }

    /// virtiofsd's `--uid-map` form, `:GUEST:HOST:COUNT:` (one line of a user namespace's
    /// map: GUEST inside, HOST outside).
    pub fn parse_namespace(text: &str) -> Result<Self, String> {
        let inner = text
            .strip_prefix(':')
            .and_then(|t| t.strip_suffix(':'))
            .ok_or("expected :GUEST:HOST:COUNT:")?;
        let fields: Vec<&str> = inner.split(':').collect();
        let [guest, host, count] = fields[..] else {
            return Err("expected :GUEST:HOST:COUNT:".into());
        };
        IdRule::new(number(guest)?, number(host)?, number(count)?, true, true).check()
    }

    fn new(guest: u32, host: u32, count: u32, to_host: bool, to_guest: bool) -> Self {
        IdRule {
            guest,
            host,
            count,
            to_host,
            to_guest,
        }
    }

    fn check(self) -> Result<Self, String> {
        let end = |base: u32| u64::from(base) + u64::from(self.count);
        if self.count == 0 || end(self.guest) > 1 << 32 || end(self.host) > 1 << 32 {
            return Err("the count must be at least 1 and the ranges end below 2^32".into());
        }
        Ok(self)
    }
}

fn number(text: &str) -> Result<u32, String> {
    text.parse()
        .map_err(|_| format!("{text:?} is not an ID or count"))
}

/// Maps one range onto another: `id` in `[from, from + count)` moves by the same offset.
fn moved(id: u32, from: u32, to: u32, count: u32) -> Option<u32> {
    let offset = id.checked_sub(from)?;
    (offset < count).then(|| to.wrapping_add(offset))
}

/// The rules of one kind of ID (users or groups), first match wins.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IdMap(pub Vec<IdRule>);

impl IdMap {
    /// Whether there is nothing to translate.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The host's ID for the guest's `id`.
    pub fn to_host(&self, id: u32) -> u32 {
        self.0
            .iter()
            .filter(|rule| rule.to_host)
            .find_map(|rule| moved(id, rule.guest, rule.host, rule.count))
            .unwrap_or(id)
    }

    /// The guest's ID for the host's `id`.
    pub fn to_guest(&self, id: u32) -> u32 {
        self.0
            .iter()
            .filter(|rule| rule.to_guest)
            .find_map(|rule| moved(id, rule.host, rule.guest, rule.count))
            .unwrap_or(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_move_both_ways_and_the_rest_passes() {
        let map = IdMap(vec![IdRule::parse_translate("map:0:100000:65536").unwrap()]);
        assert_eq!(map.to_host(0), 100_000);
        assert_eq!(map.to_host(65_535), 165_535);
        assert_eq!(map.to_host(65_536), 65_536);
        assert_eq!(map.to_guest(100_001), 1);
        assert_eq!(map.to_guest(99_999), 99_999);
        let ns = IdRule::parse_namespace(":0:100000:65536:").unwrap();
        assert_eq!(IdMap(vec![ns]), map);
        let one_way = IdMap(vec![IdRule::parse_translate("guest:1000:0:1").unwrap()]);
        assert_eq!((one_way.to_host(1000), one_way.to_guest(0)), (0, 0));
        let back = IdMap(vec![IdRule::parse_translate("host:0:1000:1").unwrap()]);
        assert_eq!((back.to_guest(0), back.to_host(1000)), (1000, 1000));
        let top = IdMap(vec![IdRule::parse_translate("map:4294967295:0:1").unwrap()]);
        assert_eq!(top.to_host(u32::MAX), 0);
    }

    #[test]
    fn bad_rules_are_refused() {
        for text in [
            "map:0:0",
            "map:0:0:0",
            "map:4294967295:0:2",
            "map:a:0:1",
            "frob:0:0:1",
            "squash-guest:0:0:1",
        ] {
            assert!(IdRule::parse_translate(text).is_err(), "{text}");
        }
        for text in ["0:0:1", ":0:0:1", ":0:0:0:", ":0:x:1:"] {
            assert!(IdRule::parse_namespace(text).is_err(), "{text}");
        }
    }
}
