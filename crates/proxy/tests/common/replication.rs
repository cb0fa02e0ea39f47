//! What the nodes of a cluster with replicas ran and hold: GETs per node,
//! and a wait until the replicas caught up.

use std::time::{Duration, Instant};

use orthrus_devcluster::{Cluster, info_field};

/// How many GETs node `i` has run (`cmdstat_get` calls; 0 before the
/// first, and for a node that is down).
pub fn get_calls(cluster: &Cluster, i: usize) -> u64 {
    let Ok(info) = cluster.nodes()[i].cmd(&["INFO", "commandstats"]) else {
        return 0;
    };
    let text = info.as_str().unwrap_or_default().to_owned();
    info_field(&text, "cmdstat_get")
        .and_then(|stats| stats.split(',').find_map(|kv| kv.strip_prefix("calls=")))
        .map_or(0, |calls| calls.parse().expect("numeric calls"))
}

/// GETs run by each node, by index.
pub fn all_get_calls(cluster: &Cluster) -> Vec<u64> {
    (0..cluster.nodes().len())
        .map(|i| get_calls(cluster, i))
        .collect()
}

/// GETs each node ran since `before` (a restarted node starts from 0).
pub fn ran_since(cluster: &Cluster, before: &[u64]) -> Vec<u64> {
    let after = all_get_calls(cluster);
    after
        .iter()
        .zip(before)
        .map(|(a, b)| a.saturating_sub(*b))
        .collect()
}

/// A field of `INFO replication` on node `i`.
pub fn replication_field(cluster: &Cluster, i: usize, name: &str) -> Option<String> {
    let info = cluster.nodes()[i].cmd(&["INFO", "replication"]).ok()?;
    info_field(info.as_str()?, name).map(str::to_owned)
}

/// Waits until every replica's link to its master is up and its first
/// sync is done, so that the cluster reports it online (not loading) to
/// an orthrus started after: on a busy machine a replica can still be
/// syncing when the cluster is up.
pub fn wait_replicas_linked(cluster: &Cluster) {
    let deadline = Instant::now() + Duration::from_secs(30);
    for master in cluster.masters().expect("masters") {
        for replica in cluster.replicas_of(master).expect("replicas") {
            let linked = || {
                replication_field(cluster, replica, "master_link_status").as_deref() == Some("up")
                    && replication_field(cluster, replica, "master_sync_in_progress").as_deref()
                        == Some("0")
            };
            while !linked() {
                assert!(Instant::now() < deadline, "replica {replica} never linked");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// Waits until every replica has applied everything its master has (its
/// replication offset reached the master's): what was written through
/// orthrus is then readable on the replicas.
pub fn wait_replicated(cluster: &Cluster) {
    let deadline = Instant::now() + Duration::from_secs(20);
    for master in cluster.masters().expect("masters") {
        let offset = |i: usize, name: &str| -> Option<u64> {
            replication_field(cluster, i, name)?.parse().ok()
        };
        let target = offset(master, "master_repl_offset").expect("master offset");
        for replica in cluster.replicas_of(master).expect("replicas") {
            while offset(replica, "slave_repl_offset").unwrap_or(0) < target {
                assert!(
                    Instant::now() < deadline,
                    "replica {replica} did not catch up with master {master}"
                );
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}
