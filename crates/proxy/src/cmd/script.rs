//! Lua script bodies: orthrus keeps the ones it sees (EVAL, EVAL_RO,
//! SCRIPT LOAD), bounded, so that EVALSHA works wherever its key lives.
//!
//! A script that ran with EVAL is cached by the one master that ran it; an
//! EVALSHA of it for a key on another master would get `NOSCRIPT` there,
//! so orthrus sends it as the EVAL of the body it holds, in its place among
//! the client's requests. A script loaded with SCRIPT LOAD (sent to every
//! master) is called by its SHA1; a `NOSCRIPT` for it (a master restarted
//! since) loads it on every master again and sends the EVALSHA again, so
//! the client sees the script's reply. Inside MULTI the same is decided at
//! EXEC, and the bodies queued are noted once they ran. SCRIPT EXISTS
//! answers 1 for a script orthrus holds (EVALSHA of it will run), and
//! SCRIPT FLUSH forgets them all, as it makes the nodes forget theirs.

use std::ops::Range;
use std::rc::Rc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use orthrus_resp::{Request, encode};

use crate::client::Pending;
use crate::client::transaction::Multi;
use crate::cmd::fanout::send_to_each;
use crate::cmd::reply::{array_elements, integer};
use crate::node::Done;
use crate::node::answer::no_owner;
use crate::node::client::Dialect;
use crate::node::dedicated::DedicatedPool;
use crate::node::forward::{self, Access, Sent, Target};
use crate::route::table::Route;
use crate::scripts::Scripts;
use crate::worker::WorkerCtx;

/// Notes what a scripting command tells orthrus about the bodies it
/// keeps: EVAL's and SCRIPT LOAD's body, SCRIPT FLUSH forgets them all,
/// FUNCTION LOAD's library, FUNCTION DELETE/FLUSH/RESTORE forget those.
/// Called where the command runs: at once, or at EXEC inside MULTI.
pub fn note(scripts: &Scripts, req: &Request) {
    let Some(name) = req.arg(0) else { return };
    let is = |n: &[u8]| name.eq_ignore_ascii_case(n);
    let sub = req.arg(1).unwrap_or_default();
    let sub_is = |n: &[u8]| sub.eq_ignore_ascii_case(n);
    if is(b"eval") || is(b"eval_ro") {
        if let Some(body) = req.arg_bytes(1) {
            scripts.keep(&body);
        }
    } else if is(b"script") && sub_is(b"load") {
        if let Some(body) = req.arg_bytes(2) {
            scripts.keep_everywhere(&body);
        }
    } else if is(b"script") && sub_is(b"flush") {
        scripts.clear();
    } else if is(b"function") && sub_is(b"load") {
        if let Some(body) = req.arg_count().checked_sub(1).and_then(|i| req.arg(i)) {
            scripts.keep_library(body);
        }
    } else if is(b"function") && (sub_is(b"delete") || sub_is(b"flush") || sub_is(b"restore")) {
        scripts.forget_functions();
    }
}

/// Remembers a scripting command just queued in MULTI (the last of
/// `multi.queued`), for [`at_exec`] and [`ran_in_multi`].
pub fn queued_in_multi(multi: &mut Multi, req: &Request) {
    let name = req.arg(0).unwrap_or_default();
    let scripted = [&b"eval"[..], b"eval_ro", b"evalsha", b"evalsha_ro"]
        .iter()
        .any(|n| name.eq_ignore_ascii_case(n));
    if let (true, Some(at)) = (scripted, multi.queued.len().checked_sub(1)) {
        multi.scripts.push((at, req.clone()));
    }
}

/// At EXEC: a queued EVALSHA of a body orthrus keeps is sent as the EVAL
/// of it (same reply): the master that runs the transaction may lack the
/// script (it ran with EVAL on another), and a NOSCRIPT inside EXEC cannot
/// be followed. Decided at EXEC, as the node looks the script up then.
pub fn at_exec(multi: &mut Multi, scripts: &Scripts) {
    for (at, req) in &multi.scripts {
        let name = req.arg(0).unwrap_or_default();
        if !(name.eq_ignore_ascii_case(b"evalsha") || name.eq_ignore_ascii_case(b"evalsha_ro")) {
            continue;
        }
        let Some(body) = req.arg(1).and_then(|sha| scripts.body(sha)) else {
            continue;
        };
        if let (Some(queued), Some(frame)) = (multi.queued.get_mut(*at), as_eval(req, &body)) {
            *queued = frame;
        }
    }
}

/// `EVAL body ...` for `EVALSHA sha ...` (`EVAL_RO` for `EVALSHA_RO`).
pub fn as_eval(req: &Request, body: &[u8]) -> Option<Bytes> {
    let name = req.arg(0)?;
    let eval: &[u8] = if name.eq_ignore_ascii_case(b"evalsha_ro") {
        b"EVAL_RO"
    } else {
        b"EVAL"
    };
    let mut args: Vec<&[u8]> = vec![eval, body];
    args.extend((2..req.arg_count()).filter_map(|i| req.arg(i)));
    Some(orthrus_resp::encode::command(&args))
}

/// Whether an EXEC's reply says its commands ran: an array, not a nil (a
/// watched key changed) nor an error (EXECABORT).
pub fn exec_ran(reply: &[u8]) -> bool {
    reply.starts_with(b"*") && !reply.starts_with(b"*-1")
}

/// Notes the scripts of a MULTI whose places in the queue are in `range`,
/// once they ran: a SCRIPT EXISTS before them in the same transaction, or
/// from another client meanwhile, does not see them yet, as with Redis.
pub fn ran_in_multi(scripts: &Scripts, queued: &[(usize, Request)], range: Range<usize>) {
    for (_, req) in queued.iter().filter(|(at, _)| range.contains(at)) {
        note(scripts, req);
    }
}

/// Runs a scripting command that needs orthrus's script bodies; `None`
/// lets it take its usual route. Every one is [`note`]d first.
pub fn intercept(
    ctx: &Rc<WorkerCtx>,
    req: &Request,
    route: &Route,
    dialect: Dialect,
    access: Access,
) -> Option<Pending> {
    let name = req.arg(0)?;
    let is = |n: &[u8]| name.eq_ignore_ascii_case(n);
    let scripts = &ctx.shared.scripts;
    note(scripts, req);
    let target = match route {
        Route::Slot(place) => Some(Target::Slot(*place)),
        Route::AnyNode => Some(Target::Any),
        _ => None,
    };
    let eval = is(b"eval") || is(b"eval_ro");
    let by_sha = is(b"evalsha") || is(b"evalsha_ro");
    let fcall = is(b"fcall") || is(b"fcall_ro");
    if eval || by_sha || fcall {
        let frame = req.frame().clone();
        // An EVALSHA whose body orthrus holds can be loaded where it is
        // missing; every other script or function is sent on as usual.
        let held = if by_sha {
            scripts.body(req.arg(1)?)
        } else {
            None
        };
        return Some(match held {
            // Loaded everywhere: sent as it is, NOSCRIPT (a node restarted
            // since) followed by loading it again.
            Some(body) if scripts.everywhere(req.arg(1)?) => {
                evalsha(ctx, frame, body, target?, dialect, access)
            }
            // Run with EVAL on one master only: sent as the EVAL of it, in
            // its place among the client's requests (following a NOSCRIPT
            // would run it after requests pipelined behind it).
            Some(body) => {
                let as_eval = as_eval(req, &body)?;
                timed(ctx, as_eval, target?, dialect, access, false)
            }
            None => timed(ctx, frame, target?, dialect, access, fcall),
        });
    }
    let sub = req.arg(1)?;
    if (is(b"script") || is(b"function")) && sub.eq_ignore_ascii_case(b"kill") {
        if req.arg_count() != 2 {
            let name = String::from_utf8_lossy(name).to_ascii_lowercase();
            return Some(Pending::Ready(crate::node::answer::error_reply(&format!(
                "ERR wrong number of arguments for '{name}|kill' command"
            ))));
        }
        return Some(kill(ctx, req.frame().clone(), dialect));
    }
    if is(b"function") && sub.eq_ignore_ascii_case(b"stats") && req.arg_count() == 2 {
        return Some(function_stats(ctx, req.frame().clone(), dialect));
    }
    if is(b"script") && sub.eq_ignore_ascii_case(b"exists") && req.arg_count() > 2 {
        return Some(exists(ctx, req, dialect));
    }
    None
}

/// A script or function sent on as usual, noted as running until its reply
/// (PING answers `-BUSY` while one runs past the busy threshold).
fn timed(
    ctx: &Rc<WorkerCtx>,
    frame: Bytes,
    target: Target,
    dialect: Dialect,
    access: Access,
    function: bool,
) -> Pending {
    // From when it is sent: its future is polled only once the client's
    // earlier replies are in.
    let running = ctx.shared.scripts.started(function);
    let sent = forward::forward(&ctx.pool, frame, target, dialect, access);
    let ctx = ctx.clone();
    Pending::Future(Box::pin(async move {
        let _running = running;
        resolve(&ctx, sent).await
    }))
}

/// EVALSHA of a script orthrus holds: on `NOSCRIPT`, SCRIPT LOAD on every
/// master, then the EVALSHA once more.
fn evalsha(
    ctx: &Rc<WorkerCtx>,
    frame: Bytes,
    body: Bytes,
    target: Target,
    dialect: Dialect,
    access: Access,
) -> Pending {
    let running = ctx.shared.scripts.started(false);
    let first = forward::forward(&ctx.pool, frame.clone(), target.clone(), dialect, access);
    let ctx = ctx.clone();
    Pending::Future(Box::pin(async move {
        let _running = running;
        let done = resolve(&ctx, first).await;
        if !done.reply.starts_with(b"-NOSCRIPT") {
            return done;
        }
        let mut load = BytesMut::with_capacity(body.len() + 40);
        encode::array_header(&mut load, 3);
        encode::bulk(&mut load, b"SCRIPT");
        encode::bulk(&mut load, b"LOAD");
        encode::bulk(&mut load, &body);
        let masters = ctx.shared.masters();
        let sent = send_to_each(&ctx, masters, &load.freeze(), dialect, false);
        let (replies, _) = forward::resolve_all(&ctx.pool, sent).await;
        if let Some(err) = replies.into_iter().find(|r| r.starts_with(b"-")) {
            return Done::from_nodes(err, std::time::Duration::ZERO);
        }
        ctx.shared.scripts.keep_everywhere(&body);
        let again = forward::forward(&ctx.pool, frame, target, dialect, access);
        resolve(&ctx, again).await
    }))
}

async fn resolve(ctx: &Rc<WorkerCtx>, sent: Sent) -> Done {
    match sent {
        Sent::Remote(remote) => forward::resolve(&ctx.pool, remote).await,
        Sent::Refused { reply, .. } => Done::local(reply),
    }
}

/// SCRIPT KILL, FUNCTION KILL: to every master, each over a connection of
/// its own (the shared one to the busy node waits behind the script). The
/// master running the script answers `+OK`, the others `-NOTBUSY`; the
/// client gets the `+OK`, else the busy master's error (`-BUSY`: SCRIPT
/// KILL of a function), else the first master's.
fn kill(ctx: &Rc<WorkerCtx>, frame: Bytes, dialect: Dialect) -> Pending {
    let ctx = ctx.clone();
    Pending::Future(Box::pin(async move {
        let replies = ask_every_master(&ctx, &frame, dialect).await;
        let pick = replies
            .iter()
            .find(|r| !r.starts_with(b"-"))
            .or_else(|| replies.iter().find(|r| !r.starts_with(b"-NOTBUSY")))
            .or_else(|| replies.first())
            .cloned();
        Done::local(pick.unwrap_or_else(|| no_owner(&ctx.slots())))
    }))
}

/// FUNCTION STATS: every master over connections of their own (a busy one
/// still answers it, not over its shared connection); the reply of the
/// master running a script, else the first master's.
fn function_stats(ctx: &Rc<WorkerCtx>, frame: Bytes, dialect: Dialect) -> Pending {
    let ctx = ctx.clone();
    Pending::Future(Box::pin(async move {
        let replies = ask_every_master(&ctx, &frame, dialect).await;
        let limits = orthrus_resp::Limits::for_replies();
        let running = |reply: &Bytes| {
            let Ok(Some((value, _))) = orthrus_resp::Value::parse(reply, &limits) else {
                return false;
            };
            let fields: Vec<&orthrus_resp::Value> = match &value {
                orthrus_resp::Value::Array(a) => a.iter().collect(),
                orthrus_resp::Value::Map(m) => m.iter().flat_map(|(k, v)| [k, v]).collect(),
                _ => return false,
            };
            fields
                .chunks_exact(2)
                .find(|kv| kv.first().and_then(|k| k.as_str()) == Some("running_script"))
                .and_then(|kv| kv.get(1))
                .is_some_and(|v| {
                    !matches!(
                        v,
                        orthrus_resp::Value::Null | orthrus_resp::Value::NullArray
                    )
                })
        };
        let pick = replies
            .iter()
            .find(|r| running(r))
            .or_else(|| replies.first())
            .cloned();
        Done::local(pick.unwrap_or_else(|| no_owner(&ctx.slots())))
    }))
}

/// Sends `frame` to every master over dedicated connections, at once; the
/// replies (or orthrus's errors) in the masters' order.
async fn ask_every_master(ctx: &Rc<WorkerCtx>, frame: &Bytes, dialect: Dialect) -> Vec<Bytes> {
    let masters = ctx.shared.masters();
    let now = Instant::now();
    let asks = masters.iter().map(|addr| {
        let (ctx, frame) = (ctx.clone(), frame.clone());
        // Each master's upstream's timeout.
        let timeout = ctx.shared.request_timeout_at(addr);
        let deadline = now + timeout;
        async move {
            let taken = DedicatedPool::take(&ctx.dedicated, addr, dialect, None, deadline).await;
            let mut conn = match taken {
                Ok(conn) => conn,
                Err(e) => {
                    return crate::node::answer::error_reply(&format!(
                        "ERR orthrus: cannot reach {addr}: {e}"
                    ));
                }
            };
            match conn.call(&frame, 1, Some(timeout)).await {
                Ok(reply) => {
                    conn.release();
                    reply
                }
                Err(e) => crate::node::answer::error_reply(&format!(
                    "ERR orthrus: no reply from {addr}: {e}"
                )),
            }
        }
    });
    futures_join_all(asks).await
}

/// Runs `futures` at once on this task; their outputs in order.
async fn futures_join_all<F: std::future::Future>(
    futures: impl Iterator<Item = F>,
) -> Vec<F::Output> {
    let mut set = Vec::new();
    for f in futures {
        set.push(Box::pin(f));
    }
    let mut out: Vec<Option<F::Output>> = set.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut done = true;
        for (f, slot) in set.iter_mut().zip(out.iter_mut()) {
            if slot.is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => *slot = Some(v),
                    std::task::Poll::Pending => done = false,
                }
            }
        }
        if done {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    out.into_iter().flatten().collect()
}

/// SCRIPT EXISTS: 1 where every master has the script, or orthrus holds
/// its body (an EVALSHA of it runs).
pub fn exists(ctx: &Rc<WorkerCtx>, req: &Request, dialect: Dialect) -> Pending {
    let held: Vec<bool> = (2..req.arg_count())
        .map(|i| {
            req.arg(i)
                .is_some_and(|sha| ctx.shared.scripts.body(sha).is_some())
        })
        .collect();
    let masters = ctx.shared.masters();
    let sent = send_to_each(ctx, masters, req.frame(), dialect, true);
    let ctx = ctx.clone();
    Pending::Future(Box::pin(async move {
        let (replies, backend) = forward::resolve_all(&ctx.pool, sent).await;
        if let Some(err) = replies.iter().find(|r| r.starts_with(b"-")) {
            return Done::from_nodes(err.clone(), backend);
        }
        let mut answer: Vec<bool> = held.clone();
        let mut all = vec![true; held.len()];
        for r in &replies {
            let Some(elements) = array_elements(r) else {
                let msg = "ERR orthrus: unexpected reply from a master";
                return Done::from_nodes(crate::node::answer::error_reply(msg), backend);
            };
            for (i, e) in elements.iter().enumerate() {
                if let Some(a) = all.get_mut(i) {
                    *a &= &e[..] == b":1\r\n";
                }
            }
        }
        for (a, every) in answer.iter_mut().zip(&all) {
            *a |= *every && !replies.is_empty();
        }
        let mut out = BytesMut::with_capacity(8 + 4 * answer.len());
        encode::array_header(&mut out, answer.len());
        for a in answer {
            out.extend_from_slice(&integer(i64::from(a)));
        }
        Done::from_nodes(out.freeze(), backend)
    }))
}
