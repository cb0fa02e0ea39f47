//! Blocking commands on dedicated connections: woken by other clients,
//! timing out on time, many at once without stalling anyone, released when
//! their client leaves, and refused clearly when the pool is exhausted.

mod common;

use std::time::{Duration, Instant};

use common::{Proxy, cluster, owner_of};
use orthrus_devcluster::wait_until;
use redis::Commands;

#[test]
fn blocking_commands() {
    let cluster = cluster(3, 0);
    let proxy = Proxy::start(&cluster.seeds(), &[]);

    // Woken by an LPUSH from another client.
    let url = proxy.url();
    let waiter = std::thread::spawn(move || {
        let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
        let got: Option<(String, String)> = redis::cmd("BLPOP")
            .arg("bq")
            .arg(5)
            .query(&mut con)
            .unwrap();
        got
    });
    std::thread::sleep(Duration::from_millis(300));
    let mut con = proxy.client();
    let _: () = con.lpush("bq", "hello").unwrap();
    assert_eq!(waiter.join().unwrap(), Some(("bq".into(), "hello".into())));

    // Times out after its own timeout.
    let started = Instant::now();
    let got: Option<(String, String)> = redis::cmd("BLPOP")
        .arg("empty-q")
        .arg(1)
        .query(&mut con)
        .unwrap();
    let waited = started.elapsed();
    assert_eq!(got, None);
    assert!(
        waited >= Duration::from_millis(900) && waited <= Duration::from_secs(3),
        "waited {waited:?}"
    );
    let started = Instant::now();
    let got: Option<redis::Value> = redis::cmd("XREAD")
        .arg("BLOCK")
        .arg(300)
        .arg("STREAMS")
        .arg("nostream")
        .arg("$")
        .query(&mut con)
        .unwrap();
    assert_eq!(got, None);
    assert!(
        started.elapsed() >= Duration::from_millis(250),
        "{:?}",
        started.elapsed()
    );

    // 50 clients blocked at once; other traffic flows meanwhile.
    let blocked: Vec<_> = (0..50)
        .map(|_| {
            let url = proxy.url();
            std::thread::spawn(move || {
                let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
                let got: Option<(String, String)> = redis::cmd("BRPOP")
                    .arg("many")
                    .arg(10)
                    .query(&mut con)
                    .unwrap();
                got.expect("woken with an element").1
            })
        })
        .collect();
    let node = owner_of(&cluster, b"many");
    wait_until(
        Duration::from_secs(10),
        "50 clients blocked",
        || match info_field(&cluster.nodes()[node], "blocked_clients") {
            50 => Ok(()),
            n => Err(format!("{n} blocked")),
        },
    )
    .unwrap();
    let started = Instant::now();
    for i in 0..500 {
        let _: () = con.set(format!("flow:{i}"), i).unwrap();
        let v: i64 = con.get(format!("flow:{i}")).unwrap();
        assert_eq!(v, i);
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "other traffic stalled: {:?}",
        started.elapsed()
    );
    let blocked_on_node = info_field(&cluster.nodes()[node], "blocked_clients");
    assert_eq!(
        proxy.info_field("blocked_clients"),
        50,
        "orthrus INFO counts its blocked clients"
    );
    assert_eq!(
        blocked_on_node, 50,
        "each blocked client holds its own connection"
    );
    let values: Vec<String> = (0..50).map(|i| format!("v{i}")).collect();
    let _: () = con.lpush("many", &values).unwrap();
    let mut got: Vec<String> = blocked.into_iter().map(|t| t.join().unwrap()).collect();
    got.sort();
    let mut want = values.clone();
    want.sort();
    assert_eq!(got, want);

    // A client that leaves while blocked releases its connection.
    let node = owner_of(&cluster, b"left-q");
    {
        let mut s = proxy.stream();
        use std::io::Write;
        s.write_all(&common::encode(&["BLPOP", "left-q", "0"]))
            .unwrap();
        wait_until(
            Duration::from_secs(10),
            "the client blocked",
            || match info_field(&cluster.nodes()[node], "blocked_clients") {
                1 => Ok(()),
                n => Err(format!("{n} blocked")),
            },
        )
        .unwrap();
    }
    wait_until(
        Duration::from_secs(5),
        "the node to release the blocked client after its client left",
        || match info_field(&cluster.nodes()[node], "blocked_clients") {
            0 => Ok(()),
            n => Err(format!("{n} blocked")),
        },
    )
    .unwrap();
}

/// Two dedicated connections per node: one for blocking commands, one
/// kept for WATCH. A blocking command without a timeout that finds no
/// connection free waits its turn within the request timeout, then gets
/// an error, not a hang; one with a timeout gets its nil at that timeout.
#[test]
fn exhausted_pool_gives_an_error_not_a_hang() {
    let cluster = cluster(3, 0);
    let proxy = Proxy::spawn(
        &cluster.seeds(),
        &["--threads", "1"],
        &[
            ("ORTHRUS_BACKEND__DEDICATED_PER_NODE", "2"),
            ("ORTHRUS_BACKEND__REQUEST_TIMEOUT_MS", "500"),
        ],
    );
    proxy.wait_ready(Duration::from_secs(20));
    let holders: Vec<_> = (0..2)
        .map(|_| {
            let url = proxy.url();
            std::thread::spawn(move || {
                let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
                let started = Instant::now();
                let _: Option<(String, String)> = redis::cmd("BLPOP")
                    .arg("pool-q")
                    .arg(3)
                    .query(&mut con)
                    .unwrap();
                started.elapsed()
            })
        })
        .collect();
    // One holder is blocked on the node (the one connection blocking
    // commands may take there), counted by orthrus as by the node; the
    // other waits for that connection, counted by neither. Whichever
    // comes first, the connection is held for 3 s.
    let node = &cluster.nodes()[owner_of(&cluster, b"pool-q")];
    wait_until(Duration::from_secs(10), "a holder blocked", || {
        match (
            proxy.info_field("blocked_clients"),
            info_field(node, "blocked_clients"),
        ) {
            (1, 1) => Ok(()),
            (ours, its) => Err(format!("{ours} blocked, {its} on the node")),
        }
    })
    .unwrap();
    let mut con = proxy.client();
    let started = Instant::now();
    let err = redis::cmd("BLPOP")
        .arg("pool-q")
        .arg(0)
        .query::<redis::Value>(&mut con)
        .unwrap_err();
    // It waited for a connection to be given back, for the request
    // timeout, then gave up long before the holders' 3 s were over.
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(400) && took < Duration::from_millis(2000),
        "refusal took {took:?}"
    );
    assert!(err.to_string().contains("in use"), "{err}");
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
    // The holder that found no connection got its nil at its 3 s, as the
    // one that had one.
    for h in holders {
        let took = h.join().unwrap();
        assert!(
            took >= Duration::from_millis(2800) && took < Duration::from_millis(4000),
            "a holder's nil came after {took:?}"
        );
    }
}

fn info_field(node: &orthrus_devcluster::RedisNode, field: &str) -> i64 {
    let info = node.cmd(&["INFO", "clients"]).unwrap();
    let text = info.as_str().unwrap_or_default();
    orthrus_devcluster::info_field(text, field)
        .unwrap_or_else(|| panic!("no {field}: {text}"))
        .parse()
        .unwrap()
}

#[test]
fn a_blocking_command_waits_for_a_dedicated_connection_within_its_deadline() {
    use std::io::Write;

    use common::{encode, reply_text, send};

    let cluster = cluster(3, 0);
    let proxy = Proxy::spawn(
        &cluster.seeds(),
        &["--threads", "1"],
        &[("ORTHRUS_BACKEND__DEDICATED_PER_NODE", "4")],
    );
    proxy.wait_ready(Duration::from_secs(20));
    // Every dedicated connection blocking commands may take to the node
    // of `{dq}` (three of four) taken by a 2-second BLPOP; the fourth
    // waits its turn.
    let mut holders: Vec<_> = (0..4).map(|_| proxy.stream()).collect();
    for s in &mut holders {
        s.write_all(&encode(&["BLPOP", "{dq}held", "2"])).unwrap();
    }
    std::thread::sleep(Duration::from_millis(300));
    // Another client's BLPOP waits for one, gets it when the holders'
    // 2 s are over, and runs with what is left of its 5 s: the value
    // pushed meanwhile reaches it (at about 2.7 s: room for a loaded
    // machine's late sleeps).
    let started = Instant::now();
    let mut other = proxy.stream();
    other
        .write_all(&encode(&["BLPOP", "{dq}other", "5"]))
        .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    let node = &cluster.nodes()[owner_of(&cluster, b"{dq}")];
    assert_eq!(info_field(node, "blocked_clients"), 3, "not waiting");
    std::thread::sleep(Duration::from_millis(1700));
    assert_eq!(
        send(&mut proxy.stream(), &["RPUSH", "{dq}other", "x"]),
        ":1\r\n"
    );
    assert_eq!(
        reply_text(&mut other),
        "*2\r\n$9\r\n{dq}other\r\n$1\r\nx\r\n"
    );
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(1500) && took < Duration::from_millis(5000),
        "it did not wait: {took:?}"
    );
    // A WATCH does not wait: it has its reserve.
    assert_eq!(send(&mut other, &["WATCH", "{dq}w"]), "+OK\r\n");
    assert_eq!(send(&mut other, &["MULTI"]), "+OK\r\n");
    assert_eq!(send(&mut other, &["SET", "{dq}w", "1"]), "+QUEUED\r\n");
    assert_eq!(send(&mut other, &["EXEC"]), "*1\r\n+OK\r\n");
    for s in &mut holders {
        assert_eq!(reply_text(s), "*-1\r\n");
    }
}
