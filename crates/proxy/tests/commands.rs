//! Commands that span the cluster: cross-slot multi-key commands split per
//! slot, keyspace-wide commands sent to every master, SCAN across masters.

mod common;

use std::collections::HashSet;

use common::{Proxy, cluster};
use redis::Commands;

#[test]
fn split_fan_out_and_scan() {
    let cluster = cluster(3, 1);
    let proxy = Proxy::start(&cluster.seeds(), &[]);
    let mut con = proxy.client();

    cross_slot_multi_key_commands(&mut con);
    keyspace_commands(&mut con);
    full_scan_returns_every_key(&mut con);
}

fn cross_slot_multi_key_commands(con: &mut redis::Connection) {
    let keys: Vec<String> = (0..10).map(|i| format!("multi:{i}")).collect();
    let pairs: Vec<(String, String)> = keys.iter().map(|k| (k.clone(), format!("v-{k}"))).collect();
    let _: () = redis::cmd("MSET").arg(&pairs).query(con).unwrap();
    let mut args = keys.clone();
    args.insert(3, "multi:missing".into());
    let values: Vec<Option<String>> = redis::cmd("MGET").arg(&args).query(con).unwrap();
    assert_eq!(values.len(), 11);
    for (k, v) in args.iter().zip(&values) {
        if k == "multi:missing" {
            assert_eq!(v, &None);
        } else {
            assert_eq!(v.as_deref(), Some(format!("v-{k}").as_str()), "{k}");
        }
    }
    let n: i64 = redis::cmd("EXISTS")
        .arg(&args)
        .arg("multi:0")
        .query(con)
        .unwrap();
    assert_eq!(n, 11, "EXISTS counts a repeated key twice, like Redis");
    let n: i64 = redis::cmd("TOUCH").arg(&args).query(con).unwrap();
    assert_eq!(n, 10);
    let n: i64 = redis::cmd("DEL").arg(&keys[..5]).query(con).unwrap();
    assert_eq!(n, 5);
    let n: i64 = redis::cmd("UNLINK").arg(&keys).query(con).unwrap();
    assert_eq!(n, 5);
    // Atomic multi-key writes across slots: Redis Cluster's own error.
    for cmd in [
        &["MSETNX", "a", "1", "b", "2"][..],
        &["RENAME", "a", "b"],
        &["SINTERSTORE", "d", "a", "b"],
    ] {
        let err = redis::cmd(cmd[0])
            .arg(&cmd[1..])
            .query::<redis::Value>(con)
            .unwrap_err();
        assert_eq!(err.code(), Some("CROSSSLOT"), "{cmd:?}: {err}");
    }
    // With hash tags they just work.
    let n: i64 = redis::cmd("MSETNX")
        .arg(&["{t}a", "1", "{t}b", "2"])
        .query(con)
        .unwrap();
    assert_eq!(n, 1);
    let _: () = con.rename("{t}a", "{t}c").unwrap();
}

fn keyspace_commands(con: &mut redis::Connection) {
    let _: () = redis::cmd("FLUSHALL").query(con).unwrap();
    let size: i64 = redis::cmd("DBSIZE").query(con).unwrap();
    assert_eq!(size, 0);
    let nothing: Option<String> = redis::cmd("RANDOMKEY").query(con).unwrap();
    assert_eq!(nothing, None);
    for i in 0..300 {
        let _: () = con.set(format!("ks:{i}"), i).unwrap();
    }
    let size: i64 = redis::cmd("DBSIZE").query(con).unwrap();
    assert_eq!(size, 300);
    let keys: HashSet<String> = con.keys("ks:*").unwrap();
    assert_eq!(keys.len(), 300);
    let some: String = redis::cmd("RANDOMKEY").query(con).unwrap();
    assert!(some.starts_with("ks:"));

    // A script loaded once runs wherever its key lives.
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg("return redis.call('GET', KEYS[1])")
        .query(con)
        .unwrap();
    let exists: Vec<i64> = redis::cmd("SCRIPT")
        .arg("EXISTS")
        .arg(&sha)
        .arg("0000")
        .query(con)
        .unwrap();
    assert_eq!(exists, vec![1, 0]);
    for i in 0..50 {
        let v: String = redis::cmd("EVALSHA")
            .arg(&sha)
            .arg(1)
            .arg(format!("ks:{i}"))
            .query(con)
            .unwrap();
        assert_eq!(v, i.to_string());
    }
    let _: () = redis::cmd("FLUSHDB").query(con).unwrap();
    let size: i64 = redis::cmd("DBSIZE").query(con).unwrap();
    assert_eq!(size, 0);
}

fn full_scan_returns_every_key(con: &mut redis::Connection) {
    let total = 50_000;
    for chunk in (0..total).collect::<Vec<_>>().chunks(1000) {
        let mut pipe = redis::pipe();
        for i in chunk {
            pipe.set(format!("scan:{i}"), 1).ignore();
        }
        pipe.query::<()>(con).unwrap();
    }
    let expected: HashSet<String> = (0..total).map(|i| format!("scan:{i}")).collect();
    assert_eq!(scan_all(con, &[]), expected);
    let tens: HashSet<String> = expected
        .iter()
        .filter(|k| k.ends_with('7'))
        .cloned()
        .collect();
    assert_eq!(scan_all(con, &["MATCH", "scan:*7", "COUNT", "10"]), tens);
    let err = redis::cmd("SCAN")
        .arg("notacursor")
        .query::<redis::Value>(con)
        .unwrap_err();
    assert!(err.to_string().contains("invalid cursor"), "{err}");
}

fn scan_all(con: &mut redis::Connection, opts: &[&str]) -> HashSet<String> {
    let mut cursor = 0u64;
    let mut seen = HashSet::new();
    for _ in 0..1_000_000 {
        let (next, keys): (u64, Vec<String>) =
            redis::cmd("SCAN").arg(cursor).arg(opts).query(con).unwrap();
        seen.extend(keys);
        cursor = next;
        if cursor == 0 {
            return seen;
        }
    }
    panic!("SCAN never finished");
}

/// A cluster-aware client pointed at orthrus sees a one-node cluster that
/// owns every slot, and never a backend's MOVED.
#[test]
fn cluster_aware_client_through_orthrus() {
    let cluster = cluster(3, 0);
    let proxy = Proxy::start(&cluster.seeds(), &[]);
    let client = redis::cluster::ClusterClient::new(vec![proxy.url()]).unwrap();
    let mut con = client
        .get_connection()
        .expect("cluster client connects through orthrus");
    for i in 0..1000 {
        let _: () = con.set(format!("cc:{i}"), i).unwrap();
    }
    for i in 0..1000 {
        let v: i64 = con.get(format!("cc:{i}")).unwrap();
        assert_eq!(v, i);
    }

    let mut plain = proxy.client();
    let slots: redis::Value = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query(&mut plain)
        .unwrap();
    let text = format!("{slots:?}");
    assert!(
        text.contains(&proxy.addr.port().to_string()) && text.contains("16383"),
        "{text}"
    );
    let nodes: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query(&mut plain)
        .unwrap();
    assert!(
        nodes.contains("myself,master") && nodes.contains("0-16383"),
        "{nodes}"
    );
    let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut plain).unwrap();
    assert!(info.contains("cluster_state:ok"), "{info}");
    let slot: i64 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg("123456789")
        .query(&mut plain)
        .unwrap();
    assert_eq!(slot, 12739);
    // Three keys in that slot, counted by its master.
    for k in ["{123456789}a", "{123456789}b", "{123456789}c"] {
        let _: () = redis::cmd("SET").arg(k).arg(1).query(&mut plain).unwrap();
    }
    let count: i64 = redis::cmd("CLUSTER")
        .arg("COUNTKEYSINSLOT")
        .arg(slot)
        .query(&mut plain)
        .unwrap();
    assert_eq!(count, 3);
    let err = redis::cmd("CLUSTER")
        .arg("FAILOVER")
        .query::<redis::Value>(&mut plain)
        .unwrap_err();
    assert!(err.to_string().contains("not supported"), "{err}");
}

/// CLIENT LIST once it lists `clients` lines: a connection that probed
/// orthrus before the test (closed by the client) may still be listed
/// until its worker reads the close, as in Redis.
fn client_list_of(con: &mut redis::Connection, clients: usize) -> String {
    let mut list = String::new();
    orthrus_devcluster::wait_until(
        std::time::Duration::from_secs(5),
        "the test's clients only",
        || {
            list = redis::cmd("CLIENT")
                .arg("LIST")
                .query(con)
                .map_err(|e| e.to_string())?;
            if list.lines().count() == clients {
                Ok(())
            } else {
                Err(list.clone())
            }
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    list
}

/// CLIENT LIST/KILL/REPLY over orthrus's own clients, and INFO keyspace
/// summed over the masters.
#[test]
fn client_registry_and_info_keyspace() {
    use std::io::{Read, Write};

    let cluster = cluster(3, 0);
    let proxy = Proxy::start(&cluster.seeds(), &[]);
    let mut con = proxy.client();
    let _: () = redis::cmd("CLIENT")
        .arg("SETNAME")
        .arg("lister")
        .query(&mut con)
        .unwrap();
    let mut victim = proxy.stream();
    victim
        .write_all(&common::encode(&["CLIENT", "SETNAME", "victim"]))
        .unwrap();
    assert_eq!(common::read_reply(&mut victim).unwrap(), b"+OK\r\n");
    victim
        .write_all(&common::encode(&["CLIENT", "ID"]))
        .unwrap();
    let id_reply = String::from_utf8(common::read_reply(&mut victim).unwrap()).unwrap();
    let victim_id: u64 = id_reply.trim_start_matches(':').trim().parse().unwrap();

    let list = client_list_of(&mut con, 2);
    assert!(
        list.contains("name=lister") && list.contains("name=victim"),
        "{list}"
    );

    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(victim_id)
        .query(&mut con)
        .unwrap();
    assert_eq!(killed, 1);
    let mut rest = Vec::new();
    victim
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    assert_eq!(
        victim.read_to_end(&mut rest).unwrap(),
        0,
        "the killed client is closed"
    );
    orthrus_devcluster::wait_until(std::time::Duration::from_secs(10), "victim gone", || {
        let list: String = redis::cmd("CLIENT").arg("LIST").query(&mut con).unwrap();
        if list.contains("name=victim") {
            Err(list)
        } else {
            Ok(())
        }
    })
    .unwrap();
    let none: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(999_999)
        .query(&mut con)
        .unwrap();
    assert_eq!(none, 0);

    // CLIENT REPLY OFF/SKIP: commands run, replies are not sent.
    let mut quiet = proxy.stream();
    let mut batch = common::encode(&["CLIENT", "REPLY", "OFF"]);
    batch.extend(common::encode(&["SET", "silent-a", "1"]));
    batch.extend(common::encode(&["CLIENT", "REPLY", "ON"]));
    batch.extend(common::encode(&["CLIENT", "REPLY", "SKIP"]));
    batch.extend(common::encode(&["SET", "silent-b", "2"]));
    batch.extend(common::encode(&["GET", "silent-a"]));
    quiet.write_all(&batch).unwrap();
    assert_eq!(
        common::read_reply(&mut quiet).unwrap(),
        b"+OK\r\n",
        "only CLIENT REPLY ON answers"
    );
    assert_eq!(common::read_reply(&mut quiet).unwrap(), b"$1\r\n1\r\n");
    let b: String = redis::cmd("GET").arg("silent-b").query(&mut con).unwrap();
    assert_eq!(b, "2");

    // CONFIG RESETSTAT starts orthrus's counters again.
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut con)
        .unwrap();
    let info: String = redis::cmd("INFO").arg("stats").query(&mut con).unwrap();
    let processed: i64 = orthrus_devcluster::info_field(&info, "total_commands_processed")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{info}"));
    assert!(processed <= 2, "counters not reset: {processed}");

    // INFO keyspace is the cluster's, not one node's.
    for i in 0..300 {
        let _: () = redis::cmd("SET")
            .arg(format!("info-ks:{i}"))
            .arg(i)
            .query(&mut con)
            .unwrap();
    }
    let _: () = redis::cmd("EXPIRE")
        .arg("info-ks:0")
        .arg(100)
        .query(&mut con)
        .unwrap();
    let info: String = redis::cmd("INFO").arg("keyspace").query(&mut con).unwrap();
    assert!(info.contains("# Keyspace"), "{info}");
    let line = info
        .lines()
        .find(|l| l.starts_with("db0:"))
        .unwrap_or_else(|| panic!("{info}"));
    assert!(line.starts_with("db0:keys=302,expires=1,"), "{line}");
}

/// A client that kills itself (`SKIPME no`, or the old `addr` form) gets the
/// reply first and then is closed, as in Redis: also when the CLIENT KILL
/// comes in a pipeline behind a command still waiting for its node.
#[test]
fn client_kill_of_itself_replies_before_closing() {
    use std::io::{Read, Write};

    let cluster = cluster(1, 0);
    let proxy = Proxy::start(&cluster.seeds(), &[]);
    let mut me = proxy.stream();
    let id = common::send(&mut me, &["CLIENT", "ID"]);
    let id = id.trim_start_matches(':').trim().to_owned();
    let mut batch = common::encode(&["SET", "kill:k", "v"]);
    batch.extend(common::encode(&[
        "CLIENT", "KILL", "ID", &id, "SKIPME", "no",
    ]));
    me.write_all(&batch).unwrap();
    me.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    let mut rest = Vec::new();
    me.read_to_end(&mut rest).unwrap();
    assert_eq!(
        rest, b"+OK\r\n:1\r\n",
        "both replies, then the connection closes"
    );

    let mut me = proxy.stream();
    let addr = me.local_addr().unwrap().to_string();
    let mut batch = common::encode(&["SET", "kill:k", "v"]);
    batch.extend(common::encode(&["CLIENT", "KILL", &addr]));
    me.write_all(&batch).unwrap();
    me.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    let mut rest = Vec::new();
    me.read_to_end(&mut rest).unwrap();
    assert_eq!(rest, b"+OK\r\n+OK\r\n");
}

/// Clients CLIENT KILL closed are no longer counted in INFO's
/// `connected_clients`, also by an INFO right behind the kill (Redis frees
/// them before it answers; Redis's suite counts on it: `CLIENT KILL SKIPME
/// YES/NO will kill all clients` opens two clients after the kill and
/// expects 3). One worker, so that the killed sessions cannot end between
/// the two pipelined commands.
#[test]
fn clients_killed_are_not_counted_as_connected() {
    use std::io::{Read, Write};

    let cluster = cluster(1, 0);
    let proxy = Proxy::start(&cluster.seeds(), &["--threads", "1"]);
    let mut victims: Vec<_> = (0..3).map(|_| proxy.stream()).collect();
    for v in &mut victims {
        assert_eq!(common::send(v, &["PING"]), "+PONG\r\n");
    }
    let mut me = proxy.stream();
    assert_eq!(common::send(&mut me, &["PING"]), "+PONG\r\n");
    let mut batch = common::encode(&["CLIENT", "KILL", "SKIPME", "yes"]);
    batch.extend(common::encode(&["INFO", "clients"]));
    me.write_all(&batch).unwrap();
    let killed = common::reply_text(&mut me);
    let killed: i64 = killed.trim_start_matches(':').trim().parse().unwrap();
    assert!(killed >= 3, "the three other clients: {killed}");
    let info = common::reply_text(&mut me);
    assert!(
        info.contains("connected_clients:1\r\n"),
        "only the client asking: {info}"
    );
    // They are closed, and once gone are not counted out twice.
    for v in &mut victims {
        v.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        let mut rest = Vec::new();
        if let Err(e) = v.read_to_end(&mut rest) {
            assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "closed");
        }
        assert!(rest.is_empty(), "{rest:?}");
    }
    let _extra = proxy.stream();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let info = common::send(&mut me, &["INFO", "clients"]);
        if info.contains("connected_clients:2\r\n") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{info}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// INFO commandstats and errorstats count what clients sent through
/// orthrus (a failed call, a refused one), CONFIG RESETSTAT clears them,
/// and INFO has Redis's cpu and memory sections (orthrus's own figures).
#[test]
fn info_commandstats_and_errorstats_as_orthrus_sees_them() {
    let cluster = cluster(1, 0);
    let proxy = Proxy::start(&cluster.seeds(), &[]);
    let mut con = proxy.client();
    let info = |con: &mut redis::Connection, section: &str| -> String {
        redis::cmd("INFO").arg(section).query(con).unwrap()
    };
    let _: () = con.set("stats:k", "1").unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut con)
        .unwrap();
    let _: () = con.set("stats:k", "1").unwrap();
    let err = redis::cmd("GEOADD")
        .arg("stats:k")
        .arg(0)
        .arg(0)
        .arg("m")
        .query::<i64>(&mut con)
        .unwrap_err();
    assert_eq!(err.code(), Some("WRONGTYPE"));
    let _ = redis::cmd("SYNC").query::<String>(&mut con).unwrap_err();
    // An unknown command: an error, no commandstats line (as in Redis).
    let _ = redis::cmd("NOSUCHCMD")
        .query::<String>(&mut con)
        .unwrap_err();

    let stats = info(&mut con, "commandstats");
    assert!(stats.contains("cmdstat_set:calls=1,"), "{stats}");
    assert!(
        stats.contains("cmdstat_geoadd:calls=1,")
            && stats.contains("rejected_calls=0,failed_calls=1"),
        "{stats}"
    );
    assert!(
        stats.contains(
            "cmdstat_sync:calls=0,usec=0,usec_per_call=0.00,rejected_calls=1,failed_calls=0"
        ),
        "{stats}"
    );
    assert!(!stats.contains("cmdstat_zadd"), "{stats}");
    assert!(!stats.contains("nosuchcmd"), "{stats}");
    let errors = info(&mut con, "errorstats");
    assert!(errors.contains("errorstat_WRONGTYPE:count=1"), "{errors}");
    assert!(errors.contains("errorstat_ERR:count=2"), "{errors}");
    let stats: String = redis::cmd("INFO").arg("stats").query(&mut con).unwrap();
    assert!(stats.contains("total_error_replies:3\r\n"), "{stats}");
    let default: String = redis::cmd("INFO").query(&mut con).unwrap();
    assert!(
        default.contains("used_cpu_user:") && default.contains("used_memory:"),
        "{default}"
    );
    assert!(
        !default.contains("rejected_calls"),
        "commandstats is not a default section"
    );
    assert!(default.contains("redis_git_sha1:00000000\r\n"), "{default}");
}

/// CLIENT LIST/INFO as Redis 7.0 prints them for the asking client
/// (`cmd=client|list`, `qbuf` its request), CLIENT LIST ID/TYPE filters,
/// and CLIENT KILL's argument errors.
#[test]
fn client_list_filters_and_the_callers_own_line() {
    let cluster = cluster(1, 0);
    let proxy = Proxy::start(&cluster.seeds(), &[]);
    let mut con = proxy.client();
    let mut other = proxy.client();
    let my_id: i64 = redis::cmd("CLIENT").arg("ID").query(&mut con).unwrap();
    let _: i64 = redis::cmd("CLIENT").arg("ID").query(&mut other).unwrap();

    let all = client_list_of(&mut con, 2);
    let mine = all
        .lines()
        .find(|l| l.starts_with(&format!("id={my_id} ")))
        .unwrap();
    assert!(
        mine.contains(" qbuf=26 ") && mine.contains(" cmd=client|list "),
        "{mine}"
    );
    let listed: String = redis::cmd("CLIENT")
        .arg("LIST")
        .arg("ID")
        .arg(my_id)
        .query(&mut con)
        .unwrap();
    assert_eq!(listed.lines().count(), 1, "{listed}");
    assert!(listed.starts_with(&format!("id={my_id} ")), "{listed}");
    let pubsub: String = redis::cmd("CLIENT")
        .arg("LIST")
        .arg("TYPE")
        .arg("pubsub")
        .query(&mut con)
        .unwrap();
    assert_eq!(pubsub, "");
    let normal: String = redis::cmd("CLIENT")
        .arg("LIST")
        .arg("TYPE")
        .arg("normal")
        .query(&mut con)
        .unwrap();
    assert_eq!(normal.lines().count(), 2, "{normal}");
    let info: String = redis::cmd("CLIENT").arg("INFO").query(&mut con).unwrap();
    assert!(info.contains(" cmd=client|info "), "{info}");

    let err = |args: &[&str], con: &mut redis::Connection| {
        redis::cmd("CLIENT")
            .arg(args)
            .query::<redis::Value>(con)
            .unwrap_err()
            .to_string()
    };
    assert!(
        err(&["KILL"], &mut con).contains("wrong number of arguments for 'client|kill' command")
    );
    assert!(err(&["KILL", "TYPE", "wrong"], &mut con).contains("Unknown client type"));
    assert!(err(&["KILL", "USER", "wrong"], &mut con).contains("No such user"));
    assert!(err(&["KILL", "ID", "0"], &mut con).contains("greater than 0"));
    assert!(err(&["LIST", "TYPE", "wrong"], &mut con).contains("Unknown client type"));
}

/// INFO persistence is the masters': a field that is a number is the
/// largest of theirs, so a save, an AOF rewrite or AOF itself on any master
/// shows (scripts wait for `aof_rewrite_in_progress:0` this way).
#[test]
fn info_persistence_is_the_masters() {
    let cluster = cluster(2, 0);
    let proxy = Proxy::start(&cluster.seeds(), &[]);
    let mut con = proxy.client();
    let before: String = redis::cmd("INFO")
        .arg("persistence")
        .query(&mut con)
        .unwrap();
    assert!(before.contains("aof_enabled:0"), "{before}");
    let node = cluster.nodes()[1].addr();
    let mut direct = redis::Client::open(format!("redis://{node}"))
        .unwrap()
        .get_connection()
        .unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("appendonly")
        .arg("yes")
        .query(&mut direct)
        .unwrap();
    let after: String = redis::cmd("INFO").query(&mut con).unwrap();
    assert!(after.contains("aof_enabled:1"), "{after}");
    assert!(after.contains("# Keyspace"), "{after}");
    // Writes are counted per master: summed.
    let dirty = |con: &mut redis::Connection| -> i64 {
        let text: String = redis::cmd("INFO").arg("persistence").query(con).unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix("rdb_changes_since_last_save:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap()
    };
    let before = dirty(&mut con);
    let keys: Vec<String> = (0..20).map(|i| format!("dirty:{i}")).collect();
    for k in &keys {
        let _: () = con.set(k, "1").unwrap();
    }
    assert_eq!(dirty(&mut con), before + 20, "every master's writes");
    assert_eq!(after.matches("# Persistence").count(), 1, "{after}");

    // Memory: the masters' numbers summed, orthrus's own after them.
    let field = |text: &str, name: &str| -> i64 {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {text}"))
    };
    let largest = cluster
        .nodes()
        .iter()
        .map(|n| {
            let mut c = redis::Client::open(format!("redis://{}", n.addr()))
                .unwrap()
                .get_connection()
                .unwrap();
            let text: String = redis::cmd("INFO").arg("memory").query(&mut c).unwrap();
            field(&text, "used_memory")
        })
        .max()
        .unwrap();
    let memory: String = redis::cmd("INFO").arg("memory").query(&mut con).unwrap();
    assert!(field(&memory, "used_memory") > largest, "{memory}");
    assert!(field(&memory, "orthrus_used_memory_rss") > 0, "{memory}");
    let _: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg("return 1")
        .query(&mut con)
        .unwrap();
    let memory: String = redis::cmd("INFO").arg("memory").query(&mut con).unwrap();
    assert_eq!(
        field(&memory, "number_of_cached_scripts"),
        1,
        "loaded on every master, counted once"
    );
}
