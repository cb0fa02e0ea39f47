//! A node that leaves the topology (forgotten by the cluster, still
//! running) is forgotten by orthrus too: its connections close and its
//! latency series goes; and every node socket has TCP keepalive on.

mod common;

use std::process::Command;
use std::time::Duration;

use common::admin::{get, spawn_with_admin};
use common::{cluster, send};
use orthrus_devcluster::wait_until;

/// orthrus's established connections to `port`, with their timers.
fn conns_to(pid: u32, port: u16) -> Vec<String> {
    let out = Command::new("ss")
        .args(["-tnpo", "state", "established"])
        .arg(format!("dst 127.0.0.1:{port}"))
        .output()
        .expect("ss");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(&format!("pid={pid},")))
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_node_that_leaves_the_topology_is_forgotten() {
    let cluster = cluster(3, 1);
    let (proxy, admin) = spawn_with_admin(
        &cluster.seeds(),
        &["--threads", "2", "--read-from", "replica"],
        &[("ORTHRUS_CLUSTER__REFRESH_INTERVAL_MS", "300")],
    );
    proxy.wait_ready(Duration::from_secs(20));
    let master = cluster.masters().unwrap()[0];
    let gone = cluster.replicas_of(master).unwrap()[0];
    let gone_port = cluster.nodes()[gone].port();
    let gone_addr = cluster.nodes()[gone].addr().to_string();
    // Reads of keys of that master go to its replica, from both workers.
    let key = (0..)
        .map(|i| format!("k{i}"))
        .find(|k| common::owner_of(&cluster, k.as_bytes()) == master)
        .unwrap();
    let mut clients: Vec<_> = (0..8).map(|_| proxy.stream()).collect();
    wait_until(Duration::from_secs(20), "reads on the replica", || {
        for c in &mut clients {
            assert_eq!(send(c, &["GET", &key]), "$-1\r\n");
        }
        let conns = conns_to(proxy.pid(), gone_port);
        if conns.is_empty() {
            Err("no connection to the replica yet".to_owned())
        } else {
            Ok(())
        }
    })
    .unwrap();
    for conn in conns_to(proxy.pid(), gone_port) {
        assert!(conn.contains("timer:(keepalive"), "no keepalive: {conn}");
    }
    let (_, metrics) = get(admin, "/metrics");
    assert!(
        metrics.contains(&format!("node=\"{gone_addr}\"")),
        "{metrics}"
    );

    // The replica leaves: it forgets the cluster, the cluster forgets it.
    let id = cluster.node_id(gone).unwrap();
    let mut conn = cluster.nodes()[gone].connect().unwrap();
    conn.cmd_ok(&["CLUSTER", "RESET", "HARD"]).unwrap();
    for (i, node) in cluster.nodes().iter().enumerate() {
        if i != gone {
            node.connect()
                .unwrap()
                .cmd_ok(&["CLUSTER", "FORGET", &id])
                .unwrap();
        }
    }
    wait_until(
        Duration::from_secs(20),
        "orthrus to forget the node",
        || {
            for c in &mut clients {
                assert_eq!(send(c, &["GET", &key]), "$-1\r\n");
            }
            let conns = conns_to(proxy.pid(), gone_port);
            let (_, metrics) = get(admin, "/metrics");
            if !conns.is_empty() {
                Err(format!("still connected: {conns:?}"))
            } else if metrics.contains(&format!("node=\"{gone_addr}\"")) {
                Err("its latency series is still there".to_owned())
            } else {
                Ok(())
            }
        },
    )
    .unwrap();
    // Every other node still has orthrus's connections, with keepalive.
    let other = cluster.nodes()[master].port();
    let conns = conns_to(proxy.pid(), other);
    assert!(!conns.is_empty());
    assert!(
        conns.iter().all(|c| c.contains("timer:(keepalive")),
        "{conns:?}"
    );
}
