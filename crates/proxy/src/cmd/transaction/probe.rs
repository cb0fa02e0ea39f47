//! Queue-time refusals only the node can give. Redis refuses a command
//! queued inside MULTI when the server is out of memory (`-OOM`: every
//! command but EXEC, DISCARD, QUIT and RESET), busy with a script
//! (`-BUSY`) or loading (`-LOADING`), and a write when it cannot persist
//! (`-MISCONF`) or has too few replicas (`-NOREPLICAS`); the transaction
//! is then flagged and EXEC answers `-EXECABORT`. orthrus queues the
//! commands itself, so once a keyed command has named the transaction's
//! node, every command queued after it is checked there by a probe on the
//! shared connection: `SETRANGE <a key of the slot> -1 x`, a `denyoom`
//! write that passes the same checks in the node's `processCommand` and
//! then refuses its negative offset before it looks the key up (nothing
//! is read, written, expired or touched). The node's refusal is the
//! command's reply and flags the transaction; any other answer (the
//! offset error, a redirect, a lost connection, `-NOPERM` for a backend
//! user without SETRANGE) leaves the command `+QUEUED`: EXEC still meets
//! the node, which then refuses or redirects the whole transaction as
//! before.

use std::rc::Rc;

use bytes::{BufMut, Bytes, BytesMut};
use orthrus_resp::{Protocol, Request};

use crate::client::Pending;
use crate::client::transaction::{Multi, Probe};
use crate::cmd::reply::simple;
use crate::node::Done;
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
        std::ops::ControlFlow::Break(())
    });
    multi.probe = first.map(|key| Probe {
        key,
        refused: Rc::default(),
    });
}

/// The reply of a command just queued (`+QUEUED`): at once when the
/// transaction has no node yet, else once its probe is answered. `writes`:
/// the command may write.
pub fn queued(multi: &Multi, writes: bool, proto: Protocol, ctx: &Rc<WorkerCtx>) -> Pending {
    let (Some(probe), Some(place)) = (&multi.probe, multi.slot) else {
        return Pending::Ready(simple("QUEUED"));
    };
    let Some(rx) = send(probe, place, proto, ctx) else {
        return Pending::Ready(simple("QUEUED"));
    };
    let refused = probe.refused.clone();
    Pending::Future(Box::pin(async move {
        match rx.await {
            Ok(Ok(delivered)) if refuses(&delivered.frame, writes) => {
                refused.set(true);
                Done::from_nodes(delivered.frame, delivered.took)
            }
            Ok(Ok(delivered)) => Done::from_nodes(simple("QUEUED"), delivered.took),
            Ok(Err(_)) | Err(_) => Done::local(simple("QUEUED")),
        }
    }))
}

/// Queues the probe on a shared connection to the slot's master now, so
/// that a pipelined transaction's probes go out together.
fn send(probe: &Probe, place: Place, proto: Protocol, ctx: &WorkerCtx) -> Option<ReplyRx> {
    let target = Target::Slot(place);
    let map = target.map(ctx.pool.env());
    let addr = owner(&map, &target)?;
    Some(send_frames(
        &ctx.pool,
        addr,
        &frame(&probe.key),
        proto,
        false,
        1,
    ))
}

/// `SETRANGE key -1 x`.
fn frame(key: &[u8]) -> Bytes {
    let mut frame = BytesMut::with_capacity(key.len() + 48);
    frame.put_slice(b"*4\r\n$8\r\nSETRANGE\r\n$");
    frame.put_slice(key.len().to_string().as_bytes());
    frame.put_slice(b"\r\n");
    frame.put_slice(key);
    frame.put_slice(b"\r\n$2\r\n-1\r\n$1\r\nx\r\n");
    frame.freeze()
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
