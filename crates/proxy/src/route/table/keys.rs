//! A request's keys: where they are in it (the command's key specs, and
//! Redis's own rule for SORT's `STORE`, which its key specs leave out), what
//! the command does to each, and their place. [`CommandInfo::place`] is the
//! one function that gives a request's keys their place (upstream and
//! slot, of each key as its upstream will see it); routing, transactions
//! and splits all start from it.

use std::ops::ControlFlow;

use orthrus_resp::Request;

use super::keyspec::{Begin, Find, KeySpec};
use super::{CommandInfo, CrossSlot};
use crate::acl::Access;
use crate::route::prefix::{Place, Prefixes, Upstream};

// === impl CommandInfo ===

impl CommandInfo {
    /// The key of a command with one key at a fixed place (GET, SET, ...), found without
    /// the walk over key specs; `Some((None, _))` if the request lacks it, `None` otherwise.
    #[inline]
    pub fn fixed_key<'r>(&self, req: &'r Request) -> Option<(Option<&'r [u8]>, Access)> {
        let (at, access) = self.fixed_key_at()?;
        Some((at.and_then(|at| req.arg(at)), access))
    }

    /// Which argument is the one key of a command with one key at a fixed
    /// place (`Some((None, _))` for a place beyond `usize`), and what the
    /// command does to it; `None` for any other command.
    #[inline]
    pub fn fixed_key_at(&self) -> Option<(Option<usize>, Access)> {
        if let [
            KeySpec {
                begin: Begin::Index(at),
                find: Find::Range { last_key: 0, .. },
                access,
            },
        ] = self.key_specs.as_slice()
        {
            if !self.sort_store {
                return Some((usize::try_from(*at).ok(), *access));
            }
        }
        None
    }

    /// The place all of the request's keys go to, each key's given by
    /// [`Prefixes::place_of`]: `Ok(None)` if it has no keys, `Err` with
    /// where they left the first place if they go to several.
    #[inline]
    pub fn place(&self, req: &Request, prefixes: &Prefixes) -> Result<Option<Place>, CrossSlot> {
        if let Some((key, _)) = self.fixed_key(req) {
            return Ok(key.map(|key| prefixes.place_of(key)));
        }
        self.place_of_keys(req, prefixes)
    }

    /// [`CommandInfo::place`] for a command whose keys its key specs find.
    fn place_of_keys(
        &self,
        req: &Request,
        prefixes: &Prefixes,
    ) -> Result<Option<Place>, CrossSlot> {
        let mut place = None;
        let mut at = 0usize;
        let mut cross = None;
        // Stops at the first key of another place, which a split starts
        // from: no key is hashed twice.
        let _ = self.for_each_key(req, |key, _| {
            let this = prefixes.place_of(key);
            match place {
                None => place = Some(this),
                Some(first) if first != this => {
                    cross = Some(CrossSlot {
                        first,
                        at,
                        then: this,
                    });
                    return ControlFlow::Break(());
                }
                Some(_) => {}
            }
            at = at.saturating_add(1);
            ControlFlow::Continue(())
        });
        match cross {
            Some(cross) => Err(cross),
            None => Ok(place),
        }
    }

    /// The upstream every key of `req` is routed to (`None` without a
    /// key); `Err` when they are routed to several.
    pub fn upstream_of_keys(
        &self,
        req: &Request,
        prefixes: &Prefixes,
    ) -> Result<Option<Upstream>, ()> {
        let mut upstream = None;
        let mut several = false;
        let _ = self.for_each_key(req, |key, _| {
            let this = prefixes.place_of(key).upstream;
            match upstream {
                Some(first) if first != this => {
                    several = true;
                    return ControlFlow::Break(());
                }
                _ => upstream = Some(this),
            }
            ControlFlow::Continue(())
        });
        if several { Err(()) } else { Ok(upstream) }
    }

    /// Calls `f` with every key of `req`, in order, and what the command
    /// does to it, until it breaks. A channel in a key's place (SSUBSCRIBE,
    /// SPUBLISH: Redis's `NOT_KEY`) comes with [`Access::CHANNEL`]: it is
    /// routed as a key, never checked as one.
    pub fn for_each_key(
        &self,
        req: &Request,
        mut f: impl FnMut(&[u8], Access) -> ControlFlow<()>,
    ) -> ControlFlow<()> {
        if let Some((key, access)) = self.fixed_key(req) {
            return match key {
                Some(key) => f(key, self.by_arguments.map_or(access, |by| by.access(req))),
                None => ControlFlow::Continue(()),
            };
        }
        let argc = req.arg_count();
        for spec in &self.key_specs {
            if let Some((first, last, step)) = spec.positions(req, argc) {
                let mut i = first;
                while i <= last {
                    if let Some(key) = req.arg(i) {
                        f(key, spec.access)?;
                    }
                    let Some(next) = i.checked_add(step) else {
                        break;
                    };
                    i = next;
                }
            }
        }
        if self.sort_store {
            if let Some(key) = sort_store_key(req) {
                f(key, Access::WRITE)?;
            }
        }
        ControlFlow::Continue(())
    }
}

/// SORT's `STORE` key, found as Redis's `sortGetKeys` finds it: the
/// options after the key, `LIMIT` taking two arguments and `BY` and `GET`
/// one, the last `STORE` winning.
fn sort_store_key(req: &Request) -> Option<&[u8]> {
    let mut store = None;
    let mut i = 2usize;
    while let Some(arg) = req.arg(i) {
        let is = |word: &[u8]| arg.eq_ignore_ascii_case(word);
        let skip = if is(b"limit") {
            2
        } else if is(b"get") || is(b"by") {
            1
        } else if is(b"store") && i.saturating_add(1) < req.arg_count() {
            store = req.arg(i.saturating_add(1));
            0
        } else {
            0
        };
        i = i.saturating_add(skip).saturating_add(1);
    }
    store
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(args: &[&str]) -> Request {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        Request::from_args(&args)
    }

    #[test]
    fn sort_store_is_found_as_redis_finds_it() {
        let store = |args: &[&str]| sort_store_key(&req(args)).map(<[u8]>::to_vec);
        assert_eq!(store(&["SORT", "k"]), None);
        assert_eq!(store(&["SORT", "k", "STORE", "d"]), Some(b"d".to_vec()));
        assert_eq!(
            store(&["sort", "k", "by", "store", "limit", "0", "1", "store", "d2"]),
            Some(b"d2".to_vec())
        );
        assert_eq!(
            store(&["SORT", "k", "STORE", "a", "STORE", "b"]),
            Some(b"b".to_vec())
        );
        // GET's pattern is skipped, even when it reads STORE.
        assert_eq!(store(&["SORT", "k", "GET", "store", "x"]), None);
        // A trailing STORE with nothing after it names no key.
        assert_eq!(store(&["SORT", "k", "STORE"]), None);
    }
}
