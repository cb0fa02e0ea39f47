//! `orthrus rebalance` against a real 3-master cluster through orthrus: a
//! skewed workload whose hot keys' slots all live on one master (hash
//! tags), two moves left half-done as interrupted runs leave them, then
//! `orthrus rebalance --apply --yes` while the workload goes on. Afterwards
//! orthrus's own per-slot load puts every master within 15 % of the mean,
//! the clients saw no error and read back what they wrote, and no key is
//! lost or left in a migrating slot.

mod common;

use std::collections::{BTreeMap, HashSet};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::Proxy;
use common::rebalance::{node_client, rebalance, tags_on};
use orthrus_cluster::Slot;
use orthrus_devcluster::Cluster;

/// Hot slots, all on the first master.
const HOT_SLOTS: usize = 6;
/// Keys spread over the whole cluster, one request in five.
const COLD_KEYS: usize = 300;
const THREADS: usize = 8;
/// The longest the workload runs, whatever happens.
const WORKLOAD_LIMIT: Duration = Duration::from_secs(120);

/// What the writer threads saw.
#[derive(Default)]
struct Outcome {
    requests: AtomicU64,
    errors: AtomicU64,
    wrong_reads: AtomicU64,
}

/// Each master's share (percent) of the requests/s orthrus measured over
/// the last 10 s, by the owner it reports for each slot.
fn shares(proxy: &Proxy) -> BTreeMap<String, f64> {
    let mut con = proxy.client();
    let reply: redis::Value = redis::cmd("ORTHRUS")
        .arg("HOTSLOTS")
        .arg("COUNT")
        .arg(16384)
        .query(&mut con)
        .expect("ORTHRUS HOTSLOTS");
    let redis::Value::Array(entries) = reply else {
        panic!("HOTSLOTS: {reply:?}");
    };
    let mut by_owner: BTreeMap<String, f64> = BTreeMap::new();
    for entry in entries {
        let redis::Value::Array(fields) = entry else {
            panic!("HOTSLOTS entry: {entry:?}");
        };
        let field = |name: &str| {
            let at = fields
                .iter()
                .position(|f| matches!(f, redis::Value::BulkString(b) if b == name.as_bytes()))
                .expect("field");
            fields[at + 1].clone()
        };
        let redis::Value::Int(rate) = field("requests-per-sec") else {
            panic!("rate");
        };
        let owner: String = redis::from_redis_value(field("owner")).expect("owner");
        *by_owner.entry(owner).or_default() += rate as f64;
    }
    let total: f64 = by_owner.values().sum();
    by_owner.values_mut().for_each(|v| *v = *v * 100.0 / total);
    by_owner
}

/// Writers through orthrus: each thread sets its own keys (four in five
/// on the hot slots) and reads each back at once, until `stop`.
fn workload(
    proxy: &Proxy,
    hot: &[String],
    stop: &Arc<AtomicBool>,
    outcome: &Arc<Outcome>,
) -> Vec<JoinHandle<HashSet<String>>> {
    (0..THREADS)
        .map(|t| {
            let url = proxy.url();
            let (hot, stop, outcome) = (hot.to_vec(), stop.clone(), outcome.clone());
            std::thread::spawn(move || {
                let mut con = redis::Client::open(url)
                    .and_then(|c| c.get_connection())
                    .expect("connect");
                let started = Instant::now();
                let mut keys = HashSet::new();
                let mut i = 0_usize;
                while !stop.load(Ordering::Relaxed) && started.elapsed() < WORKLOAD_LIMIT {
                    let key = if i % 5 == 4 {
                        format!("cold:{}", (i / 5 * THREADS + t) % COLD_KEYS)
                    } else {
                        format!("{}:t{t}", hot[i % hot.len()])
                    };
                    let value = format!("{t}-{i}");
                    let set: redis::RedisResult<()> =
                        redis::cmd("SET").arg(&key).arg(&value).query(&mut con);
                    let got: redis::RedisResult<String> =
                        redis::cmd("GET").arg(&key).query(&mut con);
                    outcome.requests.fetch_add(2, Ordering::Relaxed);
                    match (set, got) {
                        (Ok(()), Ok(v)) if v == value => {}
                        (Ok(()), Ok(_)) => {
                            // Cold keys are shared by threads; only a hot
                            // key (this thread's alone) must read back.
                            if !key.starts_with("cold:") {
                                outcome.wrong_reads.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        (set, got) => {
                            eprintln!("{key}: {set:?} {got:?}");
                            outcome.errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    keys.insert(key);
                    i += 1;
                }
                keys
            })
        })
        .collect()
}

/// Each master's CLUSTER NODES `myself` line, without its ping and pong
/// times (which change by themselves).
fn myself_lines(cluster: &Cluster, masters: &[usize]) -> Vec<String> {
    masters
        .iter()
        .map(|&m| {
            let mut con = node_client(cluster.nodes()[m].addr());
            let text: String = redis::cmd("CLUSTER")
                .arg("NODES")
                .query(&mut con)
                .expect("CLUSTER NODES");
            let line = text.lines().find(|l| l.contains("myself")).expect("myself");
            line.split(' ')
                .enumerate()
                .filter(|(i, _)| !matches!(i, 4 | 5))
                .map(|(_, f)| f)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

/// Sets `{prefix}:{i}` to `i` for `i` in `0..n`.
fn set_numbered(con: &mut redis::Connection, prefix: &str, n: i64) {
    for i in 0..n {
        let _: () = redis::cmd("SET")
            .arg(format!("{prefix}:{i}"))
            .arg(i)
            .query(con)
            .expect("SET");
    }
}

fn within(shares: &BTreeMap<String, f64>, pct: f64) -> bool {
    let mean = 100.0 / 3.0;
    shares.len() == 3
        && shares
            .values()
            .all(|s| (s - mean).abs() <= mean * pct / 100.0)
}

#[test]
fn rebalance_by_load_evens_out_a_skewed_cluster_online() {
    let cluster = common::cluster(3, 0);
    let proxy = Proxy::start(&cluster.seeds(), &[]);
    let masters = cluster.masters().expect("masters");
    let hot = tags_on(&cluster, masters[0], HOT_SLOTS);

    // Nothing measured yet: a clear refusal.
    let out = rebalance(&proxy, &[]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("too few to plan from"),
        "{out:?}"
    );

    // A slot left half-moved, as a run killed during its MIGRATE leaves it.
    let half = (0..)
        .map(|i| format!("{{half{i}}}"))
        .find(|t| common::owner_of(&cluster, t.as_bytes()) == masters[1])
        .expect("tag");
    let half_slot = Slot::for_key(half.as_bytes()).get();
    let mut con = proxy.client();
    set_numbered(&mut con, &half, 10);
    cluster
        .begin_migration(half_slot, masters[1], masters[2])
        .expect("begin migration");
    cluster
        .migrate_keys(half_slot, masters[1], masters[2], 4)
        .expect("migrate some keys");

    // And one killed after the destination took its slot, before the
    // source and the others were told.
    let late = (0..)
        .map(|i| format!("{{late{i}}}"))
        .find(|t| common::owner_of(&cluster, t.as_bytes()) == masters[2])
        .expect("tag");
    let late_slot = Slot::for_key(late.as_bytes()).get();
    set_numbered(&mut con, &late, 10);
    cluster
        .begin_migration(late_slot, masters[2], masters[1])
        .expect("begin migration");
    while cluster
        .migrate_keys(late_slot, masters[2], masters[1], 3)
        .expect("migrate keys")
        > 0
    {}
    let _: () = redis::cmd("CLUSTER")
        .arg("SETSLOT")
        .arg(late_slot)
        .arg("NODE")
        .arg(cluster.node_id(masters[1]).expect("id"))
        .query(&mut node_client(cluster.nodes()[masters[1]].addr()))
        .expect("SETSLOT NODE on the destination");

    let stop = Arc::new(AtomicBool::new(false));
    let outcome = Arc::new(Outcome::default());
    let threads = workload(&proxy, &hot, &stop, &outcome);
    std::thread::sleep(Duration::from_secs(4));
    let before = shares(&proxy);
    eprintln!("shares before: {before:?}");
    assert!(
        before.values().any(|&s| s > 60.0),
        "the workload is not skewed: {before:?}"
    );

    // The plan alone changes nothing.
    let layout = myself_lines(&cluster, &masters);
    let out = rebalance(&proxy, &[]);
    assert!(out.status.success());
    let plan = String::from_utf8_lossy(&out.stdout);
    assert!(plan.contains("half-moved"), "{plan}");
    assert!(plan.contains("moves:"), "{plan}");
    assert_eq!(myself_lines(&cluster, &masters), layout);
    // Its report read by a reader that left (`| head -1`): no panic, the
    // same end.
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_orthrus"));
    cmd.arg("rebalance")
        .arg("--proxy")
        .arg(proxy.addr.to_string())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().expect("orthrus rebalance");
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("orthrus rebalance");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && !said.contains("panicked"),
        "{:?}: {said}",
        out.status
    );
    assert_eq!(myself_lines(&cluster, &masters), layout);

    let out = rebalance(&proxy, &["--apply", "--yes"]);
    assert!(out.status.success());
    // By the cluster's own atomic migration where every master offers it.
    let method = match orthrus_devcluster::server_kind().engine {
        orthrus_devcluster::Engine::Valkey => "moved by atomic slot migration",
        _ => "moved by legacy migration",
    };
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(method), "{text}");

    // The writers go on for a whole window of orthrus's per-slot load
    // (10 s), so that what it measures now is traffic after the moves.
    std::thread::sleep(Duration::from_secs(11));
    let after = shares(&proxy);
    stop.store(true, Ordering::Relaxed);
    let mut keys: HashSet<String> = HashSet::new();
    for t in threads {
        keys.extend(t.join().expect("writer"));
    }
    eprintln!(
        "shares after: {after:?}; {} requests",
        outcome.requests.load(Ordering::Relaxed)
    );
    assert!(
        within(&after, 15.0),
        "not within 15 % of the mean: {after:?}"
    );
    assert_eq!(outcome.errors.load(Ordering::Relaxed), 0);
    assert_eq!(outcome.wrong_reads.load(Ordering::Relaxed), 0);

    // On the nodes: every key there, none in a migrating slot, the
    // half-moved slot finished on its destination.
    let lines = myself_lines(&cluster, &masters);
    assert!(lines.iter().all(|l| !l.contains('[')), "{lines:?}");
    assert_eq!(
        cluster.master_of_slot(half_slot).expect("owner"),
        masters[2]
    );
    let on_nodes: i64 = masters
        .iter()
        .map(|&m| {
            let n: i64 = redis::cmd("DBSIZE")
                .query(&mut node_client(cluster.nodes()[m].addr()))
                .expect("DBSIZE");
            n
        })
        .sum();
    assert_eq!(on_nodes, keys.len() as i64 + 20);
    let parked = (0..10).flat_map(|i| [(i, format!("{half}:{i}")), (i, format!("{late}:{i}"))]);
    for (i, key) in parked {
        let v: i64 = redis::cmd("GET").arg(&key).query(&mut con).expect("GET");
        assert_eq!(v, i);
    }
}

/// Keys written in each hot slot of the interrupted run: enough MIGRATE
/// batches for the run to be caught in the middle of one slot.
const KEYS_PER_SLOT: usize = 20_000;

#[test]
fn a_run_killed_during_a_migration_is_finished_by_the_next() {
    let cluster = common::cluster(3, 0);
    let proxy = Proxy::start(&cluster.seeds(), &[]);
    let masters = cluster.masters().expect("masters");
    let tags = tags_on(&cluster, masters[0], 2);
    let mut node = node_client(cluster.nodes()[masters[0]].addr());
    for tag in &tags {
        for chunk in 0..KEYS_PER_SLOT / 1000 {
            let mut pipe = redis::pipe();
            for i in chunk * 1000..(chunk + 1) * 1000 {
                pipe.cmd("SET").arg(format!("{tag}:{i}")).arg(i).ignore();
            }
            pipe.query::<()>(&mut node).expect("write keys");
        }
    }

    // Reads of the two hot slots (and a few elsewhere) through orthrus,
    // from before the first run to after the second.
    let stop = Arc::new(AtomicBool::new(false));
    let errors = Arc::new(AtomicU64::new(0));
    let reader = {
        let (url, tags, stop, errors) = (proxy.url(), tags.clone(), stop.clone(), errors.clone());
        std::thread::spawn(move || {
            let mut con = redis::Client::open(url)
                .and_then(|c| c.get_connection())
                .expect("connect");
            let started = Instant::now();
            let mut i = 0_usize;
            while !stop.load(Ordering::Relaxed) && started.elapsed() < WORKLOAD_LIMIT {
                let key = if i % 10 == 9 {
                    format!("cold:{i}")
                } else {
                    format!("{}:{}", tags[i % 2], i % KEYS_PER_SLOT)
                };
                let got: redis::RedisResult<Option<usize>> =
                    redis::cmd("GET").arg(&key).query(&mut con);
                match got {
                    Ok(Some(v)) if key.starts_with('{') && v != i % KEYS_PER_SLOT => {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(_) => {}
                    Err(e) => {
                        eprintln!("{key}: {e}");
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
                i += 1;
            }
        })
    };
    std::thread::sleep(Duration::from_secs(3));

    // The first run, killed as soon as a slot is migrating.
    let mut first = Command::new(env!("CARGO_BIN_EXE_orthrus"))
        .args([
            "rebalance",
            "--proxy",
            &proxy.addr.to_string(),
            "--apply",
            "--yes",
            // The MIGRATING state this test catches is the legacy way's
            // (Valkey would otherwise move atomically, leaving none).
            "--method",
            "legacy",
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("start orthrus rebalance");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if myself_lines(&cluster, &masters)
            .iter()
            .any(|l| l.contains("->-"))
        {
            break;
        }
        assert!(
            first.try_wait().expect("wait").is_none(),
            "the run ended before a slot was seen migrating"
        );
        assert!(Instant::now() < deadline, "no slot ever migrating");
        std::thread::sleep(Duration::from_millis(2));
    }
    first.kill().expect("kill the first run");
    first.wait().expect("reap the first run");
    let left = myself_lines(&cluster, &masters);
    assert!(left.iter().any(|l| l.contains("->-")), "{left:?}");

    let out = rebalance(&proxy, &["--apply", "--yes"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("is half-moved"), "{text}");
    assert!(text.contains("finished"), "{text}");

    stop.store(true, Ordering::Relaxed);
    reader.join().expect("reader");
    assert_eq!(errors.load(Ordering::Relaxed), 0);
    let lines = myself_lines(&cluster, &masters);
    assert!(lines.iter().all(|l| !l.contains('[')), "{lines:?}");
    let moved = tags
        .iter()
        .filter(|t| common::owner_of(&cluster, t.as_bytes()) != masters[0])
        .count();
    assert!(moved >= 1, "no hot slot left its master");
    let mut con = proxy.client();
    for tag in &tags {
        for chunk in 0..KEYS_PER_SLOT / 1000 {
            let keys: Vec<String> = (chunk * 1000..(chunk + 1) * 1000)
                .map(|i| format!("{tag}:{i}"))
                .collect();
            let values: Vec<Option<usize>> =
                redis::cmd("MGET").arg(&keys).query(&mut con).expect("MGET");
            let want: Vec<Option<usize>> = (chunk * 1000..(chunk + 1) * 1000).map(Some).collect();
            assert_eq!(values, want, "{tag} keys lost or changed");
        }
    }
}

#[test]
fn an_unstable_cluster_is_refused_naming_what_is_wrong() {
    let mut cluster = common::cluster(3, 0);
    let proxy = Proxy::start(&cluster.seeds(), &[]);
    let masters = cluster.masters().expect("masters");
    let dead = cluster.nodes()[masters[2]].addr().to_string();
    let layout = myself_lines(&cluster, &masters[..2]);

    let out = rebalance(&proxy, &["--require-replicas"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(err.contains("without a usable replica"), "{err}");
    assert!(err.contains(&dead), "{err}");

    cluster.kill(masters[2]);

    // At once: a node that cannot be reached, named.
    let out = rebalance(&proxy, &["--apply", "--yes"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(err.contains(&dead), "{err}");

    // Once the others flag it failed: the cluster is not stable, and why.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = rebalance(&proxy, &["--apply", "--yes"]);
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        if err.contains("not stable") {
            assert!(err.contains(&format!("{dead} (master failed)")), "{err}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never refused as unstable: {err}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_eq!(myself_lines(&cluster, &masters[..2]), layout);
}

#[test]
fn passwords_reach_orthrus_and_the_nodes_and_migrate_passes_them_on() {
    const NODE_PW: &str = "node-secret-4";
    const CLIENT_PW: &str = "client-secret-8";
    let spec = orthrus_devcluster::ClusterSpec::new(3, 0)
        .with_node(orthrus_devcluster::NodeOptions::cluster().with_password(NODE_PW));
    let cluster = Cluster::start(spec).expect("start cluster");
    let proxy = Proxy::spawn(
        &cluster.seeds(),
        &["--requirepass", CLIENT_PW, "--backend-password", NODE_PW],
        &[],
    );
    let url = format!("redis://:{CLIENT_PW}@{}/", proxy.addr);
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut con = loop {
        let con = redis::Client::open(url.as_str()).and_then(|c| c.get_connection());
        if let Ok(mut con) = con {
            if redis::cmd("SET")
                .arg("ready")
                .arg(1)
                .query::<()>(&mut con)
                .is_ok()
            {
                break con;
            }
        }
        assert!(Instant::now() < deadline, "orthrus never served");
        std::thread::sleep(Duration::from_millis(50));
    };
    let masters = cluster.masters().expect("masters");
    let hot = tags_on(&cluster, masters[0], 2);
    for tag in &hot {
        set_numbered(&mut con, tag, 50);
    }
    for i in 0..3000 {
        let _: Option<i64> = redis::cmd("GET")
            .arg(format!("{}:{}", hot[i % 2], i % 50))
            .query(&mut con)
            .expect("GET");
    }

    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("orthrus.toml");
    let seed = cluster.seeds()[0];
    std::fs::write(
        &file,
        format!("seeds = [\"{seed}\"]\n[backend]\npassword = \"{NODE_PW}\"\n"),
    )
    .expect("write config");
    let config = file.to_string_lossy().into_owned();

    let out = rebalance(&proxy, &["--apply", "--yes", "--config", &config]);
    assert!(!out.status.success(), "no client password given");
    let out = rebalance(
        &proxy,
        &[
            "--apply",
            "--yes",
            "--password",
            CLIENT_PW,
            "--config",
            &config,
        ],
    );
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("done: 1 slots, 50 keys moved"));
    let moved = hot
        .iter()
        .find(|t| common::owner_of(&cluster, t.as_bytes()) != masters[0])
        .expect("a hot slot moved");
    for i in 0..50 {
        let v: i64 = redis::cmd("GET")
            .arg(format!("{moved}:{i}"))
            .query(&mut con)
            .expect("GET");
        assert_eq!(v, i);
    }
}
