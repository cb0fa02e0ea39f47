//! Slot maps built from CLUSTER SHARDS / CLUSTER SLOTS replies captured from
//! a real Redis 7.0.15 cluster (3 masters, 1 replica each; see
//! `fixtures/README.md`), and the map's own operations.

use bytes::Bytes;
use orthrus_cluster::{Health, NodeAddr, Role, Slot, SlotMap};
use orthrus_resp::{Limits, Value};

const M1: u16 = 49173; // slots 100-5460, hostname node1.redis.test
const M2: u16 = 42761; // slots 5461-10922, hostname node2.redis.test
const M3: u16 = 37631; // slots 0-99 and 10923-16383, hostname node3.redis.test
const R1: u16 = 54041; // replica of M1, no hostname
const R2: u16 = 47541; // replica of M2, hostname node4.redis.test (set late)
const R3: u16 = 37285; // replica of M3, no hostname

const M1_ID: &str = "5b9948273d0229fb2f42e65b86bca6ace79c2949";
const R2_ID: &str = "9020d1f3bb01751a0b356e5cdcc9ff5079a1a410";

fn fixture(name: &str) -> Value {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    let raw = Bytes::from(std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}")));
    let (value, used) = Value::parse(&raw, &Limits::default())
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .unwrap_or_else(|| panic!("{path}: incomplete frame"));
    assert_eq!(used, raw.len(), "{path}: trailing bytes");
    value
}

fn local(port: u16) -> NodeAddr {
    NodeAddr::new("127.0.0.1", port)
}

fn slot(n: u16) -> Slot {
    Slot::new(n).unwrap()
}

fn seed() -> NodeAddr {
    local(M1)
}

/// Every captured reply of one cluster state, parsed by the matching parser.
fn maps(prefix: &str, seed: &NodeAddr) -> Vec<(String, SlotMap)> {
    let mut out = Vec::new();
    for resp in ["resp2", "resp3"] {
        let name = format!("{prefix}shards_{resp}.bin");
        let map =
            SlotMap::from_shards(&fixture(&name), seed).unwrap_or_else(|e| panic!("{name}: {e}"));
        out.push((name, map));
        let name = format!("{prefix}slots_{resp}.bin");
        let map =
            SlotMap::from_slots(&fixture(&name), seed).unwrap_or_else(|e| panic!("{name}: {e}"));
        out.push((name, map));
    }
    out
}

fn node<'a>(map: &'a SlotMap, addr: &NodeAddr) -> &'a orthrus_cluster::Node {
    map.node(addr)
        .unwrap_or_else(|| panic!("{addr} missing from {map:?}"))
}

#[test]
fn healthy_cluster() {
    for (name, map) in maps("", &seed()) {
        assert!(map.is_complete(), "{name}");
        assert_eq!(map.covered_slots(), 16384, "{name}");
        assert_eq!(
            map.masters(),
            vec![local(M3), local(M2), local(M1)],
            "{name}"
        );
        assert_eq!(
            map.slot_ranges(),
            vec![
                (0, 99, local(M3)),
                (100, 5460, local(M1)),
                (5461, 10922, local(M2)),
                (10923, 16383, local(M3)),
            ],
            "{name}"
        );
        assert_eq!(map.nodes().len(), 6, "{name}");
        assert_eq!(map.master(slot(0)), Some(&local(M3)), "{name}");
        assert_eq!(map.master(slot(100)), Some(&local(M1)), "{name}");
        assert_eq!(
            map.master(Slot::for_key(b"foo")),
            Some(&local(M3)),
            "{name}"
        );
        assert_eq!(map.replicas(slot(99)), &[local(R3)], "{name}");
        assert_eq!(map.replicas(slot(5460)), &[local(R1)], "{name}");
        assert_eq!(map.replicas(slot(5461)), &[local(R2)], "{name}");
        assert_eq!(map.replicas(slot(16383)), &[local(R3)], "{name}");
        assert_eq!(node(&map, &local(M1)).id.as_deref(), Some(M1_ID), "{name}");
        assert_eq!(node(&map, &local(R2)).id.as_deref(), Some(R2_ID), "{name}");
        assert_eq!(node(&map, &local(R2)).role, Role::Replica, "{name}");
        let expected_health = if name.contains("shards") {
            Health::Online
        } else {
            Health::Unknown
        };
        assert!(
            map.nodes().iter().all(|n| n.health == expected_health),
            "{name}"
        );
    }
}

#[test]
fn shards_and_slots_agree() {
    let all = maps("", &seed());
    let (first_name, first) = &all[0];
    for (name, map) in &all[1..] {
        assert_eq!(
            map.slot_ranges(),
            first.slot_ranges(),
            "{name} vs {first_name}"
        );
        assert_eq!(map.masters(), first.masters(), "{name} vs {first_name}");
    }
    // RESP2 and RESP3 shapes of the same command give the same map.
    assert!(all[0].1.same_layout(&all[2].1));
    assert!(all[1].1.same_layout(&all[3].1));
    // SHARDS knows health, SLOTS does not: same routing, different layout.
    assert!(!all[0].1.same_layout(&all[1].1));
}

#[test]
fn preferred_hostnames_and_unset_hostnames() {
    // The answering node prefers hostnames; R1 and R3 have none, and R2's
    // had not reached it by gossip yet when this was captured, so their
    // endpoint is "?" and their IP is used.
    // A seed host unlike the nodes' IP shows that "?" resolves to the IP.
    for (name, map) in maps("hostname_", &NodeAddr::new("seed.example", M1)) {
        let host = |h: &str, port| NodeAddr::new(h, port);
        assert_eq!(
            map.slot_ranges(),
            vec![
                (0, 99, host("node3.redis.test", M3)),
                (100, 5460, host("node1.redis.test", M1)),
                (5461, 10922, host("node2.redis.test", M2)),
                (10923, 16383, host("node3.redis.test", M3)),
            ],
            "{name}"
        );
        assert_eq!(map.replicas(slot(0)), &[local(R3)], "{name}");
        assert_eq!(map.replicas(slot(100)), &[local(R1)], "{name}");
        assert_eq!(map.replicas(slot(5461)), &[local(R2)], "{name}");
        assert!(map.is_complete(), "{name}");
    }
}

#[test]
fn unknown_endpoints_use_the_seed_host() {
    let seed = NodeAddr::new("seed.example", M1);
    for (name, map) in maps("unknown_endpoint_", &seed) {
        let at_seed = |port| NodeAddr::new("seed.example", port);
        assert_eq!(
            map.masters(),
            vec![at_seed(M3), at_seed(M2), at_seed(M1)],
            "{name}"
        );
        assert_eq!(map.replicas(slot(0)), &[at_seed(R3)], "{name}");
        assert_eq!(map.replicas(slot(6000)), &[at_seed(R2)], "{name}");
        assert!(
            map.nodes().iter().all(|n| n.addr.host() == "seed.example"),
            "{name}"
        );
        assert!(map.is_complete(), "{name}");
    }
}

#[test]
fn failed_replica_takes_no_reads() {
    for (name, map) in maps("failed_replica_", &seed()) {
        assert!(map.is_complete(), "{name}");
        assert!(map.replicas(slot(100)).is_empty(), "{name}");
        assert_eq!(map.replicas(slot(5461)), &[local(R2)], "{name}");
        if name.contains("shards") {
            // SHARDS still lists it, marked failed; SLOTS leaves it out.
            assert_eq!(node(&map, &local(R1)).health, Health::Failed, "{name}");
            assert_eq!(map.nodes().len(), 6, "{name}");
        } else {
            assert!(map.node(&local(R1)).is_none(), "{name}");
            assert_eq!(map.nodes().len(), 5, "{name}");
        }
    }
}

#[test]
fn after_failover() {
    // M2 was killed; R2 took over its slots. SHARDS lists M2 as a failed
    // master in a shard of its own with no slots.
    for (name, map) in maps("failover_", &seed()) {
        assert!(map.is_complete(), "{name}");
        assert_eq!(map.master(slot(5461)), Some(&local(R2)), "{name}");
        assert_eq!(map.master(slot(10922)), Some(&local(R2)), "{name}");
        assert_eq!(
            map.masters(),
            vec![local(M3), local(R2), local(M1)],
            "{name}"
        );
        assert!(map.replicas(slot(5461)).is_empty(), "{name}");
        assert_eq!(node(&map, &local(R2)).role, Role::Master, "{name}");
        if name.contains("shards") {
            let old = node(&map, &local(M2));
            assert_eq!(
                (old.role, old.health),
                (Role::Master, Health::Failed),
                "{name}"
            );
        }
    }
}

#[test]
fn set_master_patches_one_slot() {
    let mut map = SlotMap::from_shards(&fixture("shards_resp2.bin"), &seed()).unwrap();
    let before = map.clone();
    map.set_master(slot(200), local(M2));
    assert_eq!(map.master(slot(200)), Some(&local(M2)));
    assert_eq!(map.replicas(slot(200)), &[local(R2)]);
    for s in Slot::all().filter(|s| s.get() != 200) {
        assert_eq!(map.master(s), before.master(s), "slot {s}");
    }
    assert_eq!(map.nodes().len(), 6);
    assert!(map.is_complete());
    assert!(!map.same_layout(&before));
    assert_eq!(
        map.slot_ranges()[1..4],
        [
            (100, 199, local(M1)),
            (200, 200, local(M2)),
            (201, 5460, local(M1))
        ]
    );
    // Patching it back restores the layout.
    map.set_master(slot(200), local(M1));
    assert!(map.same_layout(&before));
}

#[test]
fn moved_to_an_unknown_node_adds_it() {
    let mut map = SlotMap::from_slots(&fixture("slots_resp2.bin"), &seed()).unwrap();
    let newcomer = NodeAddr::new("10.9.8.7", 7007);
    map.set_master(slot(16383), newcomer.clone());
    assert_eq!(map.master(slot(16383)), Some(&newcomer));
    assert_eq!(map.master(slot(16382)), Some(&local(M3)));
    assert!(map.replicas(slot(16383)).is_empty());
    let added = node(&map, &newcomer);
    assert_eq!(
        (added.role, added.health, added.id.clone()),
        (Role::Master, Health::Unknown, None)
    );
    assert_eq!(map.nodes().len(), 7);
    assert_eq!(map.masters().len(), 4);
}

#[test]
fn moved_to_a_replica_promotes_it() {
    let mut map = SlotMap::from_shards(&fixture("shards_resp3.bin"), &seed()).unwrap();
    map.set_master(slot(6000), local(R2));
    assert_eq!(node(&map, &local(R2)).role, Role::Master);
    // It no longer counts as a replica of its old master.
    assert!(map.replicas(slot(6001)).is_empty());
    assert_eq!(map.master(slot(6001)), Some(&local(M2)));
    assert_eq!(map.nodes().len(), 6);
}

#[test]
fn set_master_on_an_empty_map() {
    let mut map = SlotMap::empty();
    assert_eq!(map.covered_slots(), 0);
    assert!(map.masters().is_empty() && map.slot_ranges().is_empty());
    assert!(map.same_layout(&SlotMap::default()));
    let a = NodeAddr::new("a", 1);
    map.set_master(slot(5), a.clone());
    map.set_master(slot(5), a.clone());
    map.set_master(slot(6), a.clone());
    assert_eq!(map.covered_slots(), 2);
    assert!(!map.is_complete());
    assert_eq!(map.slot_ranges(), vec![(5, 6, a.clone())]);
    // An unresolved empty host is not recorded.
    map.set_master(slot(7), NodeAddr::new("", 2));
    assert_eq!(map.master(slot(7)), None);
    assert_eq!(map.nodes().len(), 1);
    for s in Slot::all() {
        map.set_master(s, a.clone());
    }
    assert!(map.is_complete());
    assert_eq!(map.slot_ranges(), vec![(0, 16383, a)]);
}

#[test]
fn debug_is_compact() {
    let map = SlotMap::from_slots(&fixture("slots_resp3.bin"), &seed()).unwrap();
    let text = format!("{map:?}");
    assert!(text.len() < 4000, "{} bytes", text.len());
    assert!(text.contains("10923"));
}

#[test]
fn a_standalone_server_owns_every_slot_alone() {
    let solo = local(M1);
    let map = SlotMap::standalone(solo.clone());
    assert!(map.is_complete());
    assert_eq!(map.masters(), vec![solo.clone()]);
    assert_eq!(map.slot_ranges(), vec![(0, 16383, solo.clone())]);
    for n in [0, 1, 8191, 16383] {
        assert_eq!(map.master(slot(n)), Some(&solo));
        assert!(map.replicas(slot(n)).is_empty());
    }
    let only = node(&map, &solo);
    assert_eq!((only.role, only.health), (Role::Master, Health::Online));
    assert!(map.same_layout(&SlotMap::standalone(solo)));
    assert!(!map.same_layout(&SlotMap::standalone(local(M2))));
}
