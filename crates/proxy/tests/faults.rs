//! Faults and topology changes with real nodes: a slot migrating under
//! load, a master killed and restarted, seeds that are down at start-up.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{Proxy, cluster};
use orthrus_cluster::Slot;
use orthrus_devcluster::{Cluster, ClusterSpec, NodeOptions};
use redis::Commands;

#[test]
fn live_slot_migration_under_load_loses_nothing() {
    let cluster = cluster(3, 0);
    let proxy = Proxy::start(&cluster.seeds(), &["--threads", "2"]);
    let slot = Slot::for_key(b"mig").get();
    let from = cluster.master_of_slot(slot).unwrap();
    let masters = cluster.masters().unwrap();
    let to = *masters.iter().find(|&&m| m != from).unwrap();

    // Keys already in the slot, so that MIGRATE has something to move.
    let mut con = proxy.client();
    for i in 0..300 {
        let _: () = con.set(format!("{{mig}}:pre:{i}"), i).unwrap();
    }

    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..20)
        .map(|t| {
            let url = proxy.url();
            let stop = stop.clone();
            std::thread::spawn(move || -> Result<Vec<String>, String> {
                let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
                let mut acked = Vec::new();
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) && i < 100_000 {
                    let key = format!("{{mig}}:{t}:{i}");
                    con.set::<_, _, ()>(&key, i)
                        .map_err(|e| format!("SET {key}: {e}"))?;
                    acked.push(key.clone());
                    let got: u64 = con.get(&key).map_err(|e| format!("GET {key}: {e}"))?;
                    if got != i {
                        return Err(format!("GET {key} = {got}, wanted {i}"));
                    }
                    let pre = format!("{{mig}}:pre:{}", i % 300);
                    let _: u64 = con.get(&pre).map_err(|e| format!("GET {pre}: {e}"))?;
                    i += 1;
                }
                Ok(acked)
            })
        })
        .collect();

    std::thread::sleep(Duration::from_millis(300));
    cluster.begin_migration(slot, from, to).unwrap();
    // Move the keys in small batches, with load running in between.
    let deadline = Instant::now() + Duration::from_secs(60);
    while cluster.migrate_keys(slot, from, to, 10).unwrap() > 0 {
        assert!(Instant::now() < deadline, "migration did not finish");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(200));
    cluster.finish_migration(slot, to).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);

    let mut acked = Vec::new();
    for c in clients {
        match c.join().expect("client thread") {
            Ok(keys) => acked.extend(keys),
            Err(e) => panic!("a client saw an error during the migration: {e}"),
        }
    }
    assert!(acked.len() > 1_000, "too little load: {}", acked.len());
    // Every acknowledged write is readable, through orthrus and on the new owner.
    let mut direct = cluster.nodes()[to].connect().unwrap();
    for key in &acked {
        let via_proxy: Option<String> = con.get(key).unwrap();
        assert!(via_proxy.is_some(), "{key} lost");
        assert!(
            direct.cmd_ok(&["EXISTS", key.as_str()]).unwrap().as_int() == Some(1),
            "{key} not on the new owner"
        );
    }
    assert_eq!(cluster.master_of_slot(slot).unwrap(), to);
    let (ask, moved) = (
        proxy.info_field("orthrus_redirects_ask"),
        proxy.info_field("orthrus_redirects_moved"),
    );
    assert!(ask > 0, "ASK was never exercised");
    assert!(moved > 0, "MOVED was never exercised");
}

#[test]
fn killed_master_fails_only_its_slots_and_recovers() {
    let spec = ClusterSpec::new(3, 0)
        .with_node(NodeOptions::cluster().with_config("cluster-require-full-coverage", "no"));
    let mut cluster = Cluster::start(spec).unwrap();
    let proxy = Proxy::spawn(
        &cluster.seeds(),
        &[],
        &[("ORTHRUS_BACKEND__REQUEST_TIMEOUT_MS", "1500")],
    );
    proxy.wait_ready(Duration::from_secs(20));
    let victim = cluster.masters().unwrap()[0];
    let mut victim_keys = Vec::new();
    let mut other_keys = Vec::new();
    for i in 0..3000 {
        let key = format!("k{i}");
        if cluster
            .master_of_slot(Slot::for_key(key.as_bytes()).get())
            .unwrap()
            == victim
        {
            victim_keys.push(key);
        } else {
            other_keys.push(key);
        }
    }
    let mut con = proxy.client();
    for k in victim_keys.iter().chain(&other_keys) {
        let _: () = con.set(k, "v").unwrap();
    }

    cluster.kill(victim);
    let until = Instant::now() + Duration::from_secs(4);
    let mut checked = 0;
    while Instant::now() < until {
        let key = &victim_keys[checked % victim_keys.len()];
        let started = Instant::now();
        let r: redis::RedisResult<Option<String>> = con.get(key);
        assert!(
            r.is_err(),
            "a read of the dead master's slot must fail: {r:?}"
        );
        assert!(
            started.elapsed() < Duration::from_millis(3000),
            "error took {:?}",
            started.elapsed()
        );
        for k in other_keys
            .iter()
            .skip(checked * 7 % other_keys.len())
            .take(20)
        {
            let v: String = con
                .get(k)
                .unwrap_or_else(|e| panic!("{k} on a live master failed: {e}"));
            assert_eq!(v, "v");
        }
        checked += 1;
    }

    cluster.restart(victim).unwrap();
    cluster.wait_ok(Duration::from_secs(30)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let ok = victim_keys
            .iter()
            .take(50)
            .all(|k| con.set::<_, _, ()>(k, "again").is_ok());
        if ok {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "orthrus did not recover after the node came back"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let v: String = con.get(&victim_keys[0]).unwrap();
    assert_eq!(v, "again");
}

#[test]
fn starts_with_seeds_down() {
    let mut cluster = cluster(3, 0);
    let seeds = cluster.seeds();
    let dead = format!("127.0.0.1:{}", orthrus_devcluster::free_port().unwrap())
        .parse()
        .unwrap();

    // First seed down: orthrus serves through the second.
    {
        let proxy = Proxy::start(&[dead, seeds[1]], &[]);
        let mut con = proxy.client();
        let _: () = con.set("seed-test", "1").unwrap();
    }

    // Every node down: orthrus listens and says why, then serves on its own.
    for i in 0..cluster.nodes().len() {
        cluster.kill(i);
    }
    let mut proxy = Proxy::spawn(&seeds, &[], &[]);
    let reply = proxy.raw_command(&["GET", "seed-test"]).unwrap();
    let text = String::from_utf8_lossy(&reply);
    assert!(text.starts_with("-CLUSTERDOWN"), "{text}");
    assert_eq!(proxy.raw_command(&["PING"]).unwrap(), b"+PONG\r\n");
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        proxy.is_running(),
        "orthrus must not exit while the cluster is down"
    );

    for i in 0..cluster.nodes().len() {
        cluster.restart(i).unwrap();
    }
    cluster.wait_ok(Duration::from_secs(30)).unwrap();
    proxy.wait_ready(Duration::from_secs(20));
    // The data did not persist (no persistence), but the cluster answers.
    let mut con = proxy.client();
    let _: () = con.set("seed-test", "2").unwrap();
    let v: String = con.get("seed-test").unwrap();
    assert_eq!(v, "2");
}
