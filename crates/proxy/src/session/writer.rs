//! The writer's side of a session: takes the queue of pending replies in
//! request order, writes every reply that is ready in one write, interleaves
//! the pushes of the client's subscriptions, and accounts each request's
//! time once its reply is ready.

use std::cell::Cell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::Stamp;
use crate::client::{Pending, PushSink};
use crate::node::Done;
use crate::node::forward;
use crate::route::kind::Family;
use crate::worker::WorkerCtx;

/// Replies are written once this many bytes are gathered, ready or not.
const WRITE_BATCH: usize = 64 * 1024;
/// A reply at least this large is written straight from its own buffer.
const LARGE_REPLY: usize = 16 * 1024;

/// The writer's side of a session: the output buffer and the pushes of
/// the client's subscriptions.
pub struct Writer {
    pub wr: OwnedWriteHalf,
    pub out: BytesMut,
    pub pushes: mpsc::UnboundedReceiver<Bytes>,
    pub sink: PushSink,
    pub gone: CancellationToken,
    pub unanswered: Rc<Cell<usize>>,
    /// The client, for the SLOWLOG.
    pub peer: SocketAddr,
    pub id: u64,
}

type Queue = mpsc::Receiver<(Pending, Option<Stamp>)>;

pub async fn write_replies(mut w: Writer, mut rx: Queue, ctx: Rc<WorkerCtx>) {
    let mut next = w.wait(&mut rx).await;
    while let Some((pending, stamp)) = next.take() {
        let (done, last) = match pending {
            Pending::Ready(reply) => (Done::local(reply), false),
            Pending::Last(reply) => (Done::local(reply), true),
            Pending::Remote(mut remote) => {
                if !remote.is_ready() && !w.flush().await {
                    return;
                }
                (forward::resolve(&ctx.pool, *remote).await, false)
            }
            Pending::Future(future) => {
                if !w.flush().await {
                    return;
                }
                (future.await, false)
            }
            Pending::Deferred(future, finished) => {
                if !w.flush().await {
                    return;
                }
                let done = future.await;
                if let Some(finished) = finished {
                    let _ = finished.send(());
                }
                (done, false)
            }
        };
        if let Some(stamp) = stamp {
            w.account(&ctx, &stamp, done.backend);
        }
        let reply = done.reply;
        let written = if reply.len() >= LARGE_REPLY {
            w.flush().await && w.wr.write_all(&reply).await.is_ok()
        } else {
            w.out.extend_from_slice(&reply);
            w.out.len() < WRITE_BATCH || w.flush().await
        };
        if !written {
            return;
        }
        w.unanswered.set(w.unanswered.get().saturating_sub(1));
        if last {
            let _ = w.flush().await;
            let _ = w.wr.shutdown().await;
            return;
        }
        w.take_pushes();
        next = match rx.try_recv() {
            Ok(p) => Some(p),
            Err(mpsc::error::TryRecvError::Empty) => {
                if !w.flush().await {
                    return;
                }
                w.wait(&mut rx).await
            }
            Err(mpsc::error::TryRecvError::Disconnected) => None,
        };
    }
    let _ = w.flush().await;
}

impl Writer {
    /// Counts a request whose reply is ready in the latency figures, and
    /// in the SLOWLOG if it was slow.
    fn account(&self, ctx: &WorkerCtx, stamp: &Stamp, backend: Option<Duration>) {
        let total = stamp.read.elapsed();
        ctx.latency().record(stamp.family, total, backend);
        let Some(frame) = &stamp.frame else {
            return; // refused before it ran
        };
        // A blocked command's wait for data is not slowness: like Redis,
        // judge it by the rest of its time (orthrus's own).
        let judged = match (stamp.family, backend) {
            (Family::Blocking, Some(backend)) => total.saturating_sub(backend),
            _ => total,
        };
        let slowlog = &ctx.shared.slowlog;
        if slowlog.is_slow(judged) {
            slowlog.push(crate::observe::slowlog::Finished {
                frame,
                total,
                backend,
                peer: self.peer,
                name: ctx.shared.clients.name(self.id),
            });
        }
    }

    /// Waits for the next reply to write, writing pushes meanwhile; `None`
    /// when the session is over.
    async fn wait(&mut self, rx: &mut Queue) -> Option<(Pending, Option<Stamp>)> {
        loop {
            tokio::select! {
                biased;
                () = self.gone.cancelled() => return None,
                pending = rx.recv() => return pending,
                Some(push) = self.pushes.recv() => {
                    self.out.extend_from_slice(&push);
                    self.sink.written(push.len());
                    self.take_pushes();
                    if !self.flush().await {
                        return None;
                    }
                }
            }
        }
    }

    /// Appends the pushes that are already there.
    fn take_pushes(&mut self) {
        while let Ok(push) = self.pushes.try_recv() {
            self.out.extend_from_slice(&push);
            self.sink.written(push.len());
            if self.out.len() >= WRITE_BATCH {
                break;
            }
        }
    }

    /// Writes out what is gathered; false if the client is gone.
    async fn flush(&mut self) -> bool {
        flush(&mut self.wr, &mut self.out).await
    }
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
