//! The memory part: orthrus's resident memory with the cache's budget
//! (`cache.max_memory_mb` = `--max-memory-mb`) filled, against the same
//! orthrus with the cache off after the same load, for each `--threads`
//! worker count.
//!
//! `--fill` times as many distinct keys as the budget holds (values of
//! `--value-size` bytes, an entry weighing about that plus 128 bytes) are
//! written once through a loader orthrus. Then each measured orthrus (cache
//! off, then on) reads every key `READS_EACH` times, pipelined over eight
//! connections (the admission sketch fills a key at its fifth read, and a
//! connection's reads stay on its worker), and after a second's rest its
//! `VmRSS` is read from /proc and its INFO `# Cache`. The criterion: RSS
//! on ≤ `max_memory_mb` × 1.25 MiB + RSS off. The part fails too when the
//! budget was not filled (no evictions, or under a quarter of it used:
//! the entries get what the cache's tables and, with several workers,
//! their allocator arenas leave of it): RSS would then say nothing about
//! the bound.

use std::net::SocketAddr;
use std::thread;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail, ensure};
use orthrus_devcluster::{Cluster, ClusterSpec};
use orthrus_resp::Value;

use super::{CacheCheckArgs, CacheInfo, Env, IO_TIMEOUT, cache_on, load_average, start_proxy};
use crate::conn::{Conn, reply_text};
use crate::conn_memory::parse_vm_rss;

/// Reads of each key: orthrus's admission sketch fills a key at its fifth
/// read lately (`cache::admission::ADMIT_AT`), the sixth is a hit.
const READS_EACH: usize = 6;

/// The store's weight of an entry beyond its value (request, reply
/// header, and the 128 bytes the store adds).
const ENTRY_OVERHEAD: u64 = 128 + 48;
/// Keys per pipeline (`READS_EACH` GETs each when reading), at most.
const BATCH: usize = 200;
/// Value bytes per pipeline, at most (fewer keys when values are large).
const BATCH_BYTES: usize = 1 << 20;
/// Reading connections (threads), each its share of the keys.
const READERS: usize = 8;
/// Rest before RSS is read.
const SETTLE: Duration = Duration::from_secs(1);
const MIB: u64 = 1024 * 1024;

/// One orthrus after the load.
struct Measured {
    rss_kib: u64,
    cache: CacheInfo,
}

fn key_name(i: u64) -> String {
    format!("cc-mem:{i}")
}

/// Runs the part; whether it passed.
pub(super) fn run(args: &CacheCheckArgs, env: &Env) -> Result<bool> {
    ensure!(
        (1..=4096).contains(&args.max_memory_mb),
        "--max-memory-mb must be in 1..=4096"
    );
    ensure!((1..=20).contains(&args.fill), "--fill must be in 1..=20");
    ensure!(
        (1..=1 << 20).contains(&args.value_size),
        "--value-size must be in 1..=1048576"
    );
    ensure!(
        !args.threads.is_empty() && args.threads.iter().all(|t| (1..=64).contains(t)),
        "--threads must list worker counts in 1..=64"
    );
    let budget = args.max_memory_mb * MIB;
    let keys = args.fill * budget / (args.value_size as u64 + ENTRY_OVERHEAD);
    println!(
        "memory: cache.max_memory_mb {}, {} keys of {} bytes ({} times the budget), each read {READS_EACH} times; load average {}",
        args.max_memory_mb,
        keys,
        args.value_size,
        args.fill,
        load_average()
    );
    let cluster = Cluster::start(ClusterSpec::new(3, 0)).context("starting a 3-master cluster")?;
    {
        let (_loader, addr) = start_proxy(env, &cluster, 1, Vec::new())?;
        write_keys(addr, keys, args.value_size, env)?;
    }
    let mut ok = true;
    for &threads in &args.threads {
        let off = measure(env, &cluster, threads, Vec::new(), keys, args.value_size)?;
        let on = measure(
            env,
            &cluster,
            threads,
            cache_on(Some(args.max_memory_mb)),
            keys,
            args.value_size,
        )?;
        let allowed_kib = args.max_memory_mb * 1024 * 5 / 4 + off.rss_kib;
        // The entries get what the cache's tables and the workers' arenas
        // leave of the budget (docs/cache.md): a quarter at least.
        let filled = on.cache.evictions > 0 && on.cache.used_bytes * 4 >= budget;
        let within = on.rss_kib <= allowed_kib;
        println!(
            "  {threads} worker(s): RSS cache off {:.1} MiB, cache on {:.1} MiB; on − off {:.1} MiB, allowed {} × 1.25 = {:.1} MiB: {} (load average {})",
            mib(off.rss_kib),
            mib(on.rss_kib),
            mib(on.rss_kib.saturating_sub(off.rss_kib)),
            args.max_memory_mb,
            args.max_memory_mb as f64 * 1.25,
            if within { "within" } else { "OVER" },
            load_average()
        );
        println!("    INFO # Cache: {}", on.cache.line());
        if !filled {
            println!(
                "    the budget was not filled (evictions {}, {} of {} bytes used): the check says nothing",
                on.cache.evictions, on.cache.used_bytes, budget
            );
        }
        if on.cache.used_bytes > budget {
            println!(
                "    cache_used_bytes {} is over the budget {budget}",
                on.cache.used_bytes
            );
        }
        ok &= within && filled && on.cache.used_bytes <= budget;
    }
    println!(
        "memory: {} (load average {})",
        if ok { "PASSED" } else { "FAILED" },
        load_average()
    );
    Ok(ok)
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// Keys per pipeline for values of `size` bytes.
fn batch(size: usize) -> usize {
    (BATCH_BYTES / size.max(1)).clamp(1, BATCH)
}

fn value_of(i: u64, size: usize) -> Vec<u8> {
    let mut v = format!("{i}:").into_bytes();
    v.resize(size, b'x');
    v
}

/// SETs every key, pipelined.
fn write_keys(addr: SocketAddr, keys: u64, size: usize, env: &Env) -> Result<()> {
    let mut conn = Conn::connect(addr, IO_TIMEOUT)?;
    let mut i = 0;
    while i < keys {
        env.check("writing the keys")?;
        let end = (i + batch(size) as u64).min(keys);
        let cmds: Vec<Vec<Vec<u8>>> = (i..end)
            .map(|k| vec![b"SET".to_vec(), key_name(k).into_bytes(), value_of(k, size)])
            .collect();
        for (reply, k) in conn.pipeline(&cmds)?.iter().zip(i..) {
            if !matches!(reply, Value::Simple(s) if &s[..] == b"OK") {
                bail!("SET {} answered {}", key_name(k), reply_text(reply));
            }
        }
        i = end;
    }
    Ok(())
}

/// Starts orthrus with `proxy_env`, reads every key `READS_EACH` times, and
/// measures it.
fn measure(
    env: &Env,
    cluster: &Cluster,
    threads: usize,
    proxy_env: Vec<(String, String)>,
    keys: u64,
    size: usize,
) -> Result<Measured> {
    let (mut proxy, addr) = start_proxy(env, cluster, threads, proxy_env)?;
    let readers: Vec<_> = (0..READERS as u64)
        .map(|r| thread::spawn(move || read_keys(addr, r, keys, size)))
        .collect();
    for h in readers {
        h.join().map_err(|_| anyhow!("a reader panicked"))??;
    }
    env.check("reading the keys")?;
    proxy.check_alive()?;
    thread::sleep(SETTLE);
    let pid = proxy.pid();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    let rss_kib = parse_vm_rss(&status).ok_or_else(|| anyhow!("no VmRSS for orthrus"))?;
    Ok(Measured {
        rss_kib,
        cache: CacheInfo::read(addr)?,
    })
}

/// Reads keys `r`, `r + READERS`, ... `READS_EACH` times each, pipelined, and
/// checks every reply's length.
fn read_keys(addr: SocketAddr, r: u64, keys: u64, size: usize) -> Result<()> {
    let mut conn = Conn::connect(addr, IO_TIMEOUT)?;
    let mine: Vec<u64> = (r..keys).step_by(READERS).collect();
    for chunk in mine.chunks(batch(size)) {
        let cmds: Vec<Vec<Vec<u8>>> = chunk
            .iter()
            .flat_map(|&k| {
                let get = vec![b"GET".to_vec(), key_name(k).into_bytes()];
                std::iter::repeat_n(get, READS_EACH)
            })
            .collect();
        for (reply, cmd) in conn.pipeline(&cmds)?.iter().zip(&cmds) {
            if !matches!(reply, Value::Bulk(v) if v.len() == size) {
                let key = cmd.get(1).map(|k| String::from_utf8_lossy(k).into_owned());
                bail!("GET {key:?} answered {}", reply_text(reply));
            }
        }
    }
    Ok(())
}
