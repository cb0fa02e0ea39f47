//! A client connection: two tasks joined by a bounded queue.
//!
//! The reader parses every complete request in its buffer (any pipeline
//! depth), answers local commands at once and sends the rest to the
//! cluster, and queues one [`Pending`] reply per request, in request order.
//! The writer takes the queue in order and writes every reply that is
//! ready in one write. The queue's bound is the client's pipelining limit:
//! when it is full the reader stops reading, and TCP pushes back.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::Ordering;

use bytes::{Bytes, BytesMut};
use orthrus_resp::{Protocol, Request, RequestParser};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::command_table::{Rejection, Route};
use crate::forward::{self, Remote, Sent, Target, error_reply};
use crate::stats::WorkerStats;
use crate::worker::WorkerCtx;
use crate::transaction::{self, Multi, Watch};
use crate::{blocking, fanout, local, scan, split};

const READ_CHUNK: usize = 16 * 1024;
/// Replies are written once this many bytes are gathered, ready or not.
const WRITE_BATCH: usize = 64 * 1024;
/// A reply at least this large is written straight from its own buffer.
const LARGE_REPLY: usize = 16 * 1024;

/// The reply to one request, in request order.
pub enum Pending {
    /// Known already (local commands, errors).
    Ready(Bytes),
    /// Known already; the connection closes after it (QUIT, protocol error).
    Last(Bytes),
    /// Coming from the cluster.
    Remote(Remote),
    /// Coming from several requests, or needing more than one step.
    Future(Pin<Box<dyn Future<Output = Bytes>>>),
}

/// Per-connection state the commands can change.
pub struct Client {
    pub id: u64,
    pub peer: SocketAddr,
    pub local_addr: Option<SocketAddr>,
    pub proto: Protocol,
    pub name: Option<Bytes>,
    pub lib_name: Option<Bytes>,
    pub lib_ver: Option<Bytes>,
    pub created: std::time::Instant,
    /// Cancelled when the client disconnects (ends blocking commands).
    pub gone: CancellationToken,
    /// Between MULTI and EXEC.
    pub multi: Option<Multi>,
    /// After WATCH, until EXEC, DISCARD, UNWATCH or RESET.
    pub watch: Option<Watch>,
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
    };
    let span = tracing::debug_span!("client", client.addr = %peer, session.id = client.id);
    async {
        tracing::debug!("connected");
        let (rd, wr) = stream.into_split();
        let (tx, rx) = mpsc::channel(ctx.shared.settings.raw.client.max_pending);
        let writer = tokio::task::spawn_local(write_replies(wr, rx, ctx.clone()).in_current_span());
        read_requests(rd, tx, client, &ctx).await;
        let _ = writer.await;
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
    tx: mpsc::Sender<Pending>,
    mut client: Client,
    ctx: &Rc<WorkerCtx>,
) {
    let mut parser = RequestParser::new(ctx.shared.settings.limits());
    let mut buf = BytesMut::new();
    loop {
        loop {
            let pending = match parser.parse(&mut buf) {
                Ok(Some(req)) => dispatch(&mut client, req, ctx),
                Ok(None) => break,
                Err(e) => {
                    WorkerStats::bump(&ctx.stats().protocol_errors);
                    tracing::debug!(error = %e, "protocol error");
                    Pending::Last(error_reply(&format!("ERR {e}")))
                }
            };
            let last = matches!(pending, Pending::Last(_));
            if tx.send(pending).await.is_err() || last {
                return;
            }
        }
        if buf.capacity() - buf.len() < READ_CHUNK / 4 {
            buf.reserve(READ_CHUNK);
        }
        match rd.read_buf(&mut buf).await {
            Ok(0) | Err(_) => {
                client.gone.cancel();
                return;
            }
            Ok(_) => {}
        }
    }
}

/// Decides what to do with one request and starts doing it.
fn dispatch(client: &mut Client, req: Request, ctx: &Rc<WorkerCtx>) -> Pending {
    let stats = ctx.stats();
    WorkerStats::bump(&stats.commands);
    let table = ctx.shared.commands.load();
    if let Some(pending) = transaction::intercept(client, &req, &table, ctx) {
        return pending;
    }
    let (target, readonly) = match table.route(&req) {
        Route::Local(cmd) => return local::execute(cmd, &req, client, ctx),
        Route::Slot(slot) => (Target::Slot(slot), readonly(&table, &req)),
        Route::AnyNode => (Target::Any, readonly(&table, &req)),
        Route::Split(merge) => {
            return split::dispatch(ctx, &req, merge, client.proto, readonly(&table, &req));
        }
        Route::FanOut(how) => {
            let readonly = readonly(&table, &req);
            return fanout::dispatch(ctx, req, how, client.proto, readonly);
        }
        Route::Scan => return scan::dispatch(ctx, &req, client.proto),
        Route::Blocking(slot) => {
            return blocking::dispatch(ctx, &req, slot, client.proto, client.gone.clone());
        }
        Route::Reject(rejection) => {
            WorkerStats::bump(&stats.rejected_commands);
            return Pending::Ready(error_reply(&rejection_message(&rejection, &req)));
        }
    };
    match forward::forward(ctx, req.into_frame(), target, client.proto, readonly) {
        Sent::Remote(remote) => Pending::Remote(remote),
        Sent::Refused(reply) => Pending::Ready(reply),
    }
}

fn readonly(table: &crate::command_table::CommandTable, req: &Request) -> bool {
    req.arg(0)
        .and_then(|name| table.get(name))
        .is_some_and(|info| info.readonly)
}

async fn write_replies(
    mut wr: OwnedWriteHalf,
    mut rx: mpsc::Receiver<Pending>,
    ctx: Rc<WorkerCtx>,
) {
    let mut out = BytesMut::with_capacity(4096);
    let mut next = rx.recv().await;
    while let Some(pending) = next.take() {
        let (reply, last) = match pending {
            Pending::Ready(reply) => (reply, false),
            Pending::Last(reply) => (reply, true),
            Pending::Remote(mut remote) => {
                if !remote.is_ready() && !out.is_empty() {
                    if wr.write_all(&out).await.is_err() {
                        return;
                    }
                    out.clear();
                }
                (forward::resolve(&ctx, remote).await, false)
            }
            Pending::Future(future) => {
                if !flush(&mut wr, &mut out).await {
                    return;
                }
                (future.await, false)
            }
        };
        let written = if reply.len() >= LARGE_REPLY {
            flush(&mut wr, &mut out).await && wr.write_all(&reply).await.is_ok()
        } else {
            out.extend_from_slice(&reply);
            out.len() < WRITE_BATCH || flush(&mut wr, &mut out).await
        };
        if !written {
            return;
        }
        if last {
            let _ = flush(&mut wr, &mut out).await;
            let _ = wr.shutdown().await;
            return;
        }
        next = match rx.try_recv() {
            Ok(p) => Some(p),
            Err(mpsc::error::TryRecvError::Empty) => {
                if !flush(&mut wr, &mut out).await {
                    return;
                }
                rx.recv().await
            }
            Err(mpsc::error::TryRecvError::Disconnected) => None,
        };
    }
    let _ = flush(&mut wr, &mut out).await;
}

/// Writes out what is gathered; false if the client is gone.
async fn flush(wr: &mut OwnedWriteHalf, out: &mut BytesMut) -> bool {
    if out.is_empty() {
        return true;
    }
    let ok = wr.write_all(out).await.is_ok();
    out.clear();
    ok
}

/// The error text for a refused request, worded as Redis words it where
/// Redis has a word for it.
pub fn rejection_message(rejection: &Rejection, req: &Request) -> String {
    let name = String::from_utf8_lossy(req.arg(0).unwrap_or_default());
    match rejection {
        Rejection::UnknownCommand => {
            let mut args = String::new();
            for arg in req.args().skip(1) {
                if args.len() >= 128 {
                    break;
                }
                let arg = String::from_utf8_lossy(arg);
                let room = 128usize.saturating_sub(args.len());
                args.push('\'');
                args.extend(arg.chars().take(room));
                args.push_str("' ");
            }
            let name: String = name.chars().take(128).collect();
            format!("ERR unknown command '{name}', with args beginning with: {args}")
        }
        Rejection::UnknownSubcommand => {
            let sub = String::from_utf8_lossy(req.arg(1).unwrap_or_default());
            let sub: String = sub.chars().take(128).collect();
            format!(
                "ERR unknown subcommand '{sub}'. Try {} HELP.",
                name.to_ascii_uppercase()
            )
        }
        Rejection::WrongArity(info) => {
            format!(
                "ERR wrong number of arguments for '{}' command",
                info.full_name()
            )
        }
        Rejection::CrossSlot => "CROSSSLOT Keys in request don't hash to the same slot".to_owned(),
        Rejection::Unsupported(info, why) => {
            let shown = info.full_name().replace('|', " ").to_ascii_uppercase();
            format!("ERR orthrus: {shown} is not supported: {why}")
        }
    }
}
