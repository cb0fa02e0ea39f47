//! `Slot::for_key` against a real server's `CLUSTER KEYSLOT`, on random
//! binary keys biased towards braces so that hash tags of every shape occur.

use std::time::{Duration, Instant};

use orthrus_cluster::Slot;
use orthrus_devcluster::{NodeOptions, RedisNode, Value};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const KEYS: usize = 10_000;
const PER_WRITE: usize = 1_000;

/// Bytes that matter to hash-tag parsing come up far more often than chance.
fn random_key(rng: &mut StdRng) -> Vec<u8> {
    let len = rng.random_range(0..40);
    (0..len)
        .map(|_| match rng.random_range(0..10) {
            0 | 1 => b'{',
            2 | 3 => b'}',
            4 => 0x00,
            5 => 0xFF,
            6 | 7 => rng.random_range(b'a'..=b'z'),
            _ => rng.random(),
        })
        .collect()
}

fn keyslot(key: &[u8]) -> Vec<Vec<u8>> {
    vec![b"CLUSTER".to_vec(), b"KEYSLOT".to_vec(), key.to_vec()]
}

#[test]
fn for_key_matches_cluster_keyslot() {
    let node =
        RedisNode::start(NodeOptions::cluster()).expect("start a cluster-enabled redis-server");
    let mut conn = node.connect().expect("connect");

    let seed: u64 = rand::rng().random();
    let mut rng = StdRng::seed_from_u64(seed);
    let fixed: [&[u8]; 8] = [
        b"",
        b"123456789",
        b"{user1000}.following",
        b"foo{}{bar}",
        b"foo{{bar}}zap",
        b"foo{bar}{zap}",
        b"\x00{\xff}\x00",
        b"{",
    ];
    let mut keys: Vec<Vec<u8>> = fixed.iter().map(|k| k.to_vec()).collect();
    keys.extend((keys.len()..KEYS).map(|_| random_key(&mut rng)));

    let started = Instant::now();
    let mut tagged = 0;
    for chunk in keys.chunks(PER_WRITE) {
        let cmds: Vec<Vec<Vec<u8>>> = chunk.iter().map(|k| keyslot(k)).collect();
        let replies = conn.pipeline(&cmds).expect("pipeline CLUSTER KEYSLOT");
        assert_eq!(replies.len(), chunk.len());
        for (key, reply) in chunk.iter().zip(replies) {
            let Value::Integer(expected) = reply else {
                panic!("CLUSTER KEYSLOT {key:?}: unexpected reply {reply:?}");
            };
            assert_eq!(
                i64::from(Slot::for_key(key).get()),
                expected,
                "key {key:?} (rng seed {seed})"
            );
            if orthrus_cluster::hash_tag(key).len() != key.len() {
                tagged += 1;
            }
        }
    }
    let elapsed = started.elapsed();
    eprintln!("{KEYS} CLUSTER KEYSLOT checks in {elapsed:?}, {tagged} keys with a hash tag");
    assert!(
        tagged > KEYS / 10,
        "too few hash-tagged keys ({tagged}) to test tags"
    );
    // Pipelined, this takes tens of milliseconds; the bound only catches a
    // pipeline that degenerated into one round trip per key under load.
    assert!(elapsed < Duration::from_secs(20), "took {elapsed:?}");
}
