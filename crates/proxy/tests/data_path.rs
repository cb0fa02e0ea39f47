//! The data path against a real 3-master cluster: every key lands on the
//! master that owns it, pipelines keep their order, concurrent clients get
//! their own replies.

mod common;

use std::io::Write;
use std::time::Duration;

use common::{Proxy, cluster, encode, frame_len, owner_of};
use redis::Commands;

#[test]
fn keys_pipelines_and_concurrent_clients() {
    let cluster = cluster(3, 0);
    let proxy = Proxy::start(&cluster.seeds(), &["--threads", "2"]);

    ten_thousand_keys_land_on_their_owners(&cluster, &proxy);
    mixed_pipeline_replies_in_order(&proxy);
    hundred_clients_get_their_own_replies(&proxy);
}

fn ten_thousand_keys_land_on_their_owners(cluster: &orthrus_devcluster::Cluster, proxy: &Proxy) {
    let mut con = proxy.client();
    let keys: Vec<String> = (0..10_000).map(|i| format!("key:{i}")).collect();
    for chunk in keys.chunks(500) {
        let mut pipe = redis::pipe();
        for k in chunk {
            pipe.set(k, format!("value-of-{k}")).ignore();
        }
        pipe.query::<()>(&mut con).expect("SET pipeline");
    }
    for chunk in keys.chunks(500) {
        let mut pipe = redis::pipe();
        for k in chunk {
            pipe.get(k);
        }
        let values: Vec<String> = pipe.query(&mut con).expect("GET pipeline");
        for (k, v) in chunk.iter().zip(values) {
            assert_eq!(v, format!("value-of-{k}"));
        }
    }
    // The same keys, read straight from the node that owns each slot.
    let mut by_owner: std::collections::HashMap<usize, Vec<&String>> = Default::default();
    for k in &keys {
        by_owner
            .entry(owner_of(cluster, k.as_bytes()))
            .or_default()
            .push(k);
    }
    assert_eq!(by_owner.len(), 3, "keys must spread over every master");
    for (node, keys) in by_owner {
        let mut direct = cluster.nodes()[node].connect().expect("direct");
        for k in keys {
            let v = direct.cmd_ok(&["GET", k.as_str()]).expect("direct GET");
            assert_eq!(
                v.as_bytes(),
                Some(format!("value-of-{k}").as_bytes()),
                "{k} on node {node}"
            );
        }
    }
}

fn mixed_pipeline_replies_in_order(proxy: &Proxy) {
    let mut stream = proxy.stream();
    let mut out = Vec::new();
    let mut expected: Vec<Vec<u8>> = Vec::new();
    let mut i = 0;
    while expected.len() < 10_000 {
        let s = format!("pipe:s:{i}");
        let c = format!("pipe:c:{i}");
        let l = format!("pipe:l:{i}");
        let h = format!("pipe:h:{i}");
        let v = format!("v{i}");
        let cases = [
            (vec!["SET", &s, &v], b"+OK\r\n".to_vec()),
            (
                vec!["GET", &s],
                format!("${}\r\n{v}\r\n", v.len()).into_bytes(),
            ),
            (vec!["INCR", &c], b":1\r\n".to_vec()),
            (vec!["LPUSH", &l, "a", "b"], b":2\r\n".to_vec()),
            (
                vec!["LRANGE", &l, "0", "-1"],
                b"*2\r\n$1\r\nb\r\n$1\r\na\r\n".to_vec(),
            ),
            (vec!["HSET", &h, "f1", "1", "f2", "2"], b":2\r\n".to_vec()),
            (
                vec!["HGETALL", &h],
                b"*4\r\n$2\r\nf1\r\n$1\r\n1\r\n$2\r\nf2\r\n$1\r\n2\r\n".to_vec(),
            ),
        ];
        for (args, reply) in cases {
            if expected.len() == 10_000 {
                break;
            }
            out.extend(encode(&args));
            expected.push(reply);
        }
        i += 1;
    }
    let writer_stream = stream.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        let mut w = writer_stream;
        w.write_all(&out).unwrap();
    });
    let replies = read_frames(&mut stream, expected.len());
    writer.join().unwrap();
    for (i, (got, want)) in replies.iter().zip(&expected).enumerate() {
        assert_eq!(
            String::from_utf8_lossy(got),
            String::from_utf8_lossy(want),
            "reply {i} out of order or wrong"
        );
    }
}

fn hundred_clients_get_their_own_replies(proxy: &Proxy) {
    let threads: Vec<_> = (0..100)
        .map(|t| {
            let url = proxy.url();
            std::thread::spawn(move || {
                let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
                con.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                for i in 0..500 {
                    let key = format!("client:{t}:{i}");
                    let value = format!("{t}-{i}");
                    let _: () = con.set(&key, &value).unwrap();
                    let got: String = con.get(&key).unwrap();
                    assert_eq!(got, value, "client {t} got another client's reply");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("client thread");
    }
}

/// Reads `n` complete reply frames.
fn read_frames(stream: &mut std::net::TcpStream, n: usize) -> Vec<Vec<u8>> {
    use std::io::Read;
    let mut buf = Vec::new();
    let mut frames = Vec::with_capacity(n);
    let mut at = 0;
    let mut chunk = vec![0u8; 64 * 1024];
    while frames.len() < n {
        while let Some(len) = frame_len(&buf, at) {
            frames.push(buf[at..at + len].to_vec());
            at += len;
            if frames.len() == n {
                break;
            }
        }
        if frames.len() == n {
            break;
        }
        let got = stream.read(&mut chunk).expect("read replies");
        assert!(
            got > 0,
            "orthrus closed the connection after {} replies",
            frames.len()
        );
        buf.extend_from_slice(&chunk[..got]);
    }
    frames
}

/// A node's reply is trusted framing: a Lua table nested 1,000 deep (far
/// deeper than a client request may be) reaches the client whole, and the
/// shared node connection, with other clients' requests on it, stays up.
#[test]
fn a_deeply_nested_reply_passes_and_the_shared_connection_survives() {
    let cluster = cluster(3, 0);
    let proxy = Proxy::start(&cluster.seeds(), &["--threads", "1"]);
    let script =
        "local t = {} local c = t for i = 1, 1000 do c[1] = {} c = c[1] end c[1] = 7 return t";
    let mut expected = b"*1\r\n".repeat(1001);
    expected.extend_from_slice(b":7\r\n");

    let mut other = proxy.stream();
    assert_eq!(common::send(&mut other, &["SET", "deep:k", "v"]), "+OK\r\n");
    let mut caller = proxy.stream();
    // The key routes the script to the same master as `deep:k`.
    caller
        .write_all(&encode(&["EVAL", script, "1", "deep:k"]))
        .expect("send");
    other.write_all(&encode(&["GET", "deep:k"])).expect("send");
    assert_eq!(
        common::read_reply(&mut caller).expect("deep reply"),
        expected
    );
    assert_eq!(common::reply_text(&mut other), "$1\r\nv\r\n");
    assert_eq!(common::send(&mut caller, &["GET", "deep:k"]), "$1\r\nv\r\n");
    assert_eq!(proxy.info_field("orthrus_backend_errors"), 0);
}

/// A RESP3 big number that is not digits (a Lua `big_number` with CR/LF in
/// it, which Redis sends as `(123  123`) is passed on as the node framed it,
/// and the shared RESP3 connection stays up for the other clients on it.
#[test]
fn a_big_number_that_is_not_digits_passes() {
    let cluster = cluster(1, 0);
    let proxy = Proxy::start(&cluster.seeds(), &["--threads", "1"]);
    let mut caller = proxy.stream();
    let mut other = proxy.stream();
    for s in [&mut caller, &mut other] {
        let hello = common::send(s, &["HELLO", "3"]);
        assert!(hello.starts_with('%'), "{hello}");
    }
    caller
        .write_all(&encode(&[
            "EVAL",
            "return {big_number='123\\r\\n123'}",
            "0",
        ]))
        .expect("send");
    other
        .write_all(&encode(&["SET", "big:k", "v"]))
        .expect("send");
    assert_eq!(common::reply_text(&mut caller), "(123  123\r\n");
    assert_eq!(common::reply_text(&mut other), "+OK\r\n");
    assert_eq!(proxy.info_field("orthrus_backend_errors"), 0);
}

/// A client sending one GET at a time costs two task polls per request:
/// its session reads the request and writes it straight to the idle node
/// connection, and the connection's task reads the reply and writes it to
/// the client. Counted by INFO's `orthrus_task_polls` over 2,000 requests
/// (the INFO calls and the worker's background tasks are in the count too).
#[test]
fn one_client_costs_two_task_polls_per_request() {
    let cluster = cluster(3, 0);
    let proxy = Proxy::start(&cluster.seeds(), &["--threads", "1"]);
    let mut con = proxy.client();
    let _: Option<String> = con.get("polls:warm").expect("GET");
    let polls = proxy.info_field("orthrus_task_polls");
    let commands = proxy.info_field("total_commands_processed");
    for i in 0..2_000 {
        let _: Option<String> = con.get(format!("polls:{i}")).expect("GET");
    }
    let polls = proxy.info_field("orthrus_task_polls") - polls;
    let commands = proxy.info_field("total_commands_processed") - commands;
    let per_request = polls as f64 / commands as f64;
    assert!(
        (1.9..=2.2).contains(&per_request),
        "{polls} polls for {commands} commands: {per_request:.3} per request"
    );
}

/// A reply larger than the client's socket takes at once: the node
/// connection writes what the socket takes and leaves the rest to the
/// session, which writes it in order, and the request is counted once.
#[test]
fn a_reply_the_socket_takes_in_part_is_finished_by_the_session() {
    let cluster = cluster(3, 0);
    let proxy = Proxy::start(&cluster.seeds(), &["--threads", "1"]);
    let value: Vec<u8> = (0..16 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    let mut con = proxy.client();
    let _: () = redis::cmd("SET")
        .arg("direct:big")
        .arg(&value)
        .query(&mut con)
        .expect("SET");
    let calls = |proxy: &Proxy| {
        let mut con = proxy.client();
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut con)
            .expect("INFO");
        let line = info.lines().find(|l| l.starts_with("cmdstat_get:"));
        line.and_then(|l| l.split(['=', ',']).nth(1)?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let before = calls(&proxy);
    let mut s = proxy.stream();
    for round in 0..3 {
        // One GET at a time; the reply read only after a pause, so that
        // the socket is full when the reply arrives.
        s.write_all(&encode(&["GET", "direct:big"])).expect("send");
        std::thread::sleep(Duration::from_millis(200));
        let reply = common::read_reply(&mut s).expect("reply");
        let header = format!("${}\r\n", value.len());
        assert!(reply.starts_with(header.as_bytes()), "round {round}");
        assert_eq!(
            &reply[header.len()..reply.len() - 2],
            &value[..],
            "round {round}"
        );
        // A small one after it, on the same connection, still in order.
        s.write_all(&encode(&["PING", "after"])).expect("send");
        let pong = common::read_reply(&mut s).expect("reply");
        assert_eq!(pong, b"$5\r\nafter\r\n");
    }
    assert_eq!(calls(&proxy) - before, 3, "each GET counted once");
}
