//! A Redis Cluster of throwaway nodes: creation without redis-cli, waits on
//! the cluster's own view of itself, and fault injection by node index.

use std::net::SocketAddr;
use std::thread;
use std::time::{Duration, Instant};

use orthrus_resp::Value;

use crate::conn::Conn;
use crate::node::{NodeOptions, RedisNode, info_field};
use crate::topology::{
    NodeLine, SLOT_COUNT, SlotRange, covers_all_slots, even_split, parse_cluster_nodes,
    parse_cluster_slots,
};
use crate::{DevError, Relay};

/// How long [`Cluster::start`] waits for the nodes to meet, agree and sync.
pub const CREATE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long creating a cluster waits for gossip before it sends the MEETs
/// a node still misses again.
const MEET_AGAIN: Duration = Duration::from_secs(3);

/// Read timeout of the probes that waits send: a node that does not answer
/// within it counts as "not ready yet", not as a reason to stall the wait.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// The shape of a cluster to start.
#[derive(Clone, Debug)]
pub struct ClusterSpec {
    /// Masters; the slots are split evenly over them.
    pub masters: usize,
    /// Replicas per master.
    pub replicas: usize,
    /// Options for every node. `cluster` is forced on and `port` off (each
    /// node gets its own free port).
    pub node: NodeOptions,
}

/// A running cluster. Nodes `0..masters` start as masters; the replicas of
/// master `m` are `masters + m * replicas ..` (`replicas` of them). Indices
/// stay fixed when roles change by failover. Dropping it stops every node.
#[derive(Debug)]
pub struct Cluster {
    nodes: Vec<RedisNode>,
    ids: Vec<String>,
    /// The master each node was created as a replica of.
    created_replica_of: Vec<Option<usize>>,
    spec: ClusterSpec,
}

/// What one node said, for comparing views.
struct NodeView {
    port: u16,
    rows: Vec<SlotRange>,
}

// === impl ClusterSpec ===

impl ClusterSpec {
    /// `masters` masters with `replicas` replicas each, default node options.
    pub fn new(masters: usize, replicas: usize) -> ClusterSpec {
        ClusterSpec {
            masters,
            replicas,
            node: NodeOptions::cluster(),
        }
    }

    /// The same spec with other node options.
    pub fn with_node(mut self, node: NodeOptions) -> ClusterSpec {
        self.node = node;
        self
    }

    /// How many nodes it starts.
    pub fn node_count(&self) -> usize {
        self.masters * (1 + self.replicas)
    }
}

// === impl Cluster ===

impl Cluster {
    /// Starts every node, assigns the slots, joins the nodes, attaches the
    /// replicas, and waits until every node reports `cluster_state:ok`, all
    /// views agree (replicas included) and every replica is in sync.
    pub fn start(spec: ClusterSpec) -> Result<Cluster, DevError> {
        if spec.masters == 0 || spec.masters > usize::from(SLOT_COUNT) {
            return Err(DevError::BadSpec {
                reason: format!("masters must be 1..=16384, not {}", spec.masters),
            });
        }
        let mut spec = spec;
        spec.node.cluster = true;
        spec.node.port = None;
        let nodes = start_nodes(&spec.node, spec.node_count())?;
        let created_replica_of = (0..nodes.len())
            .map(|i| (i >= spec.masters).then(|| (i - spec.masters) / spec.replicas))
            .collect();
        let mut cluster = Cluster {
            nodes,
            ids: Vec::new(),
            created_replica_of,
            spec,
        };
        cluster.create()?;
        Ok(cluster)
    }

    /// Every node, by index.
    pub fn nodes(&self) -> &[RedisNode] {
        &self.nodes
    }

    /// One node, mutably (to kill or restart it).
    ///
    /// # Panics
    /// If `i` is out of range, like slice indexing.
    pub fn node_mut(&mut self, i: usize) -> &mut RedisNode {
        let count = self.nodes.len();
        self.nodes
            .get_mut(i)
            .unwrap_or_else(|| panic!("no node {i}: the cluster has {count} nodes"))
    }

    /// The spec it was started with.
    pub fn spec(&self) -> &ClusterSpec {
        &self.spec
    }

    /// Every node's address, masters first.
    pub fn seeds(&self) -> Vec<SocketAddr> {
        self.nodes.iter().map(RedisNode::addr).collect()
    }

    /// Node `i`'s cluster node id (40 hex characters).
    pub fn node_id(&self, i: usize) -> Result<String, DevError> {
        self.ids.get(i).cloned().ok_or(DevError::NoSuchNode {
            index: i,
            count: self.nodes.len(),
        })
    }

    /// Indices of the nodes that are masters now (not confirmed failed), as
    /// the best-informed live node sees it, ascending.
    pub fn masters(&self) -> Result<Vec<usize>, DevError> {
        let view = self.freshest_view()?;
        let mut out: Vec<usize> = view
            .iter()
            .filter(|line| line.is_live_master())
            .filter_map(|line| self.index_of_port(line.port))
            .collect();
        out.sort_unstable();
        Ok(out)
    }

    /// Indices of the nodes that replicate `master` now, ascending.
    pub fn replicas_of(&self, master: usize) -> Result<Vec<usize>, DevError> {
        let id = self.node_id(master)?;
        let view = self.freshest_view()?;
        let mut out: Vec<usize> = view
            .iter()
            .filter(|line| line.master_id.as_deref() == Some(id.as_str()))
            .filter_map(|line| self.index_of_port(line.port))
            .collect();
        out.sort_unstable();
        Ok(out)
    }

    /// The index of the master that owns `slot` now.
    pub fn master_of_slot(&self, slot: u16) -> Result<usize, DevError> {
        let view = self.freshest_view()?;
        view.iter()
            .find(|line| line.has_flag("master") && line.owns(slot))
            .and_then(|line| self.index_of_port(line.port))
            .ok_or_else(|| DevError::Unexpected {
                cmd: "CLUSTER NODES".into(),
                detail: format!("no known master owns slot {slot}"),
            })
    }

    /// Waits until every live node (started, not killed, not paused) says
    /// `cluster_state:ok` and all give the same slot -> master table in
    /// `CLUSTER SLOTS`, covering every slot.
    pub fn wait_ok(&self, timeout: Duration) -> Result<(), DevError> {
        wait_until(
            timeout,
            "cluster_state:ok with agreeing slot tables",
            || self.check_ok(false),
        )
    }

    /// SIGKILLs node `i` (no-op if already killed).
    ///
    /// # Panics
    /// If `i` is out of range.
    pub fn kill(&mut self, i: usize) {
        self.node_mut(i).kill();
    }

    /// SIGSTOPs node `i`.
    pub fn pause(&self, i: usize) -> Result<(), DevError> {
        self.node(i)?.pause()
    }

    /// SIGCONTs node `i`.
    pub fn resume(&self, i: usize) -> Result<(), DevError> {
        self.node(i)?.resume()
    }

    /// Starts node `i` again on its ports with its nodes.conf: it rejoins
    /// the cluster (a master that was failed over comes back as a replica).
    pub fn restart(&mut self, i: usize) -> Result<(), DevError> {
        let count = self.nodes.len();
        self.nodes
            .get_mut(i)
            .ok_or(DevError::NoSuchNode { index: i, count })?
            .restart()
    }

    /// Waits until a replica of `failed` has been promoted and the cluster
    /// is ok and agreed again; returns the new master's index.
    pub fn wait_failover(&self, failed: usize, timeout: Duration) -> Result<usize, DevError> {
        let failed_id = self.node_id(failed)?;
        let mut candidates: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| self.created_replica_of.get(i) == Some(&Some(failed)))
            .collect();
        if let Ok(view) = self.freshest_view() {
            candidates.extend(
                view.iter()
                    .filter(|line| line.master_id.as_deref() == Some(failed_id.as_str()))
                    .filter_map(|line| self.index_of_port(line.port)),
            );
        }
        candidates.retain(|&i| i != failed);
        if candidates.is_empty() {
            return Err(DevError::BadSpec {
                reason: format!("node {failed} has no replica to fail over to"),
            });
        }
        let mut promoted = None;
        wait_until(
            timeout,
            &format!("a replica of node {failed} to take over"),
            || {
                let view = self.freshest_view().map_err(|e| e.to_string())?;
                let winner = view.iter().find(|line| {
                    line.is_live_master()
                        && !line.slots.is_empty()
                        && self
                            .index_of_port(line.port)
                            .is_some_and(|i| candidates.contains(&i))
                });
                let Some(winner) = winner else {
                    return Err(format!("no replica of node {failed} promoted yet"));
                };
                promoted = self.index_of_port(winner.port);
                self.check_ok(false)
            },
        )?;
        promoted.ok_or(DevError::NoLiveNode)
    }

    /// Starts a [`Relay`] in front of node `i` and makes the node announce
    /// the relay's port, then waits until every live node's `CLUSTER SLOTS`
    /// gives it: clients that follow the cluster's topology (orthrus) and
    /// its replicas (replication) reach the node through the relay from
    /// then on. The cluster bus does not pass through it, so the cluster's
    /// own failure detection does not see the relay's faults.
    pub fn relay(&self, i: usize) -> Result<Relay, DevError> {
        let node = self.node(i)?;
        let relay = Relay::start(node.addr())?;
        node.announce_port(relay.port())?;
        let needle = Value::Integer(i64::from(relay.port()));
        wait_until(
            CREATE_TIMEOUT,
            &format!("every node to announce node {i} at the relay's port"),
            || {
                for n in self.nodes.iter().filter(|n| n.is_live()) {
                    let slots = n
                        .connect_timeout(PROBE_TIMEOUT)
                        .and_then(|mut c| c.cmd_ok(&["CLUSTER", "SLOTS"]))
                        .map_err(|e| e.to_string())?;
                    if !mentions(&slots, &needle) {
                        return Err(format!(
                            "{} does not list port {} yet",
                            n.addr(),
                            relay.port()
                        ));
                    }
                }
                Ok(())
            },
        )?;
        Ok(relay)
    }

    /// FLUSHALL on every master.
    pub fn flushall(&self) -> Result<(), DevError> {
        for i in self.masters()? {
            self.node(i)?.cmd_ok(&["FLUSHALL"])?;
        }
        Ok(())
    }

    pub(crate) fn node(&self, i: usize) -> Result<&RedisNode, DevError> {
        self.nodes.get(i).ok_or(DevError::NoSuchNode {
            index: i,
            count: self.nodes.len(),
        })
    }

    /// The node whose client port, or announced port, is `port`.
    pub(crate) fn index_of_port(&self, port: u16) -> Option<usize> {
        self.nodes
            .iter()
            .position(|n| n.port() == port || n.announced_port() == Some(port))
    }

    /// `CLUSTER NODES` from the live node that has seen the highest config
    /// epoch: after a failover or a resharding, nodes that have not heard of
    /// it yet still show the old owner.
    pub(crate) fn freshest_view(&self) -> Result<Vec<NodeLine>, DevError> {
        let mut best: Option<(u64, Vec<NodeLine>)> = None;
        let mut last_err = DevError::NoLiveNode;
        for node in self.nodes.iter().filter(|n| n.is_live()) {
            match cluster_nodes(node) {
                Ok(lines) => {
                    let epoch = lines.iter().map(|l| l.config_epoch).max().unwrap_or(0);
                    if best.as_ref().is_none_or(|(e, _)| epoch > *e) {
                        best = Some((epoch, lines));
                    }
                }
                Err(e) => last_err = e,
            }
        }
        best.map(|(_, lines)| lines).ok_or(last_err)
    }

    /// Gives every node its epoch and slots, joins them, attaches replicas.
    fn create(&mut self) -> Result<(), DevError> {
        let deadline = Instant::now() + CREATE_TIMEOUT;
        let mut conns = self
            .nodes
            .iter()
            .map(RedisNode::connect)
            .collect::<Result<Vec<Conn>, _>>()?;
        for (i, conn) in conns.iter_mut().enumerate() {
            let id = conn.cmd_ok(&["CLUSTER", "MYID"])?;
            let id = id.as_str().ok_or_else(|| DevError::Unexpected {
                cmd: "CLUSTER MYID".into(),
                detail: format!("{id:?}"),
            })?;
            self.ids.push(id.to_owned());
            // Distinct epochs up front, as redis-cli does: otherwise every
            // master starts at epoch 0 and gossip resolves the collisions one
            // bump at a time.
            conn.cmd_ok(&["CLUSTER", "SET-CONFIG-EPOCH", &(i + 1).to_string()])?;
        }
        for (m, conn) in conns.iter_mut().enumerate().take(self.spec.masters) {
            let (lo, hi) = even_split(m, self.spec.masters);
            conn.cmd_ok(&["CLUSTER", "ADDSLOTSRANGE", &lo.to_string(), &hi.to_string()])?;
        }
        self.meet_all(&mut conns)?;
        // A MEET is sent once: a handshake that fails (a node busy past
        // the handshake timeout) is dropped, and gossip does not always
        // make up for it. A node that still misses others is told to meet
        // them again.
        let mut meet_again = Instant::now() + MEET_AGAIN;
        let remaining = deadline.saturating_duration_since(Instant::now());
        wait_until(remaining, "every node to know every other", || {
            let known = self.check_all_known();
            if known.is_err() && Instant::now() >= meet_again {
                meet_again = Instant::now() + MEET_AGAIN;
                self.meet_missing(&mut conns);
            }
            known
        })?;
        for i in self.spec.masters..self.nodes.len() {
            if let (Some(Some(m)), Some(conn)) = (self.created_replica_of.get(i), conns.get_mut(i))
            {
                let master_id = self.node_id(*m)?;
                conn.cmd_ok(&["CLUSTER", "REPLICATE", &master_id])?;
            }
        }
        let remaining = deadline.saturating_duration_since(Instant::now());
        wait_until(
            remaining,
            "cluster ok, replicas attached and in sync",
            || self.check_ok(true),
        )
    }

    /// Node 0 meets every other node; gossip does the rest. Each MEET names
    /// the cluster bus port, which is not port + 10000 here.
    fn meet_all(&self, conns: &mut [Conn]) -> Result<(), DevError> {
        for (i, conn) in conns.iter_mut().enumerate() {
            for node in self.nodes.iter().skip(i + 1) {
                let bus = node.cluster_port().unwrap_or_default();
                conn.cmd_ok(&[
                    "CLUSTER",
                    "MEET",
                    "127.0.0.1",
                    &node.port().to_string(),
                    &bus.to_string(),
                ])?;
            }
        }
        Ok(())
    }

    /// Each node meets the nodes it does not know yet (best effort: the
    /// wait that calls this judges the outcome).
    fn meet_missing(&self, conns: &mut [Conn]) {
        for (node, conn) in self.nodes.iter().zip(conns.iter_mut()) {
            let Ok(lines) = cluster_nodes(node) else {
                continue;
            };
            let known = |port: u16| {
                lines
                    .iter()
                    .any(|l| l.port == port && !l.has_flag("handshake") && !l.has_flag("noaddr"))
            };
            for other in self.nodes.iter().filter(|o| !known(o.port())) {
                let bus = other.cluster_port().unwrap_or_default();
                let _ = conn.cmd_ok(&[
                    "CLUSTER",
                    "MEET",
                    "127.0.0.1",
                    &other.port().to_string(),
                    &bus.to_string(),
                ]);
            }
        }
    }

    fn check_all_known(&self) -> Result<(), String> {
        for node in &self.nodes {
            let lines = cluster_nodes(node).map_err(|e| e.to_string())?;
            let known = lines
                .iter()
                .filter(|l| !l.has_flag("handshake") && !l.has_flag("noaddr"))
                .count();
            if known != self.nodes.len() {
                return Err(format!(
                    "{} knows {known} of {} nodes",
                    node.addr(),
                    self.nodes.len()
                ));
            }
        }
        Ok(())
    }

    /// `Ok` when every live node is ok and agrees; else what is not yet.
    /// With `full`, replicas must also be listed and in sync.
    fn check_ok(&self, full: bool) -> Result<(), String> {
        let mut first: Option<NodeView> = None;
        for node in self.nodes.iter().filter(|n| n.is_live()) {
            let view = probe_node(node, full).map_err(|e| format!("{}: {e}", node.addr()))?;
            if full
                && view
                    .rows
                    .iter()
                    .any(|r| r.replicas.len() != self.spec.replicas)
            {
                return Err(format!("{} does not list every replica yet", node.addr()));
            }
            match &first {
                None => first = Some(view),
                Some(seen) if seen.rows != view.rows => {
                    return Err(format!(
                        "slot tables differ: 127.0.0.1:{} vs 127.0.0.1:{}",
                        seen.port, view.port
                    ));
                }
                Some(_) => {}
            }
        }
        first.map(drop).ok_or_else(|| "no live node".to_owned())
    }
}

/// Starts `count` nodes at once: their start-up waits overlap.
fn start_nodes(opts: &NodeOptions, count: usize) -> Result<Vec<RedisNode>, DevError> {
    let results: Vec<Result<RedisNode, DevError>> = thread::scope(|scope| {
        let handles: Vec<_> = (0..count)
            .map(|_| scope.spawn(|| RedisNode::start(opts.clone())))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(DevError::Io(std::io::Error::other(
                        "a node start-up thread panicked",
                    )))
                })
            })
            .collect()
    });
    // On an error the nodes already started drop here, which stops them.
    results.into_iter().collect()
}

/// State, slot table and (with `full`) replication link of one node.
fn probe_node(node: &RedisNode, full: bool) -> Result<NodeView, DevError> {
    let mut conn = node.connect_timeout(PROBE_TIMEOUT)?;
    let info = conn.cmd_ok(&["CLUSTER", "INFO"])?;
    let state = info.as_str().and_then(|t| info_field(t, "cluster_state"));
    if state != Some("ok") {
        return Err(DevError::Unexpected {
            cmd: "CLUSTER INFO".into(),
            detail: format!("cluster_state:{}", state.unwrap_or("?")),
        });
    }
    let slots = conn.cmd_ok(&["CLUSTER", "SLOTS"])?;
    let mut rows = parse_cluster_slots(&slots)
        .filter(|rows| covers_all_slots(rows))
        .ok_or_else(|| DevError::Unexpected {
            cmd: "CLUSTER SLOTS".into(),
            detail: "does not cover every slot exactly once".into(),
        })?;
    if full {
        let repl = conn.cmd_ok(&["INFO", "replication"])?;
        let text = repl.as_str().unwrap_or_default();
        if info_field(text, "role") == Some("slave")
            && info_field(text, "master_link_status") != Some("up")
        {
            return Err(DevError::Unexpected {
                cmd: "INFO replication".into(),
                detail: "master_link_status is not up".into(),
            });
        }
    } else {
        for row in &mut rows {
            row.replicas.clear();
        }
    }
    Ok(NodeView {
        port: node.port(),
        rows,
    })
}

fn cluster_nodes(node: &RedisNode) -> Result<Vec<NodeLine>, DevError> {
    let reply = node
        .connect_timeout(PROBE_TIMEOUT)?
        .cmd_ok(&["CLUSTER", "NODES"])?;
    let text = reply.as_str().ok_or_else(|| DevError::Unexpected {
        cmd: "CLUSTER NODES".into(),
        detail: "not a string".into(),
    })?;
    parse_cluster_nodes(text).map_err(|detail| DevError::Unexpected {
        cmd: "CLUSTER NODES".into(),
        detail,
    })
}

/// Whether `value` is `needle` or holds it, at any depth.
fn mentions(value: &Value, needle: &Value) -> bool {
    match value {
        Value::Array(items) => items.iter().any(|v| mentions(v, needle)),
        other => other == needle,
    }
}

/// Polls `check` until it passes or `timeout` runs out; the timeout error
/// carries the last reason it gave.
pub fn wait_until(
    timeout: Duration,
    what: &str,
    mut check: impl FnMut() -> Result<(), String>,
) -> Result<(), DevError> {
    let deadline = Instant::now() + timeout;
    loop {
        let reason = match check() {
            Ok(()) => return Ok(()),
            Err(reason) => reason,
        };
        if Instant::now() >= deadline {
            return Err(DevError::Timeout {
                what: format!("{what} after {timeout:?}; last seen: {reason}"),
            });
        }
        thread::sleep(POLL_INTERVAL);
    }
}
