use std::ops::ControlFlow;

use orthrus_cluster::Slot;

use super::*;
use crate::route::kind::{Family, FanOut, Local, Merge};

fn req(args: &[&str]) -> Request {
    Request::from_args(args)
}

fn slot_of(key: &str) -> Slot {
    Slot::for_key(key.as_bytes())
}

#[test]
fn single_key_commands_route_by_slot() {
    let t = CommandTable::builtin();
    for args in [
        &["GET", "foo"][..],
        &["set", "foo", "1"],
        &["HSET", "foo", "f", "v"],
        &["LRANGE", "foo", "0", "-1"],
    ] {
        match t.route(&req(args)) {
            Route::Slot(s) => assert_eq!(s.slot, slot_of("foo"), "{args:?}"),
            other => panic!("{args:?}: {other:?}"),
        }
    }
}

/// A split numbers keys as every argument from the first (every second,
/// for MSET), and takes `CrossSlot::at` in that numbering: the command's
/// key specs must visit those arguments, in order, and no others.
#[test]
fn split_commands_keys_are_numbered_as_the_split_numbers_them() {
    let t = CommandTable::builtin();
    for name in ["mget", "mset", "del", "unlink", "exists", "touch"] {
        let info = t.get(name.as_bytes()).expect(name);
        let step = match info.split {
            Some(Merge::Ok) => 2,
            Some(_) => 1,
            None => panic!("{name} is not split"),
        };
        let args: Vec<String> = std::iter::once(name.to_owned())
            .chain((0..5 * step).map(|i| format!("a{i}")))
            .collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut seen = Vec::new();
        let _ = info.for_each_key(&req(&args), |key, _| {
            seen.push(String::from_utf8_lossy(key).into_owned());
            ControlFlow::Continue(())
        });
        let want: Vec<&str> = args.iter().skip(1).step_by(step).copied().collect();
        assert_eq!(seen, want, "{name}");
    }
}

#[test]
fn multi_key_commands_need_one_slot() {
    let t = CommandTable::builtin();
    assert!(
        matches!(t.route(&req(&["MGET", "{a}1", "{a}2"])), Route::Slot(s) if s.slot == slot_of("a"))
    );
    // Where the keys left their first slot: the key after the first.
    let a_then_b = CrossSlot {
        first: Place::of(slot_of("a")),
        at: 1,
        then: Place::of(slot_of("b")),
    };
    assert!(matches!(
        t.route(&req(&["MGET", "a", "b"])),
        Route::Split(Merge::Array, c) if c == a_then_b
    ));
    assert!(matches!(
        t.route(&req(&["MSET", "a", "1", "b", "2"])),
        Route::Split(Merge::Ok, c) if c == a_then_b
    ));
    assert!(matches!(
        t.route(&req(&["DEL", "a", "b", "c"])),
        Route::Split(Merge::Sum, c) if c == a_then_b
    ));
    assert!(matches!(
        t.route(&req(&["DEL", "{a}1", "{a}2", "b"])),
        Route::Split(Merge::Sum, c) if c == CrossSlot { at: 2, ..a_then_b }
    ));
    assert!(matches!(
        t.route(&req(&["MSETNX", "a", "1", "b", "2"])),
        Route::Reject(Rejection::CrossSlot)
    ));
    assert!(matches!(
        t.route(&req(&["MSET", "{a}1", "x", "{a}2", "y"])),
        Route::Slot(_)
    ));
    // MSET values are not keys: "b" would hash elsewhere.
    assert!(matches!(
        t.route(&req(&["MSET", "{a}1", "b", "{a}2", "c"])),
        Route::Slot(_)
    ));
    assert!(matches!(
        t.route(&req(&["RENAME", "a", "b"])),
        Route::Reject(Rejection::CrossSlot)
    ));
}

#[test]
fn movable_keys() {
    let t = CommandTable::builtin();
    // EVAL script numkeys key... arg...
    assert!(
        matches!(t.route(&req(&["EVAL", "s", "2", "{x}1", "{x}2", "notakey"])), Route::Slot(s) if s.slot == slot_of("x"))
    );
    assert!(matches!(
        t.route(&req(&["EVAL", "s", "2", "a", "b"])),
        Route::Reject(Rejection::CrossSlot)
    ));
    assert!(matches!(t.route(&req(&["EVAL", "s", "0"])), Route::AnyNode));
    // ZUNION numkeys key...
    assert!(matches!(
        t.route(&req(&["ZUNION", "2", "{z}a", "{z}b", "WEIGHTS", "1", "2"])),
        Route::Slot(_)
    ));
    // XREAD ... STREAMS k1 k2 id1 id2
    assert!(
        matches!(t.route(&req(&["XREAD", "COUNT", "2", "STREAMS", "{s}1", "{s}2", "0", "0"])), Route::Slot(s) if s.slot == slot_of("s"))
    );
    assert!(matches!(
        t.route(&req(&["XREAD", "STREAMS", "a", "b", "0", "0"])),
        Route::Reject(Rejection::CrossSlot)
    ));
    assert!(
        matches!(t.route(&req(&["XREAD", "BLOCK", "0", "STREAMS", "a", "0"])), Route::Blocking(s) if s.slot == slot_of("a"))
    );
}

#[test]
fn kinds() {
    let t = CommandTable::builtin();
    assert!(matches!(
        t.route(&req(&["ping"])),
        Route::Local(Local::Ping)
    ));
    assert!(matches!(
        t.route(&req(&["HELLO", "3"])),
        Route::Local(Local::Hello)
    ));
    assert!(matches!(
        t.route(&req(&["CLIENT", "SETNAME", "x"])),
        Route::Local(Local::Client)
    ));
    assert!(matches!(t.route(&req(&["TIME"])), Route::AnyNode));
    assert!(matches!(
        t.route(&req(&["KEYS", "*"])),
        Route::FanOut(FanOut::Concat)
    ));
    assert!(matches!(
        t.route(&req(&["SCRIPT", "LOAD", "return 1"])),
        Route::FanOut(FanOut::Same)
    ));
    assert!(matches!(t.route(&req(&["SCAN", "0"])), Route::Scan));
    assert!(matches!(
        t.route(&req(&["PUBSUB", "SHARDNUMSUB", "a"])),
        Route::FanOut(FanOut::PairSum)
    ));
    assert!(matches!(
        t.route(&req(&["PUBSUB", "NUMPAT"])),
        Route::SubscriptionNode
    ));
    assert!(matches!(
        t.route(&req(&["PUBLISH", "c", "m"])),
        Route::SubscriptionNode
    ));
    assert!(matches!(
        t.route(&req(&["COMMAND", "COUNT"])),
        Route::AnyNode
    ));
    assert!(matches!(
        t.route(&req(&["CONFIG", "GET", "x"])),
        Route::Admin(..)
    ));
    assert!(matches!(
        t.route(&req(&["CLUSTER", "SLOTS"])),
        Route::Local(Local::Cluster)
    ));
    assert!(matches!(
        t.route(&req(&["WAIT", "1", "0"])),
        Route::Reject(Rejection::Unsupported(..))
    ));
    assert!(
        matches!(t.route(&req(&["BLPOP", "a", "0"])), Route::Blocking(s) if s.slot == slot_of("a"))
    );
    assert!(matches!(
        t.route(&req(&["BLPOP", "a", "b", "0"])),
        Route::Reject(Rejection::CrossSlot)
    ));
    // No key to block on: the node gives its own error (ERR numkeys ...).
    assert!(matches!(
        t.route(&req(&["BZMPOP", "1", "0", "z", "MIN"])),
        Route::AnyNode
    ));
    assert!(matches!(
        t.route(&req(&["NOPE"])),
        Route::Reject(Rejection::UnknownCommand)
    ));
    assert!(matches!(
        t.route(&req(&["GET"])),
        Route::Reject(Rejection::WrongArity(_))
    ));
    assert!(matches!(
        t.route(&req(&["GET", "a", "b"])),
        Route::Reject(Rejection::WrongArity(_))
    ));
}

/// A `COMMAND` entry as Redis 7 sends it (RESP2: maps are flat arrays).
fn command_entry(
    name: &str,
    arity: i64,
    flags: &[&str],
    first: i64,
    last: i64,
    step: i64,
    specs: Vec<Value>,
) -> Value {
    let bulk = |s: &str| Value::Bulk(bytes::Bytes::copy_from_slice(s.as_bytes()));
    Value::Array(vec![
        bulk(name),
        Value::Integer(arity),
        Value::Array(
            flags
                .iter()
                .map(|f| Value::Simple(bytes::Bytes::copy_from_slice(f.as_bytes())))
                .collect(),
        ),
        Value::Integer(first),
        Value::Integer(last),
        Value::Integer(step),
        Value::Array(vec![]),
        Value::Array(vec![]),
        Value::Array(specs),
        Value::Array(vec![]),
    ])
}

fn flat(pairs: Vec<(&str, Value)>) -> Value {
    let mut items = Vec::new();
    for (k, v) in pairs {
        items.push(Value::Bulk(bytes::Bytes::copy_from_slice(k.as_bytes())));
        items.push(v);
    }
    Value::Array(items)
}

#[test]
fn learns_new_commands_from_key_specs() {
    let bulk = |s: &str| Value::Bulk(bytes::Bytes::copy_from_slice(s.as_bytes()));
    // A module command with keys after a keyword: MYMOD.SUM ... KEYS n k1 .. kn
    let spec = flat(vec![
        ("flags", Value::Array(vec![])),
        (
            "begin_search",
            flat(vec![
                ("type", bulk("keyword")),
                (
                    "spec",
                    flat(vec![
                        ("keyword", bulk("KEYS")),
                        ("startfrom", Value::Integer(1)),
                    ]),
                ),
            ]),
        ),
        (
            "find_keys",
            flat(vec![
                ("type", bulk("keynum")),
                (
                    "spec",
                    flat(vec![
                        ("keynumidx", Value::Integer(0)),
                        ("firstkey", Value::Integer(1)),
                        ("keystep", Value::Integer(1)),
                    ]),
                ),
            ]),
        ),
    ]);
    let reply = Value::Array(vec![
        command_entry(
            "mymod.sum",
            -3,
            &["readonly", "movablekeys"],
            0,
            0,
            0,
            vec![spec],
        ),
        command_entry("mymod.admin", 1, &["admin"], 0, 0, 0, vec![]),
        command_entry("mymod.get", 2, &["readonly"], 1, 1, 1, vec![]),
    ]);
    let t = CommandTable::from_command_reply(&reply).expect("table");
    assert!(matches!(
        t.route(&req(&["MYMOD.SUM", "x", "KEYS", "2", "{k}1", "{k}2"])),
        Route::Slot(s) if s.slot == slot_of("k")
    ));
    assert!(matches!(
        t.route(&req(&["MYMOD.SUM", "x", "KEYS", "2", "a", "b"])),
        Route::Reject(Rejection::CrossSlot)
    ));
    assert!(matches!(t.route(&req(&["mymod.get", "q"])), Route::Slot(s) if s.slot == slot_of("q")));
    assert!(matches!(t.route(&req(&["mymod.admin"])), Route::Admin(..)));
    assert!(t.get(b"MYMOD.GET").is_some_and(|i| i.readonly));
    // The built-in rules still hold.
    assert!(matches!(t.route(&req(&["GET", "a"])), Route::Slot(_)));
    assert!(matches!(
        t.route(&req(&["PING"])),
        Route::Local(Local::Ping)
    ));
}

#[test]
fn families_come_from_acl_categories_or_the_builtin_table() {
    let with_categories = |entry: Value, categories: &[&str]| match entry {
        Value::Array(mut fields) => {
            fields[6] = Value::Array(
                categories
                    .iter()
                    .map(|c| Value::Simple(bytes::Bytes::copy_from_slice(c.as_bytes())))
                    .collect(),
            );
            Value::Array(fields)
        }
        other => other,
    };
    let reply = Value::Array(vec![
        with_categories(
            command_entry("get", 2, &["readonly"], 1, 1, 1, vec![]),
            &["@read", "@string", "@fast"],
        ),
        with_categories(
            command_entry("mymod.hget", 2, &["readonly"], 1, 1, 1, vec![]),
            &["@read", "@hash"],
        ),
        with_categories(
            command_entry("del", -2, &["write"], 1, -1, 1, vec![]),
            &["@keyspace", "@write", "@slow"],
        ),
        with_categories(
            command_entry("mymod.other", 2, &[], 1, 1, 1, vec![]),
            &["@slow"],
        ),
        // No categories (an old server): the built-in family stays.
        command_entry("lpush", -3, &["write"], 1, 1, 1, vec![]),
    ]);
    let t = CommandTable::from_command_reply(&reply).expect("table");
    let family = |name: &str| t.get(name.as_bytes()).map(|i| i.family);
    assert_eq!(family("get"), Some(Family::String));
    assert_eq!(family("mymod.hget"), Some(Family::Hash));
    assert_eq!(family("del"), Some(Family::Keyspace));
    assert_eq!(family("mymod.other"), Some(Family::Other));
    assert_eq!(family("lpush"), Some(Family::List));
    let builtin = CommandTable::builtin();
    let family = |name: &str| builtin.get(name.as_bytes()).map(|i| i.family);
    assert_eq!(family("zadd"), Some(Family::SortedSet));
    assert_eq!(family("pfcount"), Some(Family::HyperLogLog));
    assert_eq!(family("ping"), Some(Family::Connection));
    let (route, info) = builtin.route_info(&req(&["HGET", "h", "f"]), &Prefixes::default());
    assert!(matches!(route, Route::Slot(_)));
    assert!(info.is_some_and(|i| i.family == Family::Hash && i.readonly));
}

/// SET's and BITFIELD's access by their arguments, as `ACL DRYRUN` of
/// Redis 7.0.15 and Valkey 9.1.2 judged a `%R~*` and a `%W~*` user.
#[test]
fn set_and_bitfield_are_judged_by_their_arguments() {
    let t = CommandTable::builtin();
    let access = |args: &[&str]| {
        let mut seen = None;
        let info = t.get(args[0].as_bytes()).expect(args[0]);
        let _ = info.for_each_key(&req(args), |_, access| {
            seen = Some(access);
            ControlFlow::Continue(())
        });
        seen.expect("one key")
    };
    let (r, w, rw) = (Access::READ, Access::WRITE, Access::READ_WRITE);
    for (args, want) in [
        (&["SET", "k", "v"][..], w),
        (&["set", "k", "v", "ex", "10"], w),
        (&["SET", "k", "get"], w),
        (&["SET", "k", "v", "GeT"], rw),
        (&["SET", "k", "v", "nx", "get"], rw),
        (&["BITFIELD", "k"], r),
        (&["bitfield", "k", "get", "u8", "0"], r),
        (&["BITFIELD", "k", "OVERFLOW", "WRAP", "GET", "u8", "0"], r),
        (&["BITFIELD", "k", "OVERFLOW", "SAT"], r),
        (&["BITFIELD", "k", "OVERFLOW"], rw),
        (&["BITFIELD", "k", "GET", "u8"], rw),
        (&["BITFIELD", "k", "GET", "u8", "0", "foo"], rw),
        (&["BITFIELD", "k", "SET", "u8", "0", "1"], rw),
        (
            &["BITFIELD", "k", "GET", "u8", "0", "INCRBY", "u8", "0", "1"],
            rw,
        ),
    ] {
        assert_eq!(access(args), want, "{args:?}");
    }
}
