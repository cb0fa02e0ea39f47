//! What the rebalance tests share: running `orthrus rebalance`, reading
//! its plan, and looking at the cluster's slots.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::process::{Command, Output};
use std::time::Duration;

use orthrus_cluster::Slot;
use orthrus_devcluster::Cluster;

use super::Proxy;

/// Runs `orthrus rebalance --proxy <proxy> <extra>` to its end (at most
/// 180 s), echoing what it printed.
pub fn rebalance(proxy: &Proxy, extra: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_orthrus"));
    cmd.arg("rebalance")
        .arg("--proxy")
        .arg(proxy.addr.to_string())
        .args(extra);
    let out = super::run_to_exit(cmd, Duration::from_secs(180));
    eprintln!(
        "--- orthrus rebalance {extra:?} ---\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A 3-master cluster and an orthrus ready in front of it.
pub fn started() -> (Cluster, Proxy) {
    let cluster = super::cluster(3, 0);
    let proxy = Proxy::spawn(&cluster.seeds(), &[], &[]);
    proxy.wait_ready(Duration::from_secs(20));
    (cluster, proxy)
}

/// The slots of the printed plan's moves (the rows of its table: the
/// slot number, then the source's address).
pub fn planned(out: &Output) -> Vec<u16> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut fields = l.split_whitespace();
            let slot = fields.next()?.parse().ok()?;
            fields.next()?.contains(':').then_some(slot)
        })
        .collect()
}

/// Hash tags of `n` distinct slots owned by cluster node `master`.
pub fn tags_on(cluster: &Cluster, master: usize, n: usize) -> Vec<String> {
    let mut slots = HashSet::new();
    let mut tags = Vec::new();
    for i in 0.. {
        let tag = format!("{{hot{i}}}");
        if super::owner_of(cluster, tag.as_bytes()) == master
            && slots.insert(Slot::for_key(tag.as_bytes()))
        {
            tags.push(tag);
            if tags.len() == n {
                break;
            }
        }
    }
    tags
}

pub fn slot_of(tag: &str) -> u16 {
    Slot::for_key(tag.as_bytes()).get()
}

pub fn node_client(addr: SocketAddr) -> redis::Connection {
    redis::Client::open(format!("redis://{addr}/"))
        .and_then(|c| c.get_connection())
        .expect("connect to node")
}

/// The slots each master serves, by its own CLUSTER NODES line.
pub fn layout(cluster: &Cluster) -> Vec<String> {
    cluster
        .masters()
        .expect("masters")
        .iter()
        .map(|&m| {
            let text: String = redis::cmd("CLUSTER")
                .arg("NODES")
                .query(&mut node_client(cluster.nodes()[m].addr()))
                .expect("CLUSTER NODES");
            let line = text.lines().find(|l| l.contains("myself")).expect("myself");
            line.split(' ').skip(8).collect::<Vec<_>>().join(" ")
        })
        .collect()
}
