//! Building a [`SlotMap`] from CLUSTER SHARDS (Redis >= 7) or CLUSTER SLOTS
//! replies, in RESP2 or RESP3 shape.
//!
//! Both parsers are strict about structure (a reply that is not shaped like
//! the command's documented answer is a [`TopologyError`], so the caller can
//! try another seed) and lenient about content that does not affect routing:
//! unknown fields are ignored, an unknown health is `Unknown`, and a replica
//! whose address is unusable is left out rather than failing discovery.
//!
//! Which host to connect to follows the `cluster-preferred-endpoint-type`
//! documentation:
//! - a normal endpoint (IP or hostname) is used as it is;
//! - `NULL` (CLUSTER SLOTS) or `""` (CLUSTER SHARDS) means "unknown
//!   endpoint" (nodes behind a load balancer, or a node that does not yet
//!   know its own IP): connect to the host the reply came from, `seed`;
//! - `?` means the node is set to announce a hostname but has none: its IP
//!   (the `ip` field, or the `ip` metadata in CLUSTER SLOTS) is used when
//!   the reply carries one, else the seed's host.

use std::sync::Arc;

use bytes::Bytes;
use orthrus_resp::Value;

use crate::slot_map::MAX_NODES;
use crate::{AddrParseError, Health, Node, NodeAddr, Role, Slot, SlotMap};

/// Why a topology reply could not be turned into a slot map.
#[derive(thiserror::Error, Clone, Debug, Eq, PartialEq)]
pub enum TopologyError {
    /// The node answered with an error, e.g. `ERR unknown subcommand` from a
    /// Redis older than 7 (fall back to CLUSTER SLOTS) or `ERR This instance
    /// has cluster support disabled`.
    #[error("node answered with an error: {}", String::from_utf8_lossy(.0))]
    ErrorReply(Bytes),
    /// The reply does not have the documented shape.
    #[error("malformed topology reply: {what}")]
    Malformed { what: &'static str },
    /// A slot range outside `0..=16383`, or with its ends reversed.
    #[error("slot range {first}-{last} is out of 0-16383 or reversed")]
    BadSlotRange { first: i64, last: i64 },
    /// Two nodes claim the same slot: the reply contradicts itself.
    #[error("slot {slot} is claimed by two different nodes")]
    SlotOwnedTwice { slot: u16 },
    /// A master's address is unusable (bad port, empty or invalid host).
    #[error("a master's address in the topology reply is unusable")]
    BadAddr(#[source] AddrParseError),
    /// More nodes than a slot map can index.
    #[error("the topology reply lists more than {MAX_NODES} nodes")]
    TooManyNodes,
}

/// A node's advertised endpoint, before it is resolved to a host.
#[derive(Clone, Copy)]
enum Endpoint<'a> {
    /// `NULL` or `""`: unknown, use the seed's host.
    Unknown,
    /// `?`: hostname preferred but not configured.
    Unset,
    Known(&'a [u8]),
}

// === impl SlotMap ===

impl SlotMap {
    /// Builds a map from a CLUSTER SHARDS reply (Redis >= 7), RESP2 (flat
    /// arrays) or RESP3 (maps). `seed` is the node that answered: its host
    /// stands in for unknown endpoints.
    ///
    /// In each shard the owner of the slots is its master that is not
    /// failed (or, if all are, its first master); its usable replicas are
    /// recorded for replica reads. A shard without slots still adds its
    /// nodes to [`SlotMap::nodes`].
    pub fn from_shards(reply: &Value, seed: &NodeAddr) -> Result<SlotMap, TopologyError> {
        let mut map = SlotMap::empty();
        for shard in top_level(reply)? {
            let slots = shard
                .field("slots")
                .and_then(Value::as_array)
                .ok_or(malformed("a shard is not a map with a 'slots' array"))?;
            let ranges = slot_pairs(slots)?;
            let nodes = shard
                .field("nodes")
                .and_then(Value::as_array)
                .ok_or(malformed("a shard has no 'nodes' array"))?;
            add_shard(&mut map, &ranges, nodes, seed)?;
        }
        Ok(map)
    }

    /// Builds a map from a CLUSTER SLOTS reply (Redis 3 to 7): an array of
    /// `[first, last, master, replica...]` where each node is `[host, port,
    /// id?, metadata?]`. Node health is not reported, so it is `Unknown`.
    pub fn from_slots(reply: &Value, seed: &NodeAddr) -> Result<SlotMap, TopologyError> {
        let mut map = SlotMap::empty();
        for entry in top_level(reply)? {
            let parts = entry
                .as_array()
                .ok_or(malformed("a slot range entry is not an array"))?;
            let [first, last, master, replicas @ ..] = parts else {
                return Err(malformed("a slot range entry has fewer than 3 elements"));
            };
            let (first, last) = slot_range(first, last)?;
            let owner = map.intern(slots_node(master, Role::Master, seed)?)?;
            map.assign(first, last, owner)?;
            for replica in replicas {
                let node = match slots_node(replica, Role::Replica, seed) {
                    Ok(node) => node,
                    // A replica with an unusable address cannot take reads;
                    // it is not worth failing discovery over.
                    Err(TopologyError::BadAddr(_)) => continue,
                    Err(e) => return Err(e),
                };
                let addr = node.addr.clone();
                map.intern(node)?;
                map.add_replica(owner, &addr);
            }
        }
        Ok(map)
    }
}

/// Adds one CLUSTER SHARDS shard: its nodes, its owner and its slots.
fn add_shard(
    map: &mut SlotMap,
    ranges: &[(Slot, Slot)],
    nodes: &[Value],
    seed: &NodeAddr,
) -> Result<(), TopologyError> {
    let mut parsed = Vec::with_capacity(nodes.len());
    for node in nodes {
        if let Some(node) = shard_node(node, seed)? {
            parsed.push(node);
        }
    }
    let owner = parsed
        .iter()
        .find(|n| n.role == Role::Master && n.health != Health::Failed)
        .or_else(|| parsed.iter().find(|n| n.role == Role::Master))
        .map(|n| n.addr.clone());
    let mut replicas = Vec::new();
    for node in parsed {
        if node.role == Role::Replica && node.health.is_usable() {
            replicas.push(node.addr.clone());
        }
        map.intern(node)?;
    }
    // A shard with slots but no master leaves them unowned: the map reports
    // partial coverage instead of inventing an owner.
    let Some(owner) = owner.and_then(|addr| map.index_of(&addr)) else {
        return Ok(());
    };
    for addr in &replicas {
        map.add_replica(owner, addr);
    }
    for &(first, last) in ranges {
        map.assign(first, last, owner)?;
    }
    Ok(())
}

/// One CLUSTER SHARDS node. `Ok(None)`: a replica with an unusable address,
/// left out.
fn shard_node(value: &Value, seed: &NodeAddr) -> Result<Option<Node>, TopologyError> {
    let field = |name| value.field(name);
    let role = field("role")
        .and_then(Value::as_bytes)
        .and_then(Role::from_wire)
        .ok_or(malformed("a shard node is not a map with a valid 'role'"))?;
    let health = field("health")
        .and_then(Value::as_bytes)
        .map_or(Health::Unknown, Health::from_wire);
    // No endpoint field at all (not Redis 7.0's shape) is taken as `?`.
    let endpoint = field("endpoint").map_or(Endpoint::Unset, Endpoint::of);
    let ip = field("ip").and_then(Value::as_bytes);
    // A TLS-only node has no plain `port`; its TLS port is its only address.
    let port = field("port")
        .or_else(|| field("tls-port"))
        .and_then(Value::as_int);
    let addr = port_of(port).and_then(|port| NodeAddr::from_parts(endpoint.host(ip, seed), port));
    match addr {
        Ok(addr) => Ok(Some(Node {
            id: field("id").and_then(node_id),
            addr,
            role,
            health,
            zone: field("availability-zone")
                .and_then(Value::as_str)
                .filter(|z| !z.is_empty())
                .map(Arc::from),
        })),
        Err(_) if role == Role::Replica => Ok(None),
        Err(e) => Err(TopologyError::BadAddr(e)),
    }
}

/// One CLUSTER SLOTS node: `[host, port, id?, metadata?]`.
fn slots_node(value: &Value, role: Role, seed: &NodeAddr) -> Result<Node, TopologyError> {
    let parts = value
        .as_array()
        .ok_or(malformed("a slot owner is not an array"))?;
    let [host, port, rest @ ..] = parts else {
        return Err(malformed("a slot owner has fewer than 2 elements"));
    };
    let id = rest.first().and_then(node_id);
    let ip = rest
        .get(1)
        .and_then(|meta| meta.field("ip"))
        .and_then(Value::as_bytes);
    let port = port_of(port.as_int()).map_err(TopologyError::BadAddr)?;
    let addr = NodeAddr::from_parts(Endpoint::of(host).host(ip, seed), port)
        .map_err(TopologyError::BadAddr)?;
    Ok(Node {
        id,
        addr,
        role,
        health: Health::Unknown,
        zone: None,
    })
}

// === impl Endpoint ===

impl<'a> Endpoint<'a> {
    fn of(value: &'a Value) -> Endpoint<'a> {
        match value.as_bytes() {
            None | Some(b"") => Endpoint::Unknown,
            Some(b"?") => Endpoint::Unset,
            Some(host) => Endpoint::Known(host),
        }
    }

    fn host(self, ip: Option<&'a [u8]>, seed: &'a NodeAddr) -> &'a [u8] {
        let ip = ip.filter(|ip| !ip.is_empty() && *ip != b"?");
        match self {
            Endpoint::Known(host) => host,
            Endpoint::Unset => ip.unwrap_or(seed.host().as_bytes()),
            Endpoint::Unknown => seed.host().as_bytes(),
        }
    }
}

// --- value access ---

/// The array of entries both commands answer with, or the node's error.
fn top_level(reply: &Value) -> Result<&[Value], TopologyError> {
    if let Some(entries) = reply.as_array() {
        return Ok(entries);
    }
    match reply {
        Value::Error(message) => Err(TopologyError::ErrorReply(message.clone())),
        // Attributes (RESP3 `|`) annotate a value; the value is what counts.
        Value::Attribute { value, .. } => top_level(value),
        _ => Err(malformed("the reply is not an array")),
    }
}

fn node_id(value: &Value) -> Option<Arc<str>> {
    let id = value.as_str()?;
    (!id.is_empty()).then(|| Arc::from(id))
}

fn port_of(port: Option<i64>) -> Result<u16, AddrParseError> {
    port.and_then(|p| u16::try_from(p).ok())
        .filter(|&p| p != 0)
        .ok_or(AddrParseError::BadPort)
}

/// `[first, last, first, last, ...]` as validated slot ranges.
fn slot_pairs(flat: &[Value]) -> Result<Vec<(Slot, Slot)>, TopologyError> {
    if flat.len() % 2 != 0 {
        return Err(malformed("a shard's 'slots' array has an odd length"));
    }
    flat.chunks_exact(2)
        .map(|pair| match pair {
            [first, last] => slot_range(first, last),
            _ => Err(malformed("a shard's 'slots' array has an odd length")),
        })
        .collect()
}

fn slot_range(first: &Value, last: &Value) -> Result<(Slot, Slot), TopologyError> {
    let (Some(first), Some(last)) = (first.as_int(), last.as_int()) else {
        return Err(malformed("a slot number is not an integer"));
    };
    let bad = TopologyError::BadSlotRange { first, last };
    let slot = |n: i64| u16::try_from(n).ok().and_then(Slot::new);
    match (slot(first), slot(last)) {
        (Some(a), Some(b)) if a <= b => Ok((a, b)),
        _ => Err(bad),
    }
}

fn malformed(what: &'static str) -> TopologyError {
    TopologyError::Malformed { what }
}
