//! How many connections orthrus opens to one node: enough by default for
//! hundreds of blocked clients beside the rest, and never more than
//! `backend.max_connections_per_node`, so that clients opening many
//! (tracking, pattern and shard subscriptions) hear orthrus's own error
//! instead of making the node refuse other clients' connections. And
//! under a low open files limit: room kept for each client's node
//! connections and for the topology refresher, and a client that finds no
//! descriptor told so.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{Proxy, encode, owner_of, reply_text, send};
use orthrus_devcluster::Value;
use orthrus_devcluster::{Cluster, ClusterSpec, NodeOptions};

/// What a node says when it refuses a connection at `maxclients`.
const NODE_FULL: &str = "max number of clients";

#[test]
fn two_hundred_blocked_clients_leave_room_for_watch_and_blpop() {
    let cluster = common::cluster(3, 0);
    let proxy = Proxy::start(&cluster.seeds(), &["--threads", "1"]);
    proxy.wait_ready(Duration::from_secs(20));
    let mut blocked: Vec<TcpStream> = (0..200).map(|_| proxy.stream()).collect();
    for s in &mut blocked {
        s.write_all(&encode(&["BLPOP", "q", "0"])).unwrap();
    }
    // Every BLPOP reached the node before the others ask.
    std::thread::sleep(Duration::from_millis(500));
    let mut other = proxy.stream();
    assert_eq!(send(&mut other, &["WATCH", "w"]), "+OK\r\n");
    assert_eq!(send(&mut other, &["MULTI"]), "+OK\r\n");
    assert_eq!(send(&mut other, &["SET", "w", "1"]), "+QUEUED\r\n");
    assert_eq!(send(&mut other, &["EXEC"]), "*1\r\n+OK\r\n");
    assert_eq!(send(&mut other, &["RPUSH", "q2", "x"]), ":1\r\n");
    assert_eq!(
        send(&mut other, &["BLPOP", "q2", "1"]),
        "*2\r\n$2\r\nq2\r\n$1\r\nx\r\n"
    );
    // Same node as `q`: the BLPOP waits its second and times out.
    let same = slot_sibling(&cluster, "q");
    assert_eq!(send(&mut other, &["BLPOP", &same, "1"]), "*-1\r\n");
    let values: Vec<String> = (0..200).map(|i| i.to_string()).collect();
    let mut push = vec!["RPUSH", "q"];
    push.extend(values.iter().map(String::as_str));
    assert_eq!(send(&mut other, &push), ":200\r\n");
    for s in &mut blocked {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        assert!(reply_text(s).starts_with("*2\r\n$1\r\nq\r\n"));
    }
}

/// 520 clients in `BLPOP q 0` on one worker: more than the 512 dedicated
/// connections it may keep to q's node (the default), so they fill the
/// share blocking commands may take and some wait for a turn. Another
/// client's WATCH/MULTI/EXEC on that node is not kept waiting behind them
/// (answered within 100 ms), and its `BLPOP v 1` waits for a connection
/// but gets its nil at about its own timeout (within 1,200 ms), as from
/// Redis; the waiting clients get theirs as others finish.
#[test]
fn blocked_clients_past_the_bound_leave_watch_its_reserve_and_blpop_its_timeout() {
    const BLOCKED: usize = 520;
    let cluster = common::cluster(3, 0);
    let proxy = Proxy::start(&cluster.seeds(), &["--threads", "1"]);
    proxy.wait_ready(Duration::from_secs(20));
    let q_node = owner_of(&cluster, b"q");
    let mut blocked: Vec<TcpStream> = (0..BLOCKED).map(|_| proxy.stream()).collect();
    for s in &mut blocked {
        s.write_all(&encode(&["BLPOP", "q", "0"])).unwrap();
    }
    // Every connection blocking commands may take is blocked on the node.
    let mut node = cluster.nodes()[q_node].connect().expect("node");
    let started = Instant::now();
    let filled = loop {
        let info = match node.cmd(&["INFO", "clients"]).expect("INFO") {
            Value::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
            other => panic!("INFO: {other:?}"),
        };
        let n: usize = info
            .lines()
            .find_map(|l| l.strip_prefix("blocked_clients:"))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0);
        if n >= 448 || started.elapsed() > Duration::from_secs(10) {
            break n;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(filled >= 448, "only {filled} clients blocked on the node");
    std::thread::sleep(Duration::from_millis(200));
    // orthrus counts as blocked what the node does: the clients whose
    // command reached it, not those still waiting for a connection.
    assert_eq!(proxy.info_field("blocked_clients"), filled as i64);

    let mut other = proxy.stream();
    other
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let w = slot_sibling(&cluster, "q");
    let timed = |s: &mut TcpStream, args: &[&str]| {
        let at = Instant::now();
        let reply = send(s, args);
        (reply, at.elapsed())
    };
    let mut transaction = Duration::ZERO;
    for (args, want) in [
        (vec!["WATCH", w.as_str()], "+OK\r\n"),
        (vec!["MULTI"], "+OK\r\n"),
        (vec!["SET", w.as_str(), "1"], "+QUEUED\r\n"),
        (vec!["EXEC"], "*1\r\n+OK\r\n"),
    ] {
        let (reply, took) = timed(&mut other, &args);
        assert_eq!(reply, want, "{args:?}");
        assert!(took < Duration::from_millis(100), "{args:?} took {took:?}");
        transaction += took;
    }
    let v = slot_sibling(&cluster, &w);
    let (reply, took) = timed(&mut other, &["BLPOP", &v, "1"]);
    assert_eq!(reply, "*-1\r\n", "after {took:?}");
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_millis(1200),
        "BLPOP v 1 answered after {took:?}"
    );
    eprintln!("WATCH/MULTI/SET/EXEC {transaction:?}, BLPOP v 1 {took:?}, {filled} blocked");

    // The waiting clients get a connection in turn as the others finish.
    let values: Vec<String> = (0..BLOCKED).map(|i| i.to_string()).collect();
    let mut push = vec!["RPUSH", "q"];
    push.extend(values.iter().map(String::as_str));
    assert_eq!(send(&mut other, &push), format!(":{BLOCKED}\r\n"));
    let mut served = 0;
    for s in &mut blocked {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        if reply_text(s).starts_with("*2\r\n$1\r\nq\r\n") {
            served += 1;
        }
    }
    assert!(served >= filled, "{served} of {BLOCKED} served");
}

/// Under `ulimit -n 200`, 110 clients in `BLPOP q 0` (each needs a node
/// connection of its own) and then one more client: that one is answered
/// within 1 s, served or told `-ERR max number of clients reached`, never
/// left hanging; no topology refresh fails for lack of descriptors, and a
/// keyed command still routes once a blocked client leaves.
#[test]
fn under_a_low_open_files_limit_blocked_clients_leave_room_to_answer_and_refresh() {
    const REFUSED: &str = "-ERR max number of clients reached\r\n";
    let cluster = common::cluster(3, 0);
    let proxy = Proxy::spawn_under(
        &["prlimit", "--nofile=200:200", "--"],
        &cluster.seeds(),
        &["--threads", "1"],
        &[("ORTHRUS_CLUSTER__REFRESH_INTERVAL_MS", "100")],
    );
    proxy.wait_ready(Duration::from_secs(20));
    let mut clients: Vec<TcpStream> = Vec::new();
    for _ in 0..110 {
        let mut s = proxy.stream();
        // A refused client may be closed before its command arrives.
        let _ = s.write_all(&encode(&["BLPOP", "q", "0"]));
        clients.push(s);
    }
    // Every BLPOP reached its node (or was refused) before the next asks.
    std::thread::sleep(Duration::from_millis(1000));
    let mut blocked = Vec::new();
    let mut refused = 0;
    for mut s in clients {
        s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        match common::read_reply(&mut s) {
            Ok(reply) => {
                let reply = String::from_utf8_lossy(&reply).into_owned();
                assert_eq!(reply, REFUSED, "a client in BLPOP q 0 was answered");
                refused += 1;
            }
            Err(_) => blocked.push(s),
        }
    }
    let started = Instant::now();
    let mut new = TcpStream::connect(proxy.addr).expect("connect");
    new.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    let _ = new.write_all(&encode(&["PING"]));
    let answer = common::read_reply(&mut new).map(|r| String::from_utf8_lossy(&r).into_owned());
    let took = started.elapsed();
    eprintln!(
        "ulimit -n 200: {} clients blocked, {refused} refused; the new client: {answer:?} after {took:?}",
        blocked.len()
    );
    let answer =
        answer.unwrap_or_else(|e| panic!("no answer in {took:?}: {e}\n{}", proxy.log_text()));
    assert!(answer == "+PONG\r\n" || answer == REFUSED, "{answer}");
    assert!(took <= Duration::from_secs(1), "answered after {took:?}");
    // Refreshes ran meanwhile (every 100 ms), and none failed.
    std::thread::sleep(Duration::from_millis(500));
    let log = proxy.log_text();
    assert!(!log.contains("topology refresh failed"), "{log}");
    assert!(!log.contains("Too many open files"), "{log}");
    // One blocked client leaves; a keyed command routes.
    drop(blocked.pop());
    std::thread::sleep(Duration::from_millis(200));
    let mut after = proxy.stream();
    assert_eq!(send(&mut after, &["SET", "after", "1"]), "+OK\r\n");
    assert_eq!(send(&mut after, &["GET", "after"]), "$1\r\n1\r\n");
}

/// Should orthrus run out of descriptors all the same (here its limit is
/// lowered under it while it runs: `prlimit --pid`), a new client is told
/// `-ERR max number of clients reached` at once rather than left waiting
/// in the kernel's queue; once descriptors are back, clients are served.
#[test]
fn out_of_descriptors_a_new_client_is_told_so_not_left_waiting() {
    let cluster = common::cluster(3, 0);
    let proxy = Proxy::start(&cluster.seeds(), &["--threads", "1"]);
    let pid = proxy.pid().to_string();
    let mut idle = proxy.stream();
    assert_eq!(send(&mut idle, &["SET", "k", "1"]), "+OK\r\n");
    // A new descriptor takes the lowest free number, which must be under
    // the limit: at the lowest free number, none is left.
    let open: std::collections::HashSet<usize> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("fd dir")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    let lowest_free = (0..).find(|n| !open.contains(n)).expect("a free number");
    let limit = |n: usize| {
        let status = std::process::Command::new("prlimit")
            .args(["--pid", &pid, &format!("--nofile={n}:")])
            .status()
            .expect("prlimit");
        assert!(status.success());
    };
    limit(lowest_free);
    let started = Instant::now();
    let mut new = TcpStream::connect(proxy.addr).expect("connect");
    new.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let _ = new.write_all(&encode(&["PING"]));
    let reply = common::read_reply(&mut new).map(|r| String::from_utf8_lossy(&r).into_owned());
    let took = started.elapsed();
    limit(4096);
    if reply.is_err() {
        eprintln!("{}", proxy.log_text());
    }
    eprintln!("out of descriptors: the new client got {reply:?} after {took:?}");
    assert_eq!(
        reply.expect("an answer, not a wait"),
        "-ERR max number of clients reached\r\n"
    );
    assert!(took <= Duration::from_secs(1), "answered after {took:?}");
    let mut after = proxy.stream();
    assert_eq!(send(&mut after, &["GET", "k"]), "$1\r\n1\r\n");
}

/// Another key on the master of `key`.
fn slot_sibling(cluster: &Cluster, key: &str) -> String {
    let owner = owner_of(cluster, key.as_bytes());
    (0..)
        .map(|i| format!("sib{i}"))
        .find(|k| k != key && owner_of(cluster, k.as_bytes()) == owner)
        .unwrap()
}

/// One channel name per master, each on a different master.
fn channel_per_master(cluster: &Cluster) -> Vec<String> {
    let masters = cluster.masters().expect("masters");
    masters
        .iter()
        .map(|&m| {
            (0..)
                .map(|i| format!("ch{i}"))
                .find(|c| owner_of(cluster, c.as_bytes()) == m)
                .unwrap()
        })
        .collect()
}

/// A client that opens many node connections: tracking in BCAST mode, a
/// pattern subscription and a shard subscription on every master. Returns
/// every reply and push it got within a moment.
fn greedy(proxy: &Proxy, channels: &[String]) -> (TcpStream, String) {
    let mut s = proxy.stream();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut heard = String::new();
    heard += &send(&mut s, &["HELLO", "3"]);
    heard += &send(&mut s, &["CLIENT", "TRACKING", "ON", "BCAST"]);
    heard += &send(&mut s, &["PSUBSCRIBE", "*"]);
    for c in channels {
        heard += &send(&mut s, &["SSUBSCRIBE", c]);
    }
    heard += &send(&mut s, &["GET", "k"]);
    (s, heard)
}

/// orthrus's connections to each master, as the nodes count them (CLIENT
/// LIST, less the one asking) and as orthrus's INFO does; waits until both
/// agree (a topology refresh's short-lived connection may be passing).
fn node_connections(cluster: &Cluster, proxy: &Proxy) -> usize {
    let masters = cluster.masters().expect("masters");
    let mut last = (0, 0);
    for _ in 0..50 {
        let listed: usize = masters
            .iter()
            .map(|&m| {
                let mut node = cluster.nodes()[m].connect().expect("node");
                match node.cmd(&["CLIENT", "LIST"]).expect("CLIENT LIST") {
                    Value::Bulk(b) => String::from_utf8_lossy(&b).lines().count() - 1,
                    other => panic!("CLIENT LIST: {other:?}"),
                }
            })
            .sum();
        let info = send(&mut proxy.stream(), &["INFO", "cluster"]);
        let counted: usize = info
            .lines()
            .filter_map(|l| l.split_once(",connections="))
            .map(|(_, n)| n.trim().parse::<usize>().expect("a count"))
            .sum();
        if listed == counted {
            return listed;
        }
        last = (listed, counted);
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("CLIENT LIST and INFO disagree: {last:?}");
}

/// One client tracking keys in BCAST mode, subscribed to the pattern `*`
/// (which may match every master's keyspace notifications) and to a shard
/// channel on each of three masters holds at most 4 node connections in
/// all, over RESP2 and RESP3 alike: one per master carries all of it. The
/// tracking is on (every master has a tracking connection) and every kind
/// of message reaches the client.
#[test]
fn a_client_tracking_and_subscribed_everywhere_holds_one_connection_per_master() {
    let cluster = common::cluster(3, 0);
    let proxy = Proxy::start(&cluster.seeds(), &["--threads", "1"]);
    proxy.wait_ready(Duration::from_secs(20));
    let masters = cluster.masters().expect("masters");
    let channels = channel_per_master(&cluster);
    for hello in [None, Some("3")] {
        // Every master's shared connections of the protocol are open.
        let mut warm = proxy.stream();
        if let Some(v) = hello {
            assert!(send(&mut warm, &["HELLO", v]).starts_with('%'));
        }
        for c in &channels {
            send(&mut warm, &["GET", c]);
        }
        let before = node_connections(&cluster, &proxy);
        let mut s = proxy.stream();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        if let Some(v) = hello {
            assert!(send(&mut s, &["HELLO", v]).starts_with('%'));
        }
        let resp3 = hello.is_some();
        assert_eq!(
            send(&mut s, &["CLIENT", "TRACKING", "ON", "BCAST"]),
            "+OK\r\n"
        );
        let head = if resp3 { ">3\r\n" } else { "*3\r\n" };
        assert_eq!(
            send(&mut s, &["PSUBSCRIBE", "*"]),
            format!("{head}$10\r\npsubscribe\r\n$1\r\n*\r\n:1\r\n")
        );
        for (i, c) in channels.iter().enumerate() {
            let reply = send(&mut s, &["SSUBSCRIBE", c]);
            assert_eq!(
                reply,
                format!(
                    "{head}$10\r\nssubscribe\r\n${}\r\n{c}\r\n:{}\r\n",
                    c.len(),
                    i + 1
                )
            );
        }
        let held = node_connections(&cluster, &proxy) - before;
        eprintln!("RESP{}: {held} node connections", if resp3 { 3 } else { 2 });
        assert!(held <= 4, "the client holds {held} node connections");
        for &m in &masters {
            assert!(
                common::tracking_conns(&cluster, m) >= 1,
                "no tracking on {m}"
            );
        }
        // Messages of each kind arrive.
        let mut other = proxy.stream();
        send(&mut other, &["PUBLISH", "news", "hi"]);
        let pm = if resp3 { ">4\r\n" } else { "*4\r\n" };
        assert_eq!(
            reply_text(&mut s),
            format!("{pm}$8\r\npmessage\r\n$1\r\n*\r\n$4\r\nnews\r\n$2\r\nhi\r\n")
        );
        for c in &channels {
            send(&mut other, &["SPUBLISH", c, "s"]);
            assert_eq!(
                reply_text(&mut s),
                format!("{head}$8\r\nsmessage\r\n${}\r\n{c}\r\n$1\r\ns\r\n", c.len())
            );
        }
        if resp3 {
            // Invalidations from every master, beside the messages.
            for c in &channels {
                send(&mut other, &["SET", c, "1"]);
                assert_eq!(
                    reply_text(&mut s),
                    format!(">2\r\n$10\r\ninvalidate\r\n*1\r\n${}\r\n{c}\r\n", c.len())
                );
            }
        }
        drop(s);
        // Its connections close with it.
        let started = Instant::now();
        while node_connections(&cluster, &proxy) > before {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "connections left"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

#[test]
fn clients_opening_many_connections_meet_the_bound_not_the_nodes_maxclients() {
    let node = NodeOptions::cluster().with_config("maxclients", "40");
    let cluster = Cluster::start(ClusterSpec::new(3, 0).with_node(node)).expect("cluster");
    let proxy = Proxy::spawn(
        &cluster.seeds(),
        &["--threads", "2"],
        &[
            ("ORTHRUS_BACKEND__MAX_CONNECTIONS_PER_NODE", "24"),
            ("ORTHRUS_BACKEND__REQUEST_TIMEOUT_MS", "800"),
        ],
    );
    proxy.wait_ready(Duration::from_secs(20));
    let channels = channel_per_master(&cluster);
    let mut greedy_clients = Vec::new();
    let mut heard = String::new();
    // One link per master each (tracking and every subscription on it):
    // 30 of them pass the bound of 24.
    for _ in 0..30 {
        let (s, text) = greedy(&proxy, &channels);
        greedy_clients.push(s);
        heard += &text;
    }
    let errors: Vec<&str> = heard.lines().filter(|l| l.starts_with('-')).collect();
    assert!(!heard.contains(NODE_FULL), "{errors:?}");
    assert!(
        heard.contains("backend.max_connections_per_node"),
        "no client met orthrus's bound: {errors:?}"
    );
    // INFO counts each node's connections, every kind and worker: the
    // bound reached on some master, passed on none.
    let info = send(&mut proxy.stream(), &["INFO", "cluster"]);
    let counts: Vec<usize> = info
        .lines()
        .filter_map(|l| l.split_once(",connections="))
        .map(|(_, n)| n.trim().parse().expect("a count"))
        .collect();
    assert_eq!(counts.len(), 3, "{info}");
    assert_eq!(counts.iter().max(), Some(&24), "{info}");
    // A BLPOP while the bound is reached waits; a greedy client leaving
    // frees its connections and the BLPOP gets one within its deadline.
    let mut other = proxy.stream();
    other
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let started = Instant::now();
    other.write_all(&encode(&["BLPOP", "bq", "1"])).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    greedy_clients.truncate(5);
    let reply = reply_text(&mut other);
    assert_eq!(reply, "*-1\r\n", "after {:?}", started.elapsed());
    // And nobody heard the node's refusal.
    for s in &mut greedy_clients {
        let pong = send(s, &["PING"]);
        assert!(!pong.contains(NODE_FULL), "{pong}");
    }
}

#[test]
fn a_client_holds_at_most_client_max_dedicated_connections() {
    let cluster = common::cluster(3, 0);
    let proxy = Proxy::spawn(
        &cluster.seeds(),
        &["--threads", "1"],
        &[("ORTHRUS_CLIENT__MAX_DEDICATED", "1")],
    );
    proxy.wait_ready(Duration::from_secs(20));
    let mut c = proxy.stream();
    // The WATCH holds one: a blocking command is refused at once.
    assert_eq!(send(&mut c, &["WATCH", "w"]), "+OK\r\n");
    let started = Instant::now();
    let refused = send(&mut c, &["BLPOP", "b", "1"]);
    assert!(
        refused.starts_with("-ERR orthrus:") && refused.contains("client.max_dedicated"),
        "{refused}"
    );
    assert!(started.elapsed() < Duration::from_millis(900));
    // Given back by UNWATCH: the blocking command runs.
    assert_eq!(send(&mut c, &["UNWATCH"]), "+OK\r\n");
    assert_eq!(send(&mut c, &["BLPOP", "b", "1"]), "*-1\r\n");
    // Another client is not counted with this one.
    let mut other = proxy.stream();
    assert_eq!(send(&mut c, &["WATCH", "w"]), "+OK\r\n");
    assert_eq!(send(&mut other, &["BLPOP", "b", "1"]), "*-1\r\n");
}
