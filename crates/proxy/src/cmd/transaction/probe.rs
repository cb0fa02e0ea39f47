//! Queue-time refusals only the node can give. Redis refuses a command
//! queued inside MULTI when the server is out of memory (`-OOM`: every
//! command but EXEC, DISCARD, QUIT and RESET), busy with a script
//! (`-BUSY`) or loading (`-LOADING`), and a write when it cannot persist
//! (`-MISCONF`) or has too few replicas (`-NOREPLICAS`); the transaction
//! is then flagged and EXEC answers `-EXECABORT`. orthrus queues the
//! commands itself, so once a keyed command has named the transaction's
//! node, every command queued from then on is checked there by a probe on
//! the shared connection (one for the commands of a pipelined burst):
//! `SETRANGE <a key of the slot> -1 x`, a `denyoom` write that passes the
//! same checks in the node's `processCommand` and then refuses its
//! negative offset before it looks the key up (nothing is read, written,
//! expired or touched). The node's refusal is the
//! command's reply and flags the transaction; any other answer (the
//! offset error, a redirect, a lost connection, `-NOPERM` for a backend
//! user without SETRANGE) leaves the command `+QUEUED`: EXEC still meets
//! the node, which then refuses or redirects the whole transaction as
//! before.

use std::cell::RefCell;
use std::future::{Future, poll_fn};
use std::ops::ControlFlow;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use bytes::Bytes;
use orthrus_resp::{Request, encode};

use crate::client::Pending;
use crate::client::transaction::{Multi, Probe, ProbeSent};
use crate::cmd::reply::simple;
use crate::node::Done;
use crate::node::client::Dialect;
use crate::node::conn::ReplyRx;
use crate::node::forward::{Target, send_frames};
use crate::node::target::owner;
use crate::route::prefix::Place;
use crate::route::table::CommandInfo;
use crate::worker::WorkerCtx;

/// Refusals of any queued command.
const ANY: [&[u8]; 3] = [b"OOM", b"BUSY", b"LOADING"];
/// Refusals of a queued write.
const WRITES: [&[u8]; 2] = [b"MISCONF", b"NOREPLICAS"];

/// Notes the transaction's first key once its node is known: the key the
/// probes name.
pub fn note_key(multi: &mut Multi, req: &Request, info: &CommandInfo) {
    if multi.probe.is_some() {
        return;
    }
    let mut first = None;
    let _ = info.for_each_key(req, |key, _| {
        first = Some(Bytes::copy_from_slice(key));
        ControlFlow::Break(())
    });
    multi.probe = first.map(|key| Probe {
        key,
        refused: Rc::default(),
        last: None,
    });
}

/// The reply of a command just queued (`+QUEUED`): at once when the
/// transaction has no node yet, else once a probe is answered. A probe
/// whose answer has not been read yet serves the commands queued after
/// it too: a pipelined transaction costs one probe, not one per command.
/// `writes`: the command may write.
pub fn queued(multi: &mut Multi, writes: bool, dialect: Dialect, ctx: &Rc<WorkerCtx>) -> Pending {
    let (Some(probe), Some(place)) = (multi.probe.as_mut(), multi.slot) else {
        return Pending::Ready(simple("QUEUED"));
    };
    let sent = match &probe.last {
        Some(last) if last.answer.borrow().is_none() => last.clone(),
        _ => {
            let Some(rx) = send(&probe.key, place, dialect, ctx) else {
                return Pending::Ready(simple("QUEUED"));
            };
            let sent = Rc::new(ProbeSent {
                rx: RefCell::new(Some(rx)),
                answer: RefCell::default(),
            });
            probe.last = Some(sent.clone());
            sent
        }
    };
    let refused = probe.refused.clone();
    Pending::Future(Box::pin(async move {
        let answer = poll_fn(|cx| answer(&sent, cx)).await;
        if refuses(&answer, writes) {
            refused.set(true);
            Done::local(answer)
        } else {
            Done::local(simple("QUEUED"))
        }
    }))
}

/// The node's answer to `sent`, read by whichever of the commands that
/// share it is polled first.
fn answer(sent: &ProbeSent, cx: &mut Context<'_>) -> Poll<Bytes> {
    if let Some(answer) = sent.answer.borrow().as_ref() {
        return Poll::Ready(answer.clone());
    }
    let mut rx = sent.rx.borrow_mut();
    let Some(pending) = rx.as_mut() else {
        return Poll::Ready(Bytes::new());
    };
    let answer = match std::task::ready!(Pin::new(pending).poll(cx)) {
        Ok(Ok(delivered)) => delivered.frame,
        Ok(Err(_)) | Err(_) => Bytes::new(),
    };
    *rx = None;
    *sent.answer.borrow_mut() = Some(answer.clone());
    Poll::Ready(answer)
}

/// Queues a probe naming `key` on a shared connection to the master of
/// `place` now, so that it goes out with the commands read with it.
fn send(key: &[u8], place: Place, dialect: Dialect, ctx: &WorkerCtx) -> Option<ReplyRx> {
    let target = Target::Slot(place);
    let map = target.map(ctx.pool.env());
    let addr = owner(&map, &target)?;
    Some(send_frames(&ctx.pool, addr, &frame(key), dialect, false, 1))
}

/// `SETRANGE key -1 x`.
fn frame(key: &[u8]) -> Bytes {
    encode::command([&b"SETRANGE"[..], key, b"-1", b"x"])
}

/// Whether the node's answer to the probe refuses the queued command.
fn refuses(reply: &[u8], writes: bool) -> bool {
    let Some(text) = reply.strip_prefix(b"-") else {
        return false;
    };
    let code = text
        .iter()
        .position(|&b| b == b' ' || b == b'\r')
        .and_then(|end| text.get(..end))
        .unwrap_or(text);
    ANY.contains(&code) || (writes && WRITES.contains(&code))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_is_setrange_at_minus_one() {
        assert_eq!(
            &frame(b"k{t}")[..],
            b"*4\r\n$8\r\nSETRANGE\r\n$4\r\nk{t}\r\n$2\r\n-1\r\n$1\r\nx\r\n"
        );
    }

    #[test]
    fn refusals_by_code() {
        let oom = b"-OOM command not allowed when used memory > 'maxmemory'.\r\n";
        assert!(refuses(oom, false));
        assert!(refuses(b"-BUSY Redis is busy running a script.\r\n", false));
        let misconf = b"-MISCONF Errors writing to disk\r\n";
        assert!(refuses(misconf, true));
        assert!(!refuses(misconf, false));
        assert!(refuses(
            b"-NOREPLICAS Not enough good replicas to write.\r\n",
            true
        ));
        assert!(!refuses(
            b"-NOREPLICAS Not enough good replicas to write.\r\n",
            false
        ));
        assert!(!refuses(b"-ERR offset is out of range\r\n", true));
        assert!(!refuses(b"-MOVED 1 127.0.0.1:7000\r\n", true));
        assert!(!refuses(b"-OOMX\r\n", true));
        assert!(!refuses(b"-NOPERM this user has no permissions\r\n", true));
        assert!(!refuses(b":0\r\n", true));
    }
}
