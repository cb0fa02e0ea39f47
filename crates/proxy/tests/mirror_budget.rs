//! A stalled mirror against its budget: the primary keeps its write rate
//! and its memory, and another mirror keeps receiving its copies.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::routes::{config_file, start_routed};
use common::{cluster, rss_kib};
use orthrus_devcluster::{NodeOptions, RedisNode, Value};
use redis::Commands;

/// Counts the SETs of 64 KiB values 4 writers complete under `prefix`
/// until `stop`.
fn writers(
    proxy: &common::Proxy,
    prefix: &'static str,
    done: &Arc<AtomicUsize>,
    stop: &Arc<AtomicBool>,
) -> Vec<std::thread::JoinHandle<Vec<String>>> {
    let value = vec![b'v'; 64 << 10];
    (0..4)
        .map(|t| {
            let mut c = proxy.client();
            let (done, stop, value) = (done.clone(), stop.clone(), value.clone());
            std::thread::spawn(move || {
                let mut errors = Vec::new();
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    // A few hundred keys, rewritten: the nodes' memory stays small.
                    let key = format!("{prefix}{t}:{}", i % 100);
                    match c.set::<_, _, ()>(&key, &value) {
                        Ok(()) => {
                            done.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => errors.push(e.to_string()),
                    }
                    i += 1;
                }
                errors
            })
        })
        .collect()
}

fn dbsize(node: &RedisNode) -> i64 {
    match node.cmd(&["DBSIZE"]).unwrap() {
        Value::Integer(n) => n,
        other => panic!("DBSIZE: {other:?}"),
    }
}

/// With the mirror of `order:` stopped (SIGSTOP), the primary's writes
/// all succeed and go on (at least a quarter of the rate with the mirror
/// running: see the bound below), orthrus's RSS stays within 256 MiB of
/// where it started, and the mirror of `log:` keeps receiving.
#[test]
fn a_stalled_mirror_costs_the_primary_neither_writes_nor_memory() {
    let a = cluster(3, 0);
    let b = cluster(3, 0);
    let c = RedisNode::start(NodeOptions::default()).expect("start redis-server");
    let config = config_file(
        "mirror-budget",
        &format!(
            "[upstreams.b]\nseeds = [\"{}\"]\n[upstreams.c]\nseeds = [\"{}\"]\nmode = \"standalone\"\n\
             [[routes]]\nprefix = \"order:\"\nupstream = \"default\"\nmirror = [\"b\"]\n\
             [[routes]]\nprefix = \"log:\"\nupstream = \"default\"\nmirror = [\"c\"]\n",
            b.seeds()[0],
            c.addr()
        ),
    );
    let proxy = start_routed(
        &a.seeds(),
        &["--config", config.0.to_str().unwrap(), "--threads", "1"],
    );
    let pid = proxy.pid();
    let done = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut handles = writers(&proxy, "order:", &done, &stop);
    let mut log = proxy.client();
    let rate = |during: Duration| {
        let from = done.load(Ordering::Relaxed);
        std::thread::sleep(during);
        (done.load(Ordering::Relaxed) - from) as f64 / during.as_secs_f64()
    };
    std::thread::sleep(Duration::from_secs(1));
    let baseline = rss_kib(pid);
    let up = rate(Duration::from_secs(4));
    for i in 0..b.nodes().len() {
        b.pause(i).unwrap();
    }
    // Fill the budget, then measure with the mirror stalled.
    std::thread::sleep(Duration::from_secs(1));
    let peak = Arc::new(AtomicUsize::new(0));
    let watching = Arc::new(AtomicBool::new(true));
    let watcher = {
        let (peak, watching) = (peak.clone(), watching.clone());
        std::thread::spawn(move || {
            while watching.load(Ordering::Relaxed) {
                peak.fetch_max(rss_kib(pid) as usize, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    let logged_before = dbsize(&c);
    let started = Instant::now();
    let down = rate(Duration::from_secs(4));
    for i in 0..20 {
        let _: () = log.set(format!("log:{i}"), i).unwrap();
    }
    orthrus_devcluster::wait_until(Duration::from_secs(5), "log: mirrored", || {
        let n = dbsize(&c);
        if n >= logged_before + 20 {
            Ok(())
        } else {
            Err(format!("{n} keys"))
        }
    })
    .unwrap();
    watching.store(false, Ordering::Relaxed);
    watcher.join().unwrap();
    let dropped = proxy.info_field("orthrus_mirror_dropped");
    for i in 0..b.nodes().len() {
        b.resume(i).unwrap();
    }
    // The rate with the mirror running again too: the stalled rate is
    // compared with the mean of before and after, so that the load of a
    // shared machine drifting over the test does not decide it.
    std::thread::sleep(Duration::from_secs(1));
    let up_again = rate(Duration::from_secs(4));
    stop.store(true, Ordering::Relaxed);
    for h in handles.drain(..) {
        let errors = h.join().unwrap();
        assert!(errors.is_empty(), "the primary failed: {errors:?}");
    }
    let up = (up + up_again) / 2.0;
    let grown_mib = (peak.load(Ordering::Relaxed) as u64).saturating_sub(baseline) / 1024;
    eprintln!(
        "SET/s {up:.0} with the mirror running (mean of before and after), {down:.0} stalled ({:?}); RSS {} MiB at the start, +{grown_mib} MiB at most; {dropped} copies dropped",
        started.elapsed(),
        baseline / 1024
    );
    assert!(
        dropped > 0,
        "the stalled mirror's copies are dropped and counted"
    );
    // A primary held by its mirror stops (its writes wait for the
    // mirror's budget to empty) or crawls; one that drops the copies goes
    // on at its rate: 1.5 to 1.8 times it here on a quiet machine (no
    // copies to send), 0.29 once in CI with the machine's two cores taken
    // by a benchmark run beside it. The bound is for the first kind only.
    assert!(
        down >= 0.25 * up,
        "{down:.0} SET/s with the mirror stalled against {up:.0}"
    );
    assert!(grown_mib <= 256, "RSS grew by {grown_mib} MiB");
}
