//! Numbers a client sends that orthrus computes with (a key count, ...):
//! the largest ones get the error a redis-server gives, the worker goes
//! on serving, nothing overflows.

mod common;

use common::{Proxy, cluster, send};
use orthrus_devcluster::{NodeOptions, RedisNode};

#[test]
fn huge_key_counts_get_redis_errors() {
    let single = RedisNode::start(NodeOptions::default()).expect("start redis-server");
    let cluster = cluster(3, 0);
    let proxy = Proxy::start(&cluster.seeds(), &["--threads", "1"]);
    let mut direct = std::net::TcpStream::connect(single.addr()).unwrap();
    let mut s = proxy.stream();
    let max = u64::MAX.to_string();
    let half = (u64::MAX / 2 + 1).to_string();
    let cases: [&[&str]; 6] = [
        &["EVAL", "return 1", &max, "a"],
        &["EVAL", "return 1", &half, "a"],
        &["FCALL", "f", &max, "a"],
        &["ZUNION", &max, "a", "b"],
        &["LMPOP", &max, "a", "LEFT"],
        &["SINTERCARD", &half, "a", "b"],
    ];
    for args in cases {
        let want = send(&mut direct, args);
        assert!(want.starts_with('-'), "{args:?}: redis-server said {want}");
        assert_eq!(send(&mut s, args), want, "{args:?}");
        assert_eq!(send(&mut s, &["PING"]), "+PONG\r\n", "after {args:?}");
    }
}
