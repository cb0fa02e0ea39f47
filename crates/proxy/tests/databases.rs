//! Numbered databases through orthrus: on a Valkey 9 cluster with
//! `cluster-databases 16` every command family acts in the client's
//! database; where the nodes serve one database (a Redis 7 cluster, a
//! Valkey cluster left at `cluster-databases 1`) `SELECT n` and `MOVE`
//! get the nodes' own errors.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{Proxy, encode, read_reply, send};
use orthrus_devcluster::{Cluster, ClusterSpec, Engine, NodeOptions};

/// Three masters serving 16 databases each.
fn sixteen() -> Cluster {
    let mut node = NodeOptions::cluster();
    node.config
        .push(("cluster-databases".to_owned(), "16".to_owned()));
    node.config
        .push(("notify-keyspace-events".to_owned(), "KA".to_owned()));
    Cluster::start(ClusterSpec::new(3, 0).with_node(node)).expect("start cluster")
}

fn valkey() -> bool {
    common::runs_on(
        Engine::Valkey,
        "cluster databases are Valkey 9's (REDIS_SERVER=valkey-server runs this)",
    )
}

/// A connection through orthrus in database `db`.
fn in_db(proxy: &Proxy, db: u32) -> TcpStream {
    let mut s = proxy.stream();
    if db != 0 {
        assert_eq!(send(&mut s, &["SELECT", &db.to_string()]), "+OK\r\n");
    }
    s
}

fn bulk(v: &str) -> String {
    format!("${}\r\n{v}\r\n", v.len())
}

/// Keys that land on every master, each in a slot of its own.
fn spread_keys(cluster: &Cluster) -> Vec<String> {
    let mut keys: Vec<(String, usize)> = Vec::new();
    for i in 0.. {
        let key = format!("db:{i}");
        let owner = common::owner_of(cluster, key.as_bytes());
        if keys.iter().filter(|(_, o)| *o == owner).count() < 2 {
            keys.push((key, owner));
        }
        if keys.len() == 6 {
            break;
        }
    }
    keys.into_iter().map(|(k, _)| k).collect()
}

#[test]
fn the_same_keys_in_two_databases_hold_their_own_values() {
    if !valkey() {
        return;
    }
    let cluster = sixteen();
    let proxy = Proxy::start(&cluster.seeds(), &["--threads", "2"]);
    let (mut zero, mut one) = (in_db(&proxy, 0), in_db(&proxy, 1));
    let keys = spread_keys(&cluster);

    // Strings, and a split MSET/MGET over every master.
    for (i, k) in keys.iter().enumerate() {
        assert_eq!(send(&mut zero, &["SET", k, &format!("zero{i}")]), "+OK\r\n");
    }
    let mut mset = vec!["MSET"];
    let ones: Vec<String> = (0..keys.len()).map(|i| format!("one{i}")).collect();
    for (k, v) in keys.iter().zip(&ones) {
        mset.push(k);
        mset.push(v);
    }
    assert_eq!(send(&mut one, &mset), "+OK\r\n");
    let mut mget = vec!["MGET"];
    mget.extend(keys.iter().map(String::as_str));
    let want = |prefix: &str| {
        let mut out = format!("*{}\r\n", keys.len());
        for i in 0..keys.len() {
            out.push_str(&bulk(&format!("{prefix}{i}")));
        }
        out
    };
    assert_eq!(send(&mut zero, &mget), want("zero"));
    assert_eq!(send(&mut one, &mget), want("one"));
    // Straight from a node: the same key, two values.
    let owner = common::owner_of(&cluster, keys[0].as_bytes());
    let node = &cluster.nodes()[owner];
    let mut direct = TcpStream::connect(node.addr()).expect("node");
    assert_eq!(send(&mut direct, &["GET", &keys[0]]), bulk("zero0"));
    assert_eq!(send(&mut direct, &["SELECT", "1"]), "+OK\r\n");
    assert_eq!(send(&mut direct, &["GET", &keys[0]]), bulk("one0"));

    // A hash, a script.
    assert_eq!(send(&mut one, &["HSET", "{h}h", "f", "1"]), ":1\r\n");
    assert_eq!(send(&mut zero, &["HGET", "{h}h", "f"]), "$-1\r\n");
    assert_eq!(
        send(
            &mut one,
            &["EVAL", "return redis.call('GET', KEYS[1])", "1", &keys[1]]
        ),
        bulk("one1")
    );

    // Fan-outs: DBSIZE, KEYS and SCAN in the client's database only.
    assert_eq!(send(&mut zero, &["DBSIZE"]), format!(":{}\r\n", keys.len()));
    assert_eq!(
        send(&mut one, &["DBSIZE"]),
        format!(":{}\r\n", keys.len() + 1)
    );
    let keys_reply = send(&mut one, &["KEYS", "*"]);
    assert!(
        keys_reply.starts_with(&format!("*{}\r\n", keys.len() + 1)),
        "{keys_reply}"
    );
    assert!(keys_reply.contains("{h}h"), "{keys_reply}");
    let mut seen = 0;
    let mut cursor = "0".to_owned();
    loop {
        let reply = send(&mut one, &["SCAN", &cursor, "COUNT", "100"]);
        let mut parts = reply.split("\r\n");
        let _ = parts.next(); // *2
        let _ = parts.next(); // $n
        cursor = parts.next().unwrap_or("0").to_owned();
        seen += reply.matches("db:").count() + reply.matches("{h}h").count();
        if cursor == "0" {
            break;
        }
    }
    assert_eq!(seen, keys.len() + 1, "SCAN in database 1");
    let info = send(&mut zero, &["INFO", "keyspace"]);
    assert!(info.contains(&format!("db0:keys={}", keys.len())), "{info}");
    assert!(
        info.contains(&format!("db1:keys={}", keys.len() + 1)),
        "{info}"
    );

    // MULTI/EXEC, WATCH: a write in database 0 does not touch a watch in 1.
    let counter = format!("{{{}}}n", keys[2]);
    assert_eq!(send(&mut one, &["WATCH", &keys[2]]), "+OK\r\n");
    assert_eq!(send(&mut zero, &["SET", &keys[2], "changed"]), "+OK\r\n");
    assert_eq!(send(&mut one, &["MULTI"]), "+OK\r\n");
    assert_eq!(send(&mut one, &["INCR", &counter]), "+QUEUED\r\n");
    assert_eq!(send(&mut one, &["EXEC"]), "*1\r\n:1\r\n");
    assert_eq!(send(&mut one, &["WATCH", &keys[2]]), "+OK\r\n");
    let mut one_b = in_db(&proxy, 1);
    assert_eq!(send(&mut one_b, &["SET", &keys[2], "changed"]), "+OK\r\n");
    assert_eq!(send(&mut one, &["MULTI"]), "+OK\r\n");
    assert_eq!(send(&mut one, &["INCR", &counter]), "+QUEUED\r\n");
    assert_eq!(send(&mut one, &["EXEC"]), "*-1\r\n");
    assert_eq!(send(&mut zero, &["GET", &counter]), "$-1\r\n");

    // A blocking pop in database 1 is woken by a push in 1, not in 0.
    one.write_all(&encode(&["BLPOP", "{b}list", "10"])).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(send(&mut zero, &["RPUSH", "{b}list", "zero"]), ":1\r\n");
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(send(&mut one_b, &["RPUSH", "{b}list", "one"]), ":1\r\n");
    assert_eq!(
        String::from_utf8_lossy(&read_reply(&mut one).unwrap()),
        format!("*2\r\n{}{}", bulk("{b}list"), bulk("one"))
    );
    assert_eq!(send(&mut zero, &["LLEN", "{b}list"]), ":1\r\n");

    // MOVE and COPY ... DB between databases.
    assert_eq!(send(&mut one, &["SET", "{m}k", "moved"]), "+OK\r\n");
    assert_eq!(send(&mut one, &["MOVE", "{m}k", "2"]), ":1\r\n");
    assert_eq!(
        send(&mut one, &["COPY", &keys[3], &keys[3], "DB", "3"]),
        ":1\r\n"
    );
    let mut two = in_db(&proxy, 2);
    assert_eq!(send(&mut two, &["GET", "{m}k"]), bulk("moved"));
    let mut three = in_db(&proxy, 3);
    assert_eq!(send(&mut three, &["GET", &keys[3]]), bulk("one3"));

    // CLIENT INFO shows the database; HELLO keeps it (as the engine
    // does); RESET goes back to 0.
    assert!(send(&mut one, &["CLIENT", "INFO"]).contains(" db=1 "));
    assert!(send(&mut one, &["HELLO", "3"]).starts_with('%'));
    assert_eq!(send(&mut one, &["GET", &keys[0]]), bulk("one0"));
    assert_eq!(send(&mut one, &["RESET"]), "+RESET\r\n");
    assert_eq!(send(&mut one, &["GET", &keys[0]]), bulk("zero0"));

    // FLUSHDB in database 1 leaves database 0 alone.
    assert_eq!(send(&mut one_b, &["FLUSHDB"]), "+OK\r\n");
    assert_eq!(send(&mut one_b, &["DBSIZE"]), ":0\r\n");
    // (and the list pushed there)
    assert_eq!(
        send(&mut zero, &["DBSIZE"]),
        format!(":{}\r\n", keys.len() + 1)
    );

    // Out of range and not a number, as the nodes answer.
    assert_eq!(
        send(&mut direct, &["SELECT", "16"]),
        "-ERR DB index is out of range\r\n"
    );
    assert_eq!(
        send(&mut zero, &["SELECT", "16"]),
        "-ERR DB index is out of range\r\n"
    );
    assert_eq!(
        send(&mut zero, &["SELECT", "-1"]),
        send(&mut direct, &["SELECT", "-1"])
    );
    assert_eq!(
        send(&mut zero, &["SELECT", "x"]),
        send(&mut direct, &["SELECT", "x"])
    );
    assert_eq!(send(&mut zero, &["SELECT", "15"]), "+OK\r\n");
    assert_eq!(send(&mut zero, &["DBSIZE"]), ":0\r\n");
}

#[test]
fn keyspace_notifications_and_tracking_in_database_one() {
    if !valkey() {
        return;
    }
    let cluster = sixteen();
    let proxy = Proxy::start(&cluster.seeds(), &[]);
    let mut sub = proxy.stream();
    sub.write_all(&encode(&["PSUBSCRIBE", "__keyspace@1__:*"]))
        .unwrap();
    assert!(String::from_utf8_lossy(&read_reply(&mut sub).unwrap()).contains("psubscribe"));
    let mut one = in_db(&proxy, 1);
    let mut zero = in_db(&proxy, 0);
    sub.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    // The subscriptions on the other masters are made as it is sent:
    // write until the notification of database 1 arrives.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut heard = false;
    while !heard {
        assert!(Instant::now() < deadline, "no notification from database 1");
        assert_eq!(send(&mut zero, &["SET", "note", "0"]), "+OK\r\n");
        assert_eq!(send(&mut one, &["SET", "note", "1"]), "+OK\r\n");
        while let Ok(frame) = read_reply(&mut sub) {
            let text = String::from_utf8_lossy(&frame).into_owned();
            assert!(!text.contains("__keyspace@0__"), "{text}");
            heard |= text.contains("__keyspace@1__:note");
        }
    }

    // A tracking client in database 1 hears of a write there.
    let mut tracked = proxy.stream();
    assert!(send(&mut tracked, &["HELLO", "3"]).starts_with('%'));
    assert_eq!(send(&mut tracked, &["SELECT", "1"]), "+OK\r\n");
    assert_eq!(send(&mut tracked, &["CLIENT", "TRACKING", "ON"]), "+OK\r\n");
    assert_eq!(send(&mut tracked, &["GET", "note"]), bulk("1"));
    assert_eq!(send(&mut one, &["SET", "note", "2"]), "+OK\r\n");
    tracked
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let push = String::from_utf8_lossy(&read_reply(&mut tracked).unwrap()).into_owned();
    assert!(
        push.contains("invalidate") && push.contains("note"),
        "{push}"
    );
    assert_eq!(send(&mut tracked, &["GET", "note"]), bulk("2"));
}

/// Where the nodes serve one database, orthrus answers `SELECT n` and
/// `MOVE` with the nodes' own words (both engines: Redis 7 refuses SELECT
/// in cluster mode; Valkey's default is one database).
#[test]
fn one_database_nodes_refuse_select_in_their_own_words() {
    let cluster = common::cluster(3, 0);
    let proxy = Proxy::start(&cluster.seeds(), &[]);
    let mut direct = TcpStream::connect(cluster.nodes()[0].addr()).expect("node");
    let mut through = proxy.stream();
    for args in [
        &["SELECT", "1"][..],
        &["SELECT", "-1"],
        &["SELECT", "x"],
        &["SELECT", "99999999999"],
    ] {
        assert_eq!(
            send(&mut through, args),
            send(&mut direct, args),
            "{args:?}"
        );
    }
    assert!(send(&mut through, &["SELECT", "1"]).starts_with("-ERR"));
    assert_eq!(send(&mut through, &["SELECT", "0"]), "+OK\r\n");
    // MOVE: the node of the key answers (a cluster node refuses it).
    let key = "{m}k";
    let owner = common::owner_of(&cluster, key.as_bytes());
    let mut node = TcpStream::connect(cluster.nodes()[owner].addr()).expect("node");
    assert_eq!(send(&mut through, &["SET", key, "v"]), "+OK\r\n");
    assert_eq!(
        send(&mut through, &["MOVE", key, "1"]),
        send(&mut node, &["MOVE", key, "1"])
    );
    // The connection goes on in database 0.
    assert_eq!(send(&mut through, &["GET", key]), bulk("v"));
    let mut buf = [0u8; 1];
    through.set_nonblocking(true).unwrap();
    assert!(through.read(&mut buf).is_err(), "nothing more was sent");
}

/// A standalone server (16 databases) as the default upstream and a route
/// to a cluster (one database): `SELECT 1` works, keys of the default
/// upstream act in database 1, and a key routed to the cluster gets the
/// cluster's own refusal, also inside MULTI (which it aborts), never a
/// request in the wrong database.
#[test]
fn a_route_to_nodes_with_fewer_databases_is_refused_in_their_words() {
    use common::routes::{config_file, start_routed};
    use orthrus_devcluster::RedisNode;

    let solo = RedisNode::start(NodeOptions::default()).expect("start server");
    let cluster = common::cluster(3, 0);
    let toml = format!(
        "[upstreams.c]\nseeds = [\"{}\"]\n\n[[routes]]\nprefix = \"c:\"\nupstream = \"c\"\n",
        cluster.seeds()[0]
    );
    let config = config_file("databases", &toml);
    let proxy = start_routed(
        &[solo.addr()],
        &[
            "--config",
            config.0.to_str().unwrap(),
            "--mode",
            "standalone",
        ],
    );
    let mut direct = TcpStream::connect(cluster.nodes()[0].addr()).expect("node");
    let refusal = send(&mut direct, &["SELECT", "1"]);
    assert!(refusal.starts_with("-ERR"), "{refusal}");

    let mut s = in_db(&proxy, 1);
    assert_eq!(send(&mut s, &["SET", "plain", "one"]), "+OK\r\n");
    assert_eq!(send(&mut s, &["SET", "c:k", "one"]), refusal);
    assert_eq!(send(&mut s, &["MSET", "plain2", "x", "c:k2", "y"]), refusal);
    assert_eq!(send(&mut s, &["MULTI"]), "+OK\r\n");
    assert_eq!(send(&mut s, &["SET", "c:k", "one"]), refusal);
    assert_eq!(
        send(&mut s, &["EXEC"]),
        "-EXECABORT Transaction discarded because of previous errors.\r\n"
    );
    // Nothing reached the cluster; the server has the key in database 1.
    for node in cluster.nodes() {
        assert_eq!(node.cmd(&["DBSIZE"]).unwrap().as_int(), Some(0));
    }
    let mut on_solo = TcpStream::connect(solo.addr()).expect("server");
    assert_eq!(send(&mut on_solo, &["GET", "plain"]), "$-1\r\n");
    assert_eq!(send(&mut on_solo, &["SELECT", "1"]), "+OK\r\n");
    assert_eq!(send(&mut on_solo, &["GET", "plain"]), bulk("one"));
    // In database 0 the route works.
    assert_eq!(send(&mut s, &["SELECT", "0"]), "+OK\r\n");
    assert_eq!(send(&mut s, &["SET", "c:k", "zero"]), "+OK\r\n");
    assert_eq!(send(&mut s, &["GET", "c:k"]), bulk("zero"));
}

/// A mirror gets each copy in the client's database: a standalone default
/// upstream and a route `m:` mirrored to another standalone server.
#[test]
fn mirror_copies_go_to_the_clients_database() {
    use common::routes::{config_file, start_routed};
    use orthrus_devcluster::RedisNode;

    let solo = RedisNode::start(NodeOptions::default()).expect("start server");
    let mirror = RedisNode::start(NodeOptions::default()).expect("start mirror");
    let toml = format!(
        "[upstreams.mir]\nseeds = [\"{}\"]\nmode = \"standalone\"\n\n[[routes]]\nprefix = \"m:\"\nupstream = \"default\"\nmirror = [\"mir\"]\n",
        mirror.addr()
    );
    let config = config_file("databases-mirror", &toml);
    let proxy = start_routed(
        &[solo.addr()],
        &[
            "--config",
            config.0.to_str().unwrap(),
            "--mode",
            "standalone",
        ],
    );
    let mut s = in_db(&proxy, 2);
    assert_eq!(send(&mut s, &["SET", "m:k", "two"]), "+OK\r\n");
    assert_eq!(send(&mut s, &["MSET", "m:a", "1", "m:b", "2"]), "+OK\r\n");
    let mut on_mirror = TcpStream::connect(mirror.addr()).expect("mirror");
    assert_eq!(send(&mut on_mirror, &["SELECT", "2"]), "+OK\r\n");
    orthrus_devcluster::wait_until(
        Duration::from_secs(5),
        "copies on the mirror",
        || match send(&mut on_mirror, &["DBSIZE"]).as_str() {
            ":3\r\n" => Ok(()),
            other => Err(other.to_owned()),
        },
    )
    .unwrap();
    assert_eq!(send(&mut on_mirror, &["GET", "m:k"]), bulk("two"));
    assert_eq!(send(&mut on_mirror, &["SELECT", "0"]), "+OK\r\n");
    assert_eq!(send(&mut on_mirror, &["DBSIZE"]), ":0\r\n");
}

/// Reads sent to replicas are read in the client's database there.
#[test]
fn replica_reads_in_database_one() {
    if !valkey() {
        return;
    }
    let mut node = NodeOptions::cluster();
    node.config
        .push(("cluster-databases".to_owned(), "4".to_owned()));
    let cluster = Cluster::start(ClusterSpec::new(1, 1).with_node(node)).expect("start cluster");
    let proxy = Proxy::spawn(
        &cluster.seeds(),
        &["--read-from", "replica"],
        &[("ORTHRUS_CLUSTER__REFRESH_INTERVAL_MS", "200")],
    );
    proxy.wait_ready(Duration::from_secs(20));
    let mut zero = in_db(&proxy, 0);
    let mut one = in_db(&proxy, 1);
    assert_eq!(send(&mut zero, &["SET", "r", "zero"]), "+OK\r\n");
    assert_eq!(send(&mut one, &["SET", "r", "one"]), "+OK\r\n");
    let master = &cluster.nodes()[0];
    let _ = master.cmd(&["WAIT", "1", "5000"]);
    let before = proxy.info_field("orthrus_reads_replica");
    // Replicas may lag a moment: read until each database shows its value.
    orthrus_devcluster::wait_until(Duration::from_secs(10), "replica reads", || {
        let (z, o) = (
            send(&mut zero, &["GET", "r"]),
            send(&mut one, &["GET", "r"]),
        );
        if z == bulk("zero") && o == bulk("one") {
            Ok(())
        } else {
            Err(format!("{z:?} {o:?}"))
        }
    })
    .unwrap();
    assert!(
        proxy.info_field("orthrus_reads_replica") > before,
        "the reads went to the replica"
    );
}

/// `orthrus rebalance --method legacy` moves a slot's keys in every
/// database (MIGRATE per database), not only database 0's.
#[test]
fn a_legacy_move_takes_the_keys_of_every_database() {
    use common::rebalance::{node_client, planned, rebalance, slot_of, tags_on};
    if !valkey() {
        return;
    }
    let mut node = NodeOptions::cluster();
    node.config
        .push(("cluster-databases".to_owned(), "4".to_owned()));
    let cluster = Cluster::start(ClusterSpec::new(3, 0).with_node(node)).expect("start cluster");
    let proxy = Proxy::spawn(&cluster.seeds(), &[], &[]);
    proxy.wait_ready(Duration::from_secs(20));
    let home = cluster.masters().expect("masters")[0];
    let tags = tags_on(&cluster, home, 3);
    let mut direct = node_client(cluster.nodes()[home].addr());
    for db in [0, 2] {
        redis::cmd("SELECT")
            .arg(db)
            .query::<()>(&mut direct)
            .unwrap();
        for tag in &tags {
            let mut pipe = redis::pipe();
            for i in 0..500 {
                pipe.cmd("SET").arg(format!("{tag}:{i}")).arg(db).ignore();
            }
            pipe.query::<()>(&mut direct).unwrap();
        }
    }
    let out = rebalance(
        &proxy,
        &[
            "--by",
            "keys",
            "--method",
            "legacy",
            "--apply",
            "--yes",
            "--max-moves",
            "1",
        ],
    );
    assert!(out.status.success());
    let (slot, tag) = planned(&out)
        .into_iter()
        .find_map(|s| tags.iter().find(|t| slot_of(t) == s).map(|t| (s, t)))
        .expect("one of the loaded slots moved");
    let owner = cluster.master_of_slot(slot).expect("owner");
    assert_ne!(owner, home);
    for db in [0u32, 2] {
        let count = |i: usize| {
            let mut c = node_client(cluster.nodes()[i].addr());
            redis::cmd("SELECT").arg(db).query::<()>(&mut c).unwrap();
            redis::cmd("CLUSTER")
                .arg("COUNTKEYSINSLOT")
                .arg(slot)
                .query::<i64>(&mut c)
                .unwrap()
        };
        assert_eq!((count(owner), count(home)), (500, 0), "database {db}");
        let mut s = in_db(&proxy, db);
        assert_eq!(
            send(&mut s, &["GET", &format!("{tag}:7")]),
            bulk(&db.to_string())
        );
    }
}

/// Databases and users: a client that never authenticated may not SELECT
/// (as Redis: `-NOAUTH`), and a user in database 1 is held to its key
/// rules there; what is refused is written nowhere.
#[test]
fn select_and_user_rules_hold_in_every_database() {
    use orthrus_devcluster::RedisNode;
    let node = RedisNode::start(NodeOptions::default()).expect("start server");
    let proxy = Proxy::spawn(
        &[node.addr()],
        &["--mode", "standalone"],
        &[(
            "ORTHRUS_CLIENT__USERS__ALICE__RULES",
            "on >alice-pw ~alice:* +@all",
        )],
    );
    proxy.wait_listening(Duration::from_secs(20));
    let mut stranger = proxy.stream();
    assert_eq!(
        send(&mut stranger, &["SELECT", "1"]),
        "-NOAUTH Authentication required.\r\n"
    );
    let mut alice = proxy.stream();
    proxy.log_in(
        &mut alice,
        &["alice", "alice-pw"],
        &["SET", "alice:k", "zero"],
    );
    assert_eq!(send(&mut alice, &["SELECT", "1"]), "+OK\r\n");
    assert_eq!(send(&mut alice, &["SET", "alice:k", "one"]), "+OK\r\n");
    let refused = send(&mut alice, &["SET", "bob:k", "one"]);
    assert!(refused.starts_with("-NOPERM"), "{refused}");
    assert_eq!(send(&mut alice, &["MULTI"]), "+OK\r\n");
    assert!(send(&mut alice, &["SET", "bob:k", "x"]).starts_with("-NOPERM"));
    assert!(send(&mut alice, &["EXEC"]).starts_with("-EXECABORT"));
    let mut direct = TcpStream::connect(node.addr()).expect("server");
    assert_eq!(send(&mut direct, &["SELECT", "1"]), "+OK\r\n");
    assert_eq!(send(&mut direct, &["GET", "alice:k"]), bulk("one"));
    assert_eq!(send(&mut direct, &["EXISTS", "bob:k"]), ":0\r\n");
    assert_eq!(send(&mut direct, &["SELECT", "0"]), "+OK\r\n");
    assert_eq!(send(&mut direct, &["GET", "alice:k"]), bulk("zero"));
}
