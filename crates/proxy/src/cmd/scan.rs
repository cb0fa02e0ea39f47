//! SCAN across the masters, one at a time: the cursor orthrus hands out
//! carries which master (the low 10 bits, an index into the sorted master
//! list) and that master's own cursor (the rest). A full iteration visits
//! every master from cursor 0 to cursor 0, so it returns every key that
//! existed throughout, as SCAN guarantees, as long as the set of masters
//! does not change during the iteration. MATCH, COUNT and TYPE pass through.

// Client-supplied counts, positions and cursors meet arithmetic here: every
// operation is checked (an overflow is a clear error, never a wrap or a panic).
#![cfg_attr(not(test), deny(clippy::arithmetic_side_effects))]

use std::rc::Rc;

use bytes::{Bytes, BytesMut};
use orthrus_resp::{Request, encode};

use crate::client::Pending;
use crate::cmd::reply::array_elements;
use crate::node::Done;
use crate::node::answer::{error_reply, no_owner};
use crate::node::client::Dialect;
use crate::node::forward::{self, Access, Sent, Target};
use crate::worker::WorkerCtx;

const NODE_BITS: u32 = 10;
const NODE_MASK: u64 = (1 << NODE_BITS) - 1;

/// Starts `SCAN cursor ...` on the master the cursor names.
pub fn dispatch(ctx: &Rc<WorkerCtx>, req: &Request, dialect: Dialect) -> Pending {
    let cursor = req
        .arg(1)
        .and_then(|c| std::str::from_utf8(c).ok())
        .and_then(|c| c.parse::<u64>().ok());
    let Some(cursor) = cursor else {
        return Pending::Ready(error_reply("ERR invalid cursor"));
    };
    let map = ctx.slots();
    let masters = ctx.shared.masters();
    if masters.is_empty() {
        return Pending::Ready(no_owner(&map));
    }
    let index = usize::try_from(cursor & NODE_MASK).unwrap_or(usize::MAX);
    let Some(node) = masters.get(index) else {
        return Pending::Ready(error_reply("ERR invalid cursor"));
    };
    let node_cursor = (cursor >> NODE_BITS).to_string();
    let mut args: Vec<&[u8]> = req.args().collect();
    if let Some(arg) = args.get_mut(1) {
        *arg = node_cursor.as_bytes();
    }
    let frame = orthrus_resp::encode::command(&args);
    let target = Target::Node(node.clone());
    let sent = forward::forward(&ctx.pool, frame, target, dialect, Access::Read);
    let count = masters.len();
    let ctx = ctx.clone();
    Pending::Future(Box::pin(async move {
        let done = match sent {
            Sent::Remote(remote) => forward::resolve(&ctx.pool, remote).await,
            Sent::Refused { reply, .. } => return Done::local(reply),
        };
        Done {
            reply: rewrite(&done.reply, index, count),
            ..done
        }
    }))
}

/// Replaces the node's cursor in its reply by orthrus's cursor.
fn rewrite(reply: &Bytes, index: usize, masters: usize) -> Bytes {
    if matches!(reply.first(), Some(b'-' | b'!')) {
        return reply.clone();
    }
    let parsed = array_elements(reply).and_then(|parts| {
        let [cursor, keys] = <[Bytes; 2]>::try_from(parts).ok()?;
        let text = bulk_text(&cursor)?;
        let node_cursor: u64 = std::str::from_utf8(text).ok()?.parse().ok()?;
        Some((node_cursor, keys))
    });
    let Some((node_cursor, keys)) = parsed else {
        return error_reply("ERR orthrus: unexpected SCAN reply from a master");
    };
    let next = if node_cursor != 0 {
        if node_cursor >> (64 - NODE_BITS) != 0 {
            return error_reply("ERR orthrus: a master's SCAN cursor is too large to encode");
        }
        (node_cursor << NODE_BITS) | index as u64
    } else if let Some(next) = index.checked_add(1).filter(|&next| next < masters) {
        next as u64
    } else {
        0
    };
    let mut out = BytesMut::with_capacity(keys.len().saturating_add(32));
    encode::array_header(&mut out, 2);
    encode::bulk(&mut out, next.to_string().as_bytes());
    out.extend_from_slice(&keys);
    out.freeze()
}

/// The payload of a `$n\r\n...\r\n` frame.
fn bulk_text(frame: &[u8]) -> Option<&[u8]> {
    let rest = frame.strip_prefix(b"$")?;
    let line = rest.iter().position(|&b| b == b'\r')?;
    rest.get(line.checked_add(2)?..rest.len().checked_sub(2)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_walk_every_master_then_end() {
        let keys = "*1\r\n$1\r\nk\r\n";
        let reply = |c: &str| Bytes::from(format!("*2\r\n${}\r\n{c}\r\n{keys}", c.len()));
        // Master 1 of 3 is mid-way: its cursor 17 travels with index 1.
        let out = rewrite(&reply("17"), 1, 3);
        assert_eq!(
            out,
            Bytes::from(format!("*2\r\n$5\r\n{}\r\n{keys}", (17u64 << 10) | 1))
        );
        // Master 1 is done: go on with master 2 from its start.
        assert_eq!(
            rewrite(&reply("0"), 1, 3),
            Bytes::from(format!("*2\r\n$1\r\n2\r\n{keys}"))
        );
        // The last master is done: the iteration is over.
        assert_eq!(
            rewrite(&reply("0"), 2, 3),
            Bytes::from(format!("*2\r\n$1\r\n0\r\n{keys}"))
        );
        assert!(rewrite(&Bytes::from_static(b"-ERR x\r\n"), 0, 1).starts_with(b"-ERR x"));
    }
}
