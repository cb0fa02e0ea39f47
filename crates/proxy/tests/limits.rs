//! Every limit, sent to the real binary: max clients, idle timeout, the
//! protocol limits, and a client that pipelines without reading (bounded
//! memory, other clients unaffected). And a clean stop on SIGTERM.

mod common;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use common::{Proxy, cluster, encode, read_reply, rss_kib, send};
use orthrus_devcluster::wait_until;

#[test]
fn limits_answer_with_errors() {
    let cluster = cluster(3, 0);
    let proxy = Proxy::spawn(
        &cluster.seeds(),
        &["--threads", "2"],
        &[
            ("ORTHRUS_CLIENT__MAX_CLIENTS", "8"),
            ("ORTHRUS_CLIENT__MAX_BULK_LEN", "1024"),
            ("ORTHRUS_CLIENT__MAX_ARGS", "10"),
            ("ORTHRUS_CLIENT__MAX_INLINE_LEN", "4096"),
            ("ORTHRUS_CLIENT__IDLE_TIMEOUT_S", "1"),
            ("ORTHRUS_CLIENT__MAX_PENDING", "64"),
        ],
    );
    proxy.wait_ready(Duration::from_secs(20));
    let mut bystander = proxy.stream();
    assert_eq!(send(&mut bystander, &["SET", "by", "1"]), "+OK\r\n");

    // Protocol limits: a clear error, that connection closed, others fine.
    for (input, error) in [
        (
            b"*2\r\n$3\r\nGET\r\n$2000\r\n".to_vec(),
            "-ERR Protocol error: invalid bulk length\r\n",
        ),
        (
            b"*11\r\n".to_vec(),
            "-ERR Protocol error: invalid multibulk length\r\n",
        ),
        (
            vec![b'a'; 8000],
            "-ERR Protocol error: too big inline request\r\n",
        ),
    ] {
        let mut s = proxy.stream();
        s.write_all(&input).unwrap();
        let mut out = Vec::new();
        s.read_to_end(&mut out).unwrap();
        assert_eq!(String::from_utf8_lossy(&out), error);
        assert_eq!(send(&mut bystander, &["GET", "by"]), "$1\r\n1\r\n");
    }

    // Idle clients are closed; a client waiting on a blocking command is not.
    let mut idle = proxy.stream();
    assert_eq!(send(&mut idle, &["PING"]), "+PONG\r\n");
    let mut blocked = proxy.stream();
    blocked
        .write_all(&encode(&["BLPOP", "never", "2"]))
        .unwrap();
    std::thread::sleep(Duration::from_millis(1600));
    let mut buf = [0u8; 16];
    assert_eq!(
        idle.read(&mut buf).unwrap(),
        0,
        "the idle client should have been closed"
    );
    assert_eq!(read_reply(&mut blocked).unwrap(), b"*-1\r\n");
    // The bystander was silent for as long: closed too, as Redis would.
    let mut buf = [0u8; 16];
    assert_eq!(bystander.read(&mut buf).unwrap(), 0);
    let mut bystander = proxy.stream();
    assert_eq!(send(&mut bystander, &["GET", "by"]), "$1\r\n1\r\n");
    drop(blocked);

    // Max clients: one more is told so and closed (once the clients closed
    // above are gone: the bystander alone is connected).
    only_the_bystander_left(&mut bystander);
    let mut held: Vec<std::net::TcpStream> = Vec::new();
    let mut refused = None;
    for _ in 0..12 {
        let mut s = proxy.stream();
        s.write_all(&encode(&["PING"])).unwrap();
        let reply = read_reply(&mut s).unwrap();
        if reply == b"+PONG\r\n" {
            held.push(s);
        } else {
            refused = Some(String::from_utf8_lossy(&reply).into_owned());
            break;
        }
    }
    assert_eq!(
        refused.as_deref(),
        Some("-ERR max number of clients reached\r\n")
    );
    assert_eq!(held.len() + 1, 8, "bystander + held = max_clients");
    let stats = send(&mut bystander, &["INFO", "stats"]);
    assert!(stats.contains("rejected_connections:1\r\n"), "{stats}");
    drop(held);
    only_the_bystander_left(&mut bystander);
    let mut again = proxy.stream();
    assert_eq!(send(&mut again, &["PING"]), "+PONG\r\n");
}

#[test]
fn a_client_that_never_reads_is_held_back() {
    let cluster = cluster(3, 0);
    let proxy = Proxy::start(&cluster.seeds(), &["--threads", "1"]);
    let pid = proxy.pid();
    let before = rss_kib(pid);
    let flood = proxy.stream();
    let mut writer = flood.try_clone().unwrap();
    writer
        .set_write_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    // 100 MB of GETs of a 64 KiB value, never reading a reply.
    let mut con = proxy.client();
    let _: () = redis::cmd("SET")
        .arg("big")
        .arg(vec![b'x'; 64 * 1024])
        .query(&mut con)
        .unwrap();
    let flooder = std::thread::spawn(move || {
        let one = encode(&["GET", "big"]);
        let chunk: Vec<u8> = one.iter().copied().cycle().take(one.len() * 1000).collect();
        let mut sent = 0usize;
        let started = Instant::now();
        while sent < 100 * 1024 * 1024 && started.elapsed() < Duration::from_secs(10) {
            match writer.write(&chunk) {
                Ok(n) => sent += n,
                Err(_) => break, // blocked: orthrus stopped reading us
            }
        }
        sent
    });
    let sent = flooder.join().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let after = rss_kib(pid);
    // Other clients are served normally meanwhile.
    let started = Instant::now();
    for i in 0..200 {
        let _: () = redis::cmd("SET")
            .arg(format!("ok:{i}"))
            .arg(i)
            .query(&mut con)
            .unwrap();
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "others stalled: {:?}",
        started.elapsed()
    );
    // 1024 pending replies of 64 KiB are at most 64 MiB; the bound stated
    // in the README is 100 MiB over the idle size.
    assert!(
        after.saturating_sub(before) < 100 * 1024,
        "RSS grew from {before} KiB to {after} KiB after the client sent {sent} bytes"
    );
    assert!(
        sent < 100 * 1024 * 1024,
        "orthrus read all {sent} bytes of a client that never reads"
    );
    drop(flood);
}

#[test]
fn unread_replies_stay_within_the_byte_budget() {
    let cluster = cluster(3, 0);
    let proxy = Proxy::start(&cluster.seeds(), &["--threads", "1"]);
    let pid = proxy.pid();
    let mut con = proxy.client();
    let value = vec![b'v'; 100 * 1024];
    let _: () = redis::cmd("SET")
        .arg("big100")
        .arg(&value)
        .query(&mut con)
        .unwrap();
    let before = rss_kib(pid);
    // 3,000 GETs of 100 KiB (293 MiB of replies) in one write, then nothing
    // read while orthrus's memory is watched.
    let mut flood = proxy.stream();
    let one = encode(&["GET", "big100"]);
    let all: Vec<u8> = one.iter().copied().cycle().take(one.len() * 3000).collect();
    flood.write_all(&all).unwrap();
    let mut peak = before;
    let watch = Instant::now();
    while watch.elapsed() < Duration::from_secs(3) {
        peak = peak.max(rss_kib(pid));
        std::thread::sleep(Duration::from_millis(20));
    }
    // Other clients are served meanwhile.
    let _: () = redis::cmd("SET")
        .arg("small")
        .arg(1)
        .query(&mut con)
        .unwrap();
    // Every reply arrives once the client reads.
    flood
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut reply = vec![0u8; 4 + 6 + 2 + value.len() + 2];
    let reading = Instant::now();
    for i in 0..3000 {
        assert!(
            reading.elapsed() < Duration::from_secs(60),
            "reply {i} too slow"
        );
        let header = b"$102400\r\n";
        flood
            .read_exact(&mut reply[..header.len() + value.len() + 2])
            .unwrap();
        assert!(reply.starts_with(header), "reply {i}");
    }
    eprintln!("unread 100 KiB replies: RSS {before} KiB before, peak {peak} KiB");
    assert!(
        peak.saturating_sub(before) <= 32 * 1024,
        "RSS grew from {before} KiB to {peak} KiB for one client that does not read"
    );
}

/// A HOTKEYS session at the largest COUNT and 1,500 GETs of distinct
/// 1 MiB keys that share all but their last bytes: orthrus keeps a bounded
/// prefix of each name (RSS within 64 MiB of what it was before the GETs),
/// and the long names stay apart (64 names listed, each the first 256
/// bytes and a marker with the length and a hash of the whole name).
#[test]
fn hotkeys_keeps_a_bounded_prefix_of_long_key_names() {
    const KEYS: usize = 1500;
    const KEY_LEN: usize = 1024 * 1024;
    let cluster = cluster(3, 0);
    let proxy = Proxy::start(&cluster.seeds(), &["--threads", "1"]);
    let pid = proxy.pid();
    let mut con = proxy.client();
    let mut raw = proxy.stream();
    let started = send(
        &mut raw,
        &[
            "HOTKEYS", "START", "METRICS", "2", "CPU", "NET", "COUNT", "64",
        ],
    );
    assert_eq!(started, "+OK\r\n");
    // The names differ only in their hash tag, at the end (the slot is
    // the tag's, so they spread over the masters).
    let mut key = vec![b'k'; KEY_LEN];
    let before = rss_kib(pid);
    let mut peak = before;
    for i in 0..KEYS {
        let tag = format!("{{{i:06}}}");
        let at = KEY_LEN - tag.len();
        key[at..].copy_from_slice(tag.as_bytes());
        let get = format!("*2\r\n$3\r\nGET\r\n${KEY_LEN}\r\n");
        raw.write_all(get.as_bytes()).unwrap();
        raw.write_all(&key).unwrap();
        raw.write_all(b"\r\n").unwrap();
        assert_eq!(
            read_reply(&mut raw).expect("a reply"),
            b"$-1\r\n"[..],
            "GET {i}"
        );
        if i % 100 == 0 {
            peak = peak.max(rss_kib(pid));
        }
    }
    let after = rss_kib(pid);
    peak = peak.max(after);
    let report = redis::HotkeysCommands::hotkeys_get(&mut con)
        .unwrap()
        .expect("a session");
    let names: Vec<String> = report
        .by_net_bytes
        .expect("NET")
        .into_iter()
        .map(|e| e.key)
        .collect();
    eprintln!(
        "HOTKEYS COUNT 64, {KEYS} GETs of 1 MiB keys: RSS {before} KiB before, {after} KiB after, peak {peak} KiB; {} names, the first {:?}",
        names.len(),
        names.first().and_then(|n| n.get(250..n.len().min(330)))
    );
    assert!(
        peak.saturating_sub(before) <= 64 * 1024,
        "RSS grew from {before} KiB to {peak} KiB"
    );
    assert_eq!(names.len(), 64, "long names merged");
    let distinct: std::collections::HashSet<&String> = names.iter().collect();
    assert_eq!(distinct.len(), 64, "{names:?}");
    let prefix = "k".repeat(256);
    for name in &names {
        assert!(name.len() < 320, "{} bytes shown", name.len());
        let marker = name.strip_prefix(&prefix).expect("the first 256 bytes");
        assert!(
            marker.starts_with("...") && marker.contains("1048576 bytes"),
            "{marker}"
        );
    }
}

#[test]
fn sigterm_finishes_in_flight_requests_and_exits_0() {
    let cluster = cluster(3, 0);
    let mut proxy = Proxy::spawn(
        &cluster.seeds(),
        &[],
        &[("ORTHRUS_SHUTDOWN_TIMEOUT_MS", "3000")],
    );
    proxy.wait_ready(Duration::from_secs(20));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let clients: Vec<_> = (0..8)
        .map(|t| {
            let mut s = proxy.stream();
            let stop = stop.clone();
            std::thread::spawn(move || -> Result<usize, String> {
                let mut ok = 0;
                for round in 0..100_000 {
                    if stop.load(std::sync::atomic::Ordering::Relaxed) && round > 0 {
                        break;
                    }
                    let mut batch = Vec::new();
                    for i in 0..50 {
                        batch.extend(encode(&["SET", &format!("term:{t}:{i}"), "v"]));
                    }
                    if s.write_all(&batch).is_err() {
                        return Ok(ok);
                    }
                    for _ in 0..50 {
                        match read_reply(&mut s) {
                            Ok(r) if r == b"+OK\r\n" => ok += 1,
                            Ok(r) => {
                                return Err(format!(
                                    "bad reply during shutdown: {:?}",
                                    String::from_utf8_lossy(&r)
                                ));
                            }
                            Err(_) => return Ok(ok), // closed after its last reply
                        }
                    }
                }
                Ok(ok)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let started = Instant::now();
    proxy.signal("TERM");
    let status = proxy
        .wait_exit(Duration::from_secs(5))
        .expect("orthrus did not exit within the deadline");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert_eq!(status.code(), Some(0), "exit status {status:?}");
    assert!(
        started.elapsed() < Duration::from_millis(3600),
        "took {:?}",
        started.elapsed()
    );
    for c in clients {
        let ok = c.join().unwrap().unwrap_or_else(|e| panic!("{e}"));
        assert!(ok > 0);
    }
}

#[test]
fn over_the_memory_limit_requests_are_refused_not_dropped() {
    let cluster = cluster(3, 0);
    // 1 MiB: orthrus is over it from the start.
    let proxy = Proxy::spawn(&cluster.seeds(), &[], &[("ORTHRUS_MEMORY_LIMIT_MB", "1")]);
    let mut s = proxy.stream();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let reply = common::send(&mut s, &["GET", "k"]);
        if reply.starts_with("-OOM orthrus: memory use is over memory_limit_mb") {
            break;
        }
        assert!(Instant::now() < deadline, "never refused: {reply}");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        common::send(&mut s, &["PING"]),
        "+PONG\r\n",
        "the connection stays usable"
    );
    assert!(common::send(&mut s, &["INFO", "server"]).contains("orthrus_version"));
    assert!(proxy.log_text().contains("over memory_limit_mb"));
}

/// Waits until orthrus counts only `bystander` as connected (asked over it:
/// a probe connection of its own could meet the very limit under test).
fn only_the_bystander_left(bystander: &mut std::net::TcpStream) {
    wait_until(
        Duration::from_secs(10),
        "only the bystander connected",
        || {
            let info = send(bystander, &["INFO", "clients"]);
            match orthrus_devcluster::info_field(&info, "connected_clients") {
                Some("1") => Ok(()),
                other => Err(format!("connected_clients {other:?}")),
            }
        },
    )
    .unwrap();
}
