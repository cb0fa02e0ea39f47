//! What `/readyz` answers while the cluster behind orthrus fails, fails
//! over, or cannot be reached at all, with the real binary and real nodes.
//! `deploy/README.md` states these answers for each deployment; this file
//! is what keeps that text true.
//!
//! `/readyz` looks at orthrus's slot map only: 200 when every one of the
//! 16384 slots has an owner in it, 503 while the topology is unknown, while
//! some slots have no owner, and while shutting down. It does not ask
//! whether the owners answer.

mod common;

use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::admin::{get, sample, spawn_with_admin, wait_status};
use orthrus_cluster::Slot;
use orthrus_devcluster::{Cluster, free_port};

/// Quick refreshes and a short request timeout, so that orthrus sees a
/// change, and gives up on a dead node, within a test's patience.
const FAST: [(&str, &str); 2] = [
    ("ORTHRUS_CLUSTER__REFRESH_INTERVAL_MS", "200"),
    ("ORTHRUS_BACKEND__REQUEST_TIMEOUT_MS", "1500"),
];

const FAILED_MASTERS: &str = "orthrus_cluster_nodes{role=\"master\",health=\"failed\"}";

/// A key whose slot node `owner` of `cluster` serves.
fn key_on(cluster: &Cluster, owner: usize) -> String {
    (0..)
        .map(|i| format!("readiness:{i}"))
        .find(|k| {
            cluster
                .master_of_slot(Slot::for_key(k.as_bytes()).get())
                .unwrap()
                == owner
        })
        .unwrap()
}

#[test]
fn a_dead_master_without_replicas_leaves_readyz_200() {
    let mut cluster = common::cluster(3, 0);
    let (proxy, admin) = spawn_with_admin(&cluster.seeds(), &[], &FAST);
    assert_eq!(
        wait_status(admin, "/readyz", 200, Duration::from_secs(20)),
        "ready\n"
    );
    let masters = cluster.masters().unwrap();
    let (victim, survivor) = (masters[0], masters[1]);
    let victim_key = key_on(&cluster, victim);
    let survivor_key = key_on(&cluster, survivor);

    cluster.kill(victim);
    // The surviving masters mark it failed after cluster-node-timeout (2 s
    // here) and orthrus's next refresh brings that in; /readyz is 200 all
    // along, since its slots keep their (failed) owner in the map.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = get(admin, "/readyz");
        assert_eq!((status, body.as_str()), (200, "ready\n"));
        let (_, metrics) = get(admin, "/metrics");
        if sample(&metrics, FAILED_MASTERS) == Some(1.0) {
            assert_eq!(
                sample(&metrics, "orthrus_cluster_slots_covered"),
                Some(16384.0)
            );
            assert_eq!(sample(&metrics, "orthrus_cluster_masters"), Some(3.0));
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the dead master never showed as failed:\n{metrics}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // Meanwhile no key can be served: the dead master's slots have nobody
    // to answer, and with cluster-require-full-coverage (Redis's default)
    // the survivors refuse every key with CLUSTERDOWN.
    for key in [&victim_key, &survivor_key] {
        let reply = proxy.raw_command(&["GET", key]).unwrap();
        let reply = String::from_utf8_lossy(&reply);
        assert!(reply.starts_with("-CLUSTERDOWN "), "GET {key}: {reply}");
    }
    assert_eq!(get(admin, "/readyz").0, 200);

    // Nor does a cluster that has gone away entirely: the last map known
    // stays, and so does 200.
    for &i in &masters[1..] {
        cluster.kill(i);
    }
    let (_, before) = get(admin, "/metrics");
    let refreshes = sample(&before, "orthrus_topology_refreshes_total").unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        assert_eq!(get(admin, "/readyz"), (200, "ready\n".to_owned()));
        let (_, metrics) = get(admin, "/metrics");
        // A few failed refreshes later.
        if sample(&metrics, "orthrus_topology_refreshes_total").unwrap() >= refreshes + 3.0 {
            let covered = sample(&metrics, "orthrus_cluster_slots_covered");
            assert_eq!(covered, Some(16384.0));
            break;
        }
        assert!(Instant::now() < deadline, "no refresh attempts:\n{metrics}");
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(proxy);
}

#[test]
fn readyz_is_503_until_an_unreachable_cluster_answers() {
    let mut cluster = common::cluster(3, 0);
    let seeds = cluster.seeds();
    for i in 0..cluster.nodes().len() {
        cluster.kill(i);
    }
    let dead: SocketAddr = format!("127.0.0.1:{}", free_port().unwrap())
        .parse()
        .unwrap();
    let mut all_seeds = seeds.clone();
    all_seeds.push(dead);
    let (proxy, admin) = spawn_with_admin(&all_seeds, &[], &FAST);

    // Alive, never ready, through several rounds of retries.
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        assert_eq!(get(admin, "/healthz"), (200, "ok\n".to_owned()));
        assert_eq!(
            get(admin, "/readyz"),
            (503, "cluster topology not known yet\n".to_owned())
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let (_, metrics) = get(admin, "/metrics");
    let tries = sample(&metrics, "orthrus_topology_refreshes_total").unwrap();
    assert!(tries >= 3.0, "{tries} discovery attempts in 3 s");
    assert_eq!(sample(&metrics, "orthrus_cluster_slots_covered"), Some(0.0));

    for i in 0..cluster.nodes().len() {
        cluster.restart(i).unwrap();
    }
    cluster.wait_ok(Duration::from_secs(30)).unwrap();
    assert_eq!(
        wait_status(admin, "/readyz", 200, Duration::from_secs(20)),
        "ready\n"
    );
    drop(proxy);
}

#[test]
fn readyz_stays_200_through_a_failover() {
    let mut cluster = common::cluster(3, 1);
    let (proxy, admin) = spawn_with_admin(&cluster.seeds(), &[], &FAST);
    wait_status(admin, "/readyz", 200, Duration::from_secs(20));
    let victim = cluster.masters().unwrap()[0];
    let key = key_on(&cluster, victim);

    let stop = Arc::new(AtomicBool::new(false));
    let (probes, unready) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let poller = {
        let (stop, probes, unready) = (stop.clone(), probes.clone(), unready.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if get(admin, "/readyz").0 != 200 {
                    unready.fetch_add(1, Ordering::Relaxed);
                }
                probes.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    cluster.kill(victim);
    let promoted = cluster
        .wait_failover(victim, Duration::from_secs(30))
        .unwrap();
    // Until orthrus serves the slot from the promoted replica.
    let deadline = Instant::now() + Duration::from_secs(20);
    while proxy.raw_command(&["SET", &key, "v"]).unwrap() != b"+OK\r\n" {
        assert!(Instant::now() < deadline, "never served from {promoted}");
        std::thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, Ordering::Relaxed);
    poller.join().unwrap();
    let probes = probes.load(Ordering::Relaxed);
    assert!(probes >= 20, "only {probes} probes");
    assert_eq!(unready.load(Ordering::Relaxed), 0, "of {probes} probes");
}

#[test]
fn readyz_is_503_while_a_slot_has_no_owner() {
    let cluster = common::cluster(3, 0);
    let (proxy, admin) = spawn_with_admin(&cluster.seeds(), &[], &FAST);
    wait_status(admin, "/readyz", 200, Duration::from_secs(20));
    let owner = cluster.master_of_slot(0).unwrap();

    // Slot 0 unassigned everywhere, as while a cluster is being built or
    // repaired by hand.
    for node in cluster.nodes() {
        node.cmd_ok(&["CLUSTER", "DELSLOTS", "0"]).unwrap();
    }
    let body = wait_status(admin, "/readyz", 503, Duration::from_secs(20));
    assert_eq!(body, "only 16383 of 16384 slots have an owner\n");

    cluster.nodes()[owner]
        .cmd_ok(&["CLUSTER", "ADDSLOTS", "0"])
        .unwrap();
    cluster.wait_ok(Duration::from_secs(30)).unwrap();
    wait_status(admin, "/readyz", 200, Duration::from_secs(20));
    drop(proxy);
}

#[test]
fn readyz_is_503_while_draining_after_sigterm() {
    let cluster = common::cluster(3, 0);
    let (mut proxy, admin) = spawn_with_admin(&cluster.seeds(), &[], &[]);
    wait_status(admin, "/readyz", 200, Duration::from_secs(20));
    // A request in flight keeps orthrus draining after SIGTERM.
    let mut blocked = proxy.stream();
    blocked
        .write_all(&common::encode(&["BLPOP", "readiness:drain", "3"]))
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));

    proxy.signal("TERM");
    let body = wait_status(admin, "/readyz", 503, Duration::from_secs(2));
    assert_eq!(body, "shutting down\n");
    assert_eq!(get(admin, "/healthz").0, 200, "alive while draining");
    assert_eq!(common::reply_text(&mut blocked), "*-1\r\n");
    let status = proxy.wait_exit(Duration::from_secs(10)).expect("exited");
    assert!(status.success(), "{status:?}");
}
