//! One plain redis-server: start, talk, pause, restart, kill, drop.

mod support;

use std::time::Duration;

use bytes::Bytes;
use orthrus_devcluster::{Conn, DevError, NodeOptions, RedisBin, RedisNode, Value, free_port};
use support::{redis_alive, text};

#[test]
fn set_get_kill_and_drop() {
    let mut node = RedisNode::start(NodeOptions::default()).unwrap();
    let pid = node.pid().unwrap();
    assert!(redis_alive(pid));
    assert!(node.is_running());

    let mut conn = Conn::connect(node.addr()).unwrap();
    assert_eq!(text(&conn.cmd(&["SET", "foo", "bar"]).unwrap()), "OK");
    assert_eq!(
        conn.cmd(&["GET", "foo"]).unwrap(),
        Value::Bulk(Bytes::from_static(b"bar"))
    );
    assert_eq!(conn.cmd(&["GET", "missing"]).unwrap(), Value::Null);

    node.kill();
    assert_eq!(node.pid(), None);
    assert!(!node.is_running());
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "pid {pid} still exists after kill"
    );

    let other = RedisNode::start(NodeOptions::default()).unwrap();
    let other_pid = other.pid().unwrap();
    let dir = other.dir().to_owned();
    assert!(dir.join("redis.conf").exists());
    drop(other);
    assert!(!redis_alive(other_pid), "pid {other_pid} survived drop");
    assert!(!dir.exists(), "temp dir survived drop");
}

#[test]
fn errors_pipelines_and_raw_bytes() {
    let node = RedisNode::start(NodeOptions::default()).unwrap();
    let mut conn = node.connect().unwrap();

    let reply = conn.cmd(&["NOSUCHCOMMAND"]).unwrap();
    assert!(matches!(reply, Value::Error(_)), "{reply:?}");
    match conn.cmd_ok(&["NOSUCHCOMMAND", "x"]) {
        Err(DevError::Server { cmd, reply }) => {
            assert_eq!(cmd, "NOSUCHCOMMAND x");
            assert!(reply.starts_with("ERR unknown command"), "{reply}");
        }
        other => panic!("expected a server error, got {other:?}"),
    }

    let cmds: Vec<Vec<Vec<u8>>> = vec![
        vec![b"SET".to_vec(), b"n".to_vec(), b"41".to_vec()],
        vec![b"INCR".to_vec(), b"n".to_vec()],
        vec![b"LPUSH".to_vec(), b"n".to_vec(), b"x".to_vec()],
        vec![b"GET".to_vec(), b"n".to_vec()],
    ];
    let replies = conn.pipeline(&cmds).unwrap();
    assert_eq!(replies.len(), 4);
    assert_eq!(replies[1], Value::Integer(42));
    assert!(matches!(&replies[2], Value::Error(e) if e.starts_with(b"WRONGTYPE")));
    assert_eq!(replies[3], Value::Bulk(Bytes::from_static(b"42")));

    // An inline command, then a multibulk split across two writes.
    conn.send_raw(b"PING\r\n").unwrap();
    assert_eq!(text(&conn.read_value().unwrap()), "PONG");
    conn.send_raw(b"*2\r\n$4\r\nECHO\r\n$2\r").unwrap();
    conn.send_raw(b"\nhi\r\n").unwrap();
    assert_eq!(text(&conn.read_value().unwrap()), "hi");

    // A value larger than one read.
    let big = vec![b'v'; 300_000];
    assert_eq!(text(&node.cmd(&[&b"SET"[..], b"big", &big]).unwrap()), "OK");
    match node.cmd(&["GET", "big"]).unwrap() {
        Value::Bulk(b) => assert_eq!(b.len(), big.len()),
        other => panic!("{other:?}"),
    }
}

#[test]
fn password_pause_resume_restart() {
    let port = free_port().unwrap();
    let mut node = RedisNode::start(NodeOptions {
        port: Some(port),
        ..NodeOptions::default().with_password("s3cret")
    })
    .unwrap();
    assert_eq!(node.port(), port);
    assert_eq!(node.addr().to_string(), format!("127.0.0.1:{port}"));

    // devcluster's own connections authenticate; a bare one does not.
    assert_eq!(text(&node.cmd(&["SET", "k", "v"]).unwrap()), "OK");
    let mut bare = Conn::connect(node.addr()).unwrap();
    assert!(text(&bare.cmd(&["GET", "k"]).unwrap()).starts_with("NOAUTH"));

    node.pause().unwrap();
    assert!(node.is_paused());
    // The kernel still accepts connections, but nobody answers.
    let slow = Conn::connect_timeout(node.addr(), Duration::from_millis(300))
        .and_then(|mut conn| conn.cmd(&["PING"]));
    assert!(matches!(slow, Err(DevError::Timeout { .. })), "{slow:?}");
    node.resume().unwrap();
    assert_eq!(text(&node.cmd(&["PING"]).unwrap()), "PONG");

    let old_pid = node.pid().unwrap();
    node.restart().unwrap();
    assert_ne!(node.pid(), Some(old_pid));
    assert!(!redis_alive(old_pid));
    assert_eq!(node.port(), port);
    // Persistence is off: the restarted server is empty.
    assert_eq!(node.cmd(&["GET", "k"]).unwrap(), Value::Null);
}

#[test]
fn bad_config_fails_with_the_log_tail() {
    let err =
        RedisNode::start(NodeOptions::default().with_config("no-such-directive", "1")).unwrap_err();
    match &err {
        DevError::StartFailed { log_tail, .. } => {
            assert!(log_tail.contains("no-such-directive"), "{err}");
        }
        other => panic!("expected StartFailed, got {other}"),
    }
}

/// A port another test's password-protected server holds (the race
/// between picking a free port and binding it): its NOAUTH is not taken
/// for our server being up.
#[test]
fn a_password_protected_stranger_on_the_port_is_not_taken_for_ours() {
    let stranger = RedisNode::start(NodeOptions::default().with_password("pw")).unwrap();
    let opts = NodeOptions {
        port: Some(stranger.port()),
        ..NodeOptions::default()
    };
    let err = RedisNode::start(opts).unwrap_err();
    match &err {
        DevError::StartFailed { log_tail, .. } => {
            assert!(log_tail.contains("Address already in use"), "{err}");
        }
        other => panic!("expected StartFailed, got {other}"),
    }
}

#[test]
fn locates_the_binaries() {
    let bin = RedisBin::locate().unwrap();
    assert!(bin.server.ends_with("redis-server") || std::env::var_os("REDIS_SERVER").is_some());
    let version = bin.version().unwrap();
    let major: u32 = version.split('.').next().unwrap().parse().unwrap();
    assert!(
        major >= 7,
        "redis {version} is too old for CLUSTER ADDSLOTSRANGE"
    );
}
