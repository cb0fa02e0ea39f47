//! Passwords: clients authenticating to orthrus (default user and named
//! users, AUTH and HELLO AUTH), and orthrus authenticating to a cluster
//! whose nodes require a password. Passwords never reach the log.

mod common;

use common::{Proxy, send};
use orthrus_devcluster::{Cluster, ClusterSpec, NodeOptions};

#[test]
fn client_and_backend_passwords() {
    let spec =
        ClusterSpec::new(3, 0).with_node(NodeOptions::cluster().with_password("node-secret-7"));
    let cluster = Cluster::start(spec).unwrap();
    let proxy = Proxy::spawn(
        &cluster.seeds(),
        &["--requirepass", "client-secret-3"],
        &[
            ("ORTHRUS_BACKEND__PASSWORD", "node-secret-7"),
            ("ORTHRUS_CLIENT__USERS__ALICE", "alice-pw-5"),
        ],
    );
    let mut s = proxy.stream();
    assert_eq!(
        send(&mut s, &["GET", "k"]),
        "-NOAUTH Authentication required.\r\n"
    );
    assert_eq!(
        send(&mut s, &["PING"]),
        "-NOAUTH Authentication required.\r\n"
    );
    let hello = send(&mut s, &["HELLO", "3"]);
    assert!(
        hello.starts_with("-NOAUTH HELLO must be called with the client already authenticated"),
        "{hello}"
    );
    assert_eq!(
        send(&mut s, &["AUTH", "wrong"]),
        "-WRONGPASS invalid username-password pair or user is disabled.\r\n"
    );
    // orthrus reaches the password-protected cluster (wait for discovery).
    proxy.log_in(&mut s, &["client-secret-3"], &["SET", "k", "v"]);
    assert_eq!(send(&mut s, &["GET", "k"]), "$1\r\nv\r\n");
    // Dedicated connections authenticate too.
    assert_eq!(send(&mut s, &["BLPOP", "empty", "0.2"]), "*-1\r\n");
    assert_eq!(
        send(&mut s, &["SUBSCRIBE", "c"]),
        "*3\r\n$9\r\nsubscribe\r\n$1\r\nc\r\n:1\r\n"
    );

    // Named users, and HELLO AUTH.
    let mut a = proxy.stream();
    assert_eq!(
        send(&mut a, &["AUTH", "alice", "nope"]),
        "-WRONGPASS invalid username-password pair or user is disabled.\r\n"
    );
    assert_eq!(send(&mut a, &["AUTH", "alice", "alice-pw-5"]), "+OK\r\n");
    assert_eq!(send(&mut a, &["GET", "k"]), "$1\r\nv\r\n");
    let mut h = proxy.stream();
    let hello = send(
        &mut h,
        &["HELLO", "3", "AUTH", "default", "client-secret-3"],
    );
    assert!(hello.starts_with("%7\r\n"), "{hello}");
    assert_eq!(send(&mut h, &["GET", "k"]), "$1\r\nv\r\n");
    assert_eq!(send(&mut h, &["RESET"]), "+RESET\r\n");
    assert_eq!(
        send(&mut h, &["GET", "k"]),
        "-NOAUTH Authentication required.\r\n"
    );

    // A real client library with a password.
    let client = redis::Client::open(format!("redis://:client-secret-3@{}/", proxy.addr)).unwrap();
    let mut con = client.get_connection().unwrap();
    let v: String = redis::cmd("GET").arg("k").query(&mut con).unwrap();
    assert_eq!(v, "v");

    let log = proxy.log_text();
    for secret in ["node-secret-7", "client-secret-3", "alice-pw-5"] {
        assert!(!log.contains(secret), "a password reached the log");
    }
}
