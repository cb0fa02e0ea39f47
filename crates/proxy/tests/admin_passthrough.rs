//! `[admin] passthrough`: administrative commands sent where they mean what
//! they mean on one redis-server; refused by default.

mod common;

use std::collections::HashSet;
use std::io::Write;
use std::time::{Duration, Instant};

use common::{Proxy, cluster, send};

/// CONFIG GET of `name` on one node, straight from it.
fn node_config(node: &orthrus_devcluster::RedisNode, name: &str) -> String {
    let value = node.cmd(&["CONFIG", "GET", name]).expect("CONFIG GET");
    let fields = value.as_array().expect("array");
    fields
        .get(1)
        .and_then(|v| v.as_str())
        .expect("value")
        .to_owned()
}

#[test]
fn passthrough_sends_admin_commands_to_the_right_nodes() {
    let cluster = cluster(3, 1);
    let proxy = Proxy::spawn(
        &cluster.seeds(),
        &["--threads", "1"],
        &[("ORTHRUS_ADMIN__PASSTHROUGH", "true")],
    );
    proxy.wait_ready(Duration::from_secs(20));
    let mut s = proxy.stream();

    // Settings go to every node, replicas included.
    assert_eq!(
        send(&mut s, &["CONFIG", "SET", "maxmemory-samples", "7"]),
        "+OK\r\n"
    );
    assert_eq!(cluster.nodes().len(), 6);
    for node in cluster.nodes() {
        assert_eq!(
            node_config(node, "maxmemory-samples"),
            "7",
            "{}",
            node.addr()
        );
    }
    // Questions go to one master.
    assert_eq!(
        send(&mut s, &["CONFIG", "GET", "maxmemory-samples"]),
        "*2\r\n$17\r\nmaxmemory-samples\r\n$1\r\n7\r\n"
    );
    // A node's error names the node.
    let err = send(&mut s, &["CONFIG", "SET", "no-such-option", "1"]);
    assert!(
        err.starts_with("-ERR") && err.contains("(node 127.0.0.1:"),
        "{err}"
    );
    // A keyed DEBUG goes to the key's master.
    assert_eq!(send(&mut s, &["SET", "adm:k", "v"]), "+OK\r\n");
    let object = send(&mut s, &["DEBUG", "OBJECT", "adm:k"]);
    assert!(object.starts_with("+Value at:"), "{object}");
    // Persistence on every master.
    assert_eq!(send(&mut s, &["SAVE"]), "+OK\r\n");
    // The cluster's shape stays the operator's.
    let refused = send(&mut s, &["SHUTDOWN", "NOSAVE"]);
    assert!(
        refused.starts_with("-ERR orthrus: SHUTDOWN is refused"),
        "{refused}"
    );
    assert_eq!(send(&mut s, &["GET", "adm:k"]), "$1\r\nv\r\n");
    for node in cluster.nodes() {
        node.cmd(&["PING"]).expect("every node still up");
    }
}

#[test]
fn monitor_streams_every_master() {
    let cluster = cluster(3, 0);
    let proxy = Proxy::spawn(
        &cluster.seeds(),
        &["--threads", "2"],
        &[("ORTHRUS_ADMIN__PASSTHROUGH", "true")],
    );
    proxy.wait_ready(Duration::from_secs(20));
    let mut monitor = proxy.stream();
    assert_eq!(send(&mut monitor, &["MONITOR"]), "+OK\r\n");
    let mut other = proxy.stream();
    // Keys on every master, sent right after the +OK: MONITOR answers once
    // every master streams, so each of them shows.
    for i in 0..30 {
        assert_eq!(
            send(&mut other, &["SET", &format!("mon:{i}"), "v"]),
            "+OK\r\n"
        );
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seen = HashSet::new();
    monitor
        .set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    while seen.len() < 30 {
        assert!(Instant::now() < deadline, "seen only {seen:?}");
        while let Ok(line) = common::read_reply(&mut monitor) {
            let line = String::from_utf8_lossy(&line).into_owned();
            assert!(line.starts_with('+'), "{line}");
            if let Some(at) = line.find("\"SET\" \"mon:") {
                let key = line[at + 7..].split('"').next().unwrap_or("").to_owned();
                seen.insert(key);
            }
        }
    }
    // RESET ends monitoring: the connection answers again.
    monitor.set_read_timeout(None).expect("timeout");
    let reset = send(&mut monitor, &["RESET"]);
    assert!(reset.ends_with("+RESET\r\n"), "{reset}");
}

#[test]
fn admin_commands_are_refused_by_default() {
    let cluster = cluster(1, 0);
    let proxy = Proxy::start(&cluster.seeds(), &[]);
    let mut s = proxy.stream();
    let refused = send(&mut s, &["CONFIG", "SET", "maxmemory-samples", "9"]);
    assert!(refused.contains("administrative commands"), "{refused}");
    assert_ne!(node_config(&cluster.nodes()[0], "maxmemory-samples"), "9");
    assert_eq!(send(&mut s, &["PING"]), "+PONG\r\n");
}

/// CONFIG SET of the SLOWLOG settings sets orthrus's own SLOWLOG too (SLOWLOG
/// is answered by orthrus), besides the nodes'.
#[test]
fn config_set_slowlog_settings_apply_to_orthrus_too() {
    let cluster = cluster(1, 0);
    let proxy = Proxy::spawn(
        &cluster.seeds(),
        &[],
        &[("ORTHRUS_ADMIN__PASSTHROUGH", "true")],
    );
    proxy.wait_ready(Duration::from_secs(20));
    let mut s = proxy.stream();
    assert_eq!(
        send(
            &mut s,
            &[
                "CONFIG",
                "SET",
                "slowlog-log-slower-than",
                "0",
                "slowlog-max-len",
                "2"
            ]
        ),
        "+OK\r\n"
    );
    assert_eq!(node_config(&cluster.nodes()[0], "slowlog-max-len"), "2");
    assert_eq!(send(&mut s, &["SLOWLOG", "RESET"]), "+OK\r\n");
    for _ in 0..5 {
        assert_eq!(send(&mut s, &["SET", "slow:k", "v"]), "+OK\r\n");
    }
    assert_eq!(send(&mut s, &["SLOWLOG", "LEN"]), ":2\r\n");
}

/// While a script runs past the busy threshold (set through orthrus), PING
/// answers BUSY as the node would; SCRIPT KILL ends it and PING answers
/// PONG again.
#[test]
fn ping_is_busy_while_a_script_runs_past_the_threshold() {
    use std::io::Write;

    let cluster = cluster(1, 0);
    let proxy = Proxy::spawn(
        &cluster.seeds(),
        &[],
        &[("ORTHRUS_ADMIN__PASSTHROUGH", "true")],
    );
    proxy.wait_ready(Duration::from_secs(20));
    let mut s = proxy.stream();
    assert_eq!(
        send(&mut s, &["CONFIG", "SET", "busy-reply-threshold", "50"]),
        "+OK\r\n"
    );
    assert_eq!(send(&mut s, &["PING"]), "+PONG\r\n");
    let mut busy = proxy.stream();
    busy.write_all(&common::encode(&["EVAL", "while true do end", "0"]))
        .unwrap();
    orthrus_devcluster::wait_until(Duration::from_secs(10), "PING says BUSY", || {
        let reply = send(&mut s, &["PING"]);
        if reply.starts_with("-BUSY") && reply.contains("SCRIPT KILL") {
            Ok(())
        } else {
            Err(reply)
        }
    })
    .unwrap();
    assert_eq!(send(&mut s, &["SCRIPT", "KILL"]), "+OK\r\n");
    let killed = common::reply_text(&mut busy);
    assert!(killed.contains("killed"), "{killed}");
    assert_eq!(send(&mut s, &["PING"]), "+PONG\r\n");
}

/// CONFIG RESETSTAT under passthrough resets the nodes' statistics as well
/// as orthrus's own.
#[test]
fn config_resetstat_reaches_the_nodes() {
    let cluster = cluster(1, 0);
    let proxy = Proxy::spawn(
        &cluster.seeds(),
        &[],
        &[("ORTHRUS_ADMIN__PASSTHROUGH", "true")],
    );
    proxy.wait_ready(Duration::from_secs(20));
    let mut s = proxy.stream();
    assert_eq!(send(&mut s, &["SET", "stat:k", "v"]), "+OK\r\n");
    let node = cluster.nodes()[0].addr();
    let mut direct = redis::Client::open(format!("redis://{node}"))
        .unwrap()
        .get_connection()
        .unwrap();
    let stats = |c: &mut redis::Connection| -> String {
        redis::cmd("INFO").arg("commandstats").query(c).unwrap()
    };
    assert!(stats(&mut direct).contains("cmdstat_set:"));
    assert_eq!(send(&mut s, &["CONFIG", "RESETSTAT"]), "+OK\r\n");
    let after = stats(&mut direct);
    assert!(!after.contains("cmdstat_set:"), "{after}");
}

/// LATENCY HISTOGRAM under passthrough counts every master's calls, as one
/// server that ran them all would.
#[test]
fn latency_histogram_sums_the_masters() {
    let cluster = cluster(3, 0);
    let proxy = Proxy::spawn(
        &cluster.seeds(),
        &[],
        &[("ORTHRUS_ADMIN__PASSTHROUGH", "true")],
    );
    proxy.wait_ready(Duration::from_secs(20));
    let mut s = proxy.stream();
    assert_eq!(send(&mut s, &["CONFIG", "RESETSTAT"]), "+OK\r\n");
    // Keys on different masters.
    for key in ["hist:a", "hist:b", "hist:c", "hist:d", "hist:e", "hist:f"] {
        assert_eq!(send(&mut s, &["SET", key, "v"]), "+OK\r\n");
    }
    let histogram = send(&mut s, &["LATENCY", "HISTOGRAM", "set"]);
    assert!(
        histogram.starts_with("*2\r\n$3\r\nset\r\n*4\r\n$5\r\ncalls\r\n:6\r\n"),
        "{histogram}"
    );
}

#[test]
fn config_set_is_all_or_nothing_across_nodes() {
    // One master busy with a script refuses the CONFIG SET: the others
    // must not keep it (a one-node server refusing it keeps nothing).
    let cluster = cluster(3, 0);
    let proxy = Proxy::start_env(
        &cluster.seeds(),
        &["--threads", "1"],
        &[("ORTHRUS_ADMIN__PASSTHROUGH", "true")],
    );
    let mut s = proxy.stream();
    let busy = &cluster.nodes()[0];
    busy.cmd_ok(&["CONFIG", "SET", "lua-time-limit", "10"])
        .expect("lua-time-limit");
    let mut looping = std::net::TcpStream::connect(busy.addr()).expect("connect");
    looping
        .write_all(&common::encode(&["EVAL", "while true do end", "0"]))
        .expect("EVAL");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !format!("{:?}", busy.cmd(&["PING"])).contains("BUSY") {
        assert!(
            Instant::now() < deadline,
            "the script did not make the node busy"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    let reply = send(&mut s, &["CONFIG", "SET", "min-replicas-to-write", "2"]);
    assert!(reply.starts_with("-BUSY"), "{reply}");
    for node in &cluster.nodes()[1..] {
        assert_eq!(node_config(node, "min-replicas-to-write"), "0");
    }

    busy.cmd(&["SCRIPT", "KILL"]).expect("SCRIPT KILL");
    let reply = common::reply_text(&mut looping);
    assert!(reply.starts_with("-ERR"), "the killed script: {reply}");
    assert_eq!(node_config(busy, "min-replicas-to-write"), "0");
    assert_eq!(
        send(&mut s, &["CONFIG", "SET", "min-replicas-to-write", "0"]),
        "+OK\r\n"
    );
}
