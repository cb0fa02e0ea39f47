//! `orthrus-bench zipf`: GETs and SETs over a keyspace whose keys are
//! drawn from a Zipf distribution (a few keys hot, a long tail; exponent 0
//! is uniform), from many client threads, closed loop, against running
//! targets one after the other; throughput, latency quantiles and, with
//! `--pid`, the target's CPU time per command. Made for the reply cache's
//! figures, and to be reproduced by anyone: every parameter is a flag.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use clap::Args;
use orthrus_resp::Value;

use crate::conn::{Conn, reply_text};

/// Keys written per pipelined batch when preloading.
const PRELOAD_BATCH: u64 = 1000;

/// Flags of `zipf`.
#[derive(Args, Debug, Clone)]
pub struct ZipfArgs {
    /// A running server or proxy. Repeatable; run one after the other.
    #[arg(long = "target", value_name = "NAME=HOST:PORT", required = true)]
    pub targets: Vec<String>,
    /// The process behind each --target, in the same order, for its CPU
    /// time (/proc/PID/stat). Optional; all or none.
    #[arg(long = "pid", value_name = "PID")]
    pub pids: Vec<u32>,
    /// Client connections, each its own thread, one command at a time.
    #[arg(long, default_value_t = 50)]
    pub clients: usize,
    /// Seconds each target is driven (after the preload).
    #[arg(long, default_value_t = 20)]
    pub seconds: u64,
    /// Keys in the keyspace (`zipf:0` .. `zipf:N-1`).
    #[arg(long, default_value_t = 1_000_000)]
    pub keys: u64,
    /// The Zipf exponent: key of rank r is drawn with weight 1/r^s; 0 draws
    /// every key alike.
    #[arg(long, default_value_t = 0.99)]
    pub exponent: f64,
    /// Percent of commands that are GETs (the rest SETs).
    #[arg(long, default_value_t = 95)]
    pub reads: u8,
    /// Bytes of each value written.
    #[arg(long, default_value_t = 16)]
    pub value_size: usize,
    /// Write every key once before the timed run, so that GETs find values.
    #[arg(long)]
    pub preload: bool,
}

/// What one target did.
struct Outcome {
    name: String,
    ops: u64,
    elapsed: Duration,
    /// Microseconds, sorted.
    latencies: Vec<u32>,
    cpu: Option<Duration>,
}

/// Draws ranks by the distribution's cumulative weights.
struct Sampler {
    cumulative: Vec<f64>,
}

impl Sampler {
    fn new(keys: u64, exponent: f64) -> Sampler {
        let mut total = 0.0;
        let cumulative = (1..=keys)
            .map(|rank| {
                total += 1.0 / (rank as f64).powf(exponent);
                total
            })
            .collect::<Vec<_>>();
        let cumulative = cumulative.into_iter().map(|c| c / total).collect();
        Sampler { cumulative }
    }

    /// The rank (0-based) for a uniform draw `u` in [0, 1).
    fn rank(&self, u: f64) -> usize {
        self.cumulative
            .partition_point(|&c| c <= u)
            .min(self.cumulative.len().saturating_sub(1))
    }
}

/// xorshift64*: a client's own draws (seed it non-zero).
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

pub fn run(args: &ZipfArgs) -> Result<()> {
    ensure!(args.keys > 0, "--keys must be at least 1");
    ensure!(args.clients > 0, "--clients must be at least 1");
    ensure!(args.reads <= 100, "--reads is a percent");
    ensure!(
        args.pids.is_empty() || args.pids.len() == args.targets.len(),
        "give a --pid for every --target, or none"
    );
    let targets: Vec<(String, SocketAddr)> = args
        .targets
        .iter()
        .map(|t| {
            let (name, addr) = t
                .split_once('=')
                .with_context(|| format!("--target {t}: expected NAME=HOST:PORT"))?;
            Ok((
                name.to_owned(),
                addr.parse().with_context(|| format!("--target {t}"))?,
            ))
        })
        .collect::<Result<_>>()?;
    let sampler = Arc::new(Sampler::new(args.keys, args.exponent));
    println!(
        "zipf: {} keys, exponent {}, {}% GET, {} clients, {} s per target, {}-byte values",
        args.keys, args.exponent, args.reads, args.clients, args.seconds, args.value_size
    );
    let mut outcomes = Vec::new();
    for (i, (name, addr)) in targets.iter().enumerate() {
        if args.preload {
            preload(*addr, args)?;
        }
        let pid = args.pids.get(i).copied();
        let before = pid.map(cpu_of).transpose()?;
        let mut outcome = drive(name, *addr, args, &sampler)?;
        if let (Some(pid), Some(before)) = (pid, before) {
            outcome.cpu = Some(cpu_of(pid)?.saturating_sub(before));
        }
        outcomes.push(outcome);
    }
    print_table(&outcomes);
    Ok(())
}

/// Writes every key once, pipelined.
fn preload(addr: SocketAddr, args: &ZipfArgs) -> Result<()> {
    let mut conn = Conn::connect(addr, Duration::from_secs(30))?;
    let value = vec![b'v'; args.value_size];
    let mut rank = 0;
    while rank < args.keys {
        let end = (rank + PRELOAD_BATCH).min(args.keys);
        let batch: Vec<Vec<Vec<u8>>> = (rank..end)
            .map(|r| vec![b"SET".to_vec(), key(r as usize).into_bytes(), value.clone()])
            .collect();
        for reply in conn.pipeline(&batch)? {
            ensure!(
                matches!(&reply, Value::Simple(s) if &s[..] == b"OK"),
                "preload SET: {}",
                reply_text(&reply)
            );
        }
        rank = end;
    }
    Ok(())
}

fn key(rank: usize) -> String {
    format!("zipf:{rank}")
}

/// `args.clients` threads against `addr` for `args.seconds`.
fn drive(name: &str, addr: SocketAddr, args: &ZipfArgs, sampler: &Arc<Sampler>) -> Result<Outcome> {
    let stop = Arc::new(AtomicBool::new(false));
    let mut conns = Vec::new();
    for _ in 0..args.clients {
        conns.push(Conn::connect(addr, Duration::from_secs(30))?);
    }
    let started = Instant::now();
    let threads: Vec<_> = conns
        .into_iter()
        .enumerate()
        .map(|(i, mut conn)| {
            let (stop, sampler) = (stop.clone(), sampler.clone());
            let (reads, value) = (u64::from(args.reads), vec![b'w'; args.value_size]);
            std::thread::spawn(move || -> Result<Vec<u32>> {
                let mut rng =
                    Rng(0x9e37_79b9_7f4a_7c15 ^ (i as u64 + 1).wrapping_mul(0xbf58_476d_1ce4_e5b9));
                let mut latencies = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let k = key(sampler.rank(rng.unit()));
                    let read = rng.next() % 100 < reads;
                    let sent = Instant::now();
                    let reply = if read {
                        conn.call(&[b"GET".as_slice(), k.as_bytes()])?
                    } else {
                        conn.call(&[b"SET".as_slice(), k.as_bytes(), &value])?
                    };
                    latencies.push(u32::try_from(sent.elapsed().as_micros()).unwrap_or(u32::MAX));
                    match (&reply, read) {
                        (Value::Bulk(_) | Value::Null, true) => {}
                        (Value::Simple(s), false) if &s[..] == b"OK" => {}
                        _ => bail!(
                            "{} {k}: {}",
                            if read { "GET" } else { "SET" },
                            reply_text(&reply)
                        ),
                    }
                }
                Ok(latencies)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(args.seconds));
    stop.store(true, Ordering::Relaxed);
    let mut latencies = Vec::new();
    for t in threads {
        let mine = t
            .join()
            .map_err(|_| anyhow::anyhow!("a client thread panicked"))??;
        latencies.extend(mine);
    }
    let elapsed = started.elapsed();
    latencies.sort_unstable();
    Ok(Outcome {
        name: name.to_owned(),
        ops: latencies.len() as u64,
        elapsed,
        latencies,
        cpu: None,
    })
}

/// A process's CPU time (user and system) so far.
fn cpu_of(pid: u32) -> Result<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    // Fields after the command name, which ends with the last ')'.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // utime and stime are fields 14 and 15 of the line (11 and 12 here).
    let hz = 100; // USER_HZ on Linux
    Ok(Duration::from_millis((ticks(11) + ticks(12)) * 1000 / hz))
}

fn quantile(sorted: &[u32], q: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    let at = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted.get(at).copied().unwrap_or(0)
}

fn print_table(outcomes: &[Outcome]) {
    println!(
        "{:<22} {:>12} {:>8} {:>8} {:>8} {:>12} {:>8}",
        "target", "commands/s", "p50 us", "p99 us", "max us", "CPU us/cmd", "ratio"
    );
    let first = outcomes
        .first()
        .map(|o| o.ops as f64 / o.elapsed.as_secs_f64());
    for o in outcomes {
        let rate = o.ops as f64 / o.elapsed.as_secs_f64();
        let cpu = o
            .cpu
            .map(|c| format!("{:.1}", c.as_secs_f64() * 1e6 / o.ops.max(1) as f64))
            .unwrap_or_else(|| "-".to_owned());
        println!(
            "{:<22} {:>12.0} {:>8} {:>8} {:>8} {:>12} {:>7.2}x",
            o.name,
            rate,
            quantile(&o.latencies, 0.5),
            quantile(&o.latencies, 0.99),
            o.latencies.last().copied().unwrap_or(0),
            cpu,
            first.map_or(1.0, |f| rate / f)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_follow_the_exponent() {
        let s = Sampler::new(1000, 0.99);
        let mut rng = Rng(7);
        let mut counts = vec![0u32; 1000];
        for _ in 0..100_000 {
            counts[s.rank(rng.unit())] += 1;
        }
        // Rank 1 about twice rank 2's draws, and far above the tail's.
        assert!(
            counts[0] > counts[1] * 3 / 2 && counts[0] < counts[1] * 5 / 2,
            "{:?}",
            &counts[..4]
        );
        assert!(counts[0] > 50 * counts[999].max(1));
        let uniform = Sampler::new(1000, 0.0);
        let mut counts = vec![0u32; 1000];
        for _ in 0..100_000 {
            counts[uniform.rank(rng.unit())] += 1;
        }
        assert!(counts.iter().all(|&c| (50..=150).contains(&c)));
    }
}
