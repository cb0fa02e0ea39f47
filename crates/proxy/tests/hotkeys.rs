//! HOTKEYS answered by orthrus for the whole cluster, and the load per
//! slot and per master (`ORTHRUS HOTSLOTS`, INFO `load`, `/metrics`),
//! against a real 3-master cluster with a skewed workload whose hottest
//! keys the test knows exactly: Zipf (s = 2) over 10,000 keys whose ten
//! most frequent all live on one master, plus one large value read rarely;
//! by bytes, the top 10 are that value and the nine most frequent keys.

mod common;

use std::collections::HashMap;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::admin::{get, sample, spawn_with_admin};
use common::{Proxy, encode, read_reply, send};
use orthrus_cluster::Slot;
use orthrus_devcluster::Cluster;
use redis::{HotkeysCommands, HotkeysOptions, Value};

const KEYS: usize = 10_000;
const REQUESTS: usize = 24_000;
const CLIENTS: usize = 4;
const LARGE: &str = "hk:large";
const LARGE_SIZE: usize = 64 * 1024;
const LARGE_READS: usize = 6;

/// The workload: keys by Zipf rank, the requests each client sends, and
/// what each key's requests and replies weigh, counted as orthrus counts
/// them (request frame plus reply frame).
struct Workload {
    /// Rank 0 first; the first ten live on `hot_master`.
    keys: Vec<String>,
    hot_master: usize,
    per_client: Vec<Vec<String>>,
    bytes: HashMap<String, u64>,
}

/// The cluster node index of the master of `key`.
fn owner(cluster: &Cluster, key: &str) -> usize {
    common::owner_of(cluster, key.as_bytes())
}

/// Size of one bulk string reply.
fn bulk_len(n: usize) -> u64 {
    (1 + n.to_string().len() + 2 + n + 2) as u64
}

/// The value of the key of `rank`: the nine most frequent have 400 bytes,
/// so that by bytes they and the large value stand well apart from the
/// eleventh key (about four times its bytes): the test's known top 10,
/// which 1-in-10 sampling must not blur.
fn value_of(rank: usize) -> Option<String> {
    match rank {
        0..9 => Some(format!("{rank:0>400}")),
        9..200 => Some(format!("{rank:0>100}")),
        _ => None,
    }
}

impl Workload {
    fn new(cluster: &Cluster) -> Workload {
        let hot_master = owner(cluster, "hk:0");
        // Ranks 0..10 on one master; the rest of the keys anywhere.
        let mut hot: Vec<String> = Vec::new();
        let mut rest: Vec<String> = Vec::new();
        for i in 0.. {
            let key = format!("hk:{i}");
            if hot.len() < 10 && owner(cluster, &key) == hot_master {
                hot.push(key);
            } else if rest.len() < KEYS - 10 {
                rest.push(key);
            }
            if hot.len() == 10 && rest.len() == KEYS - 10 {
                break;
            }
        }
        let keys: Vec<String> = hot.into_iter().chain(rest).collect();
        let weights: Vec<f64> = (1..=KEYS).map(|r| 1.0 / (r as f64).powi(2)).collect();
        let total: f64 = weights.iter().sum();
        let mut cumulative = Vec::with_capacity(KEYS);
        let mut acc = 0.0;
        for w in &weights {
            acc += w / total;
            cumulative.push(acc);
        }
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut per_client = vec![Vec::new(); CLIENTS];
        let mut bytes: HashMap<String, u64> = HashMap::new();
        for i in 0..REQUESTS {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let u = (seed >> 11) as f64 / (1u64 << 53) as f64;
            let rank = cumulative.partition_point(|&c| c < u).min(KEYS - 1);
            let key = &keys[rank];
            let reply = value_of(rank).map_or(5, |v| bulk_len(v.len()));
            *bytes.entry(key.clone()).or_default() += get_len(key) + reply;
            per_client[i % CLIENTS].push(key.clone());
        }
        for i in 0..LARGE_READS {
            *bytes.entry(LARGE.to_owned()).or_default() += get_len(LARGE) + bulk_len(LARGE_SIZE);
            per_client[i % CLIENTS].push(LARGE.to_owned());
        }
        Workload {
            keys,
            hot_master,
            per_client,
            bytes,
        }
    }

    /// The ten keys with the most bytes.
    fn top10(&self) -> Vec<String> {
        let mut all: Vec<(&String, &u64)> = self.bytes.iter().collect();
        all.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        all.into_iter().take(10).map(|(k, _)| k.clone()).collect()
    }

    /// Writes the values (the first 200 ranks and the large one).
    fn load_values(&self, proxy: &Proxy) {
        let mut s = proxy.stream();
        let mut batch = Vec::new();
        for (rank, key) in self.keys.iter().enumerate().take(200) {
            let value = value_of(rank).unwrap();
            batch.extend(encode(&["SET", key, &value]));
        }
        batch.extend(encode(&["SET", LARGE, &"x".repeat(LARGE_SIZE)]));
        s.write_all(&batch).unwrap();
        for _ in 0..201 {
            assert_eq!(read_reply(&mut s).unwrap(), b"+OK\r\n");
        }
    }

    /// Every client's GETs, pipelined 200 at a time, clients in parallel.
    fn run(&self, addr: SocketAddr) {
        std::thread::scope(|scope| {
            for keys in &self.per_client {
                scope.spawn(move || {
                    let mut s = TcpStream::connect(addr).unwrap();
                    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                    for chunk in keys.chunks(200) {
                        let batch: Vec<u8> =
                            chunk.iter().flat_map(|k| encode(&["GET", k])).collect();
                        s.write_all(&batch).unwrap();
                        for _ in chunk {
                            let reply = read_reply(&mut s).unwrap();
                            assert!(reply.starts_with(b"$"), "{reply:?}");
                        }
                    }
                });
            }
        });
    }
}

fn get_len(key: &str) -> u64 {
    encode(&["GET", key]).len() as u64
}

/// `HOTKEYS GET`'s one map, as (field, value) pairs, over RESP2.
fn hotkeys_get(con: &mut redis::Connection) -> Option<Vec<(String, Value)>> {
    let reply: Value = redis::cmd("HOTKEYS").arg("GET").query(con).unwrap();
    let Value::Array(mut outer) = reply else {
        assert_eq!(reply, Value::Nil);
        return None;
    };
    assert_eq!(outer.len(), 1, "an array of one map");
    let Value::Array(flat) = outer.remove(0) else {
        panic!("RESP2: flat pairs")
    };
    let pairs = flat
        .chunks(2)
        .map(|p| match &p[0] {
            Value::BulkString(name) => (String::from_utf8(name.clone()).unwrap(), p[1].clone()),
            other => panic!("field name {other:?}"),
        })
        .collect();
    Some(pairs)
}

fn field<'a>(pairs: &'a [(String, Value)], name: &str) -> &'a Value {
    &pairs
        .iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("no {name} in {pairs:?}"))
        .1
}

fn int(v: &Value) -> i64 {
    match v {
        Value::Int(n) => *n,
        other => panic!("not an integer: {other:?}"),
    }
}

/// The keys of a `by-...` list, in order.
fn listed(pairs: &[(String, Value)], name: &str) -> Vec<String> {
    let Value::Array(items) = field(pairs, name) else {
        panic!("{name} is not an array")
    };
    items
        .chunks(2)
        .map(|p| match &p[0] {
            Value::BulkString(k) => String::from_utf8(k.clone()).unwrap(),
            other => panic!("key {other:?}"),
        })
        .collect()
}

fn start(con: &mut redis::Connection, args: &[&str]) -> redis::RedisResult<String> {
    redis::cmd("HOTKEYS").arg("START").arg(args).query(con)
}

/// Runs the workload under `START METRICS 2 CPU NET COUNT 10 SAMPLE n`
/// and checks that GET names at least 9 of the true top 10 by bytes.
fn finds_top_keys(sample_ratio: &str) -> (Cluster, Proxy, SocketAddr, Workload) {
    let cluster = common::cluster(3, 0);
    let (proxy, admin) = spawn_with_admin(&cluster.seeds(), &[], &[]);
    proxy.wait_ready(Duration::from_secs(20));
    let workload = Workload::new(&cluster);
    workload.load_values(&proxy);
    let mut con = proxy.client();
    let args = [
        "METRICS",
        "2",
        "CPU",
        "NET",
        "COUNT",
        "10",
        "SAMPLE",
        sample_ratio,
    ];
    assert_eq!(start(&mut con, &args).unwrap(), "OK");
    workload.run(proxy.addr);
    let pairs = hotkeys_get(&mut con).expect("a session");
    assert_eq!(int(field(&pairs, "tracking-active")), 1);
    assert_eq!(
        int(field(&pairs, "sample-ratio")),
        sample_ratio.parse::<i64>().unwrap()
    );
    let by_net = listed(&pairs, "by-net-bytes");
    assert!(by_net.len() <= 10, "{by_net:?}");
    let truth = workload.top10();
    let found = truth.iter().filter(|k| by_net.contains(k)).count();
    assert!(
        found >= 9,
        "SAMPLE {sample_ratio}: {found} of the true top 10 {truth:?} in {by_net:?}"
    );
    let by_cpu = listed(&pairs, "by-cpu-time-us");
    assert!(!by_cpu.is_empty() && by_cpu.len() <= 10, "{by_cpu:?}");
    // Every GET is counted in the totals; the top-K sees 1 in SAMPLE.
    let all_bytes = int(field(&pairs, "net-bytes-all-commands-all-slots")) as u64;
    let sent: u64 = workload.bytes.values().sum();
    assert_eq!(all_bytes, sent);
    let sampled = int(field(&pairs, "total-net-bytes")) as u64;
    if sample_ratio == "1" {
        assert_eq!(sampled, sent);
    } else {
        let ratio = sent as f64 / sampled as f64;
        assert!((5.0..20.0).contains(&ratio), "1 in {ratio} sampled");
    }
    let names: Vec<&str> = pairs.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "tracking-active",
            "sample-ratio",
            "selected-slots",
            "all-commands-all-slots-us",
            "net-bytes-all-commands-all-slots",
            "collection-start-time-unix-ms",
            "collection-duration-ms",
            "total-cpu-time-user-ms",
            "total-cpu-time-sys-ms",
            "total-net-bytes",
            "by-cpu-time-us",
            "by-net-bytes",
        ]
    );
    assert_eq!(
        field(&pairs, "selected-slots"),
        &Value::Array(vec![Value::Array(vec![Value::Int(0), Value::Int(16383)])])
    );
    (cluster, proxy, admin, workload)
}

#[test]
fn hotkeys_finds_the_top_keys_sampling_every_request_and_hotslots_info_metrics_agree() {
    let (cluster, proxy, admin, workload) = finds_top_keys("1");

    // The five hottest slots by requests are those of the five most
    // frequent keys, all on the hot master.
    let mut s = proxy.stream();
    s.write_all(&encode(&["ORTHRUS", "HOTSLOTS", "5"])).unwrap();
    let reply = String::from_utf8_lossy(&read_reply(&mut s).unwrap()).into_owned();
    let hot_addr = cluster.nodes()[workload.hot_master].addr().to_string();
    let lines: Vec<&str> = reply.split("\r\n").collect();
    assert_eq!(lines[0], "*5", "{reply}");
    let mut listed_slots = Vec::new();
    let mut owners = Vec::new();
    for w in lines.windows(4) {
        if w[1] == "slot" {
            listed_slots.push(w[2].trim_start_matches(':').parse::<u16>().unwrap());
        }
        if w[1] == "owner" {
            owners.push(w[3].to_owned());
        }
    }
    let expected: Vec<u16> = workload.keys[..5]
        .iter()
        .map(|k| Slot::for_key(k.as_bytes()).get())
        .collect();
    assert_eq!(listed_slots, expected, "{reply}");
    assert_eq!(owners, vec![hot_addr.clone(); 5], "{reply}");
    assert!(reply.contains("requests-per-sec") && reply.contains("bytes-per-sec"));

    // INFO load: the hot master has the largest share of requests and bytes.
    let mut con = proxy.client();
    let info: String = redis::cmd("INFO").arg("load").query(&mut con).unwrap();
    assert!(info.starts_with("# Load\r\n"), "{info}");
    let shares: Vec<(String, f64, f64)> = info
        .lines()
        .filter_map(|l| l.strip_prefix("master").and_then(|l| l.split_once(':')))
        .map(|(_, fields)| {
            let get = |name: &str| {
                fields
                    .split(',')
                    .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
                    .unwrap_or_else(|| panic!("no {name} in {fields}"))
                    .to_owned()
            };
            (
                get("addr"),
                get("requests_share").parse().unwrap(),
                get("bytes_share").parse().unwrap(),
            )
        })
        .collect();
    assert_eq!(shares.len(), 3, "{info}");
    let hot = shares.iter().find(|s| s.0 == hot_addr).expect("hot master");
    for other in shares.iter().filter(|s| s.0 != hot_addr) {
        assert!(hot.1 > other.1 && hot.2 > other.2, "{info}");
    }

    // /metrics: one series per master, the hot one above the others.
    let (_, text) = get(admin, "/metrics");
    for series in [
        "orthrus_master_requests_total",
        "orthrus_master_bytes_total",
    ] {
        let of = |addr: &str| {
            let labels = format!("master=\"{addr}\",upstream=\"default\"");
            sample(&text, &format!("{series}{{{labels}}}")).unwrap_or_else(|| {
                panic!("no {series} for {addr} in:\n{text}");
            })
        };
        let hot = of(&hot_addr);
        for node in cluster.nodes().iter().map(|n| n.addr().to_string()) {
            if node != hot_addr {
                assert!(hot > of(&node), "{series}: {text}");
            }
        }
        assert!(!text.contains(&format!("{series}{{slot")), "never per slot");
    }
}

#[test]
fn hotkeys_finds_the_top_keys_sampling_one_request_in_ten() {
    let (_cluster, proxy, _admin, _workload) = finds_top_keys("10");
    drop(proxy);
}

#[test]
fn hotkeys_session_starts_once_stops_keeps_resets_frees_and_ends_by_itself() {
    let cluster = common::cluster(3, 0);
    let proxy = Proxy::start(&cluster.seeds(), &[]);
    let mut con = proxy.client();
    let mut raw = proxy.stream();
    assert_eq!(send(&mut raw, &["HOTKEYS", "GET"]), "$-1\r\n");
    assert_eq!(send(&mut raw, &["HOTKEYS", "STOP"]), "$-1\r\n");
    assert_eq!(send(&mut raw, &["HOTKEYS", "RESET"]), "+OK\r\n");

    // The redis crate's own HOTKEYS support, through orthrus.
    let opts = HotkeysOptions::new_with_net().with_count(10).unwrap();
    con.hotkeys_start(opts).unwrap();
    assert_eq!(
        send(&mut raw, &["HOTKEYS", "START", "METRICS", "1", "CPU"]),
        "-ERR hotkey tracking session already in progress\r\n"
    );
    assert_eq!(
        send(&mut raw, &["HOTKEYS", "RESET"]),
        "-ERR hotkey tracking session in progress, stop tracking first\r\n"
    );
    for i in 0..50 {
        let _: () = redis::cmd("SET")
            .arg("life:a")
            .arg(i)
            .query(&mut con)
            .unwrap();
    }
    let _: () = redis::cmd("SET")
        .arg("life:b")
        .arg(1)
        .query(&mut con)
        .unwrap();
    assert!(con.hotkeys_stop().unwrap(), "a session was running");
    let stopped = con.hotkeys_get().unwrap().expect("kept after STOP");
    assert!(!stopped.tracking_active);
    let net = stopped.by_net_bytes.expect("NET");
    assert_eq!(net[0].key, "life:a", "{net:?}");
    assert!(stopped.by_cpu_time_us.is_none());
    std::thread::sleep(Duration::from_millis(50));
    let again = con.hotkeys_get().unwrap().expect("still kept");
    assert_eq!(again.collection_duration_ms, stopped.collection_duration_ms);
    assert!(!con.hotkeys_stop().unwrap(), "nothing runs");
    con.hotkeys_reset().unwrap();
    assert!(con.hotkeys_get().unwrap().is_none(), "RESET frees it");

    // DURATION stops it by itself; a new START is then allowed.
    assert_eq!(
        start(&mut con, &["METRICS", "1", "NET", "DURATION", "1"]).unwrap(),
        "OK"
    );
    let began = Instant::now();
    loop {
        let pairs = hotkeys_get(&mut con).expect("a session");
        if int(field(&pairs, "tracking-active")) == 0 {
            assert_eq!(int(field(&pairs, "collection-duration-ms")), 1000);
            break;
        }
        assert!(began.elapsed() < Duration::from_secs(5), "never stopped");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(began.elapsed() >= Duration::from_millis(900));
    assert_eq!(start(&mut con, &["METRICS", "1", "CPU"]).unwrap(), "OK");
    assert!(con.hotkeys_stop().unwrap());

    // RESP3: an array of one map.
    let mut r3 = proxy.stream();
    assert!(send(&mut r3, &["HELLO", "3"]).starts_with('%'));
    let reply = send(&mut r3, &["HOTKEYS", "GET"]);
    assert!(
        reply.starts_with("*1\r\n%10\r\n$15\r\ntracking-active\r\n:0\r\n"),
        "{reply}"
    );
}

#[test]
fn hotkeys_bad_input_gets_redis_errors_and_changes_nothing() {
    let cluster = common::cluster(3, 0);
    let env = [("ORTHRUS_CLUSTER__REFRESH_INTERVAL_MS", "200")];
    let proxy = Proxy::spawn(&cluster.seeds(), &[], &env);
    proxy.wait_ready(Duration::from_secs(20));
    // Slot 0 without an owner anywhere.
    for node in cluster.nodes() {
        node.cmd_ok(&["CLUSTER", "DELSLOTS", "0"]).unwrap();
    }
    let mut s = proxy.stream();
    let deadline = Instant::now() + Duration::from_secs(10);
    let hk = |rest: &[&str]| {
        let mut args = vec!["HOTKEYS", "START"];
        args.extend_from_slice(rest);
        args.iter().map(|a| a.to_string()).collect::<Vec<String>>()
    };
    let no_owner = hk(&["METRICS", "1", "NET", "SLOTS", "1", "0"]);
    let no_owner: Vec<&str> = no_owner.iter().map(String::as_str).collect();
    loop {
        let reply = send(&mut s, &no_owner);
        if reply == "-ERR slot 0 not handled by this node\r\n" {
            break;
        }
        assert_eq!(reply, "+OK\r\n", "before the refresh");
        assert_eq!(send(&mut s, &["HOTKEYS", "STOP"]), "+OK\r\n");
        assert_eq!(send(&mut s, &["HOTKEYS", "RESET"]), "+OK\r\n");
        assert!(Instant::now() < deadline, "orthrus never saw slot 0 go");
        std::thread::sleep(Duration::from_millis(100));
    }
    let cases: &[(&[&str], &str)] = &[
        (&[], "METRICS parameter is required"),
        (
            &["METRICS", "1"],
            "METRICS count does not match number of metric types provided",
        ),
        (
            &["METRICS", "1", "MEM"],
            "METRICS no valid metrics passed. Supported: CPU|NET",
        ),
        (
            &["METRICS", "3", "CPU", "NET", "MEM"],
            "METRICS count must be > 0 and <= 2",
        ),
        (
            &["METRICS", "0", "CPU"],
            "METRICS count must be > 0 and <= 2",
        ),
        (
            &["METRICS", "x", "CPU"],
            "METRICS count must be > 0 and <= 2",
        ),
        (
            &["METRICS", "2", "CPU"],
            "METRICS count does not match number of metric types provided",
        ),
        (
            &["METRICS", "2", "CPU", "CPU"],
            "METRICS CPU defined more than once!",
        ),
        (
            &["METRICS", "1", "CPU", "COUNT", "0"],
            "COUNT must be between 1 and 64",
        ),
        (
            &["METRICS", "1", "CPU", "COUNT", "65"],
            "COUNT must be between 1 and 64",
        ),
        (
            &["METRICS", "1", "CPU", "DURATION", "0"],
            "DURATION must be between 1 and 1000000",
        ),
        (
            &["METRICS", "1", "CPU", "SAMPLE", "0"],
            "SAMPLE ratio must be positive",
        ),
        (
            &["METRICS", "1", "CPU", "SLOTS", "1", "16384"],
            "Invalid or out of range slot",
        ),
        (
            &["METRICS", "1", "CPU", "SLOTS", "1", "-1"],
            "Invalid or out of range slot",
        ),
        (
            &["METRICS", "1", "CPU", "SLOTS", "0"],
            "SLOTS count must be between 1 and 16384",
        ),
        (
            &["METRICS", "1", "CPU", "SLOTS", "2", "5"],
            "not enough slot numbers provided",
        ),
        (
            &["METRICS", "1", "CPU", "SLOTS", "2", "5", "5"],
            "duplicate slot number",
        ),
        (&["METRICS", "1", "CPU", "BOGUS"], "syntax error"),
        (&["METRICS", "1", "CPU", "COUNT"], "syntax error"),
    ];
    for (rest, error) in cases {
        let args = hk(rest);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_eq!(send(&mut s, &args), format!("-ERR {error}\r\n"), "{args:?}");
        // Nothing started, nothing kept.
        assert_eq!(send(&mut s, &["HOTKEYS", "GET"]), "$-1\r\n", "{args:?}");
    }
    assert_eq!(
        send(&mut s, &["HOTKEYS", "GET", "x"]),
        "-ERR wrong number of arguments for 'hotkeys|get' command\r\n"
    );
    assert_eq!(
        send(&mut s, &["HOTKEYS", "NOPE"]),
        "-ERR unknown subcommand or wrong number of arguments\r\n"
    );
    assert_eq!(
        send(&mut s, &["ORTHRUS", "HOTSLOTS", "COUNT", "0"]),
        "-ERR COUNT must be a positive integer\r\n"
    );
    for missing in [&["COUNT"][..], &["UPSTREAM"], &["COUNT", "1", "UPSTREAM"]] {
        let mut args = vec!["ORTHRUS", "HOTSLOTS"];
        args.extend_from_slice(missing);
        assert_eq!(send(&mut s, &args), "-ERR syntax error\r\n", "{args:?}");
    }
    assert_eq!(
        send(&mut s, &["ORTHRUS", "HOTSLOTS", "UPSTREAM", "nope"]),
        "-ERR no upstream named 'nope'\r\n"
    );
    // A stopped session's result is not changed by a refused START.
    let ok = hk(&["METRICS", "1", "NET", "SLOTS", "2", "7", "9"]);
    let ok: Vec<&str> = ok.iter().map(String::as_str).collect();
    assert_eq!(send(&mut s, &ok), "+OK\r\n");
    assert_eq!(send(&mut s, &["HOTKEYS", "STOP"]), "+OK\r\n");
    let before = send(&mut s, &["HOTKEYS", "GET"]);
    assert!(
        before.contains("net-bytes-all-commands-selected-slots"),
        "{before}"
    );
    assert!(
        before.contains("*2\r\n*1\r\n:7\r\n*1\r\n:9\r\n"),
        "{before}"
    );
    assert_eq!(
        send(&mut s, &no_owner),
        "-ERR slot 0 not handled by this node\r\n"
    );
    assert_eq!(send(&mut s, &["HOTKEYS", "GET"]), before);
}
