//! A node that sends a malformed frame on a MONITOR or subscription
//! stream: the stream counts as lost (the client is told, or subscribed
//! again), never read on with the bad bytes piling up. No real node sends
//! a malformed frame on demand, so the node here is an in-process fake
//! that owns every slot and answers what orthrus asks at start-up.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{Proxy, reply_text, send};

const BAD: &[u8] = b"?bad\r\n";

/// A fake cluster node on a free port; counts the SUBSCRIBEs it got.
struct FakeNode {
    addr: SocketAddr,
    subscribes: Arc<AtomicUsize>,
}

impl FakeNode {
    fn start() -> FakeNode {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let subscribes = Arc::new(AtomicUsize::new(0));
        let counter = subscribes.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let counter = counter.clone();
                std::thread::spawn(move || serve(conn, addr.port(), &counter));
            }
        });
        FakeNode { addr, subscribes }
    }
}

/// Answers one connection's commands until it closes.
fn serve(conn: TcpStream, port: u16, subscribes: &AtomicUsize) {
    let mut out = conn.try_clone().expect("clone");
    let mut rd = BufReader::new(conn);
    // After HELLO 3 (what subscription links send), confirmations are
    // pushes, as from Redis.
    let mut resp3 = false;
    while let Some(args) = read_command(&mut rd) {
        let name = args
            .first()
            .map(|a| a.to_ascii_uppercase())
            .unwrap_or_default();
        let sub = args
            .get(1)
            .map(|a| a.to_ascii_uppercase())
            .unwrap_or_default();
        let reply: Vec<u8> = match (name.as_slice(), sub.as_slice()) {
            (b"CLUSTER", b"SLOTS") => format!(
                "*1\r\n*3\r\n:0\r\n:16383\r\n*3\r\n$9\r\n127.0.0.1\r\n:{port}\r\n$40\r\n{}\r\n",
                "f".repeat(40)
            )
            .into_bytes(),
            (b"PING", _) => b"+PONG\r\n".to_vec(),
            (b"HELLO", b"3") => {
                resp3 = true;
                b"%1\r\n$5\r\nproto\r\n:3\r\n".to_vec()
            }
            (b"GET", _) => b"$-1\r\n".to_vec(),
            (b"MONITOR", _) => b"+OK\r\n".to_vec(),
            (b"SUBSCRIBE", _) => {
                subscribes.fetch_add(1, Ordering::SeqCst);
                let head = if resp3 { ">3" } else { "*3" };
                format!("{head}\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n").into_bytes()
            }
            _ => b"-ERR not in this fake\r\n".to_vec(),
        };
        if out.write_all(&reply).is_err() {
            return;
        }
        // A while into the stream, a frame no node should send.
        if matches!(name.as_slice(), b"MONITOR" | b"SUBSCRIBE") {
            std::thread::sleep(Duration::from_millis(300));
            let _ = out.write_all(BAD);
        }
    }
}

/// One `*N $len ...` command, or `None` at the end of the stream.
fn read_command(rd: &mut impl BufRead) -> Option<Vec<Vec<u8>>> {
    let mut line = String::new();
    let count: usize = {
        rd.read_line(&mut line).ok()?;
        line.trim().strip_prefix('*')?.parse().ok()?
    };
    let mut args = Vec::with_capacity(count);
    for _ in 0..count {
        line.clear();
        rd.read_line(&mut line).ok()?;
        let len: usize = line.trim().strip_prefix('$')?.parse().ok()?;
        let mut arg = vec![0; len + 2];
        rd.read_exact(&mut arg).ok()?;
        arg.truncate(len);
        args.push(arg);
    }
    Some(args)
}

fn client(proxy: &Proxy) -> TcpStream {
    let s = proxy.stream();
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    s
}

#[test]
fn a_malformed_monitor_line_ends_the_stream_and_the_client_hears_it() {
    let node = FakeNode::start();
    let proxy = Proxy::spawn(&[node.addr], &[], &[("ORTHRUS_ADMIN__PASSTHROUGH", "true")]);
    proxy.wait_ready(Duration::from_secs(20));
    let mut c = client(&proxy);
    assert_eq!(send(&mut c, &["MONITOR"]), "+OK\r\n");
    assert_eq!(
        reply_text(&mut c),
        format!("-ERR orthrus: MONITOR of {} ended\r\n", node.addr)
    );
}

#[test]
fn a_malformed_frame_on_a_subscription_subscribes_again() {
    let node = FakeNode::start();
    let proxy = Proxy::start(&[node.addr], &[]);
    let mut c = client(&proxy);
    let confirmed = "*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n";
    assert_eq!(send(&mut c, &["SUBSCRIBE", "ch"]), confirmed);
    // The link is lost at the bad frame and the channel subscribed again
    // on a new connection: the client sees that confirmation too.
    assert_eq!(reply_text(&mut c), confirmed);
    assert!(node.subscribes.load(Ordering::SeqCst) >= 2);
}
