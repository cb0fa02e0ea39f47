//! Mirrored requests: a route's `mirror` upstreams get a copy of its
//! requests, fire and forget. The client's reply and latency come from the
//! primary only; a copy's error or loss is counted (INFO
//! `orthrus_mirror_*`, `/metrics` `orthrus_mirror_requests_total`), never
//! returned. Each mirror upstream has a budget per worker: at most
//! [`MAX_WAITING`] copies and [`MAX_WAITING_BYTES`] bytes of them waiting
//! for its replies; past either a copy to it is dropped and counted, so a
//! slow, stalled or dead mirror holds neither the primary's memory nor
//! the other mirrors back.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use bytes::Bytes;
use orthrus_resp::Protocol;

use crate::node::client::Dialect;
use crate::node::forward::{self, Access, Sent, Target};
use crate::observe::stats::WorkerStats;
use crate::route::prefix::{Mirror, Place, Upstream};
use crate::worker::WorkerCtx;

/// Copies one worker keeps waiting for one mirror upstream's replies.
pub const MAX_WAITING: usize = 1_000;
/// Bytes of copies one worker keeps waiting for one mirror upstream.
pub const MAX_WAITING_BYTES: usize = 16 << 20;

thread_local! {
    /// This worker's copies waiting for replies, per mirror upstream:
    /// (copies, bytes).
    static WAITING: RefCell<Vec<(usize, usize)>> = const { RefCell::new(Vec::new()) };
    /// A xorshift state for `mirror_fraction`.
    static DRAW: Cell<u64> = const { Cell::new(0x9e37_79b9_7f4a_7c15) };
}

/// Copies `frame` (a request for `place`, in database `db`) to `mirror`,
/// the mirroring of its keys' route, if this request is one to copy.
pub fn copy(
    ctx: &Rc<WorkerCtx>,
    mirror: &Mirror,
    (place, db): (Place, u32),
    frame: &Bytes,
    readonly: bool,
) {
    if (mirror.writes_only && readonly) || !drawn(mirror) {
        return;
    }
    for &upstream in &mirror.to {
        send(ctx, frame.clone(), Place { upstream, ..place }, db);
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

/// Takes room for a copy of `bytes` to `upstream` from this worker's
/// budget for it; `false` when it is spent.
fn reserve(upstream: Upstream, bytes: usize) -> bool {
    WAITING.with(|waiting| {
        let Ok(mut waiting) = waiting.try_borrow_mut() else {
            return false;
        };
        let i = usize::from(upstream);
        if waiting.len() <= i {
            waiting.resize(i.saturating_add(1), (0, 0));
        }
        let Some((count, held)) = waiting.get_mut(i) else {
            return false;
        };
        if *count >= MAX_WAITING || held.saturating_add(bytes) > MAX_WAITING_BYTES {
            return false;
        }
        *count = count.saturating_add(1);
        *held = held.saturating_add(bytes);
        true
    })
}

/// Gives back what [`reserve`] took.
fn release(upstream: Upstream, bytes: usize) {
    WAITING.with(|waiting| {
        if let Ok(mut waiting) = waiting.try_borrow_mut() {
            if let Some((count, held)) = waiting.get_mut(usize::from(upstream)) {
                *count = count.saturating_sub(1);
                *held = held.saturating_sub(bytes);
            }
        }
    });
}

fn send(ctx: &Rc<WorkerCtx>, frame: Bytes, place: Place, db: u32) {
    let stats = ctx.stats();
    if ctx.shared.databases.refusal(place.upstream, db).is_some() {
        // The mirror's nodes lack the client's database.
        WorkerStats::bump(&stats.mirror_errors);
        return;
    }
    let bytes = frame.len();
    if !reserve(place.upstream, bytes) {
        WorkerStats::bump(&stats.mirror_dropped);
        return;
    }
    // RESP2 always: the reply is only looked at for an error.
    let dialect = Dialect {
        proto: Protocol::Resp2,
        db,
    };
    match forward::forward(
        &ctx.pool,
        frame,
        Target::Slot(place),
        dialect,
        Access::Write,
    ) {
        Sent::Remote(remote) => {
            WorkerStats::bump(&stats.mirror_sent);
            let task_ctx = ctx.clone();
            // Dropped when the worker stops: the copy's room goes with it.
            drop(ctx.spawn(async move {
                let done = forward::resolve(&task_ctx.pool, remote).await;
                release(place.upstream, bytes);
                if done.reply.first() == Some(&b'-') {
                    WorkerStats::bump(&task_ctx.stats().mirror_errors);
                }
            }));
        }
        Sent::Refused { .. } => {
            release(place.upstream, bytes);
            WorkerStats::bump(&stats.mirror_sent);
            WorkerStats::bump(&stats.mirror_errors);
        }
    }
}
