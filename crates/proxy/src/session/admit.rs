//! The first of a request's two stages: every check, on the request
//! exactly as the client sent it (keys with their route prefixes, before
//! anything is cut or copied). Authentication, the user's command, key and
//! channel rules, the memory limit, the client's database where a key's
//! upstream lacks it, a tracking client's keys of a route that cuts its
//! prefix, and RESP2's subscriber mode; a refusal
//! inside MULTI marks the transaction failed, as Redis's queue-time
//! refusals do (EXEC then answers `-EXECABORT`), and a refused EXEC
//! discards it with the refusal as its reason. What is refused here is
//! answered at once and reaches no upstream, mirror or HOTKEYS session.

use std::borrow::Cow;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use orthrus_resp::Request;

use crate::acl::{self, Access};
use crate::client::{Client, Pending};
use crate::cmd::{local, pubsub, transaction};
use crate::node::answer::error_reply;
use crate::observe::acl_log::Reason;
use crate::observe::stats::WorkerStats;
use crate::route::table::{CommandInfo, Route, cut};
use crate::worker::WorkerCtx;

/// Commands that run code which may name any key or channel.
const SCRIPT_RUNNERS: &[&str] = &[
    "eval",
    "evalsha",
    "eval_ro",
    "evalsha_ro",
    "fcall",
    "fcall_ro",
];

/// Why a user may not run a request: the reply's text and, for ACL LOG,
/// the reason and the object refused (none for the errors Redis gives
/// without logging, SORT's options).
struct Refused {
    log: Option<(Reason, String)>,
    text: String,
}

/// Checks `req` as sent: `None` when it may go on, else its answer (a
/// refusal, or RESP2 subscriber mode's PING). A client with no check to
/// pass (authenticated, no user rules, no subscription, the memory limit
/// not reached, not tracking) pays five loads.
#[inline]
pub fn admit(
    client: &mut Client,
    req: &Request,
    (route, info): (&Route, Option<&Arc<CommandInfo>>),
    ctx: &WorkerCtx,
) -> Option<Pending> {
    let checked = !client.authenticated
        || client.names.as_ref().is_some_and(|n| n.acl.is_some())
        || client.pubsub.is_some()
        || client.db != 0
        || client.tracking.is_some()
        || ctx.shared.over_memory.load(Ordering::Relaxed);
    if !checked {
        return None;
    }
    checks(client, req, (route, info), ctx)
}

/// [`admit`] for a client with something to check.
#[inline(never)]
fn checks(
    client: &mut Client,
    req: &Request,
    (route, info): (&Route, Option<&Arc<CommandInfo>>),
    ctx: &WorkerCtx,
) -> Option<Pending> {
    let refusal = refusal(client, req, info, ctx).or_else(|| lacks_database(client, route, ctx));
    if let Some(text) = refusal {
        WorkerStats::bump(&ctx.stats().rejected_commands);
        // Redis answers a refused EXEC this way in MULTI or not.
        if req.arg(0).is_some_and(|n| n.eq_ignore_ascii_case(b"exec")) {
            return Some(Pending::Ready(transaction::abort_exec(client, &text)));
        }
        if transaction::queues(client, req) {
            if let Some(multi) = client.multi.as_mut() {
                multi.aborted = true;
            }
        }
        return Some(Pending::Ready(error_reply(&text)));
    }
    // After the command's own errors (unknown, arity, CROSSSLOT), as in
    // Redis.
    if client.pubsub.is_some()
        && !matches!(route, Route::Subscription(_) | Route::Reject(_))
        && pubsub::restricts(client, req)
    {
        let name = info.map_or(Cow::Borrowed(""), |info| info.acl_view(req).0);
        return Some(pubsub::in_subscriber_mode(client, req, &name));
    }
    None
}

/// The nodes' own error when the client's database is not served where
/// its keys go (a route to an upstream with fewer databases than the
/// default one, where SELECT was checked). Keys of a split past its first
/// two places are checked by their connections' SELECT.
fn lacks_database(client: &Client, route: &Route, ctx: &WorkerCtx) -> Option<String> {
    if client.db == 0 {
        return None;
    }
    let databases = &ctx.shared.databases;
    let places = match route {
        Route::Slot(place) | Route::Blocking(place) => [Some(place), None],
        Route::Split(_, cross) => [Some(&cross.first), Some(&cross.then)],
        _ => return None,
    };
    places
        .into_iter()
        .flatten()
        .find_map(|place| databases.refusal(place.upstream, client.db))
        .map(str::to_owned)
}

/// The error text of a refused request, if it is refused.
#[inline]
fn refusal(
    client: &Client,
    req: &Request,
    info: Option<&Arc<CommandInfo>>,
    ctx: &WorkerCtx,
) -> Option<String> {
    if !client.authenticated && !allowed_before_auth(req) {
        return Some("NOAUTH Authentication required.".to_owned());
    }
    let limits = client.names.as_ref().and_then(|n| n.acl.as_ref());
    if let (Some(user), Some(info)) = (limits, info) {
        if let Some(Refused { log, text }) = by_rules(user, req, info) {
            if let Some((reason, object)) = log {
                let who = local::client_info(client);
                ctx.shared.acl_log.record(reason, &object, &user.name, who);
            }
            return Some(text);
        }
    }
    if ctx.shared.over_memory.load(Ordering::Relaxed) && !allowed_over_memory(req) {
        return Some("OOM orthrus: memory use is over memory_limit_mb; request refused".to_owned());
    }
    if client.tracking.is_some()
        && ctx
            .pool
            .env()
            .with_prefixes(|p| p.strips() && cut::cuts_any(req, info, p))
    {
        return Some(TRACKING_CUT.to_owned());
    }
    None
}

/// Why a tracking client may not use the keys of a route that cuts its
/// prefix: the node remembers, and invalidates, the keys as it got them.
const TRACKING_CUT: &str = "ERR orthrus: keys of a route with remove_prefix cannot be used with CLIENT TRACKING on (the nodes would name them without their prefix)";

/// A user's rules against one request, as Redis checks them: the command
/// by name and category, every key (read, written or neither, as its key
/// specifications say; SORT's `STORE` too), the channels of the pub/sub
/// commands that name some (SSUBSCRIBE's and SPUBLISH's included, which
/// stand where keys do). Then what a key pattern cannot bound: scripts and
/// functions, which may name any key and call any command, are refused to
/// a user with key, channel or command rules; SORT's BY and GET patterns
/// need every key, as in Redis; a command whose keys orthrus cannot find
/// needs every key.
fn by_rules(user: &acl::User, req: &Request, info: &CommandInfo) -> Option<Refused> {
    let (name, categories) = info.acl_view(req);
    // Redis's `no_auth` commands are every user's, whatever its rules.
    let no_auth = matches!(&*name, "auth" | "hello" | "reset" | "quit");
    if !no_auth && !user.may_run(&name, categories) {
        let text = acl::Denied::Command.message(&user.name, &name);
        return Some(Refused {
            log: Some((Reason::Command, name.into_owned())),
            text,
        });
    }
    let mut refused_key = None;
    let _ = info.for_each_key(req, |key, access| {
        if access.is_channel() || user.may_access_key(key, access) {
            return ControlFlow::Continue(());
        }
        refused_key = Some(String::from_utf8_lossy(key).into_owned());
        ControlFlow::Break(())
    });
    if let Some(key) = refused_key {
        let text = acl::Denied::Key.message(&user.name, &name);
        return Some(Refused {
            log: Some((Reason::Key, key)),
            text,
        });
    }
    if let Some(refused) = channel_refusal(user, req, &name) {
        return Some(refused);
    }
    unbounded_keys(user, req, info, &name)
}

/// The channels of PUBLISH, SPUBLISH and the subscribe commands.
fn channel_refusal(user: &acl::User, req: &Request, name: &str) -> Option<Refused> {
    let (channels, patterns) = match name {
        "publish" | "spublish" => (1..2.min(req.arg_count()), false),
        "subscribe" | "ssubscribe" => (1..req.arg_count(), false),
        "psubscribe" => (1..req.arg_count(), true),
        _ => return None,
    };
    let refused = channels
        .filter_map(|i| req.arg(i))
        .find(|channel| !user.may_use_channel(channel, patterns))?;
    Some(Refused {
        log: Some((
            Reason::Channel,
            String::from_utf8_lossy(refused).into_owned(),
        )),
        text: acl::Denied::Channel.message(&user.name, name),
    })
}

/// Requests whose keys no pattern check can bound, for a user whose
/// patterns do not cover every key.
fn unbounded_keys(
    user: &acl::User,
    req: &Request,
    info: &CommandInfo,
    name: &str,
) -> Option<Refused> {
    if SCRIPT_RUNNERS.contains(&name) && !user.is_unrestricted() {
        return Some(Refused {
            log: Some((Reason::Command, name.to_owned())),
            text: format!(
                "NOPERM orthrus: user {} has key, channel or command rules, and a script or function may touch any key or channel and run any command: '{name}' is refused",
                user.name
            ),
        });
    }
    if info.keys_incomplete && !user.has_all_keys(Access::READ_WRITE) {
        return Some(Refused {
            log: Some((Reason::Command, name.to_owned())),
            text: format!(
                "NOPERM orthrus: '{name}' names keys orthrus cannot find, which user {}'s key rules could not check",
                user.name
            ),
        });
    }
    if (name == "sort" || name == "sort_ro") && !user.has_all_keys(Access::READ) {
        return sort_refusal(req);
    }
    None
}

/// SORT's BY with a pattern, or any GET, for a user who may not read
/// every key: Redis's own errors.
fn sort_refusal(req: &Request) -> Option<Refused> {
    let mut i = 2usize;
    while let Some(arg) = req.arg(i) {
        let next = req.arg(i.saturating_add(1));
        let option = if arg.eq_ignore_ascii_case(b"by") {
            next.is_some_and(|p| p.contains(&b'*')).then_some("BY")
        } else if arg.eq_ignore_ascii_case(b"get") && next.is_some() {
            Some("GET")
        } else {
            None
        };
        if let Some(option) = option {
            return Some(Refused {
                log: None,
                text: format!(
                    "ERR {option} option of SORT denied due to insufficient ACL permissions."
                ),
            });
        }
        let skip = if arg.eq_ignore_ascii_case(b"limit") {
            2
        } else if arg.eq_ignore_ascii_case(b"by")
            || arg.eq_ignore_ascii_case(b"get")
            || arg.eq_ignore_ascii_case(b"store")
        {
            1
        } else {
            0
        };
        i = i.saturating_add(skip).saturating_add(1);
    }
    None
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

/// What Redis lets a client run before it has authenticated.
fn allowed_before_auth(req: &Request) -> bool {
    let name = req.arg(0).unwrap_or_default();
    [&b"auth"[..], b"hello", b"quit"]
        .iter()
        .any(|n| name.eq_ignore_ascii_case(n))
}
