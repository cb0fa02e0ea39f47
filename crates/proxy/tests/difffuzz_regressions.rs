//! Sequences `orthrus-difffuzz` found differing between one redis-server
//! and orthrus, shrunk, and kept here once fixed: each runs on both (a
//! 3-master cluster behind orthrus; both flushed first) and must answer
//! alike under the fuzzer's own normalisation.
//!
//! The text form is orthrus-difffuzz's (`crates/difffuzz/src/sequence.rs`):
//! `conn N resp2|resp3` declares a connection, `N> ARGS` sends a command on
//! connection N and reads its replies. Shard channels `ch1` (slot 9930) and
//! `c71` (slot 14411) live on different masters.

mod common;

use common::Proxy;
use orthrus_devcluster::{Cluster, ClusterSpec, NodeOptions, RedisNode};
use orthrus_difffuzz::{Sequence, Targets, check};

const CASES: &[(&str, &str)] = &[
    (
        // SUNSUBSCRIBE without arguments took the node's confirmations for
        // channels the node had dropped, subscribed again, and never
        // answered.
        "sunsubscribe_everything",
        "conn 0 resp2\n0> SSUBSCRIBE c71\n0> SUNSUBSCRIBE\n0> PING\n",
    ),
    (
        "sunsubscribe_everything_resp3",
        "conn 0 resp3\n0> SSUBSCRIBE c71\n0> SUNSUBSCRIBE\n0> GET k1\n",
    ),
    (
        // The count in an SSUBSCRIBE confirmation was the node's, not the
        // client's: 1 for a second channel on another master.
        "ssubscribe_counts_every_master",
        "conn 0 resp2\n0> SSUBSCRIBE c71\n0> SSUBSCRIBE ch1\n",
    ),
    (
        "shard_counts_down_across_masters",
        "conn 0 resp3\n0> SSUBSCRIBE c71\n0> SSUBSCRIBE ch1\n0> SSUBSCRIBE ch2\n\
         0> SUNSUBSCRIBE ch1\n0> SUNSUBSCRIBE\n0> SUNSUBSCRIBE\n",
    ),
    (
        // PUBSUB NUMPAT and NUMSUB were summed over every master, counting
        // again the copies orthrus makes on the other masters of the
        // subscriptions that can match keyspace notifications.
        "numpat_counts_a_pattern_once",
        "conn 0 resp2\nconn 1 resp2\n0> PSUBSCRIBE *\n0> PSUBSCRIBE c?1\n1> PUBSUB NUMPAT\n",
    ),
    (
        "numsub_counts_a_keyspace_channel_once",
        "conn 0 resp3\nconn 1 resp2\n0> SUBSCRIBE __keyspace@0__:k1 ch1\n\
         1> PUBSUB NUMSUB __keyspace@0__:k1 ch1\n1> PUBLISH ch1 hello\n",
    ),
    (
        // SCRIPT EXISTS queued in MULTI was merged without the bodies
        // orthrus keeps: 0 for a script EVAL ran on one master only.
        "script_exists_in_multi_counts_kept_bodies",
        "conn 0 resp2\n0> EVAL \"return {KEYS[1], KEYS[2], ARGV[1]}\" 2 {c}2 {c}1 0\n0> MULTI\n\
         0> SCRIPT EXISTS 37d0fd1dfec5bfcc353ff499fad03ca9ce598fb5 a89d6d897bdbddf3eb8ebdd32aefe405cbf980d6\n\
         0> EXEC\n",
    ),
    (
        // An EVAL queued in MULTI was not kept: SCRIPT EXISTS said 0 after.
        "eval_in_multi_is_kept",
        "conn 0 resp3\n0> MULTI\n0> EVAL \"return {KEYS[1], KEYS[2], ARGV[1]}\" 2 {a}1 {a}2 a\n0> EXEC\n\
         0> SCRIPT EXISTS 61636018f4e6b5817b89791bbed242f93fa089e3 37d0fd1dfec5bfcc353ff499fad03ca9ce598fb5\n\
         0> EVALSHA 37d0fd1dfec5bfcc353ff499fad03ca9ce598fb5 2 {b}1 {b}2 x\n",
    ),
    (
        // An EVALSHA queued in MULTI got NOSCRIPT from a master that had
        // not run the script (EVAL_RO had, on another master).
        "evalsha_in_multi_of_a_kept_body",
        "conn 0 resp2\nconn 1 resp3\n0> EVAL_RO \"return redis.call('GET', KEYS[1])\" 1 {a}1\n\
         1> MULTI\n1> SET {c}2 v\n1> EVALSHA d3c21d0c2b9ca22f82737626a27bcaf5d288f99f 1 {c}2\n1> EXEC\n",
    ),
    (
        // An EVAL queued in MULTI counted as kept before EXEC: another
        // client's EVALSHA of it ran instead of getting NOSCRIPT.
        "eval_queued_in_multi_is_kept_only_once_it_ran",
        "conn 0 resp3\nconn 1 resp3\n0> MULTI\n0> EVAL \"return redis.pcall('INCR', KEYS[1])\" 1 {b}2 -3\n1> EVALSHA a89d6d897bdbddf3eb8ebdd32aefe405cbf980d6 1 {a}2 -3\n",
    ),
    (
        // An EVALSHA queued in MULTI was decided at queue time: a script
        // another client ran with EVAL before the EXEC got NOSCRIPT.
        "evalsha_in_multi_sees_scripts_loaded_before_exec",
        "conn 0 resp3\nconn 1 resp2\nconn 2 resp2\n0> MULTI\n0> DEL {b}2 {b}1\n0> DEL {b}1 {b}2 {b}1\n0> SCRIPT EXISTS 37d0fd1dfec5bfcc353ff499fad03ca9ce598fb5 37d0fd1dfec5bfcc353ff499fad03ca9ce598fb5\n0> PING\n0> EVALSHA e0e1f9fabfc9d4800c877a703b823ac0578ff8db 0 \"x y\"\n2> EVAL \"return 1\" 0 1\n0> EXEC\n",
    ),
    (
        // SCRIPT EXISTS queued before an EVAL of the same transaction saw
        // the script already.
        "script_exists_before_eval_in_the_same_multi",
        "conn 0 resp2\n0> MULTI\n0> XRANGE {c}1 - +\n0> SCRIPT EXISTS f53bb015f589d5503bcd8963563f2f5cf8783350 37d0fd1dfec5bfcc353ff499fad03ca9ce598fb5\n0> EVAL \"return {KEYS[1], KEYS[2], ARGV[1]}\" 2 {c}2 {c}1 1\n0> EXEC\n",
    ),
    (
        // A pipelined EVALSHA of a script run with EVAL on another master
        // got NOSCRIPT, was loaded and sent again, and ran after the GET
        // pipelined behind it.
        "pipelined_evalsha_keeps_its_place",
        "conn 0 resp3\n0> EVAL \"redis.call('SET', KEYS[1], ARGV[1]); return redis.call('GET', KEYS[1])\" 1 {b}3 3.5\n0| EVALSHA 18d788194860a281b19910d462b1e96dabf3c984 1 k5 \"x y\"\n0| GET k5\n",
    ),
    (
        // An UNSUBSCRIBE before HELLO 3 made the subscriptions' state in
        // RESP2, and the SUBSCRIBE after it was answered in RESP2.
        "hello_3_after_an_unsubscribe",
        "conn 0 resp2\n0> PUNSUBSCRIBE\n0> HELLO 3\n0> SUBSCRIBE c71\n0> SSUBSCRIBE ch2\n",
    ),
    (
        "hello_2_after_subscriptions_ended",
        "conn 0 resp3\n0> SUBSCRIBE ch1\n0> UNSUBSCRIBE\n0> HELLO 2\n0> PSUBSCRIBE ch*\n\
         0> PUNSUBSCRIBE\n0> GET k1\n",
    ),
    (
        // A transaction a watched key stopped (EXEC answered nil) still
        // counted its EVAL_RO as run: SCRIPT EXISTS said 1.
        "eval_of_a_transaction_that_did_not_run",
        "conn 0 resp2\nconn 1 resp2\n0> WATCH {b}1\n0> MULTI\n1> SET {b}1 w\n0> EVAL_RO \"return redis.call('GET', KEYS[1])\" 1 {b}2\n0> EXEC\n0> SCRIPT EXISTS d3c21d0c2b9ca22f82737626a27bcaf5d288f99f 61636018f4e6b5817b89791bbed242f93fa089e3 18d788194860a281b19910d462b1e96dabf3c984\n",
    ),
];

#[test]
fn shrunk_sequences_answer_alike() {
    let single = RedisNode::start(NodeOptions::default()).expect("start the single redis-server");
    let node = NodeOptions::cluster().with_config("cluster-node-timeout", "30000");
    let cluster = Cluster::start(ClusterSpec::new(3, 0).with_node(node)).expect("start cluster");
    let proxy = Proxy::start(&cluster.seeds(), &[]);
    let targets = Targets {
        single: single.addr(),
        proxy: proxy.addr,
    };
    let mut failures = Vec::new();
    for (name, text) in CASES {
        let seq = Sequence::parse(text).unwrap_or_else(|e| panic!("{name}: {e}"));
        match check(targets, &seq) {
            Ok(None) => {}
            Ok(Some(d)) => failures.push(format!("{name}: {d}")),
            Err(e) => failures.push(format!("{name}: {e}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
