//! Users with Redis ACL rules, tried against the real binary in front of a
//! real cluster: what each user may run and touch, what ACL answers, how
//! users show in CLIENT LIST and what a reload does to their connections.

mod common;

use std::io::Read;
use std::time::{Duration, Instant};

use common::Proxy;
use orthrus_devcluster::{Cluster, ClusterSpec, NodeOptions};

const NODE_PASSWORD: &str = "node-secret-30";
const CLIENT_PASSWORD: &str = "client-secret-30";

const ALICE_RULES: &str = "on >alice-pw ~alice:* &alice:* +@read +@write -@dangerous +publish";
const ROOT_RULES: &str = "on >root-pw ~* &* +@all";

/// Users with Redis ACL rules: alice (`~alice:* +@read +@write
/// -@dangerous`) reads and writes her keys on every master and is refused
/// with Redis's `-NOPERM` texts everything else the probe tried; root
/// (`+@all ~*`) may do all of it; a password-only user still may too.
#[test]
fn users_rules_decide_commands_keys_and_channels() {
    let spec =
        ClusterSpec::new(3, 0).with_node(NodeOptions::cluster().with_password(NODE_PASSWORD));
    let cluster = Cluster::start(spec).expect("start cluster");
    let proxy = Proxy::spawn(
        &cluster.seeds(),
        &["--requirepass", CLIENT_PASSWORD],
        &[
            ("ORTHRUS_BACKEND__PASSWORD", NODE_PASSWORD),
            ("ORTHRUS_ADMIN__PASSTHROUGH", "true"),
            ("ORTHRUS_CLIENT__USERS__ALICE__RULES", ALICE_RULES),
            ("ORTHRUS_CLIENT__USERS__ROOT__RULES", ROOT_RULES),
            ("ORTHRUS_CLIENT__USERS__BOB", "bob-pw"),
        ],
    );
    let mut alice = proxy.stream();
    assert_eq!(
        common::send(&mut alice, &["AUTH", "alice", "wrong"]).get(..10),
        Some("-WRONGPASS")
    );
    proxy.log_in(
        &mut alice,
        &["alice", "alice-pw"],
        &["SET", "alice:ready", "1"],
    );
    // Her keys, on every master.
    let mut masters = std::collections::HashSet::new();
    for i in 0..30 {
        let key = format!("alice:{i}");
        masters.insert(common::owner_of(&cluster, key.as_bytes()));
        assert_eq!(common::send(&mut alice, &["SET", &key, "v"]), "+OK\r\n");
        assert_eq!(common::send(&mut alice, &["GET", &key]), "$1\r\nv\r\n");
    }
    assert_eq!(masters.len(), 3);
    let key_refused = "-NOPERM No permissions to access a key\r\n";
    assert_eq!(common::send(&mut alice, &["GET", "bob:x"]), key_refused);
    assert_eq!(
        common::send(&mut alice, &["MSET", "alice:1", "a", "bob:x", "b"]),
        key_refused
    );
    let refused =
        |cmd: &str| format!("-NOPERM User alice has no permissions to run the '{cmd}' command\r\n");
    for (args, name) in [
        (&["FLUSHALL"][..], "flushall"),
        (&["KEYS", "*"], "keys"),
        (&["CONFIG", "GET", "requirepass"], "config|get"),
        (&["MONITOR"], "monitor"),
        (&["SLOWLOG", "GET"], "slowlog|get"),
        (&["CLIENT", "KILL", "ID", "1"], "client|kill"),
        (&["CLIENT", "PAUSE", "10"], "client|pause"),
    ] {
        assert_eq!(common::send(&mut alice, args), refused(name), "{args:?}");
    }
    assert_eq!(
        common::send(&mut alice, &["PUBLISH", "bob:chan", "x"]),
        "-NOPERM No permissions to access a channel\r\n"
    );
    assert_eq!(
        common::send(&mut alice, &["PUBLISH", "alice:chan", "x"]),
        ":0\r\n"
    );

    // root may do all of it.
    let mut root = proxy.stream();
    assert_eq!(
        common::send(&mut root, &["AUTH", "root", "root-pw"]),
        "+OK\r\n"
    );
    assert_eq!(common::send(&mut root, &["GET", "bob:x"]), "$-1\r\n");
    assert!(common::send(&mut root, &["KEYS", "alice:1"]).starts_with("*1\r\n"));
    assert!(common::send(&mut root, &["SLOWLOG", "GET"]).starts_with('*'));
    let config = common::send(&mut root, &["CONFIG", "GET", "requirepass"]);
    assert!(config.contains(NODE_PASSWORD), "{config}");
    assert_eq!(
        common::send(&mut root, &["CLIENT", "KILL", "ID", "999999"]),
        ":0\r\n"
    );
    assert_eq!(common::send(&mut root, &["FLUSHALL"]), "+OK\r\n");
    // ACL answered by orthrus for its own users.
    assert_eq!(
        common::send(&mut root, &["ACL", "WHOAMI"]),
        "$4\r\nroot\r\n"
    );
    let users = common::send(&mut root, &["ACL", "USERS"]);
    assert_eq!(
        users,
        "*4\r\n$7\r\ndefault\r\n$5\r\nalice\r\n$3\r\nbob\r\n$4\r\nroot\r\n"
    );
    let list = common::send(&mut root, &["ACL", "LIST"]);
    assert!(
        list.contains("user alice on #") && list.contains("~alice:*"),
        "{list}"
    );
    assert!(!list.contains("alice-pw"), "{list}");
    assert!(common::send(&mut root, &["ACL", "CAT"]).contains("dangerous"));
    let log = common::send(&mut root, &["ACL", "LOG", "50"]);
    for seen in ["flushall", "bob:x", "bob:chan", "config|get", "monitor"] {
        assert!(
            log.contains(&format!("$6\r\nobject\r\n${}\r\n{seen}\r\n", seen.len())),
            "{seen}: {log}"
        );
    }
    assert!(log.contains("$6\r\nreason\r\n$4\r\nauth\r\n"), "{log}");
    assert!(log.contains("$8\r\nusername\r\n$5\r\nalice\r\n"), "{log}");
    // A password-only user, and the default user, keep every permission.
    let mut bob = proxy.stream();
    assert_eq!(
        common::send(&mut bob, &["AUTH", "bob", "bob-pw"]),
        "+OK\r\n"
    );
    assert!(common::send(&mut bob, &["KEYS", "*"]).starts_with('*'));
    assert_eq!(common::send(&mut bob, &["ACL", "WHOAMI"]), "$3\r\nbob\r\n");
    let mut default = proxy.stream();
    assert_eq!(
        common::send(&mut default, &["AUTH", CLIENT_PASSWORD]),
        "+OK\r\n"
    );
    assert!(common::send(&mut default, &["SLOWLOG", "GET"]).starts_with('*'));
    assert!(!proxy.log_text().contains("alice-pw"));

    // A rule orthrus cannot read stops it at start-up (exit 64).
    let mut bad = std::process::Command::new(env!("CARGO_BIN_EXE_orthrus"));
    bad.args(["--seeds", "127.0.0.1:1", "--check-config"])
        .env("ORTHRUS_CLIENT__USERS__EVE__RULES", "on +@nope");
    let out = common::run_to_exit(bad, Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("user eve") && err.contains("+@nope"), "{err}");
}

/// CLIENT LIST names each client's user, CLIENT KILL USER closes a user's
/// clients, and a SIGHUP that changes one user and removes another ends
/// both users' connections while the unchanged one stays.
#[test]
fn users_show_in_client_list_and_a_reload_ends_changed_users() {
    let spec =
        ClusterSpec::new(3, 0).with_node(NodeOptions::cluster().with_password(NODE_PASSWORD));
    let cluster = Cluster::start(spec).expect("start cluster");
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("orthrus.toml");
    let users = |carol: &str| {
        format!(
            "[client.users]\nbob = \"bob-pw\"\ncarol = \"{carol}\"\n\n\
             [client.users.alice]\nrules = \"{ALICE_RULES}\"\n\n\
             [client.users.root]\nrules = \"{ROOT_RULES}\"\n"
        )
    };
    std::fs::write(&file, users("carol-pw")).expect("write");
    let proxy = Proxy::spawn(
        &cluster.seeds(),
        &["--config", file.to_str().unwrap()],
        &[("ORTHRUS_BACKEND__PASSWORD", NODE_PASSWORD)],
    );
    let login = |user: &str, pw: &str| {
        let mut s = proxy.stream();
        assert_eq!(common::send(&mut s, &["AUTH", user, pw]), "+OK\r\n");
        s
    };
    let mut root = login("root", "root-pw");
    let mut alice = login("alice", "alice-pw");
    let mut bob = login("bob", "bob-pw");
    let mut carol = login("carol", "carol-pw");
    let list = common::send(&mut root, &["CLIENT", "LIST"]);
    for user in ["root", "alice", "bob", "carol"] {
        assert!(list.contains(&format!(" user={user} ")), "{user}: {list}");
    }
    assert_eq!(
        common::send(&mut root, &["CLIENT", "KILL", "USER", "nobody"]),
        "-ERR No such user\r\n"
    );
    assert_eq!(
        common::send(&mut root, &["CLIENT", "KILL", "USER", "bob"]),
        ":1\r\n"
    );
    let mut rest = [0u8; 16];
    assert_eq!(bob.read(&mut rest).unwrap_or(0), 0, "bob not closed");

    // carol's password changes, alice is removed: both are logged out.
    let without_alice = users("carol-new").replace(
        &format!("\n[client.users.alice]\nrules = \"{ALICE_RULES}\"\n"),
        "",
    );
    assert!(!without_alice.contains("alice"));
    std::fs::write(&file, without_alice).expect("write");
    proxy.signal("HUP");
    for (name, s) in [("alice", &mut alice), ("carol", &mut carol)] {
        s.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        assert_eq!(
            s.read(&mut rest).unwrap_or(0),
            0,
            "{name} not closed: {}",
            proxy.log_text()
        );
    }
    assert_eq!(common::send(&mut root, &["PING"]), "+PONG\r\n");
    let mut again = proxy.stream();
    assert_eq!(
        common::send(&mut again, &["AUTH", "carol", "carol-new"]),
        "+OK\r\n"
    );
    assert_eq!(
        common::send(&mut again, &["AUTH", "alice", "alice-pw"]),
        "-WRONGPASS invalid username-password pair or user is disabled.\r\n"
    );
}

/// A key is checked for what the command does to it, as its key
/// specification says (Redis's rule): with `%R~src:*` and `%W~out:*`,
/// COPY reads `src:` and writes `out:`, GET may read `src:` only, DEL may
/// delete `out:` only, and EXISTS, which reads no value, needs a pattern
/// of either kind. SET and BITFIELD are judged by their arguments, as
/// Redis judges them, alone and in MULTI. ACL CAT names a category's
/// commands.
#[test]
fn keys_are_checked_for_what_the_command_does_to_them() {
    let cluster = common::cluster(3, 0);
    let proxy = Proxy::spawn(
        &cluster.seeds(),
        &["--requirepass", CLIENT_PASSWORD],
        &[(
            "ORTHRUS_CLIENT__USERS__DAVE__RULES",
            "on >dave-pw +@all -@dangerous %R~src:* %W~out:*",
        )],
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    // The key specs come from the learnt command table; requests need the
    // topology.
    let ready =
        |log: String| log.contains("command table learnt") && log.contains("topology changed");
    while !ready(proxy.log_text()) {
        assert!(Instant::now() < deadline, "{}", proxy.log_text());
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut root = proxy.stream();
    assert_eq!(
        common::send(&mut root, &["AUTH", CLIENT_PASSWORD]),
        "+OK\r\n"
    );
    assert_eq!(common::send(&mut root, &["SET", "src:{t}", "v"]), "+OK\r\n");
    let mut dave = proxy.stream();
    assert_eq!(
        common::send(&mut dave, &["AUTH", "dave", "dave-pw"]),
        "+OK\r\n"
    );
    let refused = "-NOPERM No permissions to access a key\r\n";
    for (args, want) in [
        (&["COPY", "src:{t}", "out:{t}"][..], ":1\r\n"),
        (&["GET", "src:{t}"], "$1\r\nv\r\n"),
        (&["GET", "out:{t}"], refused),
        (&["EXISTS", "out:{t}"], ":1\r\n"),
        (&["EXISTS", "other:{t}"], refused),
        (&["DEL", "src:{t}"], refused),
        (&["DEL", "out:{t}"], ":1\r\n"),
        (&["COPY", "out:{t}", "src:{t}"], refused),
        // SET writes without reading unless given GET; BITFIELD of only
        // GET and OVERFLOW reads (Redis's VARIABLE_FLAGS, by the arguments).
        (&["SET", "out:{t}", "w"], "+OK\r\n"),
        (&["SET", "out:{t}", "w", "EX", "100"], "+OK\r\n"),
        (&["SET", "out:{t}", "w", "GET"], refused),
        (&["SET", "src:{t}", "w"], refused),
        (&["BITFIELD", "src:{t}", "GET", "u8", "0"], "*1\r\n:118\r\n"),
        (
            &["BITFIELD", "src:{t}", "OVERFLOW", "SAT", "GET", "u8", "0"],
            "*1\r\n:118\r\n",
        ),
        (&["BITFIELD", "src:{t}", "INCRBY", "u8", "0", "1"], refused),
        (&["BITFIELD", "src:{t}", "GET", "u8"], refused),
        (&["BITFIELD", "out:{t}", "SET", "u8", "0", "1"], refused),
        (&["BITFIELD", "out:{t}", "GET", "u8", "0"], refused),
    ] {
        assert_eq!(common::send(&mut dave, args), want, "{args:?}");
    }
    // The same inside MULTI: allowed ones are queued and run, a refused
    // one makes EXEC abort and nothing of the transaction runs.
    for (args, want) in [
        (&["MULTI"][..], "+OK\r\n"),
        (&["SET", "out:{t}", "x"], "+QUEUED\r\n"),
        (&["BITFIELD", "src:{t}", "GET", "u8", "0"], "+QUEUED\r\n"),
        (&["EXEC"], "*2\r\n+OK\r\n*1\r\n:118\r\n"),
        (&["MULTI"], "+OK\r\n"),
        (&["SET", "out:{t}", "y"], "+QUEUED\r\n"),
        (&["BITFIELD", "src:{t}", "INCRBY", "u8", "0", "1"], refused),
    ] {
        assert_eq!(common::send(&mut dave, args), want, "{args:?}");
    }
    assert!(
        common::send(&mut dave, &["EXEC"]).starts_with("-EXECABORT"),
        "a refused command aborts the transaction"
    );
    assert_eq!(
        common::send(&mut root, &["MGET", "out:{t}", "src:{t}"]),
        "*2\r\n$1\r\nx\r\n$1\r\nv\r\n"
    );
    let read = common::send(&mut dave, &["ACL", "CAT", "read"]);
    assert!(
        read.contains("\r\nget\r\n") && !read.contains("\r\nset\r\n"),
        "{read}"
    );
    let admin = common::send(&mut dave, &["ACL", "CAT", "admin"]);
    assert!(admin.contains("\r\nconfig|get\r\n"), "{admin}");
    assert_eq!(
        common::send(&mut dave, &["ACL", "CAT", "nope"]),
        "-ERR Unknown category 'nope'\r\n"
    );
}
