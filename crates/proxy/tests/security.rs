//! What a client can do to orthrus before and without the right
//! credentials, tried against the real binary in front of a real cluster
//! whose nodes require a password.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{Proxy, read_reply};
use orthrus_devcluster::{Cluster, ClusterSpec, NodeOptions};

const NODE_PASSWORD: &str = "node-secret-30";
const CLIENT_PASSWORD: &str = "client-secret-30";

/// Three masters with `requirepass`, and orthrus with a client password.
fn protected_cluster() -> (Cluster, Proxy) {
    let spec =
        ClusterSpec::new(3, 0).with_node(NodeOptions::cluster().with_password(NODE_PASSWORD));
    let cluster = Cluster::start(spec).expect("start cluster");
    let proxy = Proxy::spawn(
        &cluster.seeds(),
        &["--requirepass", CLIENT_PASSWORD],
        &[("ORTHRUS_BACKEND__PASSWORD", NODE_PASSWORD)],
    );
    (cluster, proxy)
}

/// A `/proc/PID/status` field, in KiB.
fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in {status}"))
}

/// Sends `bytes`, then expects `reply` and the connection closed.
fn refused_and_closed(proxy: &Proxy, bytes: &[u8], reply: &str) {
    let mut s = proxy.stream();
    s.write_all(bytes).expect("send");
    let got = read_reply(&mut s).expect("reply");
    assert_eq!(String::from_utf8_lossy(&got), reply);
    let mut rest = [0u8; 64];
    assert_eq!(
        s.read(&mut rest).expect("read after the error"),
        0,
        "not closed"
    );
}

#[test]
fn before_auth_big_headers_are_refused_and_the_connection_closed() {
    let (_cluster, proxy) = protected_cluster();
    let bulk = "-ERR Protocol error: unauthenticated bulk length\r\n";
    let multibulk = "-ERR Protocol error: unauthenticated multibulk length\r\n";
    refused_and_closed(&proxy, b"*2\r\n$3\r\nGET\r\n$209715210\r\n", bulk);
    refused_and_closed(&proxy, b"*11\r\n", multibulk);
    refused_and_closed(&proxy, &[b'a'; 16 * 1024 + 1], bulk);
    let mut eleven = "GET k ".repeat(5).into_bytes();
    eleven.extend_from_slice(b"x\r\n");
    refused_and_closed(&proxy, &eleven, multibulk);

    // Within the limits a client still hears NOAUTH, and after AUTH the
    // usual limits apply on the same connection.
    let mut s = proxy.stream();
    let ten = common::encode(&["GET"; 10]);
    s.write_all(&ten).expect("send");
    let noauth = read_reply(&mut s).expect("reply");
    assert_eq!(&noauth[..], b"-NOAUTH Authentication required.\r\n");
    assert_eq!(common::send(&mut s, &["AUTH", CLIENT_PASSWORD]), "+OK\r\n");
    let big = "v".repeat(64 * 1024);
    let echo = common::send(&mut s, &["ECHO", &big]);
    assert_eq!(echo, format!("$65536\r\n{big}\r\n"));
}

/// The probe from the outside: 100 connections that never AUTH each try to
/// send a 200 MiB argument. Redis's rule refuses each at its header, so
/// orthrus's resident memory hardly moves (at most 8 MiB, allocator slack
/// and the connections' own state included).
#[test]
fn before_auth_100_connections_sending_200_mib_each_leave_rss_flat() {
    let (_cluster, proxy) = protected_cluster();
    let pid = proxy.pid();
    let before = status_kib(pid, "VmRSS:");
    let deadline = Instant::now() + Duration::from_secs(30);
    let refused: usize = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..10)
            .map(|_| scope.spawn(|| (0..10).filter(|_| flood(&proxy, deadline)).count()))
            .collect();
        workers.into_iter().map(|w| w.join().expect("worker")).sum()
    });
    let peak = status_kib(pid, "VmHWM:");
    assert_eq!(refused, 100, "some connections were never refused");
    let grown = peak.saturating_sub(before);
    assert!(
        grown <= 8 * 1024,
        "RSS {before} KiB before, peak {peak} KiB after: grew {grown} KiB"
    );
}

/// One connection that sends `GET` with a 200 MiB argument, in 1 MiB
/// writes, until orthrus ends it. True if it ended before all was sent.
fn flood(proxy: &Proxy, deadline: Instant) -> bool {
    const TOTAL: usize = 200 * 1024 * 1024;
    let mut s = TcpStream::connect(proxy.addr).expect("connect");
    s.set_write_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let header = format!("*2\r\n$3\r\nGET\r\n${TOTAL}\r\n");
    let chunk = vec![b'x'; 1024 * 1024];
    let mut sent = 0;
    if s.write_all(header.as_bytes()).is_err() {
        return true;
    }
    while sent < TOTAL && Instant::now() < deadline {
        match s.write(&chunk) {
            Ok(n) => sent += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return true,
        }
    }
    false
}
