//! What a rebalance reads: the per-slot load from a running orthrus, and
//! the cluster's masters, slot owners and open migrations from the nodes.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use orthrus_cluster::{Health, NodeAddr, Role, SLOT_COUNT, Slot, SlotMap};
use orthrus_resp::Value;

use crate::config::{BackendConfig, BackendTls};
use crate::node::client::NodeClient;

/// How long to wait for a connection or a reply.
const TIMEOUT: Duration = Duration::from_secs(10);

/// Connections to the proxy or to nodes, opened on first use.
pub struct Links {
    auth: BackendConfig,
    tls: Option<BackendTls>,
    open: HashMap<NodeAddr, NodeClient>,
}

/// One master: its cluster id and address.
#[derive(Clone, Debug)]
pub struct Master {
    pub id: String,
    pub addr: NodeAddr,
}

/// A slot left half-moved: MIGRATING on `from`, or IMPORTING on `to`, or
/// both (indexes into [`Topology::masters`]).
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub struct Migration {
    pub slot: Slot,
    pub from: usize,
    pub to: usize,
}

/// The cluster as the rebalance sees it.
pub struct Topology {
    pub masters: Vec<Master>,
    /// Per slot, the index of its master.
    pub owners: Vec<Option<usize>>,
    pub migrations: Vec<Migration>,
}

/// Per-slot rates from `ORTHRUS HOTSLOTS`: (requests/s, bytes/s).
pub struct SlotRates {
    pub rates: HashMap<Slot, (f64, f64)>,
}

// === impl Links ===

impl Links {
    /// Connections authenticated as `auth` says (username, password),
    /// over TLS when `tls` is given: orthrus's own way to its nodes.
    pub fn new(auth: BackendConfig, tls: Option<BackendTls>) -> Links {
        Links {
            auth,
            tls,
            open: HashMap::new(),
        }
    }

    /// New connections, authenticated as these are.
    pub fn fresh(&self) -> Links {
        Links::new(self.auth.clone(), self.tls.clone())
    }

    /// Runs one command on `addr`; an error reply is an error naming it.
    pub async fn call(&mut self, addr: &NodeAddr, args: &[&[u8]]) -> anyhow::Result<Value> {
        let reply = self.call_raw(addr, args).await?;
        if let Value::Error(e) = &reply {
            let name = String::from_utf8_lossy(args.first().copied().unwrap_or_default());
            bail!("{addr}: {name} failed: {}", String::from_utf8_lossy(e));
        }
        Ok(reply)
    }

    /// Runs one command on `addr`; error replies are returned as values.
    pub async fn call_raw(&mut self, addr: &NodeAddr, args: &[&[u8]]) -> anyhow::Result<Value> {
        if !self.open.contains_key(addr) {
            let client = NodeClient::connect(addr, TIMEOUT, &self.auth, self.tls.as_ref())
                .await
                .with_context(|| format!("cannot reach {addr}"))?;
            self.open.insert(addr.clone(), client);
        }
        let client = self
            .open
            .get_mut(addr)
            .ok_or_else(|| anyhow!("no connection to {addr}"))?;
        match client.cmd(args).await {
            Ok(reply) => Ok(reply),
            Err(e) => {
                self.open.remove(addr);
                Err(anyhow!(e).context(format!("{addr} did not answer")))
            }
        }
    }

    /// How many databases `addr` serves (a Valkey 9 cluster's
    /// `cluster-databases`; one for Redis 7): a slot's keys are in each.
    pub async fn databases(&mut self, addr: &NodeAddr) -> anyhow::Result<u32> {
        self.call_raw(addr, &[b"PING"]).await?;
        let client = self
            .open
            .get_mut(addr)
            .ok_or_else(|| anyhow!("no connection to {addr}"))?;
        match client.databases().await {
            Ok(served) => Ok(served.count),
            Err(e) => {
                self.open.remove(addr);
                Err(anyhow!(e).context(format!("{addr} did not answer")))
            }
        }
    }

    /// MIGRATE's `AUTH password` or `AUTH2 username password`, as these
    /// connections authenticate; empty when they do not.
    pub fn migrate_auth(&self) -> Vec<Vec<u8>> {
        match (&self.auth.username, &self.auth.password) {
            (_, None) => Vec::new(),
            (None, Some(p)) => vec![b"AUTH".to_vec(), p.as_bytes().to_vec()],
            (Some(u), Some(p)) => vec![
                b"AUTH2".to_vec(),
                u.as_bytes().to_vec(),
                p.as_bytes().to_vec(),
            ],
        }
    }
}

/// The nodes orthrus knows (`orthrus_node<N>:addr=...` lines of its INFO
/// cluster section) and how long it has been up, in seconds.
pub async fn proxy_nodes(
    links: &mut Links,
    proxy: &NodeAddr,
) -> anyhow::Result<(Vec<NodeAddr>, u64)> {
    let info = links.call(proxy, &[b"INFO", b"all"]).await?;
    let text = info
        .as_str()
        .ok_or_else(|| anyhow!("{proxy}: INFO did not answer with text"))?;
    let mut nodes = Vec::new();
    let mut uptime = 0;
    for line in text.lines() {
        if let Some(secs) = line.strip_prefix("uptime_in_seconds:") {
            uptime = secs.trim().parse().unwrap_or(0);
        }
        let Some((name, fields)) = line.split_once(':') else {
            continue;
        };
        if !name.starts_with("orthrus_node") {
            continue;
        }
        let addr = fields
            .split(',')
            .find_map(|f| f.strip_prefix("addr="))
            .and_then(|a| a.parse::<NodeAddr>().ok());
        nodes.extend(addr);
    }
    if nodes.is_empty() {
        bail!(
            "{proxy} knows no cluster node yet (no orthrus_node lines in its INFO): is it an orthrus connected to its cluster?"
        );
    }
    Ok((nodes, uptime))
}

/// Every slot's rates over the last 10 s, from `ORTHRUS HOTSLOTS`.
pub async fn slot_rates(links: &mut Links, proxy: &NodeAddr) -> anyhow::Result<SlotRates> {
    let count = SLOT_COUNT.to_string();
    let reply = links
        .call(
            proxy,
            &[b"ORTHRUS", b"HOTSLOTS", b"COUNT", count.as_bytes()],
        )
        .await?;
    let entries = reply
        .as_array()
        .ok_or_else(|| anyhow!("{proxy}: ORTHRUS HOTSLOTS did not answer with an array"))?;
    let mut rates = HashMap::new();
    for entry in entries {
        let number = |name: &str| entry.field(name).and_then(Value::as_int);
        let slot = number("slot")
            .and_then(|n| u16::try_from(n).ok())
            .and_then(Slot::new);
        let (Some(slot), Some(requests), Some(bytes)) =
            (slot, number("requests-per-sec"), number("bytes-per-sec"))
        else {
            bail!(
                "{proxy}: an ORTHRUS HOTSLOTS entry lacks slot, requests-per-sec or bytes-per-sec"
            );
        };
        rates.insert(slot, (requests as f64, bytes as f64));
    }
    Ok(SlotRates { rates })
}

/// Reads the topology through the first of `seeds` that answers CLUSTER
/// SHARDS, then each master's own view of its migrations. Refuses a
/// cluster that is not stable, naming what is wrong.
pub async fn topology(
    links: &mut Links,
    seeds: &[NodeAddr],
    require_replicas: bool,
) -> anyhow::Result<Topology> {
    let (map, state) = shards(links, seeds).await?;
    let bad: Vec<String> = map
        .nodes()
        .iter()
        .filter(|n| !matches!(n.health, Health::Online | Health::Unknown))
        .map(|n| format!("{} ({} {})", n.addr, n.role.name(), n.health.name()))
        .collect();
    if !bad.is_empty() {
        bail!("the cluster is not stable: {}", bad.join(", "));
    }
    if !map.is_complete() {
        bail!(
            "the cluster is not stable: {} of {SLOT_COUNT} slots have a master",
            map.covered_slots()
        );
    }
    if require_replicas {
        let alone: Vec<String> = map
            .masters()
            .into_iter()
            .filter(|m| map.replicas_of(m).is_empty())
            .map(|m| m.to_string())
            .collect();
        if !alone.is_empty() {
            bail!(
                "the cluster is not stable: masters without a usable replica (--require-replicas): {}",
                alone.join(", ")
            );
        }
    }
    if state.as_deref() != Some("ok") {
        bail!(
            "the cluster is not stable: cluster_state:{}",
            state.as_deref().unwrap_or("?")
        );
    }
    let mut masters = Vec::new();
    for node in map.nodes().iter().filter(|n| n.role == Role::Master) {
        let id = node
            .id
            .as_deref()
            .ok_or_else(|| anyhow!("CLUSTER SHARDS gave no id for {}", node.addr))?;
        masters.push(Master {
            id: id.to_owned(),
            addr: node.addr.clone(),
        });
    }
    let index = |addr: &NodeAddr| masters.iter().position(|m| &m.addr == addr);
    let owners = Slot::all().map(|s| map.master(s).and_then(index)).collect();
    let mut migrations = Vec::new();
    for (i, master) in masters.iter().enumerate() {
        let text = nodes_text(links, master).await?;
        for (slot, peer, outgoing) in open_migrations(&text) {
            let Some(j) = masters.iter().position(|m| m.id == peer) else {
                bail!(
                    "{}: slot {} is {} a node that is not a master ({peer})",
                    master.addr,
                    slot.get(),
                    if outgoing {
                        "migrating to"
                    } else {
                        "importing from"
                    }
                );
            };
            let m = if outgoing {
                Migration {
                    slot,
                    from: i,
                    to: j,
                }
            } else {
                Migration {
                    slot,
                    from: j,
                    to: i,
                }
            };
            if !migrations.contains(&m) {
                migrations.push(m);
            }
        }
    }
    Ok(Topology {
        masters,
        owners,
        migrations,
    })
}

/// CLUSTER SHARDS from the first seed that answers, and its cluster_state.
///
/// The state is read first: a node flags a master FAIL before its state
/// turns to fail, so a failed state read here comes with the failed node
/// in the shards read after it, and the refusal can name that node.
async fn shards(
    links: &mut Links,
    seeds: &[NodeAddr],
) -> anyhow::Result<(SlotMap, Option<String>)> {
    let mut last = anyhow!("no seed to ask");
    for seed in seeds {
        let info = match links.call(seed, &[b"CLUSTER", b"INFO"]).await {
            Ok(info) => info,
            Err(e) => {
                last = e;
                continue;
            }
        };
        let state = info.as_str().and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("cluster_state:"))
                .map(|s| s.trim().to_owned())
        });
        let reply = links.call(seed, &[b"CLUSTER", b"SHARDS"]).await?;
        let map = SlotMap::from_shards(&reply, seed)
            .with_context(|| format!("{seed}: CLUSTER SHARDS"))?;
        return Ok((map, state));
    }
    Err(last.context("no cluster node orthrus knows could be reached"))
}

/// `master`'s CLUSTER NODES text.
pub async fn nodes_text(links: &mut Links, master: &Master) -> anyhow::Result<String> {
    let reply = links.call(&master.addr, &[b"CLUSTER", b"NODES"]).await?;
    reply
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| anyhow!("{}: CLUSTER NODES did not answer with text", master.addr))
}

/// The line of CLUSTER NODES that describes the node that answered.
pub fn myself(cluster_nodes: &str) -> Option<&str> {
    cluster_nodes
        .lines()
        .find(|l| l.split(' ').nth(2).is_some_and(|f| f.contains("myself")))
}

/// The `myself` line's open migrations: `[slot->-id]` (migrating, true)
/// and `[slot-<-id]` (importing, false).
fn open_migrations(cluster_nodes: &str) -> Vec<(Slot, String, bool)> {
    let Some(line) = myself(cluster_nodes) else {
        return Vec::new();
    };
    line.split(' ')
        .filter_map(|f| f.strip_prefix('[')?.strip_suffix(']'))
        .filter_map(|f| {
            let (slot, peer, outgoing) = match (f.split_once("->-"), f.split_once("-<-")) {
                (Some((s, p)), _) => (s, p, true),
                (_, Some((s, p))) => (s, p, false),
                _ => return None,
            };
            let slot = Slot::new(slot.parse().ok()?)?;
            Some((slot, peer.to_owned(), outgoing))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_are_read_from_the_myself_line() {
        let text = "\
aaa 127.0.0.1:7001@17001 myself,master - 0 0 1 connected 0-5460 [93->-bbb] [7000-<-ccc]
bbb 127.0.0.1:7002@17002 master - 0 0 2 connected 5461-10922 [94->-aaa]
";
        let got = open_migrations(text);
        assert_eq!(
            got,
            vec![
                (Slot::new(93).unwrap(), "bbb".to_owned(), true),
                (Slot::new(7000).unwrap(), "ccc".to_owned(), false),
            ]
        );
        assert!(open_migrations("").is_empty());
    }
}
