//! CLIENT PAUSE / UNPAUSE on orthrus's own clients, as on one redis-server.

mod common;

use std::io::Write;
use std::time::{Duration, Instant};

use common::{Proxy, cluster, encode, reply_text, send};
use orthrus_cluster::Slot;

#[test]
fn pause_write_holds_writes_and_lets_reads_through() {
    let cluster = cluster(3, 0);
    let proxy = Proxy::start(&cluster.seeds(), &["--threads", "2"]);
    let mut admin = proxy.stream();
    let mut other = proxy.stream();
    assert_eq!(send(&mut other, &["SET", "pause:k", "1"]), "+OK\r\n");

    assert_eq!(
        send(&mut admin, &["CLIENT", "PAUSE", "1500", "WRITE"]),
        "+OK\r\n"
    );
    let start = Instant::now();
    assert_eq!(send(&mut other, &["GET", "pause:k"]), "$1\r\n1\r\n");
    assert_eq!(send(&mut other, &["PING"]), "+PONG\r\n");
    // Not held to the end of the pause (a loaded machine may be slow).
    assert!(
        start.elapsed() < Duration::from_millis(1000),
        "reads waited"
    );
    // A write waits for the end of the pause, and what follows it too.
    other
        .write_all(
            &[
                encode(&["SET", "pause:k", "2"]),
                encode(&["GET", "pause:k"]),
            ]
            .concat(),
        )
        .expect("send");
    assert_eq!(reply_text(&mut other), "+OK\r\n");
    assert!(
        start.elapsed() >= Duration::from_millis(1400),
        "the write was not held"
    );
    assert_eq!(reply_text(&mut other), "$1\r\n2\r\n");

    // UNPAUSE lets held writes go at once.
    assert_eq!(
        send(&mut admin, &["CLIENT", "PAUSE", "20000", "WRITE"]),
        "+OK\r\n"
    );
    let start = Instant::now();
    other
        .write_all(&encode(&["SET", "pause:k", "3"]))
        .expect("send");
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(send(&mut admin, &["CLIENT", "UNPAUSE"]), "+OK\r\n");
    assert_eq!(reply_text(&mut other), "+OK\r\n");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "UNPAUSE did not release"
    );

    // ALL holds reads too; errors as Redis words them.
    assert_eq!(send(&mut admin, &["CLIENT", "PAUSE", "500"]), "+OK\r\n");
    let start = Instant::now();
    assert_eq!(send(&mut other, &["GET", "pause:k"]), "$1\r\n3\r\n");
    assert!(
        start.elapsed() >= Duration::from_millis(400),
        "ALL let a read through"
    );
    assert_eq!(
        send(&mut admin, &["CLIENT", "PAUSE", "x"]),
        "-ERR timeout is not an integer or out of range\r\n"
    );
    assert_eq!(
        send(&mut admin, &["CLIENT", "PAUSE", "10", "SOME"]),
        "-ERR syntax error\r\n"
    );
}

/// A client held by CLIENT PAUSE counts in INFO's `blocked_clients`, as in
/// Redis (scripts wait for it there), until it goes on or leaves.
#[test]
fn held_clients_count_as_blocked() {
    let cluster = cluster(1, 0);
    let proxy = Proxy::start(&cluster.seeds(), &["--threads", "2"]);
    let mut admin = proxy.stream();
    let blocked = |admin: &mut std::net::TcpStream| {
        let info = send(admin, &["INFO", "clients"]);
        info.lines()
            .find_map(|l| l.strip_prefix("blocked_clients:"))
            .map(|v| v.trim().to_owned())
            .unwrap()
    };
    assert_eq!(
        send(&mut admin, &["CLIENT", "PAUSE", "20000", "WRITE"]),
        "+OK\r\n"
    );
    let mut held = proxy.stream();
    held.write_all(&encode(&["SET", "pause:b", "1"])).unwrap();
    let mut leaving = proxy.stream();
    leaving
        .write_all(&encode(&["SET", "pause:c", "1"]))
        .unwrap();
    orthrus_devcluster::wait_until(Duration::from_secs(5), "two blocked", || {
        let n = blocked(&mut admin);
        if n == "2" { Ok(()) } else { Err(n) }
    })
    .unwrap();
    drop(leaving);
    orthrus_devcluster::wait_until(Duration::from_secs(5), "one blocked", || {
        let n = blocked(&mut admin);
        if n == "1" { Ok(()) } else { Err(n) }
    })
    .unwrap();
    assert_eq!(send(&mut admin, &["CLIENT", "UNPAUSE"]), "+OK\r\n");
    assert_eq!(reply_text(&mut held), "+OK\r\n");
    assert_eq!(blocked(&mut admin), "0");
}

/// CLIENT PAUSE WRITE holds what Redis holds besides writes: commands that
/// may replicate (PFCOUNT, PUBLISH, EVAL without `no-writes`) and an EXEC
/// whose queue writes; a script declaring `no-writes` and reads go on.
#[test]
fn pause_write_holds_what_may_replicate() {
    let cluster = cluster(1, 0);
    let proxy = Proxy::start(&cluster.seeds(), &[]);
    let mut admin = proxy.stream();
    let mut tx = proxy.stream();
    assert_eq!(send(&mut tx, &["MULTI"]), "+OK\r\n");
    assert_eq!(send(&mut tx, &["SET", "pause:tx", "1"]), "+QUEUED\r\n");
    assert_eq!(
        send(&mut admin, &["CLIENT", "PAUSE", "20000", "WRITE"]),
        "+OK\r\n"
    );
    let held = |args: &[&str]| {
        let mut s = proxy.stream();
        s.write_all(&encode(args)).expect("send");
        s.set_read_timeout(Some(Duration::from_millis(300)))
            .expect("timeout");
        let mut buf = [0u8; 64];
        let held = std::io::Read::read(&mut s, &mut buf).is_err();
        (held, s)
    };
    let mut waiting = Vec::new();
    for args in [
        &["PFCOUNT", "pause:h"][..],
        &["PUBLISH", "pause:c", "m"],
        &["EVAL", "return 1", "0"],
    ] {
        let (was_held, s) = held(args);
        assert!(was_held, "{args:?} went through the pause");
        waiting.push(s);
    }
    let (was_held, _) = held(&["EVAL", "#!lua flags=no-writes\nreturn 1", "0"]);
    assert!(!was_held, "a no-writes script is not held");
    let (was_held, _) = held(&["GET", "pause:tx"]);
    assert!(!was_held, "reads are not held");
    tx.write_all(&encode(&["EXEC"])).expect("send");
    tx.set_read_timeout(Some(Duration::from_millis(300)))
        .expect("timeout");
    let mut buf = [0u8; 64];
    assert!(
        std::io::Read::read(&mut tx, &mut buf).is_err(),
        "the EXEC of a write was not held"
    );
    assert_eq!(send(&mut admin, &["CLIENT", "UNPAUSE"]), "+OK\r\n");
    tx.set_read_timeout(None).expect("timeout");
    assert_eq!(reply_text(&mut tx), "*1\r\n+OK\r\n");
}

/// Scripts and functions that declare `no-writes` go on during CLIENT
/// PAUSE WRITE, however they are called: an EVALSHA of a script loaded
/// through orthrus, an FCALL of a function loaded with the flag. An FCALL
/// of a function without it is held.
#[test]
fn pause_write_lets_declared_read_only_calls_through() {
    let cluster = cluster(3, 0);
    let proxy = Proxy::start(&cluster.seeds(), &[]);
    let mut admin = proxy.stream();
    let library = "#!lua name=pauselib\n\
        redis.register_function{\n\
            function_name='pause_ro',\n\
            callback=function() return 'hello' end,\n\
            flags={'no-writes'}\n\
        }\n\
        redis.register_function('pause_rw', function() return 'written' end)\n";
    assert_eq!(
        send(&mut admin, &["FUNCTION", "LOAD", "REPLACE", library]),
        "$8\r\npauselib\r\n"
    );
    let sha = send(
        &mut admin,
        &["SCRIPT", "LOAD", "#!lua flags=no-writes\nreturn 2"],
    );
    let sha = sha.lines().nth(1).expect("a sha").to_owned();
    assert_eq!(
        send(&mut admin, &["CLIENT", "PAUSE", "20000", "WRITE"]),
        "+OK\r\n"
    );
    let reply_within = |args: &[&str]| {
        let mut s = proxy.stream();
        s.write_all(&encode(args)).expect("send");
        s.set_read_timeout(Some(Duration::from_millis(500)))
            .expect("timeout");
        let mut buf = [0u8; 64];
        let n = std::io::Read::read(&mut s, &mut buf).ok()?;
        Some((String::from_utf8_lossy(&buf[..n]).into_owned(), s))
    };
    let (reply, _) =
        reply_within(&["FCALL", "pause_ro", "0"]).expect("FCALL of a no-writes function held");
    assert_eq!(reply, "$5\r\nhello\r\n");
    let (reply, _) =
        reply_within(&["EVALSHA", &sha, "0"]).expect("EVALSHA of a no-writes script held");
    assert_eq!(reply, ":2\r\n");
    assert!(
        reply_within(&["FCALL", "pause_rw", "0"]).is_none(),
        "an FCALL of a function that may write went through the pause"
    );
    assert_eq!(send(&mut admin, &["CLIENT", "UNPAUSE"]), "+OK\r\n");
    assert_eq!(
        send(&mut admin, &["FUNCTION", "DELETE", "pauselib"]),
        "+OK\r\n"
    );
}

/// A write held by CLIENT PAUSE for longer than the request timeout still
/// gets its full deadline once the pause ends: its slot moved meanwhile,
/// behind orthrus's back, so it needs a MOVED and a second try.
#[test]
fn a_held_write_has_its_whole_deadline_after_the_pause() {
    let cluster = cluster(2, 0);
    let proxy = Proxy::start_env(
        &cluster.seeds(),
        &[],
        &[
            ("ORTHRUS_BACKEND__REQUEST_TIMEOUT_MS", "500"),
            // The slot map stays stale until the MOVED says otherwise.
            ("ORTHRUS_CLUSTER__REFRESH_INTERVAL_MS", "600000"),
        ],
    );
    let key = "pausemove:k";
    let slot = Slot::for_key(key.as_bytes()).get();
    let mut admin = proxy.stream();
    let mut writer = proxy.stream();
    assert_eq!(send(&mut writer, &["SET", key, "1"]), "+OK\r\n");

    assert_eq!(
        send(&mut admin, &["CLIENT", "PAUSE", "1500", "WRITE"]),
        "+OK\r\n"
    );
    writer.write_all(&encode(&["SET", key, "2"])).expect("send");
    let owner = cluster.master_of_slot(slot).unwrap();
    let other = cluster
        .masters()
        .unwrap()
        .into_iter()
        .find(|&m| m != owner)
        .unwrap();
    cluster.move_slot(slot, other).unwrap();
    assert_eq!(reply_text(&mut writer), "+OK\r\n");
    assert_eq!(send(&mut writer, &["GET", key]), "$1\r\n2\r\n");
}
