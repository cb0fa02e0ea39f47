//! CONFIG SET on every node, all or nothing. One redis-server that refuses
//! a CONFIG SET (a script keeps it `-BUSY`, a value it rejects) keeps its
//! settings; a deployment where some nodes took the settings and another
//! refused them would be left half changed (a `min-replicas-to-write`
//! that only some masters enforce). So orthrus reads the settings' values
//! on every node first (CONFIG GET), sends the CONFIG SET, and when some
//! nodes took it and another refused, sets the values they had back on
//! those that took it; the client gets the refusal.

use std::rc::Rc;

use bytes::Bytes;
use orthrus_cluster::NodeAddr;
use orthrus_resp::{Limits, Request, Value, encode};

use crate::client::Pending;
use crate::cmd::fanout::send_to_each;
use crate::node::Done;
use crate::node::client::Dialect;
use crate::node::forward::resolve_all;
use crate::worker::WorkerCtx;

/// Makes the client's reply of each node's (the first error, naming its
/// node, else the common reply).
pub type Merge = fn(&[NodeAddr], &[Bytes]) -> Bytes;

/// Sends the CONFIG SET `req` to `nodes`, all or nothing (see the module
/// doc); `merge` makes the client's reply of theirs. It starts once earlier replies are written and holds the
/// client's later commands until it is done, so that they see its
/// settings as on one node.
pub fn every_node(
    ctx: &Rc<WorkerCtx>,
    nodes: Vec<NodeAddr>,
    req: &Request,
    (dialect, merge): (Dialect, Merge),
) -> Pending {
    let get = get_frame(req);
    let set = req.frame().clone();
    let ctx = ctx.clone();
    Pending::deferred(Box::pin(async move {
        let before = match &get {
            Some(get) => {
                let sent = send_to_each(&ctx, nodes.clone(), get, Dialect::default(), true);
                resolve_all(&ctx.pool, sent).await.0
            }
            None => Vec::new(),
        };
        let sent = send_to_each(&ctx, nodes.clone(), &set, dialect, false);
        let (replies, backend) = resolve_all(&ctx.pool, sent).await;
        let took = |r: &Bytes| r.starts_with(b"+OK");
        if replies.iter().any(took) && !replies.iter().all(took) {
            let restores = nodes
                .iter()
                .zip(&replies)
                .zip(&before)
                .filter(|((_, reply), _)| took(reply))
                .filter_map(|((node, _), old)| Some((node.clone(), restore_frame(old)?)));
            for (node, frame) in restores {
                let sent = send_to_each(&ctx, vec![node], &frame, Dialect::default(), false);
                let _ = resolve_all(&ctx.pool, sent).await;
            }
        }
        Done::from_nodes(merge(&nodes, &replies), backend)
    }))
}

/// `CONFIG GET` of the names a `CONFIG SET name value ...` sets; `None`
/// when it is not one (an odd count, a glob, which CONFIG GET would
/// widen): the nodes refuse it alike.
fn get_frame(req: &Request) -> Option<Bytes> {
    let count = req.arg_count();
    if count < 4 || count % 2 != 0 {
        return None;
    }
    let names: Vec<&[u8]> = (2..count).step_by(2).filter_map(|i| req.arg(i)).collect();
    if names.iter().any(|n| n.iter().any(|b| b"*?[".contains(b))) {
        return None;
    }
    let args = [&b"CONFIG"[..], b"GET"].into_iter().chain(names);
    Some(encode::command(args.collect::<Vec<_>>()))
}

/// `CONFIG SET` of the names and values a node's CONFIG GET reply gave.
fn restore_frame(reply: &Bytes) -> Option<Bytes> {
    let (value, _) = Value::parse(reply, &Limits::for_replies()).ok()??;
    let pairs = value.as_array()?;
    if pairs.is_empty() || pairs.len() % 2 != 0 {
        return None;
    }
    let values: Option<Vec<&[u8]>> = pairs.iter().map(Value::as_bytes).collect();
    let args = [&b"CONFIG"[..], b"SET"].into_iter().chain(values?);
    Some(encode::command(args.collect::<Vec<_>>()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(args: &[&str]) -> Request {
        let frame = encode::command(args);
        let mut buf = bytes::BytesMut::from(&frame[..]);
        orthrus_resp::RequestParser::new(Limits::default())
            .parse(&mut buf)
            .expect("parse")
            .expect("whole")
    }

    #[test]
    fn reads_the_names_it_sets() {
        let req = request(&["config", "set", "maxmemory", "1", "save", ""]);
        let expected = encode::command(["CONFIG", "GET", "maxmemory", "save"]);
        assert_eq!(get_frame(&req), Some(expected));
        assert_eq!(get_frame(&request(&["config", "set", "maxmemory"])), None);
        assert_eq!(get_frame(&request(&["config", "set", "max*", "1"])), None);
    }

    #[test]
    fn sets_back_what_it_read() {
        let reply =
            Bytes::from_static(b"*4\r\n$9\r\nmaxmemory\r\n$1\r\n0\r\n$4\r\nsave\r\n$0\r\n\r\n");
        let expected = encode::command(["CONFIG", "SET", "maxmemory", "0", "save", ""]);
        assert_eq!(restore_frame(&reply), Some(expected));
        assert_eq!(restore_frame(&Bytes::from_static(b"-ERR no\r\n")), None);
        assert_eq!(restore_frame(&Bytes::from_static(b"*0\r\n")), None);
    }
}
