//! Administrative commands, when `admin.passthrough` is on: each goes
//! where it means what it means on one redis-server.
//!
//! - Settings and users (CONFIG SET/REWRITE, ACL SETUSER/DELUSER/LOAD/SAVE,
//!   LATENCY RESET): every node, masters and replicas, so that a failover
//!   keeps them.
//! - Persistence and memory (SAVE, BGSAVE, BGREWRITEAOF, MEMORY PURGE),
//!   DEBUG without a key and LATENCY HISTOGRAM (summed per command and
//!   bucket): every master.
//! - Questions (CONFIG GET, ACL LIST/GETUSER/..., LATENCY LATEST/HISTORY/...,
//!   MEMORY STATS/DOCTOR, ...): one master.
//! - DEBUG OBJECT and the like, PFDEBUG: the master of the key.
//! - MONITOR: every master's stream, merged as it arrives.
//! - SHUTDOWN, REPLICAOF/SLAVEOF, FAILOVER and MODULE stay refused: they
//!   would change the cluster's shape, which belongs to its operator.
//!
//! Replies of several nodes: `+OK` (or any reply) when every node gave the
//! same one; integers that differ are summed (LATENCY RESET counts events
//! per node); the first error wins, naming the node it came from.

use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use orthrus_cluster::{NodeAddr, Slot};
use orthrus_resp::{Limits, Request, Value, encode};

use crate::client::monitor::Monitor;
use crate::client::{Client, Pending, PushSink};
use crate::cmd::fanout;
use crate::cmd::reply::{parse_integer, simple};
use crate::node::Done;
use crate::node::answer::{error_reply, no_owner};
use crate::node::client::Dialect;
use crate::node::forward::{self, Access, Sent, Target};
use crate::route::table::CommandInfo;
use crate::worker::WorkerCtx;

mod config_set;

/// Where an administrative command goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scope {
    EveryNode,
    EveryMaster,
    OneMaster,
    /// The master of the key the command names.
    Keyed,
    Refused(&'static str),
}

const SHAPE: &str = "it changes the cluster's shape; send it to the node directly";

/// Sends an administrative command where it belongs.
pub fn dispatch(
    ctx: &Rc<WorkerCtx>,
    req: &Request,
    info: &Arc<CommandInfo>,
    dialect: Dialect,
) -> Pending {
    let map = ctx.slots();
    let nodes: Vec<NodeAddr> = match scope(&full_name(info, req)) {
        Scope::Refused(why) => {
            let name = info.name.to_ascii_uppercase().replace('|', " ");
            return Pending::Ready(error_reply(&format!(
                "ERR orthrus: {name} is refused: {why}"
            )));
        }
        Scope::EveryNode => map.nodes().iter().map(|n| n.addr.clone()).collect(),
        Scope::EveryMaster => map.masters(),
        Scope::OneMaster => map.masters().into_iter().take(1).collect(),
        // DEBUG OBJECT key, PFDEBUG GETREG key, ...: the key follows the
        // subcommand (the COMMAND reply gives no key position for them).
        Scope::Keyed => match req.arg(2) {
            Some(key) => map
                .master(Slot::for_key(key))
                .cloned()
                .into_iter()
                .collect(),
            None => map.masters().into_iter().take(1).collect(),
        },
    };
    if nodes.is_empty() {
        return Pending::Ready(no_owner(&map));
    }
    if full_name(info, req) == "latency|histogram" {
        return histograms(ctx, nodes, req.frame(), dialect);
    }
    let pending = match full_name(info, req).as_str() {
        "config|set" if nodes.len() > 1 => {
            config_set::every_node(ctx, nodes, req, (dialect, merge))
        }
        _ => send(ctx, nodes, req.frame(), dialect),
    };
    match slowlog_settings(req) {
        Some((slower, max_len, busy)) => {
            let ctx = ctx.clone();
            let deferred = matches!(pending, Pending::Deferred(_));
            let future = Box::pin(async move {
                let done = match pending {
                    Pending::Remote(remote) => forward::resolve(&ctx.pool, remote).await,
                    Pending::Future(f) | Pending::Deferred(f) => f.await,
                    Pending::Ready(reply) | Pending::Last(reply) => Done::local(reply),
                };
                if done.reply.starts_with(b"+OK") {
                    if slower.is_some() || max_len.is_some() {
                        ctx.shared.slowlog.set(slower, max_len);
                    }
                    if let Some(ms) = busy {
                        ctx.shared.scripts.set_busy_threshold(ms);
                    }
                }
                done
            });
            // A deferred CONFIG SET stays one.
            if deferred {
                Pending::Deferred(future)
            } else {
                Pending::Future(future)
            }
        }
        None => pending,
    }
}

/// The settings a `CONFIG SET` names that orthrus follows too: the SLOWLOG
/// ones (SLOWLOG is answered by orthrus) and the busy-script threshold
/// (PING is answered by orthrus, `-BUSY` past it).
#[allow(clippy::type_complexity)]
fn slowlog_settings(req: &Request) -> Option<(Option<i64>, Option<usize>, Option<u64>)> {
    let is = |i: usize, n: &str| {
        req.arg(i)
            .is_some_and(|a| a.eq_ignore_ascii_case(n.as_bytes()))
    };
    if !(is(0, "config") && is(1, "set")) {
        return None;
    }
    let (mut slower, mut max_len, mut busy) = (None, None, None);
    let mut i = 2;
    while let (Some(key), Some(value)) = (req.arg(i), req.arg(i + 1)) {
        let value = std::str::from_utf8(value).ok();
        if key.eq_ignore_ascii_case(b"slowlog-log-slower-than") {
            slower = value.and_then(|v| v.parse().ok());
        } else if key.eq_ignore_ascii_case(b"busy-reply-threshold")
            || key.eq_ignore_ascii_case(b"lua-time-limit")
        {
            busy = value.and_then(|v| v.parse().ok());
        } else if key.eq_ignore_ascii_case(b"slowlog-max-len") {
            max_len = value
                .and_then(|v| v.parse::<usize>().ok())
                .map(|n| n.min(10_000));
        }
        i += 2;
    }
    (slower.is_some() || max_len.is_some() || busy.is_some()).then_some((slower, max_len, busy))
}

/// Sends `frame` to every node, masters and replicas, merged as the
/// administrative commands' replies are (CONFIG RESETSTAT under
/// passthrough, after orthrus reset its own).
pub fn every_node(ctx: &Rc<WorkerCtx>, frame: &Bytes, dialect: Dialect) -> Pending {
    let map = ctx.slots();
    let nodes: Vec<NodeAddr> = map.nodes().iter().map(|n| n.addr.clone()).collect();
    if nodes.is_empty() {
        return Pending::Ready(no_owner(&map));
    }
    send(ctx, nodes, frame, dialect)
}

/// MONITOR: every master's stream, pushed to the client (see
/// `client::monitor`).
pub fn monitor(ctx: &Rc<WorkerCtx>, client: &mut Client, push: &PushSink) -> Pending {
    let masters = ctx.shared.masters();
    if masters.is_empty() {
        return Pending::Ready(no_owner(&ctx.slots()));
    }
    let (monitor, ready) = Monitor::start(ctx, masters, push);
    client.monitor = Some(Box::new(monitor));
    let timeout = ctx.shared.request_timeout();
    Pending::deferred(Box::pin(async move {
        // +OK once every master streams, so the client's next command shows.
        for r in ready {
            let _ = crate::time::timeout(timeout, r).await;
        }
        Done::local(simple("OK"))
    }))
}

/// Sends `frame` to each of `nodes`; one node's reply is the client's as
/// it is, several are merged.
fn send(ctx: &Rc<WorkerCtx>, nodes: Vec<NodeAddr>, frame: &Bytes, dialect: Dialect) -> Pending {
    if let [one] = nodes.as_slice() {
        return match forward::forward(
            &ctx.pool,
            frame.clone(),
            Target::Node(one.clone()),
            dialect,
            Access::Write,
        ) {
            Sent::Remote(remote) => Pending::Remote(remote),
            Sent::Refused { reply, .. } => Pending::Ready(reply),
        };
    }
    let sent = fanout::send_to_each(ctx, nodes.clone(), frame, dialect, false);
    let ctx = ctx.clone();
    Pending::Future(Box::pin(async move {
        let (replies, backend) = forward::resolve_all(&ctx.pool, sent).await;
        Done::from_nodes(merge(&nodes, &replies), backend)
    }))
}

/// The command's name with its subcommand (`debug|object`), lower case,
/// also where the command table does not list the subcommands.
fn full_name(info: &CommandInfo, req: &Request) -> String {
    const CONTAINERS: [&str; 6] = ["acl", "config", "debug", "latency", "memory", "module"];
    let base = info.name.split('|').next().unwrap_or_default();
    match req.arg(1) {
        Some(sub) if CONTAINERS.contains(&base) => {
            format!(
                "{base}|{}",
                String::from_utf8_lossy(sub).to_ascii_lowercase()
            )
        }
        _ => base.to_owned(),
    }
}

/// Where the command (`name` or `container|sub`, lower case) goes.
fn scope(name: &str) -> Scope {
    match name {
        "config|set" | "config|rewrite" | "acl|setuser" | "acl|deluser" | "acl|load"
        | "acl|save" | "latency|reset" => Scope::EveryNode,
        "save" | "bgsave" | "bgrewriteaof" | "memory|purge" | "latency|histogram" => {
            Scope::EveryMaster
        }
        "debug|object"
        | "debug|digest-value"
        | "debug|listpack"
        | "debug|quicklist-packed-threshold"
        | "debug|stringmatch-len"
        | "pfdebug" => Scope::Keyed,
        "shutdown" | "replicaof" | "slaveof" | "failover" | "module" => Scope::Refused(SHAPE),
        _ if name.starts_with("debug") => Scope::EveryMaster,
        _ if name.starts_with("module|") => Scope::Refused(SHAPE),
        _ => Scope::OneMaster,
    }
}

/// LATENCY HISTOGRAM of every master: each command's calls and bucket
/// counts summed, as one server that ran them all would count them.
fn histograms(
    ctx: &Rc<WorkerCtx>,
    nodes: Vec<NodeAddr>,
    frame: &Bytes,
    dialect: Dialect,
) -> Pending {
    let sent = fanout::send_to_each(ctx, nodes.clone(), frame, dialect, false);
    let ctx = ctx.clone();
    Pending::Future(Box::pin(async move {
        let (replies, backend) = forward::resolve_all(&ctx.pool, sent).await;
        let reply = match merge_histograms(&replies) {
            Some(merged) => {
                let mut out = BytesMut::new();
                merged.encode_for(&mut out, dialect.proto);
                out.freeze()
            }
            None => merge(&nodes, &replies),
        };
        Done::from_nodes(reply, backend)
    }))
}

/// `None` when a reply is not a histogram map (an error, say).
fn merge_histograms(replies: &[Bytes]) -> Option<Value> {
    let limits = Limits::for_replies();
    let mut commands: Vec<(Value, i64, BTreeMap<i64, i64>)> = Vec::new();
    for reply in replies {
        let (value, _) = Value::parse(reply, &limits).ok()??;
        for (name, body) in pairs(&value)? {
            let (mut calls, mut buckets) = (0, BTreeMap::new());
            for (key, field) in pairs(body)? {
                match key.as_str()? {
                    "calls" => calls = field.as_int()?,
                    "histogram_usec" => {
                        for (bucket, count) in pairs(field)? {
                            buckets.insert(bucket.as_int()?, count.as_int()?);
                        }
                    }
                    _ => {}
                }
            }
            match commands.iter_mut().find(|(n, _, _)| n == name) {
                Some((_, c, b)) => {
                    *c += calls;
                    for (bucket, count) in buckets {
                        *b.entry(bucket).or_default() += count;
                    }
                }
                None => commands.push((name.clone(), calls, buckets)),
            }
        }
    }
    let entries = commands
        .into_iter()
        .map(|(name, calls, buckets)| {
            let histogram = buckets
                .into_iter()
                .map(|(b, c)| (Value::Integer(b), Value::Integer(c)))
                .collect();
            let body = vec![
                (
                    Value::Bulk(Bytes::from_static(b"calls")),
                    Value::Integer(calls),
                ),
                (
                    Value::Bulk(Bytes::from_static(b"histogram_usec")),
                    Value::Map(histogram),
                ),
            ];
            (name, Value::Map(body))
        })
        .collect();
    Some(Value::Map(entries))
}

/// The pairs of a map, or of a RESP2 flat array of pairs.
fn pairs(value: &Value) -> Option<Vec<(&Value, &Value)>> {
    match value {
        Value::Map(m) => Some(m.iter().map(|(k, v)| (k, v)).collect()),
        Value::Array(a) if a.len() % 2 == 0 => Some(
            a.chunks_exact(2)
                .filter_map(|p| Some((p.first()?, p.get(1)?)))
                .collect(),
        ),
        _ => None,
    }
}

/// One reply from the replies of `nodes` (in the same order).
fn merge(nodes: &[NodeAddr], replies: &[Bytes]) -> Bytes {
    if let Some((node, err)) = nodes
        .iter()
        .zip(replies)
        .find(|(_, r)| matches!(r.first(), Some(b'-' | b'!')))
    {
        return naming(err, node);
    }
    let Some(first) = replies.first() else {
        return error_reply("ERR orthrus: no node to ask");
    };
    if replies.iter().all(|r| r == first) {
        return first.clone();
    }
    let sum: Option<i64> = replies.iter().map(|r| parse_integer(r)).sum();
    match sum {
        Some(n) => {
            let mut out = BytesMut::with_capacity(24);
            encode::integer(&mut out, n);
            out.freeze()
        }
        None => first.clone(),
    }
}

/// A node's error reply with the node named at its end.
fn naming(err: &Bytes, node: &NodeAddr) -> Bytes {
    let text = String::from_utf8_lossy(err);
    let body = text.trim_start_matches(['-', '!']).trim_end();
    error_reply(&format!("{body} (node {node})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> NodeAddr {
        s.parse().unwrap()
    }

    #[test]
    fn scopes() {
        assert_eq!(scope("config|set"), Scope::EveryNode);
        assert_eq!(scope("config|get"), Scope::OneMaster);
        assert_eq!(scope("save"), Scope::EveryMaster);
        assert_eq!(scope("debug|object"), Scope::Keyed);
        assert_eq!(scope("debug|sleep"), Scope::EveryMaster);
        assert!(matches!(scope("shutdown"), Scope::Refused(_)));
        assert!(matches!(scope("module|load"), Scope::Refused(_)));
    }

    #[test]
    fn latency_histograms_are_summed_per_command_and_bucket() {
        let a = Bytes::from_static(
            b"*2\r\n$3\r\nset\r\n*4\r\n$5\r\ncalls\r\n:1\r\n$14\r\nhistogram_usec\r\n*2\r\n:8\r\n:1\r\n",
        );
        let b = Bytes::from_static(
            b"*2\r\n$3\r\nset\r\n*4\r\n$5\r\ncalls\r\n:2\r\n$14\r\nhistogram_usec\r\n*4\r\n:8\r\n:1\r\n:16\r\n:1\r\n",
        );
        let mut out = BytesMut::new();
        merge_histograms(&[a, b])
            .unwrap()
            .encode_for(&mut out, orthrus_resp::Protocol::Resp2);
        assert_eq!(
            &out[..],
            &b"*2\r\n$3\r\nset\r\n*4\r\n$5\r\ncalls\r\n:3\r\n$14\r\nhistogram_usec\r\n*4\r\n:8\r\n:2\r\n:16\r\n:1\r\n"[..]
        );
        assert!(merge_histograms(&[Bytes::from_static(b"-ERR x\r\n")]).is_none());
    }

    #[test]
    fn merges_name_the_failing_node_and_sum_differing_integers() {
        let nodes = [addr("127.0.0.1:1"), addr("127.0.0.1:2")];
        let ok = Bytes::from_static(b"+OK\r\n");
        assert_eq!(merge(&nodes, &[ok.clone(), ok.clone()]), ok);
        let err = Bytes::from_static(b"-ERR Unknown option 'x'\r\n");
        assert_eq!(
            &merge(&nodes, &[ok, err])[..],
            b"-ERR Unknown option 'x' (node 127.0.0.1:2)\r\n"
        );
        let (a, b) = (Bytes::from_static(b":2\r\n"), Bytes::from_static(b":3\r\n"));
        assert_eq!(&merge(&nodes, &[a, b])[..], b":5\r\n");
    }
}
