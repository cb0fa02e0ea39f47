//! Mirrored requests: a route's `mirror` upstreams get a copy of its
//! requests, fire and forget. The client's reply and latency come from the
//! primary only; a copy's error or loss is counted (INFO
//! `orthrus_mirror_*`, `/metrics` `orthrus_mirror_requests_total`), never
//! returned. A worker keeps at most [`IN_FLIGHT`] copies waiting for their
//! replies; past that a copy is dropped and counted, so that a slow or dead
//! mirror holds nothing of the primary's back.

use std::cell::Cell;
use std::rc::Rc;

use bytes::Bytes;
use orthrus_resp::Protocol;

use crate::node::forward::{self, Access, Sent, Target};
use crate::observe::stats::WorkerStats;
use crate::route::prefix::{Mirror, Place};
use crate::worker::WorkerCtx;

/// Copies one worker keeps waiting for their replies, across its mirrors.
const IN_FLIGHT: usize = 10_000;

thread_local! {
    /// This worker's copies waiting for replies.
    static WAITING: Cell<usize> = const { Cell::new(0) };
    /// A xorshift state for `mirror_fraction`.
    static DRAW: Cell<u64> = const { Cell::new(0x9e37_79b9_7f4a_7c15) };
}

/// Copies `frame` (a request for `place`) to `mirror`, the mirroring of
/// its first key's route, if this request is one to copy.
pub fn copy(ctx: &Rc<WorkerCtx>, mirror: &Mirror, place: Place, frame: &Bytes, readonly: bool) {
    if (mirror.writes_only && readonly) || !drawn(mirror) {
        return;
    }
    for &upstream in &mirror.to {
        send(ctx, frame.clone(), Place { upstream, ..place });
    }
}

/// Whether this request falls in the mirror's share.
fn drawn(mirror: &Mirror) -> bool {
    if mirror.share >= 1 << 32 {
        return true;
    }
    let draw = DRAW.with(|d| {
        let mut x = d.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        d.set(x);
        x >> 32
    });
    draw < mirror.share
}

fn send(ctx: &Rc<WorkerCtx>, frame: Bytes, place: Place) {
    let stats = ctx.stats();
    if WAITING.with(Cell::get) >= IN_FLIGHT {
        WorkerStats::bump(&stats.mirror_dropped);
        return;
    }
    // RESP2 always: the reply is only looked at for an error.
    match forward::forward(
        &ctx.pool,
        frame,
        Target::Slot(place),
        Protocol::Resp2,
        Access::Write,
    ) {
        Sent::Remote(remote) => {
            WorkerStats::bump(&stats.mirror_sent);
            WAITING.with(|w| w.set(w.get().saturating_add(1)));
            let task_ctx = ctx.clone();
            // Dropped when the worker stops: the copy's count goes with it.
            drop(ctx.spawn(async move {
                let done = forward::resolve(&task_ctx.pool, remote).await;
                WAITING.with(|w| w.set(w.get().saturating_sub(1)));
                if done.reply.first() == Some(&b'-') {
                    WorkerStats::bump(&task_ctx.stats().mirror_errors);
                }
            }));
        }
        Sent::Refused { .. } => {
            WorkerStats::bump(&stats.mirror_sent);
            WorkerStats::bump(&stats.mirror_errors);
        }
    }
}
