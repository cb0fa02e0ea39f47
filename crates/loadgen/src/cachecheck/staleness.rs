//! The staleness part: one writer straight to the hot keys' master
//! (bypassing orthrus) sets them in turn to a counter, 1 to `--writes`
//! (write i goes to key i mod `--hot-keys`), and records when each write
//! was acknowledged; `--readers` threads read the keys in turn through
//! orthrus (one worker, cache on), request/response, recording when each
//! read started and ended and what it returned.
//!
//! Afterwards, for every read: the newest write to its key acknowledged
//! 10 ms or more before the read started must not be newer than what it
//! returned (the criterion: 0 such reads); a read older than a write
//! acknowledged before it started at all is counted as stale, with its
//! lag. For every write: the time from its acknowledgement to the end of
//! the first read of its key that returned it or a newer value (p50, p99,
//! max; 0 when a read saw it before the writer heard the reply), and how
//! many writes no read returned exactly (a newer one overtook them).
//!
//! The writer waits, before each write, until the readers have read
//! `--reads-per-write` times since the previous one (0: it does not wait),
//! so that a key is read a few times between two writes, and cached, on a
//! fast build and a slow one alike. The keys share one hash tag (one
//! master, one writer connection). The
//! part fails too when the cache served under a tenth of the reads: the
//! check would then say little about the cache.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail, ensure};
use orthrus_cluster::Slot;
use orthrus_resp::Value;

use super::{
    CacheCheckArgs, CacheInfo, Env, IO_TIMEOUT, Rig, cache_on, load_average, ms, quantile,
};
use crate::conn::{Conn, reply_text};

/// A read that starts this long after a write's acknowledgement must see
/// it (or newer).
const BOUND: Duration = Duration::from_millis(10);
/// How often a paced writer looks at the readers' count.
const PACE_POLL: Duration = Duration::from_micros(20);
/// How long readers go on after the last write.
const TAIL: Duration = Duration::from_millis(300);

/// What the writer and the readers share.
struct Shared {
    stop: AtomicBool,
    /// Reads done so far, by every reader.
    reads: AtomicU64,
    /// Readers still reading.
    readers: AtomicUsize,
}

/// One read through orthrus. Times in nanoseconds since the run began.
#[derive(Clone, Copy, Debug)]
struct Read {
    start: u64,
    end: u64,
    key: u32,
    value: u64,
}

/// What the reads and acknowledgements say.
#[derive(Debug, Default)]
struct Verdict {
    reads: u64,
    /// Reads older than a write acknowledged ≥ 10 ms before they started.
    violations: u64,
    /// Reads older than a write acknowledged before they started.
    stale: u64,
    /// The largest time from the acknowledgement of the first write newer
    /// than what a stale read returned to that read's start, µs.
    max_lag_us: u64,
    /// Reads that returned a value never written to their key.
    foreign: u64,
    /// Per write seen, µs from acknowledgement to first seen, sorted.
    visible_us: Vec<u64>,
    /// Writes no read returned exactly (a newer one was seen first).
    overtaken: u64,
    /// Writes no read returned, nor anything newer.
    unseen: u64,
}

fn key_name(k: u64) -> String {
    format!("{{cc-stale}}:{k}")
}

fn since(epoch: Instant) -> u64 {
    u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// Runs the part; whether it passed.
pub(super) fn run(args: &CacheCheckArgs, env: &Env) -> Result<bool> {
    ensure!(args.writes > 0, "--writes must be at least 1");
    ensure!(args.readers > 0, "--readers must be at least 1");
    ensure!(
        (1..=1000).contains(&args.hot_keys),
        "--hot-keys must be in 1..=1000"
    );
    println!(
        "staleness: {} writes straight to the master over {} hot keys (each after {} reads), {} readers through orthrus (1 worker, cache on); load average {}",
        args.writes,
        args.hot_keys,
        args.reads_per_write,
        args.readers,
        load_average()
    );
    let mut rig = Rig::start(env, 0, 1, cache_on(None))?;
    let slot = Slot::for_key(key_name(0).as_bytes()).get();
    let master = rig.cluster.master_of_slot(slot)?;
    let node = rig
        .cluster
        .nodes()
        .get(master)
        .ok_or_else(|| anyhow!("no node {master}"))?;
    let mut writer = Conn::connect(node.addr(), IO_TIMEOUT)?;
    for k in 0..args.hot_keys {
        expect_ok(&writer.call(&["SET", &key_name(k), "0"])?)?;
    }
    let before = CacheInfo::read(rig.addr)?;
    let epoch = Instant::now();
    let shared = Arc::new(Shared {
        stop: AtomicBool::new(false),
        reads: AtomicU64::new(0),
        readers: AtomicUsize::new(args.readers),
    });
    let readers: Vec<_> = (0..args.readers)
        .map(|r| {
            let shared = Arc::clone(&shared);
            let addr = rig.addr;
            let keys = args.hot_keys;
            thread::spawn(move || {
                let reads = read_loop(addr, r as u64, keys, epoch, &shared);
                shared.readers.fetch_sub(1, Ordering::SeqCst);
                reads
            })
        })
        .collect();
    let acks = write_all(&mut writer, args, env, epoch, &shared);
    // The counters when the last write was acknowledged: the tail's reads
    // (of the final values) do not count towards the cache's share.
    let at_last_write = match &acks {
        Ok(_) => {
            let info = CacheInfo::read(rig.addr);
            thread::sleep(TAIL);
            Some(info)
        }
        Err(_) => None,
    };
    shared.stop.store(true, Ordering::SeqCst);
    let mut reads = Vec::new();
    let mut failure = None;
    for (i, h) in readers.into_iter().enumerate() {
        match h.join() {
            Ok(Ok(mine)) => reads.extend(mine),
            Ok(Err(e)) => failure = Some(e.context(format!("reader {i}"))),
            Err(_) => failure = Some(anyhow!("reader {i} panicked")),
        }
    }
    let acks = acks?;
    if let Some(e) = failure {
        return Err(e);
    }
    let elapsed = epoch.elapsed();
    rig.proxy.check_alive()?;
    let after = CacheInfo::read(rig.addr)?;
    let at_last_write = at_last_write.transpose()?.unwrap_or(after);
    let v = judge(&acks, &reads, args.hot_keys);
    print_verdict(&v, elapsed);
    println!("  INFO # Cache before:             {}", before.line());
    println!(
        "  at the last write's acknowledgement: {}",
        at_last_write.line()
    );
    println!("  after the last reads:            {}", after.line());
    // Reads that started while the writer wrote, against the hits by then.
    let last_ack = acks.last().copied().unwrap_or(0);
    let reads_while_writing = reads.iter().filter(|r| r.start <= last_ack).count() as u64;
    let hits = at_last_write.since(&before).hits;
    let served = hits * 10 >= reads_while_writing;
    println!(
        "  the cache answered {hits} of the {reads_while_writing} reads that started while the writer wrote{}",
        if served {
            ""
        } else {
            ": under a tenth, the check says little about the cache"
        }
    );
    let ok = v.violations == 0 && v.foreign == 0 && v.unseen == 0 && served;
    println!(
        "staleness: {} (load average {})",
        if ok { "PASSED" } else { "FAILED" },
        load_average()
    );
    Ok(ok)
}

fn expect_ok(reply: &Value) -> Result<()> {
    if matches!(reply, Value::Simple(s) if &s[..] == b"OK") {
        Ok(())
    } else {
        bail!("SET answered {}", reply_text(reply))
    }
}

/// Writes 1..=N, each once the readers have read `--reads-per-write`
/// times since the one before; the acknowledgement time of each (index =
/// value; 0 for the initial value, set before the run).
fn write_all(
    writer: &mut Conn,
    args: &CacheCheckArgs,
    env: &Env,
    epoch: Instant,
    shared: &Shared,
) -> Result<Vec<u64>> {
    let mut acks = Vec::with_capacity(usize::try_from(args.writes + 1).unwrap_or(0));
    acks.push(0);
    let mut next = 0;
    for i in 1..=args.writes {
        if i % 1000 == 0 {
            env.check("writing")?;
        }
        while shared.reads.load(Ordering::Relaxed) < next {
            env.check("waiting for the readers")?;
            if shared.readers.load(Ordering::SeqCst) == 0 {
                bail!("every reader stopped");
            }
            thread::sleep(PACE_POLL);
        }
        next = shared.reads.load(Ordering::Relaxed) + args.reads_per_write;
        let reply = writer.call(&["SET", &key_name(i % args.hot_keys), &i.to_string()])?;
        acks.push(since(epoch));
        expect_ok(&reply).with_context(|| format!("write {i}"))?;
    }
    Ok(acks)
}

fn read_loop(
    addr: std::net::SocketAddr,
    first: u64,
    keys: u64,
    epoch: Instant,
    shared: &Shared,
) -> Result<Vec<Read>> {
    let mut conn = Conn::connect(addr, IO_TIMEOUT)?;
    let names: Vec<String> = (0..keys).map(key_name).collect();
    let mut reads = Vec::new();
    let mut k = first % keys;
    while !shared.stop.load(Ordering::Relaxed) {
        let name = names.get(k as usize).map_or("", String::as_str);
        let start = since(epoch);
        let reply = conn.call(&["GET", name])?;
        let end = since(epoch);
        let value = match &reply {
            Value::Bulk(b) => std::str::from_utf8(b)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| anyhow!("GET {name} answered {}", reply_text(&reply)))?,
            other => bail!("GET {name} answered {}", reply_text(other)),
        };
        reads.push(Read {
            start,
            end,
            key: k as u32,
            value,
        });
        shared.reads.fetch_add(1, Ordering::Relaxed);
        k = (k + 1) % keys;
    }
    Ok(reads)
}

/// Judges the reads against the acknowledgements (`acks[i]`: write i's).
fn judge(acks: &[u64], reads: &[Read], keys: u64) -> Verdict {
    let bound = BOUND.as_nanos() as u64;
    let writes = (acks.len() as u64).saturating_sub(1);
    // Per key, its writes in order: (value, ack); the initial 0 first.
    let per_key: Vec<Vec<(u64, u64)>> = (0..keys)
        .map(|k| {
            std::iter::once((0, 0))
                .chain(
                    (1..=writes)
                        .filter(|i| i % keys == k)
                        .map(|i| (i, acks.get(i as usize).copied().unwrap_or(0))),
                )
                .collect()
        })
        .collect();
    let mut v = Verdict {
        reads: reads.len() as u64,
        ..Verdict::default()
    };
    // The earliest end of a read that returned exactly value i.
    let mut first_end = vec![u64::MAX; acks.len()];
    for r in reads {
        let Some(list) = per_key.get(r.key as usize) else {
            v.foreign += 1;
            continue;
        };
        let written = r.value <= writes && (r.value == 0 || r.value % keys == u64::from(r.key));
        if !written {
            v.foreign += 1;
            continue;
        }
        if let Some(slot) = first_end.get_mut(r.value as usize) {
            *slot = (*slot).min(r.end);
        }
        // Writes acknowledged by the read's start (and by 10 ms before).
        let acked = list.partition_point(|&(_, ack)| ack <= r.start);
        let acked_bound = list.partition_point(|&(_, ack)| ack.saturating_add(bound) <= r.start);
        let newest = |n: usize| {
            n.checked_sub(1)
                .and_then(|i| list.get(i))
                .map_or(0, |w| w.0)
        };
        if r.value < newest(acked_bound) {
            v.violations += 1;
        }
        if r.value < newest(acked) {
            v.stale += 1;
            // The first write newer than the value read.
            let next = list.partition_point(|&(value, _)| value <= r.value);
            if let Some(&(_, ack)) = list.get(next) {
                v.max_lag_us = v.max_lag_us.max(r.start.saturating_sub(ack) / 1000);
            }
        }
    }
    // Seen at: the earliest end of a read of the key returning it or newer.
    let mut newest_seen = vec![u64::MAX; keys as usize];
    let mut visible = Vec::with_capacity(acks.len());
    for i in (1..=writes).rev() {
        let k = (i % keys) as usize;
        let exact = first_end.get(i as usize).copied().unwrap_or(u64::MAX);
        let Some(seen) = newest_seen.get_mut(k) else {
            continue;
        };
        *seen = (*seen).min(exact);
        if *seen == u64::MAX {
            v.unseen += 1;
            continue;
        }
        if exact == u64::MAX {
            v.overtaken += 1;
        }
        let ack = acks.get(i as usize).copied().unwrap_or(0);
        visible.push(seen.saturating_sub(ack) / 1000);
    }
    visible.sort_unstable();
    v.visible_us = visible;
    v
}

fn print_verdict(v: &Verdict, elapsed: Duration) {
    let seen = &v.visible_us;
    println!(
        "  {} reads in {:.1} s; reads older than a write acknowledged ≥ 10 ms before they started: {} (must be 0)",
        v.reads,
        elapsed.as_secs_f64(),
        v.violations
    );
    println!(
        "  reads older than a write acknowledged before they started: {} (the oldest {} after that write's acknowledgement); values never written: {}",
        v.stale,
        ms(v.max_lag_us),
        v.foreign
    );
    println!(
        "  acknowledgement to first seen through orthrus, {} writes: p50 {}, p99 {}, max {}; overtaken before seen: {}; never seen: {}",
        seen.len(),
        ms(quantile(seen, 0.5)),
        ms(quantile(seen, 0.99)),
        ms(seen.last().copied().unwrap_or(0)),
        v.overtaken,
        v.unseen
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(start_ms: u64, end_ms: u64, key: u32, value: u64) -> Read {
        Read {
            start: start_ms * 1_000_000,
            end: end_ms * 1_000_000,
            key,
            value,
        }
    }

    #[test]
    fn a_read_older_than_a_write_acknowledged_10_ms_before_is_a_violation() {
        // One key; writes 1, 2, 3 acknowledged at 10, 20, 30 ms.
        let acks = [0, 10_000_000, 20_000_000, 30_000_000];
        let reads = [
            read(5, 6, 0, 0),
            read(15, 16, 0, 0), // stale, within 10 ms
            read(21, 22, 0, 1), // stale, within
            read(31, 32, 0, 1), // 11 ms after write 2: a violation
            read(45, 46, 0, 3),
            read(50, 51, 0, 7), // never written
        ];
        let v = judge(&acks, &reads, 1);
        assert_eq!((v.violations, v.stale, v.foreign), (1, 3, 1));
        assert_eq!(v.max_lag_us, 11_000);
        // Write 1 seen at 22 (12 ms), write 2 never exactly: overtaken,
        // seen at 46 with 3 (26 ms), write 3 at 46 (16 ms).
        assert_eq!(v.visible_us, vec![12_000, 16_000, 26_000]);
        assert_eq!((v.overtaken, v.unseen), (1, 0));
    }

    #[test]
    fn keys_are_judged_by_their_own_writes() {
        // Two keys: write 1 to key 1 at 10 ms, write 2 to key 0 at 20 ms.
        let acks = [0, 10_000_000, 20_000_000];
        let reads = [
            read(40, 41, 1, 1),
            read(40, 41, 0, 0), // key 0 still 0 at 40 ms: violation
            read(42, 43, 0, 1), // value 1 belongs to key 1
        ];
        let v = judge(&acks, &reads, 2);
        assert_eq!((v.violations, v.foreign, v.unseen), (1, 1, 1));
    }
}
