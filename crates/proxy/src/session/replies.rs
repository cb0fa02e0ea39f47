//! The reply side of a session: replies taken from the head of its queue
//! in request order, each one counted (latency, INFO commandstats, the
//! SLOWLOG) as it goes into the output.

use std::collections::VecDeque;
use std::io;
use std::task::{Context, Poll};

use bytes::Bytes;

use super::work::{QUEUE_KEPT, Work};
use super::{OUTPUT_BATCH, Session, Stamp, Stream};
use crate::cache::serve::{self, Mark};
use crate::client::Pending;
use crate::node::Done;
use crate::node::forward;
use crate::observe::clients::Identity;
use crate::observe::commands::Call;
use crate::observe::hotkeys::Sample;
use crate::observe::latency::micros;
use crate::observe::slowlog::Finished;
use crate::route::kind::Family;
use crate::time::Tick;
use crate::worker::WorkerCtx;

impl<S: Stream> Session<S> {
    /// Takes every reply at the head of the queue that is ready into the
    /// output, in order, with the pushes that arrived meanwhile. True if
    /// any was taken; an error when the client is gone.
    pub(super) fn take_replies(&mut self, w: &mut Work, cx: &mut Context<'_>) -> io::Result<bool> {
        let mut took = false;
        // Replies taken in one pass became ready together: one clock read.
        let mut now: Option<Tick> = None;
        // A tracking client's invalidations wait until every reply queued
        // is written: one its own command caused (a write, a FLUSHDB over
        // every master) may arrive before that command's reply is whole.
        let tracking = self.client.tracking.is_some();
        if !tracking {
            self.take_pushes(w, cx);
        }
        while w.output.len() < OUTPUT_BATCH {
            let Some(entry) = w.queue.front_mut() else {
                break;
            };
            // A request without a stamp is not counted (or was already: a
            // reply its node connection began writing to the client).
            let counted = entry.stamp.is_some();
            let done = match &mut entry.pending {
                Pending::Ready(reply) | Pending::Last(reply) => Done::local(std::mem::take(reply)),
                Pending::Remote(remote) => match remote.poll_done(cx) {
                    Poll::Ready(Some(done)) => {
                        if counted {
                            remote.count(self.ctx.pool.env().load(), &done);
                        }
                        done
                    }
                    Poll::Ready(None) => {
                        // A redirect or an error to look at: follow it.
                        let ctx = match &self.client.tracking {
                            Some(tracking) => tracking.ctx.clone(),
                            None => self.ctx.clone(),
                        };
                        // Its request is kept for the SLOWLOG and
                        // commandstats, unless it is already (a handler's
                        // `Remote`): the entry heads the queue.
                        if let Some(stamp) = &mut entry.stamp
                            && !stamp.kept
                        {
                            stamp.kept = true;
                            w.frames.push_front(remote.frame().clone());
                        }
                        let remote =
                            std::mem::replace(&mut entry.pending, Pending::Ready(Bytes::new()));
                        if let Pending::Remote(remote) = remote {
                            entry.pending = Pending::Future(Box::pin(async move {
                                forward::resolve(&ctx.pool, remote).await
                            }));
                        }
                        continue;
                    }
                    Poll::Pending => break,
                },
                Pending::Future(future) => match future.as_mut().poll(cx) {
                    Poll::Ready(done) => done,
                    Poll::Pending => break,
                },
                Pending::Deferred(future) => {
                    // It starts once every earlier reply is written.
                    if !w.output.is_empty() {
                        match w.output.poll_flush(&mut self.stream, cx) {
                            Poll::Ready(result) => result?,
                            Poll::Pending => break,
                        }
                    }
                    match future.as_mut().poll(cx) {
                        Poll::Ready(done) => {
                            self.deferred = false;
                            // What the client pipelined behind it waited by
                            // design (its commands take effect in order):
                            // timed from now on.
                            w.read_at = Tick::now();
                            done
                        }
                        Poll::Pending => break,
                    }
                }
            };
            if let Some(entry) = w.queue.front()
                && let Some(stamp) = &entry.stamp
            {
                let total = now.get_or_insert_with(Tick::now).micros_since(stamp.read);
                let none = Bytes::new();
                let frame = entry.frame(w.frames.front()).unwrap_or(&none);
                let client = &self.client.identity;
                if stamp.cache != Mark::None {
                    serve::written(&self.ctx, stamp.cache);
                    let unanswered = &mut self.client.writes_unanswered;
                    *unanswered = unanswered.saturating_sub(1);
                }
                account(
                    &self.ctx,
                    client,
                    stamp,
                    frame,
                    total,
                    &done,
                    &mut w.samples,
                );
            }
            w.pop_answered();
            let size = u32::try_from(done.reply.len()).unwrap_or(u32::MAX);
            self.fold_reply_size(size);
            w.output.push(done.reply);
            took = true;
            if !tracking {
                self.take_pushes(w, cx);
            }
        }
        if tracking && w.queue.is_empty() {
            self.take_pushes(w, cx);
        }
        // A client sending one request at a time reuses its queue; one
        // that pipelined deeply gives the room back.
        if w.queue.is_empty() && w.queue.capacity() > QUEUE_KEPT {
            w.queue = VecDeque::new();
        }
        Ok(took)
    }
}

/// Counts a request whose reply is ready, `total` microseconds after it
/// was read, in the latency figures and INFO commandstats, in the SLOWLOG if it was
/// slow, and in the HOTKEYS summaries if it was sampled (its keys the
/// front of `samples`).
pub(super) fn account(
    ctx: &WorkerCtx,
    client: &Identity,
    stamp: &Stamp,
    frame: &Bytes,
    total: u64,
    done: &Done,
    samples: &mut VecDeque<Sample>,
) {
    if stamp.hot
        && let Some(sample) = samples.pop_front()
    {
        record_sample(ctx, sample, frame, done);
    }
    let backend = done.backend;
    ctx.latency().record(stamp.family, total, backend);
    let call = Call {
        frame,
        stat: stamp.stat,
        took_us: total,
        ran: stamp.ran,
        reply: &done.reply,
    };
    ctx.shared.commands_seen.record(ctx.index, &call);
    if !stamp.ran {
        return; // refused before it ran
    }
    // A blocked command's wait for data is not slowness: like Redis,
    // judge it by the rest of its time (orthrus's own).
    let judged = match (stamp.family, backend) {
        (Family::Blocking, Some(backend)) => total.saturating_sub(micros(backend)),
        _ => total,
    };
    let slowlog = &ctx.shared.slowlog;
    if slowlog.is_slow(judged) {
        slowlog.push(Finished {
            frame,
            total_us: total,
            backend,
            peer: &client.peer,
            name: ctx.shared.clients.name(client.id),
        });
    }
}

/// Gives a sampled request's keys their share of its bytes and time.
#[cold]
fn record_sample(ctx: &WorkerCtx, sample: Sample, frame: &Bytes, done: &Done) {
    let bytes = frame.len().saturating_add(done.reply.len());
    ctx.shared
        .hotkeys
        .record(ctx.index, (sample, frame), bytes, done.backend);
}
