//! `orthrus rebalance` and what each engine offers: on Valkey 9, moves by
//! atomic slot migration (`CLUSTER MIGRATESLOTS`) under a stream of
//! writes, and plans from the engine's own per-slot figures (`CLUSTER
//! SLOT-STATS`), which see clients that bypass orthrus; on Redis 7, which
//! has neither, `--method atomic` and `--by cpu` are refused before
//! anything moves. Each test runs on one engine and says so on the other.
//! Interrupts: `rebalance_interrupts.rs`.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::Proxy;
use common::rebalance::{layout, node_client, planned, rebalance, slot_of, tags_on};
use orthrus_devcluster::Engine;

/// The longest a workload thread runs, whatever happens.
const WORKLOAD_LIMIT: Duration = Duration::from_secs(120);

/// A thread that runs `step` on a connection to `url` until `stop`,
/// returning what it gathered.
fn spawn_loop<T: Send + 'static>(
    url: String,
    stop: &Arc<AtomicBool>,
    mut state: T,
    mut step: impl FnMut(&mut redis::Connection, &mut T, usize) + Send + 'static,
) -> JoinHandle<T> {
    let stop = stop.clone();
    std::thread::spawn(move || {
        let mut con = redis::Client::open(url)
            .and_then(|c| c.get_connection())
            .expect("connect");
        let started = Instant::now();
        let mut i = 0;
        while !stop.load(Ordering::Relaxed) && started.elapsed() < WORKLOAD_LIMIT {
            step(&mut con, &mut state, i);
            i += 1;
        }
        state
    })
}

/// GETs through orthrus spread over 300 keys everywhere: enough requests
/// for orthrus's own measure, and an even load by it.
fn cold_reads(proxy: &Proxy, stop: &Arc<AtomicBool>) -> JoinHandle<u64> {
    spawn_loop(proxy.url(), stop, 0_u64, |con, errors, i| {
        let got: redis::RedisResult<Option<String>> = redis::cmd("GET")
            .arg(format!("cold:{}", i % 300))
            .query(con);
        if let Err(e) = got {
            eprintln!("cold GET: {e}");
            *errors += 1;
        }
    })
}

#[test]
fn rebalance_on_valkey_moves_by_atomic_migration_with_no_client_error() {
    if !common::runs_on(
        Engine::Valkey,
        "CLUSTER MIGRATESLOTS is Valkey 9's (REDIS_SERVER=valkey-server runs this)",
    ) {
        return;
    }
    let (cluster, proxy) = common::rebalance::started();
    let masters = cluster.masters().expect("masters");
    let hot = tags_on(&cluster, masters[0], 4);
    // 5,000 keys of 1 KiB in each hot slot, for the moves to take a while.
    let mut con = proxy.client();
    let value = "x".repeat(1024);
    for tag in &hot {
        for chunk in (0..5000).collect::<Vec<_>>().chunks(500) {
            let mut mset = redis::cmd("MSET");
            for i in chunk {
                mset.arg(format!("{tag}:{i}")).arg(&value);
            }
            let () = mset.query(&mut con).expect("MSET");
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    // INCR of a counter in each hot slot, by turns, through orthrus.
    let incr = {
        let hot = hot.clone();
        spawn_loop(
            proxy.url(),
            &stop,
            (vec![0_i64; hot.len()], Vec::new()),
            move |con, (acked, errors): &mut (Vec<i64>, Vec<String>), i| {
                let n = i % hot.len();
                match redis::cmd("INCR")
                    .arg(format!("{}ctr", hot[n]))
                    .query::<i64>(con)
                {
                    Ok(_) => acked[n] += 1,
                    Err(e) => errors.push(e.to_string()),
                }
            },
        )
    };
    // Reads of the hot slots: most of the load orthrus measures.
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let hot = hot.clone();
            spawn_loop(proxy.url(), &stop, 0_u64, move |con, errors, i| {
                let key = format!("{}:{}", hot[i % hot.len()], i % 5000);
                if let Err(e) = redis::cmd("STRLEN").arg(key).query::<i64>(con) {
                    eprintln!("STRLEN: {e}");
                    *errors += 1;
                }
            })
        })
        .collect();
    let cold = cold_reads(&proxy, &stop);
    std::thread::sleep(Duration::from_secs(4));

    let out = rebalance(&proxy, &["--apply", "--yes"]);
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("method: atomic slot migration (CLUSTER MIGRATESLOTS)"),
        "{text}"
    );
    assert!(
        text.contains("moved by atomic slot migration (CLUSTER MIGRATESLOTS)"),
        "{text}"
    );
    let moved: Vec<&String> = hot
        .iter()
        .filter(|t| cluster.master_of_slot(slot_of(t)).ok() != Some(masters[0]))
        .collect();
    assert!(!moved.is_empty(), "no hot slot left its master");
    // The source's own record: MIGRATESLOTS moved them, nothing else.
    let record = cluster.nodes()[masters[0]]
        .cmd(&["CLUSTER", "GETSLOTMIGRATIONS"])
        .map(|v| format!("{v:?}"))
        .expect("GETSLOTMIGRATIONS");
    for tag in &moved {
        let range = format!("{0}-{0}", slot_of(tag));
        assert!(record.contains(&range), "{range} not in {record}");
    }

    let (acked, errors) = incr.join().expect("INCR thread");
    let read_errors: u64 = readers.into_iter().map(|r| r.join().expect("reader")).sum();
    let cold_errors = cold.join().expect("cold reader");
    eprintln!(
        "INCRs acknowledged {acked:?}, {} errors; {read_errors} read errors",
        errors.len()
    );
    assert!(errors.is_empty(), "{:?}", errors.first());
    assert_eq!(read_errors + cold_errors, 0);
    let mut con = proxy.client();
    for (tag, acked) in hot.iter().zip(&acked) {
        let counter: i64 = redis::cmd("GET")
            .arg(format!("{tag}ctr"))
            .query(&mut con)
            .expect("GET");
        assert_eq!(counter, *acked, "{tag}");
        let keys: i64 = redis::cmd("CLUSTER")
            .arg("COUNTKEYSINSLOT")
            .arg(slot_of(tag))
            .query(&mut node_client(
                cluster.nodes()[cluster.master_of_slot(slot_of(tag)).expect("owner")].addr(),
            ))
            .expect("COUNTKEYSINSLOT");
        assert_eq!(keys, 5001, "{tag}");
    }
}

#[test]
fn rebalance_method_atomic_and_by_cpu_on_redis_are_refused_before_anything_moves() {
    if !common::runs_on(
        Engine::Redis,
        "this is about an engine without CLUSTER MIGRATESLOTS and SLOT-STATS (Redis 7); Valkey has both",
    ) {
        return;
    }
    let (cluster, proxy) = common::rebalance::started();
    let masters = cluster.masters().expect("masters");
    let hot = tags_on(&cluster, masters[0], 4);
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let reads = done.clone();
    let reader = spawn_loop(proxy.url(), &stop, 0_u64, move |con, errors, i| {
        let key = format!("{}:{}", hot[i % hot.len()], i % 50);
        if redis::cmd("GET")
            .arg(key)
            .query::<Option<String>>(con)
            .is_err()
        {
            *errors += 1;
        }
        reads.store(i + 1, Ordering::Relaxed);
    });
    // Enough requests for orthrus's measure (rebalance wants 1,000 in its
    // window), however slow the machine.
    std::thread::sleep(Duration::from_secs(3));
    orthrus_devcluster::wait_until(Duration::from_secs(20), "2,000 reads", || {
        let n = done.load(Ordering::Relaxed);
        (n >= 2000).then_some(()).ok_or(format!("{n} reads"))
    })
    .expect("reads");
    // There is something to move: a plan by orthrus's measure has moves.
    let out = rebalance(&proxy, &[]);
    assert!(out.status.success());
    assert!(!planned(&out).is_empty(), "no move planned");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("method: legacy migration"), "{text}");
    let before = layout(&cluster);

    let out = rebalance(&proxy, &["--method", "atomic", "--apply", "--yes"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--method atomic")
            && err.contains("not offer CLUSTER MIGRATESLOTS")
            && err.contains("nothing changed"),
        "{err}"
    );
    assert!(planned(&out).is_empty(), "a plan was printed");

    let out = rebalance(&proxy, &["--by", "cpu", "--apply", "--yes"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("CLUSTER SLOT-STATS failed") && err.contains("--by requests"),
        "{err}"
    );
    stop.store(true, Ordering::Relaxed);
    assert_eq!(reader.join().expect("reader"), 0);
    assert_eq!(layout(&cluster), before, "something moved");
}

#[test]
fn rebalance_by_cpu_sees_a_hot_slot_that_bypasses_orthrus() {
    if !common::runs_on(
        Engine::Valkey,
        "CLUSTER SLOT-STATS is Valkey's (8 and later; REDIS_SERVER=valkey-server runs this)",
    ) {
        return;
    }
    let (cluster, proxy) = common::rebalance::started();
    let masters = cluster.masters().expect("masters");
    let stop = Arc::new(AtomicBool::new(false));
    let cold = cold_reads(&proxy, &stop);

    // CPU figures are off by default: refused, saying how to turn them
    // on, and left off.
    let out = rebalance(&proxy, &["--by", "cpu", "--sample", "1"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("CONFIG SET cluster-slot-stats-enabled yes"),
        "{err}"
    );
    for &m in &masters {
        let got = cluster.nodes()[m]
            .cmd(&["CONFIG", "GET", "cluster-slot-stats-enabled"])
            .map(|v| format!("{v:?}"))
            .expect("CONFIG GET");
        assert!(
            got.contains("no"),
            "turned on behind the operator's back: {got}"
        );
        cluster.nodes()[m]
            .cmd_ok(&["CONFIG", "SET", "cluster-slot-stats-enabled", "yes"])
            .expect("CONFIG SET");
    }

    // Two hot slots on the first master, driven straight at the node:
    // LRANGE of a 500-element list, which costs the node CPU.
    let hot = tags_on(&cluster, masters[0], 2);
    let node = cluster.nodes()[masters[0]].addr();
    let mut con = node_client(node);
    for tag in &hot {
        let items: Vec<String> = (0..500).map(|i| format!("item{i}")).collect();
        let _: i64 = redis::cmd("RPUSH")
            .arg(format!("{tag}list"))
            .arg(&items)
            .query(&mut con)
            .expect("RPUSH");
    }
    let direct: Vec<_> = hot
        .iter()
        .map(|tag| {
            let key = format!("{tag}list");
            spawn_loop(
                format!("redis://{node}/"),
                &stop,
                0_u64,
                move |con, n, _| {
                    let got: Vec<String> = redis::cmd("LRANGE")
                        .arg(&key)
                        .arg(0)
                        .arg(-1)
                        .query(con)
                        .expect("LRANGE on the node");
                    assert_eq!(got.len(), 500);
                    *n += 1;
                },
            )
        })
        .collect();
    std::thread::sleep(Duration::from_secs(3));

    let by_cpu = rebalance(&proxy, &["--by", "cpu", "--sample", "3"]);
    let by_requests = rebalance(&proxy, &[]);
    stop.store(true, Ordering::Relaxed);
    let hot_slots: Vec<u16> = hot.iter().map(|t| slot_of(t)).collect();
    assert!(by_cpu.status.success());
    let text = String::from_utf8_lossy(&by_cpu.stdout);
    assert!(
        text.contains("from CLUSTER SLOT-STATS of every master (all clients)"),
        "{text}"
    );
    let moves = planned(&by_cpu);
    assert!(
        moves.iter().any(|s| hot_slots.contains(s)),
        "the plan by cpu does not move a hot slot {hot_slots:?}: {moves:?}"
    );
    assert!(by_requests.status.success());
    let text = String::from_utf8_lossy(&by_requests.stdout);
    assert!(text.contains("(its own clients only)"), "{text}");
    let moves = planned(&by_requests);
    assert!(
        !moves.iter().any(|s| hot_slots.contains(s)),
        "orthrus cannot have seen the hot slots {hot_slots:?}: {moves:?}"
    );
    let lranges: u64 = direct.into_iter().map(|d| d.join().expect("direct")).sum();
    eprintln!("{lranges} LRANGEs straight to the node");
    assert_eq!(cold.join().expect("cold reader"), 0);
}

/// An atomic migration someone else started is reported, not cancelled:
/// a plan leaves its slot alone; `--apply` waits for it to end first.
#[test]
fn rebalance_reports_and_waits_for_an_atomic_migration_under_way() {
    if !common::runs_on(
        Engine::Valkey,
        "CLUSTER MIGRATESLOTS is Valkey 9's (REDIS_SERVER=valkey-server runs this)",
    ) {
        return;
    }
    let (cluster, proxy) = common::rebalance::started();
    let masters = cluster.masters().expect("masters");
    let (home, away) = (masters[0], masters[1]);
    let tag = &tags_on(&cluster, home, 1)[0];
    let slot = slot_of(tag).to_string();
    // Enough keys for the migration to outlast the start of a run.
    let mut node = node_client(cluster.nodes()[home].addr());
    for chunk in 0..200 {
        let mut pipe = redis::pipe();
        for i in chunk * 1000..(chunk + 1) * 1000 {
            pipe.cmd("SET").arg(format!("{tag}:{i}")).arg(i).ignore();
        }
        pipe.query::<()>(&mut node).expect("write keys");
    }
    let start = |from: usize, to: usize| {
        let id = cluster.node_id(to).expect("id");
        cluster.nodes()[from]
            .cmd_ok(&[
                "CLUSTER",
                "MIGRATESLOTS",
                "SLOTSRANGE",
                &slot,
                &slot,
                "NODE",
                &id,
            ])
            .expect("MIGRATESLOTS");
    };

    start(home, away);
    let out = rebalance(&proxy, &["--by", "keys", "--apply", "--yes"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let range = format!("slots {slot}-{slot}");
    assert!(
        text.contains("an atomic migration is under way on") && text.contains(&range),
        "{text}"
    );
    assert!(text.contains(&format!("{range} ended success")), "{text}");
    assert_eq!(cluster.master_of_slot(slot_of(tag)).ok(), Some(away));

    start(away, home);
    let out = rebalance(&proxy, &["--by", "keys"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&range) && text.contains("--apply waits for these to end first"),
        "{text}"
    );
    // (That the plan leaves its slot alone is unit-tested in
    // rebalance/mod.rs: one loaded slot here could not move anyway.)
    // Not cancelled: it ends on its own.
    let deadline = Instant::now() + Duration::from_secs(30);
    while cluster.master_of_slot(slot_of(tag)).ok() != Some(home) {
        assert!(Instant::now() < deadline, "the migration never ended");
        std::thread::sleep(Duration::from_millis(50));
    }
    let jobs = cluster.nodes()[away]
        .cmd(&["CLUSTER", "GETSLOTMIGRATIONS"])
        .map(|v| format!("{v:?}"))
        .expect("GETSLOTMIGRATIONS");
    assert!(!jobs.contains("cancelled"), "{jobs}");
}
