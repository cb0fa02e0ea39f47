//! A node slower than its clients: orthrus's memory stays bounded while
//! clients keep sending to it. The slow node is a real master reached
//! through devcluster's fault relay, throttled (the master announces the
//! relay's port, so orthrus connects there).

mod common;

use std::io::{BufReader, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{Proxy, cluster, encode_bytes, owner_of, read_reply, rss_kib};
use orthrus_devcluster::Fault;

/// What the relay forwards each way, in bytes per second (the replies,
/// `+OK`, are far below it).
const RELAY_RATE: u64 = 16 * 1024 * 1024;
const CLIENTS: usize = 64;
const PIPELINE: usize = 64;
const VALUE: usize = 8 * 1024;

/// Clients keep a node that takes their requests slower than they send
/// them busy for 10 s (some 160 MB pass through orthrus's queue to it):
/// orthrus's memory grows by what waits to be written, not by everything
/// written since its queue was last empty.
#[test]
fn memory_stays_bounded_while_a_node_is_slow() {
    let cluster = cluster(3, 0);
    let owner = owner_of(&cluster, b"{slow}");
    let relay = cluster.relay(owner).expect("relay");
    relay.set(Fault::Throttle {
        bytes_per_sec: RELAY_RATE,
    });
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
