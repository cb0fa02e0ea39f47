//! Latency figures of the real binary in front of a real cluster: INFO's
//! `latency` section and `instantaneous_ops_per_sec`, CONFIG RESETSTAT,
//! and the SLOWLOG with its backend/proxy split. A blocking command with a
//! known timeout gives a request whose time is known and spent on a node.

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::Proxy;
use redis::Value;

/// `latency_*` lines of INFO: name → (calls, p50, p99, p99.9).
fn latency_lines(con: &mut redis::Connection) -> HashMap<String, [u64; 4]> {
    let info: String = redis::cmd("INFO").arg("latency").query(con).expect("INFO");
    assert!(info.starts_with("# Latency\r\n"), "{info}");
    let mut lines = HashMap::new();
    for line in info.lines().skip(1).filter(|l| !l.is_empty()) {
        let (name, fields) = line.split_once(':').expect("name:fields");
        let mut values = [0u64; 4];
        for (i, key) in ["calls", "p50", "p99", "p99.9"].iter().enumerate() {
            values[i] = fields
                .split(',')
                .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
                .unwrap_or_else(|| panic!("no {key} in {line}"))
                .parse()
                .expect("integer");
        }
        assert!(
            values[1] <= values[2] && values[2] <= values[3],
            "percentiles in order: {line}"
        );
        lines.insert(name.to_owned(), values);
    }
    lines
}

/// `n` HSETs, one field each.
fn hset_fields(con: &mut redis::Connection, n: usize) {
    for i in 0..n {
        let _: i64 = redis::cmd("HSET")
            .arg("lat:h")
            .arg(i)
            .arg(i)
            .query(con)
            .unwrap();
    }
}

#[test]
fn info_latency_counts_families_and_splits_backend_time() {
    let cluster = common::cluster(3, 0);
    let proxy = Proxy::start(&cluster.seeds(), &[]);
    proxy.wait_ready(Duration::from_secs(20));
    let mut con = proxy.client();
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut con)
        .unwrap();

    const N: usize = 200;
    for i in 0..N {
        let _: () = redis::cmd("SET")
            .arg(format!("lat:{i}"))
            .arg(i)
            .query(&mut con)
            .unwrap();
        let _: String = redis::cmd("GET")
            .arg(format!("lat:{i}"))
            .query(&mut con)
            .unwrap();
    }
    hset_fields(&mut con, 50);
    // MGET over several slots: split, and still one string command.
    let _: Vec<String> = redis::cmd("MGET")
        .arg(&["lat:1", "lat:2", "lat:3", "lat:4"])
        .query(&mut con)
        .unwrap();
    // BLPOP on an empty list times out after 0.3 s on the node.
    let started = Instant::now();
    let popped: Value = redis::cmd("BLPOP")
        .arg("lat:empty")
        .arg("0.3")
        .query(&mut con)
        .unwrap();
    assert_eq!(popped, Value::Nil);
    let blpop_took = started.elapsed();

    let lines = latency_lines(&mut con);
    let get = |name: &str| {
        *lines
            .get(name)
            .unwrap_or_else(|| panic!("no {name}: {lines:?}"))
    };
    let strings = 2 * N as u64 + 1;
    assert_eq!(get("latency_percentiles_usec_string")[0], strings);
    assert_eq!(get("latency_backend_percentiles_usec_string")[0], strings);
    assert_eq!(get("latency_proxy_percentiles_usec_string")[0], strings);
    assert_eq!(get("latency_percentiles_usec_hash")[0], 50);
    // A loopback round trip through Redis takes some microseconds.
    assert!(get("latency_backend_percentiles_usec_string")[1] >= 1);
    // The total is never less than its backend part.
    assert!(
        get("latency_percentiles_usec_string")[3]
            >= get("latency_backend_percentiles_usec_string")[1]
    );

    // The BLPOP: about 0.3 s, nearly all of it on the node.
    let [calls, p50, ..] = get("latency_percentiles_usec_blocking");
    assert_eq!(calls, 1);
    let blpop_us = u64::try_from(blpop_took.as_micros()).unwrap();
    assert!(p50 >= 280_000, "BLPOP 0.3 took {p50} µs in INFO");
    // Bucket tops are at most 1/16 above the value.
    assert!(
        p50 <= blpop_us + blpop_us / 16 + 1,
        "{p50} µs vs {blpop_us} µs measured by the client"
    );
    let backend = get("latency_backend_percentiles_usec_blocking")[1];
    let own = get("latency_proxy_percentiles_usec_blocking")[1];
    assert!(backend >= 280_000, "backend part {backend} µs");
    assert!(own < 100_000, "orthrus's own part {own} µs");
    // The commands of the connection itself (INFO is answered locally).
    assert!(lines.contains_key("latency_percentiles_usec_server"));

    // Like Redis's latencystats: in INFO ALL, not in the default set.
    let info: String = redis::cmd("INFO").query(&mut con).unwrap();
    assert!(!info.contains("# Latency\r\n"), "{info}");
    for section in ["all", "latencystats"] {
        let info: String = redis::cmd("INFO").arg(section).query(&mut con).unwrap();
        assert!(info.contains("# Latency\r\n"), "{section}: {info}");
    }
    // RESETSTAT empties it.
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut con)
        .unwrap();
    let lines = latency_lines(&mut con);
    assert!(
        !lines.contains_key("latency_percentiles_usec_hash"),
        "{lines:?}"
    );
    // Counting starts again from there.
    hset_fields(&mut con, 7);
    let lines = latency_lines(&mut con);
    assert_eq!(lines["latency_percentiles_usec_hash"][0], 7, "{lines:?}");
    assert_eq!(lines["latency_backend_percentiles_usec_hash"][0], 7);

    // A GET pipelined behind a BLPOP waits for it (commands take effect in
    // order), but is timed from when the BLPOP is done: not 0.3 s.
    let mut s = proxy.stream();
    let mut both = common::encode(&["BLPOP", "lat:empty", "0.3"]);
    both.extend(common::encode(&["GET", "lat:1"]));
    std::io::Write::write_all(&mut s, &both).unwrap();
    assert_eq!(common::reply_text(&mut s), "*-1\r\n");
    assert_eq!(common::reply_text(&mut s), "$1\r\n1\r\n");
    let lines = latency_lines(&mut con);
    let [gets, _, _, slowest] = lines["latency_percentiles_usec_string"];
    assert_eq!(gets, 1, "{lines:?}");
    assert!(slowest < 200_000, "the GET behind the BLPOP: {slowest} µs");
}

#[test]
fn instantaneous_ops_per_sec_follows_traffic() {
    let cluster = common::cluster(3, 0);
    let proxy = Proxy::start(&cluster.seeds(), &[]);
    proxy.wait_ready(Duration::from_secs(20));
    // Idle for two sampling windows (16 × 100 ms): nothing counted.
    std::thread::sleep(Duration::from_millis(1800));
    let idle = proxy.info_field("instantaneous_ops_per_sec");
    assert!(idle <= 5, "idle: {idle} ops/sec");

    // About two seconds of traffic, counted by the client.
    let mut con = proxy.client();
    let started = Instant::now();
    let mut sent = 0u64;
    while started.elapsed() < Duration::from_secs(2) {
        let _: () = redis::cmd("SET")
            .arg("ops")
            .arg(sent)
            .query(&mut con)
            .unwrap();
        sent += 1;
    }
    let busy = proxy.info_field("instantaneous_ops_per_sec");
    let client_rate = sent as f64 / started.elapsed().as_secs_f64();
    // The last 1.6 s were all busy: within a factor of two of the
    // client's own rate (the machine may be shared and noisy).
    assert!(
        busy as f64 > client_rate / 2.0 && (busy as f64) < client_rate * 2.0,
        "INFO says {busy} ops/sec, the client did {client_rate:.0}"
    );
}

/// One SLOWLOG entry: Redis's six fields and orthrus's two.
#[derive(Debug)]
struct Entry {
    id: i64,
    micros: i64,
    args: Vec<String>,
    client_addr: String,
    client_name: String,
    backend: i64,
    proxy: i64,
}

fn slowlog(con: &mut redis::Connection, count: i64) -> Vec<Entry> {
    let reply: Vec<Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(count)
        .query(con)
        .expect("SLOWLOG GET");
    reply
        .into_iter()
        .map(|entry| {
            let Value::Array(fields) = entry else {
                panic!("entry is not an array: {entry:?}");
            };
            assert_eq!(fields.len(), 8, "{fields:?}");
            let int = |v: &Value| match v {
                Value::Int(n) => *n,
                other => panic!("not an integer: {other:?}"),
            };
            let text = |v: &Value| match v {
                Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                other => panic!("not a bulk string: {other:?}"),
            };
            let Value::Array(args) = &fields[3] else {
                panic!("arguments are not an array: {fields:?}");
            };
            let time = int(&fields[1]);
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs() as i64;
            assert!((now - 600..=now + 1).contains(&time), "timestamp {time}");
            Entry {
                id: int(&fields[0]),
                micros: int(&fields[2]),
                args: args.iter().map(text).collect(),
                client_addr: text(&fields[4]),
                client_name: text(&fields[5]),
                backend: int(&fields[6]),
                proxy: int(&fields[7]),
            }
        })
        .collect()
}

fn cmd_ok(con: &mut redis::Connection, args: &[&str]) {
    let mut c = redis::cmd(args[0]);
    for a in &args[1..] {
        c.arg(*a);
    }
    let _: Value = c.query(con).expect("command");
}

/// A script that keeps its node busy for 300 ms. Valkey gives a script
/// one TIME for its whole run, and Redis 7.0 has no `os.clock`: each
/// engine's own clock.
fn busy_300ms() -> &'static str {
    match orthrus_devcluster::server_kind().engine {
        orthrus_devcluster::Engine::Valkey => {
            "local s=os.clock() repeat until os.clock()-s>=0.3 return 1"
        }
        orthrus_devcluster::Engine::Redis => {
            "local s=redis.call('TIME') repeat local t=redis.call('TIME') until (t[1]-s[1])*1e6+t[2]-s[2]>=300000 return 1"
        }
    }
}

#[test]
fn slowlog_logs_slow_requests_with_the_backend_split() {
    let cluster = common::cluster(3, 0);
    // 200 ms: far above a GET on loopback, far below the script's 300 ms.
    let proxy = Proxy::spawn(
        &cluster.seeds(),
        &[],
        &[("ORTHRUS_SLOWLOG__LOG_SLOWER_THAN_US", "200000")],
    );
    proxy.wait_ready(Duration::from_secs(20));
    let mut con = proxy.client();
    cmd_ok(&mut con, &["CLIENT", "SETNAME", "slowpoke"]);
    cmd_ok(&mut con, &["SLOWLOG", "RESET"]);
    for i in 0..100 {
        cmd_ok(&mut con, &["GET", &format!("slow:{i}")]);
    }
    cmd_ok(&mut con, &["EVAL", busy_300ms(), "0"]);
    // A blocked command's wait for data is not slowness (as in Redis).
    cmd_ok(&mut con, &["BLPOP", "slow:empty", "0.3"]);
    cmd_ok(&mut con, &["GET", "slow:after"]);

    let entries = slowlog(&mut con, -1);
    for e in &entries {
        assert!(e.micros >= 200_000, "logged below the threshold: {e:?}");
        assert_ne!(e.args[0], "BLPOP", "{e:?}");
    }
    let eval = entries
        .iter()
        .find(|e| e.args.first().map(String::as_str) == Some("EVAL"))
        .unwrap_or_else(|| panic!("no EVAL in {entries:?}"));
    assert_eq!(eval.args, ["EVAL", busy_300ms(), "0"]);
    assert!(eval.micros >= 290_000, "{eval:?}");
    assert!(eval.backend >= 290_000, "{eval:?}");
    assert_eq!(eval.backend + eval.proxy, eval.micros, "{eval:?}");
    assert_eq!(eval.client_name, "slowpoke");
    assert!(eval.client_addr.starts_with("127.0.0.1:"), "{eval:?}");

    let len: i64 = redis::cmd("SLOWLOG").arg("LEN").query(&mut con).unwrap();
    assert_eq!(len, entries.len() as i64);
    cmd_ok(&mut con, &["SLOWLOG", "RESET"]);
    let len: i64 = redis::cmd("SLOWLOG").arg("LEN").query(&mut con).unwrap();
    assert_eq!(len, 0);

    // Errors worded as Redis words them; the connection stays usable.
    let mut s = proxy.stream();
    assert_eq!(
        common::send(&mut s, &["SLOWLOG", "GET", "-2"]),
        "-ERR count should be greater than or equal to -1\r\n"
    );
    assert_eq!(
        common::send(&mut s, &["SLOWLOG", "NOPE"]),
        "-ERR unknown subcommand 'NOPE'. Try SLOWLOG HELP.\r\n"
    );
    assert_eq!(
        common::send(&mut s, &["SLOWLOG", "LEN", "x"]),
        "-ERR wrong number of arguments for 'slowlog|len' command\r\n"
    );
    assert_eq!(
        common::send(&mut s, &["SLOWLOG"]),
        "-ERR wrong number of arguments for 'slowlog' command\r\n"
    );
    assert_eq!(common::send(&mut s, &["PING"]), "+PONG\r\n");
}

#[test]
fn slowlog_keeps_max_len_shortens_arguments_and_hides_passwords() {
    let cluster = common::cluster(3, 0);
    // Every request is logged; five are kept.
    let proxy = Proxy::spawn(
        &cluster.seeds(),
        &["--requirepass", "sesame"],
        &[
            ("ORTHRUS_SLOWLOG__LOG_SLOWER_THAN_US", "0"),
            ("ORTHRUS_SLOWLOG__MAX_LEN", "5"),
        ],
    );
    proxy.wait_listening(Duration::from_secs(20));
    let mut s = proxy.stream();
    assert_eq!(
        common::send(&mut s, &["AUTH", "wrong"]),
        "-WRONGPASS invalid username-password pair or user is disabled.\r\n"
    );
    assert_eq!(common::send(&mut s, &["AUTH", "sesame"]), "+OK\r\n");
    let url = format!(
        "redis://:sesame@{}/",
        proxy
            .url()
            .trim_start_matches("redis://")
            .trim_end_matches('/')
    );
    let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
    let long = "v".repeat(200);
    let deadline = Instant::now() + Duration::from_secs(20);
    // Until the topology is known the SET fails; retry.
    while redis::cmd("SET")
        .arg("slow:long")
        .arg(&long)
        .query::<()>(&mut con)
        .is_err()
    {
        assert!(Instant::now() < deadline, "SET never worked");
        std::thread::sleep(Duration::from_millis(50));
    }
    let entries = slowlog(&mut con, 1);
    let set = &entries[0];
    assert_eq!(set.args.len(), 3, "{set:?}");
    assert_eq!(set.args[2], format!("{}... (72 more bytes)", &long[..128]));
    assert!(set.backend >= 0 && set.proxy >= 0, "{set:?}");
    assert_eq!(set.backend + set.proxy, set.micros, "{set:?}");

    for i in 0..10 {
        cmd_ok(&mut con, &["GET", &format!("slow:{i}")]);
    }
    let len: i64 = redis::cmd("SLOWLOG").arg("LEN").query(&mut con).unwrap();
    assert_eq!(len, 5);
    let all = slowlog(&mut con, -1);
    assert_eq!(all.len(), 5);
    assert!(all.windows(2).all(|w| w[0].id > w[1].id), "newest first");
    // Neither AUTH nor refused commands are logged: none of these
    // passwords may show.
    let _ = common::send(&mut s, &["AUTH", "sesame"]);
    assert!(common::send(&mut s, &["NOSUCHCMD", "hunter2"]).starts_with("-ERR unknown command"));
    assert!(common::send(&mut s, &["CONFIG", "SET", "requirepass", "hunter2"]).starts_with("-ERR"));
    let all = slowlog(&mut con, -1);
    let text = format!("{all:?}");
    for secret in ["sesame", "hunter2", "AUTH", "NOSUCHCMD"] {
        assert!(!text.contains(secret), "{secret} in {text}");
    }
}

/// Requests pipelined around one that is redirected are each logged with
/// their own arguments, in order: the redirected request keeps its frame
/// while it is followed, between the local replies before and after it.
#[test]
fn slowlog_names_each_request_of_a_pipeline_around_a_redirect() {
    let cluster = common::cluster(3, 0);
    let proxy = Proxy::spawn(
        &cluster.seeds(),
        &[],
        &[("ORTHRUS_SLOWLOG__LOG_SLOWER_THAN_US", "0")],
    );
    proxy.wait_ready(Duration::from_secs(20));
    let mut con = proxy.client();
    cmd_ok(&mut con, &["SET", "moving", "v"]);
    // The key's slot moves behind orthrus's back: its GET meets MOVED.
    let (slot, to) = common::slot_and_other_master(&cluster, b"moving");
    cluster.move_slot(slot, to).unwrap();
    let mut s = proxy.stream();
    let pipeline = [
        common::encode(&["ECHO", "before"]),
        common::encode(&["GET", "moving"]),
        common::encode(&["ECHO", "after"]),
    ]
    .concat();
    std::io::Write::write_all(&mut s, &pipeline).unwrap();
    assert_eq!(common::reply_text(&mut s), "$6\r\nbefore\r\n");
    assert_eq!(common::reply_text(&mut s), "$1\r\nv\r\n");
    assert_eq!(common::reply_text(&mut s), "$5\r\nafter\r\n");
    // Newest first.
    let args: Vec<Vec<String>> = slowlog(&mut con, 3).into_iter().map(|e| e.args).collect();
    assert_eq!(
        args,
        [
            vec!["ECHO", "after"],
            vec!["GET", "moving"],
            vec!["ECHO", "before"]
        ],
        "{args:?}"
    );
}
