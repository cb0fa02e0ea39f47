//! MULTI/EXEC/WATCH through orthrus: atomic on one slot, refused at queue
//! time across slots, WATCH aborting on a concurrent change, and a slot
//! that moves before EXEC handled without the client seeing MOVED.

mod common;

use common::{Proxy, cluster, send};
use orthrus_cluster::Slot;

#[test]
fn transactions() {
    let cluster = cluster(3, 0);
    let proxy = Proxy::start(&cluster.seeds(), &[]);
    let mut s = proxy.stream();

    // Same-slot keys commit atomically.
    assert_eq!(send(&mut s, &["MULTI"]), "+OK\r\n");
    assert_eq!(send(&mut s, &["SET", "{acct}a", "10"]), "+QUEUED\r\n");
    assert_eq!(send(&mut s, &["INCRBY", "{acct}a", "5"]), "+QUEUED\r\n");
    assert_eq!(send(&mut s, &["SET", "{acct}b", "x"]), "+QUEUED\r\n");
    assert_eq!(send(&mut s, &["PING"]), "+QUEUED\r\n");
    assert_eq!(
        send(&mut s, &["EXEC"]),
        "*4\r\n+OK\r\n:15\r\n+OK\r\n+PONG\r\n"
    );
    assert_eq!(send(&mut s, &["GET", "{acct}a"]), "$2\r\n15\r\n");

    // A cross-slot command is refused at queue time; EXEC aborts.
    assert_eq!(send(&mut s, &["MULTI"]), "+OK\r\n");
    assert_eq!(send(&mut s, &["SET", "{acct}a", "99"]), "+QUEUED\r\n");
    assert_eq!(
        send(&mut s, &["SET", "elsewhere", "1"]),
        "-CROSSSLOT Keys in request don't hash to the same slot\r\n"
    );
    assert_eq!(
        send(&mut s, &["EXEC"]),
        "-EXECABORT Transaction discarded because of previous errors.\r\n"
    );
    assert_eq!(
        send(&mut s, &["GET", "{acct}a"]),
        "$2\r\n15\r\n",
        "nothing of the aborted transaction ran"
    );

    // Errors Redis gives for misuse.
    assert_eq!(send(&mut s, &["EXEC"]), "-ERR EXEC without MULTI\r\n");
    assert_eq!(send(&mut s, &["DISCARD"]), "-ERR DISCARD without MULTI\r\n");
    assert_eq!(send(&mut s, &["MULTI"]), "+OK\r\n");
    // In each engine's words.
    let nested = match orthrus_devcluster::server_kind().engine {
        orthrus_devcluster::Engine::Redis => "-ERR MULTI calls can not be nested\r\n",
        orthrus_devcluster::Engine::Valkey => {
            "-ERR Command 'multi' not allowed inside a transaction\r\n"
        }
    };
    assert_eq!(send(&mut s, &["MULTI"]), nested);
    assert_eq!(send(&mut s, &["INCR", "{acct}a"]), "+QUEUED\r\n");
    assert_eq!(send(&mut s, &["DISCARD"]), "+OK\r\n");
    assert_eq!(send(&mut s, &["GET", "{acct}a"]), "$2\r\n15\r\n");
    // A run-time error inside EXEC is part of EXEC's reply, as in Redis.
    assert_eq!(send(&mut s, &["MULTI"]), "+OK\r\n");
    assert_eq!(send(&mut s, &["LPUSH", "{acct}b", "x"]), "+QUEUED\r\n");
    assert_eq!(send(&mut s, &["INCR", "{acct}a"]), "+QUEUED\r\n");
    let exec = send(&mut s, &["EXEC"]);
    assert!(
        exec.starts_with("*2\r\n-WRONGTYPE") && exec.ends_with(":16\r\n"),
        "{exec}"
    );

    // WATCH: a change by another client aborts EXEC (nil), none does not.
    let mut other = proxy.stream();
    assert_eq!(send(&mut s, &["WATCH", "{acct}a"]), "+OK\r\n");
    assert_eq!(send(&mut s, &["GET", "{acct}a"]), "$2\r\n16\r\n");
    assert_eq!(send(&mut other, &["SET", "{acct}a", "100"]), "+OK\r\n");
    assert_eq!(send(&mut s, &["MULTI"]), "+OK\r\n");
    assert_eq!(send(&mut s, &["SET", "{acct}a", "17"]), "+QUEUED\r\n");
    assert_eq!(send(&mut s, &["EXEC"]), "*-1\r\n");
    assert_eq!(send(&mut s, &["GET", "{acct}a"]), "$3\r\n100\r\n");
    assert_eq!(send(&mut s, &["WATCH", "{acct}a", "{acct}b"]), "+OK\r\n");
    assert_eq!(send(&mut s, &["MULTI"]), "+OK\r\n");
    assert_eq!(send(&mut s, &["INCR", "{acct}a"]), "+QUEUED\r\n");
    assert_eq!(send(&mut s, &["EXEC"]), "*1\r\n:101\r\n");
    assert_eq!(
        send(&mut s, &["WATCH", "{acct}a", "other"]),
        "-CROSSSLOT Keys in request don't hash to the same slot\r\n"
    );
    assert_eq!(send(&mut s, &["UNWATCH"]), "+OK\r\n");

    // The slot moves before EXEC: orthrus resends the transaction to the
    // new owner and the client sees only the result.
    let (slot, to) = common::slot_and_other_master(&cluster, b"acct");
    assert_eq!(send(&mut s, &["MULTI"]), "+OK\r\n");
    assert_eq!(send(&mut s, &["INCR", "{acct}a"]), "+QUEUED\r\n");
    cluster.move_slot(slot, to).unwrap();
    assert_eq!(send(&mut s, &["EXEC"]), "*1\r\n:102\r\n");
    assert_eq!(send(&mut s, &["GET", "{acct}a"]), "$3\r\n102\r\n");
}

/// Commands Redis allows inside MULTI that orthrus runs itself (FLUSHALL,
/// and with `admin.passthrough` CONFIG SET) are queued and run at EXEC in
/// their place: a SET before FLUSHALL is flushed, one after it stays, and
/// a failing CONFIG SET is an error inside the EXEC array. A WATCH whose
/// key changed makes EXEC nil and runs nothing.
#[test]
fn fan_out_and_admin_commands_inside_multi_run_at_exec() {
    let cluster = cluster(3, 0);
    let proxy = Proxy::spawn(
        &cluster.seeds(),
        &[],
        &[("ORTHRUS_ADMIN__PASSTHROUGH", "true")],
    );
    proxy.wait_ready(std::time::Duration::from_secs(10));
    let mut s = proxy.stream();
    assert_eq!(send(&mut s, &["MULTI"]), "+OK\r\n");
    assert_eq!(send(&mut s, &["SET", "{m}a", "1"]), "+QUEUED\r\n");
    assert_eq!(send(&mut s, &["FLUSHALL"]), "+QUEUED\r\n");
    assert_eq!(send(&mut s, &["SET", "{m}b", "2"]), "+QUEUED\r\n");
    assert_eq!(
        send(&mut s, &["CONFIG", "SET", "maxmemory", "bla"]),
        "+QUEUED\r\n"
    );
    let exec = send(&mut s, &["EXEC"]);
    assert!(
        exec.starts_with("*4\r\n+OK\r\n+OK\r\n+OK\r\n-ERR CONFIG SET failed"),
        "{exec}"
    );
    assert_eq!(
        send(&mut s, &["GET", "{m}a"]),
        "$-1\r\n",
        "flushed after it was set"
    );
    assert_eq!(send(&mut s, &["GET", "{m}b"]), "$1\r\n2\r\n");

    let mut other = proxy.stream();
    assert_eq!(send(&mut s, &["WATCH", "{m}b"]), "+OK\r\n");
    assert_eq!(send(&mut other, &["SET", "{m}b", "3"]), "+OK\r\n");
    assert_eq!(send(&mut s, &["MULTI"]), "+OK\r\n");
    assert_eq!(send(&mut s, &["FLUSHALL"]), "+QUEUED\r\n");
    assert_eq!(
        send(&mut s, &["EXEC"]),
        "*-1\r\n",
        "the watched key changed"
    );
    assert_eq!(send(&mut s, &["GET", "{m}b"]), "$1\r\n3\r\n", "nothing ran");

    // SLOWLOG, answered by orthrus, runs at EXEC too.
    assert_eq!(send(&mut s, &["MULTI"]), "+OK\r\n");
    assert_eq!(send(&mut s, &["SLOWLOG", "RESET"]), "+QUEUED\r\n");
    assert_eq!(send(&mut s, &["SLOWLOG", "LEN"]), "+QUEUED\r\n");
    assert_eq!(send(&mut s, &["EXEC"]), "*2\r\n+OK\r\n:0\r\n");
}

/// A transaction on a slot in mid-migration whose key already moved: the
/// source answers ASK for it at queue time and aborts the transaction.
/// orthrus never sends a transaction after ASKING (the slot's keys are
/// split between two nodes); it sends it again to the owner, by the same
/// redirect waits as any request, until the migration ends, and the
/// client gets EXEC's reply.
#[test]
fn a_transaction_during_a_migration_runs_once_it_ends() {
    let cluster = cluster(3, 0);
    let proxy = Proxy::start(&cluster.seeds(), &[]);
    let slot = Slot::for_key(b"{ask}").get();
    let from = cluster.master_of_slot(slot).unwrap();
    let masters = cluster.masters().unwrap();
    let to = *masters.iter().find(|&&m| m != from).unwrap();
    let mut s = proxy.stream();
    assert_eq!(send(&mut s, &["SET", "{ask}k", "1"]), "+OK\r\n");
    cluster.begin_migration(slot, from, to).unwrap();
    while cluster.migrate_keys(slot, from, to, 10).unwrap() > 0 {}

    // When the migration began to end: EXEC's reply must come after it.
    let (ending, ending_at) = std::sync::mpsc::channel();
    let finish = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(300));
        ending.send(std::time::Instant::now()).unwrap();
        cluster.finish_migration(slot, to).unwrap();
        cluster
    });
    assert_eq!(send(&mut s, &["MULTI"]), "+OK\r\n");
    assert_eq!(send(&mut s, &["INCR", "{ask}k"]), "+QUEUED\r\n");
    assert_eq!(send(&mut s, &["GET", "{ask}k"]), "+QUEUED\r\n");
    assert_eq!(send(&mut s, &["EXEC"]), "*2\r\n:2\r\n$1\r\n2\r\n");
    let answered = std::time::Instant::now();
    let ending_at = ending_at.try_recv();
    assert!(
        ending_at.is_ok_and(|at| at < answered),
        "EXEC ran before the migration ended"
    );
    let cluster = finish.join().unwrap();
    assert_eq!(
        cluster.nodes()[to].cmd(&["GET", "{ask}k"]).unwrap(),
        orthrus_devcluster::Value::Bulk("2".into())
    );
}

/// WATCH on a slot that moved before orthrus heard of it: the old owner's
/// MOVED is followed (the retry driver every path uses), the key is
/// watched where it lives, and a change there aborts EXEC.
#[test]
fn watch_follows_a_slot_that_moved() {
    let cluster = cluster(3, 0);
    let proxy = Proxy::start(&cluster.seeds(), &[]);
    let (slot, to) = common::slot_and_other_master(&cluster, b"{w}");
    let mut s = proxy.stream();
    assert_eq!(send(&mut s, &["SET", "{w}k", "1"]), "+OK\r\n");
    cluster.move_slot(slot, to).unwrap();
    assert_eq!(send(&mut s, &["WATCH", "{w}k"]), "+OK\r\n");
    cluster.nodes()[to].cmd_ok(&["SET", "{w}k", "2"]).unwrap();
    assert_eq!(send(&mut s, &["MULTI"]), "+OK\r\n");
    assert_eq!(send(&mut s, &["SET", "{w}k", "3"]), "+QUEUED\r\n");
    assert_eq!(send(&mut s, &["EXEC"]), "*-1\r\n");
    assert_eq!(send(&mut s, &["GET", "{w}k"]), "$1\r\n2\r\n");
}
