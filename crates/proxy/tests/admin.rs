//! The admin HTTP endpoint of the real binary: `/healthz`, `/readyz` and
//! Prometheus `/metrics`, with and without a cluster behind orthrus, and
//! its limits (request size, read timeout, concurrent connections). HTTP is
//! spoken over plain `TcpStream`s.

mod common;

use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use common::Proxy;
use common::admin::{Sample, parse_sample};
use orthrus_devcluster::free_port;

/// A parsed HTTP response.
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

fn free_addr() -> SocketAddr {
    let port = free_port().expect("free port");
    format!("127.0.0.1:{port}").parse().unwrap()
}

fn spawn_with_admin(seeds: &[SocketAddr]) -> (Proxy, SocketAddr) {
    common::admin::spawn_with_admin(seeds, &["--threads", "2"], &[])
}

/// Sends `request` as is and reads the response until the server closes.
fn exchange(addr: SocketAddr, request: &[u8]) -> Reply {
    let mut s = TcpStream::connect(addr).expect("connect to admin");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(request).expect("send request");
    let reply = read_response(&mut s);
    if !request.starts_with(b"HEAD ") {
        let length: usize = reply
            .header("Content-Length")
            .expect("Content-Length")
            .parse()
            .unwrap();
        assert_eq!(length, reply.body.len(), "Content-Length matches the body");
    }
    reply
}

fn read_response(s: &mut TcpStream) -> Reply {
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read until close");
    let text = String::from_utf8(raw).expect("utf-8 response");
    let (head, body) = text.split_once("\r\n\r\n").expect("head and body");
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap();
    let mut parts = status_line.splitn(3, ' ');
    assert_eq!(parts.next(), Some("HTTP/1.1"), "{status_line}");
    let status = parts.next().unwrap().parse().expect("status code");
    let headers = lines
        .map(|l| {
            let (k, v) = l.split_once(':').expect("header line");
            (k.trim().to_owned(), v.trim().to_owned())
        })
        .collect();
    let reply = Reply {
        status,
        headers,
        body: body.to_owned(),
    };
    assert_eq!(reply.header("Connection"), Some("close"));
    reply
}

fn get(addr: SocketAddr, path: &str) -> Reply {
    exchange(
        addr,
        format!("GET {path} HTTP/1.1\r\nHost: orthrus\r\nUser-Agent: test\r\n\r\n").as_bytes(),
    )
}

/// Parses the Prometheus text format 0.0.4, asserting its rules: every
/// sample line is `name{labels} value` with a float value, every metric
/// has a TYPE line before its samples, counters end in `_total`.
fn parse_metrics(text: &str) -> Vec<Sample> {
    let mut types: HashMap<String, String> = HashMap::new();
    let mut helps: HashSet<String> = HashSet::new();
    let mut samples = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE name kind");
            assert!(
                ["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind),
                "bad type: {line}"
            );
            assert!(
                types.insert(name.to_owned(), kind.to_owned()).is_none(),
                "second TYPE line: {line}"
            );
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').expect("HELP name text");
            assert!(!help.trim().is_empty(), "empty HELP: {line}");
            helps.insert(name.to_owned());
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let sample = parse_sample(line);
        let family = family_of(&sample.name, &types)
            .unwrap_or_else(|| panic!("no TYPE line before {line:?}"));
        let kind = &types[family];
        assert_eq!(
            kind == "counter",
            sample.name.ends_with("_total"),
            "counters, and only counters, end in _total: {line}"
        );
        samples.push(sample);
    }
    for name in types.keys() {
        assert!(helps.contains(name), "no HELP for {name}");
        assert!(
            samples
                .iter()
                .any(|s| family_of(&s.name, &types) == Some(name.as_str())),
            "TYPE without samples: {name}"
        );
    }
    check_histograms(&samples, &types);
    samples
}

/// The metric a sample belongs to: its own name, or for a histogram's
/// `_bucket`, `_sum` and `_count` samples the histogram's.
fn family_of<'a>(name: &'a str, types: &HashMap<String, String>) -> Option<&'a str> {
    if types.contains_key(name) {
        return Some(name);
    }
    ["_bucket", "_sum", "_count"]
        .iter()
        .filter_map(|suffix| name.strip_suffix(suffix))
        .find(|base| types.get(*base).is_some_and(|k| k == "histogram"))
}

/// A series' labels other than `le`.
type Labels = Vec<(String, String)>;

/// Every histogram series: buckets with ascending `le` and counts that
/// never decrease, ending in `+Inf`, which equals `_count`.
fn check_histograms(samples: &[Sample], types: &HashMap<String, String>) {
    for (name, _) in types.iter().filter(|(_, k)| *k == "histogram") {
        let bucket = format!("{name}_bucket");
        let mut series: HashMap<Labels, Vec<(f64, f64)>> = HashMap::new();
        for s in samples.iter().filter(|s| s.name == bucket) {
            let le = s
                .labels
                .iter()
                .find(|(k, _)| k == "le")
                .map(|(_, v)| {
                    if v == "+Inf" {
                        f64::INFINITY
                    } else {
                        v.parse().unwrap()
                    }
                })
                .expect("le label");
            let others: Labels = s
                .labels
                .iter()
                .filter(|(k, _)| k != "le")
                .cloned()
                .collect();
            series.entry(others).or_default().push((le, s.value));
        }
        for (labels, buckets) in series {
            for pair in buckets.windows(2) {
                assert!(pair[0].0 < pair[1].0, "{name}{labels:?}: le not ascending");
                assert!(pair[0].1 <= pair[1].1, "{name}{labels:?}: count decreases");
            }
            let (last_le, last) = *buckets.last().unwrap();
            assert!(last_le.is_infinite(), "{name}{labels:?}: no +Inf bucket");
            let labels: Vec<(&str, &str)> = labels
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            assert_eq!(value(samples, &format!("{name}_count"), &labels), last);
            value(samples, &format!("{name}_sum"), &labels);
        }
    }
}

fn metrics(addr: SocketAddr) -> Vec<Sample> {
    let reply = get(addr, "/metrics");
    assert_eq!(reply.status, 200, "{}", reply.body);
    let content_type = reply.header("Content-Type").unwrap_or_default();
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "{content_type}"
    );
    parse_metrics(&reply.body)
}

/// The value of the sample with this name and these labels (all of them).
fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    let found: Vec<&Sample> = samples.iter().filter(|s| s.is(name, labels)).collect();
    assert_eq!(found.len(), 1, "{name}{labels:?} in {samples:?}");
    found[0].value
}

#[test]
fn health_without_a_cluster() {
    // Nobody listens on the seed: orthrus never learns a topology.
    let (proxy, admin) = spawn_with_admin(&[free_addr()]);

    let health = get(admin, "/healthz");
    assert_eq!((health.status, health.body.as_str()), (200, "ok\n"));

    let ready = get(admin, "/readyz");
    assert_eq!(ready.status, 503, "{}", ready.body);
    assert!(ready.body.contains("not known"), "{}", ready.body);
    assert_eq!(ready.body.lines().count(), 1, "{}", ready.body);

    let samples = metrics(admin);
    assert_eq!(value(&samples, "orthrus_up", &[]), 1.0);
    assert_eq!(value(&samples, "orthrus_cluster_slots_covered", &[]), 0.0);
    assert_eq!(value(&samples, "orthrus_cluster_masters", &[]), 0.0);
    assert_eq!(value(&samples, "orthrus_worker_threads", &[]), 2.0);
    assert_eq!(value(&samples, "orthrus_commands_from_cluster", &[]), 0.0);
    value(&samples, "orthrus_uptime_seconds", &[]); // present, once

    let missing = get(admin, "/nope");
    assert_eq!(missing.status, 404);
    let post = exchange(
        admin,
        b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
    );
    assert_eq!(post.status, 405);
    assert!(post.header("Allow").unwrap_or_default().contains("GET"));
    let head = exchange(admin, b"HEAD /healthz HTTP/1.1\r\n\r\n");
    assert_eq!((head.status, head.body.as_str()), (200, ""));
    assert_eq!(head.header("Content-Length"), Some("3"), "as for GET");
    // A body the endpoint does not want is read and dropped, so the
    // response still arrives whole.
    let mut with_body = b"POST /healthz HTTP/1.1\r\nContent-Length: 30000\r\n\r\n".to_vec();
    with_body.resize(with_body.len() + 30000, b'b');
    assert_eq!(exchange(admin, &with_body).status, 405);
    let garbage = exchange(admin, b"\x16\x03\x01 not http at all\r\n\r\n");
    assert_eq!(garbage.status, 400);
    drop(proxy);
}

#[test]
fn ready_and_counting_with_a_cluster() {
    let cluster = common::cluster(3, 0);
    let (proxy, admin) = spawn_with_admin(&cluster.seeds());
    proxy.wait_ready(Duration::from_secs(20));

    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let ready = get(admin, "/readyz");
        if ready.status == 200 {
            assert_eq!(ready.body, "ready\n");
            break;
        }
        assert_eq!(ready.status, 503, "{}", ready.body);
        assert!(Instant::now() < deadline, "never ready: {}", ready.body);
        std::thread::sleep(Duration::from_millis(50));
    }

    let before = metrics(admin);
    assert_eq!(
        value(&before, "orthrus_cluster_slots_covered", &[]),
        16384.0
    );
    assert_eq!(value(&before, "orthrus_cluster_masters", &[]), 3.0);
    let masters_online = value(
        &before,
        "orthrus_cluster_nodes",
        &[("role", "master"), ("health", "online")],
    );
    let masters_unknown = value(
        &before,
        "orthrus_cluster_nodes",
        &[("role", "master"), ("health", "unknown")],
    );
    assert_eq!(masters_online + masters_unknown, 3.0);
    assert!(value(&before, "orthrus_topology_refreshes_total", &[]) >= 1.0);
    assert_eq!(value(&before, "orthrus_commands_from_cluster", &[]), 1.0);

    const N: usize = 50;
    let mut con = proxy.client();
    for i in 0..N {
        let _: () = redis::cmd("SET")
            .arg(format!("admin:{i}"))
            .arg(i)
            .query(&mut con)
            .expect("SET through orthrus");
    }
    let during = metrics(admin);
    let grown = value(&during, "orthrus_commands_total", &[])
        - value(&before, "orthrus_commands_total", &[]);
    assert!(grown >= N as f64, "commands_total grew by {grown}");
    assert!(value(&during, "orthrus_connected_clients", &[]) >= 1.0);
    assert!(
        value(&during, "orthrus_connections_received_total", &[])
            >= value(&before, "orthrus_connections_received_total", &[]) + 1.0
    );
    for kind in ["moved", "ask"] {
        value(&during, "orthrus_redirects_total", &[("kind", kind)]);
    }
    for kind in ["tryagain", "clusterdown"] {
        value(&during, "orthrus_retries_total", &[("kind", kind)]);
    }

    // The latency histograms counted exactly the N SETs as strings, in all
    // three parts, and every reply's round trip under its node.
    let string = [("family", "string")];
    for part in ["", "_backend", "_proxy"] {
        let count = format!("orthrus_command{part}_duration_seconds_count");
        let grown = find(&during, &count, &string).unwrap_or(0.0)
            - find(&before, &count, &string).unwrap_or(0.0);
        assert_eq!(grown, N as f64, "{count}");
    }
    let sum = value(
        &during,
        "orthrus_command_backend_duration_seconds_sum",
        &string,
    );
    assert!(sum > 0.0, "backend time of {N} SETs: {sum} s");
    let per_node: Vec<&Sample> = during
        .iter()
        .filter(|s| s.name == "orthrus_backend_duration_seconds_count")
        .collect();
    assert_eq!(per_node.len(), 3, "one series per master: {per_node:?}");
    let round_trips: f64 = per_node.iter().map(|s| s.value).sum();
    assert!(round_trips >= N as f64, "{round_trips} round trips");
}

/// Like [`value`], but `None` when the series does not exist (yet).
fn find(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples.iter().find(|s| s.is(name, labels)).map(|s| s.value)
}

#[test]
fn oversized_request_is_refused_and_endpoint_survives() {
    let (_proxy, admin) = spawn_with_admin(&[free_addr()]);
    let mut request = b"GET /metrics HTTP/1.1\r\nX-Filler: ".to_vec();
    request.resize(20 * 1024, b'a');
    request.extend_from_slice(b"\r\n\r\n");
    let refused = exchange(admin, &request);
    assert!(
        matches!(refused.status, 431 | 400),
        "status {}",
        refused.status
    );
    // A long request line without any header is refused just the same.
    let mut long_line = b"GET /".to_vec();
    long_line.resize(20 * 1024, b'x');
    long_line.extend_from_slice(b" HTTP/1.1\r\n\r\n");
    assert!(matches!(exchange(admin, &long_line).status, 431 | 400));

    assert_eq!(get(admin, "/healthz").status, 200);
    assert!(!metrics(admin).is_empty());
}

/// At the bound of 256 connections, a new one takes the place of the
/// oldest that is only waiting for its head (closed at once); those left
/// are answered 408 at the head deadline.
#[test]
fn slow_and_excess_connections_are_bounded() {
    let (_proxy, admin) = spawn_with_admin(&[free_addr()]);
    // Let the endpoint see the start-up probes close, so that every slot
    // is free.
    std::thread::sleep(Duration::from_millis(300));

    // 256 connections that never finish their request hold every place...
    let idle: Vec<TcpStream> = (0..256)
        .map(|_| {
            let mut s = TcpStream::connect(admin).expect("connect");
            s.write_all(b"GET /healthz HTTP/1.1\r\n").unwrap();
            s
        })
        .collect();
    // ...so one more takes the oldest one's place, and is answered at once.
    let started = Instant::now();
    let probe = get(admin, "/healthz");
    assert_eq!(probe.status, 200, "{}", probe.body);
    assert!(started.elapsed() < Duration::from_secs(2));

    // The oldest was closed without a response...
    let mut idle = idle.into_iter();
    let mut oldest = idle.next().expect("the oldest");
    oldest
        .set_read_timeout(Some(Duration::from_secs(1)))
        .unwrap();
    let mut raw = Vec::new();
    match oldest.read_to_end(&mut raw) {
        Ok(_) => assert!(raw.is_empty(), "{}", String::from_utf8_lossy(&raw)),
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}"),
    }
    // ...and the others are answered 408 after the head deadline (2 s).
    for mut s in idle {
        s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
        let reply = read_response(&mut s);
        assert_eq!(reply.status, 408, "{}", reply.body);
    }
    assert!(started.elapsed() >= Duration::from_millis(1500));

    // And their slots are free again.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let reply = get(admin, "/healthz");
        if reply.status == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "still busy: {}", reply.body);
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn admin_port_in_use_fails_start() {
    let taken = TcpListener::bind("127.0.0.1:0").expect("bind");
    let taken_addr = taken.local_addr().unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_orthrus"));
    cmd.arg("--listen")
        .arg(free_addr().to_string())
        .arg("--seeds")
        .arg(free_addr().to_string())
        .arg("--metrics")
        .arg(taken_addr.to_string());
    let out = common::run_to_exit(cmd, Duration::from_secs(10));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("admin endpoint") && stderr.contains(&taken_addr.to_string()),
        "{stderr}"
    );
    drop(taken);
}

/// Keeps `count` connections open on `addr`, each sending a byte of a
/// request head that never ends now and then (one every `pace` or so),
/// opening a new one whenever orthrus closes one, until `stop` is set.
/// Returns how many connections it opened in all.
fn hold_slow_connections(
    addr: SocketAddr,
    count: usize,
    pace: Duration,
    stop: &std::sync::atomic::AtomicBool,
) -> usize {
    use std::sync::atomic::Ordering;
    let open = |opened: &mut usize| {
        let s = TcpStream::connect_timeout(&addr, Duration::from_millis(200)).ok()?;
        s.set_nonblocking(true).ok()?;
        *opened += 1;
        Some(s)
    };
    let mut opened = 0;
    let mut held: Vec<Option<TcpStream>> = (0..count).map(|_| open(&mut opened)).collect();
    while !stop.load(Ordering::Relaxed) {
        let round = Instant::now();
        for slot in held.iter_mut() {
            let alive = match slot.as_mut() {
                // `GET /healthz` and then one more byte a turn: a head that
                // never ends (8 KiB would take over an hour).
                Some(s) => !matches!(s.write(b"x"), Ok(0) | Err(_)),
                None => false,
            };
            if !alive {
                *slot = open(&mut opened);
                if let Some(s) = slot.as_mut() {
                    let _ = s.write(b"GET /healthz HTTP/1.1\r\nX-Slow: ");
                }
            }
            if stop.load(Ordering::Relaxed) {
                break;
            }
        }
        std::thread::sleep(pace.saturating_sub(round.elapsed()));
    }
    opened
}

/// 1,000 connections that trickle bytes of a head they never finish,
/// reopened as soon as orthrus closes them, hold the admin endpoint;
/// a liveness probe must still be answered: at least 59 of 60 `/healthz`
/// get `200` within 1 s each.
#[test]
fn health_probes_are_answered_past_a_thousand_slow_connections() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let (_proxy, admin) = spawn_with_admin(&[free_addr()]);
    let stop = AtomicBool::new(false);
    let (answered, failures, opened) = std::thread::scope(|scope| {
        let attacker =
            scope.spawn(|| hold_slow_connections(admin, 1000, Duration::from_millis(300), &stop));
        // Let them fill the endpoint, and some reach the head deadline.
        std::thread::sleep(Duration::from_secs(3));
        let mut answered = 0;
        let mut failures = Vec::new();
        for _ in 0..60 {
            let started = Instant::now();
            let within = Duration::from_secs(1);
            let outcome = (|| -> Result<u16, String> {
                let mut s =
                    TcpStream::connect_timeout(&admin, within).map_err(|e| e.to_string())?;
                s.set_read_timeout(Some(
                    within
                        .saturating_sub(started.elapsed())
                        .max(Duration::from_millis(1)),
                ))
                .map_err(|e| e.to_string())?;
                s.write_all(b"GET /healthz HTTP/1.1\r\nHost: orthrus\r\n\r\n")
                    .map_err(|e| e.to_string())?;
                let mut raw = Vec::new();
                s.read_to_end(&mut raw).map_err(|e| e.to_string())?;
                let text = String::from_utf8_lossy(&raw);
                text.split(' ')
                    .nth(1)
                    .and_then(|code| code.parse().ok())
                    .ok_or_else(|| format!("no status line: {text:?}"))
            })();
            match outcome {
                Ok(200) if started.elapsed() <= within => answered += 1,
                Ok(status) => failures.push(format!("{status} after {:?}", started.elapsed())),
                Err(e) => failures.push(format!("{e} after {:?}", started.elapsed())),
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        stop.store(true, Ordering::Relaxed);
        let opened = attacker.join().expect("attacker");
        (answered, failures, opened)
    });
    eprintln!("{answered} of 60 probes answered; {opened} slow connections opened; {failures:?}");
    assert!(opened >= 1000, "only {opened} slow connections opened");
    assert!(
        answered >= 59,
        "{answered} of 60 probes answered 200 within 1 s: {failures:?}"
    );
}
