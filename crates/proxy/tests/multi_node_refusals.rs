//! Queue-time refusals only the node can give, inside a MULTI that orthrus
//! queues: `-OOM` (every command, `maxmemory` reached), `-NOREPLICAS`
//! (writes, `min-replicas-to-write` not met) and `-MISCONF` (writes, the
//! last background save failed) come back when the command is queued, as
//! from one redis-server, and EXEC then answers `-EXECABORT` with nothing
//! run.

mod common;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use common::{Proxy, cluster, encode, owner_of, reply_text, send};

const EXECABORT: &str = "-EXECABORT Transaction discarded because of previous errors.\r\n";

/// Sends every command in one write, then reads as many replies.
fn pipeline(s: &mut (impl Read + Write), cmds: &[&[&str]]) -> Vec<String> {
    let bytes: Vec<u8> = cmds.iter().flat_map(|c| encode(c)).collect();
    s.write_all(&bytes).expect("send");
    cmds.iter().map(|_| reply_text(s)).collect()
}

#[test]
fn oom_refuses_every_command_queued_in_multi() {
    let cluster = cluster(3, 0);
    let proxy = Proxy::start(&cluster.seeds(), &[]);
    let mut s = proxy.stream();
    let node = &cluster.nodes()[owner_of(&cluster, b"{oom}k")];
    assert_eq!(send(&mut s, &["SET", "{oom}k", "old"]), "+OK\r\n");
    node.cmd_ok(&["CONFIG", "SET", "maxmemory-policy", "noeviction"])
        .expect("policy");
    node.cmd_ok(&["CONFIG", "SET", "maxmemory", "1"])
        .expect("maxmemory 1");

    // Redis's `DISCARD should not fail during OOM`.
    assert_eq!(send(&mut s, &["MULTI"]), "+OK\r\n");
    let set = send(&mut s, &["SET", "{oom}k", "new"]);
    assert!(set.starts_with("-OOM "), "SET queued during OOM: {set}");
    assert_eq!(send(&mut s, &["DISCARD"]), "+OK\r\n");
    assert_eq!(send(&mut s, &["PING"]), "+PONG\r\n");

    // Reads too (Redis refuses any command queued while out of memory);
    // EXEC then aborts and nothing ran.
    assert_eq!(send(&mut s, &["MULTI"]), "+OK\r\n");
    let set = send(&mut s, &["SET", "{oom}k", "new"]);
    assert!(set.starts_with("-OOM "), "{set}");
    let get = send(&mut s, &["GET", "{oom}k"]);
    assert!(get.starts_with("-OOM "), "GET queued during OOM: {get}");
    assert_eq!(send(&mut s, &["EXEC"]), EXECABORT);

    // Pipelined, the probes go out together and EXEC waits for them.
    let replies = pipeline(
        &mut s,
        &[
            &["MULTI"],
            &["SET", "{oom}k", "new"],
            &["INCR", "{oom}n"],
            &["EXEC"],
        ],
    );
    assert_eq!(replies[0], "+OK\r\n");
    assert!(replies[1].starts_with("-OOM "), "{replies:?}");
    assert!(replies[2].starts_with("-OOM "), "{replies:?}");
    assert_eq!(replies[3], EXECABORT);

    // A command with no key before the first keyed one: no node to ask
    // yet, so it is queued; the keyed one after it is refused.
    assert_eq!(send(&mut s, &["MULTI"]), "+OK\r\n");
    assert_eq!(send(&mut s, &["PING"]), "+QUEUED\r\n");
    assert!(send(&mut s, &["SET", "{oom}k", "new"]).starts_with("-OOM "));
    assert_eq!(send(&mut s, &["EXEC"]), EXECABORT);

    node.cmd_ok(&["CONFIG", "SET", "maxmemory", "0"])
        .expect("maxmemory 0");
    assert_eq!(
        send(&mut s, &["GET", "{oom}k"]),
        "$3\r\nold\r\n",
        "nothing was written"
    );
    assert_eq!(send(&mut s, &["EXISTS", "{oom}n"]), ":0\r\n");

    // With memory again, the same transaction runs.
    assert_eq!(send(&mut s, &["MULTI"]), "+OK\r\n");
    assert_eq!(send(&mut s, &["PING"]), "+QUEUED\r\n");
    assert_eq!(send(&mut s, &["SET", "{oom}k", "new"]), "+QUEUED\r\n");
    assert_eq!(send(&mut s, &["GET", "{oom}k"]), "+QUEUED\r\n");
    assert_eq!(
        send(&mut s, &["EXEC"]),
        "*3\r\n+PONG\r\n+OK\r\n$3\r\nnew\r\n"
    );
}

#[test]
fn oom_reached_while_queueing_aborts_the_transaction() {
    // Redis's `EXEC fails if there are errors while queueing commands #2`.
    let cluster = cluster(3, 0);
    let proxy = Proxy::start(&cluster.seeds(), &[]);
    let mut s = proxy.stream();
    let node = &cluster.nodes()[owner_of(&cluster, b"{t}")];
    assert_eq!(send(&mut s, &["MULTI"]), "+OK\r\n");
    assert_eq!(send(&mut s, &["SET", "foo1{t}", "bar1"]), "+QUEUED\r\n");
    node.cmd_ok(&["CONFIG", "SET", "maxmemory", "1"])
        .expect("maxmemory 1");
    let lpush = send(&mut s, &["LPUSH", "mylist{t}", "v"]);
    assert!(lpush.starts_with("-OOM "), "{lpush}");
    node.cmd_ok(&["CONFIG", "SET", "maxmemory", "0"])
        .expect("maxmemory 0");
    assert_eq!(send(&mut s, &["SET", "foo2{t}", "bar2"]), "+QUEUED\r\n");
    assert_eq!(send(&mut s, &["EXEC"]), EXECABORT);
    assert_eq!(
        send(&mut s, &["EXISTS", "foo1{t}", "foo2{t}", "mylist{t}"]),
        ":0\r\n"
    );
}

#[test]
fn noreplicas_refuses_writes_queued_in_multi() {
    let cluster = cluster(3, 0);
    let proxy = Proxy::start(&cluster.seeds(), &[]);
    let mut s = proxy.stream();
    let node = &cluster.nodes()[owner_of(&cluster, b"{nr}k")];
    assert_eq!(send(&mut s, &["SET", "{nr}k", "old"]), "+OK\r\n");
    node.cmd_ok(&["CONFIG", "SET", "min-replicas-to-write", "1"])
        .expect("min-replicas-to-write");

    assert_eq!(send(&mut s, &["MULTI"]), "+OK\r\n");
    assert_eq!(
        send(&mut s, &["GET", "{nr}k"]),
        "+QUEUED\r\n",
        "reads are queued"
    );
    let set = send(&mut s, &["SET", "{nr}k", "new"]);
    assert!(set.starts_with("-NOREPLICAS "), "SET queued: {set}");
    assert_eq!(send(&mut s, &["EXEC"]), EXECABORT);

    // Pipelined, the commands share one probe, each judged as a read or
    // a write.
    let replies = pipeline(
        &mut s,
        &[
            &["MULTI"],
            &["GET", "{nr}k"],
            &["INCR", "{nr}n"],
            &["STRLEN", "{nr}k"],
            &["EXEC"],
        ],
    );
    assert_eq!(replies[0], "+OK\r\n");
    assert_eq!(replies[1], "+QUEUED\r\n", "{replies:?}");
    assert!(replies[2].starts_with("-NOREPLICAS "), "{replies:?}");
    assert_eq!(replies[3], "+QUEUED\r\n", "{replies:?}");
    assert_eq!(replies[4], EXECABORT);

    // A transaction of reads runs.
    assert_eq!(send(&mut s, &["MULTI"]), "+OK\r\n");
    assert_eq!(send(&mut s, &["GET", "{nr}k"]), "+QUEUED\r\n");
    assert_eq!(send(&mut s, &["EXEC"]), "*1\r\n$3\r\nold\r\n");

    node.cmd_ok(&["CONFIG", "SET", "min-replicas-to-write", "0"])
        .expect("min-replicas-to-write 0");
    assert_eq!(
        send(&mut s, &["GET", "{nr}k"]),
        "$3\r\nold\r\n",
        "nothing was written"
    );
    assert_eq!(send(&mut s, &["MULTI"]), "+OK\r\n");
    assert_eq!(send(&mut s, &["SET", "{nr}k", "new"]), "+QUEUED\r\n");
    assert_eq!(send(&mut s, &["EXEC"]), "*1\r\n+OK\r\n");
}

/// The PIDs of `pid`'s children.
fn children(pid: u32) -> Vec<u32> {
    let path = format!("/proc/{pid}/task/{pid}/children");
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

#[test]
fn misconf_refuses_writes_queued_in_multi() {
    let cluster = cluster(3, 0);
    let proxy = Proxy::start(&cluster.seeds(), &[]);
    let mut s = proxy.stream();
    let node = &cluster.nodes()[owner_of(&cluster, b"{mc}k")];
    let pid = node.pid().expect("node pid");
    assert_eq!(send(&mut s, &["SET", "{mc}k", "old"]), "+OK\r\n");
    // A background save that fails (its child killed) with save points
    // configured: Redis then refuses writes with MISCONF.
    node.cmd_ok(&["CONFIG", "SET", "save", "3600 1"])
        .expect("save");
    node.cmd_ok(&["CONFIG", "SET", "rdb-key-save-delay", "10000000"])
        .expect("delay");
    node.cmd(&["BGSAVE"]).expect("BGSAVE");
    let deadline = Instant::now() + Duration::from_secs(10);
    let child = loop {
        if let Some(&child) = children(pid).first() {
            break child;
        }
        assert!(Instant::now() < deadline, "no BGSAVE child");
        std::thread::sleep(Duration::from_millis(20));
    };
    std::process::Command::new("kill")
        .args(["-9", &child.to_string()])
        .status()
        .expect("kill");
    loop {
        let info = node.cmd(&["INFO", "persistence"]).expect("INFO");
        let text = format!("{info:?}");
        if text.contains("rdb_last_bgsave_status:err") {
            break;
        }
        assert!(Instant::now() < deadline, "the save did not fail: {text}");
        std::thread::sleep(Duration::from_millis(20));
    }

    assert_eq!(send(&mut s, &["MULTI"]), "+OK\r\n");
    assert_eq!(
        send(&mut s, &["GET", "{mc}k"]),
        "+QUEUED\r\n",
        "reads are queued"
    );
    let set = send(&mut s, &["SET", "{mc}k", "new"]);
    assert!(set.starts_with("-MISCONF "), "SET queued: {set}");
    assert_eq!(send(&mut s, &["EXEC"]), EXECABORT);

    node.cmd_ok(&["CONFIG", "SET", "save", ""])
        .expect("save off");
    assert_eq!(
        send(&mut s, &["GET", "{mc}k"]),
        "$3\r\nold\r\n",
        "nothing was written"
    );
    assert_eq!(send(&mut s, &["MULTI"]), "+OK\r\n");
    assert_eq!(send(&mut s, &["SET", "{mc}k", "new"]), "+QUEUED\r\n");
    assert_eq!(send(&mut s, &["EXEC"]), "*1\r\n+OK\r\n");
}

#[test]
fn the_probe_leaves_the_key_alone() {
    // A key with a TTL and one that does not exist: queued commands that
    // are discarded leave both as they were (the probe neither writes,
    // expires nor creates).
    let cluster = cluster(3, 0);
    let proxy = Proxy::start(&cluster.seeds(), &[]);
    let mut s = proxy.stream();
    assert_eq!(send(&mut s, &["SET", "{p}k", "v", "EX", "1000"]), "+OK\r\n");
    let replies = pipeline(
        &mut s,
        &[
            &["MULTI"],
            &["APPEND", "{p}k", "zz"],
            &["SET", "{p}absent", "1"],
            &["DISCARD"],
        ],
    );
    assert_eq!(
        replies,
        ["+OK\r\n", "+QUEUED\r\n", "+QUEUED\r\n", "+OK\r\n"]
    );
    assert_eq!(send(&mut s, &["GET", "{p}k"]), "$1\r\nv\r\n");
    let ttl = send(&mut s, &["TTL", "{p}k"]);
    assert!(ttl == ":1000\r\n" || ttl.starts_with(":99"), "{ttl}");
    assert_eq!(send(&mut s, &["EXISTS", "{p}absent"]), ":0\r\n");
}

#[test]
fn a_refusal_after_queueing_is_named_by_execabort() {
    // Redis's `EXEC with at least one use-memory command should fail` and
    // `exec with write commands and state change`: the node's state
    // changes between the queueing and EXEC, and EXEC's abort names why.
    let cluster = cluster(3, 0);
    let proxy = Proxy::start(&cluster.seeds(), &[]);
    let mut s = proxy.stream();
    let node = &cluster.nodes()[owner_of(&cluster, b"{sc}")];

    assert_eq!(send(&mut s, &["MULTI"]), "+OK\r\n");
    assert_eq!(send(&mut s, &["SET", "x{sc}", "1"]), "+QUEUED\r\n");
    assert_eq!(send(&mut s, &["GET", "x{sc}"]), "+QUEUED\r\n");
    node.cmd_ok(&["CONFIG", "SET", "maxmemory", "1"])
        .expect("maxmemory 1");
    let exec = send(&mut s, &["EXEC"]);
    assert!(
        exec.starts_with("-EXECABORT Transaction discarded because of: OOM "),
        "{exec}"
    );
    node.cmd_ok(&["CONFIG", "SET", "maxmemory", "0"])
        .expect("maxmemory 0");

    assert_eq!(send(&mut s, &["SET", "xx{sc}", "1"]), "+OK\r\n");
    assert_eq!(send(&mut s, &["MULTI"]), "+OK\r\n");
    assert_eq!(send(&mut s, &["INCR", "xx{sc}"]), "+QUEUED\r\n");
    node.cmd_ok(&["CONFIG", "SET", "min-replicas-to-write", "2"])
        .expect("min-replicas-to-write");
    let exec = send(&mut s, &["EXEC"]);
    assert!(
        exec.starts_with("-EXECABORT Transaction discarded because of: NOREPLICAS "),
        "{exec}"
    );
    node.cmd_ok(&["CONFIG", "SET", "min-replicas-to-write", "0"])
        .expect("min-replicas-to-write 0");
    assert_eq!(
        send(&mut s, &["GET", "xx{sc}"]),
        "$1\r\n1\r\n",
        "INCR did not run"
    );
    assert_eq!(send(&mut s, &["EXISTS", "x{sc}"]), ":0\r\n");
}
