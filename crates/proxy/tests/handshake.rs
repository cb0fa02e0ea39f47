//! What clients see before and around their data commands: the connect
//! handshake (HELLO 2/3, CLIENT, SELECT, INFO), RESP3 next to RESP2,
//! refusals and protocol errors.

mod common;

use std::io::{Read, Write};

use common::{Proxy, cluster, read_reply, send};

#[test]
fn handshake_protocols_and_refusals() {
    let cluster = cluster(3, 0);
    let proxy = Proxy::start(&cluster.seeds(), &[]);

    resp3_and_resp2_side_by_side(&proxy);
    hello_and_client_commands(&proxy);
    unknown_and_refused_commands_keep_the_connection(&proxy);
    protocol_errors_close_the_connection(&proxy);
    redis_crate_resp3_client(&proxy);
}

fn resp3_and_resp2_side_by_side(proxy: &Proxy) {
    let mut v3 = proxy.stream();
    let mut v2 = proxy.stream();
    let hello = send(&mut v3, &["HELLO", "3"]);
    assert!(
        hello.starts_with("%7\r\n"),
        "HELLO 3 must reply with a map: {hello}"
    );
    assert!(hello.contains("proto\r\n:3\r\n"), "{hello}");
    // The nodes' engine, as they name it.
    let engine = match orthrus_devcluster::server_kind().engine {
        orthrus_devcluster::Engine::Redis => "server\r\n$5\r\nredis\r\n",
        orthrus_devcluster::Engine::Valkey => "server\r\n$6\r\nvalkey\r\n",
    };
    assert!(hello.contains(engine), "{hello}");

    send(&mut v2, &["DEL", "h3", "z3"]);
    assert_eq!(send(&mut v2, &["HSET", "h3", "a", "1"]), ":1\r\n");
    assert_eq!(send(&mut v2, &["ZADD", "z3", "1.5", "m"]), ":1\r\n");

    // The same commands, at the same time, in both protocols.
    assert_eq!(
        send(&mut v3, &["HGETALL", "h3"]),
        "%1\r\n$1\r\na\r\n$1\r\n1\r\n"
    );
    assert_eq!(
        send(&mut v2, &["HGETALL", "h3"]),
        "*2\r\n$1\r\na\r\n$1\r\n1\r\n"
    );
    assert_eq!(send(&mut v3, &["ZSCORE", "z3", "m"]), ",1.5\r\n");
    assert_eq!(send(&mut v2, &["ZSCORE", "z3", "m"]), "$3\r\n1.5\r\n");
    assert_eq!(send(&mut v3, &["GET", "missing-key"]), "_\r\n");
    assert_eq!(send(&mut v2, &["GET", "missing-key"]), "$-1\r\n");

    // Back to RESP2 on the same connection.
    let hello2 = send(&mut v3, &["HELLO", "2"]);
    assert!(hello2.starts_with("*14\r\n"), "{hello2}");
    assert_eq!(
        send(&mut v3, &["HGETALL", "h3"]),
        "*2\r\n$1\r\na\r\n$1\r\n1\r\n"
    );
}

fn hello_and_client_commands(proxy: &Proxy) {
    let mut s = proxy.stream();
    assert_eq!(
        send(&mut s, &["HELLO", "4"]),
        "-NOPROTO unsupported protocol version\r\n"
    );
    let hello = send(
        &mut s,
        &["HELLO", "3", "AUTH", "default", "any", "SETNAME", "app1"],
    );
    assert!(hello.starts_with('%'), "{hello}");
    assert_eq!(send(&mut s, &["CLIENT", "GETNAME"]), "$4\r\napp1\r\n");
    assert_eq!(send(&mut s, &["CLIENT", "SETNAME", "my-name"]), "+OK\r\n");
    assert_eq!(send(&mut s, &["CLIENT", "GETNAME"]), "$7\r\nmy-name\r\n");
    assert!(
        send(&mut s, &["CLIENT", "SETNAME", "bad name"])
            .starts_with("-ERR Client names cannot contain spaces")
    );
    assert_eq!(
        send(&mut s, &["CLIENT", "SETINFO", "LIB-NAME", "redis-py"]),
        "+OK\r\n"
    );
    assert_eq!(
        send(&mut s, &["CLIENT", "SETINFO", "LIB-VER", "8.0.0"]),
        "+OK\r\n"
    );
    assert!(send(&mut s, &["CLIENT", "ID"]).starts_with(':'));
    let info = send(&mut s, &["CLIENT", "INFO"]);
    assert!(
        info.contains("name=my-name")
            && info.contains("lib-name=redis-py")
            && info.contains("resp=3"),
        "{info}"
    );
    assert_eq!(send(&mut s, &["PING"]), "+PONG\r\n");
    assert_eq!(send(&mut s, &["PING", "hi"]), "$2\r\nhi\r\n");
    assert_eq!(send(&mut s, &["ECHO", "x y"]), "$3\r\nx y\r\n");
    assert_eq!(send(&mut s, &["SELECT", "0"]), "+OK\r\n");
    // The nodes' own words: Redis 7 refuses SELECT in cluster mode,
    // Valkey 9 serves one database unless told `cluster-databases`.
    let refused = match orthrus_devcluster::server_kind().engine {
        orthrus_devcluster::Engine::Valkey => "-ERR DB index is out of range\r\n",
        _ => "-ERR SELECT is not allowed in cluster mode\r\n",
    };
    assert_eq!(send(&mut s, &["SELECT", "1"]), refused);
    assert_eq!(
        send(&mut s, &["SELECT", "x"]),
        "-ERR value is not an integer or out of range\r\n"
    );
    assert_eq!(send(&mut s, &["READONLY"]), "+OK\r\n");
    let info = send(&mut s, &["INFO"]);
    assert!(
        info.starts_with('='),
        "INFO is a verbatim string in RESP3: {info}"
    );
    for field in [
        "redis_version:",
        "connected_clients:",
        "loading:0",
        "# Server",
        "# Clients",
    ] {
        assert!(info.contains(field), "INFO lacks {field}: {info}");
    }
    assert_eq!(send(&mut s, &["RESET"]), "+RESET\r\n");
    assert_eq!(send(&mut s, &["CLIENT", "GETNAME"]), "$-1\r\n");
    let info2 = send(&mut s, &["INFO", "server"]);
    assert!(
        info2.starts_with('$') && info2.contains("# Server") && !info2.contains("# Clients"),
        "{info2}"
    );
    assert_eq!(
        send(&mut s, &["AUTH", "pw"]),
        "-ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?\r\n"
    );
    assert_eq!(send(&mut s, &["QUIT"]), "+OK\r\n");
    let mut rest = Vec::new();
    assert_eq!(
        s.read_to_end(&mut rest).unwrap(),
        0,
        "QUIT closes the connection"
    );
}

fn unknown_and_refused_commands_keep_the_connection(proxy: &Proxy) {
    let mut s = proxy.stream();
    assert_eq!(
        send(&mut s, &["NOSUCHCMD", "a", "b"]),
        "-ERR unknown command 'NOSUCHCMD', with args beginning with: 'a' 'b' \r\n"
    );
    assert_eq!(
        send(&mut s, &["GET"]),
        "-ERR wrong number of arguments for 'get' command\r\n"
    );
    assert_eq!(
        send(&mut s, &["MSETNX", "a", "1", "b", "2"]),
        "-CROSSSLOT Keys in request don't hash to the same slot\r\n"
    );
    assert_eq!(send(&mut s, &["MSET", "{t}a", "1", "{t}b", "2"]), "+OK\r\n");
    let wait = send(&mut s, &["WAIT", "1", "0"]);
    assert!(
        wait.starts_with("-ERR orthrus: WAIT is not supported"),
        "{wait}"
    );
    let monitor = send(&mut s, &["MONITOR"]);
    assert!(
        monitor.starts_with("-ERR orthrus: MONITOR is not supported"),
        "{monitor}"
    );
    assert_eq!(
        send(&mut s, &["XREAD", "COUNT", "1", "STREAMS", "nostream", "0"]),
        "*-1\r\n"
    );
    let cfg = send(&mut s, &["CONFIG", "SET", "maxmemory", "1"]);
    assert!(
        cfg.starts_with("-ERR orthrus: CONFIG SET is not supported"),
        "{cfg}"
    );
    // Key-less commands that mean the same everywhere go to any node.
    assert!(send(&mut s, &["TIME"]).starts_with("*2\r\n"));
    assert!(send(&mut s, &["COMMAND", "COUNT"]).starts_with(':'));
    assert!(send(&mut s, &["PUBLISH", "chan", "msg"]).starts_with(':'));
    // Scripts route by their keys.
    assert_eq!(
        send(
            &mut s,
            &[
                "EVAL",
                "return redis.call('SET', KEYS[1], ARGV[1])",
                "1",
                "sk",
                "sv"
            ]
        ),
        "+OK\r\n"
    );
    assert_eq!(send(&mut s, &["GET", "sk"]), "$2\r\nsv\r\n");
    assert_eq!(send(&mut s, &["EVAL", "return 7", "0"]), ":7\r\n");
    assert_eq!(send(&mut s, &["PING"]), "+PONG\r\n");
}

fn protocol_errors_close_the_connection(proxy: &Proxy) {
    for (input, error) in [
        (
            &b"*abc\r\n"[..],
            "-ERR Protocol error: invalid multibulk length\r\n",
        ),
        (
            b"*1\r\n$-5\r\n",
            "-ERR Protocol error: invalid bulk length\r\n",
        ),
        (
            b"*1\r\nfoo\r\n",
            "-ERR Protocol error: expected '$', got 'f'\r\n",
        ),
        (
            b"SET \"unbalanced\r\n",
            "-ERR Protocol error: unbalanced quotes in request\r\n",
        ),
    ] {
        let mut s = proxy.stream();
        // A request before the bad one is still answered, in order.
        s.write_all(b"PING\r\n").unwrap();
        s.write_all(input).unwrap();
        let mut out = Vec::new();
        s.read_to_end(&mut out).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out),
            format!("+PONG\r\n{error}"),
            "input {input:?}"
        );
    }
    // Inline commands, as telnet sends them.
    let mut s = proxy.stream();
    s.write_all(b"SET inline \"a b\"\r\nGET inline\r\n")
        .unwrap();
    assert_eq!(read_reply(&mut s).unwrap(), b"+OK\r\n");
    assert_eq!(read_reply(&mut s).unwrap(), b"$3\r\na b\r\n");
}

fn redis_crate_resp3_client(proxy: &Proxy) {
    use redis::Commands;
    let client = redis::Client::open(format!("redis://{}/?protocol=resp3", proxy.addr)).unwrap();
    let mut con = client.get_connection().expect("RESP3 client connects");
    let _: () = con.hset("r3hash", "f", "v").unwrap();
    let map: std::collections::HashMap<String, String> = con.hgetall("r3hash").unwrap();
    assert_eq!(map.get("f").map(String::as_str), Some("v"));
    let raw: redis::Value = redis::cmd("HGETALL").arg("r3hash").query(&mut con).unwrap();
    assert!(
        matches!(raw, redis::Value::Map(_)),
        "RESP3 map expected, got {raw:?}"
    );
    let _: () = con.zadd("r3z", "m", 2.5).unwrap();
    let score: redis::Value = redis::cmd("ZSCORE")
        .arg("r3z")
        .arg("m")
        .query(&mut con)
        .unwrap();
    assert_eq!(score, redis::Value::Double(2.5));
}
