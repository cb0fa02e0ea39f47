//! A client connection: two tasks joined by a bounded queue.
//!
//! The reader parses every complete request in its buffer (any pipeline
//! depth), answers local commands at once and sends the rest to the
//! cluster, and queues one [`Pending`] reply per request, in request order.
//! The writer takes the queue in order and writes every reply that is
//! ready in one write. The queue's bound is the client's pipelining limit:
//! when it is full the reader stops reading, and TCP pushes back.

use std::cell::Cell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use orthrus_resp::{Protocol, Request, RequestParser};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::net::tcp::OwnedReadHalf;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::client::subscriptions::PubSub;
use crate::client::{Client, Pending, PushSink, ReplyMode};
use crate::cmd::transaction;
use crate::cmd::{blocking, fanout, local, scan, split};
use crate::node::Done;
use crate::node::forward::{self, Sent, Target, error_reply};
use crate::observe::stats::WorkerStats;
use crate::route::kind::Family;
use crate::route::table::Route;
use crate::worker::WorkerCtx;

mod writer;

use writer::Writer;

const READ_CHUNK: usize = 16 * 1024;
/// What a client may pipeline behind a deferred command before orthrus
/// stops reading it until that command is done.
const DEFERRED_BUFFER: usize = 1024 * 1024;

/// What the writer needs to account for a request once its reply is ready.
pub struct Stamp {
    /// When the request was read.
    read: Instant,
    family: Family,
    /// The request, for the SLOWLOG; `None` if it was refused before it ran.
    frame: Option<Bytes>,
}

/// Serves one client until it disconnects.
pub async fn serve(stream: TcpStream, peer: SocketAddr, ctx: Rc<WorkerCtx>) {
    let _ = stream.set_nodelay(true);
    let stats = ctx.stats();
    WorkerStats::bump(&stats.connections_received);
    stats.connected_clients.fetch_add(1, Ordering::Relaxed);
    let client = Client {
        id: ctx.shared.next_client_id(),
        peer,
        local_addr: stream.local_addr().ok(),
        proto: Protocol::Resp2,
        name: None,
        lib_name: None,
        lib_ver: None,
        created: std::time::Instant::now(),
        gone: CancellationToken::new(),
        multi: None,
        watch: None,
        pubsub: None,
        authenticated: {
            let live = ctx.shared.live.load();
            live.client.password.is_none() && live.client.users.is_empty()
        },
        unanswered: Rc::new(Cell::new(0)),
        reply: ReplyMode::On,
    };
    let id = client.id;
    ctx.shared.clients.update(client.entry(ctx.index));
    let span = tracing::debug_span!("client", client.addr = %peer, session.id = client.id);
    async {
        tracing::debug!("connected");
        let (rd, wr) = stream.into_split();
        let (tx, rx) = mpsc::channel(ctx.shared.settings.raw.client.max_pending);
        let (sink, pushes) = PushSink::new(
            ctx.shared.settings.raw.client.max_push_bytes,
            client.gone.clone(),
        );
        let writer = Writer {
            wr,
            out: BytesMut::with_capacity(4096),
            pushes,
            sink: sink.clone(),
            gone: client.gone.clone(),
            unanswered: client.unanswered.clone(),
            peer,
            id: client.id,
        };
        let writer = tokio::task::spawn_local(
            writer::write_replies(writer, rx, ctx.clone()).in_current_span(),
        );
        read_requests(rd, tx, client, sink, &ctx).await;
        let _ = writer.await;
        ctx.shared.clients.remove(id);
        tracing::debug!("disconnected");
    }
    .instrument(span)
    .await;
    ctx.stats()
        .connected_clients
        .fetch_sub(1, Ordering::Relaxed);
}

async fn read_requests(
    mut rd: OwnedReadHalf,
    tx: mpsc::Sender<(Pending, Option<Stamp>)>,
    mut client: Client,
    sink: PushSink,
    ctx: &Rc<WorkerCtx>,
) {
    let mut parser = RequestParser::new(ctx.shared.settings.limits());
    let mut buf = BytesMut::new();
    // One clock read per read: the requests in it arrived together.
    let mut read_at = Instant::now();
    loop {
        loop {
            let (pending, stamp) = match parser.parse(&mut buf) {
                Ok(Some(req)) => {
                    let frame = req.frame().clone();
                    let started = dispatch(&mut client, req, &sink, ctx);
                    let stamp = Stamp {
                        read: read_at,
                        family: started.family,
                        frame: started.ran.then_some(frame),
                    };
                    (started.pending, Some(stamp))
                }
                Ok(None) => break,
                Err(e) => {
                    WorkerStats::bump(&ctx.stats().protocol_errors);
                    tracing::debug!(error = %e, "protocol error");
                    (Pending::Last(error_reply(&format!("ERR {e}"))), None)
                }
            };
            let last = matches!(pending, Pending::Last(_));
            client.unanswered.set(client.unanswered.get() + 1);
            let (pending, done) = match pending {
                Pending::Deferred(future, _) => {
                    let (done_tx, done_rx) = oneshot::channel();
                    (Pending::Deferred(future, Some(done_tx)), Some(done_rx))
                }
                other => (other, None),
            };
            if tx.send((pending, stamp)).await.is_err() || last {
                return;
            }
            if let Some(done) = done {
                if !wait_deferred(done, &mut rd, &mut buf, &client).await {
                    return;
                }
                // What the client pipelined behind it waited by design (its
                // commands take effect in order): timed from now on.
                read_at = Instant::now();
            }
        }
        if buf.capacity() - buf.len() < READ_CHUNK / 4 {
            buf.reserve(READ_CHUNK);
        }
        let idle = idle_timeout(&client, ctx);
        let read = tokio::select! {
            read = rd.read_buf(&mut buf) => read,
            // Disconnected by orthrus (a subscriber too slow to read).
            () = client.gone.cancelled() => return,
            // Shutting down: no new requests; the writer finishes the rest.
            () = ctx.shared.shutdown.cancelled() => return,
            () = sleep_or_forever(idle) => {
                if client.unanswered.get() > 0 {
                    continue; // replies became due meanwhile: not idle
                }
                tracing::debug!("idle timeout");
                client.gone.cancel();
                return;
            }
        };
        match read {
            Ok(0) | Err(_) => {
                client.gone.cancel();
                return;
            }
            Ok(_) => read_at = Instant::now(),
        }
    }
}

/// Waits until a deferred command is done, still noticing meanwhile that
/// the client went away (which ends a blocked command) and buffering, up to
/// a bound, what it pipelines after it. False when the session is over.
async fn wait_deferred(
    mut done: oneshot::Receiver<()>,
    rd: &mut OwnedReadHalf,
    buf: &mut BytesMut,
    client: &Client,
) -> bool {
    loop {
        let room = buf.len() < DEFERRED_BUFFER;
        if room && buf.capacity() - buf.len() < READ_CHUNK / 4 {
            buf.reserve(READ_CHUNK);
        }
        tokio::select! {
            _ = &mut done => return true,
            () = client.gone.cancelled() => return false,
            read = rd.read_buf(buf), if room => {
                if !matches!(read, Ok(n) if n > 0) {
                    client.gone.cancel();
                    return false;
                }
            }
        }
    }
}

/// How long this client may stay silent. Subscribers and clients in a
/// WATCH are never timed out, nor (checked when the time is up) clients
/// waiting for replies, blocked ones among them: as in Redis.
fn idle_timeout(client: &Client, ctx: &WorkerCtx) -> Option<std::time::Duration> {
    let secs = ctx.shared.live.load().client.idle_timeout_s;
    let subscribed = client.pubsub.as_ref().is_some_and(PubSub::active);
    (secs > 0 && !subscribed && client.watch.is_none())
        .then(|| std::time::Duration::from_secs(secs))
}

async fn sleep_or_forever(limit: Option<std::time::Duration>) {
    match limit {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}

/// A request once started: its reply to come, its family, and whether it
/// ran at all (one refused before running, as Redis refuses an unknown
/// command or a NOAUTH, never goes to the SLOWLOG).
struct Started {
    pending: Pending,
    family: Family,
    ran: bool,
}

impl Started {
    fn ran(pending: Pending, family: Family) -> Started {
        Started {
            pending,
            family,
            ran: true,
        }
    }

    fn refused(pending: Pending, family: Family) -> Started {
        Started {
            pending,
            family,
            ran: false,
        }
    }
}

/// Decides what to do with one request and starts doing it.
fn dispatch(client: &mut Client, req: Request, sink: &PushSink, ctx: &Rc<WorkerCtx>) -> Started {
    // CLIENT REPLY OFF/SKIP: the command runs, its reply is not sent
    // (CLIENT REPLY itself always answers).
    let silent = client.reply != ReplyMode::On && !is_client_reply(&req);
    if client.reply == ReplyMode::SkipNext && silent {
        client.reply = ReplyMode::On;
    }
    let started = run(client, req, sink, ctx);
    if silent {
        Started {
            pending: silence(started.pending, ctx),
            ..started
        }
    } else {
        started
    }
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
                let done = forward::resolve(&ctx.pool, *remote).await;
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
        Pending::Deferred(future, done) => Pending::Deferred(
            Box::pin(async move {
                Done {
                    reply: Bytes::new(),
                    ..future.await
                }
            }),
            done,
        ),
    }
}

/// Routes one request and starts it.
fn run(client: &mut Client, req: Request, sink: &PushSink, ctx: &Rc<WorkerCtx>) -> Started {
    let stats = ctx.stats();
    WorkerStats::bump(&stats.commands);
    let table = ctx.shared.commands.load();
    let (route, info) = table.route_info(&req);
    let family = info.map_or(Family::Other, |info| info.family);
    if !client.authenticated && !allowed_before_auth(&req) {
        WorkerStats::bump(&stats.rejected_commands);
        let reply = error_reply("NOAUTH Authentication required.");
        return Started::refused(Pending::Ready(reply), family);
    }
    if ctx.shared.over_memory.load(Ordering::Relaxed) && !allowed_over_memory(&req) {
        WorkerStats::bump(&stats.rejected_commands);
        let reply = error_reply("OOM orthrus: memory use is over memory_limit_mb; request refused");
        return Started::refused(Pending::Ready(reply), family);
    }
    // orthrus runs pub/sub and transactions itself: their commands (known
    // by their family, so other commands pay no name comparisons), and
    // whatever a client sends in subscriber mode or inside MULTI.
    let subscribed = client.pubsub.as_ref().is_some_and(PubSub::active);
    if family == Family::PubSub || subscribed {
        if let Some(pending) = crate::cmd::pubsub::command(client, &req, sink, ctx) {
            return Started::ran(pending, Family::PubSub);
        }
    }
    if family == Family::Transaction || client.multi.is_some() {
        if let Some(pending) = transaction::intercept(client, &req, &table, ctx) {
            return Started::ran(pending, Family::Transaction);
        }
    }
    let readonly = info.is_some_and(|info| info.readonly);
    let proto = client.proto;
    let target = match route {
        Route::Local(cmd) => return Started::ran(local::execute(cmd, &req, client, ctx), family),
        Route::Slot(slot) => Target::Slot(slot),
        Route::AnyNode => Target::Any,
        Route::Split(merge) => {
            let pending = split::dispatch(ctx, &req, merge, proto, readonly);
            return Started::ran(pending, family);
        }
        Route::FanOut(how) => {
            return Started::ran(fanout::dispatch(ctx, req, how, proto, readonly), family);
        }
        Route::Scan => return Started::ran(scan::dispatch(ctx, &req, proto), family),
        Route::Blocking(slot) => {
            let gone = client.gone.clone();
            let pending = blocking::dispatch(ctx, &req, slot, proto, gone);
            return Started::ran(pending, Family::Blocking);
        }
        Route::Reject(rejection) => {
            WorkerStats::bump(&stats.rejected_commands);
            let reply = error_reply(&rejection.message(&req));
            return Started::refused(Pending::Ready(reply), family);
        }
    };
    // PUBLISH goes where this orthrus keeps its subscriptions, so that its
    // count of receivers includes them.
    let (target, readonly) = if matches!(target, Target::Any) && is_publish(&req) {
        (crate::client::subscriptions::publish_target(), false)
    } else {
        (target, readonly)
    };
    let pending = match forward::forward(&ctx.pool, req.into_frame(), target, proto, readonly) {
        Sent::Remote(remote) => Pending::Remote(Box::new(remote)),
        Sent::Refused(reply) => Pending::Ready(reply),
    };
    Started::ran(pending, family)
}

fn is_publish(req: &Request) -> bool {
    req.arg(0)
        .is_some_and(|n| n.eq_ignore_ascii_case(b"publish"))
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
