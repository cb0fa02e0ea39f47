//! Several upstreams behind one orthrus: `[upstreams.NAME]` (clusters and
//! a standalone redis-server) and `[[routes]]` by key prefix.

mod common;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use common::routes::{TempFile, config_file, start_routed};
use common::{Proxy, cluster, run_to_exit};
use orthrus_devcluster::{Cluster, NodeOptions, RedisNode, Value};
use redis::Commands;

/// Cluster `a` (the default upstream), cluster `b`, one standalone
/// server, and orthrus routing `user:` to `b` (but `user:vip:` to the
/// default) and `solo:` to the server.
struct Setup {
    a: Cluster,
    b: Cluster,
    solo: RedisNode,
    proxy: Proxy,
    /// Its `/metrics` endpoint.
    admin: SocketAddr,
    _config: TempFile,
}

fn routes_toml(b: SocketAddr, solo: SocketAddr) -> String {
    format!(
        r#"
[upstreams.b]
seeds = ["{b}"]

[upstreams.solo]
seeds = ["{solo}"]
mode = "standalone"

[[routes]]
prefix = "user:"
upstream = "b"

[[routes]]
prefix = "user:vip:"
upstream = "default"

[[routes]]
prefix = "solo:"
upstream = "solo"
"#
    )
}

fn setup(name: &str) -> Setup {
    let a = cluster(3, 0);
    let b = cluster(3, 0);
    let solo = RedisNode::start(NodeOptions::default()).expect("start redis-server");
    let config = config_file(name, &routes_toml(b.seeds()[0], solo.addr()));
    let admin = SocketAddr::from(([127, 0, 0, 1], orthrus_devcluster::free_port().unwrap()));
    let proxy = start_routed(
        &a.seeds(),
        &[
            "--config",
            config.0.to_str().unwrap(),
            "--threads",
            "2",
            "--metrics",
            &admin.to_string(),
        ],
    );
    Setup {
        a,
        b,
        solo,
        proxy,
        admin,
        _config: config,
    }
}

/// The keys of every master of `c`, one set per master.
fn keys_per_master(c: &Cluster) -> Vec<BTreeSet<String>> {
    c.masters()
        .unwrap()
        .into_iter()
        .map(|i| keys_of(&c.nodes()[i]))
        .collect()
}

fn keys_of(node: &RedisNode) -> BTreeSet<String> {
    match node.cmd(&["KEYS", "*"]).unwrap() {
        Value::Array(keys) => keys
            .iter()
            .map(|k| String::from_utf8_lossy(k.as_bytes().unwrap_or_default()).into_owned())
            .collect(),
        other => panic!("KEYS: {other:?}"),
    }
}

fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i}")).collect()
}

#[test]
fn keys_land_where_their_prefix_routes_them() {
    let s = setup("land");
    let mut c = s.proxy.client();
    let groups = [
        names("user:", 300),
        names("user:vip:", 60),
        names("solo:", 100),
        names("other:", 200),
    ];
    for keys in &groups {
        for k in keys {
            let _: () = c.set(k, k).unwrap();
        }
    }
    let [users, vips, solos, others] = &groups;
    // Cluster b: every master holds user: keys, and nothing else.
    let b = keys_per_master(&s.b);
    assert!(b.iter().all(|m| !m.is_empty()), "a master of b got no key");
    let in_b: BTreeSet<String> = b.into_iter().flatten().collect();
    assert_eq!(in_b, users.iter().cloned().collect());
    // The standalone server: the solo: keys only.
    assert_eq!(keys_of(&s.solo), solos.iter().cloned().collect());
    // The default cluster: the rest, the longest prefix winning for
    // user:vip:, on every master.
    let a = keys_per_master(&s.a);
    assert!(a.iter().all(|m| !m.is_empty()), "a master of a got no key");
    let in_a: BTreeSet<String> = a.into_iter().flatten().collect();
    let want: BTreeSet<String> = vips.iter().chain(others).cloned().collect();
    assert_eq!(in_a, want);

    // Split commands split across upstreams too, replies in order.
    let mixed = [
        "user:1",
        "solo:1",
        "other:1",
        "user:vip:1",
        "missing",
        "user:2",
    ];
    let got: Vec<Option<String>> = redis::cmd("MGET").arg(&mixed).query(&mut c).unwrap();
    let want: Vec<Option<String>> = mixed
        .iter()
        .map(|k| (*k != "missing").then(|| (*k).to_owned()))
        .collect();
    assert_eq!(got, want);
    let _: () = redis::cmd("MSET")
        .arg(&["user:m", "1", "solo:m", "2", "other:m", "3"])
        .query(&mut c)
        .unwrap();
    assert!(keys_of(&s.solo).contains("solo:m"));
    let n: usize = redis::cmd("EXISTS")
        .arg(&["user:m", "solo:m", "other:m", "nope"])
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 3);

    // Key-less counts cover every upstream.
    let total = users.len() + vips.len() + solos.len() + others.len() + 3;
    let dbsize: usize = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(dbsize, total);
    // SCAN walks every upstream once: every key exactly once.
    let mut seen: Vec<String> = c.scan().unwrap().collect::<Result<_, _>>().unwrap();
    let unique: BTreeSet<String> = seen.iter().cloned().collect();
    assert_eq!(unique.len(), seen.len(), "a key came twice");
    seen.sort();
    assert_eq!(seen.len(), total);

    let n: usize = redis::cmd("DEL")
        .arg(&["user:m", "solo:m", "other:m"])
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 3);

    // INFO upstreams: each upstream with what it was asked.
    assert!(c.incr::<_, _, i64>("user:1", 1).is_err(), "not an integer");
    let info: String = redis::cmd("INFO").arg("upstreams").query(&mut c).unwrap();
    let field = |upstream: &str, name: &str| -> u64 {
        let line = info
            .lines()
            .find_map(|l| l.strip_prefix(&format!("upstream_{upstream}:")))
            .unwrap_or_else(|| panic!("no upstream_{upstream} in {info}"));
        line.split(',')
            .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {line}"))
    };
    assert!(
        info.contains(
            "upstream_solo:mode=standalone,read_from=master,masters=1,slots_covered=16384"
        ),
        "{info}"
    );
    assert!(
        info.contains("upstream_b:mode=cluster,read_from=master,masters=3,slots_covered=16384"),
        "{info}"
    );
    // Writes, MGET/MSET/EXISTS/DEL parts and the INCR, at least.
    assert!(field("b", "requests") >= 300 + 5, "{info}");
    assert!(field("solo", "requests") >= 100 + 4, "{info}");
    assert!(field("default", "requests") >= 260, "{info}");
    assert_eq!(field("b", "errors"), 1, "{info}");
    assert_eq!(field("solo", "errors"), 0, "{info}");
    assert!(field("b", "node_time_us") > 0 && field("b", "bytes") > 0);
    // Each upstream's round trips, from its own nodes' histograms.
    for upstream in ["default", "b", "solo"] {
        let (p50, p99) = (field(upstream, "rtt_p50_us"), field(upstream, "rtt_p99_us"));
        assert!(p50 > 0 && p99 >= p50, "{upstream}: {info}");
    }
    let (status, metrics) = common::admin::get(s.admin, "/metrics");
    assert_eq!(status, 200);
    for upstream in ["default", "b", "solo"] {
        let series = |name: &str| {
            common::admin::sample(&metrics, &format!("{name}{{upstream=\"{upstream}\"}}"))
                .unwrap_or_else(|| panic!("no {name} for {upstream}: {metrics}"))
        };
        let rtts = series("orthrus_upstream_backend_duration_seconds_count");
        let requests = series("orthrus_upstream_requests_total");
        assert!(
            rtts > 0.0 && requests > 0.0,
            "{upstream}: {rtts} {requests}"
        );
    }

    // Load per slot, for every upstream: each one's hottest slots are
    // owned by its own masters, and INFO load lists every master.
    let mut hot_owners = |args: &[&str]| -> BTreeSet<String> {
        let reply: Vec<std::collections::HashMap<String, redis::Value>> =
            redis::cmd("ORTHRUS").arg(args).query(&mut c).unwrap();
        assert!(!reply.is_empty(), "{args:?}");
        reply
            .iter()
            .map(|entry| match entry.get("owner") {
                Some(redis::Value::BulkString(owner)) => {
                    String::from_utf8_lossy(owner).into_owned()
                }
                other => panic!("{args:?}: owner {other:?}"),
            })
            .collect()
    };
    let addrs = |c: &Cluster| -> BTreeSet<String> {
        c.masters()
            .unwrap()
            .into_iter()
            .map(|i| c.nodes()[i].addr().to_string())
            .collect()
    };
    let in_b = hot_owners(&["HOTSLOTS", "COUNT", "20", "UPSTREAM", "b"]);
    assert!(in_b.is_subset(&addrs(&s.b)), "{in_b:?}");
    let in_default = hot_owners(&["HOTSLOTS", "UPSTREAM", "default", "COUNT", "20"]);
    assert!(in_default.is_subset(&addrs(&s.a)), "{in_default:?}");
    assert_eq!(hot_owners(&["HOTSLOTS", "20"]), in_default);
    let in_solo = hot_owners(&["HOTSLOTS", "UPSTREAM", "solo"]);
    assert_eq!(in_solo, BTreeSet::from([s.solo.addr().to_string()]));
    let unknown: redis::RedisResult<redis::Value> = redis::cmd("ORTHRUS")
        .arg(&["HOTSLOTS", "UPSTREAM", "nope"])
        .query(&mut c);
    assert!(unknown.is_err_and(|e| e.to_string().contains("no upstream named 'nope'")));
    let load: String = redis::cmd("INFO").arg("load").query(&mut c).unwrap();
    for (upstream, masters) in [("default", 3), ("b", 3), ("solo", 1)] {
        let lines: Vec<&str> = load
            .lines()
            .filter(|l| l.ends_with(&format!(",upstream={upstream}")))
            .collect();
        assert_eq!(lines.len(), masters, "{upstream}: {load}");
        assert!(lines.iter().all(|l| !l.contains(",requests=0,")), "{load}");
    }

    // HOTKEYS sees every upstream, its totals too: a session with keys of
    // named upstreams only.
    let mut raw = s.proxy.stream();
    let start = ["HOTKEYS", "START", "METRICS", "1", "NET", "COUNT", "5"];
    assert_eq!(common::send(&mut raw, &start), "+OK\r\n");
    for i in 0..20 {
        for key in [format!("user:hk{i}"), format!("solo:hk{i}")] {
            assert_eq!(common::send(&mut raw, &["SET", &key, "x"]), "+OK\r\n");
        }
    }
    assert_eq!(common::send(&mut raw, &["HOTKEYS", "STOP"]), "+OK\r\n");
    let report = common::send(&mut raw, &["HOTKEYS", "GET"]);
    let total: u64 = report
        .split("net-bytes-all-commands-all-slots\r\n:")
        .nth(1)
        .and_then(|rest| rest.split("\r\n").next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{report}"));
    // 40 SETs of about 40 bytes with their replies: both upstreams' (20
    // would not reach it), none of them the default one's.
    assert!(total >= 40 * 35, "{total}: {report}");
    assert!(report.contains(":hk1"), "{report}");
}

#[test]
fn commands_across_routes_are_refused_and_those_within_one_work() {
    let s = setup("across");
    let mut c = s.proxy.client();
    let err = redis::cmd("SUNION")
        .arg(&["user:{t}a", "solo:{t}b"])
        .query::<Vec<String>>(&mut c)
        .unwrap_err();
    assert_eq!(err.code(), Some("CROSSROUTE"), "{err}");
    // Same slot, different routes: still refused.
    let err = redis::cmd("RENAME")
        .arg(&["user:{t}a", "other:{t}a"])
        .query::<()>(&mut c)
        .unwrap_err();
    assert_eq!(err.code(), Some("CROSSROUTE"), "{err}");

    // A transaction across routes is refused at queue time and aborted.
    let mut raw = s.proxy.stream();
    raw.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    assert_eq!(common::send(&mut raw, &["MULTI"]), "+OK\r\n");
    assert_eq!(
        common::send(&mut raw, &["SET", "user:{t}x", "1"]),
        "+QUEUED\r\n"
    );
    let refused = common::send(&mut raw, &["SET", "solo:{t}x", "1"]);
    assert!(refused.starts_with("-CROSSROUTE"), "{refused:?}");
    assert!(common::send(&mut raw, &["EXEC"]).starts_with("-EXECABORT"));
    assert!(keys_of(&s.solo).is_empty());

    // Within one route: MULTI, WATCH, a script, a blocking pop.
    let (x, y): (i64, i64) = redis::pipe()
        .atomic()
        .incr("user:{t}n", 1)
        .incr("user:{t}n", 2)
        .query(&mut c)
        .unwrap();
    assert_eq!((x, y), (1, 3));
    let _: () = redis::cmd("WATCH").arg("solo:w").query(&mut c).unwrap();
    let (ok,): (String,) = redis::pipe()
        .atomic()
        .set("solo:w", "1")
        .query(&mut c)
        .unwrap();
    assert_eq!(ok, "OK");
    assert!(keys_of(&s.solo).contains("solo:w"));
    let got: String = redis::cmd("EVAL")
        .arg("redis.call('SET', KEYS[1], ARGV[1]) return redis.call('GET', KEYS[1])")
        .arg(1)
        .arg("user:script")
        .arg("v")
        .query(&mut c)
        .unwrap();
    assert_eq!(got, "v");
    let in_b: BTreeSet<String> = keys_per_master(&s.b).into_iter().flatten().collect();
    assert!(in_b.contains("user:script") && in_b.contains("user:{t}n"));
    let _: () = c.rpush("user:q", "job").unwrap();
    let popped: Option<(String, String)> = c.blpop("user:q", 1.0).unwrap();
    assert_eq!(popped, Some(("user:q".into(), "job".into())));
}

#[test]
fn a_moved_slot_of_a_named_upstream_is_followed_there() {
    let s = setup("moved");
    let mut c = s.proxy.client();
    // Two keys of the same slot, one in each cluster.
    let (key, other) = ("user:{m}k", "other:{m}k");
    let _: () = c.set(key, "before").unwrap();
    let slot = orthrus_cluster::Slot::for_key(key.as_bytes()).get();
    let from = s.b.master_of_slot(slot).unwrap();
    let to =
        s.b.masters()
            .unwrap()
            .into_iter()
            .find(|&m| m != from)
            .unwrap();
    s.b.move_slot(slot, to).unwrap();
    let moved = s.proxy.info_field("orthrus_redirects_moved");
    // orthrus still has the old owner: the MOVED patches b's map, and the
    // default cluster's map keeps that slot where it is. The key of the
    // default cluster, sent at once (before the refresh the MOVED asks
    // for), goes to its own cluster's owner.
    let _: () = c.set(key, "after").unwrap();
    let _: () = c.set(other, "a").unwrap();
    assert_eq!(s.proxy.info_field("orthrus_redirects_moved"), moved + 1);
    let owner = s.a.master_of_slot(slot).unwrap();
    assert!(keys_of(&s.a.nodes()[owner]).contains(other));
    assert!(!keys_of(&s.b.nodes()[to]).contains(other));
    assert!(keys_of(&s.b.nodes()[to]).contains(key));
    for i in 0..20 {
        let _: () = c.set(key, i).unwrap();
        let v: i64 = c.get(key).unwrap();
        assert_eq!(v, i);
    }
    assert_eq!(s.proxy.info_field("orthrus_redirects_moved"), moved + 1);
}

#[test]
fn bad_routes_are_refused_at_start_up_with_one_line() {
    let cases = [
        (
            "[[routes]]\nprefix = \"a:\"\nupstream = \"nope\"\n",
            "no upstream named \"nope\"",
        ),
        (
            "[upstreams.b]\nseeds = [\"127.0.0.1:2\"]\n[[routes]]\nprefix = \"a:\"\nupstream = \"b\"\n[[routes]]\nprefix = \"a:\"\nupstream = \"default\"\n",
            "prefix \"a:\" is routed twice",
        ),
        (
            "[upstreams.default]\nseeds = [\"127.0.0.1:1\"]\n",
            "\"default\" is the top-level seeds",
        ),
        ("[upstreams.b]\nseeds = []\n", "b: no seeds"),
        (
            "[upstreams.b]\nseeds = [\"127.0.0.1:1\", \"127.0.0.1:2\"]\nmode = \"standalone\"\n",
            "standalone takes one seed",
        ),
        (
            "[[routes]]\nprefix = \"a:\"\nupstream = \"default\"\nmirror = [\"nope\"]\n",
            "no upstream named \"nope\" to mirror to",
        ),
        (
            "[upstreams.b]\nseeds = [\"127.0.0.1:2\"]\n[[routes]]\nprefix = \"a:\"\nupstream = \"b\"\nmirror = [\"b\"]\n",
            "mirror \"b\" is the route's own upstream",
        ),
        (
            "[upstreams.b]\nseeds = [\"127.0.0.1:2\"]\n[[routes]]\nprefix = \"a:\"\nupstream = \"default\"\nmirror = [\"b\"]\nmirror_fraction = 1.5\n",
            "mirror_fraction 1.5 is not between 0 and 1",
        ),
        (
            "[[routes]]\nprefix = \"a:\"\nupstream = \"default\"\nmirror_writes_only = true\n",
            "need mirror",
        ),
        (
            "[[routes]]\nprefix = \"\"\nupstream = \"default\"\n",
            "needs a prefix",
        ),
        (
            "[upstreams.b]\nseeds = [\"127.0.0.1:1\"]\n",
            "b: seed 127.0.0.1:1 is also a seed of \"default\"",
        ),
        (
            "[upstreams.b]\nseeds = [\"127.0.0.1:2\"]\nread_from = \"nearest\"\n",
            "upstreams.b.read_from: \"nearest\" is not one of master, replica",
        ),
        (
            "[upstreams.b]\nseeds = [\"127.0.0.1:2\"]\nrequest_timeout_ms = 0\n",
            "upstreams.b.request_timeout_ms: must be greater than 0",
        ),
        (
            "[upstreams.b]\nseeds = [\"127.0.0.1:2\"]\n[upstreams.b.tls]\nenabled = true\nca_cert_file = \"/nonexistent/b-ca.crt\"\n",
            "upstreams.b.tls.ca_cert_file: /nonexistent/b-ca.crt",
        ),
        (
            "[upstreams.b]\nseeds = [\"127.0.0.1:2\"]\n[upstreams.b.tls]\nenabled = true\ncert_file = \"/x.crt\"\n",
            "upstreams.b.tls.cert_file: needs upstreams.b.tls.key_file too",
        ),
        (
            "[upstreams.b]\nseeds = [\"127.0.0.1:2\"]\n[upstreams.b.tls]\nca_cert_file = \"/b-ca.crt\"\n",
            "upstreams.b.tls: names certificate files or a server name but not enabled = true",
        ),
    ];
    for (i, (toml, said)) in cases.iter().enumerate() {
        let file = config_file(
            &format!("bad{i}"),
            &format!("seeds = [\"127.0.0.1:1\"]\n{toml}"),
        );
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_orthrus"));
        cmd.args(["--check-config", "--config", file.0.to_str().unwrap()]);
        let out = run_to_exit(cmd, Duration::from_secs(10));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{toml}: {err}");
        assert!(err.contains(said), "{toml}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
    // A good file: --check-config shows the routes.
    let file = config_file(
        "good",
        &format!(
            "seeds = [\"127.0.0.1:1\"]\n{}",
            routes_toml(
                "127.0.0.1:2".parse().unwrap(),
                "127.0.0.1:3".parse().unwrap()
            )
        ),
    );
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_orthrus"));
    cmd.args(["--check-config", "--config", file.0.to_str().unwrap()]);
    let out = run_to_exit(cmd, Duration::from_secs(10));
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{shown}");
    assert!(
        shown.contains("[[routes]]") && shown.contains("prefix = \"user:vip:\""),
        "{shown}"
    );
}

/// Cluster `a` (the default upstream) mirrored to cluster `b`: `order:`
/// writes only, `cache:` with a fraction of 0.
fn mirrored(name: &str) -> (Cluster, Cluster, Proxy, TempFile) {
    let a = cluster(3, 0);
    let b = cluster(3, 0);
    let config = config_file(
        name,
        &format!(
            r#"
[upstreams.b]
seeds = ["{}"]

[[routes]]
prefix = "order:"
upstream = "default"
mirror = ["b"]
mirror_writes_only = true

[[routes]]
prefix = "cache:"
upstream = "default"
mirror = ["b"]
mirror_fraction = 0.0
"#,
            b.seeds()[0]
        ),
    );
    let proxy = start_routed(
        &a.seeds(),
        &["--config", config.0.to_str().unwrap(), "--threads", "2"],
    );
    (a, b, proxy, config)
}

fn all_keys(c: &Cluster) -> BTreeSet<String> {
    keys_per_master(c).into_iter().flatten().collect()
}

/// `threads` clients each writing `order:{t}:{i}` until `stop` (or
/// `each` writes); the keys acknowledged and the errors.
fn writers(
    proxy: &Proxy,
    threads: usize,
    (each, pause): (usize, Duration),
    stop: &std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> Vec<std::thread::JoinHandle<(Vec<String>, Vec<String>)>> {
    (0..threads)
        .map(|t| {
            let mut c = proxy.client();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let (mut acked, mut errors) = (Vec::new(), Vec::new());
                for i in 0..each {
                    if stop.load(std::sync::atomic::Ordering::Relaxed) {
                        break;
                    }
                    let key = format!("order:{t}:{i}");
                    match c.set::<_, _, ()>(&key, i) {
                        Ok(()) => acked.push(key),
                        Err(e) => errors.push(format!("{key}: {e}")),
                    }
                    if !pause.is_zero() {
                        std::thread::sleep(pause);
                    }
                }
                (acked, errors)
            })
        })
        .collect()
}

#[test]
fn writes_are_mirrored_and_reads_are_not() {
    let (a, b, proxy, _config) = mirrored("mirror");
    // Keys only read through orthrus: written straight into cluster a.
    let read_only: Vec<String> = names("order:ro:", 50);
    for k in &read_only {
        let owner = common::owner_of(&a, k.as_bytes());
        a.nodes()[owner].cmd_ok(&["SET", k, "v"]).unwrap();
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut reader = proxy.client();
    let handles = writers(&proxy, 8, (300, Duration::ZERO), &stop);
    for k in &read_only {
        let v: String = reader.get(k).unwrap();
        assert_eq!(v, "v");
    }
    let mut written: BTreeSet<String> = BTreeSet::new();
    for h in handles {
        let (acked, errors) = h.join().unwrap();
        assert!(errors.is_empty(), "{errors:?}");
        written.extend(acked);
    }
    assert_eq!(written.len(), 2400);
    // A split write: each part copied.
    let _: () = redis::cmd("MSET")
        .arg(&["order:m1", "1", "order:m2", "2", "order:m3", "3"])
        .query(&mut reader)
        .unwrap();
    written.extend(["order:m1", "order:m2", "order:m3"].map(String::from));
    // A route with a fraction of 0 copies nothing.
    let _: () = reader.set("cache:1", "x").unwrap();
    // Fire and forget: the copies land soon after the replies.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut in_b = all_keys(&b);
    while in_b != written && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        in_b = all_keys(&b);
    }
    assert_eq!(in_b, written, "the mirror holds exactly the keys written");
    let in_a = all_keys(&a);
    assert!(written.iter().all(|k| in_a.contains(k)));
    assert!(in_a.contains("cache:1"));
    assert_eq!(proxy.info_field("orthrus_mirror_sent"), 2400 + 3);
    assert_eq!(proxy.info_field("orthrus_mirror_errors"), 0);
    assert_eq!(proxy.info_field("orthrus_mirror_dropped"), 0);
}

#[test]
fn a_dead_mirror_costs_the_primary_no_error() {
    let (a, mut b, proxy, _config) = mirrored("deadmirror");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let handles = writers(&proxy, 8, (1_000_000, Duration::ZERO), &stop);
    std::thread::sleep(Duration::from_millis(500));
    // Writes a second, with the mirror up and then dead (for the log:
    // speed is not asserted here).
    let rate = |during: Duration| {
        let from = proxy.info_field("total_commands_processed");
        std::thread::sleep(during);
        (proxy.info_field("total_commands_processed") - from) as f64 / during.as_secs_f64()
    };
    let up = rate(Duration::from_millis(1500));
    let before = proxy.info_field("orthrus_mirror_sent");
    let started = std::time::Instant::now();
    for i in 0..b.nodes().len() {
        b.kill(i);
    }
    let down = rate(Duration::from_millis(2000));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut written = 0;
    for h in handles {
        let (acked, errors) = h.join().unwrap();
        assert!(errors.is_empty(), "the primary failed: {errors:?}");
        written += acked.len();
    }
    let failed =
        proxy.info_field("orthrus_mirror_errors") + proxy.info_field("orthrus_mirror_dropped");
    eprintln!(
        "{written} writes, {before} mirrored before the kill; {failed} copies failed or dropped in the {:?} after it; {up:.0} writes/s with the mirror up, {down:.0} with it dead",
        started.elapsed()
    );
    assert!(failed > 0, "the dead mirror's losses are counted");
    let in_a = all_keys(&a);
    assert_eq!(
        in_a.len(),
        written,
        "every acknowledged write is in the primary"
    );
}

/// The keys of cluster `c` that start with `prefix`, with their values.
fn values_of(c: &Cluster, prefix: &str) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for m in c.masters().unwrap() {
        let node = &c.nodes()[m];
        let mut cursor = "0".to_owned();
        loop {
            let reply = node
                .cmd(&[
                    "SCAN",
                    &cursor,
                    "MATCH",
                    &format!("{prefix}*"),
                    "COUNT",
                    "1000",
                ])
                .unwrap();
            let Value::Array(parts) = reply else {
                panic!("SCAN: {reply:?}")
            };
            cursor = String::from_utf8_lossy(parts[0].as_bytes().unwrap()).into_owned();
            let Value::Array(keys) = &parts[1] else {
                panic!("SCAN keys")
            };
            for k in keys {
                let k = String::from_utf8_lossy(k.as_bytes().unwrap()).into_owned();
                if let Some(v) = node.cmd(&["GET", &k]).unwrap().as_bytes() {
                    out.push((k, v.to_vec()));
                }
            }
            if cursor == "0" {
                break;
            }
        }
    }
    out
}

#[test]
fn a_prefix_moves_to_another_cluster_under_load_with_no_error_and_no_lost_key() {
    // The recipe of docs/operations.md: mirror the prefix's writes to the
    // new cluster, copy the old keys (never over a newer copy), switch the
    // route, each step a SIGHUP, while 8 clients write.
    let a = cluster(3, 0);
    let b = cluster(3, 0);
    let upstream = format!("[upstreams.b]\nseeds = [\"{}\"]\n", b.seeds()[0]);
    let config = config_file("migrate", &upstream);
    let proxy = start_routed(
        &a.seeds(),
        &["--config", config.0.to_str().unwrap(), "--threads", "2"],
    );
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let handles = writers(&proxy, 8, (1_000_000, Duration::from_millis(2)), &stop);
    std::thread::sleep(Duration::from_millis(700));

    // 1. Writes to order: are copied to b.
    let mirroring = format!(
        "{upstream}[[routes]]\nprefix = \"order:\"\nupstream = \"default\"\nmirror = [\"b\"]\nmirror_writes_only = true\n"
    );
    std::fs::write(&config.0, mirroring).unwrap();
    proxy.signal("HUP");
    orthrus_devcluster::wait_until(Duration::from_secs(10), "mirroring", || {
        let sent = proxy.info_field("orthrus_mirror_sent");
        if sent > 0 {
            Ok(())
        } else {
            Err("no copy yet".into())
        }
    })
    .unwrap();
    // 2. The keys written before: copied, never over a newer copy (NX).
    let old = values_of(&a, "order:");
    assert!(!old.is_empty());
    for (key, value) in &old {
        let owner = common::owner_of(&b, key.as_bytes());
        b.nodes()[owner]
            .cmd(&[b"SET".as_slice(), key.as_bytes(), value.as_slice(), b"NX"])
            .unwrap();
    }
    // 3. The route switched: order: is b's.
    let switched = format!("{upstream}[[routes]]\nprefix = \"order:\"\nupstream = \"b\"\n");
    std::fs::write(&config.0, switched).unwrap();
    proxy.signal("HUP");
    let mut probe = proxy.client();
    orthrus_devcluster::wait_until(Duration::from_secs(10), "the switch", || {
        let _: () = probe.set("order:probe", "1").map_err(|e| e.to_string())?;
        let owner = common::owner_of(&b, b"order:probe");
        match b.nodes()[owner]
            .cmd(&["EXISTS", "order:probe"])
            .unwrap()
            .as_int()
        {
            Some(1) => Ok(()),
            _ => Err("order:probe not in b yet".into()),
        }
    })
    .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut written = BTreeSet::new();
    for h in handles {
        let (acked, errors) = h.join().unwrap();
        assert!(errors.is_empty(), "client errors: {errors:?}");
        written.extend(acked);
    }
    // Every acknowledged key is in b (the last copies land within their
    // deadline), with the value written.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let missing = loop {
        let in_b: BTreeSet<String> = all_keys(&b);
        let missing: Vec<&String> = written.iter().filter(|k| !in_b.contains(*k)).collect();
        if missing.is_empty() || std::time::Instant::now() > deadline {
            break missing.len();
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    eprintln!(
        "{} keys written across the move, {} copied as old keys, {} mirrored",
        written.len(),
        old.len(),
        proxy.info_field("orthrus_mirror_sent")
    );
    assert_eq!(missing, 0, "keys lost in the move");
    let mut c = proxy.client();
    for key in written.iter().step_by(97) {
        let i: usize = key.rsplit(':').next().unwrap().parse().unwrap();
        let v: usize = c.get(key).unwrap();
        assert_eq!(v, i, "{key}");
    }
}

#[test]
fn an_upstream_with_its_own_password_is_served_with_it() {
    let a = cluster(3, 0);
    let b = Cluster::start(
        orthrus_devcluster::ClusterSpec::new(3, 0)
            .with_node(NodeOptions::cluster().with_password("b-secret")),
    )
    .expect("start cluster b");
    let config = config_file(
        "password",
        &format!(
            "[upstreams.b]\nseeds = [\"{}\"]\npassword = \"b-secret\"\n[[routes]]\nprefix = \"user:\"\nupstream = \"b\"\n",
            b.seeds()[0]
        ),
    );
    let path = config.0.to_str().unwrap();
    let proxy = start_routed(&a.seeds(), &["--config", path]);
    let mut c = proxy.client();
    for i in 0..50 {
        let _: () = c.set(format!("user:{i}"), i).unwrap();
        let _: () = c.set(format!("other:{i}"), i).unwrap();
    }
    assert_eq!(all_keys(&b).len(), 50);
    assert_eq!(all_keys(&a).len(), 50);
    // --check-config masks it.
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_orthrus"));
    cmd.args(["--check-config", "--config", path, "--seeds", "127.0.0.1:1"]);
    let out = run_to_exit(cmd, Duration::from_secs(10));
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.contains("password = \"********\"") && !shown.contains("b-secret"),
        "{shown}"
    );
}

#[test]
fn remove_prefix_sends_keys_without_their_prefix() {
    let a = cluster(3, 0);
    let b = cluster(3, 0);
    let solo = RedisNode::start(NodeOptions::default()).expect("start redis-server");
    let config = config_file(
        "strip",
        &format!(
            "[upstreams.b]\nseeds = [\"{}\"]\n[upstreams.solo]\nseeds = [\"{}\"]\nmode = \"standalone\"\n\
             [[routes]]\nprefix = \"u:\"\nupstream = \"b\"\nremove_prefix = true\n\
             [[routes]]\nprefix = \"s:\"\nupstream = \"solo\"\nremove_prefix = true\n",
            b.seeds()[0],
            solo.addr()
        ),
    );
    let proxy = start_routed(
        &a.seeds(),
        &["--config", config.0.to_str().unwrap(), "--threads", "2"],
    );
    let mut c = proxy.client();
    let _: () = c.set("s:k1", "v1").unwrap();
    assert_eq!(keys_of(&solo), BTreeSet::from(["k1".to_owned()]));
    let v: String = c.get("s:k1").unwrap();
    assert_eq!(v, "v1");
    // The slot is the cut key's: "u:foo" is "foo" on foo's owner in b.
    let _: () = c.set("u:foo", "f").unwrap();
    let owner = common::owner_of(&b, b"foo");
    assert!(keys_of(&b.nodes()[owner]).contains("foo"));
    // Split across three upstreams, cut where the route says.
    let _: () = redis::cmd("MSET")
        .arg(&["s:{x}a", "1", "u:bar", "2", "other", "3"])
        .query(&mut c)
        .unwrap();
    assert!(keys_of(&solo).contains("{x}a"));
    assert!(all_keys(&b).contains("bar"));
    assert!(all_keys(&a).contains("other"));
    let got: Vec<Option<String>> = redis::cmd("MGET")
        .arg(&["s:{x}a", "u:bar", "other", "s:none", "u:foo"])
        .query(&mut c)
        .unwrap();
    assert_eq!(
        got,
        [Some("1"), Some("2"), Some("3"), None, Some("f")].map(|v| v.map(String::from))
    );
    // Keys of one slot as cut, in one command; a script's keys cut too.
    let _: () = redis::cmd("MSET")
        .arg(&["u:{t}1", "a", "u:{t}2", "b"])
        .query(&mut c)
        .unwrap();
    let n: usize = redis::cmd("DEL")
        .arg(&["u:{t}1", "u:{t}2"])
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 2);
    let _: () = redis::cmd("EVAL")
        .arg("return redis.call('SET', KEYS[1], 'e')")
        .arg(1)
        .arg("s:script")
        .query(&mut c)
        .unwrap();
    assert!(keys_of(&solo).contains("script"));
    // A blocking command whose reply names no key: cut and run as one.
    let _: () = c.lpush("s:{q}src", "x").unwrap();
    let moved: Option<String> = redis::cmd("BLMOVE")
        .arg(&["s:{q}src", "s:{q}dst", "LEFT", "LEFT", "1"])
        .query(&mut c)
        .unwrap();
    assert_eq!(moved.as_deref(), Some("x"));
    assert!(keys_of(&solo).contains("{q}dst"));
    // Replies that name keys would lose the prefix: refused.
    let err = c
        .blpop::<_, Option<(String, String)>>("s:q", 0.1)
        .unwrap_err();
    assert!(err.to_string().contains("remove_prefix"), "{err}");
    // Not inside MULTI.
    let mut raw = proxy.stream();
    raw.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    assert_eq!(common::send(&mut raw, &["MULTI"]), "+OK\r\n");
    let refused = common::send(&mut raw, &["SET", "s:m", "1"]);
    assert!(refused.contains("remove_prefix"), "{refused:?}");
    assert!(common::send(&mut raw, &["EXEC"]).starts_with("-EXECABORT"));
    assert!(!keys_of(&solo).contains("m") && !keys_of(&solo).contains("s:m"));
}

#[test]
fn an_upstream_with_its_own_tls_is_reached_over_it() {
    if !common::tls::nodes_have_tls("an_upstream_with_its_own_tls_is_reached_over_it") {
        return;
    }
    // The default cluster speaks plain TCP, cluster b TLS only: each is
    // reached only with its own setting.
    let pki = common::tls::Pki::new();
    let ca = pki.ca("ca");
    let a = cluster(3, 0);
    let b = Cluster::start(
        orthrus_devcluster::ClusterSpec::new(1, 0)
            .with_node(NodeOptions::cluster().with_tls(pki.node_files("ca", "node"))),
    )
    .expect("start TLS cluster");
    let config = config_file(
        "tls",
        &format!(
            "[upstreams.b]\nseeds = [\"{}\"]\n\n[upstreams.b.tls]\nenabled = true\nca_cert_file = \"{}\"\n\n[[routes]]\nprefix = \"user:\"\nupstream = \"b\"\n",
            b.seeds()[0],
            ca.display()
        ),
    );
    let proxy = start_routed(&a.seeds(), &["--config", config.0.to_str().unwrap()]);
    let mut c = proxy.client();
    for i in 0..50 {
        let () = c.set(format!("user:{i}"), i).unwrap();
        let () = c.set(format!("other:{i}"), i).unwrap();
    }
    for i in 0..50 {
        let got: (i64, i64) = redis::pipe()
            .get(format!("user:{i}"))
            .get(format!("other:{i}"))
            .query(&mut c)
            .unwrap();
        assert_eq!(got, (i, i));
    }
    assert_eq!(
        keys_of(&b.nodes()[0]),
        names("user:", 50).into_iter().collect()
    );
    let in_a: BTreeSet<String> = keys_per_master(&a).into_iter().flatten().collect();
    assert_eq!(in_a, names("other:", 50).into_iter().collect());
}

#[test]
fn an_upstreams_own_request_timeout_bounds_its_requests() {
    use std::io::{Read as _, Write as _};
    let a = cluster(1, 0);
    let solo = RedisNode::start(NodeOptions::default()).expect("start redis-server");
    let config = config_file(
        "timeout",
        &format!(
            "[upstreams.solo]\nseeds = [\"{}\"]\nmode = \"standalone\"\nrequest_timeout_ms = 300\nconnect_timeout_ms = 200\n\n[[routes]]\nprefix = \"solo:\"\nupstream = \"solo\"\n",
            solo.addr()
        ),
    );
    let proxy = start_routed(&a.seeds(), &["--config", config.0.to_str().unwrap()]);
    let mut c = proxy.client();
    let () = c.set("solo:k", "1").unwrap();
    // The server busy for 1.5 s: a script that spins, sent straight to it.
    let spin = "local t = redis.call('TIME') local s = t[1] * 1000000 + t[2] \
                repeat local n = redis.call('TIME') until n[1] * 1000000 + n[2] - s > 1500000 \
                return 1";
    let mut busy = std::net::TcpStream::connect(solo.addr()).unwrap();
    busy.write_all(&common::encode(&["EVAL", spin, "0"]))
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let started = std::time::Instant::now();
    let mut raw = proxy.stream();
    let answer = common::send(&mut raw, &["SET", "solo:k", "2"]);
    let waited = started.elapsed();
    assert!(
        answer.starts_with("-") && answer.contains("upstreams.solo.request_timeout_ms"),
        "{answer:?}"
    );
    assert!(
        waited < Duration::from_millis(1300),
        "answered after {waited:?}, not at its upstream's 300 ms deadline"
    );
    // The default upstream keeps its own deadline and is served meanwhile.
    let () = c.set("other:k", "1").unwrap();
    let mut done = [0u8; 4];
    busy.read_exact(&mut done).unwrap();
    assert_eq!(&done, b":1\r\n");
    orthrus_devcluster::wait_until(Duration::from_secs(10), "solo served again", || {
        match common::send(&mut raw, &["SET", "solo:k", "3"]).as_str() {
            "+OK\r\n" => Ok(()),
            other => Err(other.to_owned()),
        }
    })
    .unwrap();
}

#[test]
fn an_upstream_that_never_answers_holds_back_no_other() {
    // b's only seed accepts connections and never answers, and b waits a
    // minute for each reply: c, refreshed on its own, is served at once.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let a = cluster(1, 0);
    let c = RedisNode::start(NodeOptions::default()).expect("start redis-server");
    let config = config_file(
        "silent",
        &format!(
            "[upstreams.b]\nseeds = [\"{}\"]\nconnect_timeout_ms = 60000\n\n[upstreams.c]\nseeds = [\"{}\"]\nmode = \"standalone\"\n\n[[routes]]\nprefix = \"b:\"\nupstream = \"b\"\n\n[[routes]]\nprefix = \"c:\"\nupstream = \"c\"\n",
            silent.local_addr().unwrap(),
            c.addr()
        ),
    );
    let proxy = Proxy::start(&a.seeds(), &["--config", config.0.to_str().unwrap()]);
    // Within 10 s, while b's first attempt waits its minute.
    common::routes::wait_known(&proxy, Some("c"), Duration::from_secs(10));
    let mut raw = proxy.stream();
    assert_eq!(common::send(&mut raw, &["SET", "c:k", "1"]), "+OK\r\n");
    assert_eq!(common::send(&mut raw, &["SET", "a:k", "1"]), "+OK\r\n");
    let refused = common::send(&mut raw, &["SET", "b:k", "1"]);
    assert!(refused.starts_with("-CLUSTERDOWN"), "{refused:?}");
    assert_eq!(keys_of(&c), BTreeSet::from(["c:k".to_owned()]));
}
