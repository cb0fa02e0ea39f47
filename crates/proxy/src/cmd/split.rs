//! Multi-key commands whose keys span slots (MGET, MSET, DEL, UNLINK,
//! EXISTS, TOUCH): one sub-command per slot, sent at once to the owning
//! masters, each following its own redirections, merged in the caller's
//! order. Any sub-command's error is the client's reply: never a silently
//! short one.

use std::rc::Rc;

use bytes::{Bytes, BytesMut};
use orthrus_cluster::Slot;
use orthrus_resp::{Protocol, Request, encode};

use crate::client::Pending;
use crate::cmd::reply::{array_elements, parse_integer};
use crate::node::Done;
use crate::node::forward::{self, Access, Target, error_reply};
use crate::route::kind::Merge;
use crate::worker::WorkerCtx;

/// One sub-command: its slot and which of the caller's keys it carries.
struct Part {
    slot: Slot,
    keys: Vec<usize>,
}

/// Splits `req` (whose keys are every `step`-th argument from 1) per slot.
pub fn dispatch(
    ctx: &Rc<WorkerCtx>,
    req: &Request,
    merge: Merge,
    proto: Protocol,
    access: Access,
) -> Pending {
    let step = if merge == Merge::Ok { 2 } else { 1 };
    if (req.arg_count() - 1) % step != 0 {
        let name = String::from_utf8_lossy(req.arg(0).unwrap_or_default()).to_ascii_lowercase();
        return Pending::Ready(error_reply(&format!(
            "ERR wrong number of arguments for '{name}' command"
        )));
    }
    let key_count = (req.arg_count() - 1) / step;
    let mut parts: Vec<Part> = Vec::new();
    for k in 0..key_count {
        let Some(key) = req.arg(1 + k * step) else {
            continue;
        };
        let slot = Slot::for_key(key);
        match parts.iter_mut().find(|p| p.slot == slot) {
            Some(part) => part.keys.push(k),
            None => parts.push(Part {
                slot,
                keys: vec![k],
            }),
        }
    }
    let name = req.arg(0).unwrap_or_default();
    let mut sent = Vec::with_capacity(parts.len());
    for part in &parts {
        let mut args: Vec<&[u8]> = Vec::with_capacity(1 + part.keys.len() * step);
        args.push(name);
        for &k in &part.keys {
            for j in 0..step {
                args.push(req.arg(1 + k * step + j).unwrap_or_default());
            }
        }
        let frame = Request::from_args(&args).into_frame();
        sent.push(forward::forward(
            &ctx.pool,
            frame,
            Target::Slot(part.slot),
            proto,
            access,
        ));
    }
    let ctx = ctx.clone();
    Pending::Future(Box::pin(async move {
        let (replies, backend) = forward::resolve_all(&ctx.pool, sent).await;
        let keys: Vec<Vec<usize>> = parts.into_iter().map(|p| p.keys).collect();
        Done::from_nodes(merge_replies(merge, &keys, key_count, &replies), backend)
    }))
}

/// Merges the sub-replies; `keys[i]` are the caller's key positions that
/// sub-reply `i` answers.
fn merge_replies(merge: Merge, keys: &[Vec<usize>], key_count: usize, replies: &[Bytes]) -> Bytes {
    if let Some(err) = replies.iter().find(|r| is_error(r)) {
        return err.clone();
    }
    match merge {
        Merge::Ok => replies
            .first()
            .cloned()
            .unwrap_or_else(|| error_reply("ERR orthrus: nothing to do")),
        Merge::Sum => {
            let mut total = 0i64;
            for r in replies {
                match parse_integer(r) {
                    Some(n) => total = total.saturating_add(n),
                    None => return unexpected(r),
                }
            }
            let mut out = BytesMut::with_capacity(24);
            encode::integer(&mut out, total);
            out.freeze()
        }
        Merge::Array => {
            let mut slots: Vec<Option<Bytes>> = vec![None; key_count];
            for (reply, positions) in replies.iter().zip(keys) {
                let Some(elements) = array_elements(reply) else {
                    return unexpected(reply);
                };
                if elements.len() != positions.len() {
                    return unexpected(reply);
                }
                for (element, &pos) in elements.into_iter().zip(positions) {
                    if let Some(slot) = slots.get_mut(pos) {
                        *slot = Some(element);
                    }
                }
            }
            let mut out = BytesMut::new();
            encode::array_header(&mut out, key_count);
            for element in slots {
                match element {
                    Some(e) => out.extend_from_slice(&e),
                    None => return error_reply("ERR orthrus: a sub-reply was missing"),
                }
            }
            out.freeze()
        }
    }
}

fn is_error(frame: &[u8]) -> bool {
    matches!(frame.first(), Some(b'-' | b'!'))
}

fn unexpected(reply: &[u8]) -> Bytes {
    let shown: String = String::from_utf8_lossy(reply).chars().take(60).collect();
    error_reply(&format!("ERR orthrus: unexpected sub-reply {shown:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    #[test]
    fn mget_is_reassembled_in_key_order() {
        // keys 0 and 2 went to one node, key 1 to another.
        let keys = vec![vec![0, 2], vec![1]];
        let replies = vec![b("*2\r\n$1\r\na\r\n$-1\r\n"), b("*1\r\n$1\r\nb\r\n")];
        let out = merge_replies(Merge::Array, &keys, 3, &replies);
        assert_eq!(&out[..], b"*3\r\n$1\r\na\r\n$1\r\nb\r\n$-1\r\n");
    }

    #[test]
    fn integers_are_summed_and_errors_win() {
        let keys = vec![vec![0], vec![1]];
        let out = merge_replies(Merge::Sum, &keys, 2, &[b(":2\r\n"), b(":3\r\n")]);
        assert_eq!(&out[..], b":5\r\n");
        let out = merge_replies(Merge::Sum, &keys, 2, &[b(":2\r\n"), b("-ERR boom\r\n")]);
        assert_eq!(&out[..], b"-ERR boom\r\n");
        let out = merge_replies(Merge::Ok, &keys, 2, &[b("+OK\r\n"), b("+OK\r\n")]);
        assert_eq!(&out[..], b"+OK\r\n");
    }

    #[test]
    fn a_short_sub_reply_is_an_error_not_a_short_reply() {
        let keys = vec![vec![0, 1]];
        let out = merge_replies(Merge::Array, &keys, 2, &[b("*1\r\n$1\r\na\r\n")]);
        assert!(out.starts_with(b"-ERR orthrus"));
    }
}
