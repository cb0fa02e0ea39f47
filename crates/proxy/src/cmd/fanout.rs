//! Commands that concern the whole keyspace (KEYS, DBSIZE, FLUSHALL,
//! RANDOMKEY, SCRIPT LOAD, ...): sent to every master at once, the replies
//! merged into the one a single redis-server would give. Any master's error
//! is the client's reply.

// Client-supplied counts, positions and cursors meet arithmetic here: every
// operation is checked (an overflow is a clear error, never a wrap or a panic).
#![cfg_attr(not(test), deny(clippy::arithmetic_side_effects))]

use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::{Bytes, BytesMut};
use orthrus_cluster::NodeAddr;
use orthrus_resp::{Request, encode};

use crate::client::Pending;
use crate::cmd::reply::{array_elements, parse_integer};
use crate::node::Done;
use crate::node::answer::{error_reply, no_owner};
use crate::node::client::Dialect;
use crate::node::forward::{self, Access, Sent, Target};
use crate::route::kind::FanOut;
use crate::worker::WorkerCtx;

/// The error for counts whose sum a 64-bit integer cannot hold.
const OVERFLOW: &str =
    "ERR orthrus: the masters' counts add up to more than a 64-bit integer holds";

/// Sends `req` to every master and merges the replies as `how` says.
pub fn dispatch(
    ctx: &Rc<WorkerCtx>,
    req: &Request,
    how: FanOut,
    dialect: Dialect,
    readonly: bool,
) -> Pending {
    let map = ctx.slots();
    let mut masters = ctx.shared.masters();
    if masters.is_empty() {
        return Pending::Ready(no_owner(&map));
    }
    if how == FanOut::FirstNonNil {
        // Spread RANDOMKEY over the masters.
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = masters.len();
        masters.rotate_left(
            NEXT.fetch_add(1, Ordering::Relaxed)
                .checked_rem(n)
                .unwrap_or(0),
        );
    }
    let sent = send_to_each(ctx, masters, req.frame(), dialect, readonly);
    let ctx = ctx.clone();
    Pending::Future(Box::pin(async move {
        let (replies, backend) = forward::resolve_all(&ctx.pool, sent).await;
        Done::from_nodes(merge(how, &replies), backend)
    }))
}

/// Sends `frame` to each of `nodes`; the replies come back in that order
/// (see [`forward::resolve_all`]).
pub fn send_to_each(
    ctx: &Rc<WorkerCtx>,
    nodes: Vec<NodeAddr>,
    frame: &Bytes,
    dialect: Dialect,
    readonly: bool,
) -> Vec<Sent> {
    nodes
        .into_iter()
        .map(|n| {
            let access = Access::of(readonly);
            forward::forward(&ctx.pool, frame.clone(), Target::Node(n), dialect, access)
        })
        .collect()
}

fn merge(how: FanOut, replies: &[Bytes]) -> Bytes {
    if let Some(err) = replies
        .iter()
        .find(|r| matches!(r.first(), Some(b'-' | b'!')))
    {
        return err.clone();
    }
    let Some(first) = replies.first() else {
        return error_reply("ERR orthrus: no master to ask");
    };
    match how {
        FanOut::AllOk | FanOut::Same => {
            if replies.iter().all(|r| r == first) {
                first.clone()
            } else {
                error_reply("ERR orthrus: the masters disagree")
            }
        }
        FanOut::FirstNonNil => replies
            .iter()
            .find(|r| !matches!(&r[..], b"$-1\r\n" | b"_\r\n"))
            .unwrap_or(first)
            .clone(),
        FanOut::Sum => {
            let mut total = 0i64;
            for r in replies {
                match parse_integer(r) {
                    Some(n) => total = total.saturating_add(n),
                    None => return error_reply("ERR orthrus: unexpected reply from a master"),
                }
            }
            let mut out = BytesMut::with_capacity(24);
            encode::integer(&mut out, total);
            out.freeze()
        }
        FanOut::Concat | FanOut::Union => {
            let mut all = Vec::new();
            for r in replies {
                match array_elements(r) {
                    Some(elements) => all.extend(elements),
                    None => return error_reply("ERR orthrus: unexpected reply from a master"),
                }
            }
            if how == FanOut::Union {
                let mut seen = std::collections::HashSet::new();
                all.retain(|e| seen.insert(e.clone()));
            }
            let mut out = BytesMut::with_capacity(
                all.iter().map(Bytes::len).sum::<usize>().saturating_add(16),
            );
            encode::array_header(&mut out, all.len());
            for e in all {
                out.extend_from_slice(&e);
            }
            out.freeze()
        }
        FanOut::PairSum => {
            let mut pairs: Vec<(Bytes, i64)> = Vec::new();
            for r in replies {
                let Some(elements) = array_elements(r) else {
                    return error_reply("ERR orthrus: unexpected reply from a master");
                };
                for (i, pair) in elements.chunks(2).enumerate() {
                    let [name, count] = pair else { continue };
                    let n = parse_integer(count).unwrap_or(0);
                    match pairs.get_mut(i) {
                        Some((_, total)) => match total.checked_add(n) {
                            Some(sum) => *total = sum,
                            None => return error_reply(OVERFLOW),
                        },
                        None => pairs.push((name.clone(), n)),
                    }
                }
            }
            let mut out = BytesMut::new();
            encode::array_header(&mut out, pairs.len().saturating_mul(2));
            for (name, n) in pairs {
                out.extend_from_slice(&name);
                encode::integer(&mut out, n);
            }
            out.freeze()
        }
        FanOut::And => {
            let mut flags: Option<Vec<i64>> = None;
            for r in replies {
                let Some(elements) = array_elements(r) else {
                    return error_reply("ERR orthrus: unexpected reply from a master");
                };
                let values: Vec<i64> = elements
                    .iter()
                    .map(|e| parse_integer(e).unwrap_or(0))
                    .collect();
                flags = Some(match flags {
                    None => values,
                    Some(prev) => prev.iter().zip(&values).map(|(a, b)| *a.min(b)).collect(),
                });
            }
            let flags = flags.unwrap_or_default();
            let mut out = BytesMut::new();
            encode::array_header(&mut out, flags.len());
            for f in flags {
                encode::integer(&mut out, f);
            }
            out.freeze()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    #[test]
    fn pubsub_merges() {
        assert_eq!(
            &merge(
                FanOut::Union,
                &[b("*2\r\n$1\r\na\r\n$1\r\nb\r\n"), b("*1\r\n$1\r\na\r\n")]
            )[..],
            b"*2\r\n$1\r\na\r\n$1\r\nb\r\n"
        );
        assert_eq!(
            &merge(
                FanOut::PairSum,
                &[b("*2\r\n$1\r\nc\r\n:1\r\n"), b("*2\r\n$1\r\nc\r\n:2\r\n")]
            )[..],
            b"*2\r\n$1\r\nc\r\n:3\r\n"
        );
    }

    #[test]
    fn counts_that_overflow_are_an_error() {
        let max = format!("*2\r\n$1\r\nc\r\n:{}\r\n", i64::MAX);
        let out = merge(FanOut::PairSum, &[b(&max), b("*2\r\n$1\r\nc\r\n:1\r\n")]);
        assert_eq!(&out[..], format!("-{OVERFLOW}\r\n").as_bytes());
    }

    #[test]
    fn merges() {
        assert_eq!(
            &merge(FanOut::Sum, &[b(":1\r\n"), b(":2\r\n")])[..],
            b":3\r\n"
        );
        assert_eq!(
            &merge(
                FanOut::Concat,
                &[b("*1\r\n$1\r\na\r\n"), b("*0\r\n"), b("*1\r\n$1\r\nb\r\n")]
            )[..],
            b"*2\r\n$1\r\na\r\n$1\r\nb\r\n"
        );
        assert_eq!(
            &merge(FanOut::AllOk, &[b("+OK\r\n"), b("+OK\r\n")])[..],
            b"+OK\r\n"
        );
        assert_eq!(
            &merge(FanOut::AllOk, &[b("+OK\r\n"), b("-ERR no\r\n")])[..],
            b"-ERR no\r\n"
        );
        assert_eq!(
            &merge(FanOut::FirstNonNil, &[b("$-1\r\n"), b("$1\r\nk\r\n")])[..],
            b"$1\r\nk\r\n"
        );
        assert_eq!(
            &merge(FanOut::FirstNonNil, &[b("$-1\r\n"), b("$-1\r\n")])[..],
            b"$-1\r\n"
        );
        assert_eq!(
            &merge(
                FanOut::And,
                &[b("*2\r\n:1\r\n:1\r\n"), b("*2\r\n:1\r\n:0\r\n")]
            )[..],
            b"*2\r\n:1\r\n:0\r\n"
        );
    }
}
