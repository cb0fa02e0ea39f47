//! `orthrus rebalance` interrupted (SIGINT) during its moves: an atomic
//! migration is cancelled on its source and the slot stays (Valkey); a
//! legacy move stops, says the slot may be left half-moved, and the next
//! run finishes it (either engine).

mod common;

use std::io::{BufRead as _, BufReader, Read as _};
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::Proxy;
use common::rebalance::{layout, node_client, rebalance, slot_of, tags_on};
use orthrus_devcluster::Engine;

/// Starts `orthrus rebalance <args>` with its output piped.
fn start(proxy: &Proxy, args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_orthrus"))
        .args(["rebalance", "--proxy", &proxy.addr.to_string()])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start orthrus rebalance")
}

/// Reads `run`'s standard output up to the first line with `mark` and
/// returns it; a thread reads on (the run must not find its output
/// closed) and gives the rest when the run ends.
fn read_until(run: &mut Child, mark: &str) -> (String, JoinHandle<String>) {
    let mut stdout = BufReader::new(run.stdout.take().expect("stdout"));
    let mut printed = String::new();
    loop {
        let mut line = String::new();
        let n = stdout.read_line(&mut line).expect("read stdout");
        assert!(n > 0, "the run ended before '{mark}': {printed}");
        printed.push_str(&line);
        if line.contains(mark) {
            let rest = std::thread::spawn(move || {
                let mut rest = String::new();
                let _ = stdout.read_to_string(&mut rest);
                rest
            });
            return (printed, rest);
        }
    }
}

/// Sends SIGINT to `run` and waits (at most 20 s) for it to end; its exit
/// status and standard error.
fn interrupt(run: &mut Child) -> (std::process::ExitStatus, String) {
    let sent = Command::new("kill")
        .arg("-INT")
        .arg(run.id().to_string())
        .status()
        .expect("kill");
    assert!(sent.success());
    let ended = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = run.try_wait().expect("wait") {
            break status;
        }
        assert!(Instant::now() < ended, "the run did not stop on SIGINT");
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut err = String::new();
    run.stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut err)
        .expect("stderr");
    eprintln!("{err}");
    (status, err)
}

#[test]
fn rebalance_interrupted_during_an_atomic_migration_cancels_it() {
    if !common::runs_on(
        Engine::Valkey,
        "CLUSTER MIGRATESLOTS is Valkey 9's (REDIS_SERVER=valkey-server runs this)",
    ) {
        return;
    }
    let (cluster, proxy) = common::rebalance::started();
    let masters = cluster.masters().expect("masters");
    let source = masters[0];
    let tags = tags_on(&cluster, source, 2);
    let mut node = node_client(cluster.nodes()[source].addr());
    for tag in &tags {
        let mut pipe = redis::pipe();
        for i in 0..2000 {
            pipe.cmd("SET").arg(format!("{tag}:{i}")).arg(i).ignore();
        }
        pipe.query::<()>(&mut node).expect("write keys");
    }
    let before = layout(&cluster);

    // Planned by key count: one of the two slots moves. Once the plan is
    // printed the run only talks to the source, so the other masters are
    // stopped then: the migration cannot end before the interrupt.
    let mut run = start(
        &proxy,
        &["--by", "keys", "--apply", "--yes", "--max-moves", "1"],
    );
    let (printed, rest) = read_until(&mut run, "moves:");
    for &m in &masters[1..] {
        cluster.nodes()[m].pause().expect("pause");
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let jobs = cluster.nodes()[source]
            .cmd(&["CLUSTER", "GETSLOTMIGRATIONS"])
            .map(|v| format!("{v:?}"))
            .expect("GETSLOTMIGRATIONS");
        if jobs.contains("EXPORT") {
            break;
        }
        assert!(Instant::now() < deadline, "no migration began: {printed}");
        std::thread::sleep(Duration::from_millis(5));
    }
    let (status, err) = interrupt(&mut run);
    for &m in &masters[1..] {
        cluster.nodes()[m].resume().expect("resume");
    }
    // Paused past cluster-node-timeout on a loaded machine, a master may
    // have been flagged failed meanwhile; the layout is read once the
    // nodes agree again.
    cluster
        .wait_ok(Duration::from_secs(30))
        .expect("cluster ok");
    eprintln!("{printed}{}", rest.join().expect("stdout"));
    assert!(!status.success());
    assert!(
        err.contains("interrupted while moving slot")
            && err.contains("CANCELSLOTMIGRATIONS")
            && err.contains("ended cancelled"),
        "{err}"
    );
    let jobs = cluster.nodes()[source]
        .cmd(&["CLUSTER", "GETSLOTMIGRATIONS"])
        .map(|v| format!("{v:?}"))
        .expect("GETSLOTMIGRATIONS");
    assert!(jobs.contains("cancelled"), "{jobs}");
    assert_eq!(layout(&cluster), before, "a slot moved");
    for tag in &tags {
        let keys: i64 = redis::cmd("CLUSTER")
            .arg("COUNTKEYSINSLOT")
            .arg(slot_of(tag))
            .query(&mut node)
            .expect("COUNTKEYSINSLOT");
        assert_eq!(keys, 2000, "{tag}");
    }
}

/// Keys in each of the two loaded slots of the legacy test: enough
/// MIGRATE batches for the interrupt to land in the middle of one.
const LEGACY_KEYS: usize = 20_000;

#[test]
fn rebalance_interrupted_during_a_legacy_move_stops_and_the_next_run_finishes_it() {
    let (cluster, proxy) = common::rebalance::started();
    let masters = cluster.masters().expect("masters");
    let tags = tags_on(&cluster, masters[0], 2);
    let mut node = node_client(cluster.nodes()[masters[0]].addr());
    for tag in &tags {
        for chunk in 0..LEGACY_KEYS / 1000 {
            let mut pipe = redis::pipe();
            for i in chunk * 1000..(chunk + 1) * 1000 {
                pipe.cmd("SET").arg(format!("{tag}:{i}")).arg(i).ignore();
            }
            pipe.query::<()>(&mut node).expect("write keys");
        }
    }
    // Reads through orthrus for its own measure (the one both engines have).
    let mut con = proxy.client();
    for i in 0..3000 {
        let _: Option<i64> = redis::cmd("GET")
            .arg(format!("{}:{}", tags[i % 2], i % LEGACY_KEYS))
            .query(&mut con)
            .expect("GET");
    }
    let mut run = start(&proxy, &["--method", "legacy", "--apply", "--yes"]);
    let (printed, rest) = read_until(&mut run, "moves:");
    // Interrupted once a slot is MIGRATING on the source.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !layout(&cluster).iter().any(|l| l.contains("->-")) {
        assert!(
            run.try_wait().expect("wait").is_none(),
            "the run ended before a slot was seen migrating"
        );
        assert!(Instant::now() < deadline, "no slot ever migrating");
        std::thread::sleep(Duration::from_millis(2));
    }
    let (status, err) = interrupt(&mut run);
    eprintln!("{printed}{}", rest.join().expect("stdout"));
    assert!(!status.success());
    assert!(
        err.contains("interrupted while moving slot") && err.contains("may be left half-moved"),
        "{err}"
    );
    assert!(
        layout(&cluster).iter().any(|l| l.contains("->-")),
        "nothing half-moved"
    );

    let out = rebalance(&proxy, &["--method", "legacy", "--apply", "--yes"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("is half-moved") && text.contains("finished"),
        "{text}"
    );
    assert!(
        layout(&cluster).iter().all(|l| !l.contains('[')),
        "{:?}",
        layout(&cluster)
    );
    for tag in &tags {
        let keys: Vec<String> = (0..LEGACY_KEYS).map(|i| format!("{tag}:{i}")).collect();
        let values: Vec<Option<usize>> =
            redis::cmd("MGET").arg(&keys).query(&mut con).expect("MGET");
        assert!(
            values.iter().enumerate().all(|(i, v)| *v == Some(i)),
            "{tag}: keys lost or changed"
        );
    }
}
