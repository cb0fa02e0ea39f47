//! Faults: pausing a node, killing a master, bringing it back.

mod support;

use std::time::Duration;

use orthrus_devcluster::{Cluster, ClusterSpec, Conn, DevError, Value};
use support::{eventually, info_field, redis_alive, text};

#[test]
fn pause_and_resume_a_master() {
    let cluster = Cluster::start(ClusterSpec::new(3, 1)).unwrap();
    cluster.pause(1).unwrap();
    assert!(cluster.nodes()[1].is_paused());
    let stalled = Conn::connect_timeout(cluster.nodes()[1].addr(), Duration::from_millis(300))
        .and_then(|mut conn| conn.cmd(&["PING"]));
    assert!(
        matches!(stalled, Err(DevError::Timeout { .. })),
        "{stalled:?}"
    );
    // The others still answer while it is stopped.
    assert_eq!(text(&cluster.nodes()[0].cmd(&["PING"]).unwrap()), "PONG");
    cluster.resume(1).unwrap();
    assert!(!cluster.nodes()[1].is_paused());
    assert_eq!(text(&cluster.nodes()[1].cmd(&["PING"]).unwrap()), "PONG");
    cluster.wait_ok(Duration::from_secs(10)).unwrap();
    assert_eq!(cluster.masters().unwrap(), vec![0, 1, 2]);
    assert!(cluster.pause(6).is_err());
}

#[test]
fn a_killed_master_fails_over_and_rejoins_as_replica() {
    let mut cluster = Cluster::start(ClusterSpec::new(3, 1)).unwrap();
    let victim = cluster.master_of_slot(0).unwrap();
    let key = key_owned_by(&cluster, victim);
    let mut conn = cluster.nodes()[victim].connect().unwrap();
    conn.cmd_ok(&["SET", &key, "kept"]).unwrap();
    // Make sure the replica has the write before the master dies.
    let acked = conn.cmd_ok(&["WAIT", "1", "2000"]).unwrap();
    assert_eq!(acked, Value::Integer(1));
    let victim_pid = cluster.nodes()[victim].pid().unwrap();

    cluster.kill(victim);
    assert!(!redis_alive(victim_pid));
    assert_eq!(cluster.nodes()[victim].pid(), None);

    let promoted = cluster
        .wait_failover(victim, Duration::from_secs(30))
        .unwrap();
    assert_eq!(
        promoted,
        cluster.spec().masters + victim,
        "its only replica"
    );
    assert_eq!(cluster.master_of_slot(0).unwrap(), promoted);
    let masters = cluster.masters().unwrap();
    assert!(
        masters.contains(&promoted) && !masters.contains(&victim),
        "{masters:?}"
    );
    let value = cluster.nodes()[promoted].cmd_ok(&["GET", &key]).unwrap();
    assert_eq!(text(&value), "kept");

    cluster.restart(victim).unwrap();
    let promoted_port = cluster.nodes()[promoted].port().to_string();
    let rejoined = eventually(Duration::from_secs(20), || {
        let Ok(info) = cluster.nodes()[victim].cmd_ok(&["INFO", "replication"]) else {
            return false;
        };
        info_field(&info, "role").as_deref() == Some("slave")
            && info_field(&info, "master_port").as_deref() == Some(promoted_port.as_str())
    });
    assert!(rejoined, "node {victim} did not come back as a replica");
    cluster.wait_ok(Duration::from_secs(10)).unwrap();
    assert!(
        eventually(Duration::from_secs(10), || {
            cluster
                .replicas_of(promoted)
                .is_ok_and(|r| r == vec![victim])
        }),
        "{:?}",
        cluster.replicas_of(promoted)
    );
}

/// A key whose slot `master` owns, found by asking CLUSTER KEYSLOT.
fn key_owned_by(cluster: &Cluster, master: usize) -> String {
    for i in 0..1000 {
        let key = format!("key{i}");
        let slot = match cluster.nodes()[0]
            .cmd_ok(&["CLUSTER", "KEYSLOT", &key])
            .unwrap()
        {
            Value::Integer(s) => u16::try_from(s).unwrap(),
            other => panic!("{other:?}"),
        };
        if cluster.master_of_slot(slot).unwrap() == master {
            return key;
        }
    }
    panic!("no key among 1000 maps to node {master}");
}
