//! Very large requests, sent to the real binary: a million-key MGET is
//! answered right without holding up the other clients of its worker
//! longer than a redis-server takes to answer it.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Proxy, cluster, encode, encode_bytes, read_reply, rss_kib, send};
use orthrus_devcluster::{NodeOptions, RedisNode};

const MGET_KEYS: usize = 1_000_000;
/// One key in this many has a value; the others are missing.
const SET_EVERY: usize = 1000;

fn key(i: usize) -> String {
    format!("big:{i}")
}

/// `MGET big:0 .. big:999999`, and the reply it must get.
fn big_mget() -> (Vec<u8>, Vec<u8>) {
    let keys: Vec<String> = (0..MGET_KEYS).map(key).collect();
    let mut args: Vec<&[u8]> = vec![b"MGET"];
    args.extend(keys.iter().map(String::as_bytes));
    let mut reply = format!("*{MGET_KEYS}\r\n").into_bytes();
    for i in 0..MGET_KEYS {
        if i % SET_EVERY == 0 {
            let v = format!("v{i}");
            reply.extend_from_slice(format!("${}\r\n{v}\r\n", v.len()).as_bytes());
        } else {
            reply.extend_from_slice(b"$-1\r\n");
        }
    }
    (encode_bytes(&args), reply)
}

/// The keys of [`big_mget`] that have a value.
fn fill(addr: SocketAddr) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let pairs: Vec<String> = (0..MGET_KEYS)
        .step_by(SET_EVERY)
        .flat_map(|i| [key(i), format!("v{i}")])
        .collect();
    let mut args = vec!["MSET"];
    args.extend(pairs.iter().map(String::as_str));
    assert_eq!(send(&mut s, &args), "+OK\r\n");
}

/// Sends `request` on a fresh connection and reads `expected.len()` bytes
/// back; returns them and how long it took from the first byte written.
fn timed_call(addr: SocketAddr, request: &[u8], expected: &[u8]) -> (Vec<u8>, Duration) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let reader = s.try_clone().unwrap();
    let want = expected.len();
    let started = Instant::now();
    // Write from another thread: a large reply may start before the whole
    // request is written.
    let writer = {
        let request = request.to_vec();
        std::thread::spawn(move || s.write_all(&request).map(|()| s))
    };
    let mut out = Vec::with_capacity(want);
    let mut reader = reader.take(want as u64);
    reader.read_to_end(&mut out).unwrap();
    let took = started.elapsed();
    drop(writer.join().unwrap().unwrap());
    (out, took)
}

#[test]
fn million_key_mget_does_not_hold_up_other_clients() {
    let (request, expected) = big_mget();

    // What one redis-server takes to answer it, with the same data.
    let single = RedisNode::start(NodeOptions::default()).expect("start redis-server");
    fill(single.addr());
    let (reply, _) = timed_call(single.addr(), &request, &expected);
    assert!(reply == expected, "redis-server's own reply differs");
    let mut redis_times = vec![timed_call(single.addr(), &request, &expected).1];

    let cluster = cluster(3, 0);
    // One worker: the MGET and the PINGs share it.
    let proxy = Proxy::start(&cluster.seeds(), &["--threads", "1"]);
    fill(proxy.addr);

    let stop = Arc::new(AtomicBool::new(false));
    let worst = Arc::new(Mutex::new(Duration::ZERO));
    let pinger = {
        let (stop, worst) = (stop.clone(), worst.clone());
        let mut s = proxy.stream();
        std::thread::spawn(move || {
            let started = Instant::now();
            let mut pings = 0u32;
            while !stop.load(Ordering::Relaxed) && started.elapsed() < Duration::from_secs(120) {
                let sent = Instant::now();
                s.write_all(&encode(&["PING"])).unwrap();
                let reply = read_reply(&mut s);
                let took = sent.elapsed();
                if took > Duration::from_millis(100) {
                    eprintln!("slow PING {took:?} at {:?}", started.elapsed());
                }
                let mut w = worst.lock().unwrap();
                *w = (*w).max(took);
                drop(w);
                // A read that timed out: the worst wait is at least that.
                if reply.is_err() {
                    break;
                }
                assert_eq!(reply.unwrap(), b"+PONG\r\n");
                pings += 1;
                std::thread::sleep(Duration::from_millis(1));
            }
            pings
        })
    };
    std::thread::sleep(Duration::from_millis(50));
    let (reply, proxy_took) = timed_call(proxy.addr, &request, &expected);
    stop.store(true, Ordering::Relaxed);
    let pings = pinger.join().unwrap();
    // Before and after, on a machine that may be busy: the median of three.
    for _ in 0..2 {
        redis_times.push(timed_call(single.addr(), &request, &expected).1);
    }
    redis_times.sort();
    let redis_took = redis_times[1];
    assert!(
        reply == expected,
        "the MGET's reply through orthrus differs from the expected one"
    );
    let worst = *worst.lock().unwrap();
    eprintln!(
        "redis-server answered in {redis_took:?}; orthrus in {proxy_took:?}; \
         the worst PING during it took {worst:?} ({pings} PINGs)"
    );
    assert!(
        worst <= redis_took * 2,
        "a PING waited {worst:?} behind the MGET; redis-server answers it in {redis_took:?}"
    );
    let mut s = proxy.stream();
    assert_eq!(send(&mut s, &["GET", "big:0"]), "$2\r\nv0\r\n");
}

#[test]
fn query_buffer_limit_bounds_a_request_and_a_transaction() {
    let cluster = cluster(3, 0);
    let proxy = Proxy::spawn(
        &cluster.seeds(),
        &[],
        &[("ORTHRUS_CLIENT__QUERY_BUFFER_LIMIT", "1048576")],
    );
    proxy.wait_ready(Duration::from_secs(20));
    let mut bystander = proxy.stream();
    let under = "u".repeat(400 * 1024);
    let over = "o".repeat(2 * 1024 * 1024);

    // One request over the limit: an error, then the connection closes.
    let mut s = proxy.stream();
    assert_eq!(send(&mut s, &["SET", "q:1", &under]), "+OK\r\n");
    s.write_all(&encode(&["SET", "q:2", &over])).unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out),
        "-ERR orthrus: a request over client.query_buffer_limit (1048576 bytes); closing the connection\r\n"
    );
    assert_eq!(send(&mut bystander, &["EXISTS", "q:2"]), ":0\r\n");

    // A transaction's queue: the command past the limit is refused and
    // the transaction aborted, as after any queue-time error.
    let mut s = proxy.stream();
    assert_eq!(send(&mut s, &["MULTI"]), "+OK\r\n");
    assert_eq!(send(&mut s, &["SET", "{t}1", &under]), "+QUEUED\r\n");
    assert_eq!(send(&mut s, &["SET", "{t}2", &under]), "+QUEUED\r\n");
    assert_eq!(
        send(&mut s, &["SET", "{t}3", &under]),
        "-ERR orthrus: the transaction's queued commands are over client.query_buffer_limit (1048576 bytes)\r\n"
    );
    assert_eq!(
        send(&mut s, &["EXEC"]),
        "-EXECABORT Transaction discarded because of previous errors.\r\n"
    );
    assert_eq!(send(&mut s, &["EXISTS", "{t}1"]), ":0\r\n");
    assert_eq!(send(&mut bystander, &["PING"]), "+PONG\r\n");
}

#[test]
fn requests_waiting_for_a_slow_node_count_in_the_client_budget() {
    const REQUESTS: usize = 120;
    let cluster = cluster(3, 0);
    let proxy = Proxy::spawn(
        &cluster.seeds(),
        &["--threads", "1"],
        &[("ORTHRUS_BACKEND__REQUEST_TIMEOUT_MS", "60000")],
    );
    proxy.wait_ready(Duration::from_secs(20));
    let master = cluster.masters().unwrap()[0];
    let keys: Vec<String> = (0..)
        .map(|i| format!("slow:{i}"))
        .filter(|k| common::owner_of(&cluster, k.as_bytes()) == master)
        .take(REQUESTS)
        .collect();
    let value = "v".repeat(1024 * 1024);
    let before = rss_kib(proxy.pid());
    cluster.pause(master).unwrap();
    // 120 MiB of SETs for the stopped master, sent without reading.
    let mut s = proxy.stream();
    let writer = {
        let mut s = s.try_clone().unwrap();
        let frames: Vec<Vec<u8>> = keys.iter().map(|k| encode(&["SET", k, &value])).collect();
        std::thread::spawn(move || {
            for f in frames {
                s.write_all(&f).unwrap();
            }
        })
    };
    std::thread::sleep(Duration::from_secs(3));
    let grown = rss_kib(proxy.pid()).saturating_sub(before);
    cluster.resume(master).unwrap();
    writer.join().unwrap();
    for _ in 0..REQUESTS {
        assert_eq!(read_reply(&mut s).unwrap(), b"+OK\r\n");
    }
    eprintln!("orthrus grew by {grown} KiB while 120 MiB of requests waited");
    assert!(
        grown < 64 * 1024,
        "orthrus grew by {grown} KiB holding requests for a stopped node"
    );
}
