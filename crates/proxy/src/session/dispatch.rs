//! Starting one request: the checks every request passes (authentication,
//! the memory limit, CLIENT REPLY), then one lookup in the command table
//! and the handler for its route. Pub/sub and transaction commands, and
//! whatever a subscriber or a client inside MULTI sends, go to their
//! handlers first.

use std::collections::VecDeque;
use std::ops::ControlFlow;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use orthrus_resp::{Protocol, Request};

use crate::acl;
use crate::client::subscriptions::publish_target;
use crate::client::{Client, Pending, PushSink, ReplyMode};
use crate::cmd::{
    admin, blocking, fanout, local, mirror, pubsub, scan, script, split, tracking, transaction,
};
use crate::config::ReadFrom;
use crate::node::Done;
use crate::node::forward::{self, Access, Sent, Target, error_reply};
use crate::observe::acl_log::Reason;
use crate::observe::clients::Closer;
use crate::observe::hotkeys::Sample;
use crate::observe::stats::WorkerStats;
use crate::route::kind::{Family, Local};
use crate::route::table::strip::{Stripped, strip};
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
}

/// What [`run`] decided: started (the request only borrowed), or to be
/// forwarded, which takes the request itself.
enum Next {
    Started(Started),
    Forward {
        target: Target,
        access: Access,
        proto: Protocol,
        family: Family,
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
        }
    }
}

/// Decides what to do with one request and starts doing it (its deadline
/// counts from `start`); `samples` gets its keys when a HOTKEYS session
/// samples it.
pub fn dispatch(
    client: &mut Client,
    mut req: Request,
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
    let ((mut route, info), mirrors, strips) = ctx
        .pool
        .env()
        .with_prefixes(|p| (table.route_info_by(&req, p), p.mirrors(), p.strips()));
    // remove_prefix and mirrors: the request as its upstream is to see
    // it, and its copies.
    if (strips || mirrors) && client.multi.is_none() {
        strip_and_copy(ctx, &mut req, &mut route, info);
    }
    let mut hot = false;
    if let Some(generation) = ctx.shared.hotkeys.sampled() {
        if let Some(sample) = sample(generation, client, &req, (&route, info)) {
            samples.push_back(sample);
            hot = true;
        }
    }
    let mut started = match run(client, &req, (route, info), &table, sink, ctx) {
        Next::Started(started) => Started {
            frame: Some(req.into_frame()),
            ..started
        },
        Next::Forward {
            target,
            access,
            proto,
            family,
        } => {
            match forward::forward_from(&ctx.pool, req.into_frame(), target, proto, access, start) {
                Sent::Remote(remote) => Started::ran(Pending::Remote(remote), family),
                Sent::Refused { reply, frame } => Started {
                    frame: Some(frame),
                    ..Started::ran(Pending::Ready(reply), family)
                },
            }
        }
    };
    started.stat = info.and_then(|info| info.stat);
    started.hot = hot;
    if silent {
        keep_frame(&mut started.frame, &started.pending);
        Started {
            pending: silence(started.pending, ctx),
            ..started
        }
    } else {
        started
    }
}

/// With routes that remove their prefix or mirror (and outside MULTI,
/// whose queue refuses keys that lose a prefix): `req` and `route` become
/// what the upstream is to get, and the route of the first key as sent
/// gets its copies.
#[cold]
fn strip_and_copy(
    ctx: &Rc<WorkerCtx>,
    req: &mut Request,
    route: &mut Route,
    info: Option<&Arc<CommandInfo>>,
) {
    let prefixes = ctx.prefixes();
    let mut mirror = None;
    if let (true, Route::Slot(_), Some(info)) = (prefixes.mirrors(), &*route, info) {
        let _ = info.for_each_key(req, |key, _| {
            mirror = prefixes.mirror_of(key).cloned();
            ControlFlow::Break(())
        });
    }
    if prefixes.strips() {
        match strip(req, route, info, &prefixes) {
            Stripped::Unchanged => {}
            Stripped::Rewritten(cut, cut_route) => (*req, *route) = (cut, cut_route),
            Stripped::Refused(why) => *route = Route::Reject(why),
        }
    }
    if let (Some(mirror), Route::Slot(place)) = (mirror, &*route) {
        let readonly = info.is_some_and(|i| i.readonly);
        mirror::copy(ctx, &mirror, *place, req.frame(), readonly);
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

/// Routes one request and starts it.
fn run(
    client: &mut Client,
    req: &Request,
    (route, info): (Route, Option<&Arc<CommandInfo>>),
    table: &CommandTable,
    mut sink: impl FnMut(Closer) -> PushSink,
    ctx: &Rc<WorkerCtx>,
) -> Next {
    let stats = ctx.stats();
    WorkerStats::bump(&stats.commands);
    let family = info.map_or(Family::Other, |info| info.family);
    if !client.authenticated && !allowed_before_auth(req) {
        WorkerStats::bump(&stats.rejected_commands);
        let reply = error_reply("NOAUTH Authentication required.");
        return Next::Started(Started::refused(Pending::Ready(reply), family));
    }
    let limits = client.names.as_ref().and_then(|n| n.acl.as_ref());
    if let (Some(user), Some(info)) = (limits, info) {
        if let Some((reason, object, text)) = refusal(user, req, info) {
            WorkerStats::bump(&stats.rejected_commands);
            let who = local::client_info(client);
            ctx.shared.acl_log.record(reason, &object, &user.name, who);
            let reply = error_reply(&text);
            return Next::Started(Started::refused(Pending::Ready(reply), family));
        }
    }
    if ctx.shared.over_memory.load(Ordering::Relaxed) && !allowed_over_memory(req) {
        WorkerStats::bump(&stats.rejected_commands);
        let reply = error_reply("OOM orthrus: memory use is over memory_limit_mb; request refused");
        return Next::Started(Started::refused(Pending::Ready(reply), family));
    }
    if let Some(tracking) = &client.tracking {
        tracking.before(req, &route);
    }
    let readonly = info.is_some_and(|info| info.readonly);
    let access = match (readonly, client.read_from) {
        (false, _) => Access::Write,
        (true, Some(ReadFrom::Master)) => Access::Read,
        (true, Some(ReadFrom::Replica)) => Access::ReplicaRead,
        (true, None) if ctx.shared.replica_reads => Access::UpstreamRead,
        (true, None) => Access::Read,
    };
    let proto = client.proto;
    // Scripts are noted on their way (SCRIPT LOAD's body) or run by orthrus
    // (SCRIPT KILL, EVALSHA of a held body), unless RESP2's subscriber mode
    // or MULTI, guards in the match below, take the request.
    if family == Family::Scripting
        && !pubsub::restricts(client, req)
        && !transaction::queues(client, req)
    {
        if let Some(pending) = script::intercept(ctx, req, &route, proto, access) {
            return Next::Started(Started::ran(pending, family));
        }
    }
    let ran = |pending, family| Next::Started(Started::ran(pending, family));
    let (target, access) = match route {
        Route::Subscription(info) => {
            let pending = pubsub::command(client, req, &info.name, &mut sink, ctx);
            return ran(pending, Family::PubSub);
        }
        _ if client.pubsub.is_some() && pubsub::restricts(client, req) => {
            return ran(pubsub::in_subscriber_mode(client, req), Family::PubSub);
        }
        Route::Transaction => {
            let pending = transaction::command(client, req, table, ctx);
            return ran(pending, Family::Transaction);
        }
        _ if transaction::queues(client, req) => {
            let pending = transaction::queue_in_multi(client, req, table, ctx);
            return ran(pending, Family::Transaction);
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
            let pending = split::dispatch(ctx, req, (merge, cross), proto, access);
            return ran(pending, family);
        }
        Route::FanOut(how) => {
            return ran(fanout::dispatch(ctx, req, how, proto, readonly), family);
        }
        Route::Scan => return ran(scan::dispatch(ctx, req, proto), family),
        Route::Blocking(slot) => {
            let pending = blocking::dispatch(ctx, req, slot, proto, &client.identity);
            return ran(pending, Family::Blocking);
        }
        Route::Admin(info) if ctx.live().admin.passthrough => {
            let pending = if &*info.name == "monitor" {
                let push = sink(client.closer());
                admin::monitor(ctx, client, &push)
            } else {
                admin::dispatch(ctx, req, &info, proto)
            };
            return ran(pending, family);
        }
        Route::Admin(info) => return refuse(&Rejection::admin(info), req, family, ctx),
        Route::Reject(rejection) => return refuse(&rejection, req, family, ctx),
    };
    Next::Forward {
        target,
        access,
        proto,
        family,
    }
}

/// A request refused before it reaches the cluster.
fn refuse(rejection: &Rejection, req: &Request, family: Family, ctx: &WorkerCtx) -> Next {
    WorkerStats::bump(&ctx.stats().rejected_commands);
    let reply = error_reply(&rejection.message(req));
    Next::Started(Started::refused(Pending::Ready(reply), family))
}

/// What still runs while orthrus is over its memory limit: commands that
/// hold nothing (so that clients and operators can look, and leave).
fn allowed_over_memory(req: &Request) -> bool {
    let name = req.arg(0).unwrap_or_default();
    [
        &b"ping"[..],
        b"echo",
        b"quit",
        b"reset",
        b"auth",
        b"hello",
        b"info",
        b"client",
        b"select",
    ]
    .iter()
    .any(|n| name.eq_ignore_ascii_case(n))
}

/// A user's rules against one request: the `-NOPERM` text if it is
/// refused. The command by name and category, every key its key specs
/// find (read, written or neither, as its key specifications say), and the
/// channels of the pub/sub commands that name some.
/// Returns what ACL LOG records (reason, object) and the reply's text.
fn refusal(
    user: &acl::User,
    req: &Request,
    info: &CommandInfo,
) -> Option<(Reason, String, String)> {
    // Containers orthrus answers itself (CLIENT, SLOWLOG) are routed as a
    // whole; their subcommands have categories of their own.
    let info: &CommandInfo = info.subcommand(req).map_or(info, |sub| sub);
    let name = info.full_name();
    if !user.may_run(name, info.acl_categories) {
        let text = acl::Denied::Command.message(&user.name, name);
        return Some((Reason::Command, name.to_owned(), text));
    }
    let mut refused_key = None;
    let _ = info.for_each_key(req, |key, access| {
        if user.may_access_key(key, access) {
            return ControlFlow::Continue(());
        }
        refused_key = Some(String::from_utf8_lossy(key).into_owned());
        ControlFlow::Break(())
    });
    if let Some(key) = refused_key {
        return Some((Reason::Key, key, acl::Denied::Key.message(&user.name, name)));
    }
    let (channels, patterns) = match name {
        "publish" | "spublish" => (1..2.min(req.arg_count()), false),
        "subscribe" | "ssubscribe" => (1..req.arg_count(), false),
        "psubscribe" => (1..req.arg_count(), true),
        _ => return None,
    };
    let refused = channels
        .filter_map(|i| req.arg(i))
        .find(|channel| !user.may_use_channel(channel, patterns))?;
    let text = acl::Denied::Channel.message(&user.name, name);
    Some((
        Reason::Channel,
        String::from_utf8_lossy(refused).into_owned(),
        text,
    ))
}

/// What Redis lets a client run before it has authenticated.
fn allowed_before_auth(req: &Request) -> bool {
    let name = req.arg(0).unwrap_or_default();
    [&b"auth"[..], b"hello", b"quit"]
        .iter()
        .any(|n| name.eq_ignore_ascii_case(n))
}
