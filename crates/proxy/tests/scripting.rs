//! Scripts and functions across masters: EVALSHA after EVAL on another
//! master, SCRIPT KILL and FUNCTION KILL reaching the busy master, FUNCTION
//! STATS asked of every master.

mod common;

use common::{Proxy, cluster};
use redis::Commands;

/// A script run with EVAL on one master is cached there only; orthrus
/// keeps its body, so an EVALSHA for a key on another master (which
/// answers NOSCRIPT) loads it there and runs, and SCRIPT EXISTS says 1.
/// SCRIPT FLUSH makes orthrus forget it too.
#[test]
fn evalsha_runs_on_every_master_after_eval_on_one() {
    let cluster = cluster(3, 0);
    let proxy = Proxy::start(&cluster.seeds(), &[]);
    let mut con = proxy.client();
    let body = "return redis.call('get', KEYS[1])";
    let first = "script:a";
    let other = (0..1000)
        .map(|i| format!("script:{i}"))
        .find(|k| {
            common::owner_of(&cluster, k.as_bytes()) != common::owner_of(&cluster, first.as_bytes())
        })
        .unwrap();
    let _: () = con.set(first, "1").unwrap();
    let _: () = con.set(&other, "2").unwrap();
    let v: String = redis::cmd("EVAL")
        .arg(body)
        .arg(1)
        .arg(first)
        .query(&mut con)
        .unwrap();
    assert_eq!(v, "1");
    let sha = "4e6d8fc8bb01276962cce5371fa795a7763657ae";
    // The node that ran it names it: check orthrus's SHA1 is the same.
    let node = cluster.nodes()[common::owner_of(&cluster, first.as_bytes())].addr();
    let mut direct = redis::Client::open(format!("redis://{node}"))
        .unwrap()
        .get_connection()
        .unwrap();
    let real: Vec<i64> = redis::cmd("SCRIPT")
        .arg("EXISTS")
        .arg(sha)
        .query(&mut direct)
        .unwrap();
    assert_eq!(real, vec![1], "the SHA1 of {body}");

    let exists: Vec<i64> = redis::cmd("SCRIPT")
        .arg("EXISTS")
        .arg(sha)
        .arg("0000")
        .query(&mut con)
        .unwrap();
    assert_eq!(exists, vec![1, 0]);
    let v: String = redis::cmd("EVALSHA")
        .arg(sha)
        .arg(1)
        .arg(&other)
        .query(&mut con)
        .unwrap();
    assert_eq!(v, "2", "loaded on the other master and run there");

    let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut con).unwrap();
    let exists: Vec<i64> = redis::cmd("SCRIPT")
        .arg("EXISTS")
        .arg(sha)
        .query(&mut con)
        .unwrap();
    assert_eq!(exists, vec![0]);
    let err = redis::cmd("EVALSHA")
        .arg(sha)
        .arg(1)
        .arg(&other)
        .query::<String>(&mut con)
        .unwrap_err();
    assert_eq!(err.code(), Some("NOSCRIPT"), "{err}");
}

/// SCRIPT KILL reaches the master running a busy script (over its own
/// connection: the shared one waits behind the script) and answers +OK;
/// with nothing running, the masters' NOTBUSY.
#[test]
fn script_kill_stops_a_busy_script_on_its_master() {
    use std::io::Write;

    let cluster = busy_after_50ms();
    let proxy = Proxy::start(&cluster.seeds(), &[]);
    let mut con = proxy.client();
    let err = redis::cmd("SCRIPT")
        .arg("KILL")
        .query::<String>(&mut con)
        .unwrap_err();
    assert_eq!(err.code(), Some("NOTBUSY"), "{err}");

    let mut busy = proxy.stream();
    busy.write_all(&common::encode(&[
        "EVAL",
        "while true do end",
        "1",
        "kill:k",
    ]))
    .unwrap();
    orthrus_devcluster::wait_until(std::time::Duration::from_secs(10), "script killed", || {
        match redis::cmd("SCRIPT").arg("KILL").query::<String>(&mut con) {
            Ok(ok) if ok == "OK" => Ok(()),
            Ok(other) => Err(other),
            Err(e) => Err(e.to_string()),
        }
    })
    .unwrap();
    let reply = common::reply_text(&mut busy);
    assert!(reply.contains("killed"), "{reply}");
    let v: Option<String> = con.get("kill:k").unwrap();
    assert_eq!(v, None, "the master serves again");
}

/// A busy function: FUNCTION STATS names it (asked of every master over
/// connections of their own), SCRIPT KILL answers the busy master's BUSY,
/// FUNCTION KILL stops it.
#[test]
fn function_stats_and_kill_reach_the_busy_master() {
    use std::io::Write;

    let cluster = busy_after_50ms();
    let proxy = Proxy::start(&cluster.seeds(), &[]);
    let mut con = proxy.client();
    let lib = "#!lua name=spin\nredis.register_function('spin', function() while true do end end)";
    let _: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg(lib)
        .query(&mut con)
        .unwrap();
    let mut busy = proxy.stream();
    busy.write_all(&common::encode(&["FCALL", "spin", "1", "fn:k"]))
        .unwrap();
    orthrus_devcluster::wait_until(std::time::Duration::from_secs(10), "running_script", || {
        let stats = common::send(&mut proxy.stream(), &["FUNCTION", "STATS"]);
        if stats.contains("$4\r\nspin\r\n") {
            Ok(())
        } else {
            Err(stats)
        }
    })
    .unwrap();
    let err = redis::cmd("SCRIPT")
        .arg("KILL")
        .query::<String>(&mut con)
        .unwrap_err();
    assert_eq!(err.code(), Some("BUSY"), "{err}");
    let ok: String = redis::cmd("FUNCTION").arg("KILL").query(&mut con).unwrap();
    assert_eq!(ok, "OK");
    let reply = common::reply_text(&mut busy);
    assert!(reply.contains("killed"), "{reply}");
}

/// A 3-master cluster whose nodes call a script busy (and let SCRIPT KILL
/// and FUNCTION KILL stop it) after 50 ms instead of 5 s.
fn busy_after_50ms() -> orthrus_devcluster::Cluster {
    let cluster = cluster(3, 0);
    for node in cluster.nodes() {
        node.cmd_ok(&["CONFIG", "SET", "busy-reply-threshold", "50"])
            .unwrap();
    }
    cluster
}
