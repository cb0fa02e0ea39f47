//! Tests of the workload against a real redis-server, and of the reply
//! checks on their own.

use std::time::Duration;

use bytes::Bytes;
use orthrus_devcluster::{NodeOptions, RedisNode};

use super::*;

fn bulk(s: &'static str) -> Value {
    Value::Bulk(Bytes::from_static(s.as_bytes()))
}

fn connect(node: &RedisNode) -> Conn {
    Conn::connect(node.addr(), Duration::from_secs(10)).unwrap()
}

#[test]
fn every_set_passes_its_checks_and_leaves_no_key() {
    let node = RedisNode::start(NodeOptions::default()).unwrap();
    let mut conn = connect(&node);
    let workload = Workload::new("t:w0", 100, WorkloadKind::Modern).unwrap();
    workload.prepare(&mut conn).unwrap();
    let sent = [SetName::Keys, SetName::Hash, SetName::List]
        .map(|set| workload.run(&mut conn, set).unwrap());
    let expected = Workload::commands(100);
    assert_eq!(sent, [expected.keys, expected.hash, expected.list]);
    assert_eq!(expected.keys, 110);
    assert_eq!(expected.hash, 104);
    assert_eq!(expected.list, 108);
    assert_eq!(expected.proc, 322);
    // 10 rounds of keys: 10 counters and 10 MSET triples are still there
    // until cleanup.
    assert_eq!(conn.call(&["DBSIZE"]).unwrap(), Value::Integer(10 + 30));
    assert_eq!(conn.call(&["GET", "t:w0:c:3"]).unwrap(), bulk("1"));
    workload.cleanup(&mut conn).unwrap();
    assert_eq!(conn.call(&["DBSIZE"]).unwrap(), Value::Integer(0));
    assert!(workload.run(&mut conn, SetName::Proc).is_err());
}

#[test]
fn counters_count_across_rounds() {
    let node = RedisNode::start(NodeOptions::default()).unwrap();
    let mut conn = connect(&node);
    // 40 rounds of the keys set: each of the 16 counters is hit 2 or 3 times.
    let workload = Workload::new("t:w1", 40 * 11, WorkloadKind::Modern).unwrap();
    workload.prepare(&mut conn).unwrap();
    workload.run(&mut conn, SetName::Keys).unwrap();
    assert_eq!(conn.call(&["GET", "t:w1:c:0"]).unwrap(), bulk("3"));
    assert_eq!(conn.call(&["GET", "t:w1:c:15"]).unwrap(), bulk("2"));
    // A second run without prepare finds the counters already counted.
    let err = workload.run(&mut conn, SetName::Keys).unwrap_err();
    let text = format!("{err:#}");
    assert!(text.contains("wrong reply to `INCR t:w1:c:0`"), "{text}");
    assert!(text.contains("got integer 4, expected integer 1"), "{text}");
}

#[test]
fn a_key_of_the_wrong_type_fails_naming_the_command() {
    let node = RedisNode::start(NodeOptions::default()).unwrap();
    let mut conn = connect(&node);
    conn.call(&["SET", "t:w2:h:0", "not a hash"]).unwrap();
    let workload = Workload::new("t:w2", 50, WorkloadKind::Modern).unwrap();
    let err = workload.run(&mut conn, SetName::Hash).unwrap_err();
    let text = format!("{err:#}");
    assert!(
        text.contains("wrong reply to `HSET t:w2:h:0 f0 v0.0"),
        "{text}"
    );
    assert!(text.contains("WRONGTYPE"), "{text}");
    assert!(text.contains("expected integer 10"), "{text}");

    conn.call(&["SET", "t:w2:l:0", "a string"]).unwrap();
    let err = workload.run(&mut conn, SetName::List).unwrap_err();
    let text = format!("{err:#}");
    assert!(
        text.contains("wrong reply to `LPUSH t:w2:l:0 e0.2 e0.1 e0.0`"),
        "{text}"
    );
}

#[test]
fn prefix_with_a_hash_tag_is_refused() {
    let err = Workload::new("bench{x}", 10, WorkloadKind::Modern).unwrap_err();
    assert!(err.to_string().contains("brace"));
    assert!(Workload::new("ok", 0, WorkloadKind::Classic).is_err());
}

#[test]
fn mset_keys_sit_in_three_slots() {
    let workload =
        Workload::new("orthrus-bench:p1:r0:single:w0", 10, WorkloadKind::Modern).unwrap();
    for [a, b, c] in &workload.triples {
        let (sa, sb, sc) = (slot(a.as_bytes()), slot(b.as_bytes()), slot(c.as_bytes()));
        assert!(sa != sb && sb != sc && sa != sc, "{a} {b} {c}");
    }
}

#[test]
fn checks_compare_values_not_just_types() {
    let ok = Value::Simple(Bytes::from_static(b"OK"));
    assert!(matches(&ok, &Expect::Ok));
    assert!(!matches(
        &Value::Simple(Bytes::from_static(b"QUEUED")),
        &Expect::Ok
    ));
    assert!(matches(&Value::Integer(5), &Expect::IntIn(1, 5)));
    assert!(!matches(&Value::Integer(0), &Expect::IntIn(1, 5)));
    assert!(!matches(&bulk("1"), &Expect::Int(1)));
    let arr = Value::Array(vec![bulk("a"), bulk("b")]);
    assert!(matches(&arr, &Expect::Bulks(vec![b"a", b"b"])));
    assert!(!matches(&arr, &Expect::Bulks(vec![b"b", b"a"])));
    assert!(!matches(&arr, &Expect::Bulks(vec![b"a"])));
    let nil_in = Value::Array(vec![bulk("a"), Value::Null]);
    assert!(!matches(&nil_in, &Expect::Bulks(vec![b"a", b""])));
    // HGETALL order is the server's business.
    let flat = Value::Array(vec![bulk("g"), bulk("2"), bulk("f"), bulk("1")]);
    assert!(matches(
        &flat,
        &Expect::Pairs(vec![(b"f", b"1"), (b"g", b"2")])
    ));
    assert!(!matches(
        &flat,
        &Expect::Pairs(vec![(b"f", b"1"), (b"g", b"3")])
    ));
    assert!(!matches(&flat, &Expect::Pairs(vec![(b"f", b"1")])));
    let err = check(
        &["GET", "k"],
        &Value::Error(Bytes::from_static(b"ERR x")),
        &Expect::Bulk(b"v"),
    );
    assert_eq!(
        err.unwrap_err().to_string(),
        "wrong reply to `GET k`: got error \"ERR x\", expected \"v\""
    );
}

/// Commands Redis 3.2 knew, in the forms the classic workload may use them:
/// `(name, fewest arguments, most arguments)`, the name included.
const REDIS_3_2: &[(&str, usize, usize)] = &[
    ("SET", 3, 3),
    ("GET", 2, 2),
    ("EXISTS", 2, 2),
    ("APPEND", 3, 3),
    ("STRLEN", 2, 2),
    ("EXPIRE", 3, 3),
    ("TTL", 2, 2),
    ("INCR", 2, 2),
    ("MSET", 3, usize::MAX),
    ("MGET", 2, usize::MAX),
    ("DEL", 2, usize::MAX),
    ("HMSET", 4, usize::MAX),
    ("HGET", 3, 3),
    ("HMGET", 3, usize::MAX),
    ("HINCRBY", 4, 4),
    ("HEXISTS", 3, 3),
    ("HLEN", 2, 2),
    ("HGETALL", 2, 2),
    ("HDEL", 3, usize::MAX),
    ("LPUSH", 3, usize::MAX),
    ("RPUSH", 3, usize::MAX),
    ("LLEN", 2, 2),
    ("LRANGE", 4, 4),
    ("LINDEX", 3, 3),
    ("LSET", 4, 4),
    ("LPOP", 2, 2),
    ("RPOP", 2, 2),
];

/// The quoted words of one MONITOR line: `+1.2 [0 addr] "GET" "k"`.
fn monitor_words(line: &str) -> Vec<String> {
    let (_, rest) = line.split_once("] ").unwrap_or(("", ""));
    rest.split("\" \"")
        .map(|w| w.trim_matches('"').to_owned())
        .collect()
}

#[test]
fn classic_sends_only_what_redis_3_2_understood_and_checks_it_all() {
    let node = RedisNode::start(NodeOptions::default()).unwrap();
    let mut monitor = orthrus_devcluster::Conn::connect(node.addr()).unwrap();
    monitor.cmd(&["MONITOR"]).unwrap();
    let mut conn = connect(&node);
    let workload = Workload::new("t:w3", 60, WorkloadKind::Classic).unwrap();
    workload.prepare(&mut conn).unwrap();
    let sent = [SetName::Keys, SetName::Hash, SetName::List]
        .map(|set| workload.run(&mut conn, set).unwrap());
    let expected = Workload::commands(60);
    assert_eq!(sent, [expected.keys, expected.hash, expected.list]);
    workload.cleanup(&mut conn).unwrap();
    conn.call(&["ECHO", "end-of-classic"]).unwrap();
    assert_eq!(conn.call(&["DBSIZE"]).unwrap(), Value::Integer(0));

    let mut seen = Vec::new();
    loop {
        let Value::Simple(line) = monitor.read_value().unwrap() else {
            panic!("MONITOR sends status lines")
        };
        let words = monitor_words(&String::from_utf8_lossy(&line));
        if words.first().map(String::as_str) == Some("ECHO") {
            break;
        }
        seen.push(words);
    }
    let prepare_and_cleanup = 2 * (16 + 16 * 3);
    assert_eq!(
        seen.len() as u64,
        expected.proc + prepare_and_cleanup,
        "every command is seen"
    );
    for words in &seen {
        let name = words[0].to_ascii_uppercase();
        let Some(&(_, lo, hi)) = REDIS_3_2.iter().find(|(n, _, _)| *n == name) else {
            panic!("{name} is not in the Redis 3.2 list: {words:?}")
        };
        assert!((lo..=hi).contains(&words.len()), "{words:?}");
    }
    for name in ["HMSET", "LSET", "LINDEX", "HGETALL", "MSET"] {
        assert!(seen.iter().any(|w| w[0] == name), "{name} was sent");
    }
}

#[test]
fn classic_checks_replies_too() {
    let node = RedisNode::start(NodeOptions::default()).unwrap();
    let mut conn = connect(&node);
    conn.call(&["SET", "t:w4:h:0", "not a hash"]).unwrap();
    let workload = Workload::new("t:w4", 8, WorkloadKind::Classic).unwrap();
    let text = format!("{:#}", workload.run(&mut conn, SetName::Hash).unwrap_err());
    assert!(
        text.contains("wrong reply to `HMSET t:w4:h:0 f0 v0.0"),
        "{text}"
    );
    assert!(text.contains("expected status \"OK\""), "{text}");
}
