//! Hand-written CLUSTER SHARDS / CLUSTER SLOTS replies: the endpoint rules,
//! odd but valid layouts, and malformed replies (errors, never panics).

use bytes::Bytes;
use orthrus_cluster::{AddrParseError, Health, NodeAddr, Role, Slot, SlotMap, TopologyError};
use orthrus_resp::Value;
use proptest::prelude::*;

fn bulk(s: &str) -> Value {
    Value::Bulk(Bytes::copy_from_slice(s.as_bytes()))
}

fn int(n: i64) -> Value {
    Value::Integer(n)
}

fn arr(items: Vec<Value>) -> Value {
    Value::Array(items)
}

/// A RESP3 map, or (`flat`) the RESP2 array of alternating names and values.
fn fields(flat: bool, pairs: Vec<(&str, Value)>) -> Value {
    if flat {
        arr(pairs.into_iter().flat_map(|(k, v)| [bulk(k), v]).collect())
    } else {
        Value::Map(pairs.into_iter().map(|(k, v)| (bulk(k), v)).collect())
    }
}

struct N<'a> {
    port: i64,
    ip: &'a str,
    endpoint: Option<&'a str>,
    hostname: Option<&'a str>,
    role: &'a str,
    health: &'a str,
}

fn n(port: i64, role: &'static str) -> N<'static> {
    N {
        port,
        ip: "10.0.0.1",
        endpoint: Some("10.0.0.1"),
        hostname: None,
        role,
        health: "online",
    }
}

fn shard_node(flat: bool, node: &N<'_>) -> Value {
    let mut pairs = vec![
        ("id", bulk(&format!("{:040}", node.port))),
        ("port", int(node.port)),
        ("ip", bulk(node.ip)),
    ];
    if let Some(endpoint) = node.endpoint {
        pairs.push(("endpoint", bulk(endpoint)));
    }
    if let Some(hostname) = node.hostname {
        pairs.push(("hostname", bulk(hostname)));
    }
    pairs.push(("role", bulk(node.role)));
    pairs.push(("replication-offset", int(72156)));
    pairs.push(("health", bulk(node.health)));
    fields(flat, pairs)
}

fn shard(flat: bool, slots: &[i64], nodes: &[N<'_>]) -> Value {
    fields(
        flat,
        vec![
            ("slots", arr(slots.iter().copied().map(int).collect())),
            (
                "nodes",
                arr(nodes.iter().map(|node| shard_node(flat, node)).collect()),
            ),
        ],
    )
}

fn seed() -> NodeAddr {
    NodeAddr::new("seed.host", 7000)
}

fn slot(n: u16) -> Slot {
    Slot::new(n).unwrap()
}

fn shards(list: Vec<Value>) -> Result<SlotMap, TopologyError> {
    SlotMap::from_shards(&arr(list), &seed())
}

#[test]
fn endpoint_rules_in_shards() {
    for flat in [true, false] {
        let question = N {
            endpoint: Some("?"),
            ..n(7001, "master")
        };
        let question_no_ip = N {
            endpoint: Some("?"),
            ip: "",
            ..n(7002, "replica")
        };
        let empty = N {
            endpoint: Some(""),
            ..n(7003, "replica")
        };
        let named = N {
            endpoint: Some("r4.example"),
            hostname: Some("r4.example"),
            ..n(7004, "replica")
        };
        let absent = N {
            endpoint: None,
            ..n(7005, "replica")
        };
        let map = shards(vec![shard(
            flat,
            &[0, 16383],
            &[question, question_no_ip, empty, named, absent],
        )])
        .unwrap();
        assert_eq!(map.master(slot(0)), Some(&NodeAddr::new("10.0.0.1", 7001)));
        assert_eq!(
            map.replicas(slot(16383)),
            &[
                NodeAddr::new("seed.host", 7002),
                NodeAddr::new("seed.host", 7003),
                NodeAddr::new("r4.example", 7004),
                NodeAddr::new("10.0.0.1", 7005),
            ]
        );
        assert!(map.is_complete());
    }
}

#[test]
fn failed_and_loading_nodes() {
    for flat in [true, false] {
        let failed_master = N {
            health: "failed",
            ..n(7001, "master")
        };
        let failed_replica = N {
            health: "fail",
            ..n(7002, "replica")
        };
        let loading = N {
            health: "loading",
            ..n(7003, "replica")
        };
        let odd = N {
            health: "rebooting",
            ..n(7004, "replica")
        };
        let map = shards(vec![shard(
            flat,
            &[0, 100],
            &[failed_master, failed_replica, loading, odd],
        )])
        .unwrap();
        // The only master keeps its slots even when failed: requests get the
        // cluster's own error, and the next refresh shows the failover.
        assert_eq!(map.master(slot(0)), Some(&NodeAddr::new("10.0.0.1", 7001)));
        assert_eq!(map.replicas(slot(0)), &[NodeAddr::new("10.0.0.1", 7004)]);
        let health: Vec<Health> = map.nodes().iter().map(|n| n.health).collect();
        assert_eq!(
            health,
            [
                Health::Failed,
                Health::Failed,
                Health::Loading,
                Health::Unknown
            ]
        );
        assert_eq!(map.covered_slots(), 101);
    }
}

#[test]
fn online_master_wins_over_failed_one() {
    let old = N {
        health: "fail",
        ..n(7001, "master")
    };
    let new = n(7002, "master");
    let map = shards(vec![shard(false, &[0, 9], &[old, new, n(7003, "replica")])]).unwrap();
    assert_eq!(map.master(slot(9)), Some(&NodeAddr::new("10.0.0.1", 7002)));
    assert_eq!(map.replicas(slot(9)), &[NodeAddr::new("10.0.0.1", 7003)]);
    let by_addr = |port| map.replicas_of(&NodeAddr::new("10.0.0.1", port)).to_vec();
    assert_eq!(by_addr(7002), [NodeAddr::new("10.0.0.1", 7003)]);
    assert!(by_addr(7003).is_empty(), "a replica has no replicas");
    assert!(by_addr(7999).is_empty(), "an unknown node has none");
}

#[test]
fn empty_shard_and_partial_coverage() {
    for flat in [true, false] {
        let map = shards(vec![
            shard(flat, &[0, 99, 200, 299], &[n(7001, "master")]),
            shard(flat, &[], &[n(7002, "master"), n(7003, "replica")]),
            // Slots but no master: they stay unowned.
            shard(flat, &[500, 599], &[n(7004, "replica")]),
        ])
        .unwrap();
        assert_eq!(map.covered_slots(), 200);
        assert!(!map.is_complete());
        assert_eq!(map.master(slot(100)), None);
        assert_eq!(map.master(slot(550)), None);
        assert!(map.replicas(slot(550)).is_empty());
        assert_eq!(map.masters(), vec![NodeAddr::new("10.0.0.1", 7001)]);
        assert_eq!(map.nodes().len(), 4);
        let addr = NodeAddr::new("10.0.0.1", 7001);
        assert_eq!(
            map.slot_ranges(),
            vec![(0, 99, addr.clone()), (200, 299, addr)]
        );
        let empty_master = map.node(&NodeAddr::new("10.0.0.1", 7002)).unwrap();
        assert_eq!(empty_master.role, Role::Master);
        assert_eq!(
            empty_master.id.as_deref(),
            Some("0000000000000000000000000000000000007002")
        );
    }
}

#[test]
fn shards_reply_errors() {
    let seed = seed();
    let parse = |v: Value| SlotMap::from_shards(&v, &seed);
    let malformed =
        |r: Result<SlotMap, TopologyError>| matches!(r, Err(TopologyError::Malformed { .. }));
    assert_eq!(
        parse(Value::Error(Bytes::from_static(
            b"ERR unknown subcommand 'SHARDS'"
        )))
        .unwrap_err(),
        TopologyError::ErrorReply(Bytes::from_static(b"ERR unknown subcommand 'SHARDS'"))
    );
    assert!(malformed(parse(Value::Null)));
    assert!(malformed(parse(bulk("shards"))));
    assert!(malformed(parse(arr(vec![int(1)]))));
    assert!(malformed(parse(arr(vec![arr(vec![bulk("slots")])]))));
    assert!(malformed(parse(arr(vec![fields(
        true,
        vec![("nodes", arr(vec![]))]
    )]))));
    assert!(malformed(parse(arr(vec![fields(
        false,
        vec![("slots", arr(vec![]))]
    )]))));
    assert!(malformed(parse(arr(vec![shard(
        true,
        &[1],
        &[n(7001, "master")]
    )]))));
    assert!(malformed(parse(arr(vec![shard(
        false,
        &[0, 1],
        &[n(7001, "leader")]
    )]))));
    let no_role = fields(false, vec![("port", int(7001)), ("ip", bulk("h"))]);
    let bad = fields(
        false,
        vec![
            ("slots", arr(vec![int(0), int(1)])),
            ("nodes", arr(vec![no_role])),
        ],
    );
    assert!(malformed(parse(arr(vec![bad]))));
    let text_slots = fields(
        false,
        vec![
            ("slots", arr(vec![bulk("a"), int(1)])),
            ("nodes", arr(vec![])),
        ],
    );
    assert!(malformed(parse(arr(vec![text_slots]))));
    let nodes_not_maps = fields(
        false,
        vec![("slots", arr(vec![])), ("nodes", arr(vec![int(3)]))],
    );
    assert!(malformed(parse(arr(vec![nodes_not_maps]))));

    for (first, last) in [
        (0, 16384),
        (-1, 5),
        (10, 9),
        (i64::MIN, i64::MAX),
        (70000, 70001),
    ] {
        assert_eq!(
            parse(arr(vec![shard(true, &[first, last], &[n(7001, "master")])])).unwrap_err(),
            TopologyError::BadSlotRange { first, last }
        );
    }
    let twice = parse(arr(vec![
        shard(false, &[0, 10], &[n(7001, "master")]),
        shard(false, &[10, 20], &[n(7002, "master")]),
    ]));
    assert_eq!(
        twice.unwrap_err(),
        TopologyError::SlotOwnedTwice { slot: 10 }
    );
    for (port, why) in [
        (0, AddrParseError::BadPort),
        (65536, AddrParseError::BadPort),
        (-3, AddrParseError::BadPort),
    ] {
        let master = n(port, "master");
        assert_eq!(
            parse(arr(vec![shard(false, &[0, 1], &[master])])).unwrap_err(),
            TopologyError::BadAddr(why)
        );
    }
    let spaced = N {
        endpoint: Some("bad host"),
        ..n(7001, "master")
    };
    assert_eq!(
        parse(arr(vec![shard(false, &[0, 1], &[spaced])])).unwrap_err(),
        TopologyError::BadAddr(AddrParseError::BadHost)
    );
    // An unusable replica is left out instead.
    let map = parse(arr(vec![shard(
        false,
        &[0, 1],
        &[n(7001, "master"), n(0, "replica")],
    )]))
    .unwrap();
    assert_eq!(map.nodes().len(), 1);
    // An empty seed host cannot stand in for an unknown endpoint.
    let unknown = N {
        endpoint: Some(""),
        ..n(7001, "master")
    };
    let reply = arr(vec![shard(false, &[0, 1], &[unknown])]);
    assert_eq!(
        SlotMap::from_shards(&reply, &NodeAddr::new("", 1)).unwrap_err(),
        TopologyError::BadAddr(AddrParseError::EmptyHost)
    );
}

fn slots_node(host: Value, port: i64, id: &str, meta: Option<Value>) -> Value {
    let mut parts = vec![host, int(port), bulk(id)];
    parts.extend(meta);
    arr(parts)
}

#[test]
fn slots_reply_endpoints() {
    let meta_ip = |flat| {
        Some(fields(
            flat,
            vec![("ip", bulk("10.1.1.1")), ("hostname", bulk(""))],
        ))
    };
    for flat in [true, false] {
        let reply = arr(vec![
            arr(vec![
                int(0),
                int(8191),
                slots_node(Value::Null, 7001, "a", None),
                slots_node(bulk(""), 7002, "b", None),
                slots_node(bulk("?"), 7003, "c", meta_ip(flat)),
                slots_node(bulk("?"), 7004, "", None),
                slots_node(bulk("r.example"), 7005, "e", Some(fields(flat, vec![]))),
                arr(vec![bulk("h"), int(0)]),
            ]),
            arr(vec![
                int(8192),
                int(16383),
                arr(vec![Value::Simple(Bytes::from_static(b"h2")), bulk("7006")]),
            ]),
        ]);
        let map = SlotMap::from_slots(&reply, &seed()).unwrap();
        assert!(map.is_complete());
        assert_eq!(map.master(slot(0)), Some(&NodeAddr::new("seed.host", 7001)));
        assert_eq!(map.master(slot(8192)), Some(&NodeAddr::new("h2", 7006)));
        assert_eq!(
            map.replicas(slot(1)),
            &[
                NodeAddr::new("seed.host", 7002),
                NodeAddr::new("10.1.1.1", 7003),
                NodeAddr::new("seed.host", 7004),
                NodeAddr::new("r.example", 7005),
            ]
        );
        assert_eq!(
            map.node(&NodeAddr::new("seed.host", 7004)).unwrap().id,
            None
        );
        assert_eq!(map.node(&NodeAddr::new("h2", 7006)).unwrap().id, None);
        assert!(map.nodes().iter().all(|n| n.health == Health::Unknown));
    }
}

#[test]
fn slots_reply_errors() {
    let seed = seed();
    let parse = |v: Value| SlotMap::from_slots(&v, &seed);
    let malformed =
        |r: Result<SlotMap, TopologyError>| matches!(r, Err(TopologyError::Malformed { .. }));
    let owner = || slots_node(bulk("h"), 1, "x", None);
    assert!(matches!(
        parse(Value::Error(Bytes::from_static(b"ERR nope"))),
        Err(TopologyError::ErrorReply(_))
    ));
    assert!(malformed(parse(int(3))));
    assert!(malformed(parse(arr(vec![bulk("x")]))));
    assert!(malformed(parse(arr(vec![arr(vec![int(0), int(1)])]))));
    assert!(malformed(parse(arr(vec![arr(vec![
        int(0),
        int(1),
        bulk("h:1")
    ])]))));
    assert!(malformed(parse(arr(vec![arr(vec![
        int(0),
        int(1),
        arr(vec![bulk("h")])
    ])]))));
    assert!(malformed(parse(arr(vec![arr(vec![
        Value::Null,
        int(1),
        owner()
    ])]))));
    assert!(malformed(parse(arr(vec![arr(vec![
        int(0),
        int(1),
        owner(),
        int(5)
    ])]))));
    assert_eq!(
        parse(arr(vec![arr(vec![int(5), int(4), owner()])])).unwrap_err(),
        TopologyError::BadSlotRange { first: 5, last: 4 }
    );
    assert_eq!(
        parse(arr(vec![arr(vec![
            int(0),
            int(1),
            slots_node(bulk("h"), 99999, "x", None)
        ])]))
        .unwrap_err(),
        TopologyError::BadAddr(AddrParseError::BadPort)
    );
    let twice = arr(vec![
        arr(vec![int(0), int(5), owner()]),
        arr(vec![int(5), int(6), slots_node(bulk("h"), 2, "y", None)]),
    ]);
    assert_eq!(
        parse(twice).unwrap_err(),
        TopologyError::SlotOwnedTwice { slot: 5 }
    );
    // The same owner listed for two ranges (non-contiguous slots) is fine.
    let split = arr(vec![
        arr(vec![int(0), int(5), owner()]),
        arr(vec![int(9), int(9), owner()]),
    ]);
    let map = parse(split).unwrap();
    assert_eq!((map.covered_slots(), map.nodes().len()), (7, 1));
    assert_eq!(parse(arr(vec![])).unwrap().covered_slots(), 0);
}

#[test]
fn attributes_and_sets_are_looked_through() {
    let inner = arr(vec![arr(vec![
        int(0),
        int(16383),
        slots_node(bulk("h"), 1, "x", None),
    ])]);
    let wrapped = Value::Attribute {
        attrs: vec![(bulk("ttl"), int(3))],
        value: Box::new(inner),
    };
    assert!(
        SlotMap::from_slots(&wrapped, &seed())
            .unwrap()
            .is_complete()
    );
    let set = Value::Set(vec![shard(false, &[0, 16383], &[n(7001, "master")])]);
    assert!(SlotMap::from_shards(&set, &seed()).unwrap().is_complete());
}

fn any_value() -> impl Strategy<Value = Value> {
    let text = prop_oneof![
        Just("slots"),
        Just("nodes"),
        Just("port"),
        Just("ip"),
        Just("endpoint"),
        Just("role"),
        Just("master"),
        Just("replica"),
        Just("health"),
        Just("online"),
        Just("fail"),
        Just("?"),
        Just(""),
        Just("127.0.0.1"),
        Just("16383"),
        Just("id"),
        Just("tls-port"),
    ];
    let leaf = prop_oneof![
        text.prop_map(bulk),
        (-2i64..20000).prop_map(int),
        Just(int(16383)),
        Just(int(16384)),
        Just(int(i64::MIN)),
        Just(Value::Null),
        Just(Value::Simple(Bytes::from_static(b"master"))),
        Just(Value::Error(Bytes::from_static(b"ERR x"))),
        any::<bool>().prop_map(Value::Boolean),
        any::<f64>().prop_map(Value::Double),
    ];
    leaf.prop_recursive(5, 200, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            prop::collection::vec((inner.clone(), inner.clone()), 0..6).prop_map(Value::Map),
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Set),
            (inner.clone(), inner).prop_map(|(a, v)| Value::Attribute {
                attrs: vec![(a.clone(), a)],
                value: Box::new(v)
            }),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// Arbitrary trees never panic, and whatever parses is self-consistent.
    #[test]
    fn arbitrary_replies_never_panic(value in any_value()) {
        for map in [SlotMap::from_shards(&value, &seed()), SlotMap::from_slots(&value, &seed())].into_iter().flatten() {
            let ranges = map.slot_ranges();
            let covered: usize = ranges.iter().map(|(a, b, _)| usize::from(b - a) + 1).sum();
            prop_assert_eq!(covered, map.covered_slots());
            for (first, _, owner) in &ranges {
                prop_assert_eq!(map.master(slot(*first)), Some(owner));
            }
            prop_assert!(map.same_layout(&map.clone()));
        }
    }
}
