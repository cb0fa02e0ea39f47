//! Each mode of the relay against a small echo server on loopback.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use super::{Cut, Fault, Relay};

/// An echo server on a free port; its threads end with the process.
fn echo_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            thread::spawn(move || {
                let mut rd = conn.try_clone().unwrap();
                let mut wr = conn;
                let _ = std::io::copy(&mut rd, &mut wr);
            });
        }
    });
    addr
}

/// A relay in front of an echo server, and a client connected to it.
fn relayed() -> (Relay, TcpStream) {
    let relay = Relay::start(echo_server()).unwrap();
    let client = TcpStream::connect(relay.addr()).unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    (relay, client)
}

/// Sends `msg` and reads its echo; returns how long the round trip took.
fn round_trip(client: &mut TcpStream, msg: &[u8]) -> Duration {
    let started = Instant::now();
    client.write_all(msg).unwrap();
    let mut got = vec![0; msg.len()];
    client.read_exact(&mut got).unwrap();
    assert_eq!(got, msg);
    started.elapsed()
}

#[test]
fn healed_relay_forwards_both_ways_and_counts_connections() {
    let (relay, mut client) = relayed();
    round_trip(&mut client, b"hello");
    let big = vec![7u8; 1 << 20];
    round_trip(&mut client, &big);
    let _second = TcpStream::connect(relay.addr()).unwrap();
    super::super::wait_until(Duration::from_secs(5), "two connections", || {
        (relay.open_connections() == 2)
            .then_some(())
            .ok_or_else(|| format!("{} open", relay.open_connections()))
    })
    .unwrap();
    assert_eq!(relay.accepted(), 2);
}

#[test]
fn delay_holds_replies_and_keeps_their_order() {
    let (relay, mut client) = relayed();
    relay.set(Fault::Delay {
        by: Duration::from_millis(150),
        jitter: Duration::from_millis(50),
    });
    let took = round_trip(&mut client, b"ping");
    assert!(took >= Duration::from_millis(150), "took {took:?}");
    // Many small writes, each delayed by its own jitter, arrive in order.
    let mut sent = Vec::new();
    for i in 0..50u8 {
        client.write_all(&[i]).unwrap();
        sent.push(i);
        thread::sleep(Duration::from_millis(2));
    }
    let mut got = vec![0; sent.len()];
    client.read_exact(&mut got).unwrap();
    assert_eq!(got, sent);
    relay.heal();
    round_trip(&mut client, b"healed");
}

#[test]
fn throttle_limits_the_rate() {
    let (relay, mut client) = relayed();
    relay.set(Fault::Throttle {
        bytes_per_sec: 100_000,
    });
    // 50 kB each way at 100 kB/s: at least about half a second.
    let took = round_trip(&mut client, &vec![1u8; 50_000]);
    assert!(took >= Duration::from_millis(400), "took {took:?}");
}

#[test]
fn black_hole_forwards_nothing_closes_nothing_then_heals() {
    let (relay, mut client) = relayed();
    round_trip(&mut client, b"before");
    relay.set(Fault::BlackHole);
    client.write_all(b"lost?").unwrap();
    client
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut buf = [0u8; 16];
    let err = client.read(&mut buf).expect_err("nothing may arrive");
    assert!(
        matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
        "{err}"
    );
    // A new connection is accepted and held too.
    let mut late = TcpStream::connect(relay.addr()).unwrap();
    late.write_all(b"late").unwrap();
    relay.heal();
    client
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut got = [0u8; 5];
    client.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"lost?");
    late.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut got = [0u8; 4];
    late.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"late");
}

#[test]
fn reset_sends_an_rst_to_open_connections_only() {
    let (relay, mut client) = relayed();
    round_trip(&mut client, b"x");
    relay.reset();
    let mut buf = [0u8; 4];
    let err = client.read(&mut buf).expect_err("reset");
    assert_eq!(err.kind(), ErrorKind::ConnectionReset, "{err}");
    let mut next = TcpStream::connect(relay.addr()).unwrap();
    next.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    round_trip(&mut next, b"fresh");
}

#[test]
fn cut_after_passes_that_many_bytes_then_closes() {
    let (relay, mut client) = relayed();
    round_trip(&mut client, b"x");
    relay.cut_after(1000, Cut::Close);
    client.write_all(&vec![9u8; 5000]).unwrap();
    let mut got = Vec::new();
    client.read_to_end(&mut got).unwrap();
    assert_eq!(got.len(), 1000);
    let mut next = TcpStream::connect(relay.addr()).unwrap();
    next.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    round_trip(&mut next, &vec![3u8; 5000]);
}

#[test]
fn cut_after_can_reset() {
    let (relay, mut client) = relayed();
    round_trip(&mut client, b"x");
    relay.cut_after(10, Cut::Reset);
    client.write_all(&[1u8; 100]).unwrap();
    let mut got = [0u8; 10];
    client.read_exact(&mut got).unwrap();
    let mut buf = [0u8; 100];
    let err = client.read(&mut buf).expect_err("reset");
    assert_eq!(err.kind(), ErrorKind::ConnectionReset, "{err}");
}

#[test]
fn refuse_resets_new_connections_counts_them_and_heals() {
    let (relay, mut client) = relayed();
    round_trip(&mut client, b"accepted before");
    relay.set(Fault::Refuse);
    for _ in 0..3 {
        let mut refused = TcpStream::connect(relay.addr()).unwrap();
        refused
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let _ = refused.write_all(b"anyone?");
        let mut buf = [0u8; 8];
        match refused.read(&mut buf) {
            Err(e) => assert_eq!(e.kind(), ErrorKind::ConnectionReset, "{e}"),
            Ok(n) => assert_eq!(n, 0, "a refused connection got bytes"),
        }
    }
    assert_eq!(relay.accepted(), 4);
    // The connection made before still works.
    round_trip(&mut client, b"still here");
    relay.heal();
    let mut next = TcpStream::connect(relay.addr()).unwrap();
    next.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    round_trip(&mut next, b"welcome back");
}

#[test]
fn drop_closes_every_connection() {
    let (relay, mut client) = relayed();
    round_trip(&mut client, b"x");
    drop(relay);
    let mut buf = [0u8; 4];
    match client.read(&mut buf) {
        Ok(n) => assert_eq!(n, 0),
        Err(e) => assert_eq!(e.kind(), ErrorKind::ConnectionReset, "{e}"),
    }
}
