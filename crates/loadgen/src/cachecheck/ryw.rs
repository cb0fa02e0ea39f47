//! The read-your-writes part: `--clients` threads through orthrus (one
//! worker, cache on), each writing and reading its own `--keys-per-client`
//! keys (each written once first, then a write in five, keys drawn at
//! random), every read judged against the client's last acknowledged
//! write (`ryw_check`). While they run, in order: the slot of
//! every client's first key (they share a hash tag) migrates to another
//! master, key by key; another master fails over gracefully (`CLUSTER
//! FAILOVER` on its replica), waited for until the replica is master and
//! orthrus routes to it; and FLUSHALL runs through orthrus. Each at a share
//! of `--ops` (20 %, 45 %, 75 %); the clients go on until `--ops` are done
//! and all three are over.
//!
//! Errors replies are reported with their text. The only ones allowed are
//! orthrus's own for a write in flight whose outcome is unknown ("may or
//! may not have been applied"), after which that key is unknown until the
//! client's next write. The part fails on a violation, any other error, or
//! when the cache answered under a tenth of the reads.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow, bail, ensure};
use orthrus_cluster::Slot;
use orthrus_devcluster::Cluster;
use orthrus_resp::Value;

use super::ryw_check::{Expect, FlushWindow, Judged};
use super::{
    CacheCheckArgs, CacheInfo, Env, IO_TIMEOUT, Rig, cache_on, info_numbers, load_average,
};
use crate::conn::{Conn, reply_text};
use crate::zipf::Rng;

/// The hash tag of every client's first key: the slot that migrates.
const MIGRATING_TAG: &str = "cc-ryw-m";
/// Keys moved per MIGRATE, and the pause between two: the slot stays
/// half moved (ASK) for a while under traffic.
const MIGRATE_BATCH: usize = 5;
const MIGRATE_PAUSE: Duration = Duration::from_millis(20);
/// How long a failover and orthrus's following it may take.
const FAILOVER_TIMEOUT: Duration = Duration::from_secs(30);
/// The text of orthrus's error for a request whose outcome is unknown.
const UNKNOWN_OUTCOME: &str = "may or may not have been applied";
/// INFO stats fields that show orthrus followed the slot and the master.
const REDIRECTS: [&str; 3] = [
    "orthrus_redirects_moved",
    "orthrus_redirects_ask",
    "orthrus_topology_refreshes",
];
/// Examples kept per kind.
const EXAMPLES: usize = 10;

/// What every client thread shares with the controller.
struct Shared {
    epoch: Instant,
    ops: AtomicU64,
    stop: AtomicBool,
    /// Clients still running.
    running: AtomicUsize,
    flush_sent: AtomicU64,
    flush_done: AtomicU64,
}

/// One client's counts.
#[derive(Debug, Default)]
struct Report {
    ops: u64,
    reads: u64,
    writes: u64,
    older: u64,
    lost: u64,
    flushed_nils: u64,
    unknown_outcomes: u64,
    errors: u64,
    examples: Vec<String>,
    error_texts: Vec<String>,
    allowed_texts: Vec<String>,
    /// Why the client stopped early (its connection failed).
    fatal: Option<String>,
}

/// A disturbance: what, when (seconds since the start) and after how
/// many operations.
struct Event {
    what: String,
    at: Duration,
    took: Duration,
    ops: u64,
}

fn since(epoch: Instant) -> u64 {
    u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

fn key_name(client: usize, j: usize) -> String {
    if j == 0 {
        format!("{{{MIGRATING_TAG}}}:{client}")
    } else {
        format!("cc-ryw:{client}:{j}")
    }
}

fn keep(list: &mut Vec<String>, text: String) {
    if list.len() < EXAMPLES {
        list.push(text);
    }
}

// === impl Shared ===

impl Shared {
    fn flush(&self) -> FlushWindow {
        FlushWindow {
            sent: self.flush_sent.load(Ordering::SeqCst),
            done: self.flush_done.load(Ordering::SeqCst),
        }
    }
}

/// Runs the part; whether it passed.
pub(super) fn run(args: &CacheCheckArgs, env: &Env) -> Result<bool> {
    ensure!(args.clients > 0, "--clients must be at least 1");
    ensure!(
        (1..=10_000).contains(&args.keys_per_client),
        "--keys-per-client must be in 1..=10000"
    );
    ensure!(args.ops > 0, "--ops must be at least 1");
    println!(
        "ryw: {} clients through orthrus (1 worker, cache on), {} keys each, a write in five, {} operations; load average {}",
        args.clients,
        args.keys_per_client,
        args.ops,
        load_average()
    );
    let mut rig = Rig::start(env, 1, 1, cache_on(None))?;
    let before = CacheInfo::read(rig.addr)?;
    let redirects_before = info_numbers(rig.addr, "stats", &REDIRECTS)?;
    let shared = Arc::new(Shared {
        epoch: Instant::now(),
        ops: AtomicU64::new(0),
        stop: AtomicBool::new(false),
        running: AtomicUsize::new(args.clients),
        flush_sent: AtomicU64::new(FlushWindow::NONE.sent),
        flush_done: AtomicU64::new(FlushWindow::NONE.done),
    });
    let clients: Vec<_> = (0..args.clients)
        .map(|c| {
            let shared = Arc::clone(&shared);
            let (addr, keys) = (rig.addr, args.keys_per_client);
            thread::spawn(move || {
                let report = client(addr, c, keys, &shared);
                shared.running.fetch_sub(1, Ordering::SeqCst);
                report
            })
        })
        .collect();
    let events = disturb(&rig, args, env, &shared)
        .and_then(|e| wait_ops(&shared, args.ops, env).map(|()| e));
    shared.stop.store(true, Ordering::SeqCst);
    let elapsed = shared.epoch.elapsed();
    let mut total = Report::default();
    for (c, h) in clients.into_iter().enumerate() {
        let r = h.join().unwrap_or_else(|_| Report {
            fatal: Some("panicked".into()),
            ..Report::default()
        });
        add(&mut total, r, c);
    }
    // The report is printed whatever happened, then a failed disturbance
    // fails the part.
    let (events, failure) = match events {
        Ok(events) => (events, None),
        Err(e) => (Vec::new(), Some(e)),
    };
    if let Err(e) = rig.proxy.check_alive() {
        print_report(&total, &events, &CacheInfo::default(), elapsed);
        return Err(e);
    }
    let cache = CacheInfo::read(rig.addr)?.since(&before);
    print_report(&total, &events, &cache, elapsed);
    let redirects = info_numbers(rig.addr, "stats", &REDIRECTS)?;
    let grown: Vec<String> = REDIRECTS
        .iter()
        .zip(redirects.iter().zip(&redirects_before))
        .map(|(name, (a, b))| format!("{name} {}", a.saturating_sub(*b)))
        .collect();
    println!("  orthrus followed: {}", grown.join(", "));
    if let Some(e) = failure {
        return Err(e);
    }
    Ok(verdict(&total, &cache))
}

/// Whether the run passed; prints why not, and the verdict.
fn verdict(total: &Report, cache: &CacheInfo) -> bool {
    let violations = total.older + total.lost;
    let served = cache.hits * 10 >= total.reads;
    if !served {
        println!(
            "  the cache answered {} of {} reads: under a tenth, the check says little about it",
            cache.hits, total.reads
        );
    }
    let ok = violations == 0 && total.errors == 0 && total.fatal.is_none() && served;
    println!(
        "ryw: {} (load average {})",
        if ok { "PASSED" } else { "FAILED" },
        load_average()
    );
    ok
}

fn add(total: &mut Report, r: Report, c: usize) {
    total.ops += r.ops;
    total.reads += r.reads;
    total.writes += r.writes;
    total.older += r.older;
    total.lost += r.lost;
    total.flushed_nils += r.flushed_nils;
    total.unknown_outcomes += r.unknown_outcomes;
    total.errors += r.errors;
    for e in r.examples {
        keep(&mut total.examples, format!("client {c}: {e}"));
    }
    for e in r.error_texts {
        keep(&mut total.error_texts, format!("client {c}: {e}"));
    }
    for e in r.allowed_texts {
        keep(&mut total.allowed_texts, format!("client {c}: {e}"));
    }
    if let Some(f) = r.fatal {
        total.errors += 1;
        let text = format!("client {c} stopped: {f}");
        keep(&mut total.error_texts, text.clone());
        total.fatal.get_or_insert(text);
    }
}

/// The migration, the failover and the FLUSHALL, each once the clients
/// have done its share of the operations.
fn disturb(rig: &Rig, args: &CacheCheckArgs, env: &Env, shared: &Shared) -> Result<Vec<Event>> {
    let mut events = Vec::new();
    let slot = Slot::for_key(MIGRATING_TAG.as_bytes()).get();
    let from = rig.cluster.master_of_slot(slot)?;
    let masters = rig.cluster.masters()?;
    let to = *masters
        .iter()
        .find(|&&m| m != from)
        .ok_or_else(|| anyhow!("no second master"))?;
    let victim = *masters
        .iter()
        .find(|&&m| m != from && m != to)
        .ok_or_else(|| anyhow!("no third master"))?;

    wait_ops(shared, args.ops / 5, env)?;
    let (at, ops) = (shared.epoch.elapsed(), shared.ops.load(Ordering::SeqCst));
    let moved = migrate(&rig.cluster, slot, from, to, env)?;
    events.push(Event {
        what: format!("slot {slot} ({moved} keys) migrated from node {from} to node {to}"),
        at,
        took: shared.epoch.elapsed().saturating_sub(at),
        ops,
    });

    wait_ops(shared, args.ops * 9 / 20, env)?;
    let (at, ops) = (shared.epoch.elapsed(), shared.ops.load(Ordering::SeqCst));
    let promoted = fail_over(rig, victim, env)?;
    events.push(Event {
        what: format!(
            "master node {victim} failed over to its replica node {promoted} (CLUSTER FAILOVER), orthrus following"
        ),
        at,
        took: shared.epoch.elapsed().saturating_sub(at),
        ops,
    });

    wait_ops(shared, args.ops * 3 / 4, env)?;
    let (at, ops) = (shared.epoch.elapsed(), shared.ops.load(Ordering::SeqCst));
    let mut conn = Conn::connect(rig.addr, IO_TIMEOUT)?;
    shared
        .flush_sent
        .store(since(shared.epoch), Ordering::SeqCst);
    let reply = conn.call(&["FLUSHALL"])?;
    shared
        .flush_done
        .store(since(shared.epoch), Ordering::SeqCst);
    if !matches!(&reply, Value::Simple(s) if &s[..] == b"OK") {
        bail!("FLUSHALL through orthrus answered {}", reply_text(&reply));
    }
    events.push(Event {
        what: "FLUSHALL through orthrus".into(),
        at,
        took: shared.epoch.elapsed().saturating_sub(at),
        ops,
    });
    Ok(events)
}

/// Waits until the clients have done `ops` operations (or all stopped).
fn wait_ops(shared: &Shared, ops: u64, env: &Env) -> Result<()> {
    while shared.ops.load(Ordering::SeqCst) < ops {
        env.check("waiting for the clients' operations")?;
        if shared.running.load(Ordering::SeqCst) == 0 {
            bail!("every client stopped");
        }
        thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

/// Moves `slot` from `from` to `to` a few keys at a time; the keys moved.
fn migrate(cluster: &Cluster, slot: u16, from: usize, to: usize, env: &Env) -> Result<usize> {
    cluster.begin_migration(slot, from, to)?;
    let mut moved = 0;
    loop {
        env.check("migrating the slot")?;
        let n = cluster.migrate_keys(slot, from, to, MIGRATE_BATCH)?;
        if n == 0 {
            break;
        }
        moved += n;
        thread::sleep(MIGRATE_PAUSE);
    }
    cluster.finish_migration(slot, to)?;
    Ok(moved)
}

/// `CLUSTER FAILOVER` on `victim`'s replica; waits until it is master and
/// orthrus lists it among its masters instead of `victim`.
fn fail_over(rig: &Rig, victim: usize, env: &Env) -> Result<usize> {
    let cluster = &rig.cluster;
    let replica = *cluster
        .replicas_of(victim)?
        .first()
        .ok_or_else(|| anyhow!("master node {victim} has no replica"))?;
    let node = |i: usize| cluster.nodes().get(i).ok_or_else(|| anyhow!("no node {i}"));
    node(replica)?.cmd_ok(&["CLUSTER", "FAILOVER"])?;
    let promoted = cluster.wait_failover(victim, FAILOVER_TIMEOUT)?;
    let (new, old) = (node(promoted)?.addr(), node(victim)?.addr());
    let deadline = Instant::now() + FAILOVER_TIMEOUT;
    loop {
        env.check("waiting for orthrus to follow the failover")?;
        let masters = orthrus_masters(rig.addr)?;
        let has = |a: SocketAddr| masters.iter().any(|m| m == &a.to_string());
        if has(new) && !has(old) {
            return Ok(promoted);
        }
        if Instant::now() >= deadline {
            bail!("orthrus still routes to {masters:?}, not to the promoted {new}");
        }
        thread::sleep(Duration::from_millis(50));
    }
}

/// The masters orthrus routes to (INFO `# Load`).
fn orthrus_masters(addr: SocketAddr) -> Result<Vec<String>> {
    let mut conn = Conn::connect(addr, IO_TIMEOUT)?;
    let text = match conn.call(&["INFO", "load"])? {
        Value::Bulk(t) | Value::Verbatim { text: t, .. } => {
            String::from_utf8_lossy(&t).into_owned()
        }
        other => bail!("INFO load answered {}", reply_text(&other)),
    };
    Ok(text
        .lines()
        .filter_map(|l| l.split_once(":addr="))
        .filter_map(|(_, rest)| rest.split(',').next())
        .map(str::to_owned)
        .collect())
}

/// One client: its keys, its state of each, until told to stop.
fn client(addr: SocketAddr, c: usize, keys: usize, shared: &Shared) -> Report {
    let mut report = Report::default();
    let mut conn = match Conn::connect(addr, IO_TIMEOUT) {
        Ok(conn) => conn,
        Err(e) => {
            report.fatal = Some(format!("{e:#}"));
            return report;
        }
    };
    let names: Vec<String> = (0..keys).map(|j| key_name(c, j)).collect();
    let mut state = vec![Expect::Unknown; keys];
    let mut seq = vec![0u64; keys];
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (c as u64 + 1).wrapping_mul(0xbf58_476d_1ce4_e5b9));
    let mut i = 0usize;
    while !shared.stop.load(Ordering::Relaxed) {
        // Every key written once first, then a write in five.
        let (j, write) = if i < keys {
            (i, true)
        } else {
            ((rng.next() % keys as u64) as usize, rng.next() % 5 == 0)
        };
        i += 1;
        let (Some(name), Some(st), Some(sq)) = (names.get(j), state.get_mut(j), seq.get_mut(j))
        else {
            break;
        };
        let step = if write {
            *sq += 1;
            write_key(&mut conn, name, *sq, st, shared, &mut report)
        } else {
            read_key(&mut conn, name, st, shared, &mut report)
        };
        if let Err(e) = step {
            report.fatal = Some(format!("{e:#}"));
            break;
        }
        report.ops += 1;
        shared.ops.fetch_add(1, Ordering::Relaxed);
    }
    report
}

fn write_key(
    conn: &mut Conn,
    name: &str,
    seq: u64,
    st: &mut Expect,
    shared: &Shared,
    report: &mut Report,
) -> Result<()> {
    report.writes += 1;
    let sent = since(shared.epoch);
    let reply = conn.call(&["SET", name, &seq.to_string()])?;
    match &reply {
        Value::Simple(s) if &s[..] == b"OK" => *st = Expect::written(seq, sent),
        Value::Error(e) => {
            *st = Expect::Unknown;
            let text = format!("SET {name} {seq}: {}", String::from_utf8_lossy(e));
            if text.contains(UNKNOWN_OUTCOME) {
                report.unknown_outcomes += 1;
                keep(&mut report.allowed_texts, text);
            } else {
                report.errors += 1;
                keep(&mut report.error_texts, text);
            }
        }
        other => bail!("SET {name} answered {}", reply_text(other)),
    }
    Ok(())
}

fn read_key(
    conn: &mut Conn,
    name: &str,
    st: &mut Expect,
    shared: &Shared,
    report: &mut Report,
) -> Result<()> {
    report.reads += 1;
    let start = since(shared.epoch);
    let reply = conn.call(&["GET", name])?;
    let end = since(shared.epoch);
    let got = match &reply {
        Value::Null => None,
        Value::Bulk(b) => Some(
            std::str::from_utf8(b)
                .ok()
                .and_then(|s| s.parse::<u64>().ok())
                .ok_or_else(|| anyhow!("GET {name} answered {}", reply_text(&reply)))?,
        ),
        Value::Error(e) => {
            report.errors += 1;
            keep(
                &mut report.error_texts,
                format!("GET {name}: {}", String::from_utf8_lossy(e)),
            );
            return Ok(());
        }
        other => bail!("GET {name} answered {}", reply_text(other)),
    };
    let was = *st;
    match st.read(got, start, end, shared.flush()) {
        Judged::Fine => {}
        Judged::FlushedNil => report.flushed_nils += 1,
        Judged::OlderValue => {
            report.older += 1;
            keep(
                &mut report.examples,
                format!("GET {name} at {start} ns returned {got:?}, expected {was:?}"),
            );
        }
        Judged::LostWrite => {
            report.lost += 1;
            keep(
                &mut report.examples,
                format!("GET {name} at {start} ns returned nil, expected {was:?}"),
            );
        }
    }
    Ok(())
}

fn print_report(total: &Report, events: &[Event], cache: &CacheInfo, elapsed: Duration) {
    println!(
        "  {} operations in {:.1} s: {} reads, {} writes",
        total.ops,
        elapsed.as_secs_f64(),
        total.reads,
        total.writes
    );
    for e in events {
        println!(
            "  at {:.2} s, after {} operations: {} (took {:.2} s)",
            e.at.as_secs_f64(),
            e.ops,
            e.what,
            e.took.as_secs_f64()
        );
    }
    println!(
        "  violations: {} (must be 0): {} older than the client's last acknowledged write, {} nil no FLUSHALL explains; nils the FLUSHALL explains: {}",
        total.older + total.lost,
        total.older,
        total.lost,
        total.flushed_nils
    );
    for e in &total.examples {
        println!("    {e}");
    }
    println!(
        "  error replies: {} not allowed, {} writes whose outcome orthrus said is unknown (allowed)",
        total.errors, total.unknown_outcomes
    );
    for e in total.error_texts.iter().chain(&total.allowed_texts) {
        println!("    {e}");
    }
    println!("  INFO # Cache during the run: {}", cache.line());
}
