//! Client-side caching (CLIENT TRACKING) through orthrus in front of three
//! masters: invalidations for keys on every master in the default, BCAST,
//! OPTIN, OPTOUT and NOLOOP modes, RESP2 redirection to a subscriber,
//! CLIENT TRACKINGINFO/GETREDIR, and the tracking connections on the
//! nodes (closed by OFF and RESET, a lost one invalidating everything).

mod common;

use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{
    Proxy, cluster, encode, encode_bytes, owner_of, reply_text as reply, send, tracking_conns,
};
use orthrus_devcluster::{Cluster, Conn, Value, wait_until};

/// One key per master, each owned by a different master.
fn keys_on_every_master(cluster: &Cluster, prefix: &str) -> Vec<String> {
    let masters = cluster.masters().expect("masters");
    let mut keys: Vec<Option<String>> = vec![None; masters.len()];
    for i in 0.. {
        let key = format!("{prefix}{i}");
        let owner = owner_of(cluster, key.as_bytes());
        if let Some(pos) = masters.iter().position(|&m| m == owner) {
            keys[pos].get_or_insert(key);
        }
        if keys.iter().all(Option::is_some) {
            break;
        }
    }
    keys.into_iter().flatten().collect()
}

/// The RESP3 push invalidating `key`.
fn invalidated(key: &str) -> String {
    format!(
        ">2\r\n$10\r\ninvalidate\r\n*1\r\n${}\r\n{key}\r\n",
        key.len()
    )
}

/// A RESP3 connection with `CLIENT TRACKING ON` and `options`.
fn tracking3(proxy: &Proxy, options: &[&str]) -> TcpStream {
    let mut s = proxy.stream();
    assert!(send(&mut s, &["HELLO", "3"]).starts_with('%'));
    let mut args = vec!["CLIENT", "TRACKING", "ON"];
    args.extend_from_slice(options);
    assert_eq!(send(&mut s, &args), "+OK\r\n");
    s
}

fn wait_tracking_conns(cluster: &Cluster, masters: &[usize], want: usize) {
    wait_until(Duration::from_secs(10), "tracking connections", || {
        let counts: Vec<usize> = masters
            .iter()
            .map(|&m| tracking_conns(cluster, m))
            .collect();
        if counts.iter().all(|&c| c == want) {
            Ok(())
        } else {
            Err(format!("tracking connections per master: {counts:?}"))
        }
    })
    .expect("tracking connections");
}

#[test]
fn default_mode_invalidates_what_the_client_read_on_every_master() {
    let cluster = cluster(3, 0);
    let proxy = Proxy::start(&cluster.seeds(), &[]);
    let keys = keys_on_every_master(&cluster, "cache:");
    let mut writer = proxy.stream();
    let mut reader = tracking3(&proxy, &[]);
    for key in &keys {
        send(&mut writer, &["SET", key, "1"]);
        assert_eq!(send(&mut reader, &["GET", key]), "$1\r\n1\r\n");
    }
    // A key not read is not tracked: its write sends nothing.
    send(&mut writer, &["SET", "cache:unread", "1"]);
    for key in &keys {
        send(&mut writer, &["SET", key, "2"]);
        assert_eq!(reply(&mut reader), invalidated(key));
    }
    // Once invalidated, a key is tracked again only when read again.
    send(&mut writer, &["SET", &keys[0], "3"]);
    assert_eq!(send(&mut reader, &["PING"]), "+PONG\r\n");
    // The client's own write invalidates what it read, after its reply.
    send(&mut reader, &["GET", &keys[1]]);
    assert_eq!(send(&mut reader, &["SET", &keys[1], "4"]), "+OK\r\n");
    assert_eq!(reply(&mut reader), invalidated(&keys[1]));
    assert_eq!(proxy.info_field("tracking_clients"), 1);
}

#[test]
fn bcast_prefixes_and_noloop() {
    let cluster = cluster(3, 0);
    let proxy = Proxy::start(&cluster.seeds(), &[]);
    let keys = keys_on_every_master(&cluster, "user:");
    let mut writer = proxy.stream();
    let mut reader = tracking3(&proxy, &["BCAST", "PREFIX", "user:", "NOLOOP"]);
    for key in &keys {
        // Not read, and not under the prefix: nothing.
        send(&mut writer, &["SET", &format!("other:{key}"), "1"]);
        send(&mut writer, &["SET", key, "1"]);
        assert_eq!(reply(&mut reader), invalidated(key));
        // NOLOOP: the client's own write sends nothing.
        assert_eq!(send(&mut reader, &["SET", key, "2"]), "+OK\r\n");
    }
    assert_eq!(send(&mut reader, &["PING"]), "+PONG\r\n");
    let info = send(&mut reader, &["CLIENT", "TRACKINGINFO"]);
    assert!(
        info.contains("on\r\n$5\r\nbcast\r\n$6\r\nnoloop") && info.contains("user:"),
        "{info}"
    );
    // Adding a prefix reaches every master; overlapping ones are refused.
    assert_eq!(
        send(
            &mut reader,
            &["CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "item:"]
        ),
        "+OK\r\n"
    );
    let refused = send(
        &mut reader,
        &["CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "us"],
    );
    assert!(
        refused.starts_with("-ERR Prefix 'us' overlaps with an existing prefix 'user:'"),
        "{refused}"
    );
    for key in keys_on_every_master(&cluster, "item:") {
        send(&mut writer, &["SET", &key, "1"]);
        assert_eq!(reply(&mut reader), invalidated(&key));
    }
}

#[test]
fn optin_and_optout_follow_client_caching() {
    let cluster = cluster(3, 0);
    let proxy = Proxy::start(&cluster.seeds(), &[]);
    let keys = keys_on_every_master(&cluster, "opt:");
    let mut writer = proxy.stream();
    let mut optin = tracking3(&proxy, &["OPTIN"]);
    for key in &keys {
        send(&mut writer, &["SET", key, "1"]);
        send(&mut optin, &["GET", key]); // not cached: no CACHING yes
        assert_eq!(send(&mut optin, &["CLIENT", "CACHING", "YES"]), "+OK\r\n");
        let info = send(&mut optin, &["CLIENT", "TRACKINGINFO"]);
        assert!(info.contains("caching-yes"), "{info}");
        send(&mut optin, &["GET", &format!("{key}:cached")]);
    }
    for key in &keys {
        send(&mut writer, &["SET", key, "2"]);
        let cached = format!("{key}:cached");
        send(&mut writer, &["SET", &cached, "2"]);
        assert_eq!(reply(&mut optin), invalidated(&cached));
    }
    let wrong = send(&mut optin, &["CLIENT", "CACHING", "NO"]);
    assert_eq!(
        wrong,
        "-ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode.\r\n"
    );

    let mut optout = tracking3(&proxy, &["OPTOUT"]);
    for key in &keys {
        assert_eq!(send(&mut optout, &["CLIENT", "CACHING", "NO"]), "+OK\r\n");
        send(&mut optout, &["GET", key]); // not cached
        send(&mut optout, &["GET", &format!("{key}:cached")]);
    }
    for key in &keys {
        send(&mut writer, &["SET", key, "3"]);
        let cached = format!("{key}:cached");
        send(&mut writer, &["SET", &cached, "3"]);
        assert_eq!(reply(&mut optout), invalidated(&cached));
    }
}

#[test]
fn resp2_redirects_to_a_subscriber_until_it_leaves() {
    let cluster = cluster(3, 0);
    let proxy = Proxy::start(&cluster.seeds(), &[]);
    let keys = keys_on_every_master(&cluster, "r2:");
    let mut writer = proxy.stream();
    let mut target = proxy.stream();
    let id = send(&mut target, &["CLIENT", "ID"]);
    let id = id.trim_start_matches(':').trim_end();
    send(&mut target, &["SUBSCRIBE", "__redis__:invalidate"]);

    let mut tracker = proxy.stream();
    let unknown = send(
        &mut tracker,
        &["CLIENT", "TRACKING", "ON", "REDIRECT", "999999"],
    );
    assert_eq!(
        unknown,
        "-ERR The client ID you want redirect to does not exist\r\n"
    );
    assert_eq!(
        send(&mut tracker, &["CLIENT", "TRACKING", "ON", "REDIRECT", id]),
        "+OK\r\n"
    );
    assert_eq!(
        send(&mut tracker, &["CLIENT", "GETREDIR"]),
        format!(":{id}\r\n")
    );
    for key in &keys {
        send(&mut writer, &["SET", key, "1"]);
        assert_eq!(send(&mut tracker, &["GET", key]), "$1\r\n1\r\n");
    }
    for key in &keys {
        send(&mut writer, &["SET", key, "2"]);
        assert_eq!(
            reply(&mut target),
            format!(
                "*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n*1\r\n${}\r\n{key}\r\n",
                key.len()
            )
        );
    }
    // The redirect client leaves: the next invalidation finds it gone.
    drop(target);
    wait_until(Duration::from_secs(10), "the target to leave", || {
        let list = send(&mut writer, &["CLIENT", "LIST", "ID", id]);
        if list.contains(&format!("id={id} ")) {
            Err("still listed".into())
        } else {
            Ok(())
        }
    })
    .expect("leave");
    send(&mut tracker, &["GET", &keys[0]]);
    send(&mut writer, &["SET", &keys[0], "3"]);
    wait_until(Duration::from_secs(10), "a broken redirect", || {
        let info = send(&mut tracker, &["CLIENT", "TRACKINGINFO"]);
        if info.contains("broken_redirect") {
            Ok(())
        } else {
            Err(info)
        }
    })
    .expect("broken redirect");
}

#[test]
fn trackinginfo_getredir_and_errors_as_redis() {
    let cluster = cluster(3, 0);
    let proxy = Proxy::start(&cluster.seeds(), &[]);
    let mut c = proxy.stream();
    assert_eq!(send(&mut c, &["CLIENT", "GETREDIR"]), ":-1\r\n");
    assert_eq!(
        send(&mut c, &["CLIENT", "TRACKINGINFO"]),
        "*6\r\n$5\r\nflags\r\n*1\r\n$3\r\noff\r\n$8\r\nredirect\r\n:-1\r\n$8\r\nprefixes\r\n*0\r\n"
    );
    assert!(
        send(&mut c, &["CLIENT", "CACHING", "YES"]).starts_with(
            "-ERR CLIENT CACHING can be called only when the client is in tracking mode"
        )
    );
    assert_eq!(
        send(&mut c, &["CLIENT", "TRACKING", "ON", "PREFIX", "a"]),
        "-ERR PREFIX option requires BCAST mode to be enabled\r\n"
    );
    assert_eq!(
        send(&mut c, &["CLIENT", "TRACKING", "ON", "OPTIN", "OPTOUT"]),
        "-ERR You can't specify both OPTIN mode and OPTOUT mode\r\n"
    );
    assert_eq!(
        send(&mut c, &["CLIENT", "TRACKING", "MAYBE"]),
        "-ERR syntax error\r\n"
    );
    assert_eq!(
        send(&mut c, &["CLIENT", "TRACKING", "ON", "NOLOOP"]),
        "+OK\r\n"
    );
    assert_eq!(send(&mut c, &["CLIENT", "GETREDIR"]), ":0\r\n");
    assert_eq!(
        send(&mut c, &["CLIENT", "TRACKINGINFO"]),
        "*6\r\n$5\r\nflags\r\n*2\r\n$2\r\non\r\n$6\r\nnoloop\r\n$8\r\nredirect\r\n:0\r\n$8\r\nprefixes\r\n*0\r\n"
    );
    assert_eq!(
        send(&mut c, &["CLIENT", "TRACKING", "ON", "BCAST"]),
        "-ERR You can't switch BCAST mode on/off before disabling tracking for this client, and then re-enabling it with a different mode.\r\n"
    );
    assert_eq!(send(&mut c, &["CLIENT", "TRACKING", "OFF"]), "+OK\r\n");
    assert_eq!(send(&mut c, &["CLIENT", "GETREDIR"]), ":-1\r\n");
    // RESP3: a map whose flags are a set.
    send(&mut c, &["HELLO", "3"]);
    assert_eq!(
        send(&mut c, &["CLIENT", "TRACKING", "ON", "BCAST"]),
        "+OK\r\n"
    );
    assert_eq!(
        send(&mut c, &["CLIENT", "TRACKINGINFO"]),
        "%3\r\n$5\r\nflags\r\n~2\r\n$2\r\non\r\n$5\r\nbcast\r\n$8\r\nredirect\r\n:0\r\n$8\r\nprefixes\r\n*1\r\n$0\r\n\r\n"
    );
}

#[test]
fn off_and_reset_close_the_connections_and_a_lost_one_invalidates_everything() {
    let cluster = cluster(3, 0);
    let proxy = Proxy::start(&cluster.seeds(), &[]);
    let masters = cluster.masters().expect("masters");
    let keys = keys_on_every_master(&cluster, "conn:");
    let mut writer = proxy.stream();

    // BCAST holds a tracking connection on every master from the +OK on.
    let mut c = tracking3(&proxy, &["BCAST"]);
    wait_tracking_conns(&cluster, &masters, 1);
    assert_eq!(send(&mut c, &["CLIENT", "TRACKING", "OFF"]), "+OK\r\n");
    wait_tracking_conns(&cluster, &masters, 0);
    assert_eq!(proxy.info_field("tracking_clients"), 0);

    // The default mode opens one where the client sends commands.
    assert_eq!(send(&mut c, &["CLIENT", "TRACKING", "ON"]), "+OK\r\n");
    for key in &keys {
        send(&mut c, &["GET", key]);
    }
    wait_tracking_conns(&cluster, &masters, 1);
    assert_eq!(send(&mut c, &["RESET"]), "+RESET\r\n");
    wait_tracking_conns(&cluster, &masters, 0);

    // A tracking connection killed on its node: everything is invalidated,
    // and the next command opens it again.
    let mut c = tracking3(&proxy, &[]);
    let key = &keys[0];
    let owner = owner_of(&cluster, key.as_bytes());
    send(&mut c, &["GET", key]);
    let mut node = Conn::connect(cluster.nodes()[owner].addr()).expect("node");
    let killed = node
        .cmd(&["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"])
        .expect("CLIENT KILL");
    assert!(matches!(killed, Value::Integer(n) if n >= 1), "{killed:?}");
    assert_eq!(reply(&mut c), ">2\r\n$10\r\ninvalidate\r\n_\r\n");
    wait_until(
        Duration::from_secs(10),
        "the key to be read again",
        || match send(&mut c, &["GET", key]) {
            r if r.starts_with('-') => Err(r),
            _ => Ok(()),
        },
    )
    .expect("read again");
    // The writer's connections to the node were killed too: its SET may
    // meet the lost connection first.
    wait_until(Duration::from_secs(10), "the writer's SET", || {
        match send(&mut writer, &["SET", key, "after"]) {
            r if r == "+OK\r\n" => Ok(()),
            r => Err(r),
        }
    })
    .expect("SET");
    assert_eq!(reply(&mut c), invalidated(key));
}

/// Invalidations arriving while a transaction's replies come in (a large
/// EXEC the node reads in several pieces, another client writing to the
/// node all the while) are pushes, not replies: every EXEC gets its own
/// array, 1,000 times.
#[test]
fn invalidations_during_exec_are_not_taken_for_its_replies() {
    let cluster = cluster(3, 0);
    let proxy = Proxy::start(&cluster.seeds(), &[]);
    let node = cluster.nodes()[owner_of(&cluster, b"{tx}")].addr();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut direct = Conn::connect(node).expect("node");
            let started = Instant::now();
            let set: Vec<Vec<u8>> = vec![b"SET".to_vec(), b"{tx}w".to_vec(), b"1".to_vec()];
            let batch = vec![set; 16];
            while !stop.load(Ordering::Relaxed) && started.elapsed() < Duration::from_secs(120) {
                direct.pipeline(&batch).expect("writes");
            }
        })
    };
    let mut c = Conn::connect(proxy.addr).expect("proxy");
    c.cmd_ok(&["HELLO", "3"]).expect("HELLO 3");
    c.cmd_ok(&["CLIENT", "TRACKING", "ON", "BCAST"])
        .expect("tracking");
    let value = vec![b'v'; 8 * 1024];
    let mut tx = encode(&["MULTI"]);
    for i in 0..8 {
        tx.extend(encode_bytes(&[
            b"SET",
            format!("{{tx}}{i}").as_bytes(),
            &value,
        ]));
    }
    tx.extend(encode(&["INCR", "{tx}n"]));
    tx.extend(encode(&["EXEC"]));
    // Replies only: the invalidations in between are skipped.
    let next = |c: &mut Conn| loop {
        match c.read_value().expect("reply") {
            Value::Push(_) => continue,
            other => return other,
        }
    };
    for n in 1..=1000 {
        c.send_raw(&tx).expect("send");
        assert_eq!(next(&mut c), Value::Simple("OK".into()), "MULTI, round {n}");
        for _ in 0..9 {
            assert_eq!(next(&mut c), Value::Simple("QUEUED".into()), "round {n}");
        }
        let mut want = vec![Value::Simple("OK".into()); 8];
        want.push(Value::Integer(n));
        assert_eq!(next(&mut c), Value::Array(want), "EXEC, round {n}");
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().expect("writer");
}

/// `CLIENT TRACKING ON BCAST` with these prefixes.
fn bcast_with(prefixes: &[String]) -> Vec<&str> {
    let mut args = vec!["CLIENT", "TRACKING", "ON", "BCAST"];
    for p in prefixes {
        args.extend(["PREFIX", p.as_str()]);
    }
    args
}

#[test]
fn tracking_prefixes_are_capped_in_count_and_bytes() {
    let cluster = cluster(3, 0);
    let proxy = Proxy::start(&cluster.seeds(), &[]);
    // The default cap: 1,000 prefixes, not 40,000 sent to every master.
    let many: Vec<String> = (0..40_000).map(|i| format!("p{i}:")).collect();
    let mut c = proxy.stream();
    assert_eq!(
        send(&mut c, &bcast_with(&many)),
        "-ERR orthrus: at most 1000 tracking prefixes per client (client.max_tracking_prefixes); this would make 40000\r\n"
    );
    let info = send(&mut c, &["CLIENT", "TRACKINGINFO"]);
    assert!(info.contains("flags\r\n*1\r\n$3\r\noff\r\n"), "{info}");
    drop(c);

    let proxy = Proxy::spawn(
        &cluster.seeds(),
        &[],
        &[
            ("ORTHRUS_CLIENT__MAX_TRACKING_PREFIXES", "3"),
            ("ORTHRUS_CLIENT__MAX_TRACKING_PREFIX_BYTES", "16"),
        ],
    );
    proxy.wait_ready(Duration::from_secs(20));
    let mut c = proxy.stream();
    let two: Vec<String> = vec!["a:".into(), "b:".into()];
    assert_eq!(send(&mut c, &bcast_with(&two)), "+OK\r\n");
    // Counted with those the client has already.
    let more: Vec<String> = vec!["c:".into(), "d:".into()];
    assert_eq!(
        send(&mut c, &bcast_with(&more)),
        "-ERR orthrus: at most 3 tracking prefixes per client (client.max_tracking_prefixes); this would make 4\r\n"
    );
    let long: Vec<String> = vec!["a-long-prefix:".into()];
    assert_eq!(
        send(&mut c, &bcast_with(&long)),
        "-ERR orthrus: at most 16 bytes of tracking prefixes per client (client.max_tracking_prefix_bytes); this would make 18\r\n"
    );
    assert_eq!(send(&mut c, &bcast_with(&more[..1])), "+OK\r\n");
    let info = send(&mut c, &["CLIENT", "TRACKINGINFO"]);
    assert!(
        info.contains("a:") && info.contains("b:") && info.contains("c:"),
        "{info}"
    );
}

/// A user's key rules bound the keys its invalidations name: a BCAST
/// client without a prefix hears of writes to every key, and a user with
/// `~app:*` is not told the names of the others (Redis filters BCAST
/// invalidations by the subscriber's read permission since 2026; 7.0 sent
/// them all). An invalidation left with no key is not sent; AUTH as a
/// user who may read everything widens it again.
#[test]
fn invalidations_name_only_keys_the_user_may_read() {
    let cluster = cluster(3, 0);
    let proxy = Proxy::spawn(
        &cluster.seeds(),
        &[],
        &[
            (
                "ORTHRUS_CLIENT__USERS__APP__RULES",
                "on >app-pw ~app:* &* +@all",
            ),
            (
                "ORTHRUS_CLIENT__USERS__ALL__RULES",
                "on >all-pw ~* &* +@all",
            ),
        ],
    );
    let mut writer = proxy.stream();
    assert_eq!(send(&mut writer, &["AUTH", "all", "all-pw"]), "+OK\r\n");
    wait_until(Duration::from_secs(20), "orthrus ready", || {
        let got = send(&mut writer, &["GET", "secret:ready"]);
        if got.starts_with('-') {
            Err(got)
        } else {
            Ok(())
        }
    })
    .expect("ready");
    let mut app = proxy.stream();
    assert!(send(&mut app, &["HELLO", "3", "AUTH", "app", "app-pw"]).starts_with('%'));
    assert_eq!(
        send(&mut app, &["CLIENT", "TRACKING", "ON", "BCAST"]),
        "+OK\r\n"
    );
    let secrets = keys_on_every_master(&cluster, "secret:");
    for secret in &secrets {
        // Three writes to one master (one link, in order): a secret key
        // alone, then an MSET of a secret and an app key of its slot (one
        // invalidation naming both), then an app key.
        let (hidden, told) = (format!("{{{secret}}}:x"), format!("app:{{{secret}}}"));
        let key = format!("app:{{{secret}}}:2");
        send(&mut writer, &["SET", secret, "1"]);
        send(&mut writer, &["MSET", &hidden, "1", &told, "1"]);
        send(&mut writer, &["SET", &key, "1"]);
        assert_eq!(reply(&mut app), invalidated(&told));
        assert_eq!(reply(&mut app), invalidated(&key));
    }
    assert_eq!(send(&mut app, &["PING"]), "+PONG\r\n");
    assert_eq!(send(&mut app, &["AUTH", "all", "all-pw"]), "+OK\r\n");
    send(&mut writer, &["SET", &secrets[0], "2"]);
    assert_eq!(reply(&mut app), invalidated(&secrets[0]));
}

/// A route that cuts its prefix (`remove_prefix`) sends its keys to the
/// node without it, and the node would invalidate them so: a client
/// caching `cut:k` would be told `k`, and its copy would stay stale. A
/// tracking client is refused that route's keys (reads and writes, which
/// reach no node) and BCAST is refused while such a route exists; the
/// keys of other routes, on the same upstream, are tracked and
/// invalidated by their names.
#[test]
fn a_route_that_cuts_its_prefix_is_refused_to_tracking_clients() {
    let a = cluster(3, 0);
    let b = cluster(3, 0);
    let config = common::routes::config_file(
        "tracking-cut",
        &format!(
            "[upstreams.b]\nseeds = [\"{}\"]\n\
             [[routes]]\nprefix = \"cut:\"\nupstream = \"b\"\nremove_prefix = true\n\
             [[routes]]\nprefix = \"user:\"\nupstream = \"b\"\n",
            b.seeds()[0]
        ),
    );
    let proxy = common::routes::start_routed(
        &a.seeds(),
        &["--config", config.0.to_str().unwrap(), "--threads", "1"],
    );
    let mut writer = proxy.stream();
    for key in ["cut:k", "user:k", "plain:k"] {
        assert_eq!(send(&mut writer, &["SET", key, "1"]), "+OK\r\n");
    }
    let mut c = tracking3(&proxy, &[]);
    for refused in [vec!["GET", "cut:k"], vec!["SET", "cut:new", "1"]] {
        let answer = send(&mut c, &refused);
        assert!(
            answer.starts_with("-ERR orthrus: keys of a route with remove_prefix"),
            "{refused:?}: {answer}"
        );
    }
    let on_b = |key: &str| {
        let owner = owner_of(&b, key.as_bytes());
        b.nodes()[owner].cmd(&["EXISTS", key]).unwrap() == Value::Integer(1)
    };
    assert!(on_b("k") && !on_b("new") && !on_b("cut:new"));
    for key in ["user:k", "plain:k"] {
        assert_eq!(send(&mut c, &["GET", key]), "$1\r\n1\r\n");
        assert_eq!(send(&mut writer, &["SET", key, "2"]), "+OK\r\n");
        assert_eq!(reply(&mut c), invalidated(key));
    }
    // Without tracking the route works as ever.
    assert_eq!(send(&mut writer, &["GET", "cut:k"]), "$1\r\n1\r\n");

    let mut bcast = proxy.stream();
    assert!(send(&mut bcast, &["HELLO", "3"]).starts_with('%'));
    let refused = send(&mut bcast, &["CLIENT", "TRACKING", "ON", "BCAST"]);
    assert!(
        refused.starts_with(
            "-ERR orthrus: CLIENT TRACKING BCAST cannot be used while a route has remove_prefix"
        ),
        "{refused}"
    );
    let info = send(&mut bcast, &["CLIENT", "TRACKINGINFO"]);
    assert!(
        info.contains("$5\r\nflags\r\n~1\r\n$3\r\noff\r\n"),
        "{info}"
    );
}
