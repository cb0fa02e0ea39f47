//! The connections fills go on: in each worker a pool of its own (one
//! connection per node, database and protocol, made on first use), each
//! set up with `CLIENT TRACKING ON` (a RESP2 one with a RESP3 connection
//! beside it that gets its invalidations: `REDIRECT`), so that a node tells
//! orthrus when a key read on it changes, expires or is evicted. What the
//! nodes say makes entries stale: an invalidated key's, everything
//! for a flush, a lost connection (what it would have said is not heard)
//! or a MOVED.

use std::cell::RefCell;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use orthrus_cluster::NodeAddr;
use orthrus_resp::Protocol;

use crate::client::invalidation::invalidation;
use crate::node::Done;
use crate::node::client::Dialect;
use crate::node::conn::{self, Hooks};
use crate::node::forward::{self, Access, Sent, Target};
use crate::node::pool::Pool;
use crate::node::stream::NodeStream;
use crate::process::Shared;
use crate::process::cache::{KeyGen, Lookup, ReplyCache};
use crate::route::prefix::Place;
use crate::time::Tick;
use crate::worker::WorkerCtx;

const TRACKING_ON: &[u8] = b"*3\r\n$6\r\nCLIENT\r\n$8\r\nTRACKING\r\n$2\r\non\r\n";

thread_local! {
    /// This worker's context for fills (its own pool), made on first use.
    static FILLS: RefCell<Option<Rc<WorkerCtx>>> = const { RefCell::new(None) };
}

/// What the fill connections do beyond carrying requests.
struct Tracker {
    shared: Arc<Shared>,
}

/// This worker's context whose pool the fills go on.
pub fn context(ctx: &Rc<WorkerCtx>) -> Rc<WorkerCtx> {
    FILLS.with(|fills| {
        fills
            .borrow_mut()
            .get_or_insert_with(|| {
                let tracker = Rc::new(Tracker {
                    shared: ctx.shared.clone(),
                });
                ctx.with_pool(Pool::private(ctx.pool.env().clone(), tracker))
            })
            .clone()
    })
}

impl Tracker {
    /// Everything cached is stale from now on.
    fn all_stale(&self) {
        if let Some(cache) = self.shared.reply_cache() {
            cache.stats.invalidations.fetch_add(1, Ordering::Relaxed);
            cache.flush();
        }
    }
}

impl Hooks for Tracker {
    fn prepare<'a>(
        &'a self,
        addr: &'a NodeAddr,
        dialect: Dialect,
        shared: &'a Shared,
        stream: &'a mut NodeStream,
    ) -> Pin<Box<dyn Future<Output = io::Result<Option<NodeStream>>> + 'a>> {
        Box::pin(async move {
            let (frame, side) = match conn::push_side(addr, dialect, shared).await? {
                None => (Bytes::from_static(TRACKING_ON), None),
                Some((side, id)) => {
                    let id = id.to_string();
                    let frame = orthrus_resp::Request::from_args(&[
                        "CLIENT", "TRACKING", "on", "REDIRECT", &id,
                    ]);
                    (frame.into_frame(), Some(side))
                }
            };
            conn::track_on(stream, &frame).await?;
            Ok(side)
        })
    }

    fn push(&self, _addr: &NodeAddr, frame: Bytes) {
        let Some(keys) = invalidation(&frame) else {
            return;
        };
        let Some(keys) = keys else {
            // FLUSHALL, FLUSHDB, or a node that emptied its tracking table.
            self.all_stale();
            return;
        };
        if let Some(cache) = self.shared.reply_cache() {
            for key in &keys {
                cache.touch(KeyGen::of(key));
            }
            let n = u64::try_from(keys.len()).unwrap_or(u64::MAX);
            cache.stats.invalidations.fetch_add(n, Ordering::Relaxed);
        }
    }

    fn lost(&self, addr: &NodeAddr) {
        tracing::info!(node = %addr, "cache fill connection lost; every cached reply dropped");
        self.all_stale();
    }

    fn moved(&self) {
        self.all_stale();
    }
}

/// Sends the read `frame` on the tracking connections of `fills` and keeps
/// its reply if nothing made its key stale meanwhile; its reply.
pub async fn fetch(
    cache: &ReplyCache,
    fills: &WorkerCtx,
    frame: Bytes,
    (place, generation): (Place, KeyGen),
    dialect: Dialect,
) -> Done {
    let sent_under = cache.generations(generation);
    let sent = forward::forward_from(
        &fills.pool,
        frame.clone(),
        Target::Slot(place),
        dialect,
        Access::Read,
        Tick::now(),
    );
    let done = match sent {
        Sent::Remote(remote) => forward::resolve(&fills.pool, remote).await,
        Sent::Refused { reply, .. } => return Done::local(reply),
    };
    // An error (a redirect given up, a wrong type) is not kept.
    if done.reply.first().is_some_and(|b| *b != b'-') {
        let lookup = Lookup {
            frame: &frame,
            db: dialect.db,
            resp3: dialect.proto == Protocol::Resp3,
        };
        cache.fill(&lookup, generation, sent_under, &done.reply);
    }
    done
}
