//! `cluster.mode = "standalone"`: orthrus in front of one redis-server
//! without cluster mode, which serves every slot.

mod common;

use std::io::{Read, Write};
use std::time::Duration;

use common::{Proxy, reply_text, send};
use orthrus_devcluster::{NodeOptions, RedisNode, Value};
use redis::Commands;

/// A plain redis-server (no cluster mode) and orthrus in front of it,
/// two workers.
fn solo() -> (RedisNode, Proxy) {
    let node = RedisNode::start(NodeOptions::default()).expect("start redis-server");
    let proxy = Proxy::start(&[node.addr()], &["--mode", "standalone", "--threads", "2"]);
    (node, proxy)
}

fn text(v: &Value) -> String {
    String::from_utf8_lossy(v.as_bytes().unwrap_or_default()).into_owned()
}

#[test]
fn keys_of_every_slot_reach_the_one_server() {
    let (node, proxy) = solo();
    let mut c = proxy.client();
    let keys: Vec<String> = (0..300).map(|i| format!("solo:{i}")).collect();
    for (i, k) in keys.iter().enumerate() {
        let _: () = c.set(k, i).unwrap();
    }
    // Straight from the server: every key is there.
    assert_eq!(node.cmd(&["DBSIZE"]).unwrap().as_int(), Some(300));
    // A multi-key read across slots is split and put back in order.
    let values: Vec<Option<usize>> = redis::cmd("MGET").arg(&keys).query(&mut c).unwrap();
    assert_eq!(values, (0..300).map(Some).collect::<Vec<_>>());
    let _: () = redis::cmd("MSET")
        .arg("{a}x")
        .arg("1")
        .arg("{b}y")
        .arg("2")
        .query(&mut c)
        .unwrap();
    let n: usize = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(n, 302);
    // SCAN walks the one server once: every key exactly once.
    let mut seen: Vec<String> = c
        .scan_match("solo:*")
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    seen.sort();
    let mut want = keys.clone();
    want.sort();
    assert_eq!(seen, want);
    // A transaction within one slot, a blocking pop that finds its data.
    let (a, b): (i64, i64) = redis::pipe()
        .atomic()
        .incr("{t}n", 1)
        .incr("{t}n", 2)
        .query(&mut c)
        .unwrap();
    assert_eq!((a, b), (1, 3));
    let _: () = c.rpush("solo:list", "v").unwrap();
    let popped: Option<(String, String)> = c.blpop("solo:list", 1.0).unwrap();
    assert_eq!(popped, Some(("solo:list".into(), "v".into())));
}

#[test]
fn orthrus_presents_one_master_and_sends_no_cluster_command() {
    let (node, proxy) = solo();
    let mut s = proxy.stream();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let slots = send(&mut s, &["CLUSTER", "SLOTS"]);
    assert!(
        slots.starts_with("*1\r\n*3\r\n:0\r\n:16383\r\n"),
        "one range, every slot: {slots:?}"
    );
    let info = send(&mut s, &["INFO", "cluster"]);
    for line in [
        "orthrus_cluster_mode:standalone",
        "orthrus_cluster_masters:1",
        "orthrus_cluster_slots_covered:16384",
    ] {
        assert!(info.contains(line), "{line} not in {info}");
    }
    assert_eq!(send(&mut s, &["SET", "k", "v"]), "+OK\r\n");
    // Publish through one connection, receive on another.
    let mut sub = proxy.stream();
    sub.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    sub.write_all(b"*2\r\n$9\r\nSUBSCRIBE\r\n$4\r\nnews\r\n")
        .unwrap();
    assert_eq!(
        reply_text(&mut sub),
        "*3\r\n$9\r\nsubscribe\r\n$4\r\nnews\r\n:1\r\n"
    );
    orthrus_devcluster::wait_until(Duration::from_secs(5), "a subscriber", || {
        match send(&mut s, &["PUBLISH", "news", "hi"]).as_str() {
            ":1\r\n" => Ok(()),
            other => Err(other.to_owned()),
        }
    })
    .unwrap();
    let mut got = [0u8; 64];
    let want = b"*3\r\n$7\r\nmessage\r\n$4\r\nnews\r\n$2\r\nhi\r\n";
    sub.read_exact(&mut got[..want.len()]).unwrap();
    assert_eq!(&got[..want.len()], want);
    // The server was never asked a CLUSTER command (it would refuse it:
    // cluster support is disabled).
    let stats = text(&node.cmd(&["INFO", "commandstats"]).unwrap());
    assert!(stats.contains("cmdstat_ping"), "{stats}");
    assert!(!stats.contains("cmdstat_cluster"), "{stats}");
}

#[test]
fn a_server_that_goes_away_and_comes_back_is_served_again() {
    let (mut node, proxy) = solo();
    let mut c = proxy.client();
    let _: () = c.set("before", 1).unwrap();
    node.restart().unwrap();
    orthrus_devcluster::wait_until(Duration::from_secs(10), "served again", || {
        let mut c = proxy.client();
        c.set::<_, _, ()>("after", 2).map_err(|e| e.to_string())
    })
    .unwrap();
    let after: i64 = proxy.client().get("after").unwrap();
    assert_eq!(after, 2);
}
