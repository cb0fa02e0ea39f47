//! Blocking commands (BLPOP, BRPOP, BRPOPLPUSH, BLMOVE, BLMPOP, BZPOPMIN,
//! BZPOPMAX, BZMPOP, XREAD/XREADGROUP with BLOCK): each runs on a dedicated
//! connection held for its duration, so it never stalls the multiplexed
//! connection other clients share. The wait for the reply is bounded by the
//! command's own timeout plus its upstream's request timeout; a client that
//! disconnects while blocked closes that connection, and Redis unblocks.

use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};

use orthrus_resp::{Protocol, Request};

use crate::client::Pending;
use crate::node::Done;
use crate::node::conn::ASKING;
use crate::node::dedicated::{DedicatedPool, Holding, TakeError};
use crate::node::forward::{error_reply, no_owner};
use crate::node::retry::{Next, Retry};
use crate::observe::stats::{GaugeGuard, WorkerStats};
use crate::route::prefix::Place;
use crate::worker::WorkerCtx;

/// Starts a blocking command for the master of `slot`.
pub fn dispatch(
    ctx: &Rc<WorkerCtx>,
    req: &Request,
    slot: Place,
    proto: Protocol,
    client: &Holding,
) -> Pending {
    let frame = req.frame().clone();
    let wait = command_timeout(req).map(|t| t + ctx.shared.request_timeout_of(slot.upstream));
    let ctx = ctx.clone();
    let client = client.clone();
    Pending::deferred(Box::pin(async move {
        let _blocked = GaugeGuard::new(&ctx.stats().blocked_clients);
        let account = Account {
            waited: Cell::new(Duration::ZERO),
            client,
        };
        // A client that leaves ends its session, which drops this future
        // and so closes the dedicated connection: Redis forgets the block.
        let reply = run(&ctx, frame, slot, proto, wait, &account).await;
        Done::from_nodes(reply, account.waited.get())
    }))
}

/// What a blocking command counts: the time it waited for its node, and
/// the dedicated connections of its client.
struct Account {
    waited: Cell<Duration>,
    client: Holding,
}

async fn run(
    ctx: &Rc<WorkerCtx>,
    frame: Bytes,
    slot: Place,
    proto: Protocol,
    wait: Option<Duration>,
    account: &Account,
) -> Bytes {
    let map = ctx.slots_of(slot.upstream);
    let Some(mut addr) = map.master(slot.slot).cloned() else {
        return no_owner(&map);
    };
    let mut asking = false;
    // Redirects and back-offs (the time not spent in the command itself)
    // share one deadline.
    let env = ctx.pool.env();
    let mut retry = Retry::from_now(env, slot.upstream);
    let held = Some(&account.client);
    loop {
        let mut lease =
            match DedicatedPool::take(&ctx.dedicated, &addr, proto, held, retry.deadline()).await {
                Ok(lease) => lease,
                Err(
                    e @ (TakeError::Exhausted(_)
                    | TakeError::Crowded(_)
                    | TakeError::PerClient(_)
                    | TakeError::Late),
                ) => {
                    return error_reply(&format!(
                        "ERR orthrus: cannot run a blocking command now: {e} ({addr}); retry later"
                    ));
                }
                Err(TakeError::Connect(e)) => {
                    ctx.shared.request_refresh_at(&addr);
                    return error_reply(&format!(
                        "CLUSTERDOWN orthrus: node {addr} unreachable: {e}"
                    ));
                }
            };
        let started = Instant::now();
        let sent = if asking {
            let mut both = BytesMut::with_capacity(ASKING.len() + frame.len());
            both.extend_from_slice(ASKING);
            both.extend_from_slice(&frame);
            lease.call(&both, 2, wait).await
        } else {
            lease.call(&frame, 1, wait).await
        };
        let waited = &account.waited;
        waited.set(waited.get() + started.elapsed());
        retry.extend(started.elapsed());
        let reply = match sent {
            Ok(reply) => {
                lease.release();
                if asking {
                    skip_first_frame(reply)
                } else {
                    reply
                }
            }
            Err(e) => {
                WorkerStats::bump(&ctx.stats().backend_errors);
                ctx.shared.request_refresh_at(&addr);
                return error_reply(&format!(
                    "ERR orthrus: connection to {addr} lost during a blocking command ({e}); it may or may not have been applied"
                ));
            }
        };
        match retry.after_reply(env, &reply, &addr).await {
            Next::Reply => return reply,
            Next::Answer(answer) => return answer,
            Next::Redirect {
                addr: to,
                asking: ask,
            } => {
                addr = to;
                asking = ask;
            }
            Next::Again => asking = false,
        }
    }
}

/// The `+OK` of ASKING comes first; the command's reply follows.
fn skip_first_frame(reply: Bytes) -> Bytes {
    let first = crate::node::frames::split(&reply).next().map(|f| f.len());
    match first {
        Some(n) => reply.slice(n..),
        None => reply,
    }
}

/// How long the command itself may block; `None` for "forever" (0) or
/// when it cannot be told.
fn command_timeout(req: &Request) -> Option<Duration> {
    let name = req.arg(0)?.to_ascii_lowercase();
    let seconds = |arg: &[u8]| -> Option<Duration> {
        let s: f64 = std::str::from_utf8(arg).ok()?.parse().ok()?;
        (s > 0.0 && s.is_finite()).then(|| Duration::from_secs_f64(s.min(1e9)))
    };
    match name.as_slice() {
        b"blpop" | b"brpop" | b"brpoplpush" | b"blmove" | b"bzpopmin" | b"bzpopmax" => {
            seconds(req.arg(req.arg_count() - 1)?)
        }
        b"blmpop" | b"bzmpop" => seconds(req.arg(1)?),
        b"xread" | b"xreadgroup" => {
            let at = req.args().position(|a| a.eq_ignore_ascii_case(b"block"))?;
            let ms: u64 = std::str::from_utf8(req.arg(at + 1)?).ok()?.parse().ok()?;
            (ms > 0).then(|| Duration::from_millis(ms))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_are_read_from_the_command() {
        let t = |args: &[&str]| command_timeout(&Request::from_args(args));
        assert_eq!(
            t(&["BLPOP", "a", "b", "1.5"]),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(t(&["BLPOP", "a", "0"]), None);
        assert_eq!(
            t(&["BLMPOP", "2", "2", "a", "b", "LEFT"]),
            Some(Duration::from_secs(2))
        );
        assert_eq!(
            t(&["XREAD", "BLOCK", "250", "STREAMS", "s", "$"]),
            Some(Duration::from_millis(250))
        );
        assert_eq!(
            t(&["BLMOVE", "a", "b", "LEFT", "RIGHT", "3"]),
            Some(Duration::from_secs(3))
        );
    }
}
