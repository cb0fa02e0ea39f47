//! Pub/sub through orthrus: classic and pattern subscriptions, RESP2
//! subscriber mode, RESP3 pushes next to replies, PUBSUB introspection,
//! and a shard subscription that follows its slot to another master.

mod common;

use std::time::{Duration, Instant};

use common::{Proxy, cluster, reply_text as reply, send};

#[test]
fn publish_subscribe() {
    let cluster = cluster(3, 0);
    let proxy = Proxy::start(&cluster.seeds(), &[]);
    let mut sub = proxy.stream();
    let mut other = proxy.stream();

    assert_eq!(
        send(&mut sub, &["SUBSCRIBE", "news", "sport"]),
        "*3\r\n$9\r\nsubscribe\r\n$4\r\nnews\r\n:1\r\n"
    );
    assert_eq!(
        reply(&mut sub),
        "*3\r\n$9\r\nsubscribe\r\n$5\r\nsport\r\n:2\r\n"
    );
    assert_eq!(
        send(&mut sub, &["PSUBSCRIBE", "w*"]),
        "*3\r\n$10\r\npsubscribe\r\n$2\r\nw*\r\n:3\r\n"
    );
    // RESP2 subscriber mode allows only what Redis allows.
    let refused = send(&mut sub, &["GET", "x"]);
    assert!(refused.starts_with("-ERR Can't execute 'get'"), "{refused}");
    assert_eq!(send(&mut sub, &["PING"]), "*2\r\n$4\r\npong\r\n$0\r\n\r\n");

    assert!(proxy.info_field("pubsub_clients") >= 1);

    // Published through orthrus (any node: the cluster broadcasts).
    let receivers = send(&mut other, &["PUBLISH", "news", "hello"]);
    assert_eq!(receivers, ":1\r\n");
    assert_eq!(
        reply(&mut sub),
        "*3\r\n$7\r\nmessage\r\n$4\r\nnews\r\n$5\r\nhello\r\n"
    );
    send(&mut other, &["PUBLISH", "weather", "rain"]);
    assert_eq!(
        reply(&mut sub),
        "*4\r\n$8\r\npmessage\r\n$2\r\nw*\r\n$7\r\nweather\r\n$4\r\nrain\r\n"
    );

    // Introspection sums over the masters.
    assert_eq!(
        send(&mut other, &["PUBSUB", "NUMSUB", "news", "none"]),
        "*4\r\n$4\r\nnews\r\n:1\r\n$4\r\nnone\r\n:0\r\n"
    );
    assert_eq!(send(&mut other, &["PUBSUB", "NUMPAT"]), ":1\r\n");
    let channels = send(&mut other, &["PUBSUB", "CHANNELS"]);
    assert!(
        channels.starts_with("*2\r\n") && channels.contains("news") && channels.contains("sport"),
        "{channels}"
    );

    // Leaving subscriber mode.
    assert_eq!(
        send(&mut sub, &["UNSUBSCRIBE", "news", "sport"]),
        "*3\r\n$11\r\nunsubscribe\r\n$4\r\nnews\r\n:2\r\n"
    );
    assert_eq!(
        reply(&mut sub),
        "*3\r\n$11\r\nunsubscribe\r\n$5\r\nsport\r\n:1\r\n"
    );
    assert_eq!(
        send(&mut sub, &["PUNSUBSCRIBE"]),
        "*3\r\n$12\r\npunsubscribe\r\n$2\r\nw*\r\n:0\r\n"
    );
    assert_eq!(send(&mut sub, &["SET", "after-sub", "1"]), "+OK\r\n");

    // RESP3: pushes interleave with ordinary replies.
    let mut v3 = proxy.stream();
    assert!(send(&mut v3, &["HELLO", "3"]).starts_with('%'));
    assert_eq!(
        send(&mut v3, &["SUBSCRIBE", "r3"]),
        ">3\r\n$9\r\nsubscribe\r\n$2\r\nr3\r\n:1\r\n"
    );
    assert_eq!(send(&mut v3, &["GET", "after-sub"]), "$1\r\n1\r\n");
    send(&mut other, &["PUBLISH", "r3", "pushed"]);
    assert_eq!(
        reply(&mut v3),
        ">3\r\n$7\r\nmessage\r\n$2\r\nr3\r\n$6\r\npushed\r\n"
    );

    // A shard subscription follows its slot to another master.
    let channel = "shard-news";
    assert_eq!(
        send(&mut sub, &["SSUBSCRIBE", channel]),
        format!(
            "*3\r\n$10\r\nssubscribe\r\n${}\r\n{channel}\r\n:1\r\n",
            channel.len()
        )
    );
    assert_eq!(send(&mut other, &["SPUBLISH", channel, "one"]), ":1\r\n");
    assert_eq!(
        reply(&mut sub),
        format!(
            "*3\r\n$8\r\nsmessage\r\n${}\r\n{channel}\r\n$3\r\none\r\n",
            channel.len()
        )
    );
    let (slot, to) = common::slot_and_other_master(&cluster, channel.as_bytes());
    cluster.move_slot(slot, to).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let n = send(&mut other, &["SPUBLISH", channel, "two"]);
        if n == ":1\r\n" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the shard subscription was not re-established: {n}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        reply(&mut sub),
        format!(
            "*3\r\n$8\r\nsmessage\r\n${}\r\n{channel}\r\n$3\r\ntwo\r\n",
            channel.len()
        )
    );
    assert_eq!(
        send(&mut sub, &["PING"]),
        "*2\r\n$4\r\npong\r\n$0\r\n\r\n",
        "no stray confirmation reached the client"
    );
}

/// A subscriber that does not read its messages is disconnected once its
/// backlog passes `client.max_push_bytes`; publishers and others go on.
#[test]
fn slow_subscriber_is_disconnected() {
    use std::io::Read;

    let cluster = cluster(3, 0);
    let proxy = Proxy::spawn(
        &cluster.seeds(),
        &["--threads", "1"],
        &[("ORTHRUS_CLIENT__MAX_PUSH_BYTES", "1048576")],
    );
    proxy.wait_ready(Duration::from_secs(20));
    // A small receive window, so that the subscriber's backlog stays in
    // orthrus rather than in the kernel's buffers.
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.set_recv_buffer_size(64 * 1024).unwrap();
    socket.connect(&proxy.addr.into()).unwrap();
    let mut slow: std::net::TcpStream = socket.into();
    slow.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    assert_eq!(
        send(&mut slow, &["SUBSCRIBE", "firehose"]),
        "*3\r\n$9\r\nsubscribe\r\n$8\r\nfirehose\r\n:1\r\n"
    );
    let mut publisher = proxy.client();
    let payload = vec![b'x'; 64 * 1024];
    for _ in 0..200 {
        let _: i64 = redis::cmd("PUBLISH")
            .arg("firehose")
            .arg(&payload)
            .query(&mut publisher)
            .unwrap();
    }
    let pong: String = redis::cmd("PING").query(&mut publisher).unwrap();
    assert_eq!(pong, "PONG");
    // Reading now: some messages, then the end of the connection.
    let mut total = 0usize;
    let mut buf = vec![0u8; 1 << 20];
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match slow.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => total += n,
            Err(e) => panic!("the slow subscriber was not disconnected ({total} bytes read): {e}"),
        }
        assert!(Instant::now() < deadline, "never disconnected");
    }
    assert!(
        total < 200 * 64 * 1024,
        "it got every message ({total} bytes): no limit applied"
    );
    assert!(
        proxy.log_text().contains("subscriber too slow"),
        "no log line for the disconnect"
    );
}

/// As on Redis, an UNSUBSCRIBE has taken effect by the time its
/// confirmation arrives: a PUBLISH sent right after it counts no receiver,
/// and a CLIENT KILL of oneself (SKIPME no) is answered before the close.
#[test]
fn unsubscribe_takes_effect_at_once_and_a_self_kill_is_answered() {
    use std::io::Read;
    let cluster = cluster(1, 0);
    let proxy = Proxy::start(&cluster.seeds(), &["--threads", "1"]);
    let mut sub = proxy.stream();
    let mut publisher = proxy.stream();
    for round in 0..20 {
        let ch = format!("unsub-{round}");
        assert!(send(&mut sub, &["SUBSCRIBE", &ch]).ends_with(":1\r\n"));
        assert_eq!(send(&mut publisher, &["PUBLISH", &ch, "m"]), ":1\r\n");
        assert!(reply(&mut sub).contains("message"));
        assert!(send(&mut sub, &["UNSUBSCRIBE", &ch]).ends_with(":0\r\n"));
        assert_eq!(send(&mut publisher, &["PUBLISH", &ch, "m"]), ":0\r\n");
    }

    let mut me = proxy.stream();
    let id = send(&mut me, &["CLIENT", "ID"]);
    let id = id.trim().trim_start_matches(':').to_owned();
    assert_eq!(
        send(&mut me, &["CLIENT", "KILL", "ID", &id, "SKIPME", "no"]),
        ":1\r\n"
    );
    me.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut rest = [0u8; 16];
    assert_eq!(me.read(&mut rest).expect("closed, not reset"), 0);
}

/// Keyspace notifications come from the node that owns the key, and no
/// node broadcasts them: a PSUBSCRIBE that can match them reaches every
/// master, and only the notifications of the other masters are relayed
/// (a PUBLISHed message still arrives once).
#[test]
fn keyspace_notifications_from_every_master() {
    use std::io::Write;

    let cluster = cluster(3, 0);
    for node in cluster.nodes() {
        node.cmd_ok(&["CONFIG", "SET", "notify-keyspace-events", "KA"])
            .unwrap();
    }
    let proxy = Proxy::start(&cluster.seeds(), &[]);
    let mut sub = proxy.stream();
    sub.write_all(&common::encode(&["PSUBSCRIBE", "*"]))
        .unwrap();
    assert_eq!(
        common::reply_text(&mut sub),
        "*3\r\n$10\r\npsubscribe\r\n$1\r\n*\r\n:1\r\n"
    );
    // A key on each master.
    let mut keys = Vec::new();
    for i in 0.. {
        let key = format!("ks:{i}");
        let owner = common::owner_of(&cluster, key.as_bytes());
        if !keys.iter().any(|(_, o)| *o == owner) {
            keys.push((key, owner));
        }
        if keys.len() == 3 {
            break;
        }
    }
    let mut other = proxy.stream();
    // The other masters' subscriptions are made as the PSUBSCRIBE is sent:
    // wait until a write on each is seen.
    let mut seen = std::collections::HashSet::new();
    sub.set_read_timeout(Some(std::time::Duration::from_millis(300)))
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while seen.len() < 3 {
        assert!(std::time::Instant::now() < deadline, "seen {seen:?}");
        for (key, _) in &keys {
            assert_eq!(common::send(&mut other, &["SET", key, "v"]), "+OK\r\n");
        }
        while let Ok(frame) = common::read_reply(&mut sub) {
            let text = String::from_utf8_lossy(&frame).into_owned();
            for (key, _) in &keys {
                if text.contains(&format!("__keyspace@0__:{key}\r\n")) {
                    seen.insert(key.clone());
                }
            }
        }
    }
    assert_eq!(
        common::send(&mut other, &["PUBLISH", "plain", "hi"]),
        ":1\r\n"
    );
    let mut messages = 0;
    while let Ok(frame) = common::read_reply(&mut sub) {
        if String::from_utf8_lossy(&frame).contains("$5\r\nplain\r\n$2\r\nhi\r\n") {
            messages += 1;
        }
    }
    assert_eq!(messages, 1, "a PUBLISHed message arrives once");
}
