//! Transactions: MULTI, EXEC, DISCARD, WATCH, UNWATCH.
//!
//! Between MULTI and EXEC orthrus queues the commands itself, answering
//! `+QUEUED`, and checks them as Redis would at queue time; every key must
//! hash to the slot of the first one (or of WATCH), else the command gets
//! `-CROSSSLOT` and EXEC fails with `-EXECABORT`, as Redis does after a
//! queue-time error. EXEC sends `MULTI`, the commands and `EXEC` in one
//! piece to the slot's master: on a shared connection nothing can come in
//! between, and the replies come back together. If the slot moved, the
//! node rejects the commands at queue time and aborts, nothing ran, and
//! orthrus sends the whole transaction again to the new owner: the client
//! never sees that MOVED. WATCH needs the watched keys' node to remember
//! the watch for this client alone, so it holds a dedicated connection
//! until EXEC, DISCARD, UNWATCH or RESET, and EXEC then goes over it.

use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use orthrus_resp::{ReplyClass, Request, classify};

use crate::client::transaction::{Multi, Watch};
use crate::client::{Client, Pending};
use crate::cmd::reply::{array_elements, simple};
use crate::cmd::script;
use crate::node::Done;
use crate::node::answer::{error_reply, no_owner};
use crate::node::client::Dialect;
use crate::node::conn::BackendError;
use crate::node::forward::{self, Target, send_frames};
use crate::node::frames;
use crate::node::retry::{Next, Retry};
use crate::node::target::{can_take_over, owner};
use crate::process::engine::Engine;
use crate::route::kind::Local;
use crate::route::prefix::Prefixes;
use crate::route::table::cut::cuts_any;
use crate::route::table::{CommandTable, Rejection, Route};
use crate::worker::WorkerCtx;

mod probe;
mod watch;

const EXECABORT: &str = "EXECABORT Transaction discarded because of previous errors.";

/// Runs a transaction command: MULTI, EXEC, DISCARD, WATCH or UNWATCH.
pub fn command(
    client: &mut Client,
    req: &Request,
    table: &CommandTable,
    ctx: &Rc<WorkerCtx>,
) -> Pending {
    let name = req.arg(0).unwrap_or_default();
    let is = |n: &str| name.eq_ignore_ascii_case(n.as_bytes());
    let argc = req.arg_count();
    let arity_error = |name: &str| {
        Pending::Ready(error_reply(&format!(
            "ERR wrong number of arguments for '{name}' command"
        )))
    };
    for name in ["multi", "exec", "discard", "unwatch"] {
        if is(name) && argc != 1 {
            return arity_error(name);
        }
    }
    if is("watch") && argc < 2 {
        return arity_error("watch");
    }
    if is("multi") {
        return Pending::Ready(match client.multi {
            Some(_) => error_reply(
                &(ctx.shared.engine.load())
                    .not_in_multi("multi", "ERR MULTI calls can not be nested"),
            ),
            None => {
                client.multi = Some(Box::new(Multi {
                    slot: client.watch.as_ref().map(|w| w.slot),
                    ..Multi::default()
                }));
                simple("OK")
            }
        });
    }
    if is("exec") {
        return match client.multi.take() {
            None => Pending::Ready(error_reply("ERR EXEC without MULTI")),
            Some(multi) => exec(*multi, client.watch.take().map(|w| *w), client, ctx),
        };
    }
    if is("discard") {
        return Pending::Ready(match client.multi.take() {
            None => error_reply("ERR DISCARD without MULTI"),
            Some(_) => {
                unwatch(client);
                simple("OK")
            }
        });
    }
    if is("watch") {
        if client.multi.is_some() {
            let engine = ctx.shared.engine.load();
            let text = engine.not_in_multi("watch", "ERR WATCH inside MULTI is not allowed");
            return Pending::Ready(error_reply(&text));
        }
        return watch::watch(client, req, table, ctx);
    }
    // UNWATCH.
    Pending::Ready(match client.multi.as_mut() {
        None => {
            unwatch(client);
            simple("OK")
        }
        // Queued, as Redis queues it (EXEC forgets the watch anyway).
        Some(multi) => {
            multi.queued.push(req.frame().clone());
            simple("QUEUED")
        }
    })
}

/// Whether the client is inside MULTI and `req` is to be queued (QUIT and
/// RESET run at once).
#[inline]
pub fn queues(client: &Client, req: &Request) -> bool {
    let runs =
        |name: &[u8]| name.eq_ignore_ascii_case(b"quit") || name.eq_ignore_ascii_case(b"reset");
    client.multi.is_some() && !req.arg(0).is_some_and(runs)
}

/// Queues a command sent inside MULTI, or answers its queue-time error.
pub fn queue_in_multi(
    client: &mut Client,
    req: &Request,
    table: &CommandTable,
    ctx: &Rc<WorkerCtx>,
) -> Pending {
    let dialect = client.dialect();
    let Some(multi) = client.multi.as_mut() else {
        return Pending::Ready(error_reply("ERR orthrus: not inside MULTI"));
    };
    let limit = ctx.shared.settings.raw.client.query_buffer_limit;
    if let Some(error) = over_limit(multi, req, limit) {
        return Pending::Ready(error);
    }
    let passthrough = ctx.live().admin.passthrough;
    let writes = ctx.shared.scripts.may_write(table, req);
    multi.writes |= writes;
    let before = multi.queued.len();
    let engine = ctx.shared.engine.load();
    let queued = queue(multi, req, (table, &ctx.prefixes()), (passthrough, &engine));
    if multi.queued.len() > before {
        script::queued_in_multi(multi, req);
    }
    match queued {
        Ok(()) => probe::queued(multi, writes, dialect, ctx),
        Err(reply) => Pending::Ready(reply),
    }
}

/// Counts `req` into the transaction's bytes; past `limit`, the error
/// that aborts the transaction (EXEC then answers EXECABORT, as after any
/// queue-time error).
fn over_limit(multi: &mut Multi, req: &Request, limit: usize) -> Option<Bytes> {
    multi.bytes = multi.bytes.saturating_add(req.frame().len());
    (multi.bytes > limit).then(|| {
        abort(
            multi,
            &format!(
                "ERR orthrus: the transaction's queued commands are over client.query_buffer_limit ({limit} bytes)"
            ),
        )
    })
}

/// Checks a command at queue time and queues it, or returns its error.
fn queue(
    multi: &mut Multi,
    req: &Request,
    (table, prefixes): (&CommandTable, &Prefixes),
    (passthrough, engine): (bool, &Engine),
) -> Result<(), Bytes> {
    let name = req.arg(0).unwrap_or_default();
    if let Some(info) = table.get(name).filter(|info| info.no_multi) {
        // Before orthrus's own rules, as Redis checks it before running.
        let text = engine.not_in_multi(&info.name, "ERR Command not allowed inside a transaction");
        return Err(abort(multi, &text));
    }
    let (route, info) = table.route_info(req, prefixes);
    if prefixes.strips() && cuts_any(req, info, prefixes) {
        return Err(abort(
            multi,
            "ERR orthrus: keys of a route with remove_prefix cannot be used inside MULTI",
        ));
    }
    let slot = match route {
        Route::Slot(place) | Route::Blocking(place) => Some(place),
        Route::AnyNode | Route::SubscriptionNode | Route::Local(Local::Ping | Local::Echo) => None,
        Route::Split(..) => {
            return Err(abort(
                multi,
                "CROSSSLOT Keys in request don't hash to the same slot",
            ));
        }
        Route::Admin(info) if passthrough && &*info.name != "monitor" => return side(multi, req),
        Route::Admin(info) => return Err(abort(multi, &Rejection::admin(info).message(req))),
        Route::Reject(rejection) => return Err(abort(multi, &rejection.message(req))),
        // Run by orthrus at EXEC, in their place among the others.
        Route::FanOut(_) | Route::Local(Local::SlowLog) => return side(multi, req),
        Route::Local(_) | Route::Scan | Route::Transaction | Route::Subscription(_) => {
            let name = String::from_utf8_lossy(req.arg(0).unwrap_or_default()).to_ascii_uppercase();
            return Err(abort(
                multi,
                &format!("ERR orthrus: {name} cannot be used inside MULTI"),
            ));
        }
    };
    match (multi.slot, slot) {
        (Some(first), Some(this)) if first.upstream != this.upstream => {
            return Err(abort(multi, &Rejection::CrossRoute.message(req)));
        }
        (Some(first), Some(this)) if first != this => {
            return Err(abort(
                multi,
                "CROSSSLOT Keys in request don't hash to the same slot",
            ));
        }
        (None, Some(this)) => multi.slot = Some(this),
        _ => {}
    }
    if let (Some(_), Some(info)) = (slot, info) {
        probe::note_key(multi, req, info);
    }
    multi.queued.push(req.frame().clone());
    Ok(())
}

/// EXEC refused before it ran (a user's rules, the memory limit): as
/// Redis's `execCommandAbort`, the transaction is discarded (its WATCH
/// too) and the error comes as the reason of an `-EXECABORT`.
pub fn abort_exec(client: &mut Client, error: &str) -> Bytes {
    client.multi = None;
    unwatch(client);
    error_reply(&format!(
        "EXECABORT Transaction discarded because of: {error}"
    ))
}

/// Queues one of orthrus's own commands, run at EXEC.
fn side(multi: &mut Multi, req: &Request) -> Result<(), Bytes> {
    multi.side.push((multi.queued.len(), req.clone()));
    Ok(())
}

fn abort(multi: &mut Multi, msg: &str) -> Bytes {
    multi.aborted = true;
    error_reply(msg)
}

/// Ends a WATCH by closing its dedicated connection, which makes the node
/// forget the watch.
fn unwatch(client: &mut Client) {
    if let Some(watch) = client.watch.take() {
        // Dropping the lease closes the connection, which forgets the watch.
        watch.lease.borrow_mut().take();
    }
}

fn exec(mut multi: Multi, watch: Option<Watch>, client: &Client, ctx: &Rc<WorkerCtx>) -> Pending {
    if multi.aborted {
        return Pending::Ready(exec_abort(watch));
    }
    let Some(probe) = multi.probe.take() else {
        return exec_checked(multi, watch, client.dialect(), ctx);
    };
    // A deferred command starts once every earlier reply is written: the
    // probes' answers are all in.
    let dialect = client.dialect();
    let ctx = ctx.clone();
    Pending::deferred(Box::pin(async move {
        if probe.refused.get() {
            return Done::local(exec_abort(watch));
        }
        match exec_checked(multi, watch, dialect, &ctx) {
            Pending::Ready(reply) | Pending::Last(reply) => Done::local(reply),
            Pending::Remote(remote) => forward::resolve(&ctx.pool, remote).await,
            Pending::Future(f) | Pending::Deferred(f) => f.await,
        }
    }))
}

/// EXEC of a transaction that had a queue-time error: `-EXECABORT`, and
/// its WATCH forgotten.
fn exec_abort(watch: Option<Watch>) -> Bytes {
    if let Some(w) = watch {
        w.lease.borrow_mut().take();
    }
    error_reply(EXECABORT)
}

/// EXEC of a transaction that passed its queue-time checks.
fn exec_checked(
    mut multi: Multi,
    watch: Option<Watch>,
    dialect: Dialect,
    ctx: &Rc<WorkerCtx>,
) -> Pending {
    script::at_exec(&mut multi, &ctx.shared.scripts);
    if !multi.side.is_empty() {
        return exec_mixed(multi, watch, dialect, ctx);
    }
    let count = multi.queued.len();
    let mut frame =
        BytesMut::with_capacity(multi.queued.iter().map(Bytes::len).sum::<usize>() + 32);
    frame.extend_from_slice(b"*1\r\n$5\r\nMULTI\r\n");
    for q in &multi.queued {
        frame.extend_from_slice(q);
    }
    frame.extend_from_slice(b"*1\r\n$4\r\nEXEC\r\n");
    let frame = frame.freeze();
    let ctx = ctx.clone();
    let scripts = std::mem::take(&mut multi.scripts);
    let ran = move |ctx: &WorkerCtx| script::ran_in_multi(&ctx.shared.scripts, &scripts, 0..count);
    match watch {
        Some(w) => Pending::deferred(Box::pin(async move {
            let held = w.lease.borrow_mut().take();
            let Some(mut conn) = held else {
                return Done::local(error_reply(
                    "ERR orthrus: the WATCH connection was lost; the transaction was not run",
                ));
            };
            let started = Instant::now();
            let timeout = Some(ctx.shared.request_timeout_of(w.slot.upstream));
            let reply = match conn.call(&frame, count + 2, timeout).await {
                Ok(replies) => {
                    conn.release();
                    last_frame(&replies)
                }
                Err(e) => error_reply(&format!(
                    "ERR orthrus: connection lost during EXEC ({e}); the transaction may or may not have run"
                )),
            };
            if script::exec_ran(&reply) {
                ran(&ctx);
            }
            Done::from_nodes(reply, started.elapsed())
        })),
        None if count == 0 => Pending::Ready(Bytes::from_static(b"*0\r\n")),
        None => {
            let target = multi.slot.map_or(Target::Any, Target::Slot);
            Pending::deferred(Box::pin(async move {
                let waited = Cell::new(Duration::ZERO);
                let reply = run(&ctx, frame, target, dialect, count, &waited).await;
                if script::exec_ran(&reply) {
                    ran(&ctx);
                }
                Done::from_nodes(reply, waited.get())
            }))
        }
    }
}

/// EXEC of a transaction with commands orthrus runs itself (FLUSHALL,
/// CONFIG SET, ...): in queue order, each run of node commands as one
/// MULTI ... EXEC on the slot's master, each of orthrus's commands between
/// them, the replies joined into one array. Not atomic across those
/// pieces. A WATCH is checked first (an empty MULTI/EXEC on its
/// connection): if a watched key changed, nothing runs and the reply is
/// nil, as in Redis.
fn exec_mixed(
    multi: Multi,
    watch: Option<Watch>,
    dialect: Dialect,
    ctx: &Rc<WorkerCtx>,
) -> Pending {
    let ctx = ctx.clone();
    Pending::deferred(Box::pin(async move {
        let waited = Cell::new(Duration::ZERO);
        if let Some(w) = watch {
            let held = w.lease.borrow_mut().take();
            let Some(mut conn) = held else {
                return Done::local(error_reply(
                    "ERR orthrus: the WATCH connection was lost; the transaction was not run",
                ));
            };
            let check = b"*1\r\n$5\r\nMULTI\r\n*1\r\n$4\r\nEXEC\r\n";
            match conn
                .call(
                    check,
                    2,
                    Some(ctx.shared.request_timeout_of(w.slot.upstream)),
                )
                .await
            {
                Ok(replies) => {
                    conn.release();
                    let reply = last_frame(&replies);
                    if !reply.starts_with(b"*0") {
                        return Done::local(reply); // nil: a watched key changed
                    }
                }
                Err(e) => {
                    let msg = format!(
                        "ERR orthrus: WATCH check failed ({e}); the transaction was not run"
                    );
                    return Done::local(error_reply(&msg));
                }
            }
        }
        let target = multi.slot.map_or(Target::Any, Target::Slot);
        let mut out: Vec<Bytes> = Vec::with_capacity(multi.queued.len() + multi.side.len());
        let mut from = 0;
        let mut sides = multi.side.into_iter();
        loop {
            let next = sides.next();
            let until = next.as_ref().map_or(multi.queued.len(), |(at, _)| *at);
            if let Some(segment) = multi.queued.get(from..until).filter(|s| !s.is_empty()) {
                let mut frame = BytesMut::from(&b"*1\r\n$5\r\nMULTI\r\n"[..]);
                segment.iter().for_each(|q| frame.extend_from_slice(q));
                frame.extend_from_slice(b"*1\r\n$4\r\nEXEC\r\n");
                let reply = run(
                    &ctx,
                    frame.freeze(),
                    target.clone(),
                    dialect,
                    segment.len(),
                    &waited,
                )
                .await;
                if script::exec_ran(&reply) {
                    script::ran_in_multi(&ctx.shared.scripts, &multi.scripts, from..until);
                }
                match array_elements(&reply) {
                    Some(elements) => out.extend(elements),
                    None => return Done::from_nodes(reply, waited.get()),
                }
                from = until;
            }
            let Some((_, req)) = next else { break };
            out.push(run_side(&ctx, req, dialect).await);
        }
        let mut reply = BytesMut::with_capacity(out.iter().map(Bytes::len).sum::<usize>() + 16);
        orthrus_resp::encode::array_header(&mut reply, out.len());
        out.iter().for_each(|e| reply.extend_from_slice(e));
        Done::from_nodes(reply.freeze(), waited.get())
    }))
}

/// One of orthrus's own commands queued in a MULTI, run at EXEC.
async fn run_side(ctx: &Rc<WorkerCtx>, req: Request, dialect: Dialect) -> Bytes {
    let table = ctx.commands();
    let (route, info) = table.route_info(&req, &ctx.prefixes());
    let readonly = info.is_some_and(|i| i.readonly);
    script::note(&ctx.shared.scripts, &req);
    let script_exists = req
        .arg(0)
        .is_some_and(|n| n.eq_ignore_ascii_case(b"script"))
        && req
            .arg(1)
            .is_some_and(|s| s.eq_ignore_ascii_case(b"exists"))
        && req.arg_count() > 2;
    let pending = match route {
        Route::FanOut(_) if script_exists => script::exists(ctx, &req, dialect),
        Route::FanOut(how) => crate::cmd::fanout::dispatch(ctx, &req, how, dialect, readonly),
        Route::Local(Local::SlowLog) => {
            Pending::Ready(crate::observe::slowlog::command(&ctx.shared.slowlog, &req))
        }
        Route::Admin(info) => crate::cmd::admin::dispatch(ctx, &req, &info, dialect),
        Route::Reject(rejection) => Pending::Ready(error_reply(&rejection.message(&req))),
        _ => Pending::Ready(error_reply(
            "ERR orthrus: this command cannot run inside MULTI",
        )),
    };
    match pending {
        Pending::Ready(reply) | Pending::Last(reply) => reply,
        Pending::Remote(remote) => forward::resolve(&ctx.pool, remote).await.reply,
        Pending::Future(f) | Pending::Deferred(f) => f.await.reply,
    }
}

/// Sends a whole transaction on a shared connection, sending it again
/// while the node rejects it because its slot moved or is moving.
async fn run(
    ctx: &Rc<WorkerCtx>,
    frame: Bytes,
    target: Target,
    dialect: Dialect,
    count: usize,
    waited: &Cell<Duration>,
) -> Bytes {
    let env = ctx.pool.env();
    let mut retry = Retry::from_now(env, target.upstream());
    loop {
        let map = target.map(env);
        let addr = match owner(&map, &target).cloned() {
            Some(addr) => addr,
            None => return no_owner(&map),
        };
        let reply = send_frames(&ctx.pool, &addr, &frame, dialect, false, count + 2)
            .await
            .unwrap_or(Err(BackendError::Lost));
        let replies = match reply {
            Ok(delivered) => {
                waited.set(waited.get() + delivered.took);
                delivered.frame
            }
            Err(e @ (BackendError::NotSent | BackendError::Unreachable))
                if (e == BackendError::NotSent || can_take_over(&map, &target, &addr))
                    && retry.after_failure(retry.failure_delay()).await =>
            {
                continue;
            }
            Err(e) => {
                return error_reply(&format!(
                    "ERR orthrus: transaction not run or outcome unknown: {e}"
                ));
            }
        };
        let frames: Vec<Bytes> = frames::split(&replies).collect();
        // A queued command the node redirected (Redis: EXEC then answers
        // EXECABORT), or EXEC itself redirected (Valkey 9 checks the slot
        // at EXEC): nothing ran.
        let redirected = frames
            .iter()
            .skip(1)
            .take(count + 1)
            .find(|f| !matches!(classify(f), ReplyClass::Normal | ReplyClass::Error));
        let Some(redirected) = redirected else {
            return exec_reply(&frames);
        };
        match retry.after_reply(env, redirected, &addr).await {
            // MOVED patched the slot map; ASK means the slot's keys are
            // split between two nodes mid-migration, and TRYAGAIN or
            // CLUSTERDOWN a busy slot: the whole transaction goes again to
            // the slot's owner, never after ASKING to the importing node.
            Next::Redirect { .. } | Next::Again => {}
            Next::Reply => return frames.last().cloned().unwrap_or_default(),
            Next::Answer(answer) => return answer,
        }
    }
}

fn last_frame(replies: &Bytes) -> Bytes {
    exec_reply(&frames::split(replies).collect::<Vec<_>>())
}

/// EXEC's reply among the node's replies to `MULTI`, the commands and
/// `EXEC`. When the node refused a queued command (its state changed
/// since orthrus queued it: out of memory, a failed save, too few
/// replicas, a busy script), its `-EXECABORT` names the refusal, as
/// Redis's does when its EXEC itself is refused.
fn exec_reply(frames: &[Bytes]) -> Bytes {
    let Some(last) = frames.last() else {
        return error_reply("ERR orthrus: empty reply");
    };
    let queued = frames.get(1..frames.len() - 1).unwrap_or_default();
    let refusal = queued.iter().find(|f| f.first() == Some(&b'-'));
    match refusal {
        Some(refusal) if last.starts_with(b"-EXECABORT") => {
            let text = String::from_utf8_lossy(refusal.get(1..).unwrap_or_default());
            error_reply(&format!(
                "EXECABORT Transaction discarded because of: {}",
                text.trim_end()
            ))
        }
        _ => last.clone(),
    }
}
