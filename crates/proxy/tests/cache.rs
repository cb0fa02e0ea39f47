//! The reply cache (`[cache] enabled`): hot reads answered without the
//! cluster, and never an answer older than what the client wrote or the
//! nodes invalidated.

mod common;

use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{Proxy, cluster, send};
use orthrus_devcluster::Cluster;

fn bulk(v: &str) -> String {
    format!("${}\r\n{v}\r\n", v.len())
}

fn cached(cluster: &Cluster) -> Proxy {
    Proxy::start_env(
        &cluster.seeds(),
        &["--threads", "2"],
        &[("ORTHRUS_CACHE__ENABLED", "true")],
    )
}

/// GET calls the node that owns `key` has run.
fn node_gets(cluster: &Cluster, key: &str) -> u64 {
    let owner = common::owner_of(cluster, key.as_bytes());
    let info = cluster.nodes()[owner]
        .cmd(&["INFO", "commandstats"])
        .expect("INFO");
    let text = String::from_utf8_lossy(info.as_bytes().unwrap_or_default()).into_owned();
    text.lines()
        .find_map(|l| l.strip_prefix("cmdstat_get:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Reads `key` through `s` until it answers `want` (the nodes'
/// invalidations travel on their own connections), at most 2 s.
fn until(s: &mut TcpStream, key: &str, want: &str) -> Duration {
    let start = Instant::now();
    loop {
        let got = send(s, &["GET", key]);
        if got == want {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "GET {key}: {got:?}, not {want:?}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn hot_reads_are_served_from_memory_and_every_write_is_seen() {
    let cluster = cluster(3, 0);
    let proxy = cached(&cluster);
    let mut s = proxy.stream();
    assert_eq!(send(&mut s, &["SET", "hot", "v1"]), "+OK\r\n");
    let before = node_gets(&cluster, "hot");
    for _ in 0..20 {
        assert_eq!(send(&mut s, &["GET", "hot"]), bulk("v1"));
    }
    // The first four reads are counted, the fifth fills, the rest are
    // hits (a topology refresh in between may end the entry once: one more
    // fill).
    let at_node = node_gets(&cluster, "hot") - before;
    let info =
        String::from_utf8_lossy(&proxy.raw_command(&["INFO", "cache"]).unwrap()).into_owned();
    assert!(
        (5..=6).contains(&at_node),
        "{at_node} GETs at the node; {info}"
    );
    assert!(proxy.info_field("cache_hits") >= 14, "{info}");
    assert_eq!(
        proxy.info_field("cache_fills") + 4,
        at_node as i64,
        "{info}"
    );

    // A write through orthrus is read back at once, by the writer and by
    // another client.
    assert_eq!(send(&mut s, &["SET", "hot", "v2"]), "+OK\r\n");
    assert_eq!(send(&mut s, &["GET", "hot"]), bulk("v2"));
    let mut other = proxy.stream();
    assert_eq!(send(&mut other, &["GET", "hot"]), bulk("v2"));
    // Pipelined: the write, then the read, on one connection.
    for i in 0..50 {
        let v = format!("p{i}");
        let mut both = common::encode(&["SET", "hot", &v]);
        both.extend(common::encode(&["GET", "hot"]));
        std::io::Write::write_all(&mut s, &both).unwrap();
        assert_eq!(common::reply_text(&mut s), "+OK\r\n");
        assert_eq!(common::reply_text(&mut s), bulk(&v));
    }

    // A write that bypasses orthrus: the node's invalidation ends the entry.
    for _ in 0..8 {
        send(&mut s, &["GET", "hot"]);
    }
    let owner = common::owner_of(&cluster, b"hot");
    let mut direct = TcpStream::connect(cluster.nodes()[owner].addr()).unwrap();
    assert_eq!(send(&mut direct, &["SET", "hot", "direct"]), "+OK\r\n");
    let took = until(&mut s, "hot", &bulk("direct"));
    eprintln!("a write straight to the node was seen after {took:?}");
    assert!(proxy.info_field("cache_invalidations") >= 1);
    // FLUSHALL on the node: everything goes.
    for _ in 0..8 {
        send(&mut s, &["GET", "hot"]);
    }
    assert_eq!(send(&mut direct, &["FLUSHALL"]), "+OK\r\n");
    until(&mut s, "hot", "$-1\r\n");
    // A key that expires on the node.
    assert_eq!(send(&mut s, &["SET", "brief", "x", "PX", "300"]), "+OK\r\n");
    for _ in 0..8 {
        assert_eq!(send(&mut s, &["GET", "brief"]), bulk("x"));
    }
    std::thread::sleep(Duration::from_millis(300));
    let took = until(&mut s, "brief", "$-1\r\n");
    eprintln!("an expired key was gone {took:?} after its expiry");
}

#[test]
fn replies_are_kept_per_protocol_and_transactions_go_to_the_nodes() {
    let cluster = cluster(3, 0);
    let proxy = cached(&cluster);
    let mut two = proxy.stream();
    let mut three = proxy.stream();
    assert!(send(&mut three, &["HELLO", "3"]).starts_with('%'));
    assert_eq!(send(&mut two, &["HSET", "h", "f", "1"]), ":1\r\n");
    for _ in 0..8 {
        assert_eq!(
            send(&mut two, &["HGETALL", "h"]),
            "*2\r\n$1\r\nf\r\n$1\r\n1\r\n"
        );
        assert_eq!(
            send(&mut three, &["HGETALL", "h"]),
            "%1\r\n$1\r\nf\r\n$1\r\n1\r\n"
        );
    }
    assert!(proxy.info_field("cache_hits") >= 6);
    // MULTI ... EXEC: its reads are the node's, its writes seen after it.
    assert_eq!(send(&mut two, &["MULTI"]), "+OK\r\n");
    assert_eq!(send(&mut two, &["HSET", "h", "f", "2"]), "+QUEUED\r\n");
    assert_eq!(send(&mut two, &["HGETALL", "h"]), "+QUEUED\r\n");
    assert_eq!(
        send(&mut two, &["EXEC"]),
        "*2\r\n:0\r\n*2\r\n$1\r\nf\r\n$1\r\n2\r\n"
    );
    assert_eq!(
        send(&mut three, &["HGETALL", "h"]),
        "%1\r\n$1\r\nf\r\n$1\r\n2\r\n"
    );
}

#[test]
fn a_lost_tracking_connection_drops_everything_cached() {
    let cluster = cluster(3, 0);
    let proxy = cached(&cluster);
    let mut s = proxy.stream();
    assert_eq!(send(&mut s, &["SET", "k", "old"]), "+OK\r\n");
    for _ in 0..8 {
        assert_eq!(send(&mut s, &["GET", "k"]), bulk("old"));
    }
    let owner = common::owner_of(&cluster, b"k");
    let node = &cluster.nodes()[owner];
    // The tracking connections orthrus holds to the key's node: killed
    // (what they would say is no longer heard), then a write straight to
    // the node.
    let list = node.cmd(&["CLIENT", "LIST"]).unwrap();
    let list = String::from_utf8_lossy(list.as_bytes().unwrap_or_default()).into_owned();
    let mut killed = 0;
    for line in list.lines().filter(|l| l.contains("flags=t")) {
        let id = line.split(' ').find_map(|f| f.strip_prefix("id=")).unwrap();
        node.cmd(&["CLIENT", "KILL", "ID", id]).unwrap();
        killed += 1;
    }
    assert!(killed >= 1, "{list}");
    let mut direct = TcpStream::connect(node.addr()).unwrap();
    assert_eq!(send(&mut direct, &["SET", "k", "new"]), "+OK\r\n");
    until(&mut s, "k", &bulk("new"));
}

#[test]
fn off_by_default_and_said_so() {
    let cluster = cluster(3, 0);
    let proxy = Proxy::start(&cluster.seeds(), &[]);
    let mut s = proxy.stream();
    assert_eq!(send(&mut s, &["SET", "k", "v"]), "+OK\r\n");
    for _ in 0..8 {
        assert_eq!(send(&mut s, &["GET", "k"]), bulk("v"));
    }
    assert_eq!(proxy.info_field("cache_enabled"), 0);
    assert_eq!(proxy.info_field("cache_hits"), 0);
    assert_eq!(node_gets(&cluster, "k"), 8);
}

/// The same key in two databases: two entries, each dropped by its own
/// writes (a standalone server serves 16 databases).
#[test]
fn each_database_has_its_own_entries() {
    use orthrus_devcluster::{NodeOptions, RedisNode};
    let node = RedisNode::start(NodeOptions::default()).expect("start server");
    let proxy = Proxy::start_env(
        &[node.addr()],
        &["--mode", "standalone"],
        &[("ORTHRUS_CACHE__ENABLED", "true")],
    );
    let (mut zero, mut one) = (proxy.stream(), proxy.stream());
    assert_eq!(send(&mut one, &["SELECT", "1"]), "+OK\r\n");
    assert_eq!(send(&mut zero, &["SET", "k", "zero"]), "+OK\r\n");
    assert_eq!(send(&mut one, &["SET", "k", "one"]), "+OK\r\n");
    for _ in 0..8 {
        assert_eq!(send(&mut zero, &["GET", "k"]), bulk("zero"));
        assert_eq!(send(&mut one, &["GET", "k"]), bulk("one"));
    }
    assert!(proxy.info_field("cache_hits") >= 6);
    assert_eq!(send(&mut one, &["SET", "k", "one-2"]), "+OK\r\n");
    assert_eq!(send(&mut one, &["GET", "k"]), bulk("one-2"));
    assert_eq!(send(&mut zero, &["GET", "k"]), bulk("zero"));
}

/// Where the cache meets the other features: a user's rules are checked
/// before a cached reply is given, a script's write is read back at once,
/// and a client that tracks keys itself reads from the nodes and is told
/// of a change.
#[test]
fn users_scripts_and_tracking_clients_keep_their_meaning() {
    let cluster = cluster(3, 0);
    let proxy = Proxy::spawn(
        &cluster.seeds(),
        &[],
        &[
            ("ORTHRUS_CACHE__ENABLED", "true"),
            (
                "ORTHRUS_CLIENT__USERS__ROOT__RULES",
                "on >root-pw ~* &* +@all",
            ),
            (
                "ORTHRUS_CLIENT__USERS__ALICE__RULES",
                "on >alice-pw ~alice:* +@read",
            ),
        ],
    );
    proxy.wait_listening(Duration::from_secs(20));
    let mut root = proxy.stream();
    proxy.log_in(&mut root, &["root", "root-pw"], &["SET", "secret", "s"]);
    for _ in 0..10 {
        assert_eq!(send(&mut root, &["GET", "secret"]), bulk("s"));
    }
    let hits_of = |s: &mut TcpStream| -> i64 {
        let info = send(s, &["INFO", "cache"]);
        orthrus_devcluster::info_field(&info, "cache_hits")
            .and_then(|n| n.parse().ok())
            .expect("cache_hits")
    };
    let hits = hits_of(&mut root);
    assert!(hits >= 5);
    // Cached, and still refused to a user whose keys are elsewhere.
    let mut alice = proxy.stream();
    assert_eq!(send(&mut alice, &["AUTH", "alice", "alice-pw"]), "+OK\r\n");
    let refused = send(&mut alice, &["GET", "secret"]);
    assert!(refused.starts_with("-NOPERM"), "{refused}");
    assert_eq!(hits_of(&mut root), hits);
    // A script's write, read back at once.
    let script = "return redis.call('SET', KEYS[1], ARGV[1])";
    for i in 0..5 {
        let v = format!("script{i}");
        assert_eq!(
            send(&mut root, &["EVAL", script, "1", "secret", &v]),
            "+OK\r\n"
        );
        assert_eq!(send(&mut root, &["GET", "secret"]), bulk(&v));
    }
    // A tracking client reads past the cache, so the node tracks it.
    let mut tracked = proxy.stream();
    assert!(send(&mut tracked, &["HELLO", "3", "AUTH", "root", "root-pw"]).starts_with('%'));
    assert_eq!(send(&mut tracked, &["CLIENT", "TRACKING", "ON"]), "+OK\r\n");
    assert_eq!(send(&mut tracked, &["GET", "secret"]), bulk("script4"));
    assert_eq!(send(&mut root, &["SET", "secret", "changed"]), "+OK\r\n");
    tracked
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let push = String::from_utf8_lossy(&common::read_reply(&mut tracked).unwrap()).into_owned();
    assert!(
        push.contains("invalidate") && push.contains("secret"),
        "{push}"
    );
}

/// Keys of a route that mirrors reads are never cached (every read is
/// copied to the mirror), nor those of a route that removes its prefix,
/// and a client that never authenticated gets `-NOAUTH` for a cached key,
/// alone or in an MGET.
#[test]
fn mirrored_and_cut_routes_are_not_cached_and_unauthenticated_clients_are_refused() {
    use common::routes::config_file;
    use orthrus_devcluster::{NodeOptions, RedisNode};
    let cluster = cluster(3, 0);
    let mirror = RedisNode::start(NodeOptions::default()).expect("start mirror");
    let toml = format!(
        "[upstreams.mir]\nseeds = [\"{}\"]\nmode = \"standalone\"\n\n[[routes]]\nprefix = \"m:\"\nupstream = \"default\"\nmirror = [\"mir\"]\n\n[[routes]]\nprefix = \"c:\"\nupstream = \"default\"\nremove_prefix = true\n",
        mirror.addr()
    );
    let config = config_file("cache-mirror", &toml);
    let proxy = Proxy::spawn(
        &cluster.seeds(),
        &[
            "--config",
            config.0.to_str().unwrap(),
            "--requirepass",
            "pw",
        ],
        &[("ORTHRUS_CACHE__ENABLED", "true")],
    );
    proxy.wait_listening(Duration::from_secs(20));
    let mut s = proxy.stream();
    proxy.log_in(&mut s, &["pw"], &["SET", "k", "v"]);
    assert_eq!(send(&mut s, &["SET", "m:k", "v"]), "+OK\r\n");
    assert_eq!(send(&mut s, &["SET", "c:cut", "v"]), "+OK\r\n");
    for _ in 0..12 {
        assert_eq!(send(&mut s, &["GET", "k"]), bulk("v"));
        assert_eq!(send(&mut s, &["GET", "m:k"]), bulk("v"));
        // A route that removes its prefix is not cached either.
        assert_eq!(send(&mut s, &["GET", "c:cut"]), bulk("v"));
    }
    let info = send(&mut s, &["INFO", "cache"]);
    let hits = orthrus_devcluster::info_field(&info, "cache_hits")
        .and_then(|n| n.parse::<i64>().ok())
        .unwrap_or(-1);
    // k's fifth read fills and the seven after it hit (one fewer if a
    // topology refresh ends the entry); m:k's and c:cut's are neither.
    assert!((6..=7).contains(&hits), "{info}");
    let mut stranger = proxy.stream();
    for args in [&["GET", "k"][..], &["MGET", "k", "k"]] {
        assert_eq!(
            send(&mut stranger, args),
            "-NOAUTH Authentication required.\r\n"
        );
    }
    // Every read of m:k was copied to the mirror (the copies' replies are
    // awaited apart from the client's).
    let gets = || -> u64 {
        let stats = mirror.cmd(&["INFO", "commandstats"]).unwrap();
        let stats = String::from_utf8_lossy(stats.as_bytes().unwrap_or_default()).into_owned();
        stats
            .lines()
            .find_map(|l| l.strip_prefix("cmdstat_get:calls="))
            .and_then(|r| r.split(',').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    orthrus_devcluster::wait_until(
        Duration::from_secs(5),
        "copies on the mirror",
        || match gets() {
            12 => Ok(()),
            n => Err(format!("the mirror ran {n} GETs")),
        },
    )
    .unwrap();
}

/// A client's read sent while its own write is still unanswered is never
/// answered from an entry filled meanwhile: here the write is held on the
/// node (`CLIENT PAUSE WRITE`) while another client's read fills the key
/// with the old value; the writer's read, sent behind its write, must
/// still see its own value.
#[test]
fn a_read_behind_the_clients_own_unanswered_write_sees_that_write() {
    let cluster = cluster(3, 0);
    let proxy = cached(&cluster);
    let (mut writer, mut other) = (proxy.stream(), proxy.stream());
    assert_eq!(send(&mut writer, &["SET", "rw", "old"]), "+OK\r\n");
    // Hot on both clients' workers.
    for _ in 0..10 {
        assert_eq!(send(&mut writer, &["GET", "rw"]), bulk("old"));
        assert_eq!(send(&mut other, &["GET", "rw"]), bulk("old"));
    }
    let owner = common::owner_of(&cluster, b"rw");
    let mut node = TcpStream::connect(cluster.nodes()[owner].addr()).unwrap();
    assert_eq!(
        send(&mut node, &["CLIENT", "PAUSE", "1500", "WRITE"]),
        "+OK\r\n"
    );
    std::io::Write::write_all(&mut writer, &common::encode(&["SET", "rw", "new"])).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    // The write is held on the node: another client reads (and fills) the
    // value it still has.
    assert_eq!(send(&mut other, &["GET", "rw"]), bulk("old"));
    assert_eq!(send(&mut other, &["GET", "rw"]), bulk("old"));
    std::io::Write::write_all(&mut writer, &common::encode(&["GET", "rw"])).unwrap();
    writer
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    assert_eq!(common::reply_text(&mut writer), "+OK\r\n");
    assert_eq!(common::reply_text(&mut writer), bulk("new"));
    assert_eq!(send(&mut other, &["GET", "rw"]), bulk("new"));
}

/// MGET calls the node that owns `key` has run.
fn node_calls(cluster: &Cluster, key: &str, command: &str) -> u64 {
    let owner = common::owner_of(cluster, key.as_bytes());
    let info = cluster.nodes()[owner]
        .cmd(&["INFO", "commandstats"])
        .expect("INFO");
    let text = String::from_utf8_lossy(info.as_bytes().unwrap_or_default()).into_owned();
    let prefix = format!("cmdstat_{command}:calls=");
    text.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// MGET is cached key by key, as the keys' GETs: hot keys over several
/// masters are answered from memory, a write through orthrus or straight
/// to a node is seen by the next MGET, a key GET cannot read (a list)
/// reads as nil as on a node and is never cached, and a RESP3 client gets
/// its own nulls.
#[test]
fn mget_is_cached_key_by_key() {
    let cluster = cluster(3, 0);
    let proxy = cached(&cluster);
    let mut s = proxy.stream();
    let keys = ["ma", "mb", "mc", "md", "me"];
    for k in keys {
        assert_eq!(send(&mut s, &["SET", k, &format!("v-{k}")]), "+OK\r\n");
    }
    let mut mget = vec!["MGET"];
    mget.extend(keys);
    mget.push("m-none");
    let want = |values: &[String]| {
        let mut out = format!("*{}\r\n", values.len() + 1);
        for v in values {
            out.push_str(&bulk(v));
        }
        out + "$-1\r\n"
    };
    let mut values: Vec<String> = keys.iter().map(|k| format!("v-{k}")).collect();
    for _ in 0..10 {
        assert_eq!(send(&mut s, &mget), want(&values));
    }
    // Now every key is cached: MGETs reach no node.
    let at_nodes = || -> u64 { keys.iter().map(|k| node_calls(&cluster, k, "mget")).sum() };
    let before = at_nodes();
    for _ in 0..20 {
        assert_eq!(send(&mut s, &mget), want(&values));
    }
    assert_eq!(at_nodes(), before, "{}", proxy.log_text());
    assert!(proxy.info_field("cache_hits") >= 20 * 6);

    // A write through orthrus, then one straight to the key's node.
    assert_eq!(send(&mut s, &["SET", "mc", "new"]), "+OK\r\n");
    values[2] = "new".into();
    assert_eq!(send(&mut s, &mget), want(&values));
    let owner = common::owner_of(&cluster, b"me");
    let mut direct = TcpStream::connect(cluster.nodes()[owner].addr()).unwrap();
    for _ in 0..10 {
        send(&mut s, &mget);
    }
    assert_eq!(send(&mut direct, &["SET", "me", "direct"]), "+OK\r\n");
    values[4] = "direct".into();
    let deadline = Instant::now() + Duration::from_secs(2);
    while send(&mut s, &mget) != want(&values) {
        assert!(Instant::now() < deadline, "MGET never saw the direct write");
        std::thread::sleep(Duration::from_millis(1));
    }

    // A list among the keys: nil, every time, as on a node.
    assert_eq!(send(&mut s, &["DEL", "md"]), ":1\r\n");
    assert_eq!(send(&mut s, &["RPUSH", "md", "x"]), ":1\r\n");
    let list_reply = want(&values).replace(&bulk(&values[3]), "$-1\r\n");
    let gets = || node_calls(&cluster, "md", "get");
    let before = gets();
    for _ in 0..10 {
        assert_eq!(send(&mut s, &mget), list_reply);
    }
    // Its GET was refused once, and not sent again while it is a list.
    assert!(gets() <= before + 1, "{} GETs of the list", gets() - before);
    // A RESP3 client: its nulls are RESP3's.
    let mut three = proxy.stream();
    assert!(send(&mut three, &["HELLO", "3"]).starts_with('%'));
    let resp3 = list_reply.replace("$-1\r\n", "_\r\n");
    for _ in 0..10 {
        assert_eq!(send(&mut three, &mget), resp3);
    }
}
