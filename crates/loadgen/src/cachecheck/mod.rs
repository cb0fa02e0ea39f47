//! `orthrus-bench cache-check`: the reply cache's correctness and memory
//! criteria, measured against a cluster and an orthrus that it starts
//! itself (3 masters on loopback, orthrus with `[cache] enabled`), so that
//! anyone can reproduce them. Three parts, each printing its figures and a
//! verdict, the run failing when one fails:
//!
//! - `staleness`: a writer straight to the keys' master (bypassing
//!   orthrus) sets counters while readers read them through orthrus: no read
//!   that starts 10 ms or more after a write was acknowledged may return an
//!   older value; the time until each write is seen through orthrus.
//! - `ryw`: clients through orthrus write and read their own keys, every
//!   read checked against the client's last acknowledged write, while a slot
//!   migrates, a master fails over (gracefully) and FLUSHALL runs.
//! - `memory`: orthrus's RSS with the cache's budget filled several times
//!   over, with 1 and with 4 workers, against the same load with the cache
//!   off: RSS on ≤ `max_memory_mb` × 1.25 MiB + RSS off.
//!
//! Every part is bounded in count (its flags) and in time (`--timeout`).
//! Each figure is printed with the host's load average, since the
//! machine's other work moves them.

mod memory;
mod ryw;
mod ryw_check;
mod staleness;

use std::fs;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use clap::{Args, ValueEnum};
use orthrus_devcluster::{Cluster, ClusterSpec, info_field};
use orthrus_resp::Value;

use crate::conn::{Conn, reply_text};
use crate::interrupt::{Interrupt, Interrupted};
use crate::proxy::{Proxy, ProxyOptions};
use crate::targets::orthrus_binary;

/// The I/O timeout of every connection the check opens.
const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// Flags of `cache-check`.
#[derive(Args, Debug, Clone)]
pub struct CacheCheckArgs {
    /// Which parts to run, in this order (comma-separated or repeated).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "all")]
    pub part: Vec<Part>,
    /// The orthrus binary (default: `orthrus` next to orthrus-bench).
    #[arg(long, value_name = "PATH")]
    pub orthrus: Option<PathBuf>,
    /// Seconds each part may take in all; past it the part fails.
    #[arg(long, value_name = "SECS", default_value_t = 600)]
    pub timeout: u64,

    /// staleness: writes of the writer that bypasses orthrus.
    #[arg(long, default_value_t = 100_000)]
    pub writes: u64,
    /// staleness: readers through orthrus, each its own thread.
    #[arg(long, default_value_t = 8)]
    pub readers: usize,
    /// staleness: the hot keys written in turn (one hash tag: one master).
    #[arg(long, default_value_t = 4)]
    pub hot_keys: u64,
    /// staleness: reads (by all readers) the writer waits for before each
    /// write; 0 writes as fast as the master answers.
    #[arg(long, default_value_t = 8)]
    pub reads_per_write: u64,

    /// ryw: clients through orthrus, each its own thread and keys.
    #[arg(long, default_value_t = 50)]
    pub clients: usize,
    /// ryw: operations of all clients together (a write in five); more
    /// while the migration, failover and FLUSHALL are still going on.
    #[arg(long, default_value_t = 1_000_000)]
    pub ops: u64,
    /// ryw: keys of each client.
    #[arg(long, default_value_t = 20)]
    pub keys_per_client: usize,

    /// memory: `cache.max_memory_mb` of the measured orthrus.
    #[arg(long, value_name = "MB", default_value_t = 64)]
    pub max_memory_mb: u64,
    /// memory: distinct keys loaded, as a multiple of what the budget
    /// holds.
    #[arg(long, default_value_t = 3)]
    pub fill: u64,
    /// memory: bytes of each value.
    #[arg(long, default_value_t = 1024)]
    pub value_size: usize,
    /// memory: the orthrus worker counts measured (`--threads`), one after
    /// the other.
    #[arg(long, value_delimiter = ',', default_value = "1,4")]
    pub threads: Vec<usize>,
}

/// The parts of the check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Part {
    /// A writer bypassing orthrus; readers through it.
    Staleness,
    /// Read-your-writes under migration, failover and FLUSHALL.
    Ryw,
    /// RSS with the budget filled, cache on against off.
    Memory,
    /// The three, one after the other.
    All,
}

/// INFO `# Cache` of an orthrus.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheInfo {
    /// `cache_hits`.
    pub hits: u64,
    /// `cache_misses`.
    pub misses: u64,
    /// `cache_fills`.
    pub fills: u64,
    /// `cache_invalidations`.
    pub invalidations: u64,
    /// `cache_evictions`.
    pub evictions: u64,
    /// `cache_used_bytes`.
    pub used_bytes: u64,
    /// `cache_entries`.
    pub entries: u64,
}

/// A cluster and an orthrus in front of it.
pub(crate) struct Rig {
    pub(crate) cluster: Cluster,
    pub(crate) proxy: Proxy,
    pub(crate) addr: SocketAddr,
}

/// What a part needs besides its flags.
pub(crate) struct Env {
    pub(crate) orthrus: PathBuf,
    pub(crate) interrupt: Interrupt,
    pub(crate) deadline: Instant,
}

// === impl CacheInfo ===

impl CacheInfo {
    /// Parses the text of `INFO cache`.
    pub fn parse(info: &str) -> Result<CacheInfo> {
        let field = |name: &str| -> Result<u64> {
            info_field(info, name)
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| anyhow!("no {name} in INFO cache: {info:?}"))
        };
        Ok(CacheInfo {
            hits: field("cache_hits")?,
            misses: field("cache_misses")?,
            fills: field("cache_fills")?,
            invalidations: field("cache_invalidations")?,
            evictions: field("cache_evictions")?,
            used_bytes: field("cache_used_bytes")?,
            entries: field("cache_entries")?,
        })
    }

    /// Reads it from orthrus at `addr`.
    pub(crate) fn read(addr: SocketAddr) -> Result<CacheInfo> {
        let mut conn = Conn::connect(addr, IO_TIMEOUT)?;
        match conn.call(&["INFO", "cache"])? {
            Value::Bulk(text) | Value::Verbatim { text, .. } => {
                CacheInfo::parse(&String::from_utf8_lossy(&text))
            }
            other => bail!("INFO cache answered {}", reply_text(&other)),
        }
    }

    /// The counters' growth from `before` (bytes and entries as now).
    pub fn since(&self, before: &CacheInfo) -> CacheInfo {
        CacheInfo {
            hits: self.hits.saturating_sub(before.hits),
            misses: self.misses.saturating_sub(before.misses),
            fills: self.fills.saturating_sub(before.fills),
            invalidations: self.invalidations.saturating_sub(before.invalidations),
            evictions: self.evictions.saturating_sub(before.evictions),
            used_bytes: self.used_bytes,
            entries: self.entries,
        }
    }

    /// One line of its figures.
    pub fn line(&self) -> String {
        format!(
            "hits {}, misses {}, fills {}, invalidations {}, evictions {}, {} bytes in {} entries",
            self.hits,
            self.misses,
            self.fills,
            self.invalidations,
            self.evictions,
            self.used_bytes,
            self.entries
        )
    }
}

// === impl Rig ===

impl Rig {
    /// A cluster of 3 masters with `replicas` each, and one orthrus in
    /// front of it with `threads` workers and the environment `env`.
    pub(crate) fn start(
        env: &Env,
        replicas: usize,
        threads: usize,
        proxy_env: Vec<(String, String)>,
    ) -> Result<Rig> {
        let cluster =
            Cluster::start(ClusterSpec::new(3, replicas)).context("starting a 3-master cluster")?;
        env.interrupt.check()?;
        let (proxy, addr) = start_proxy(env, &cluster, threads, proxy_env)?;
        Ok(Rig {
            cluster,
            proxy,
            addr,
        })
    }
}

/// Starts orthrus in front of `cluster` and waits until it answers.
pub(crate) fn start_proxy(
    env: &Env,
    cluster: &Cluster,
    threads: usize,
    proxy_env: Vec<(String, String)>,
) -> Result<(Proxy, SocketAddr)> {
    let opts = ProxyOptions {
        binary: env.orthrus.clone(),
        threads: Some(threads),
        replicas: cluster.spec().replicas,
        env: proxy_env,
    };
    let (mut proxy, addr) = Proxy::start(&opts, &cluster.seeds())?;
    proxy.wait_ready(addr, &env.interrupt)?;
    Ok((proxy, addr))
}

/// The environment that turns the cache on, with `max_memory_mb` when set.
pub(crate) fn cache_on(max_memory_mb: Option<u64>) -> Vec<(String, String)> {
    let mut env = vec![("ORTHRUS_CACHE__ENABLED".to_owned(), "true".to_owned())];
    if let Some(mb) = max_memory_mb {
        env.push(("ORTHRUS_CACHE__MAX_MEMORY_MB".to_owned(), mb.to_string()));
    }
    env
}

// === impl Env ===

impl Env {
    /// `Err` once the part's time is up or a signal came in.
    pub(crate) fn check(&self, what: &str) -> Result<()> {
        self.interrupt.check()?;
        if Instant::now() >= self.deadline {
            bail!("--timeout passed while {what}");
        }
        Ok(())
    }
}

/// The numeric fields `names` of `INFO section` of orthrus at `addr`
/// (0 for a field it does not give).
pub(crate) fn info_numbers(addr: SocketAddr, section: &str, names: &[&str]) -> Result<Vec<u64>> {
    let mut conn = Conn::connect(addr, IO_TIMEOUT)?;
    let text = match conn.call(&["INFO", section])? {
        Value::Bulk(t) | Value::Verbatim { text: t, .. } => {
            String::from_utf8_lossy(&t).into_owned()
        }
        other => bail!("INFO {section} answered {}", reply_text(&other)),
    };
    Ok(names
        .iter()
        .map(|n| {
            info_field(&text, n)
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        })
        .collect())
}

/// The host's load averages (1, 5, 15 minutes), from /proc/loadavg.
pub fn load_average() -> String {
    fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "unknown".to_owned())
}

/// The value at quantile `q` of `sorted`.
pub(crate) fn quantile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let at = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted.get(at.min(sorted.len() - 1)).copied().unwrap_or(0)
}

/// Microseconds as milliseconds with three decimals.
pub(crate) fn ms(us: u64) -> String {
    format!("{:.3} ms", us as f64 / 1000.0)
}

/// Runs the parts asked for; `Ok(false)` when a check failed.
pub fn run(args: &CacheCheckArgs) -> Result<bool> {
    let orthrus = orthrus_binary(args.orthrus.as_deref())?;
    let interrupt = Interrupt::install()?;
    println!(
        "cache-check: orthrus {}, load average {} at start",
        orthrus.display(),
        load_average()
    );
    let parts: Vec<Part> = args
        .part
        .iter()
        .flat_map(|&p| match p {
            Part::All => vec![Part::Staleness, Part::Ryw, Part::Memory],
            one => vec![one],
        })
        .collect();
    let mut passed = true;
    for part in &parts {
        let env = Env {
            orthrus: orthrus.clone(),
            interrupt: interrupt.clone(),
            deadline: Instant::now() + Duration::from_secs(args.timeout.max(1)),
        };
        let ok = match part {
            Part::Staleness => staleness::run(args, &env),
            Part::Ryw => ryw::run(args, &env),
            Part::Memory => memory::run(args, &env),
            Part::All => Ok(true),
        };
        let ok = match ok {
            Ok(ok) => ok,
            Err(e) if e.downcast_ref::<Interrupted>().is_some() => return Err(e),
            Err(e) => {
                let name = format!("{part:?}").to_lowercase();
                println!("{name}: FAILED to run: {e:#}");
                false
            }
        };
        passed &= ok;
    }
    println!(
        "cache-check: {} (load average {})",
        if passed { "PASSED" } else { "FAILED" },
        load_average()
    );
    Ok(passed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_cache_is_parsed_and_subtracted() {
        let text = "# Cache\r\ncache_enabled:1\r\ncache_hits:10\r\ncache_misses:4\r\ncache_fills:3\r\ncache_invalidations:2\r\ncache_evictions:1\r\ncache_used_bytes:900\r\ncache_entries:2\r\n";
        let info = CacheInfo::parse(text).unwrap();
        assert_eq!((info.hits, info.fills, info.entries), (10, 3, 2));
        let before = CacheInfo {
            hits: 4,
            fills: 1,
            ..CacheInfo::default()
        };
        let d = info.since(&before);
        assert_eq!((d.hits, d.fills, d.used_bytes), (6, 2, 900));
        assert!(CacheInfo::parse("# Cache\r\ncache_hits:1\r\n").is_err());
    }

    #[test]
    fn quantiles_pick_by_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(quantile(&v, 0.5), 51);
        assert_eq!(quantile(&v, 0.99), 99);
        assert_eq!(quantile(&v, 1.0), 100);
        assert_eq!(quantile(&[], 0.5), 0);
    }
}
