//! Very large requests, sent to the real binary: a million-key MGET is
//! answered right without holding up the other clients of its worker
//! longer than a redis-server takes to answer it.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Proxy, cluster, encode, encode_bytes, read_reply, send};
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
    let (_, redis_took) = timed_call(single.addr(), &request, &expected);

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
