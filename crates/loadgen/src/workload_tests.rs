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
    let workload = Workload::new("t:w0", 100).unwrap();
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
    let workload = Workload::new("t:w1", 40 * 11).unwrap();
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
    let workload = Workload::new("t:w2", 50).unwrap();
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
    let err = Workload::new("bench{x}", 10).unwrap_err();
    assert!(err.to_string().contains("brace"));
    assert!(Workload::new("ok", 0).is_err());
}

#[test]
fn mset_keys_sit_in_three_slots() {
    let workload = Workload::new("orthrus-bench:p1:r0:single:w0", 10).unwrap();
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
