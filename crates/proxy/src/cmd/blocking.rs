//! Blocking commands (BLPOP, BRPOP, BRPOPLPUSH, BLMOVE, BLMPOP, BZPOPMIN,
//! BZPOPMAX, BZMPOP, XREAD/XREADGROUP with BLOCK): each runs on a dedicated
//! connection held for its duration, so it never stalls the multiplexed
//! connection other clients share. The wait for the reply is bounded by the
//! command's own timeout plus its upstream's request timeout; a client that
//! disconnects while blocked closes that connection, and Redis unblocks.
//!
//! While every dedicated connection blocking commands may hold is taken,
//! the command waits for one in turn. The wait counts in its own
//! timeout, as Redis counts the time blocked: past it the client gets the
//! command's nil, and a command that got its connection late is sent with
//! what is left of its timeout. One that blocks forever (timeout 0) waits
//! within the request's deadline, then gets an error.

use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};

use orthrus_resp::Request;

use crate::client::Pending;
use crate::node::Done;
use crate::node::answer::{error_reply, no_owner};
use crate::node::client::Dialect;
use crate::node::conn::ASKING;
use crate::node::dedicated::{DedicatedPool, Holding, Share, TakeError};
use crate::node::retry::{Next, Retry};
use crate::observe::stats::{GaugeGuard, WorkerStats};
use crate::route::prefix::Place;
use crate::worker::WorkerCtx;

/// Starts a blocking command for the master of `slot`.
pub fn dispatch(
    ctx: &Rc<WorkerCtx>,
    req: &Request,
    slot: Place,
    dialect: Dialect,
    client: &Holding,
) -> Pending {
    let frame = req.frame().clone();
    let own = own_timeout(req).map(|own| Own {
        req: req.clone(),
        ..own
    });
    let ctx = ctx.clone();
    let client = client.clone();
    Pending::deferred(Box::pin(async move {
        let account = Account {
            waited: Cell::new(Duration::ZERO),
            client,
        };
        let command = Command {
            frame,
            own,
            started: Instant::now(),
            dialect,
        };
        // A client that leaves ends its session, which drops this future
        // and so closes the dedicated connection: Redis forgets the block.
        let reply = run(&ctx, command, slot, &account).await;
        Done::from_nodes(reply, account.waited.get())
    }))
}

/// A blocking command as sent, and its own timeout.
struct Command {
    frame: Bytes,
    own: Option<Own>,
    /// When it started: the wait for a connection counts in its timeout.
    started: Instant,
    dialect: Dialect,
}

/// A command's own timeout: where it is in the request, in which unit,
/// and what the command answers when it passes.
struct Own {
    req: Request,
    /// The argument that holds it.
    at: usize,
    millis: bool,
    timeout: Duration,
    /// Whether the command answers a null bulk string (BLMOVE,
    /// BRPOPLPUSH) rather than a null array.
    bulk: bool,
}

impl Command {
    /// What Redis answers when the command's timeout passes.
    fn nil(&self) -> Bytes {
        let mut out = BytesMut::new();
        match self.own.as_ref().is_some_and(|o| o.bulk) {
            true => orthrus_resp::encode::null(&mut out, self.dialect.proto),
            false => orthrus_resp::encode::null_array(&mut out, self.dialect.proto),
        }
        out.freeze()
    }

    /// Until when it may wait for a connection: its own timeout, or the
    /// request's deadline for a command that blocks without one.
    fn wait_until(&self, deadline: Instant) -> Instant {
        match &self.own {
            Some(own) => self.started + own.timeout,
            None => deadline,
        }
    }

    /// The frame to send now: the same bytes, unless it waited for its
    /// connection; then with what is left of its timeout (`None`: none
    /// left).
    fn frame_now(&self) -> Option<Bytes> {
        let Some(own) = &self.own else {
            return Some(self.frame.clone());
        };
        let spent = self.started.elapsed();
        if spent < WAIT_UNNOTICED {
            return Some(self.frame.clone());
        }
        let left = own.timeout.checked_sub(spent)?;
        let left = match own.millis {
            true => left.as_millis().max(1).to_string(),
            false => format!("{:.3}", left.as_secs_f64().max(0.001)),
        };
        let args: Vec<&[u8]> = (0..own.req.arg_count())
            .map(|i| match i == own.at {
                true => left.as_bytes(),
                false => own.req.arg(i).unwrap_or_default(),
            })
            .collect();
        Some(Request::from_args(&args).into_frame())
    }

    /// How long to wait for the reply: the timeout left plus the
    /// upstream's request timeout (`None`: as long as it blocks).
    fn reply_wait(&self, request_timeout: Duration) -> Option<Duration> {
        let own = self.own.as_ref()?;
        Some(own.timeout.saturating_sub(self.started.elapsed()) + request_timeout)
    }
}

/// A wait for a connection shorter than this is not taken off the
/// command's timeout (the frame is forwarded unchanged).
const WAIT_UNNOTICED: Duration = Duration::from_millis(5);

/// What a blocking command counts: the time it waited for its node, and
/// the dedicated connections of its client.
struct Account {
    waited: Cell<Duration>,
    client: Holding,
}

async fn run(ctx: &Rc<WorkerCtx>, command: Command, slot: Place, account: &Account) -> Bytes {
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
    let pool = &ctx.dedicated;
    // The client counts as blocked (INFO blocked_clients) from when its
    // command is written to the node, as the node counts it, until the
    // reply: not while it waits for a connection.
    let mut blocked = None;
    loop {
        let until = command.wait_until(retry.deadline());
        let taken =
            DedicatedPool::take_for(pool, &addr, command.dialect, held, until, Share::Blocking);
        let mut lease = match taken.await {
            Ok(lease) => lease,
            // Its own timeout passed while it waited: what Redis answers.
            Err(TakeError::Exhausted(_) | TakeError::Crowded(_) | TakeError::Late)
                if command.own.is_some() =>
            {
                return command.nil();
            }
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
        let Some(frame) = command.frame_now() else {
            lease.release();
            return command.nil();
        };
        let wait = command.reply_wait(ctx.shared.request_timeout_of(slot.upstream));
        let started = Instant::now();
        let written = || {
            blocked.get_or_insert_with(|| GaugeGuard::new(&ctx.stats().blocked_clients));
        };
        let sent = if asking {
            let mut both = BytesMut::with_capacity(ASKING.len() + frame.len());
            both.extend_from_slice(ASKING);
            both.extend_from_slice(&frame);
            lease.call_marked(&both, 2, wait, written).await
        } else {
            lease.call_marked(&frame, 1, wait, written).await
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

/// How long the command itself may block, and where that is in the
/// request; `None` for "forever" (0) or when it cannot be told.
fn own_timeout(req: &Request) -> Option<Own> {
    let name = req.arg(0)?.to_ascii_lowercase();
    let seconds = |at: usize| -> Option<Duration> {
        let s: f64 = std::str::from_utf8(req.arg(at)?).ok()?.parse().ok()?;
        (s > 0.0 && s.is_finite()).then(|| Duration::from_secs_f64(s.min(1e9)))
    };
    let own = |at: usize, millis: bool, timeout: Duration, bulk: bool| Own {
        req: Request::from_args::<&[u8]>(&[]),
        at,
        millis,
        timeout,
        bulk,
    };
    let last = req.arg_count().checked_sub(1)?;
    match name.as_slice() {
        b"blpop" | b"brpop" | b"bzpopmin" | b"bzpopmax" => {
            Some(own(last, false, seconds(last)?, false))
        }
        b"brpoplpush" | b"blmove" => Some(own(last, false, seconds(last)?, true)),
        b"blmpop" | b"bzmpop" => Some(own(1, false, seconds(1)?, false)),
        b"xread" | b"xreadgroup" => {
            let at = req.args().position(|a| a.eq_ignore_ascii_case(b"block"))? + 1;
            let ms: u64 = std::str::from_utf8(req.arg(at)?).ok()?.parse().ok()?;
            (ms > 0).then(|| own(at, true, Duration::from_millis(ms), false))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_are_read_from_the_command() {
        let t = |args: &[&str]| own_timeout(&Request::from_args(args)).map(|o| o.timeout);
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
