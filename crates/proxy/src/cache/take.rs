//! What the reply cache takes: which clients' reads (`reads_through`), and
//! which keys (`cacheable`, `plain_key`).

use orthrus_resp::Request;

use crate::client::Client;
use crate::config::ReadFrom;
use crate::process::cache::ReplyCache;
use crate::route::prefix::{DEFAULT_UPSTREAM, Place};
use crate::route::table::CommandInfo;
use crate::worker::WorkerCtx;

/// The key of a read the cache takes, if it takes it: a command of
/// `cache.commands` with one key, of the default upstream on a route that
/// neither cuts nor copies it, under `cache.prefixes`, from a client whose
/// reads go to the master and that neither tracks keys itself nor is in
/// MULTI or WATCH (whose meaning a cached reply could change).
pub(super) fn cacheable<'r>(
    cache: &ReplyCache,
    client: &Client,
    req: &'r Request,
    (info, place, rewrites): (&CommandInfo, Place, bool),
    ctx: &WorkerCtx,
) -> Option<&'r [u8]> {
    if place.upstream != DEFAULT_UPSTREAM || !reads_through(cache, client, info, ctx) {
        return None;
    }
    let key = one_key(req, info)?;
    (cache.under_prefixes(key) && (!rewrites || plain_key(key, ctx).is_some())).then_some(key)
}

/// Whether `client`'s reads of the command `info` may be answered from
/// the cache: a command of `cache.commands`, from a client whose reads go
/// to the master, that neither tracks keys itself nor is in MULTI or
/// WATCH (whose meaning a cached reply could change), with no write of its
/// own unanswered.
pub(super) fn reads_through(
    cache: &ReplyCache,
    client: &Client,
    info: &CommandInfo,
    ctx: &WorkerCtx,
) -> bool {
    if client.multi.is_some()
        || client.watch.is_some()
        || client.tracking.is_some()
        || client.writes_unanswered > 0
        || !cache.caches(info.stat)
    {
        return false;
    }
    let replica = match client.read_from {
        Some(read_from) => read_from == ReadFrom::Replica,
        None => ctx.shared.read_from_of(DEFAULT_UPSTREAM) == ReadFrom::Replica,
    };
    !replica
}

/// The place of `key` if it goes to the default upstream on a route that
/// neither cuts nor copies it.
pub(super) fn plain_key(key: &[u8], ctx: &WorkerCtx) -> Option<Place> {
    ctx.pool.env().with_prefixes(|prefixes| {
        let place = prefixes.place_of(key);
        let plain = place.upstream == DEFAULT_UPSTREAM
            && (!prefixes.rewrites()
                || (prefixes.stripped(key).len() == key.len()
                    && prefixes.mirror_of(key).is_none()));
        plain.then_some(place)
    })
}

/// The one key of `req`, if it has exactly one (the cached commands
/// name it first).
fn one_key<'r>(req: &'r Request, info: &CommandInfo) -> Option<&'r [u8]> {
    if let Some((key, _)) = info.fixed_key(req) {
        return key;
    }
    let first = req.arg(1)?;
    let (mut keys, mut same) = (0usize, false);
    let _ = info.for_each_key(req, |key, _| {
        keys += 1;
        same = key == first;
        std::ops::ControlFlow::Continue(())
    });
    (keys == 1 && same).then_some(first)
}
