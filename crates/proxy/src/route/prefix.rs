//! Routes by key prefix: which upstream (the default cluster, or one named
//! in `[upstreams.NAME]`) a key belongs to, and the place of a keyed
//! request: its upstream and its slot there.
//!
//! Upstream 0 is the default one (the top-level `seeds`); named upstreams
//! are numbered from 1 in the order of their names. A key that no route's
//! prefix starts goes to the default upstream; of several prefixes that
//! start it, the longest wins.

use orthrus_cluster::Slot;

/// An upstream's number: 0 for the default one.
pub type Upstream = u8;

/// The default upstream (the top-level `seeds`).
pub const DEFAULT_UPSTREAM: Upstream = 0;

/// Where a keyed request goes: a slot of one upstream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Place {
    pub upstream: Upstream,
    pub slot: Slot,
}

/// Every route, longest prefix first.
#[derive(Clone, Debug, Default)]
pub struct Prefixes {
    routes: Vec<Prefix>,
    /// Whether any route mirrors.
    mirrors: bool,
    /// Whether any route removes its prefix.
    strips: bool,
    /// Whether any route mirrors or removes its prefix: requests may be
    /// rewritten or copied on their way.
    rewrites: bool,
}

/// Where a route's requests are copied to, fire and forget.
#[derive(Clone, Debug, PartialEq)]
pub struct Mirror {
    pub to: Vec<Upstream>,
    /// Only commands that may write are copied.
    pub writes_only: bool,
    /// The share of requests copied, out of 2^32.
    pub share: u64,
}

/// One route's prefix, its first eight bytes in a word: most prefixes are
/// matched by one masked compare, no call.
#[derive(Clone, Debug)]
struct Prefix {
    /// The first (up to) eight bytes, little-endian, zero-padded.
    head: u64,
    /// Ones over the bytes of `head` that are the prefix's.
    mask: u64,
    /// The bytes after the first eight.
    rest: Box<[u8]>,
    len: usize,
    upstream: Upstream,
    mirror: Option<Mirror>,
    /// Keys go to the upstream without the prefix (`remove_prefix`).
    strip: bool,
}

/// One route as configured: its prefix, upstream and mirroring.
#[derive(Clone, Debug)]
pub struct RouteRule {
    pub prefix: Vec<u8>,
    pub upstream: Upstream,
    pub mirror: Option<Mirror>,
    pub strip: bool,
}

// === impl Place ===

impl Place {
    /// `slot` of the default upstream.
    #[inline]
    pub const fn of(slot: Slot) -> Place {
        Place {
            upstream: DEFAULT_UPSTREAM,
            slot,
        }
    }

    /// The place of `key` with no routes: its slot of the default upstream.
    #[inline]
    pub fn for_key(key: &[u8]) -> Place {
        Place::of(Slot::for_key(key))
    }
}

// === impl Prefixes ===

impl Prefixes {
    /// The routes `(prefix, upstream)`, in any order; prefixes are unique.
    #[cfg(test)]
    pub fn new(routes: impl IntoIterator<Item = (Vec<u8>, Upstream)>) -> Prefixes {
        Prefixes::with_rules(routes.into_iter().map(|(prefix, upstream)| RouteRule {
            prefix,
            upstream,
            mirror: None,
            strip: false,
        }))
    }

    /// The routes, in any order; prefixes are unique.
    pub fn with_rules(routes: impl IntoIterator<Item = RouteRule>) -> Prefixes {
        let mut routes: Vec<RouteRule> = routes.into_iter().collect();
        routes.sort_by(|a, b| {
            b.prefix
                .len()
                .cmp(&a.prefix.len())
                .then_with(|| a.prefix.cmp(&b.prefix))
        });
        let mirrors = routes.iter().any(|r| r.mirror.is_some());
        let strips = routes.iter().any(|r| r.strip);
        let routes = routes
            .into_iter()
            .map(
                |RouteRule {
                     prefix,
                     upstream,
                     mirror,
                     strip,
                 }| {
                    let shown = prefix.len().min(8);
                    Prefix {
                        head: head(&prefix),
                        mask: u64::MAX
                            .checked_shr(
                                u32::try_from(8usize.saturating_sub(shown).saturating_mul(8))
                                    .unwrap_or(64),
                            )
                            .unwrap_or(0),
                        rest: prefix.get(8..).unwrap_or_default().into(),
                        len: prefix.len(),
                        upstream,
                        mirror,
                        strip,
                    }
                },
            )
            .collect();
        Prefixes {
            routes,
            mirrors,
            strips,
            rewrites: mirrors || strips,
        }
    }

    /// No route: every key goes to the default upstream.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.routes.is_empty()
    }

    /// The upstream of `key`: the longest prefix that starts it, else the
    /// default one.
    pub fn upstream_of(&self, key: &[u8]) -> Upstream {
        self.route_of(key).map_or(DEFAULT_UPSTREAM, |p| p.upstream)
    }

    /// Whether any route mirrors its requests.
    #[inline]
    pub fn mirrors(&self) -> bool {
        self.mirrors
    }

    /// Whether any route removes its prefix.
    #[inline]
    pub fn strips(&self) -> bool {
        self.strips
    }

    /// Whether any route mirrors or removes its prefix.
    #[inline]
    pub fn rewrites(&self) -> bool {
        self.rewrites
    }

    /// `key` as its upstream knows it: without its route's prefix when
    /// the route removes it.
    pub fn stripped<'k>(&self, key: &'k [u8]) -> &'k [u8] {
        match self.route_of(key) {
            Some(p) if p.strip => key.get(p.len..).unwrap_or_default(),
            _ => key,
        }
    }

    /// Where the requests for `key` are copied to, if anywhere.
    pub fn mirror_of(&self, key: &[u8]) -> Option<&Mirror> {
        self.route_of(key)?.mirror.as_ref()
    }

    /// The route that takes `key`: the longest prefix that starts it.
    fn route_of(&self, key: &[u8]) -> Option<&Prefix> {
        let word = head(key);
        self.routes.iter().find(|p| {
            word & p.mask == p.head
                && key.len() >= p.len
                && (p.rest.is_empty() || key.get(8..).is_some_and(|k| k.starts_with(&p.rest)))
        })
    }

    /// The place of `key`: its upstream, and its slot there (of the key
    /// as the upstream knows it). Every key's place is given here.
    #[inline]
    pub fn place_of(&self, key: &[u8]) -> Place {
        if self.routes.is_empty() {
            return Place::for_key(key);
        }
        match self.route_of(key) {
            Some(p) => Place {
                upstream: p.upstream,
                slot: Slot::for_key(if p.strip {
                    key.get(p.len..).unwrap_or_default()
                } else {
                    key
                }),
            },
            None => Place::for_key(key),
        }
    }
}

/// The first (up to) eight bytes of `bytes`, little-endian, zero-padded.
#[inline]
fn head(bytes: &[u8]) -> u64 {
    match bytes.get(..8).and_then(|b| <[u8; 8]>::try_from(b).ok()) {
        Some(word) => u64::from_le_bytes(word),
        None => {
            let mut word = [0u8; 8];
            for (w, b) in word.iter_mut().zip(bytes) {
                *w = *b;
            }
            u64::from_le_bytes(word)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_prefix_wins_and_other_keys_go_to_the_default() {
        let p = Prefixes::new([
            (b"user:".to_vec(), 1),
            (b"user:vip:".to_vec(), 2),
            (b"u".to_vec(), 3),
        ]);
        assert_eq!(p.upstream_of(b"user:vip:7"), 2);
        assert_eq!(p.upstream_of(b"user:7"), 1);
        assert_eq!(p.upstream_of(b"us"), 3);
        assert_eq!(p.upstream_of(b"order:1"), DEFAULT_UPSTREAM);
        assert_eq!(p.upstream_of(b""), DEFAULT_UPSTREAM);
        assert!(!p.is_empty() && Prefixes::default().is_empty());
        // The slot is the key's own, whole (prefix included).
        assert_eq!(p.place_of(b"user:{a}1").slot, Slot::for_key(b"a"));
    }

    #[test]
    fn agrees_with_starts_with_around_eight_bytes() {
        // Prefixes and keys of every length from 0 to 20 over a small
        // alphabet, zero bytes included (a padded word must not match them).
        let alphabet = [b'a', b'b', 0u8];
        let make = |n: usize, seed: usize| -> Vec<u8> {
            (0..n)
                .map(|i| alphabet[(seed / 3usize.pow((i % 5) as u32) + i) % 3])
                .collect()
        };
        for plen in 1..=20 {
            for pseed in 0..6 {
                let prefix = make(plen, pseed);
                let p = Prefixes::new([(prefix.clone(), 1)]);
                for klen in 0..=20 {
                    for kseed in 0..12 {
                        let mut key = make(klen, kseed);
                        if kseed % 2 == 0 && klen >= plen {
                            key[..plen].copy_from_slice(&prefix);
                        }
                        let want = if key.starts_with(&prefix) { 1 } else { 0 };
                        assert_eq!(p.upstream_of(&key), want, "{prefix:?} {key:?}");
                    }
                }
            }
        }
    }
}
