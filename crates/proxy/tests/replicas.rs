//! Reads from replicas against a real cluster of 3 masters with 1 replica
//! each: `--read-from replica`, READONLY/READWRITE per connection with the
//! default `master`, a replica killed under traffic, and a failover. Where
//! a GET ran is read from the nodes' own `INFO commandstats`.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::replication::{all_get_calls, ran_since, wait_replicas_linked, wait_replicated};
use common::{Proxy, cluster, send};
use orthrus_cluster::Slot;
use orthrus_devcluster::{Cluster, ClusterSpec, NodeOptions, info_field};
use redis::Commands;

/// GETs run since `before`: (on masters, on replicas), by the roles the
/// cluster gives the nodes now.
fn split_by_role(cluster: &Cluster, before: &[u64]) -> (u64, u64) {
    let masters = cluster.masters().expect("masters");
    let mut split = (0, 0);
    for (i, ran) in ran_since(cluster, before).into_iter().enumerate() {
        if masters.contains(&i) {
            split.0 += ran;
        } else {
            split.1 += ran;
        }
    }
    split
}

/// GETs `keys` on `con` and says where they ran: (on masters, on
/// replicas).
fn reads_by_role(
    cluster: &Cluster,
    con: &mut redis::Connection,
    keys: &[(String, String)],
) -> (u64, u64) {
    let before = all_get_calls(cluster);
    get_all(con, keys);
    split_by_role(cluster, &before)
}

fn set_keys(con: &mut redis::Connection, prefix: &str, n: usize) -> Vec<(String, String)> {
    (0..n)
        .map(|i| {
            let (key, value) = (format!("{prefix}:{i}"), format!("value-{i}"));
            let () = con.set(&key, &value).expect("SET");
            (key, value)
        })
        .collect()
}

fn get_all(con: &mut redis::Connection, keys: &[(String, String)]) {
    for (key, value) in keys {
        let got: Option<String> = con.get(key).expect("GET");
        assert_eq!(got.as_deref(), Some(value.as_str()), "GET {key}");
    }
}

/// orthrus with `--read-from replica` (and `env`) in front of `cluster`,
/// once its replicas finished their first sync. It refreshes every 200 ms:
/// a replica the cluster still reports loading (no offset gossiped yet) at
/// orthrus's first look is left out until the next refresh.
fn replica_reader(cluster: &Cluster, env: &[(&str, &str)]) -> Proxy {
    wait_replicas_linked(cluster);
    let mut env = env.to_vec();
    env.push(("ORTHRUS_CLUSTER__REFRESH_INTERVAL_MS", "200"));
    let proxy = Proxy::spawn(&cluster.seeds(), &["--read-from", "replica"], &env);
    proxy.wait_ready(Duration::from_secs(20));
    proxy
}

#[test]
fn read_from_replica_sends_reads_to_replicas() {
    let cluster = cluster(3, 1);
    let proxy = replica_reader(&cluster, &[]);
    let mut con = proxy.client();
    let keys = set_keys(&mut con, "replica-read", 300);
    wait_replicated(&cluster);
    std::thread::sleep(Duration::from_millis(600));

    let before = all_get_calls(&cluster);
    let replica_reads = proxy.info_field("orthrus_reads_replica");
    get_all(&mut con, &keys);
    let (on_masters, on_replicas) = split_by_role(&cluster, &before);
    assert_eq!(on_masters + on_replicas, 300, "every GET ran once");
    assert!(
        on_replicas >= 270,
        "{on_replicas} of 300 GETs ran on replicas, {on_masters} on masters"
    );
    // Every replica took its master's share.
    let after = all_get_calls(&cluster);
    for replica in 3..6 {
        assert!(
            after[replica] > before[replica],
            "replica {replica} ran no GET"
        );
    }
    let counted = proxy.info_field("orthrus_reads_replica") - replica_reads;
    assert!(counted >= 270, "orthrus counted {counted} replica reads");
    // INFO says what it does.
    let mut con = proxy.client();
    let info: String = redis::cmd("INFO").arg("cluster").query(&mut con).unwrap();
    assert_eq!(info_field(&info, "orthrus_read_from"), Some("replica"));

    // Writes still go to the masters, and a value written is read back
    // once replicated.
    let () = con.set("replica-read:0", "changed").unwrap();
    wait_replicated(&cluster);
    let got: String = con.get("replica-read:0").unwrap();
    assert_eq!(got, "changed");
}

#[test]
fn readonly_and_readwrite_per_connection() {
    let cluster = cluster(3, 1);
    let proxy = Proxy::start(&cluster.seeds(), &[]);
    let mut writer = proxy.client();
    let keys = set_keys(&mut writer, "per-conn", 60);
    wait_replicated(&cluster);

    // The default: masters only.
    let before = all_get_calls(&cluster);
    get_all(&mut writer, &keys);
    assert_eq!(split_by_role(&cluster, &before), (60, 0));

    // READONLY on one connection: its reads go to replicas; another
    // connection's do not.
    let mut reader = proxy.client();
    let ok: String = redis::cmd("READONLY").query(&mut reader).unwrap();
    assert_eq!(ok, "OK");
    let (on_masters, on_replicas) = reads_by_role(&cluster, &mut reader, &keys);
    assert!(
        on_replicas >= 54,
        "{on_replicas} on replicas, {on_masters} on masters"
    );
    let before = all_get_calls(&cluster);
    get_all(&mut writer, &keys);
    assert_eq!(split_by_role(&cluster, &before), (60, 0));

    // A read-only MULTI of the READONLY client still runs on the masters.
    let before = all_get_calls(&cluster);
    let (a,): (String,) = redis::pipe()
        .atomic()
        .get(&keys[0].0)
        .query(&mut reader)
        .unwrap();
    assert_eq!(a, keys[0].1);
    assert_eq!(split_by_role(&cluster, &before), (1, 0));

    // READWRITE takes it back, and so does RESET.
    let ok: String = redis::cmd("READWRITE").query(&mut reader).unwrap();
    assert_eq!(ok, "OK");
    let before = all_get_calls(&cluster);
    get_all(&mut reader, &keys);
    assert_eq!(split_by_role(&cluster, &before), (60, 0));
    let _: String = redis::cmd("READONLY").query(&mut reader).unwrap();
    let _: String = redis::cmd("RESET").query(&mut reader).unwrap();
    let before = all_get_calls(&cluster);
    get_all(&mut reader, &keys);
    assert_eq!(split_by_role(&cluster, &before), (60, 0));
}

#[test]
fn a_replica_killed_under_reads_costs_no_client_error() {
    let mut cluster = cluster(3, 1);
    let proxy = replica_reader(&cluster, &[]);
    let mut con = proxy.client();
    let keys = Arc::new(set_keys(&mut con, "kill-replica", 200));
    wait_replicated(&cluster);
    std::thread::sleep(Duration::from_millis(600));

    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..4)
        .map(|_| {
            let (url, keys, stop) = (proxy.url(), keys.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
                con.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                let (mut reads, mut errors) = (0u64, Vec::new());
                while !stop.load(Ordering::Relaxed) {
                    for (key, value) in keys.iter() {
                        match con.get::<_, Option<String>>(key) {
                            Ok(Some(got)) if got == *value => reads += 1,
                            other => errors.push(format!("GET {key}: {other:?}")),
                        }
                    }
                }
                (reads, errors)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let fallbacks = proxy.info_field("orthrus_replica_read_fallbacks");
    // Node 3 replicates node 0.
    assert_eq!(cluster.replicas_of(0).unwrap(), [3]);
    cluster.kill(3);
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::Relaxed);
    let mut total = 0;
    for reader in readers {
        let (reads, errors) = reader.join().unwrap();
        assert!(
            errors.is_empty(),
            "{} errors, first: {}",
            errors.len(),
            errors[0]
        );
        total += reads;
    }
    assert!(total > 1000, "only {total} reads in 2.5 s");
    let fallbacks = proxy.info_field("orthrus_replica_read_fallbacks") - fallbacks;
    assert!(fallbacks >= 1, "no read was sent on after the replica died");
    // Reads of node 0's slots go to node 0 now, the others' still to
    // their replicas.
    let before = all_get_calls(&cluster);
    get_all(&mut con, &keys);
    for (i, ran) in ran_since(&cluster, &before).into_iter().enumerate() {
        match i {
            0 | 4 | 5 => assert!(ran > 0, "node {i} ran no GET"),
            _ => assert_eq!(ran, 0, "node {i} ran {ran} GETs"),
        }
    }
}

#[test]
fn after_a_failover_reads_follow_the_roles() {
    let mut cluster = cluster(3, 1);
    wait_replicas_linked(&cluster);
    let env = [("ORTHRUS_CLUSTER__REFRESH_INTERVAL_MS", "200")];
    let proxy = Proxy::spawn(&cluster.seeds(), &["--read-from", "replica"], &env);
    proxy.wait_ready(Duration::from_secs(20));
    let mut con = proxy.client();
    // Keys of node 0's slots, whose replica is node 3.
    let keys: Vec<(String, String)> = (0..)
        .map(|i| format!("failover-read:{i}"))
        .filter(|key| {
            cluster
                .master_of_slot(Slot::for_key(key.as_bytes()).get())
                .unwrap()
                == 0
        })
        .take(40)
        .map(|key| {
            let () = con.set(&key, &key).unwrap();
            (key.clone(), key)
        })
        .collect();
    wait_replicated(&cluster);
    std::thread::sleep(Duration::from_millis(600)); // a refresh sees node 3 online

    // Before: node 3, the replica, serves them.
    let before = all_get_calls(&cluster);
    get_all(&mut con, &keys);
    assert_eq!(ran_since(&cluster, &before), [0, 0, 0, 40, 0, 0]);

    // Node 0 dies and node 3 takes over: still node 3, now as the master
    // (there is no replica left).
    cluster.kill(0);
    let promoted = cluster.wait_failover(0, Duration::from_secs(30)).unwrap();
    assert_eq!(promoted, 3);
    let before = all_get_calls(&cluster);
    get_all(&mut con, &keys);
    assert_eq!(ran_since(&cluster, &before)[1..], [0, 0, 40, 0, 0]);

    // Node 0 comes back as node 3's replica: reads go to it again once
    // it has synced and the topology shows it.
    cluster.restart(0).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let before = all_get_calls(&cluster);
        get_all(&mut con, &keys);
        let ran = ran_since(&cluster, &before);
        if ran[0] == 40 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "reads never went to the restarted node 0 (last round: {ran:?})"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_loading_replica_is_skipped() {
    let cluster = cluster(3, 1);
    let proxy = Proxy::start(&cluster.seeds(), &["--read-from", "replica"]);
    let mut con = proxy.client();
    let keys: Vec<(String, String)> = (0..)
        .map(|i| format!("loading-read:{i}"))
        .filter(|key| {
            cluster
                .master_of_slot(Slot::for_key(key.as_bytes()).get())
                .unwrap()
                == 0
        })
        .take(20)
        .map(|key| {
            let () = con.set(&key, &key).unwrap();
            (key.clone(), key)
        })
        .collect();
    wait_replicated(&cluster);
    // The reads reach node 3 (node 0's replica) before it reloads: orthrus
    // has seen it in the topology (on a busy machine that can take a
    // refresh).
    orthrus_devcluster::wait_until(Duration::from_secs(20), "reads on the replica", || {
        let before = all_get_calls(&cluster);
        get_all(&mut con, &keys);
        let ran = ran_since(&cluster, &before);
        if ran[3] > 0 {
            Ok(())
        } else {
            Err(format!("{ran:?}"))
        }
    })
    .unwrap();
    // Enough data on node 3 that reloading it takes a while; it answers
    // -LOADING meanwhile.
    let replica = &cluster.nodes()[3];
    replica
        .connect_timeout(Duration::from_secs(60))
        .unwrap()
        .cmd_ok(&["DEBUG", "POPULATE", "1000000", "junk", "8"])
        .unwrap();
    let before = all_get_calls(&cluster);
    let fallbacks = proxy.info_field("orthrus_replica_read_fallbacks");
    let reload = {
        let mut conn = replica.connect_timeout(Duration::from_secs(60)).unwrap();
        std::thread::spawn(move || conn.cmd_ok(&["DEBUG", "RELOAD"]).map(|_| ()))
    };
    let mut rounds = 0;
    while !reload.is_finished() {
        get_all(&mut con, &keys);
        rounds += 1;
    }
    reload.join().unwrap().expect("DEBUG RELOAD");
    let ran = ran_since(&cluster, &before);
    let fallbacks = proxy.info_field("orthrus_replica_read_fallbacks") - fallbacks;
    assert!(
        fallbacks >= 1 && ran[0] >= 1,
        "{rounds} rounds of GETs; {fallbacks} sent on from the replica; GETs per node {ran:?}"
    );
}

#[test]
fn replica_reads_with_a_backend_password_in_resp2_and_resp3() {
    let spec = ClusterSpec::new(3, 1).with_node(NodeOptions::cluster().with_password("node-pw-4"));
    let cluster = Cluster::start(spec).unwrap();
    let proxy = replica_reader(&cluster, &[("ORTHRUS_BACKEND__PASSWORD", "node-pw-4")]);
    let mut con = proxy.client();
    let keys = set_keys(&mut con, "auth-read", 30);
    wait_replicated(&cluster);
    std::thread::sleep(Duration::from_millis(600));

    // RESP2: AUTH and READONLY in the replica connections' handshake.
    let before = all_get_calls(&cluster);
    get_all(&mut con, &keys);
    assert_eq!(split_by_role(&cluster, &before), (0, 30));

    // RESP3: HELLO 3 AUTH and READONLY.
    let mut v3 = proxy.stream();
    assert!(send(&mut v3, &["HELLO", "3"]).starts_with('%'));
    let before = all_get_calls(&cluster);
    for (key, value) in &keys {
        let reply = send(&mut v3, &["GET", key]);
        assert_eq!(reply, format!("${}\r\n{value}\r\n", value.len()));
    }
    assert_eq!(split_by_role(&cluster, &before), (0, 30));
}

#[test]
fn each_upstream_reads_where_its_read_from_says() {
    // The default upstream reads from masters (cluster.read_from), b from
    // its replicas (its own read_from); a client's READWRITE wins.
    let a = cluster(1, 1);
    let b = cluster(1, 1);
    let config = common::routes::config_file(
        "read-from",
        &format!(
            "[upstreams.b]\nseeds = [\"{}\"]\nread_from = \"replica\"\n\n[[routes]]\nprefix = \"b:\"\nupstream = \"b\"\n",
            b.seeds()[0]
        ),
    );
    let proxy = common::routes::start_routed(&a.seeds(), &["--config", config.0.to_str().unwrap()]);
    let mut con = proxy.client();
    let in_a = set_keys(&mut con, "a", 40);
    let in_b = set_keys(&mut con, "b", 40);
    wait_replicated(&a);
    wait_replicated(&b);

    assert_eq!(
        reads_by_role(&a, &mut con, &in_a),
        (40, 0),
        "default upstream"
    );
    let (on_master, on_replica) = reads_by_role(&b, &mut con, &in_b);
    assert!(
        on_replica >= 36 && on_master + on_replica == 40,
        "b: {on_replica} GETs on its replica, {on_master} on its master"
    );

    // READWRITE: this connection's reads go to the masters everywhere.
    let ok: String = redis::cmd("READWRITE").query(&mut con).unwrap();
    assert_eq!(ok, "OK");
    let after_readwrite = reads_by_role(&b, &mut con, &in_b);
    assert_eq!(after_readwrite, (40, 0), "b after READWRITE");
    // RESET: back to each upstream's read_from.
    let reset: String = redis::cmd("RESET").query(&mut con).unwrap();
    assert_eq!(reset, "RESET");
    let (_, on_replica) = reads_by_role(&b, &mut con, &in_b);
    assert!(
        on_replica >= 36,
        "b after RESET: {on_replica} on its replica"
    );

    let info: String = redis::cmd("INFO").arg("upstreams").query(&mut con).unwrap();
    assert!(
        info.contains("upstream_default:mode=cluster,read_from=master,")
            && info.contains("upstream_b:mode=cluster,read_from=replica,"),
        "{info}"
    );
}
