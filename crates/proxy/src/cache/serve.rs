//! A request's way through the cache, after its checks (`session::admit`):
//! a write makes its keys stale before it is sent (and again
//! when its reply comes back: [`written`]); a cacheable read is answered
//! from the cache, or, for a key read often enough ([`admission`]), sent
//! on a tracking connection and its reply kept; anything else goes on as
//! if there were no cache.
//!
//! [`admission`]: super::admission

use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use orthrus_resp::{Protocol, Request};

use super::fill::fetch;
use super::take::{cacheable, reads_through};
use super::{admission, mget};
use crate::client::{Client, Pending};
use crate::process::cache::{KeyGen, Lookup, ReplyCache, key_hash};
use crate::route::kind::{Family, Merge};
use crate::route::prefix::Place;
use crate::route::table::{CommandInfo, Route};
use crate::time::Tick;
use crate::worker::WorkerCtx;

/// What a request's reply, when it comes, makes stale (a write's keys
/// changed then, if not before).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mark {
    #[default]
    None,
    /// The key of this generation.
    Key(u32),
    /// Everything (a write of several keys, or of keys not named).
    All,
}

/// What the cache made of a request.
pub enum Served {
    /// Answered from the cache, or being filled.
    Answered(Pending),
    /// Not the cache's: goes on, and `Mark` is repeated at its reply.
    Pass(Mark),
}

/// Looks at `req` (its checks passed) on its way, read at `start`.
pub fn request(
    cache: &Arc<ReplyCache>,
    client: &Client,
    req: &Request,
    (route, info, rewrites): (&Route, Option<&Arc<CommandInfo>>, bool),
    ctx: &Rc<WorkerCtx>,
    start: Tick,
) -> Served {
    let Some(info) = info else {
        return Served::Pass(Mark::None);
    };
    if info.may_write || is_exec(client, req) {
        return Served::Pass(stale(cache, req, info));
    }
    if info.split == Some(Merge::Array) {
        if !reads_through(cache, client, info, ctx) {
            return Served::Pass(Mark::None);
        }
        return match mget::request(cache, client, req, ctx, start) {
            Some(pending) => Served::Answered(pending),
            None => Served::Pass(Mark::None),
        };
    }
    let Route::Slot(place) = route else {
        return Served::Pass(Mark::None);
    };
    let Some(key) = cacheable(cache, client, req, (info, *place, rewrites), ctx) else {
        return Served::Pass(Mark::None);
    };
    // Counted first: a key not read often lately is not looked for (it
    // was not filled, or not for long), so a cold read costs a count.
    let hash = key_hash(key);
    let heat = admission::count(hash);
    if heat < admission::ADMIT_AT {
        cache.stats.misses.fetch_add(1, Ordering::Relaxed);
        return Served::Pass(Mark::None);
    }
    let lookup = Lookup {
        frame: req.frame(),
        db: client.db,
        resp3: client.proto == Protocol::Resp3,
    };
    let generation = KeyGen::from_hash(hash);
    if let Some(reply) = cache.get(&lookup, generation, start) {
        cache.stats.hits.fetch_add(1, Ordering::Relaxed);
        return Served::Answered(Pending::Ready(reply));
    }
    cache.stats.misses.fetch_add(1, Ordering::Relaxed);
    Served::Answered(fill(cache.clone(), client, req, (*place, generation), ctx))
}

/// Sends `req` on this worker's tracking connections and keeps its reply
/// if nothing made its key stale meanwhile. Deferred: it leaves once the
/// client's earlier replies are written and what the client sent after it
/// waits for it, so that on its other connection it never overtakes, nor
/// is overtaken by, the client's own writes.
fn fill(
    cache: Arc<ReplyCache>,
    client: &Client,
    req: &Request,
    (place, generation): (Place, KeyGen),
    ctx: &Rc<WorkerCtx>,
) -> Pending {
    let fills = super::fill::context(ctx);
    let frame = req.frame().clone();
    let dialect = client.dialect();
    Pending::deferred(Box::pin(async move {
        fetch(&cache, &fills, frame, (place, generation), dialect).await
    }))
}

/// EXEC of a transaction: its writes happen now.
fn is_exec(client: &Client, req: &Request) -> bool {
    client.multi.is_some() && req.arg(0).is_some_and(|n| n.eq_ignore_ascii_case(b"exec"))
}

/// Makes stale what a write may change, now; what to make stale again at
/// its reply.
fn stale(cache: &ReplyCache, req: &Request, info: &CommandInfo) -> Mark {
    if info.family == Family::PubSub {
        return Mark::None;
    }
    // Most writes: one key at a fixed place (SET, INCR, HSET, ...).
    if let Some((Some(key), _)) = info.fixed_key(req) {
        let generation = KeyGen::of(key);
        cache.touch(generation);
        return Mark::Key(generation.get());
    }
    let (mut first, mut keys) = (None, 0usize);
    let _ = info.for_each_key(req, |key, _| {
        let generation = KeyGen::of(key);
        cache.touch(generation);
        first.get_or_insert(generation);
        keys += 1;
        std::ops::ControlFlow::Continue(())
    });
    match (first, keys) {
        (Some(generation), 1) => Mark::Key(generation.get()),
        // No key named (a script of none, FLUSHALL, EXEC) or several:
        // everything.
        _ => {
            cache.invalidate_all();
            Mark::All
        }
    }
}

/// A write's reply came back: what it changed is stale again (a fill sent
/// before the node ran the write may have been kept meanwhile).
pub fn written(ctx: &WorkerCtx, mark: Mark) {
    if mark == Mark::None {
        return;
    }
    ctx.pool.env().with_cache(|cache| match mark {
        Mark::None => {}
        Mark::Key(n) => {
            if let Some(generation) = KeyGen::new(n) {
                cache.touch(generation);
            }
        }
        Mark::All => cache.invalidate_all(),
    });
}
