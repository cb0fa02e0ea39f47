//! The CLUSTER subcommands a cluster-aware client asks for, answered as a
//! one-node cluster that owns all 16384 slots at orthrus's own address, so
//! that redis-py `RedisCluster`, ioredis `Cluster`, Jedis and Lettuce work
//! through orthrus and never see a backend's MOVED.

use std::net::SocketAddr;
use std::rc::Rc;

use bytes::{Bytes, BytesMut};
use orthrus_cluster::Slot;
use orthrus_resp::{Protocol, Request, encode};

use crate::client::{Client, Pending};
use crate::cmd::reply::{bulk, integer, verbatim};
use crate::node::answer::error_reply;
use crate::node::forward::{self, Access, Sent, Target};
use crate::route::prefix::Place;
use crate::worker::WorkerCtx;

/// The address orthrus describes itself at.
struct Me {
    host: String,
    port: u16,
    id: String,
}

/// Runs `CLUSTER <subcommand> ...`.
pub fn execute(req: &Request, client: &Client, ctx: &Rc<WorkerCtx>) -> Pending {
    let sub = req.arg(1).unwrap_or_default().to_ascii_lowercase();
    let me = me(client, ctx);
    let argc = req.arg_count();
    let reply = match (sub.as_slice(), argc) {
        (b"info", 2) => verbatim(&info(), client.proto),
        (b"myid", 2) => bulk(me.id.as_bytes()),
        (b"slots", 2) => slots(&me, client.proto),
        (b"shards", 2) => shards(&me, client.proto),
        (b"nodes", 2) => verbatim(&nodes(&me), client.proto),
        (b"keyslot", 3) => integer(i64::from(
            Slot::for_key(req.arg(2).unwrap_or_default()).get(),
        )),
        (b"countkeysinslot", 3) | (b"getkeysinslot", 4) => {
            return forward_to_owner(req, client, ctx);
        }
        (
            b"info" | b"myid" | b"slots" | b"shards" | b"nodes" | b"keyslot" | b"countkeysinslot"
            | b"getkeysinslot",
            _,
        ) => {
            let sub = String::from_utf8_lossy(&sub);
            error_reply(&format!(
                "ERR wrong number of arguments for 'cluster|{sub}' command"
            ))
        }
        _ => {
            let shown = String::from_utf8_lossy(&sub).to_ascii_uppercase();
            error_reply(&format!(
                "ERR orthrus: CLUSTER {shown} is not supported: orthrus presents itself as a one-node cluster; \
                 send administrative CLUSTER commands to the nodes directly"
            ))
        }
    };
    Pending::Ready(reply)
}

/// COUNTKEYSINSLOT and GETKEYSINSLOT go to the master of that slot.
fn forward_to_owner(req: &Request, client: &Client, ctx: &Rc<WorkerCtx>) -> Pending {
    let slot = req
        .arg(2)
        .and_then(|s| std::str::from_utf8(s).ok())
        .and_then(|s| s.parse::<u16>().ok())
        .and_then(Slot::new);
    let Some(slot) = slot else {
        return Pending::Ready(error_reply("ERR Invalid slot"));
    };
    match forward::forward(
        &ctx.pool,
        req.frame().clone(),
        Target::Slot(Place::of(slot)),
        client.dialect(),
        Access::Read,
    ) {
        Sent::Remote(remote) => Pending::Remote(remote),
        Sent::Refused { reply, .. } => Pending::Ready(reply),
    }
}

fn me(client: &Client, ctx: &WorkerCtx) -> Me {
    let announced: Option<SocketAddr> = ctx.shared.settings.announce.or(client.local_addr());
    // A client on the Unix socket has no address to give: the TCP one if
    // orthrus has one, else a placeholder (cluster-aware clients need
    // `announce` there).
    let fallback = SocketAddr::from(([127, 0, 0, 1], 0));
    let addr = announced
        .or(ctx.shared.settings.listen.tcp())
        .unwrap_or(fallback);
    let host = addr.ip().to_string();
    // A stable id for a given address, 40 hex digits like a node id.
    let mut id = String::with_capacity(40);
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for round in 0u8..5 {
        for b in addr.to_string().bytes().chain([round]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        id.push_str(&format!("{:08x}", h >> 32));
    }
    Me {
        host,
        port: addr.port(),
        id,
    }
}

fn info() -> String {
    "cluster_state:ok\r\ncluster_slots_assigned:16384\r\ncluster_slots_ok:16384\r\ncluster_slots_pfail:0\r\n\
     cluster_slots_fail:0\r\ncluster_known_nodes:1\r\ncluster_size:1\r\ncluster_current_epoch:1\r\n\
     cluster_my_epoch:1\r\ncluster_stats_messages_sent:0\r\ncluster_stats_messages_received:0\r\n\
     total_cluster_links_buffer_limit_exceeded:0\r\n"
        .to_owned()
}

fn nodes(me: &Me) -> String {
    format!(
        "{} {}:{}@{} myself,master - 0 0 1 connected 0-16383\n",
        me.id, me.host, me.port, me.port
    )
}

fn slots(me: &Me, proto: Protocol) -> Bytes {
    let mut out = BytesMut::with_capacity(128);
    encode::array_header(&mut out, 1);
    encode::array_header(&mut out, 3);
    encode::integer(&mut out, 0);
    encode::integer(&mut out, 16383);
    encode::array_header(&mut out, 4);
    encode::bulk(&mut out, me.host.as_bytes());
    encode::integer(&mut out, i64::from(me.port));
    encode::bulk(&mut out, me.id.as_bytes());
    encode::map_header(&mut out, 0, proto);
    out.freeze()
}

fn shards(me: &Me, proto: Protocol) -> Bytes {
    let mut out = BytesMut::with_capacity(256);
    encode::array_header(&mut out, 1);
    encode::map_header(&mut out, 2, proto);
    encode::bulk(&mut out, b"slots");
    encode::array_header(&mut out, 2);
    encode::integer(&mut out, 0);
    encode::integer(&mut out, 16383);
    encode::bulk(&mut out, b"nodes");
    encode::array_header(&mut out, 1);
    encode::map_header(&mut out, 7, proto);
    encode::bulk(&mut out, b"id");
    encode::bulk(&mut out, me.id.as_bytes());
    encode::bulk(&mut out, b"port");
    encode::integer(&mut out, i64::from(me.port));
    encode::bulk(&mut out, b"ip");
    encode::bulk(&mut out, me.host.as_bytes());
    encode::bulk(&mut out, b"endpoint");
    encode::bulk(&mut out, me.host.as_bytes());
    encode::bulk(&mut out, b"role");
    encode::bulk(&mut out, b"master");
    encode::bulk(&mut out, b"replication-offset");
    encode::integer(&mut out, 0);
    encode::bulk(&mut out, b"health");
    encode::bulk(&mut out, b"online");
    out.freeze()
}
