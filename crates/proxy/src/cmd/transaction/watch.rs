//! WATCH: a connection of the client's own to the owner of the watched
//! keys' slot, where the WATCH is sent and the transaction later runs.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Instant;

use bytes::Bytes;
use orthrus_resp::Request;

use crate::client::transaction::Watch;
use crate::client::{Client, Pending};
use crate::node::Done;
use crate::node::answer::{error_reply, no_owner};
use crate::node::client::Dialect;
use crate::node::dedicated::{DedicatedPool, Holding, Lease};
use crate::node::retry::{Next, Retry};
use crate::route::prefix::Place;
use crate::route::table::{CommandTable, Rejection};
use crate::worker::WorkerCtx;

pub(super) fn watch(
    client: &mut Client,
    req: &Request,
    table: &CommandTable,
    ctx: &Rc<WorkerCtx>,
) -> Pending {
    let info = table.get(req.arg(0).unwrap_or_default());
    let prefixes = ctx.prefixes();
    let slot = match info.map(|info| info.place(req, &prefixes)) {
        Some(Err(cross)) if cross.first.upstream != cross.then.upstream => {
            return Pending::Ready(error_reply(&Rejection::CrossRoute.message(req)));
        }
        Some(Ok(Some(place))) => place,
        _ => {
            return Pending::Ready(error_reply(
                "CROSSSLOT Keys in request don't hash to the same slot",
            ));
        }
    };
    let lease = match &client.watch {
        Some(w) if w.slot.upstream != slot.upstream => {
            return Pending::Ready(error_reply(&Rejection::CrossRoute.message(req)));
        }
        Some(w) if w.slot != slot => {
            return Pending::Ready(error_reply(
                "CROSSSLOT Keys in request don't hash to the same slot",
            ));
        }
        Some(w) => w.lease.clone(),
        None => {
            let lease = Rc::new(RefCell::new(None));
            client.watch = Some(Box::new(Watch {
                slot,
                lease: lease.clone(),
            }));
            lease
        }
    };
    let frame = req.frame().clone();
    let dialect = client.dialect();
    let ctx = ctx.clone();
    let held = client.identity.clone();
    Pending::deferred(Box::pin(async move {
        let started = Instant::now();
        let watch = Watching {
            lease: &lease,
            held: &held,
        };
        let reply = watch_on_owner(&ctx, watch, &frame, slot, dialect).await;
        Done::from_nodes(reply, started.elapsed())
    }))
}

/// The client's WATCH connection and its count of dedicated connections.
struct Watching<'a> {
    lease: &'a RefCell<Option<Lease>>,
    held: &'a Holding,
}

/// Sends WATCH on the connection the client holds, or takes one to the
/// slot's master; a slot that moved meanwhile is followed to its owner by
/// the retry driver, on a new connection.
async fn watch_on_owner(
    ctx: &Rc<WorkerCtx>,
    watch: Watching<'_>,
    frame: &Bytes,
    slot: Place,
    dialect: Dialect,
) -> Bytes {
    let timeout = Some(ctx.shared.request_timeout_of(slot.upstream));
    let lease = watch.lease;
    let held = lease.borrow_mut().take();
    if let Some(mut conn) = held {
        // Keys are watched on this connection already: going elsewhere
        // would forget them, so the node's answer stands.
        return match conn.call(frame, 1, timeout).await {
            Ok(reply) => {
                *lease.borrow_mut() = Some(conn);
                reply
            }
            Err(e) => error_reply(&format!("ERR orthrus: WATCH failed: {e}")),
        };
    }
    let env = ctx.pool.env();
    let mut retry = Retry::from_now(env, slot.upstream);
    let held = Some(watch.held);
    loop {
        let map = ctx.slots_of(slot.upstream);
        let Some(addr) = map.master(slot.slot).cloned() else {
            return no_owner(&map);
        };
        let mut conn =
            match DedicatedPool::take(&ctx.dedicated, &addr, dialect, held, retry.deadline()).await
            {
                Ok(conn) => conn,
                Err(e) => return error_reply(&format!("ERR orthrus: cannot WATCH now: {e}")),
            };
        let reply = match conn.call(frame, 1, timeout).await {
            Ok(reply) => reply,
            Err(e) => return error_reply(&format!("ERR orthrus: WATCH failed: {e}")),
        };
        match retry.after_reply(env, &reply, &addr).await {
            Next::Reply => {
                *lease.borrow_mut() = Some(conn);
                return reply;
            }
            Next::Answer(answer) => return answer,
            // Watched where the slot map says now: MOVED patched it; an ASK
            // or TRYAGAIN waits for the migration to end.
            Next::Redirect { .. } | Next::Again => conn.release(),
        }
    }
}
