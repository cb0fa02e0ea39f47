//! `INFO`, in Redis's format (`# Section` headers, `field:value` lines),
//! describing orthrus as the one server its clients see.

use std::fmt::Write as _;
use std::rc::Rc;
use std::sync::atomic::Ordering;

use orthrus_resp::Request;

use crate::client::Pending;
use crate::node::Done;
use crate::node::client::Dialect;
use crate::node::forward;

use crate::client::Client;
use crate::cmd::fanout;
use crate::cmd::reply::verbatim;
use crate::observe::latency::Part;
use crate::observe::load::Counts;
use crate::observe::stats;
use crate::route::kind::Family;
use crate::route::prefix::Upstream;
use crate::worker::WorkerCtx;

type Section = fn(&mut String, &WorkerCtx);

/// Sections in the order Redis prints them; `true` if part of the default set.
const SECTIONS: &[(&str, bool, Section)] = &[
    ("server", true, server),
    ("clients", true, clients),
    ("memory", true, memory),
    ("persistence", true, persistence),
    ("stats", true, stats_section),
    ("replication", true, replication),
    ("cpu", true, cpu),
    ("commandstats", false, commandstats),
    ("errorstats", true, errorstats),
    ("cluster", true, cluster),
    ("load", true, load),
    ("cache", true, cache),
    ("upstreams", false, upstreams),
    ("latency", false, latency),
];

/// The reply to `INFO [section ...]`.
pub fn reply(req: &Request, client: &Client, ctx: &Rc<WorkerCtx>) -> Pending {
    let wanted: Vec<String> = req
        .args()
        .skip(1)
        .map(|a| String::from_utf8_lossy(a).to_ascii_lowercase())
        .collect();
    let everything = wanted.iter().any(|w| w == "all" || w == "everything");
    let defaults = wanted.is_empty() || wanted.iter().any(|w| w == "default");
    let mut parts: Vec<(&str, String)> = Vec::new();
    for (name, default, section) in SECTIONS {
        let named = |w: &String| w == name || (*name == "latency" && w == "latencystats");
        if everything || (defaults && *default) || wanted.iter().any(named) {
            let mut text = String::new();
            section(&mut text, ctx);
            parts.push((name, text));
        }
    }
    let proto = client.proto;
    let keyspace = everything || defaults || wanted.iter().any(|w| w == "keyspace");
    let from_nodes = |n: &str| parts.iter().any(|(name, _)| *name == n);
    let (persistence, memory) = (from_nodes("persistence"), from_nodes("memory"));
    let stats = from_nodes("stats");
    if !keyspace && !persistence && !memory && !stats {
        return Pending::Ready(verbatim(&join(&parts), proto));
    }
    // The keyspace is the cluster's, and so are saves and AOF rewrites in
    // progress (scripts wait for them with INFO): ask every master.
    let frame =
        orthrus_resp::encode::command(["INFO", "persistence", "memory", "keyspace", "stats"]);
    let sent = fanout::send_to_each(ctx, ctx.shared.masters(), &frame, Dialect::default(), true);
    let ctx = ctx.clone();
    Pending::Future(Box::pin(async move {
        let (replies, backend) = forward::resolve_all(&ctx.pool, sent).await;
        for (name, text) in parts.iter_mut() {
            match *name {
                "persistence" => *text = merged(&replies, "Persistence", i64::max),
                "memory" => {
                    let own = std::mem::take(text);
                    *text = merged(&replies, "Memory", i64::saturating_add);
                    // orthrus's own after the masters' sum.
                    for line in own.lines().skip(1) {
                        let _ = write!(text, "orthrus_{line}\r\n");
                    }
                }
                "stats" => text.push_str(&tracking_totals(&replies)),
                _ => {}
            }
        }
        if keyspace {
            // Per database, summed over the masters, in database order.
            let mut dbs = std::collections::BTreeMap::<u32, (u64, u64)>::new();
            for reply in &replies {
                for (db, k, e) in db_counts(reply) {
                    let sum = dbs.entry(db).or_default();
                    sum.0 += k;
                    sum.1 += e;
                }
            }
            let mut text = String::from("# Keyspace\r\n");
            for (db, (keys, expires)) in dbs.into_iter().filter(|(_, (keys, _))| *keys > 0) {
                let _ = write!(text, "db{db}:keys={keys},expires={expires},avg_ttl=0\r\n");
            }
            parts.push(("keyspace", text));
        }
        Done::from_nodes(verbatim(&join(&parts), proto), backend)
    }))
}

/// The masters' key tracking tables (client-side caching): keys and
/// items summed (each key lives on one master), prefixes the largest
/// count (a BCAST client registers its prefixes on every master).
fn tracking_totals(replies: &[bytes::Bytes]) -> String {
    let merged = merged(replies, "Stats", i64::saturating_add);
    let mut out = String::new();
    for line in merged.lines() {
        if line.starts_with("tracking_total_keys:") || line.starts_with("tracking_total_items:") {
            let _ = write!(out, "{line}\r\n");
        }
    }
    let prefixes = merged_field(replies, "Stats", "tracking_total_prefixes", i64::max);
    let _ = write!(out, "tracking_total_prefixes:{}\r\n", prefixes.unwrap_or(0));
    out
}

/// One field of `section` over the masters' replies, combined.
fn merged_field(
    replies: &[bytes::Bytes],
    section: &str,
    field: &str,
    combine: fn(i64, i64) -> i64,
) -> Option<i64> {
    let merged = merged(replies, section, combine);
    merged.lines().find_map(|l| {
        l.strip_prefix(field)?
            .strip_prefix(':')?
            .trim_end()
            .parse()
            .ok()
    })
}

fn join(parts: &[(&str, String)]) -> String {
    let texts: Vec<&str> = parts.iter().map(|(_, t)| t.as_str()).collect();
    texts.join("\r\n")
}

/// How one field's numbers combine, when not as the section's do: scripts
/// are loaded on every master (counted once), and writes, saves and
/// rewrites are counted per master (summed).
fn combine_field(key: &str, section: fn(i64, i64) -> i64) -> fn(i64, i64) -> i64 {
    match key {
        "number_of_cached_scripts" => i64::max,
        "rdb_changes_since_last_save" | "rdb_saves" | "aof_rewrites" => i64::saturating_add,
        _ => section,
    }
}

/// The masters' fields of `section`, each number combined with `combine`
/// (the largest for persistence: a save or rewrite in progress anywhere;
/// the sum for memory, but the largest script count: scripts are loaded on
/// every master), other values the first master's.
fn merged(replies: &[bytes::Bytes], section: &str, combine: fn(i64, i64) -> i64) -> String {
    let mut fields: Vec<(String, String)> = Vec::new();
    for reply in replies {
        let Ok(text) = std::str::from_utf8(reply) else {
            continue;
        };
        let part = text
            .split("# ")
            .find(|s| s.starts_with(section))
            .unwrap_or_default();
        for line in part.lines().skip(1) {
            let Some((key, value)) = line.trim_end().split_once(':') else {
                continue;
            };
            match fields.iter_mut().find(|(k, _)| k == key) {
                Some((_, old)) => {
                    if let (Ok(a), Ok(b)) = (old.parse::<i64>(), value.parse::<i64>()) {
                        *old = combine_field(key, combine)(a, b).to_string();
                    }
                }
                None => fields.push((key.to_owned(), value.to_owned())),
            }
        }
    }
    let mut out = format!("# {section}\r\n");
    if fields.is_empty() && section == "Persistence" {
        // No master answered: orthrus itself never loads.
        out.push_str("loading:0\r\nasync_loading:0\r\n");
    }
    for (k, v) in fields {
        let _ = write!(out, "{k}:{v}\r\n");
    }
    out
}

/// Each database's number, `keys` and `expires` in a node's `INFO
/// keyspace` bulk reply (`db3:keys=1,expires=0,avg_ttl=0`).
fn db_counts(reply: &[u8]) -> Vec<(u32, u64, u64)> {
    let Ok(text) = std::str::from_utf8(reply) else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|l| {
            let (db, fields) = l.strip_prefix("db")?.split_once(':')?;
            let field = |name: &str| {
                fields
                    .split(',')
                    .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
                    .and_then(|v| v.trim().parse::<u64>().ok())
            };
            Some((
                db.parse().ok()?,
                field("keys")?,
                field("expires").unwrap_or(0),
            ))
        })
        .collect()
}

fn server(out: &mut String, ctx: &WorkerCtx) {
    let shared = &ctx.shared;
    let engine = shared.engine.load();
    let uptime = shared.started.elapsed().as_secs();
    let port = shared.settings.listen.tcp().map_or(0, |a| a.port());
    let _ = write!(
        out,
        "# Server\r\nredis_version:{}\r\n{}redis_git_sha1:00000000\r\nredis_git_dirty:0\r\northrus_version:{}\r\nredis_mode:standalone\r\nos:{} {}\r\narch_bits:{}\r\nmultiplexing_api:epoll\r\nprocess_id:{}\r\ntcp_port:{port}\r\nuptime_in_seconds:{uptime}\r\nuptime_in_days:{}\r\nexecutable:{}\r\nconfig_file:{}\r\nthreads:{}\r\n",
        engine.redis_version,
        // Valkey names itself and its own version after `redis_version`.
        match engine.is_valkey() {
            true => format!(
                "server_name:{}\r\n{}_version:{}\r\n",
                engine.name, engine.name, engine.version
            ),
            false => String::new(),
        },
        env!("CARGO_PKG_VERSION"),
        std::env::consts::OS,
        std::env::consts::ARCH,
        usize::BITS,
        std::process::id(),
        uptime / 86400,
        std::env::current_exe()
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        shared
            .settings
            .config_file
            .as_deref()
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        shared.settings.threads,
    );
}

fn clients(out: &mut String, ctx: &WorkerCtx) {
    let t = stats::totals(&ctx.shared.stats);
    let _ = write!(
        out,
        "# Clients\r\nconnected_clients:{}\r\nblocked_clients:{}\r\npubsub_clients:{}\r\ntracking_clients:{}\r\nmaxclients:{}\r\n",
        (t.connected_clients - ctx.shared.clients.killed()).max(0),
        t.blocked_clients.max(0),
        t.pubsub_clients.max(0),
        t.tracking_clients.max(0),
        ctx.live()
            .client
            .max_clients
            .min(ctx.shared.clients_that_fit.load(Ordering::Relaxed))
    );
}

fn persistence(out: &mut String, _ctx: &WorkerCtx) {
    // Clients (ioredis) wait while `loading:1`; orthrus itself never loads.
    out.push_str("# Persistence\r\nloading:0\r\nasync_loading:0\r\n");
}

/// The reply cache's counters (zero, with `cache_enabled:0`, while off;
/// a new store starts them again).
fn cache(out: &mut String, ctx: &WorkerCtx) {
    let cache = ctx.shared.reply_cache();
    let (on, [hits, misses, fills, invalidations, evictions], used, entries) = match cache.as_ref()
    {
        Some(c) => {
            let s = &c.stats;
            let n = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
            (
                1,
                [
                    n(&s.hits),
                    n(&s.misses),
                    n(&s.fills),
                    n(&s.invalidations),
                    n(&s.evictions),
                ],
                c.used_bytes(),
                c.entries(),
            )
        }
        None => (0, [0; 5], 0, 0),
    };
    let _ = write!(
        out,
        "# Cache\r\ncache_enabled:{on}\r\ncache_hits:{hits}\r\ncache_misses:{misses}\r\ncache_fills:{fills}\r\ncache_invalidations:{invalidations}\r\ncache_evictions:{evictions}\r\ncache_used_bytes:{used}\r\ncache_entries:{entries}\r\n"
    );
}

fn stats_section(out: &mut String, ctx: &WorkerCtx) {
    let t = stats::totals(&ctx.shared.stats);
    let _ = write!(
        out,
        "# Stats\r\ntotal_connections_received:{}\r\ntotal_commands_processed:{}\r\ninstantaneous_ops_per_sec:{}\r\ntotal_error_replies:{}\r\nrejected_connections:{}\r\northrus_redirects_moved:{}\r\northrus_redirects_ask:{}\r\northrus_redirect_waits:{}\r\northrus_retries_tryagain:{}\r\northrus_retries_clusterdown:{}\r\northrus_backend_errors:{}\r\northrus_protocol_errors:{}\r\northrus_rejected_commands:{}\r\northrus_topology_refreshes:{}\r\northrus_reads_master:{}\r\northrus_reads_replica:{}\r\northrus_replica_read_fallbacks:{}\r\northrus_reads_same_zone:{}\r\northrus_reads_other_zone:{}\r\northrus_task_polls:{}\r\northrus_mirror_sent:{}\r\northrus_mirror_dropped:{}\r\northrus_mirror_errors:{}\r\n",
        t.connections_received,
        t.commands,
        ctx.shared.ops.per_second(),
        ctx.shared.commands_seen.total_errors(),
        t.rejected_connections,
        t.moved,
        t.ask,
        t.redirect_waits,
        t.tryagain,
        t.clusterdown,
        t.backend_errors,
        t.protocol_errors,
        t.rejected_commands,
        ctx.shared.refreshes(),
        t.reads_master,
        t.reads_replica,
        t.replica_fallbacks,
        t.reads_same_zone,
        t.reads_other_zone,
        t.task_polls,
        t.mirror_sent,
        t.mirror_dropped,
        t.mirror_errors,
    );
}

/// Percentiles per command family, in microseconds: the whole time through
/// orthrus, the part spent waiting for nodes and orthrus's own part. Only
/// families that have been used are listed.
fn latency(out: &mut String, ctx: &WorkerCtx) {
    out.push_str("# Latency\r\n");
    for family in Family::ALL {
        for (part, label) in [
            (Part::Total, ""),
            (Part::Backend, "backend_"),
            (Part::Proxy, "proxy_"),
        ] {
            let s = ctx.shared.latency.summary(family, part);
            let calls = s.count();
            if calls == 0 {
                continue;
            }
            let _ = write!(
                out,
                "latency_{label}percentiles_usec_{}:calls={calls},p50={},p99={},p99.9={}\r\n",
                family.name(),
                s.percentile(0.5),
                s.percentile(0.99),
                s.percentile(0.999),
            );
        }
    }
}

/// Each upstream (the default one and those of `[upstreams]`): what it is,
/// where its reads go, and what it has been asked so far.
fn upstreams(out: &mut String, ctx: &WorkerCtx) {
    out.push_str("# Upstreams\r\n");
    let counts = ctx.shared.load.by_upstream();
    let latency = ctx.shared.latency_by_upstream();
    let maps = ctx
        .shared
        .upstream_maps()
        .into_iter()
        .zip(counts)
        .zip(latency);
    for (n, (((name, mode, map), c), rtt)) in (0..=Upstream::MAX).zip(maps) {
        let _ = write!(
            out,
            "upstream_{name}:mode={},read_from={},masters={},slots_covered={},requests={},bytes={},node_time_us={},errors={},rtt_p50_us={},rtt_p99_us={}\r\n",
            mode.name(),
            ctx.shared.read_from_of(n).name(),
            map.masters().len(),
            map.covered_slots(),
            c.counts.requests,
            c.counts.bytes,
            c.counts.micros,
            c.errors,
            rtt.percentile(0.5),
            rtt.percentile(0.99),
        );
    }
}

/// Each master's keyed requests and bytes so far (by the slots it owns
/// now), and its share of its upstream's, in percent; every upstream's
/// masters, the default one's first.
fn load(out: &mut String, ctx: &WorkerCtx) {
    out.push_str("# Load\r\n");
    let masters = ctx.shared.load_by_master();
    // The upstream's masters added up, by one of their counts.
    let all = |upstream: usize, of: fn(&Counts) -> u64| -> u64 {
        masters
            .iter()
            .filter(|(_, m)| m.upstream == upstream)
            .map(|(_, m)| of(&m.counts))
            .sum()
    };
    let share = |part: u64, all: u64| {
        if all == 0 {
            0.0
        } else {
            part as f64 * 100.0 / all as f64
        }
    };
    for (i, (name, m)) in masters.iter().enumerate() {
        let c = m.counts;
        let _ = write!(
            out,
            "master{i}:addr={},requests={},bytes={},requests_share={:.2},bytes_share={:.2},upstream={name}\r\n",
            m.addr,
            c.requests,
            c.bytes,
            share(c.requests, all(m.upstream, |c| c.requests)),
            share(c.bytes, all(m.upstream, |c| c.bytes)),
        );
    }
}

fn replication(out: &mut String, _ctx: &WorkerCtx) {
    out.push_str("# Replication\r\nrole:master\r\nconnected_slaves:0\r\nmaster_repl_offset:0\r\n");
}

/// orthrus's own resident memory; INFO puts the masters' summed memory
/// fields first and these as `orthrus_used_memory_rss`.
fn memory(out: &mut String, _ctx: &WorkerCtx) {
    let rss = own_stat().map_or(0, |s| s.rss_bytes);
    let _ = write!(out, "# Memory\r\nused_memory_rss:{rss}\r\n");
}

/// orthrus's own CPU time, in seconds.
fn cpu(out: &mut String, _ctx: &WorkerCtx) {
    let (sys, user) = own_stat().map_or((0.0, 0.0), |s| (s.sys_secs, s.user_secs));
    let _ = write!(
        out,
        "# CPU\r\nused_cpu_sys:{sys:.6}\r\nused_cpu_user:{user:.6}\r\nused_cpu_sys_children:0.000000\r\nused_cpu_user_children:0.000000\r\n"
    );
}

fn commandstats(out: &mut String, ctx: &WorkerCtx) {
    out.push_str("# Commandstats\r\n");
    ctx.shared.commands_seen.write_commands(out);
}

fn errorstats(out: &mut String, ctx: &WorkerCtx) {
    out.push_str("# Errorstats\r\n");
    ctx.shared.commands_seen.write_errors(out);
}

/// What `/proc/self/stat` says of orthrus.
struct OwnStat {
    user_secs: f64,
    sys_secs: f64,
    rss_bytes: u64,
}

/// Linux only; clock ticks of 1/100 s and pages of 4 KiB, as on every
/// Linux orthrus is built for (no libc call: the crate forbids `unsafe`).
fn own_stat() -> Option<OwnStat> {
    let text = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = text.get(text.rfind(')')? + 2..)?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let num = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
    // utime and stime are fields 14 and 15 of the line, rss 24; `rest`
    // starts at field 3.
    Some(OwnStat {
        user_secs: num(11)? as f64 / 100.0,
        sys_secs: num(12)? as f64 / 100.0,
        rss_bytes: num(21)? * 4096,
    })
}

fn cluster(out: &mut String, ctx: &WorkerCtx) {
    let map = ctx.slots();
    let _ = write!(
        out,
        "# Cluster\r\ncluster_enabled:0\r\northrus_cluster_known:{}\r\northrus_cluster_masters:{}\r\northrus_cluster_nodes:{}\r\northrus_cluster_slots_covered:{}\r\northrus_commands_from_cluster:{}\r\northrus_read_from:{}\r\northrus_cluster_mode:{}\r\n",
        u8::from(map.covered_slots() > 0),
        map.masters().len(),
        map.nodes().len(),
        map.covered_slots(),
        u8::from(ctx.shared.commands_learnt()),
        ctx.shared.settings.read_from.name(),
        ctx.shared.settings.mode.name(),
    );
    for (i, node) in map.nodes().iter().enumerate() {
        let _ = write!(
            out,
            "orthrus_node{i}:addr={},role={},health={},connections={}\r\n",
            node.addr,
            node.role.name(),
            node.health.name(),
            ctx.shared.node_quota.open(&node.addr)
        );
    }
}
