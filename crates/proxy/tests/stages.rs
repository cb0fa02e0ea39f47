//! Where features meet: users with key and channel rules, routes that cut
//! their prefix, a mirrored route, MULTI, scripts, SORT, subscriber mode
//! and HOTKEYS, all on one orthrus in front of a cluster, a second cluster
//! and a standalone server. Every request is checked as the client sent it
//! before anything is cut or copied; what is refused reaches no upstream
//! and no mirror.

mod common;

use std::collections::BTreeSet;
use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use common::routes::{TempFile, config_file};
use common::{Proxy, send};
use orthrus_devcluster::{Cluster, ClusterSpec, NodeOptions, RedisNode, Value};

const NODE_PW: &str = "node-pw-49";

/// Cluster `a` (the default upstream), cluster `m` (upstream `m`: the
/// mirror of `order:`, and where `s2:` and `{t1}:` go, the latter cut),
/// a standalone server behind `t:` (cut), and orthrus with users:
/// root (the default user), alice (`~alice:* &alice:*`), tuser
/// (`~t:tuser:*`) and chan (`&alice:*`, no key).
struct Setup {
    a: Cluster,
    m: Cluster,
    solo: RedisNode,
    proxy: Proxy,
    _config: TempFile,
}

fn node_options() -> NodeOptions {
    NodeOptions::cluster().with_password(NODE_PW)
}

fn setup(name: &str, extra_toml: &str) -> Setup {
    let a = Cluster::start(ClusterSpec::new(3, 0).with_node(node_options())).unwrap();
    let m = Cluster::start(ClusterSpec::new(3, 0).with_node(node_options())).unwrap();
    let solo = RedisNode::start(NodeOptions::default().with_password(NODE_PW)).unwrap();
    let toml = format!(
        r#"{extra_toml}
[client]
password = "root-pw"

[client.users.alice]
rules = "on >alice-pw ~alice:* &alice:* +@all -@dangerous +sort"

[client.users.tuser]
rules = "on >t-pw ~t:tuser:* +@all -@dangerous +sort_ro"

[client.users.noexec]
rules = "on >noexec-pw ~* &* +@all -exec"

[client.users.reader]
rules = "on >reader-pw ~* &* +@read"

[client.users.carol]
rules = "on >carol-pw ~* &* +@all -flushall -@keyspace"

[client.users.ro]
rules = "on >ro-pw %R~order:* %W~order:w* +@all"

[client.users.chan]
rules = "on >chan-pw &alice:* +@all -@dangerous"

[backend]
password = "{NODE_PW}"

[upstreams.m]
seeds = ["{m}"]

[upstreams.solo]
seeds = ["{solo}"]
mode = "standalone"

[[routes]]
prefix = "t:"
upstream = "solo"
remove_prefix = true

[[routes]]
prefix = "order:"
upstream = "default"
mirror = ["m"]

[[routes]]
prefix = "{{t1}}:"
upstream = "m"
remove_prefix = true

[[routes]]
prefix = "s2:"
upstream = "m"
"#,
        m = m.seeds()[0],
        solo = solo.addr()
    );
    let config = config_file(name, &toml);
    let proxy = Proxy::spawn(
        &a.seeds(),
        &["--config", config.0.to_str().unwrap(), "--threads", "1"],
        &[],
    );
    // Every upstream served.
    let mut root = login(&proxy, &["root-pw"]);
    for key in ["ready", "s2:ready", "t:ready"] {
        let mut tries = 0;
        // Served: stored, or refused by orthrus's own memory limit.
        while !matches!(
            send(&mut root, &["SET", key, "1"]).get(..3),
            Some("+OK" | "-OO")
        ) {
            tries += 1;
            assert!(tries < 200, "{key} never served:\n{}", proxy.log_text());
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    Setup {
        a,
        m,
        solo,
        proxy,
        _config: config,
    }
}

fn login(proxy: &Proxy, auth: &[&str]) -> TcpStream {
    let mut s = proxy.stream();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut args = vec!["AUTH"];
    args.extend_from_slice(auth);
    assert_eq!(send(&mut s, &args), "+OK\r\n");
    s
}

fn keys_of(node: &RedisNode) -> BTreeSet<String> {
    let mut c = node.connect().unwrap();
    match c.cmd(&["KEYS", "*"]).unwrap() {
        Value::Array(keys) => keys
            .iter()
            .map(|k| String::from_utf8_lossy(k.as_bytes().unwrap_or_default()).into_owned())
            .collect(),
        other => panic!("KEYS: {other:?}"),
    }
}

fn all_keys(c: &Cluster) -> BTreeSet<String> {
    c.nodes().iter().flat_map(keys_of).collect()
}

fn value_on(c: &Cluster, key: &str) -> Option<String> {
    let owner = common::owner_of(c, key.as_bytes());
    let mut node = c.nodes()[owner].connect().unwrap();
    match node.cmd(&["GET", key]).unwrap() {
        Value::Bulk(v) => Some(String::from_utf8_lossy(&v).into_owned()),
        _ => None,
    }
}

/// Item 1 and 8: nothing a client never authenticated, a user refused, a
/// subscriber or a client over the memory limit sends reaches the mirror
/// or a HOTKEYS session (SET and BITFIELD judged by their arguments,
/// alone and in MULTI, a script of a user denied some commands); what is
/// allowed is mirrored by each key's own route.
#[test]
fn refused_requests_reach_no_mirror_and_no_hotkeys_session() {
    let s = setup("refused", "");
    let mut root = login(&s.proxy, &["root-pw"]);
    assert_eq!(
        send(
            &mut root,
            &["HOTKEYS", "START", "METRICS", "1", "NET", "COUNT", "10"]
        ),
        "+OK\r\n"
    );
    let mut anon = s.proxy.stream();
    anon.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    for args in [
        &["SET", "order:x", "v"][..],
        &["DEL", "order:keep"],
        &["INCRBY", "order:ctr", "1000"],
        &[
            "EVAL",
            "return redis.call('set','pwned','1')",
            "1",
            "order:z",
        ],
        &["MSET", "order:m1", "1", "order:m2", "2"],
    ] {
        let reply = send(&mut anon, args);
        assert!(reply.starts_with("-NOAUTH"), "{args:?}: {reply}");
    }
    // 3,000 GETs never authenticated: not counted by HOTKEYS.
    let mut burst = Vec::new();
    for _ in 0..3000 {
        burst.extend_from_slice(&common::encode(&["GET", "order:hot-unauth"]));
    }
    anon.write_all(&burst).unwrap();
    for _ in 0..3000 {
        let reply = common::reply_text(&mut anon);
        assert!(reply.starts_with("-NOAUTH"), "{reply}");
    }
    let mut alice = login(&s.proxy, &["alice", "alice-pw"]);
    let refused = send(&mut alice, &["SET", "order:a1", "v"]);
    assert!(refused.starts_with("-NOPERM"), "{refused}");
    // Judged by their arguments on the mirrored route: SET without GET
    // writes only, BITFIELD of GET reads only; the refused ones, alone or
    // in MULTI, reach neither the cluster nor the mirror, and neither does
    // a script of a user denied some commands.
    let mut ro = login(&s.proxy, &["ro", "ro-pw"]);
    assert_eq!(send(&mut ro, &["SET", "order:w1", "v"]), "+OK\r\n");
    assert_eq!(
        send(&mut ro, &["BITFIELD", "order:bf", "GET", "u8", "0"]),
        "*1\r\n:0\r\n"
    );
    for args in [
        &["SET", "order:w2", "v", "GET"][..],
        &["BITFIELD", "order:bf", "INCRBY", "u8", "0", "1"],
        &["SET", "order:r1", "v"],
    ] {
        let refused = send(&mut ro, args);
        assert!(refused.starts_with("-NOPERM"), "{args:?}: {refused}");
    }
    assert_eq!(send(&mut ro, &["MULTI"]), "+OK\r\n");
    assert_eq!(send(&mut ro, &["SET", "order:w3", "v"]), "+QUEUED\r\n");
    assert!(send(&mut ro, &["BITFIELD", "order:bf", "SET", "u8", "0", "1"]).starts_with("-NOPERM"));
    assert!(send(&mut ro, &["EXEC"]).starts_with("-EXECABORT"));
    let mut carol = login(&s.proxy, &["carol", "carol-pw"]);
    let body = "return redis.call('SET',KEYS[1],'1')";
    let refused = send(&mut carol, &["EVAL", body, "1", "order:carol"]);
    assert!(refused.starts_with("-NOPERM"), "{refused}");
    let mut sub = login(&s.proxy, &["root-pw"]);
    assert!(send(&mut sub, &["SUBSCRIBE", "ch"]).starts_with("*3"));
    let refused = send(&mut sub, &["SET", "order:sub", "v"]);
    assert!(refused.starts_with("-ERR Can't execute 'set'"), "{refused}");
    // A subcommand is named in full, as Redis names it.
    let refused = send(&mut sub, &["CLIENT", "LIST"]);
    assert!(
        refused.starts_with("-ERR Can't execute 'client|list'"),
        "{refused}"
    );
    // Allowed: mirrored, each key by its own route.
    assert_eq!(send(&mut root, &["SET", "order:ok", "v"]), "+OK\r\n");
    assert_eq!(
        send(&mut root, &["MSET", "{x}a", "1", "order:{x}b", "2"]),
        "+OK\r\n"
    );
    // An EVALSHA of a script the mirror never saw reaches it as the EVAL.
    let body = "return redis.call('SET',KEYS[1],'1')";
    assert_eq!(send(&mut root, &["EVAL", body, "1", "{x}c"]), "+OK\r\n");
    let sha = match s.a.nodes()[0].cmd(&["SCRIPT", "LOAD", body]).unwrap() {
        Value::Bulk(sha) => String::from_utf8(sha.to_vec()).unwrap(),
        other => panic!("SCRIPT LOAD: {other:?}"),
    };
    assert_eq!(
        send(&mut root, &["EVALSHA", &sha, "1", "order:sha"]),
        "+OK\r\n"
    );
    for _ in 0..10 {
        assert_eq!(send(&mut root, &["GET", "t:hotkey"]), "$-1\r\n");
    }
    let want: BTreeSet<String> = ["order:ok", "order:{x}b", "order:sha", "order:w1"]
        .map(String::from)
        .into();
    orthrus_devcluster::wait_until(Duration::from_secs(10), "mirrored", || {
        let got = all_keys(&s.m);
        if want.is_subset(&got) {
            Ok(())
        } else {
            Err(format!("{got:?}"))
        }
    })
    .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let mirrored: BTreeSet<String> = all_keys(&s.m)
        .into_iter()
        .filter(|k| k.starts_with("order:"))
        .collect();
    assert_eq!(mirrored, want);
    assert!(!all_keys(&s.a).contains("pwned"));
    let on_a = all_keys(&s.a);
    for refused in ["order:w2", "order:w3", "order:r1", "order:carol"] {
        assert!(!on_a.contains(refused), "{refused} ran: {on_a:?}");
    }
    assert_eq!(value_on(&s.a, "order:bf"), None);
    assert_eq!(value_on(&s.a, "{x}a").as_deref(), Some("1"));
    // HOTKEYS: the allowed GETs, named as sent; none of the refused ones.
    let hot = send(&mut root, &["HOTKEYS", "GET"]);
    assert!(hot.contains("t:hotkey"), "{hot}");
    assert!(!hot.contains("hot-unauth"), "{hot}");
    assert!(!hot.contains("\r\nhotkey\r\n"), "{hot}");
}

/// Item 1, the memory limit: a write refused with -OOM is not mirrored.
#[test]
fn writes_refused_over_the_memory_limit_reach_no_mirror() {
    let s = setup("oom", "memory_limit_mb = 1\n");
    let mut root = login(&s.proxy, &["root-pw"]);
    orthrus_devcluster::wait_until(Duration::from_secs(10), "over the limit", || {
        let reply = send(&mut root, &["SET", "probe", "1"]);
        if reply.starts_with("-OOM") {
            Ok(())
        } else {
            Err(reply)
        }
    })
    .unwrap();
    for i in 0..20 {
        let key = format!("order:oom{i}");
        let reply = send(&mut root, &["SET", &key, "v"]);
        assert!(reply.starts_with("-OOM"), "{reply}");
    }
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        all_keys(&s.m).iter().all(|k| !k.starts_with("order:")),
        "{:?}",
        all_keys(&s.m)
    );
}

/// Item 2: a user with key rules runs no script or function, with or
/// without declared keys, on a cluster or a standalone upstream; nor does
/// a user with every key and channel but some commands denied (a script
/// could call them); a user who may do everything still does.
#[test]
fn scripts_never_touch_keys_outside_the_users_patterns() {
    let s = setup("scripts", "");
    let mut root = login(&s.proxy, &["root-pw"]);
    assert_eq!(send(&mut root, &["SET", "bob:1", "b1"]), "+OK\r\n");
    assert_eq!(send(&mut root, &["SET", "t:bob", "tb"]), "+OK\r\n");
    let get_bob = "return redis.call('GET','bob:1')";
    let set_bob = "return redis.call('SET','bob:1','pwned')";
    let sha = send(&mut root, &["SCRIPT", "LOAD", set_bob]);
    let sha = sha.lines().nth(1).unwrap().to_owned();
    let lib = "#!lua name=steal\nredis.register_function{function_name='steal', callback=function(k) return redis.call('SET','bob:1','f') end}\nredis.register_function{function_name='peek', callback=function(k) return redis.call('GET','bob:1') end, flags={'no-writes'}}";
    assert!(send(&mut root, &["FUNCTION", "LOAD", lib]).contains("steal"));
    let mut alice = login(&s.proxy, &["alice", "alice-pw"]);
    for args in [
        &["EVAL", get_bob, "1", "alice:{bob:1}"][..],
        &["EVAL", set_bob, "1", "alice:{bob:1}"],
        &["EVAL", set_bob, "0"],
        &["EVAL_RO", get_bob, "1", "alice:{bob:1}"],
        &["EVALSHA", &sha, "1", "alice:{bob:1}"],
        &["EVALSHA_RO", &sha, "1", "alice:{bob:1}"],
        &["FCALL", "steal", "1", "alice:{bob:1}"],
        &["FCALL_RO", "peek", "1", "alice:{bob:1}"],
        &["FCALL", "steal", "0"],
    ] {
        let reply = send(&mut alice, args);
        assert!(reply.starts_with("-NOPERM"), "{args:?}: {reply}");
        assert!(!reply.contains("b1"), "{args:?}: {reply}");
    }
    let mut tuser = login(&s.proxy, &["tuser", "t-pw"]);
    let reply = send(
        &mut tuser,
        &["EVAL", "return redis.call('GET','bob')", "1", "t:tuser:x"],
    );
    assert!(reply.starts_with("-NOPERM"), "{reply}");
    let reply = send(
        &mut tuser,
        &["EVAL", "return redis.call('SET','bob','x')", "0"],
    );
    assert!(reply.starts_with("-NOPERM"), "{reply}");
    let mut carol = login(&s.proxy, &["carol", "carol-pw"]);
    assert!(send(&mut carol, &["FLUSHALL"]).starts_with("-NOPERM"));
    for args in [
        &["EVAL", "return redis.call('FLUSHALL')", "0"][..],
        &["EVAL", "return redis.call('TYPE', KEYS[1])", "1", "bob:1"],
        &["EVAL", get_bob, "1", "bob:1"],
        &["EVALSHA", &sha, "1", "bob:1"],
        &["FCALL", "steal", "1", "bob:1"],
    ] {
        let reply = send(&mut carol, args);
        assert!(reply.starts_with("-NOPERM"), "{args:?}: {reply}");
    }
    assert_eq!(send(&mut carol, &["GET", "bob:1"]), "$2\r\nb1\r\n");
    assert_eq!(value_on(&s.a, "bob:1").as_deref(), Some("b1"));
    let mut solo = s.solo.connect().unwrap();
    assert_eq!(
        solo.cmd(&["GET", "bob"]).unwrap(),
        Value::Bulk(b"tb".to_vec().into())
    );
    // Every key and channel: scripts run.
    assert_eq!(
        send(&mut root, &["EVAL", get_bob, "1", "bob:1"]),
        "$2\r\nb1\r\n"
    );
}

/// Items 3, 4, 5, 7 and 9: rules see keys with their prefix, SORT's STORE
/// key and patterns are checked, a refusal inside MULTI aborts it, keys
/// are placed as they will be sent, and shard channels are channels.
#[test]
fn rules_and_places_see_each_key_as_the_client_sent_it() {
    let s = setup("as-sent", "");
    let mut root = login(&s.proxy, &["root-pw"]);
    let mut tuser = login(&s.proxy, &["tuser", "t-pw"]);
    let mut alice = login(&s.proxy, &["alice", "alice-pw"]);
    // 3: the pattern is matched against the key as sent.
    assert_eq!(send(&mut tuser, &["SET", "t:tuser:1", "v"]), "+OK\r\n");
    assert_eq!(send(&mut tuser, &["GET", "t:tuser:1"]), "$1\r\nv\r\n");
    assert_eq!(
        send(&mut tuser, &["MSET", "t:tuser:2", "a", "t:tuser:3", "b"]),
        "+OK\r\n"
    );
    assert!(keys_of(&s.solo).contains("tuser:3"));
    let refused = send(&mut alice, &["SET", "t:alice:x", "v"]);
    assert!(refused.starts_with("-NOPERM"), "{refused}");
    assert!(send(&mut alice, &["GET", "t:alice:x"]).starts_with("-NOPERM"));
    assert!(!keys_of(&s.solo).contains("alice:x"));
    let log = send(&mut root, &["ACL", "LOG"]);
    assert!(log.contains("t:alice:x"), "{log}");
    // 4: SORT's STORE key, BY and GET.
    assert!(send(&mut root, &["RPUSH", "alice:ids", "2", "1"]).starts_with(':'));
    assert_eq!(send(&mut root, &["SET", "bob:3", "keep"]), "+OK\r\n");
    let refused = send(&mut alice, &["SORT", "alice:{bob:3}", "STORE", "bob:3"]);
    assert!(refused.starts_with("-NOPERM"), "{refused}");
    assert_eq!(value_on(&s.a, "bob:3").as_deref(), Some("keep"));
    assert_eq!(
        send(
            &mut alice,
            &["SORT", "alice:ids", "BY", "nosort", "GET", "bob:ptr:*"]
        ),
        "-ERR GET option of SORT denied due to insufficient ACL permissions.\r\n"
    );
    assert_eq!(
        send(&mut alice, &["SORT", "alice:ids", "BY", "alice:w_*"]),
        "-ERR BY option of SORT denied due to insufficient ACL permissions.\r\n"
    );
    assert_eq!(
        send(&mut alice, &["SORT", "alice:ids", "BY", "nosort"]),
        "*2\r\n$1\r\n2\r\n$1\r\n1\r\n"
    );
    assert_eq!(
        send(
            &mut alice,
            &["SORT", "alice:{ids}", "STORE", "alice:{ids}2"]
        ),
        ":0\r\n"
    );
    // 5: a refusal inside MULTI aborts it.
    assert_eq!(send(&mut alice, &["MULTI"]), "+OK\r\n");
    assert_eq!(send(&mut alice, &["SET", "alice:1", "m1"]), "+QUEUED\r\n");
    assert!(send(&mut alice, &["GET", "bob:1"]).starts_with("-NOPERM"));
    assert_eq!(send(&mut alice, &["SET", "alice:1", "m2"]), "+QUEUED\r\n");
    assert!(send(&mut alice, &["EXEC"]).starts_with("-EXECABORT"));
    assert_eq!(send(&mut alice, &["GET", "alice:1"]), "$-1\r\n");
    // A refused EXEC discards the transaction, as Redis's execCommandAbort.
    let mut nomulti = login(&s.proxy, &["noexec", "noexec-pw"]);
    assert_eq!(send(&mut nomulti, &["MULTI"]), "+OK\r\n");
    assert_eq!(send(&mut nomulti, &["SET", "alice:2", "x"]), "+QUEUED\r\n");
    let refused = send(&mut nomulti, &["EXEC"]);
    assert!(
        refused.starts_with("-EXECABORT Transaction discarded because of: NOPERM"),
        "{refused}"
    );
    assert_eq!(send(&mut nomulti, &["GET", "alice:2"]), "$-1\r\n");
    assert_eq!(
        send(&mut nomulti, &["DISCARD"]),
        "-ERR DISCARD without MULTI\r\n"
    );
    // Without MULTI too: Redis aborts whatever EXEC it refuses.
    assert_eq!(
        send(&mut nomulti, &["EXEC"]),
        "-EXECABORT Transaction discarded because of: NOPERM User noexec has no \
         permissions to run the 'exec' command\r\n"
    );
    // 7: placed as sent on: `{t1}:` cut from keys of one slot as sent,
    // two as forwarded, is split; one slot on two upstreams too.
    assert_eq!(
        send(&mut root, &["MSET", "{t1}:a", "x", "{t1}:b", "y"]),
        "+OK\r\n"
    );
    assert_eq!(
        send(&mut root, &["MGET", "{t1}:a", "{t1}:b"]),
        "*2\r\n$1\r\nx\r\n$1\r\ny\r\n"
    );
    assert!(all_keys(&s.m).is_superset(&["a", "b"].map(String::from).into()));
    assert_eq!(send(&mut root, &["SET", "s2:{t}a", "1"]), "+OK\r\n");
    assert_eq!(send(&mut root, &["SET", "{t}b", "2"]), "+OK\r\n");
    assert_eq!(
        send(&mut root, &["MGET", "s2:{t}a", "{t}b"]),
        "*2\r\n$1\r\n1\r\n$1\r\n2\r\n"
    );
    // A command that cannot split still may not span upstreams.
    assert!(send(&mut root, &["RENAME", "s2:{t}a", "{t}c"]).starts_with("-CROSSROUTE"));
    // 9: shard channels are channels, not keys.
    let mut chan = login(&s.proxy, &["chan", "chan-pw"]);
    assert_eq!(send(&mut chan, &["SPUBLISH", "alice:c", "x"]), ":0\r\n");
    assert!(send(&mut chan, &["SPUBLISH", "bob:c", "x"]).starts_with("-NOPERM"));
    let reply = send(&mut chan, &["SSUBSCRIBE", "alice:c"]);
    assert!(reply.starts_with("*3\r\n$10\r\nssubscribe"), "{reply}");
}

/// Users with every key and channel are still held to their commands;
/// Redis's `no_auth` commands (AUTH, HELLO, RESET, QUIT) are every user's;
/// SORT_RO is checked as SORT is.
#[test]
fn every_user_is_held_to_its_commands_and_may_always_log_in() {
    let s = setup("commands", "");
    let mut reader = login(&s.proxy, &["reader", "reader-pw"]);
    let refused = send(&mut reader, &["SET", "k1", "v"]);
    assert!(refused.starts_with("-NOPERM"), "{refused}");
    assert_eq!(send(&mut reader, &["GET", "k1"]), "$-1\r\n");
    assert!(send(&mut reader, &["HELLO", "2"]).starts_with('*'));
    assert_eq!(
        send(&mut reader, &["AUTH", "reader", "reader-pw"]),
        "+OK\r\n"
    );
    assert_eq!(send(&mut reader, &["RESET"]), "+RESET\r\n");
    let mut tuser = login(&s.proxy, &["tuser", "t-pw"]);
    let mut root = login(&s.proxy, &["root-pw"]);
    assert!(send(&mut root, &["RPUSH", "t:tuser:l", "b", "a"]).starts_with(':'));
    assert_eq!(
        send(&mut tuser, &["SORT_RO", "t:tuser:l", "ALPHA"]),
        "*2\r\n$1\r\na\r\n$1\r\nb\r\n"
    );
    assert_eq!(
        send(
            &mut tuser,
            &["SORT_RO", "t:tuser:l", "BY", "nosort", "GET", "#"]
        ),
        "-ERR GET option of SORT denied due to insufficient ACL permissions.\r\n"
    );
}

/// Item 6: before the cluster's COMMAND reply is learnt (here: never, the
/// backend user may not run COMMAND), subcommands keep Redis's categories.
#[test]
fn categories_hold_before_command_is_learnt() {
    let a = Cluster::start(ClusterSpec::new(3, 0).with_node(node_options())).unwrap();
    for node in a.nodes() {
        let mut c = node.connect().unwrap();
        c.cmd(&["ACL", "SETUSER", "default", "-command"]).unwrap();
        assert!(matches!(
            c.cmd(&["COMMAND", "COUNT"]),
            Ok(Value::Error(_)) | Err(_)
        ));
    }
    let proxy = Proxy::spawn(
        &a.seeds(),
        &["--requirepass", "root-pw"],
        &[
            ("ORTHRUS_BACKEND__PASSWORD", NODE_PW),
            (
                "ORTHRUS_CLIENT__USERS__ALICE__RULES",
                "on >alice-pw ~alice:* &alice:* +@all -@dangerous",
            ),
        ],
    );
    let mut alice = proxy.stream();
    alice
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    proxy.log_in(&mut alice, &["alice", "alice-pw"], &["SET", "alice:1", "v"]);
    let refused =
        |cmd: &str| format!("-NOPERM User alice has no permissions to run the '{cmd}' command\r\n");
    for (args, name) in [
        (&["CLIENT", "LIST"][..], "client|list"),
        (&["SLOWLOG", "GET"], "slowlog|get"),
        (&["CLIENT", "KILL", "USER", "root"], "client|kill"),
        (&["CLIENT", "PAUSE", "10"], "client|pause"),
        (&["KEYS", "*"], "keys"),
    ] {
        assert_eq!(send(&mut alice, args), refused(name), "{args:?}");
    }
    assert_eq!(send(&mut alice, &["GET", "alice:1"]), "$1\r\nv\r\n");
    assert_eq!(send(&mut alice, &["CLIENT", "SETNAME", "a"]), "+OK\r\n");
}

/// CLIENT TRACKING where features meet: a tracking client is refused the
/// keys of a route that cuts its prefix, as a restricted user, inside
/// MULTI and from a script, and what is refused reaches no node; a
/// tracking client's write on the mirrored route is mirrored as anyone's;
/// a client that never authenticated cannot turn tracking on.
#[test]
fn tracking_clients_meet_users_routes_mirrors_multi_and_scripts() {
    let s = setup("tracking", "");
    let tracking = |auth: &[&str]| {
        let mut c = login(&s.proxy, auth);
        assert!(send(&mut c, &["HELLO", "3"]).starts_with('%'));
        assert_eq!(send(&mut c, &["CLIENT", "TRACKING", "ON"]), "+OK\r\n");
        c
    };
    let cut = "-ERR orthrus: keys of a route with remove_prefix";
    let mut tuser = tracking(&["tuser", "t-pw"]);
    let answer = send(&mut tuser, &["SET", "t:tuser:x", "1"]);
    assert!(answer.starts_with(cut), "{answer}");
    // Its rules first: a key outside its patterns is NOPERM.
    let answer = send(&mut tuser, &["SET", "t:other", "1"]);
    assert!(answer.starts_with("-NOPERM"), "{answer}");
    assert_eq!(send(&mut tuser, &["MULTI"]), "+OK\r\n");
    assert!(send(&mut tuser, &["SET", "t:tuser:y", "1"]).starts_with("-ERR"));
    assert!(send(&mut tuser, &["EXEC"]).starts_with("-EXECABORT"));

    let mut root = tracking(&["root-pw"]);
    let set = "return redis.call('SET',KEYS[1],'1')";
    let answer = send(&mut root, &["EVAL", set, "1", "t:root"]);
    assert!(answer.starts_with(cut), "{answer}");
    let answer = send(&mut root, &["SET", "{t1}:root", "1"]);
    assert!(answer.starts_with(cut), "{answer}");
    let solo = keys_of(&s.solo);
    for key in ["tuser:x", "tuser:y", "other", "root"] {
        assert!(
            !solo.contains(key) && !solo.contains(&format!("t:{key}")),
            "{solo:?}"
        );
    }
    assert!(!all_keys(&s.m).iter().any(|k| k.contains("root")));
    // Keys no route cuts: served, and the mirrored route mirrored.
    assert_eq!(send(&mut root, &["SET", "order:trk", "v"]), "+OK\r\n");
    assert_eq!(value_on(&s.a, "order:trk").as_deref(), Some("v"));
    orthrus_devcluster::wait_until(Duration::from_secs(10), "mirrored", || {
        match value_on(&s.m, "order:trk").as_deref() {
            Some("v") => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .unwrap();

    let mut anonymous = s.proxy.stream();
    anonymous
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let answer = send(&mut anonymous, &["CLIENT", "TRACKING", "ON"]);
    assert!(answer.starts_with("-NOAUTH"), "{answer}");
    let answer = send(&mut anonymous, &["SET", "t:anon", "1"]);
    assert!(answer.starts_with("-NOAUTH"), "{answer}");
    assert!(!keys_of(&s.solo).contains("anon"));
}
