//! Memory bounds against clients that try to get around them, sent to the
//! real binary: a client that pipelines GETs of a large value after small
//! ones and never reads, and clients streaming large unfinished requests
//! while orthrus is at its `memory_limit_mb`.

mod common;

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::{Proxy, cluster, encode, rss_kib, send};

const MIB: u64 = 1024;

/// A client socket whose receive buffer is small, so that the kernel holds
/// little of what orthrus writes to it.
fn small_window_stream(addr: SocketAddr) -> TcpStream {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    socket.connect(&addr.into()).unwrap();
    let stream: TcpStream = socket.into();
    stream
        .set_write_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    stream
}

/// Sends `count` copies of one request in one write.
fn pipeline(stream: &mut TcpStream, args: &[&str], count: usize) {
    let one = encode(args);
    let all: Vec<u8> = one
        .iter()
        .copied()
        .cycle()
        .take(one.len() * count)
        .collect();
    stream.write_all(&all).unwrap();
}

/// 200 small GETs bring the client's recent replies down to a few bytes;
/// 1,024 GETs of a 1 MiB value pipelined after them must still wait for
/// room in `client.max_pending_bytes` (16 MiB), not all go to the nodes
/// and have their replies held. Once the client leaves, its memory goes
/// back to the system.
#[test]
fn small_replies_first_do_not_open_the_budget_to_large_ones() {
    let cluster = cluster(3, 0);
    let proxy = Proxy::start(&cluster.seeds(), &["--threads", "1"]);
    let pid = proxy.pid();
    let mut con = proxy.stream();
    let value = "v".repeat(1024 * 1024);
    assert_eq!(send(&mut con, &["SET", "big", &value]), "+OK\r\n");
    assert_eq!(send(&mut con, &["SET", "small", "s"]), "+OK\r\n");
    assert!(send(&mut con, &["GET", "big"]).starts_with("$1048576\r\n"));
    std::thread::sleep(Duration::from_millis(300));
    let before = rss_kib(pid);

    let mut attacker = small_window_stream(proxy.addr);
    pipeline(&mut attacker, &["GET", "small"], 200);
    std::thread::sleep(Duration::from_millis(300));
    pipeline(&mut attacker, &["GET", "big"], 1024);
    let mut peak = before;
    let watch = Instant::now();
    let mut served = 0;
    while watch.elapsed() < Duration::from_secs(3) {
        peak = peak.max(rss_kib(pid));
        // Another client is served meanwhile.
        let asked = Instant::now();
        assert_eq!(send(&mut con, &["GET", "small"]), "$1\r\ns\r\n");
        assert!(
            asked.elapsed() < Duration::from_secs(1),
            "another client waited {:?}",
            asked.elapsed()
        );
        served += 1;
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!(
        "RSS {before} KiB before, peak {peak} KiB; {served} GETs of another client served meanwhile"
    );
    assert!(
        peak.saturating_sub(before) <= 64 * MIB,
        "RSS grew from {before} KiB to {peak} KiB for one client that does not read"
    );

    drop(attacker);
    std::thread::sleep(Duration::from_secs(5));
    let after = rss_kib(pid);
    eprintln!("RSS 5 s after the client left: {after} KiB");
    assert!(
        after <= before + 16 * MIB,
        "RSS {after} KiB 5 s after the client left, {before} KiB before it came"
    );
    assert_eq!(send(&mut con, &["GET", "small"]), "$1\r\ns\r\n");
}

/// With Redis's `client-output-buffer-limit` for normal clients set
/// (`client.output_buffer_hard_limit`), a client that does not take its
/// replies is closed past it, with the reason in the log; others go on.
#[test]
fn past_the_output_buffer_hard_limit_a_client_is_closed() {
    let cluster = cluster(3, 0);
    let proxy = Proxy::start_env(
        &cluster.seeds(),
        &["--threads", "1"],
        &[("ORTHRUS_CLIENT__OUTPUT_BUFFER_HARD_LIMIT", "4194304")],
    );
    let mut con = proxy.stream();
    let value = "v".repeat(1024 * 1024);
    assert_eq!(send(&mut con, &["SET", "big", &value]), "+OK\r\n");
    let mut attacker = small_window_stream(proxy.addr);
    pipeline(&mut attacker, &["GET", "big"], 64);
    attacker
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    // Once closed, what the kernel held is read and then the end.
    std::thread::sleep(Duration::from_secs(2));
    let mut got = 0usize;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match std::io::Read::read(&mut attacker, &mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got += n,
        }
    }
    assert!(
        got < 16 * 1024 * 1024,
        "the client read {got} bytes: it was not closed"
    );
    assert!(
        proxy.log_text().contains("past its output buffer limit"),
        "{}",
        proxy.log_text()
    );
    assert_eq!(send(&mut con, &["PING"]), "+PONG\r\n");
}

/// Streams one SET whose value is announced as `value_len` bytes, 1 MiB a
/// write, until orthrus stops taking it or `deadline`; then reads what
/// orthrus answered. Returns the bytes sent and the reply.
fn stream_set(addr: SocketAddr, key: &str, value_len: usize, deadline: Instant) -> (usize, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(2))).unwrap();
    let head = format!(
        "*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n${value_len}\r\n",
        key.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    let chunk = vec![b'x'; 1024 * 1024];
    let mut sent = 0usize;
    while sent < value_len && Instant::now() < deadline {
        let n = chunk.len().min(value_len - sent);
        match s.write_all(&chunk[..n]) {
            Ok(()) => sent += n,
            Err(_) => break, // refused and closed, or no longer read
        }
    }
    if sent == value_len {
        let _ = s.write_all(b"\r\n");
    }
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut reply = Vec::new();
    let _ = std::io::Read::read_to_end(&mut s, &mut reply);
    (sent, String::from_utf8_lossy(&reply).into_owned())
}

/// `memory_limit_mb = 200`: two clients streaming 300 MiB each into an
/// unfinished SET, then three streaming 90 MiB each (each fits, not all
/// together), keep RSS within the limit plus 60 MiB; what does not fit is
/// refused with `-OOM` and its connection closed; another client's PING
/// answers throughout.
#[test]
fn large_requests_being_read_stay_within_the_memory_limit() {
    let cluster = cluster(3, 0);
    let proxy = Proxy::start_env(&cluster.seeds(), &[], &[("ORTHRUS_MEMORY_LIMIT_MB", "200")]);
    let pid = proxy.pid();
    let mut con = proxy.stream();
    assert_eq!(send(&mut con, &["PING"]), "+PONG\r\n");
    for (clients, value_len) in [(2, 300 * 1024 * 1024), (3, 90 * 1024 * 1024)] {
        let deadline = Instant::now() + Duration::from_secs(20);
        let streams: Vec<_> = (0..clients)
            .map(|i| {
                let addr = proxy.addr;
                std::thread::spawn(move || {
                    stream_set(addr, &format!("big{i}"), value_len, deadline)
                })
            })
            .collect();
        let mut peak = 0;
        let mut pings = 0;
        while !streams.iter().all(|t| t.is_finished()) {
            peak = peak.max(rss_kib(pid));
            let asked = Instant::now();
            assert_eq!(send(&mut con, &["PING"]), "+PONG\r\n");
            assert!(
                asked.elapsed() < Duration::from_secs(1),
                "PING waited {:?}",
                asked.elapsed()
            );
            pings += 1;
            std::thread::sleep(Duration::from_millis(20));
        }
        let results: Vec<(usize, String)> =
            streams.into_iter().map(|t| t.join().unwrap()).collect();
        eprintln!(
            "{clients} clients streaming {value_len} bytes: RSS peak {peak} KiB, {pings} PINGs answered; {:?}",
            results
                .iter()
                .map(|(sent, reply)| (sent, reply.chars().take(60).collect::<String>()))
                .collect::<Vec<_>>()
        );
        assert!(
            peak <= (200 + 60) * MIB,
            "RSS peak {peak} KiB with memory_limit_mb = 200"
        );
        let refused = results
            .iter()
            .filter(|(_, reply)| reply.starts_with("-OOM orthrus: a request of at least"))
            .count();
        assert!(refused >= 1, "none refused: {results:?}");
        assert!(
            results.iter().all(|(sent, reply)| *sent < value_len
                || reply == "+OK\r\n"
                || reply.starts_with("-OOM")),
            "{results:?}"
        );
    }
    assert!(
        proxy
            .log_text()
            .contains("larger than what memory_limit_mb leaves")
    );
}
