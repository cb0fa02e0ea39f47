//! Reads by availability zone (`cluster.availability_zone`, `read_from =
//! "az-affinity"`) against nodes that announce zones. Only Valkey (8.1 and
//! later) announces one: on Redis the test says so and stops.

mod common;

use std::time::{Duration, Instant};

use common::replication::{all_get_calls, ran_since, wait_replicated};
use common::{Proxy, cluster};
use orthrus_devcluster::{Cluster, Engine, info_field};
use redis::Commands;

/// Waits until every node's CLUSTER SHARDS shows `zones` zones (they
/// travel by gossip, and orthrus may ask any node).
fn wait_zones_known(cluster: &Cluster, zones: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    for node in cluster.nodes() {
        loop {
            let shards = node
                .cmd(&["CLUSTER", "SHARDS"])
                .map(|v| format!("{v:?}"))
                .unwrap_or_default();
            if shards.matches("az-").count() >= zones {
                break;
            }
            assert!(Instant::now() < deadline, "zones not gossiped: {shards}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

#[test]
fn az_affinity_reads_stay_in_the_zone_and_fall_back_when_it_is_gone() {
    if !common::runs_on(
        Engine::Valkey,
        "Redis announces no availability zone (REDIS_SERVER=valkey-server runs this)",
    ) {
        return;
    }
    let mut cluster = cluster(3, 2);
    // Per master: one replica in orthrus's zone, the other replica and the
    // master in another.
    let mut near = Vec::new();
    for master in cluster.masters().expect("masters") {
        let replicas = cluster.replicas_of(master).expect("replicas");
        for (n, &i) in replicas.iter().enumerate() {
            let zone = if n == 0 { "az-near" } else { "az-far" };
            cluster.nodes()[i]
                .cmd(&["CONFIG", "SET", "availability-zone", zone])
                .expect("CONFIG SET availability-zone");
            if n == 0 {
                near.push(i);
            }
        }
        cluster.nodes()[master]
            .cmd(&["CONFIG", "SET", "availability-zone", "az-far"])
            .expect("CONFIG SET availability-zone");
    }
    wait_zones_known(&cluster, 9);
    let proxy = Proxy::spawn(
        &cluster.seeds(),
        &[],
        &[
            ("ORTHRUS_CLUSTER__READ_FROM", "az-affinity"),
            ("ORTHRUS_CLUSTER__AVAILABILITY_ZONE", "az-near"),
            ("ORTHRUS_CLUSTER__REFRESH_INTERVAL_MS", "200"),
        ],
    );
    proxy.wait_ready(Duration::from_secs(20));
    let mut con = proxy.client();
    let keys: Vec<String> = (0..300).map(|i| format!("zone:{i}")).collect();
    for k in &keys {
        let () = con.set(k, "v").expect("SET");
    }
    // Written through the masters: read once every replica has it.
    wait_replicated(&cluster);
    let before = all_get_calls(&cluster);
    for k in &keys {
        let got: Option<String> = con.get(k).expect("GET");
        assert_eq!(got.as_deref(), Some("v"), "GET {k}");
    }
    let ran = ran_since(&cluster, &before);
    let in_zone: u64 = near.iter().map(|&i| ran[i]).sum();
    let all: u64 = ran.iter().sum();
    eprintln!("{in_zone} of {all} reads on same-zone replicas");
    assert_eq!(all, 300, "{ran:?}");
    assert!(in_zone * 100 >= all * 95, "{in_zone} of {all}: {ran:?}");
    let info: String = redis::cmd("INFO")
        .arg("stats")
        .query(&mut con)
        .expect("INFO");
    let same: u64 = info_field(&info, "orthrus_reads_same_zone")
        .and_then(|v| v.parse().ok())
        .expect("orthrus_reads_same_zone");
    assert!(same >= in_zone, "{info}");

    // The zone's replicas gone: every read still answered.
    for &i in &near {
        cluster.kill(i);
    }
    for k in &keys {
        let got: Option<String> = con.get(k).expect("GET with the zone's replicas gone");
        assert_eq!(got.as_deref(), Some("v"), "GET {k}");
    }
    let info: String = redis::cmd("INFO")
        .arg("stats")
        .query(&mut con)
        .expect("INFO");
    let other: u64 = info_field(&info, "orthrus_reads_other_zone")
        .and_then(|v| v.parse().ok())
        .expect("orthrus_reads_other_zone");
    assert!(other > 0, "{info}");
}

/// With no replica in orthrus's zone, `az-affinity` reads from a replica of
/// another zone, and `az-affinity-replicas-and-primary` from the master
/// when the master is in orthrus's zone.
#[test]
fn replicas_and_primary_takes_the_master_in_the_zone_before_a_far_replica() {
    if !common::runs_on(
        Engine::Valkey,
        "Redis announces no availability zone (REDIS_SERVER=valkey-server runs this)",
    ) {
        return;
    }
    let cluster = cluster(3, 1);
    let masters = cluster.masters().expect("masters");
    for i in 0..cluster.nodes().len() {
        let zone = if masters.contains(&i) {
            "az-near"
        } else {
            "az-far"
        };
        cluster.nodes()[i]
            .cmd(&["CONFIG", "SET", "availability-zone", zone])
            .expect("CONFIG SET availability-zone");
    }
    wait_zones_known(&cluster, 6);
    let keys: Vec<String> = (0..100).map(|i| format!("zone2:{i}")).collect();
    for (mode, on_masters) in [
        ("az-affinity", false),
        ("az-affinity-replicas-and-primary", true),
    ] {
        let proxy = Proxy::spawn(
            &cluster.seeds(),
            &[],
            &[
                ("ORTHRUS_CLUSTER__READ_FROM", mode),
                ("ORTHRUS_CLUSTER__AVAILABILITY_ZONE", "az-near"),
            ],
        );
        proxy.wait_ready(Duration::from_secs(20));
        let mut con = proxy.client();
        for k in &keys {
            let () = con.set(k, "v").expect("SET");
        }
        wait_replicated(&cluster);
        let before = all_get_calls(&cluster);
        for k in &keys {
            let got: Option<String> = con.get(k).expect("GET");
            assert_eq!(got.as_deref(), Some("v"), "{mode}: GET {k}");
        }
        let ran = ran_since(&cluster, &before);
        let by_masters: u64 = masters.iter().map(|&i| ran[i]).sum();
        let expected = if on_masters { 100 } else { 0 };
        assert_eq!(by_masters, expected, "{mode}: {ran:?}");
        assert_eq!(ran.iter().sum::<u64>(), 100, "{mode}: {ran:?}");
    }
}
