//! Starting one request: one lookup in the command table, which places its
//! keys; its two stages, the checks on it as sent ([`admit`]) and, for
//! what goes to an upstream, the request as forwarded ([`outbound`]); and
//! the handler for its route in between. Pub/sub and transaction commands,
//! and whatever a client inside MULTI sends, go to their handlers first.

use std::collections::VecDeque;
use std::ops::ControlFlow;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use orthrus_resp::Request;

use super::admit::admit;
use crate::cache::serve::{self, Mark, Served};
use crate::client::subscriptions::publish_target;
use crate::client::{Client, Pending, PushSink, ReplyMode};
use crate::cmd::{
    admin, blocking, fanout, local, outbound, pubsub, scan, script, split, tracking, transaction,
};
use crate::config::ReadFrom;
use crate::node::Done;
use crate::node::answer::error_reply;
use crate::node::client::Dialect;
use crate::node::forward::{self, Access, Sent, Target};
use crate::observe::clients::Closer;
use crate::observe::hotkeys::Sample;
use crate::observe::stats::WorkerStats;
use crate::route::kind::{Family, Local};
use crate::route::prefix::Place;
use crate::route::table::{CommandInfo, CommandTable, Rejection, Route};
use crate::time::Tick;
use crate::worker::WorkerCtx;

/// A request once started: its reply to come, its family, and whether it
/// ran at all (one refused before running, as Redis refuses an unknown
/// command or a NOAUTH, never goes to the SLOWLOG).
pub struct Started {
    pub pending: Pending,
    pub family: Family,
    pub ran: bool,
    /// The number INFO commandstats counts it by, if its command has one.
    pub stat: Option<u16>,
    /// The request, for the SLOWLOG and INFO commandstats; `None` when
    /// `pending` is a [`Pending::Remote`], which holds it.
    pub frame: Option<Bytes>,
    /// A HOTKEYS session sampled it: its keys went into `samples`.
    pub hot: bool,
    /// What its reply makes stale in the reply cache.
    pub cache: Mark,
}

/// What [`run`] decided: started (the request only borrowed), or to be
/// forwarded, which takes the request itself.
enum Next {
    Started(Started),
    Forward {
        target: Target,
        access: Access,
        dialect: Dialect,
        family: Family,
        /// The frame as forwarded, when it is not the one sent.
        sent: Option<Bytes>,
    },
}

impl Started {
    fn ran(pending: Pending, family: Family) -> Started {
        Started {
            pending,
            family,
            ran: true,
            stat: None,
            frame: None,
            hot: false,
            cache: Mark::None,
        }
    }

    fn refused(pending: Pending, family: Family) -> Started {
        Started {
            pending,
            family,
            ran: false,
            stat: None,
            frame: None,
            hot: false,
            cache: Mark::None,
        }
    }
}

/// Decides what to do with one request and starts doing it (its deadline
/// counts from `start`); `samples` gets its keys when a HOTKEYS session
/// samples it. The request passes its two stages: every check on it as
/// sent ([`admit`]), then, for those forwarded, the rewrite and copies of
/// it as forwarded ([`outbound`]).
pub fn dispatch(
    client: &mut Client,
    req: Request,
    start: Tick,
    sink: impl FnMut(Closer) -> PushSink,
    ctx: &Rc<WorkerCtx>,
    samples: &mut VecDeque<Sample>,
) -> Started {
    // CLIENT REPLY OFF/SKIP: the command runs, its reply is not sent
    // (CLIENT REPLY itself always answers).
    let silent = client.reply != ReplyMode::On && !is_client_reply(&req);
    if client.reply == ReplyMode::SkipNext && silent {
        client.reply = ReplyMode::On;
    }
    // A tracking client's commands go over its own connections, where the
    // nodes remember what it read.
    let own = client.tracking.as_ref().map(|t| t.ctx.clone());
    let ctx = own.as_ref().unwrap_or(ctx);
    let table = ctx.commands();
    // Where each key goes, from the keys as they will be sent.
    let ((route, info), rewrites) = ctx
        .pool
        .env()
        .with_prefixes(|p| (table.route_info(&req, p), p.rewrites()));
    WorkerStats::bump(&ctx.stats().commands);
    let family = info.map_or(Family::Other, |info| info.family);
    // The first stage: the request as sent.
    if let Some(answer) = admit(client, &req, (&route, info), ctx) {
        let started = Started {
            frame: Some(req.into_frame()),
            stat: info.and_then(|info| info.stat),
            ..Started::refused(answer, family)
        };
        return if silent {
            silenced(started, ctx)
        } else {
            started
        };
    }
    let mut hot = false;
    if let Some(generation) = ctx.shared.hotkeys.sampled() {
        if let Some(sample) = sample(generation, client, &req, (&route, info)) {
            samples.push_back(sample);
            hot = true;
        }
    }
    // Most requests: one key's place, forwarded as sent, outside MULTI,
    // not a script, the client not tracking, the reply cache off. What
    // `run` would decide for them, without its other cases.
    let cache_on = ctx.shared.cache_on.load(Ordering::Relaxed);
    let plain = match cache_on {
        false => plain_place(&route, rewrites, family, client),
        true => None,
    };
    let mut mark = Mark::None;
    let next = match plain {
        Some(place) => forward_plain(place, info, client, ctx, family),
        None if !cache_on => run(client, &req, (route, info, rewrites), &table, sink, ctx),
        // The reply cache, when on: a hit is answered here, a write makes
        // what it changes stale before it leaves; the rest goes on as
        // with the cache off.
        None => match cached(client, &req, (&route, info, rewrites), ctx, start) {
            Some(Served::Answered(pending)) => Next::Started(Started::ran(pending, family)),
            other => {
                if let Some(Served::Pass(m)) = other {
                    mark = m;
                }
                match plain_place(&route, rewrites, family, client) {
                    Some(place) => forward_plain(place, info, client, ctx, family),
                    None => run(client, &req, (route, info, rewrites), &table, sink, ctx),
                }
            }
        },
    };
    let mut started = match next {
        Next::Started(started) => Started {
            frame: Some(req.into_frame()),
            ..started
        },
        Next::Forward {
            target,
            access,
            dialect,
            family,
            sent,
        } => {
            // A rewritten request keeps the one sent for the SLOWLOG,
            // commandstats and HOTKEYS, which name keys as sent.
            let (frame, as_sent) = match sent {
                Some(sent) => (sent, Some(req.into_frame())),
                None => (req.into_frame(), None),
            };
            match forward::forward_from(&ctx.pool, frame, target, dialect, access, start) {
                Sent::Remote(remote) => Started {
                    frame: as_sent,
                    ..Started::ran(Pending::Remote(remote), family)
                },
                Sent::Refused { reply, frame } => Started {
                    frame: Some(as_sent.unwrap_or(frame)),
                    ..Started::ran(Pending::Ready(reply), family)
                },
            }
        }
    };
    started.stat = info.and_then(|info| info.stat);
    started.hot = hot;
    if mark != Mark::None {
        started.cache = mark;
        client.writes_unanswered = client.writes_unanswered.saturating_add(1);
    }
    if silent {
        silenced(started, ctx)
    } else {
        started
    }
}

/// The place of a request forwarded as sent with nothing else to decide:
/// one key's place, no route rewriting it, not a script, the client
/// neither in MULTI nor tracking keys.
#[inline]
fn plain_place(route: &Route, rewrites: bool, family: Family, client: &Client) -> Option<Place> {
    match route {
        Route::Slot(place) if !rewrites && family != Family::Scripting => {
            (client.multi.is_none() && client.tracking.is_none()).then_some(*place)
        }
        _ => None,
    }
}

/// A plain request's way: forwarded to `place` as sent.
#[inline]
fn forward_plain(
    place: Place,
    info: Option<&Arc<CommandInfo>>,
    client: &Client,
    ctx: &Rc<WorkerCtx>,
    family: Family,
) -> Next {
    Next::Forward {
        target: Target::Slot(place),
        access: access(info, client, ctx),
        dialect: client.dialect(),
        family,
        sent: None,
    }
}

/// What the reply cache makes of a request, when it is on.
#[inline(never)]
fn cached(
    client: &Client,
    req: &Request,
    (route, info, rewrites): (&Route, Option<&Arc<CommandInfo>>, bool),
    ctx: &Rc<WorkerCtx>,
    start: Tick,
) -> Option<Served> {
    ctx.pool
        .env()
        .with_cache(|cache| serve::request(cache, client, req, (route, info, rewrites), ctx, start))
}

/// A started request whose reply is not to be sent (CLIENT REPLY OFF/SKIP).
fn silenced(mut started: Started, ctx: &Rc<WorkerCtx>) -> Started {
    keep_frame(&mut started.frame, &started.pending);
    Started {
        pending: silence(started.pending, ctx),
        ..started
    }
}

/// Before a [`Pending::Remote`] goes into a boxed future (where its request
/// can no longer be read), copies its frame into `frame`, the record kept
/// for the SLOWLOG and commandstats.
pub(super) fn keep_frame(frame: &mut Option<Bytes>, pending: &Pending) {
    if let (None, Pending::Remote(remote)) = (&frame, pending) {
        *frame = Some(remote.frame().clone());
    }
}

/// The keys of a keyed request, as places in its frame, for the HOTKEYS
/// session `generation` that sampled it. Inlined: a one-key command's key
/// is one lookup, the same routing made.
#[inline]
fn sample(
    generation: u32,
    client: &Client,
    req: &Request,
    (route, info): (&Route, Option<&Arc<CommandInfo>>),
) -> Option<Sample> {
    if client.multi.is_some() {
        return None; // queued: its reply is +QUEUED
    }
    if !matches!(
        route,
        Route::Slot(_) | Route::Blocking(_) | Route::Split(..)
    ) {
        return None;
    }
    let info = info?;
    match info.fixed_key_at() {
        Some((at, _)) => Sample::new(generation, req.arg_place(at?)?),
        None => sample_keys(generation, req, info),
    }
}

/// [`sample`] for a command whose keys its key specifications find.
#[cold]
fn sample_keys(generation: u32, req: &Request, info: &CommandInfo) -> Option<Sample> {
    let mut places = Vec::new();
    let _ = info.for_each_key(req, |key, _| {
        places.push(place(req, key));
        ControlFlow::Continue(())
    });
    Sample::of_keys(generation, places)
}

/// Where `key`, a slice of `req`'s frame, is in it.
#[inline]
fn place(req: &Request, key: &[u8]) -> (usize, usize) {
    let start = (key.as_ptr() as usize).wrapping_sub(req.frame().as_ptr() as usize);
    (start, start.saturating_add(key.len()))
}

fn is_client_reply(req: &Request) -> bool {
    req.arg(0)
        .is_some_and(|n| n.eq_ignore_ascii_case(b"client"))
        && req.arg(1).is_some_and(|n| n.eq_ignore_ascii_case(b"reply"))
}

/// The same work, without a reply.
fn silence(pending: Pending, ctx: &Rc<WorkerCtx>) -> Pending {
    match pending {
        Pending::Ready(_) => Pending::Ready(Bytes::new()),
        Pending::Last(reply) => Pending::Last(reply),
        Pending::Remote(remote) => {
            let ctx = ctx.clone();
            Pending::Future(Box::pin(async move {
                let done = forward::resolve(&ctx.pool, remote).await;
                Done {
                    reply: Bytes::new(),
                    ..done
                }
            }))
        }
        Pending::Future(future) => Pending::Future(Box::pin(async move {
            Done {
                reply: Bytes::new(),
                ..future.await
            }
        })),
        Pending::Deferred(future) => Pending::Deferred(Box::pin(async move {
            Done {
                reply: Bytes::new(),
                ..future.await
            }
        })),
    }
}

/// Starts one request that passed its checks: the handlers of the
/// client's own state first (pub/sub, transactions), then the route's.
/// What goes to an upstream goes as forwarded: with `rewrites` (routes
/// that cut their prefix or mirror), through [`outbound`]; inside MULTI
/// nothing gets that far (queued, it goes at EXEC as queued).
fn run(
    client: &mut Client,
    req: &Request,
    (route, info, rewrites): (Route, Option<&Arc<CommandInfo>>, bool),
    table: &CommandTable,
    mut sink: impl FnMut(Closer) -> PushSink,
    ctx: &Rc<WorkerCtx>,
) -> Next {
    let family = info.map_or(Family::Other, |info| info.family);
    if let Some(tracking) = &client.tracking {
        tracking.before(req, &route);
    }
    let readonly = info.is_some_and(|info| info.readonly);
    let access = access(info, client, ctx);
    let dialect = client.dialect();
    let ran = |pending, family| Next::Started(Started::ran(pending, family));
    match &route {
        Route::Subscription(info) => {
            let pending = pubsub::command(client, req, &info.name, &mut sink, ctx);
            return ran(pending, Family::PubSub);
        }
        Route::Transaction => {
            let pending = transaction::command(client, req, table, ctx);
            return ran(pending, Family::Transaction);
        }
        _ if transaction::queues(client, req) => {
            let pending = transaction::queue_in_multi(client, req, table, ctx);
            return ran(pending, Family::Transaction);
        }
        _ => {}
    }
    // The second stage: a keyed request for one place as its upstream is
    // to get it (blocking commands are cut, never copied: a copy would
    // block a mirror's shared connection).
    let sent = match (&route, rewrites) {
        (Route::Slot(place), true) => outbound::request(ctx, req, (*place, client.db), info, true),
        (Route::Blocking(place), true) => {
            outbound::request(ctx, req, (*place, client.db), info, false)
        }
        _ => None,
    };
    let req = sent.as_ref().unwrap_or(req);
    // Scripts are noted on their way (SCRIPT LOAD's body) or run by orthrus
    // (SCRIPT KILL, EVALSHA of a held body).
    if family == Family::Scripting {
        if let Some(pending) = script::intercept(ctx, req, &route, dialect, access) {
            return ran(pending, family);
        }
    }
    let (target, access) = match route {
        // Taken by their handlers above.
        Route::Subscription(_) | Route::Transaction => {
            let reply = error_reply("ERR orthrus: unexpected route");
            return ran(Pending::Ready(reply), family);
        }
        Route::Local(Local::Client) if tracking::handles(req) => {
            return ran(tracking::command(client, req, &mut sink, ctx), family);
        }
        Route::Local(cmd) => return ran(local::execute(cmd, req, client, ctx), family),
        Route::Slot(slot) => (Target::Slot(slot), access),
        Route::AnyNode => (Target::Any, access),
        // Where orthrus keeps its subscriptions: a master, never a replica.
        Route::SubscriptionNode => match access {
            Access::ReplicaRead | Access::UpstreamRead => (publish_target(), Access::Read),
            access => (publish_target(), access),
        },
        Route::Split(merge, cross) => {
            let pending = split::dispatch(ctx, req, (merge, cross), dialect, access);
            return ran(pending, family);
        }
        Route::FanOut(how) => {
            return ran(fanout::dispatch(ctx, req, how, dialect, readonly), family);
        }
        Route::Scan => return ran(scan::dispatch(ctx, req, dialect), family),
        Route::Blocking(slot) => {
            let pending = blocking::dispatch(ctx, req, slot, dialect, &client.identity);
            return ran(pending, Family::Blocking);
        }
        Route::Admin(info) if ctx.live().admin.passthrough => {
            let pending = if &*info.name == "monitor" {
                let push = sink(client.closer());
                admin::monitor(ctx, client, &push)
            } else {
                admin::dispatch(ctx, req, &info, dialect)
            };
            return ran(pending, family);
        }
        Route::Admin(info) => return refuse(&Rejection::admin(info), req, family, ctx),
        Route::Reject(rejection) => return refuse(&rejection, req, family, ctx),
    };
    Next::Forward {
        target,
        access,
        dialect,
        family,
        sent: sent.map(Request::into_frame),
    }
}

/// What the command may do, and where it may be read from: the client's
/// READONLY or READWRITE, else its upstream's `read_from`.
#[inline]
fn access(info: Option<&Arc<CommandInfo>>, client: &Client, ctx: &WorkerCtx) -> Access {
    let readonly = info.is_some_and(|info| info.readonly);
    match (readonly, client.read_from) {
        (false, _) => Access::Write,
        (true, Some(ReadFrom::Master)) => Access::Read,
        (true, Some(ReadFrom::Replica)) => Access::ReplicaRead,
        (true, None) if ctx.shared.replica_reads => Access::UpstreamRead,
        (true, None) => Access::Read,
    }
}

/// A request refused before it reaches the cluster.
fn refuse(rejection: &Rejection, req: &Request, family: Family, ctx: &WorkerCtx) -> Next {
    WorkerStats::bump(&ctx.stats().rejected_commands);
    let reply = error_reply(&rejection.message(req));
    Next::Started(Started::refused(Pending::Ready(reply), family))
}
