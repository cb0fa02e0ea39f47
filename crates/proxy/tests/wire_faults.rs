//! Faults on the wire between orthrus and one master, with writers and
//! readers running: the master is reached through devcluster's fault relay
//! (it announces the relay's port, so orthrus connects there; the cluster
//! bus does not pass through it). Each scenario starts its own cluster and
//! orthrus, with `backend.request_timeout_ms` at 1 s so that a deadline
//! passes in a second rather than five, and ends within seconds.
//!
//! What a client sees in each fault is written down in docs/operations.md
//! ("Faults on the wire"), from these tests.
//!
//! # Layout
//!
//! - `wire_faults/rig.rs`: the cluster, relay and orthrus of a scenario, and
//!   the clients that check every reply against its request.

mod common;
#[path = "wire_faults/rig.rs"]
mod rig;

use std::time::{Duration, Instant};

use orthrus_devcluster::{Cut, Fault};
use rig::{DEADLINE, Outcome, Rig, Side, THREADS, errors, percentile, sent_between};

fn sleep(ms: u64) {
    std::thread::sleep(Duration::from_millis(ms));
}

/// Panics unless every error in `outcomes` is one of `allowed` (prefixes).
fn only_errors(outcomes: &[&Outcome], allowed: &[&str], what: &str) {
    for o in errors(outcomes.iter().copied()) {
        assert!(
            allowed.iter().any(|a| o.reply.starts_with(a)),
            "{what}: unexpected error {:?} after {:?} ({})",
            o.reply,
            o.took,
            if o.write { "a write" } else { "a read" }
        );
    }
}

/// When the first request of `side` sent after `after` that succeeded got
/// its reply.
fn first_success_after(all: &[Outcome], side: Side, after: Instant) -> Option<Instant> {
    all.iter()
        .filter(|o| o.side == side && o.sent + o.took > after && !o.reply.starts_with('-'))
        .map(|o| o.sent + o.took)
        .min()
}

/// 200 ms added to everything master 0 sends back: its requests are
/// answered about 200 ms later, none fails, and the other masters'
/// requests do not wait for it.
#[test]
fn delay_slows_that_master_only() {
    let rig = Rig::start(0);
    let clients = rig.steady_load(2);
    sleep(1000);
    let delayed_at = Instant::now();
    rig.relay.set(Fault::Delay {
        by: Duration::from_millis(200),
        jitter: Duration::ZERO,
    });
    sleep(2000);
    let end = Instant::now();
    let all = rig.finish(clients);
    assert!(errors(&all).is_empty(), "errors: {:?}", errors(&all));
    // Requests sent once the delay holds every reply (a request sent just
    // before may have been answered just before).
    let from = delayed_at + Duration::from_millis(10);
    let slow = sent_between(&all, Side::Faulted, from, end);
    let before = sent_between(
        &all,
        Side::Other,
        delayed_at - Duration::from_millis(900),
        delayed_at,
    );
    let during = sent_between(&all, Side::Other, from, end);
    assert!(slow.len() > 5 && during.len() > 50, "too little load");
    let (p50, p99) = (percentile(&slow, 50), percentile(&during, 99));
    eprintln!(
        "delayed master: {} requests, p50 {p50:?}, max {:?}; others p99 {:?} before, {p99:?} during ({} requests)",
        slow.len(),
        percentile(&slow, 100),
        percentile(&before, 99),
        during.len()
    );
    assert!(
        slow.iter().all(|o| o.took >= Duration::from_millis(200)),
        "a reply came back sooner than the delay"
    );
    // Delays do not pile up: each request pays its own 200 ms once.
    assert!(p50 < Duration::from_millis(400), "p50 {p50:?}");
    // The figure is "p99 unchanged within 2 ms"; on a shared 2-core
    // machine only "does not wait for the slow master" can be asserted
    // without flakiness: far below the 200 ms it would cost. The figures
    // are printed above.
    assert!(p99 < Duration::from_millis(100), "others' p99 {p99:?}");
}

/// A black hole (nothing forwarded, nothing closed) for 2.5 s, then healed.
/// The scenario holds it 10 s against the default 5 s deadline;
/// with a 1 s deadline, 2.5 s shows the same: deadlines pass and
/// connections are replaced more than once.
#[test]
fn black_hole_then_healed() {
    let rig = Rig::start(0);
    let node = rig.node_name();
    let clients = rig.steady_load(2);
    sleep(700);
    let accepted = rig.relay.accepted();
    let hole_at = Instant::now();
    rig.relay.set(Fault::BlackHole);
    sleep(2500);
    let healed_at = Instant::now();
    rig.relay.heal();
    sleep(1500);
    let all = rig.finish(clients);

    let faulted: Vec<&Outcome> = all.iter().filter(|o| o.side == Side::Faulted).collect();
    let failed = errors(faulted.iter().copied());
    assert!(!failed.is_empty(), "no request failed in the black hole");
    only_errors(
        &faulted,
        &[
            &format!("-ERR orthrus: no reply from node {node} "),
            &format!("-CLUSTERDOWN orthrus: node {node} is unreachable"),
        ],
        "the black-holed master",
    );
    let early = format!("-ERR orthrus: no reply from node {node} to an earlier request");
    for o in &failed {
        // Failed at its deadline, not long after; or sooner, a write on a
        // connection given up for an older request, and saying so.
        assert!(
            o.took < 2 * DEADLINE,
            "failed after {:?}: {}",
            o.took,
            o.reply
        );
        assert!(
            o.took >= DEADLINE - Duration::from_millis(20)
                || (o.write && o.reply.starts_with(&early)),
            "failed after {:?}: {}",
            o.took,
            o.reply
        );
        assert!(o.sent >= hole_at - DEADLINE && o.sent < healed_at, "{o:?}");
    }
    let back = first_success_after(&all, Side::Faulted, healed_at).expect("served again");
    eprintln!(
        "{} of {} requests to the black-holed master failed; served again {:?} after healing; {} connections accepted during and after",
        failed.len(),
        faulted.len(),
        back - healed_at,
        rig.relay.accepted() - accepted
    );
    assert!(
        back - healed_at < Duration::from_secs(1),
        "served again only after {:?}",
        back - healed_at
    );
    let after = sent_between(
        &all,
        Side::Faulted,
        healed_at + Duration::from_secs(1),
        Instant::now(),
    );
    assert!(errors(after.iter().copied()).is_empty() && !after.is_empty());
    let others: Vec<&Outcome> = all.iter().filter(|o| o.side == Side::Other).collect();
    assert!(errors(others.iter().copied()).is_empty(), "others failed");
    assert!(percentile(&others, 100) < DEADLINE / 2, "others waited");
    // Replaced, not reused: new connections were opened, and the old ones,
    // closed by orthrus, are gone once the relay forwards their FIN.
    assert!(rig.relay.accepted() > accepted, "no new connection");
    orthrus_devcluster::wait_until(Duration::from_secs(5), "old connections closed", || {
        let open = rig.relay.open_connections();
        (open <= THREADS + 1)
            .then_some(())
            .ok_or(format!("{open} open"))
    })
    .expect("timed-out connections closed");
}

/// A black hole on master 0 while its replica takes over: only requests in
/// flight to the old master fail; the rest succeed on the new one.
#[test]
fn black_hole_with_a_replica_promoted() {
    let rig = Rig::start(1);
    let node = rig.node_name();
    let replica = 3; // master 0's replica
    let clients = rig.steady_load(2);
    sleep(700);
    let hole_at = Instant::now();
    rig.relay.set(Fault::BlackHole);
    rig.cluster.nodes()[replica]
        .cmd_ok(&["CLUSTER", "FAILOVER", "TAKEOVER"])
        .expect("takeover");
    let promoted = rig
        .cluster
        .wait_failover(0, Duration::from_secs(20))
        .expect("failover");
    assert_eq!(promoted, replica);
    let promoted_at = Instant::now();
    // A client whose request is in flight to the old master waits for its
    // deadline (1 s) before sending the next; orthrus sees the new master
    // at the refresh its timeouts ask for.
    sleep(3000);
    let all = rig.finish(clients);
    rig.relay.heal();

    let faulted: Vec<&Outcome> = all.iter().filter(|o| o.side == Side::Faulted).collect();
    only_errors(
        &faulted,
        &[
            &format!("-ERR orthrus: no reply from node {node} "),
            &format!("-CLUSTERDOWN orthrus: node {node} is unreachable"),
        ],
        "the old master",
    );
    // When orthrus had moved to the new master: the first answer to a
    // request sent in the hole (a read sent to the old master may have
    // been sent again to the new one, once orthrus saw it).
    let on_new = faulted
        .iter()
        .filter(|o| o.sent > hole_at && !o.reply.starts_with('-'))
        .map(|o| o.sent + o.took)
        .min()
        .expect("requests served by the promoted replica");
    let failed = errors(faulted.iter().copied());
    eprintln!(
        "{} of {} requests to the old master failed; the new master answered {:?} after the promotion was seen",
        failed.len(),
        faulted.len(),
        on_new.saturating_duration_since(promoted_at)
    );
    // Every failed request was sent before orthrus moved to the new master:
    // in flight to the old one.
    for o in &failed {
        assert!(o.sent < on_new, "sent after the move and failed: {o:?}");
    }
    assert!(
        faulted.iter().any(|o| o.sent > on_new),
        "nothing sent to the new master"
    );
    let others: Vec<&Outcome> = all.iter().filter(|o| o.side == Side::Other).collect();
    assert!(errors(others.iter().copied()).is_empty(), "others failed");
}

/// The connections to master 0 are reset in the middle of pipelined
/// batches (after a few kB of replies, twice): reads are sent again or fail
/// with the documented error, writes are never sent twice, and every reply
/// is its own request's.
///
/// The deadline is 2 s here: what a reset leaves unanswered in a client's
/// pipeline (up to 300 requests) is sent again one round trip at a time,
/// which on a loaded 2-core machine can near a second.
#[test]
fn reset_in_the_middle_of_a_pipelined_batch() {
    let rig = Rig::with_deadline(0, 2 * DEADLINE);
    let mut clients: Vec<_> = (0..3)
        .map(|id| rig.batches(&rig.faulted, Side::Faulted, id, 100))
        .collect();
    clients.push(rig.batches(&rig.others[0], Side::Other, 10, 50));
    clients.push(rig.batches(&rig.others[1], Side::Other, 11, 50));
    sleep(500);
    rig.relay.cut_after(2000, Cut::Reset);
    sleep(700);
    rig.relay.cut_after(5000, Cut::Reset);
    sleep(700);
    let all = rig.finish(clients);

    let faulted: Vec<&Outcome> = all.iter().filter(|o| o.side == Side::Faulted).collect();
    let lost = "-ERR orthrus: connection to node";
    only_errors(&faulted, &[lost], "the reset master");
    let failed = errors(faulted.iter().copied());
    let (writes, reads): (Vec<&Outcome>, Vec<&Outcome>) = failed.iter().partition(|o| o.write);
    eprintln!(
        "{} requests to the reset master: {} writes and {} reads failed",
        faulted.len(),
        writes.len(),
        reads.len()
    );
    assert!(!writes.is_empty(), "no write was in flight at a reset");
    // Reads are sent again, and in time: a pipeline's unwritten requests
    // are resent as soon as the node can be connected to again.
    assert!(reads.is_empty(), "reads failed: {:?}", reads.first());
    for o in &writes {
        assert!(
            o.reply.contains("may or may not have been applied"),
            "{}",
            o.reply
        );
    }
    let others: Vec<&Outcome> = all.iter().filter(|o| o.side == Side::Other).collect();
    assert!(errors(others.iter().copied()).is_empty(), "others failed");
}

/// Replies cut after some kB, connection closed (a FIN in the middle of a
/// 64 KiB reply, most likely): the requests on that connection get a clear
/// error or, reads, are sent again; the next request opens a new
/// connection.
#[test]
fn reply_cut_then_closed() {
    let rig = Rig::start(0);
    let big = format!("{{{}}}:big", rig.faulted);
    let value = "x".repeat(64 * 1024);
    let mut con = rig.proxy.client();
    let _: () = redis::cmd("SET")
        .arg(&big)
        .arg(&value)
        .query(&mut con)
        .unwrap();
    let mut clients: Vec<_> = (0..2)
        .map(|id| rig.batches(&rig.faulted, Side::Faulted, id, 20))
        .collect();
    clients.extend(rig.steady_load(1));
    let stop = rig.stop.clone();
    let reader = std::thread::spawn(move || {
        let mut n = 0;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            let got: redis::RedisResult<String> = redis::cmd("GET").arg(&big).query(&mut con);
            match got {
                Ok(got) => assert!(got == value, "GET {big}: {} bytes", got.len()),
                Err(e) => assert!(
                    e.to_string().contains("connection to node"),
                    "GET {big}: {e}"
                ),
            }
            n += 1;
        }
        n
    });
    sleep(500);
    let accepted = rig.relay.accepted();
    let cut_at = Instant::now();
    rig.relay.cut_after(20_000, Cut::Close);
    sleep(1000);
    let all = rig.finish(clients);
    let big_reads = reader.join().expect("reader");

    let faulted: Vec<&Outcome> = all.iter().filter(|o| o.side == Side::Faulted).collect();
    only_errors(
        &faulted,
        &["-ERR orthrus: connection to node"],
        "the cut master",
    );
    let failed = errors(faulted.iter().copied());
    eprintln!(
        "{big_reads} reads of 64 KiB; {} of {} other requests to the cut master failed; {} connections opened after the cut",
        failed.len(),
        faulted.len(),
        rig.relay.accepted() - accepted
    );
    assert!(
        rig.relay.accepted() > accepted,
        "no new connection after the cut"
    );
    let back = first_success_after(&all, Side::Faulted, cut_at).expect("served after the cut");
    assert!(back > cut_at);
    let others: Vec<&Outcome> = all.iter().filter(|o| o.side == Side::Other).collect();
    assert!(errors(others.iter().copied()).is_empty(), "others failed");
}

/// Master 0 refuses new connections for 5 s (its open ones reset): orthrus
/// backs off instead of storming it, and serves it again within a second
/// of it accepting.
#[test]
fn refused_connections_back_off_then_recover() {
    let rig = Rig::start(0);
    let node = rig.node_name();
    let clients = rig.steady_load(2);
    sleep(500);
    rig.relay.set(Fault::Refuse);
    let accepted = rig.relay.accepted();
    rig.relay.reset();
    sleep(5000);
    let attempts = rig.relay.accepted() - accepted;
    let healed_at = Instant::now();
    rig.relay.heal();
    sleep(1500);
    let all = rig.finish(clients);

    let faulted: Vec<&Outcome> = all.iter().filter(|o| o.side == Side::Faulted).collect();
    only_errors(
        &faulted,
        &[
            &format!("-ERR orthrus: connection to node {node} lost"),
            &format!("-CLUSTERDOWN orthrus: node {node} is unreachable"),
        ],
        "the refusing master",
    );
    let back = first_success_after(&all, Side::Faulted, healed_at).expect("served again");
    eprintln!(
        "{attempts} connection attempts in 5 s of refusal; {} of {} requests failed; served again {:?} after it accepted",
        errors(faulted.iter().copied()).len(),
        faulted.len(),
        back - healed_at
    );
    // Per worker, a back-off of 50 ms doubling to 1 s: attempts at 0,
    // 0.05, 0.15, 0.35, 0.75, 1.55 s and then one a second, 9 in 5 s; two
    // workers and the topology refresher (which asks this node in some of
    // its refreshes) make about 20. A back-off that starts over at each
    // accepted connection made 88 here.
    assert!(attempts <= 32, "{attempts} connection attempts in 5 s");
    // Within the back-off's 1 s cap, plus time for a busy machine to
    // schedule the attempt and the reply (0.58-0.6 s measured).
    assert!(
        back - healed_at < Duration::from_millis(1500),
        "served again only {:?} after it accepted",
        back - healed_at
    );
    let others: Vec<&Outcome> = all.iter().filter(|o| o.side == Side::Other).collect();
    assert!(errors(others.iter().copied()).is_empty(), "others failed");
}
