//! Cluster creation, the topology queries, and cleanup on panic.

mod support;

use std::thread;
use std::time::{Duration, Instant};

use orthrus_devcluster::{Cluster, ClusterSpec, NodeOptions, Value};
use support::{info_field, redis_alive, text};

#[test]
fn three_masters_one_replica_each() {
    let started = Instant::now();
    let cluster = Cluster::start(ClusterSpec::new(3, 1)).unwrap();
    eprintln!("3 masters + 3 replicas ready in {:?}", started.elapsed());

    cluster.wait_ok(Duration::from_secs(10)).unwrap();
    assert_eq!(cluster.nodes().len(), 6);
    assert_eq!(cluster.seeds().len(), 6);
    assert_eq!(cluster.masters().unwrap(), vec![0, 1, 2]);
    for m in 0..3 {
        assert_eq!(cluster.replicas_of(m).unwrap(), vec![3 + m]);
        assert_eq!(cluster.node_id(m).unwrap().len(), 40);
    }
    assert!(cluster.node_id(6).is_err());
    assert_eq!(cluster.master_of_slot(0).unwrap(), 0);
    assert_eq!(cluster.master_of_slot(8191).unwrap(), 1);
    assert_eq!(cluster.master_of_slot(16383).unwrap(), 2);

    for node in cluster.nodes() {
        let info = node.cmd_ok(&["CLUSTER", "INFO"]).unwrap();
        assert_eq!(info_field(&info, "cluster_state").as_deref(), Some("ok"));
        assert_eq!(
            info_field(&info, "cluster_slots_assigned").as_deref(),
            Some("16384")
        );
        assert_eq!(
            info_field(&info, "cluster_known_nodes").as_deref(),
            Some("6")
        );
        // Every node has its own, non-default bus port.
        let bus = node.cluster_port().unwrap();
        assert_ne!(bus, node.port());
        assert_ne!(u32::from(bus), u32::from(node.port()) + 10000);
    }

    // Keys land on their owners, and flushall reaches every master.
    for (i, key) in ["{a}", "{b}", "{c}", "{d}", "{e}"].iter().enumerate() {
        let slot = match cluster.nodes()[0]
            .cmd_ok(&["CLUSTER", "KEYSLOT", key])
            .unwrap()
        {
            Value::Integer(s) => u16::try_from(s).unwrap(),
            other => panic!("{other:?}"),
        };
        let owner = cluster.master_of_slot(slot).unwrap();
        let value = i.to_string();
        let reply = cluster.nodes()[owner]
            .cmd_ok(&["SET", key, &value])
            .unwrap();
        assert_eq!(text(&reply), "OK");
    }
    cluster.flushall().unwrap();
    for &m in &cluster.masters().unwrap() {
        assert_eq!(
            cluster.nodes()[m].cmd_ok(&["DBSIZE"]).unwrap(),
            Value::Integer(0)
        );
    }
}

#[test]
fn a_panic_while_holding_a_cluster_stops_every_process() {
    let (tx, rx) = std::sync::mpsc::channel();
    let outcome = thread::spawn(move || {
        let cluster = Cluster::start(ClusterSpec::new(3, 1)).unwrap();
        let pids: Vec<u32> = cluster.nodes().iter().filter_map(|n| n.pid()).collect();
        tx.send(pids).unwrap();
        panic!("deliberate panic with a live cluster");
    })
    .join();
    assert!(outcome.is_err(), "the thread was meant to panic");
    let pids = rx.recv().unwrap();
    assert_eq!(pids.len(), 6);
    for pid in pids {
        assert!(!redis_alive(pid), "redis-server {pid} outlived the panic");
    }
}

#[test]
fn password_protected_cluster_with_replicas() {
    let spec = ClusterSpec::new(2, 1).with_node(NodeOptions::cluster().with_password("pw"));
    let cluster = Cluster::start(spec).unwrap();
    assert_eq!(cluster.masters().unwrap(), vec![0, 1]);
    // Replicas synced through masterauth.
    let repl = cluster.nodes()[2].cmd_ok(&["INFO", "replication"]).unwrap();
    assert_eq!(
        info_field(&repl, "master_link_status").as_deref(),
        Some("up")
    );
    let mut bare = orthrus_devcluster::Conn::connect(cluster.nodes()[0].addr()).unwrap();
    assert!(text(&bare.cmd(&["CLUSTER", "INFO"]).unwrap()).starts_with("NOAUTH"));
}

#[test]
fn bad_specs_are_refused() {
    assert!(Cluster::start(ClusterSpec::new(0, 1)).is_err());
    assert!(Cluster::start(ClusterSpec::new(20_000, 0)).is_err());
}
