//! A node slower than its clients: orthrus's memory stays bounded while
//! clients keep sending to it. The slow node is a real master reached
//! through a relay that forwards what orthrus writes at a fixed rate (the
//! master announces the relay's port, so orthrus connects there).

mod common;

use std::io::{BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{Proxy, cluster, encode_bytes, owner_of, read_reply, rss_kib};
use orthrus_devcluster::wait_until;

/// What the relay forwards towards the node, in bytes per second.
const RELAY_RATE: usize = 16 * 1024 * 1024;
const CLIENTS: usize = 64;
const PIPELINE: usize = 64;
const VALUE: usize = 8 * 1024;

/// Accepts connections on a free port and forwards each to `node`, the
/// way to the node at `RELAY_RATE` bytes per second (for each connection),
/// the way back as it comes.
fn slow_relay(node: SocketAddr) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let Ok(upstream) = TcpStream::connect(node) else {
                continue;
            };
            let (mut up_rd, mut conn_wr) = (
                upstream.try_clone().expect("clone"),
                conn.try_clone().expect("clone"),
            );
            std::thread::spawn(move || std::io::copy(&mut up_rd, &mut conn_wr));
            std::thread::spawn(move || slow_copy(conn, upstream));
        }
    });
    port
}

fn slow_copy(mut from: TcpStream, mut to: TcpStream) {
    let mut buf = vec![0; 64 * 1024];
    let started = Instant::now();
    let mut sent = 0usize;
    while let Ok(n @ 1..) = from.read(&mut buf) {
        if to.write_all(&buf[..n]).is_err() {
            return;
        }
        sent += n;
        let due = Duration::from_secs_f64(sent as f64 / RELAY_RATE as f64);
        if let Some(wait) = due.checked_sub(started.elapsed()) {
            std::thread::sleep(wait);
        }
    }
}

/// Clients keep a node that takes their requests slower than they send
/// them busy for 10 s (some 160 MB pass through orthrus's queue to it):
/// orthrus's memory grows by what waits to be written, not by everything
/// written since its queue was last empty.
#[test]
fn memory_stays_bounded_while_a_node_is_slow() {
    let cluster = cluster(3, 0);
    let owner = owner_of(&cluster, b"{slow}");
    let node = &cluster.nodes()[owner];
    let relay = slow_relay(node.addr());
    node.cmd_ok(&["CONFIG", "SET", "cluster-announce-port", &relay.to_string()])
        .expect("announce");
    // Every node tells the relay's port before orthrus starts.
    wait_until(
        Duration::from_secs(20),
        "the relay's port announced",
        || {
            for n in cluster.nodes() {
                let slots = format!(
                    "{:?}",
                    n.cmd(&["CLUSTER", "SLOTS"]).map_err(|e| e.to_string())?
                );
                if !slots.contains(&format!("Integer({relay})")) {
                    return Err(slots);
                }
            }
            Ok(())
        },
    )
    .expect("announced");
    let proxy = Proxy::start(&cluster.seeds(), &["--threads", "1"]);
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (addr, stop) = (proxy.addr, stop.clone());
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(addr).expect("connect");
                let mut rd = BufReader::new(s.try_clone().expect("clone"));
                let value = vec![b'v'; VALUE];
                let mut batch = Vec::new();
                for i in 0..PIPELINE {
                    let key = format!("{{slow}}:{c}:{i}");
                    batch.extend(encode_bytes(&[b"SET", key.as_bytes(), &value]));
                }
                let started = Instant::now();
                while !stop.load(Ordering::Relaxed) && started.elapsed() < Duration::from_secs(60) {
                    s.write_all(&batch).expect("send");
                    for _ in 0..PIPELINE {
                        assert_eq!(read_reply(&mut rd).expect("reply"), b"+OK\r\n");
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    let before = rss_kib(proxy.pid());
    std::thread::sleep(Duration::from_secs(10));
    let after = rss_kib(proxy.pid());
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().expect("client");
    }
    let grew_mib = after.saturating_sub(before) / 1024;
    eprintln!("orthrus RSS {before} -> {after} KiB while the node was slow");
    // What may legitimately be held: every client's batch in flight, once
    // as the request the session keeps until its reply and once copied into
    // the node queue's buffer, plus allocator slack. A queue that keeps
    // every byte written grew past 160 MiB in these 10 s.
    let in_flight_mib = (CLIENTS * PIPELINE * VALUE / (1024 * 1024)) as u64;
    let bound = 2 * in_flight_mib + 16;
    assert!(
        grew_mib < bound,
        "orthrus's RSS grew {grew_mib} MiB in 10 s ({before} -> {after} KiB), over {bound} MiB"
    );
}
