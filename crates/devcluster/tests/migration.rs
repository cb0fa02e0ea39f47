//! Slot migration: whole moves, and a slot held half-way.

mod support;

use std::time::Duration;

use orthrus_devcluster::{Cluster, ClusterSpec, NodeOptions, Value};
use support::text;

fn keyslot(cluster: &Cluster, key: &str) -> u16 {
    match cluster.nodes()[0]
        .cmd_ok(&["CLUSTER", "KEYSLOT", key])
        .unwrap()
    {
        Value::Integer(s) => u16::try_from(s).unwrap(),
        other => panic!("{other:?}"),
    }
}

fn count_in_slot(cluster: &Cluster, node: usize, slot: u16) -> i64 {
    let slot = slot.to_string();
    match cluster.nodes()[node]
        .cmd_ok(&["CLUSTER", "COUNTKEYSINSLOT", &slot])
        .unwrap()
    {
        Value::Integer(n) => n,
        other => panic!("{other:?}"),
    }
}

/// Writes `count` keys `{tag}:i` = `v<i>` on the slot's owner; returns the
/// keys.
fn fill(cluster: &Cluster, owner: usize, tag: &str, count: usize) -> Vec<String> {
    let keys: Vec<String> = (0..count).map(|i| format!("{{{tag}}}:{i}")).collect();
    let cmds: Vec<Vec<Vec<u8>>> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| {
            vec![
                b"SET".to_vec(),
                k.clone().into_bytes(),
                format!("v{i}").into_bytes(),
            ]
        })
        .collect();
    let mut conn = cluster.nodes()[owner].connect().unwrap();
    for reply in conn.pipeline(&cmds).unwrap() {
        assert_eq!(text(&reply), "OK");
    }
    keys
}

fn assert_all_readable(cluster: &Cluster, node: usize, keys: &[String]) {
    let mut conn = cluster.nodes()[node].connect().unwrap();
    for (i, key) in keys.iter().enumerate() {
        assert_eq!(
            text(&conn.cmd(&["GET", key]).unwrap()),
            format!("v{i}"),
            "{key}"
        );
    }
}

#[test]
fn move_slot_moves_the_keys_with_it() {
    let cluster = Cluster::start(ClusterSpec::new(3, 0)).unwrap();
    let slot = keyslot(&cluster, "{moving}");
    let from = cluster.master_of_slot(slot).unwrap();
    let to = (from + 1) % 3;
    // More keys than one MIGRATE batch.
    let keys = fill(&cluster, from, "moving", 250);

    cluster.move_slot(slot, to).unwrap();
    assert_eq!(cluster.master_of_slot(slot).unwrap(), to);
    cluster.wait_ok(Duration::from_secs(10)).unwrap();
    assert_eq!(count_in_slot(&cluster, from, slot), 0);
    assert_eq!(count_in_slot(&cluster, to, slot), 250);
    assert_all_readable(&cluster, to, &keys);
    let moved = text(&cluster.nodes()[from].cmd(&["GET", &keys[0]]).unwrap());
    let to_port = cluster.nodes()[to].port();
    assert_eq!(moved, format!("MOVED {slot} 127.0.0.1:{to_port}"));

    // Moving to the owner is a no-op.
    cluster.move_slot(slot, to).unwrap();
    assert!(cluster.move_slot(16384, to).is_err());
}

#[test]
fn a_slot_held_mid_migration_answers_ask_for_moved_keys() {
    let cluster = Cluster::start(ClusterSpec::new(3, 0)).unwrap();
    let slot = keyslot(&cluster, "{half}");
    let from = cluster.master_of_slot(slot).unwrap();
    let to = (from + 2) % 3;
    let keys = fill(&cluster, from, "half", 10);
    let to_port = cluster.nodes()[to].port();
    let from_port = cluster.nodes()[from].port();

    cluster.begin_migration(slot, from, to).unwrap();
    let nodes = text(&cluster.nodes()[from].cmd_ok(&["CLUSTER", "NODES"]).unwrap());
    let marker = format!("[{slot}->-{}]", cluster.node_id(to).unwrap());
    assert!(nodes.contains(&marker), "no {marker} in\n{nodes}");

    assert_eq!(cluster.migrate_keys(slot, from, to, 3).unwrap(), 3);
    let mut source = cluster.nodes()[from].connect().unwrap();
    let mut target = cluster.nodes()[to].connect().unwrap();
    let (mut asked, mut served) = (0, 0);
    for (i, key) in keys.iter().enumerate() {
        match source.cmd(&["GET", key]).unwrap() {
            Value::Bulk(v) => {
                assert_eq!(v, format!("v{i}").as_bytes());
                served += 1;
            }
            Value::Error(e) => {
                assert_eq!(e, format!("ASK {slot} 127.0.0.1:{to_port}").as_bytes());
                asked += 1;
                // The target serves it only after ASKING.
                let moved = text(&target.cmd(&["GET", key]).unwrap());
                assert_eq!(moved, format!("MOVED {slot} 127.0.0.1:{from_port}"));
                assert_eq!(text(&target.cmd(&["ASKING"]).unwrap()), "OK");
                assert_eq!(text(&target.cmd(&["GET", key]).unwrap()), format!("v{i}"));
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!((asked, served), (3, 7));
    assert_eq!(cluster.master_of_slot(slot).unwrap(), from);

    let mut rounds = 0;
    while cluster.migrate_keys(slot, from, to, 4).unwrap() > 0 {
        rounds += 1;
        assert!(rounds < 10, "the slot never emptied");
    }
    assert_eq!(rounds, 2);
    cluster.finish_migration(slot, to).unwrap();
    assert_eq!(cluster.master_of_slot(slot).unwrap(), to);
    cluster.wait_ok(Duration::from_secs(10)).unwrap();
    assert_all_readable(&cluster, to, &keys);
}

#[test]
fn migration_authenticates_on_a_password_cluster() {
    let spec = ClusterSpec::new(2, 0).with_node(NodeOptions::cluster().with_password("pw"));
    let cluster = Cluster::start(spec).unwrap();
    let slot = keyslot(&cluster, "{secret}");
    let from = cluster.master_of_slot(slot).unwrap();
    let to = 1 - from;
    let keys = fill(&cluster, from, "secret", 5);
    cluster.move_slot(slot, to).unwrap();
    assert_all_readable(&cluster, to, &keys);
}
