//! The Prometheus text exposition (format 0.0.4) that the admin endpoint
//! serves on `/metrics`: process facts, the counters, the cluster as
//! orthrus sees it, and the latency histograms.

use std::fmt::{Display, Write as _};

use orthrus_cluster::{Health, Role};

use crate::observe::latency::{self, Part, Summary};
use crate::observe::load::MasterLoad;
use crate::observe::stats;
use crate::process::Shared;
use crate::route::kind::Family;

/// The Prometheus text exposition (format 0.0.4).
pub fn exposition(shared: &Shared) -> String {
    let mut m = Exposition::default();
    process_metrics(&mut m, shared);
    traffic_metrics(&mut m, &stats::totals(&shared.stats), shared.refreshes());
    cluster_metrics(&mut m, shared);
    load_metrics(&mut m, shared);
    upstream_metrics(&mut m, shared);
    latency_metrics(&mut m, shared);
    cache_metrics(&mut m, shared);
    m.out
}

/// The reply cache's counters and size (zero while it is off).
fn cache_metrics(m: &mut Exposition, shared: &Shared) {
    use std::sync::atomic::Ordering::Relaxed;
    let cache = shared.reply_cache();
    let cache = cache.as_ref();
    let n = |f: fn(&crate::process::cache::CacheStats) -> &std::sync::atomic::AtomicU64| {
        cache.map_or(0, |c| f(&c.stats).load(Relaxed))
    };
    let name = "orthrus_cache_requests_total";
    m.family(
        name,
        "counter",
        "Cacheable reads, by whether the reply cache answered them.",
    );
    m.sample(name, &[("result", "hit")], n(|s| &s.hits));
    m.sample(name, &[("result", "miss")], n(|s| &s.misses));
    let help = "Replies kept in the reply cache.";
    m.counter("orthrus_cache_fills_total", help, n(|s| &s.fills));
    let help =
        "Keys the nodes invalidated (and flushes) heard on the cache's tracking connections.";
    m.counter(
        "orthrus_cache_invalidations_total",
        help,
        n(|s| &s.invalidations),
    );
    let help = "Entries evicted from the reply cache to stay within cache.max_memory_mb.";
    m.counter("orthrus_cache_evictions_total", help, n(|s| &s.evictions));
    let help = "Bytes of the reply cache's entries (replies, requests, bookkeeping).";
    m.gauge(
        "orthrus_cache_used_bytes",
        help,
        cache.map_or(0, |c| c.used_bytes()),
    );
    let help = "Entries in the reply cache.";
    m.gauge(
        "orthrus_cache_entries",
        help,
        cache.map_or(0, |c| c.entries()),
    );
}

/// Per upstream (the default one and those of `[upstreams]`): keyed
/// requests, error replies, time at the nodes and its histogram, slots
/// served.
fn upstream_metrics(m: &mut Exposition, shared: &Shared) {
    let maps = shared.upstream_maps();
    let counts = shared.load.by_upstream();
    let each = |m: &mut Exposition, name: &str, value: &dyn Fn(usize) -> String| {
        for (i, (upstream, _, _)) in maps.iter().enumerate() {
            m.sample(name, &[("upstream", upstream)], value(i));
        }
    };
    let of = |i: usize| counts.get(i).copied().unwrap_or_default();
    let name = "orthrus_upstream_requests_total";
    m.family(name, "counter", "Keyed requests answered, by upstream.");
    each(m, name, &|i| of(i).counts.requests.to_string());
    let name = "orthrus_upstream_errors_total";
    m.family(
        name,
        "counter",
        "Keyed requests answered with an error reply, by upstream.",
    );
    each(m, name, &|i| of(i).errors.to_string());
    let name = "orthrus_upstream_node_seconds_total";
    m.family(
        name,
        "counter",
        "Time keyed requests spent at the nodes (written to reply read), by upstream.",
    );
    each(m, name, &|i| {
        format!("{:.6}", of(i).counts.micros as f64 / 1_000_000.0)
    });
    let name = "orthrus_upstream_backend_duration_seconds";
    m.family(
        name,
        "histogram",
        "Round trip of requests to the nodes of each upstream on the shared connections.",
    );
    for ((upstream, _, _), summary) in maps.iter().zip(shared.latency_by_upstream()) {
        m.histogram(name, &[("upstream", upstream)], &summary);
    }
    let name = "orthrus_upstream_slots_covered";
    m.family(name, "gauge", "Slots with an owner, by upstream.");
    each(m, name, &|i| {
        maps.get(i)
            .map_or(0, |(_, _, map)| map.covered_slots())
            .to_string()
    });
}

/// Keyed requests and their bytes by the master that owns their slot now
/// (one series per master of every upstream; a slot that moves brings its
/// counts along).
fn load_metrics(m: &mut Exposition, shared: &Shared) {
    let masters = shared.load_by_master();
    if masters.is_empty() {
        return;
    }
    // Name, help, and the count each series shows.
    type Series = (&'static str, &'static str, fn(&MasterLoad) -> u64);
    let families: [Series; 2] = [
        (
            "orthrus_master_requests_total",
            "Keyed requests answered, by the master that owns their slot.",
            |m| m.counts.requests,
        ),
        (
            "orthrus_master_bytes_total",
            "Request and reply bytes of keyed requests, by the master that owns their slot.",
            |m| m.counts.bytes,
        ),
    ];
    for (name, help, value) in families {
        m.family(name, "counter", help);
        for (upstream, master) in &masters {
            let addr = master.addr.to_string();
            let labels = [("master", addr.as_str()), ("upstream", upstream)];
            m.sample(name, &labels, value(master));
        }
    }
}

fn process_metrics(m: &mut Exposition, shared: &Shared) {
    m.gauge("orthrus_up", "Always 1 while orthrus runs.", 1);
    m.family("orthrus_build_info", "gauge", "The version, as a label.");
    let version = [("version", env!("CARGO_PKG_VERSION"))];
    m.sample("orthrus_build_info", &version, 1);
    let uptime = shared.started.elapsed().as_secs_f64();
    m.gauge("orthrus_uptime_seconds", "Seconds since start.", uptime);
    let threads = shared.settings.threads;
    m.gauge("orthrus_worker_threads", "Worker threads.", threads);
}

fn traffic_metrics(m: &mut Exposition, t: &stats::Totals, refreshes: u64) {
    let clients = t.connected_clients.max(0);
    m.gauge(
        "orthrus_connected_clients",
        "Client connections open now.",
        clients,
    );
    let help = "Clients waiting in a blocking command on its node, or held by CLIENT PAUSE.";
    m.gauge("orthrus_blocked_clients", help, t.blocked_clients.max(0));
    let help = "Clients holding subscriptions.";
    m.gauge("orthrus_pubsub_clients", help, t.pubsub_clients.max(0));
    let help = "Clients with CLIENT TRACKING on (each holds a connection per master).";
    m.gauge("orthrus_tracking_clients", help, t.tracking_clients.max(0));
    let accepted = t.connections_received;
    m.counter(
        "orthrus_connections_received_total",
        "Client connections accepted.",
        accepted,
    );
    m.counter(
        "orthrus_commands_total",
        "Commands received from clients.",
        t.commands,
    );

    let name = "orthrus_redirects_total";
    m.family(name, "counter", "MOVED and ASK redirections followed.");
    m.sample(name, &[("kind", "moved")], t.moved);
    m.sample(name, &[("kind", "ask")], t.ask);
    let help = "Requests redirected past the free redirects, which waited for the nodes to agree on a slot's owner (a slot moving).";
    m.counter("orthrus_redirect_waits_total", help, t.redirect_waits);
    let name = "orthrus_mirror_requests_total";
    m.family(
        name,
        "counter",
        "Copies of requests for mirror upstreams, by outcome.",
    );
    m.sample(name, &[("outcome", "sent")], t.mirror_sent);
    m.sample(name, &[("outcome", "dropped")], t.mirror_dropped);
    m.sample(name, &[("outcome", "error")], t.mirror_errors);
    let name = "orthrus_retries_total";
    m.family(
        name,
        "counter",
        "Commands retried after TRYAGAIN or CLUSTERDOWN.",
    );
    m.sample(name, &[("kind", "tryagain")], t.tryagain);
    m.sample(name, &[("kind", "clusterdown")], t.clusterdown);

    let name = "orthrus_reads_total";
    m.family(
        name,
        "counter",
        "Keyed read-only commands, by the role of the node they were sent to.",
    );
    m.sample(name, &[("role", "master")], t.reads_master);
    m.sample(name, &[("role", "replica")], t.reads_replica);
    let help = "Replica reads sent on to another replica or the master (the replica failed, was loading or redirected).";
    m.counter(
        "orthrus_replica_read_fallbacks_total",
        help,
        t.replica_fallbacks,
    );

    let name = "orthrus_replica_reads_by_zone_total";
    m.family(
        name,
        "counter",
        "Replica reads with cluster.availability_zone set, by whether the replica was in that zone.",
    );
    m.sample(name, &[("zone", "same")], t.reads_same_zone);
    m.sample(name, &[("zone", "other")], t.reads_other_zone);

    let help = "Times the workers' tasks (client sessions, node connections, ...) were polled.";
    m.counter("orthrus_task_polls_total", help, t.task_polls);

    let help = "Failures talking to cluster nodes.";
    m.counter("orthrus_backend_errors_total", help, t.backend_errors);
    let help = "Client connections closed for a protocol error.";
    m.counter("orthrus_protocol_errors_total", help, t.protocol_errors);
    let help = "Commands refused with an error by orthrus itself.";
    m.counter("orthrus_rejected_commands_total", help, t.rejected_commands);
    let help = "Client connections refused over client.max_clients.";
    m.counter(
        "orthrus_rejected_connections_total",
        help,
        t.rejected_connections,
    );
    let help = "Topology refreshes attempted.";
    m.counter("orthrus_topology_refreshes_total", help, refreshes);
}

fn cluster_metrics(m: &mut Exposition, shared: &Shared) {
    let map = shared.slots.load();
    let help = "Slots with a known owner (16384 when the cluster is whole).";
    m.gauge("orthrus_cluster_slots_covered", help, map.covered_slots());
    let help = "Masters owning at least one slot.";
    m.gauge("orthrus_cluster_masters", help, map.masters().len());

    let name = "orthrus_cluster_nodes";
    m.family(name, "gauge", "Known cluster nodes by role and health.");
    // Every combination, zeros included, so that a series does not vanish
    // when its last node changes state.
    for role in Role::ALL {
        for health in Health::ALL {
            let count = map
                .nodes()
                .iter()
                .filter(|n| n.role == role && n.health == health)
                .count();
            m.sample(
                name,
                &[("role", role.name()), ("health", health.name())],
                count,
            );
        }
    }
    let help = "1 if the command table was learnt from the cluster's COMMAND reply.";
    let learnt = u8::from(shared.commands_learnt());
    m.gauge("orthrus_commands_from_cluster", help, learnt);
}

/// Latency histograms per command family (the total, the backend part and
/// orthrus's part) and per node; families never used are left out.
fn latency_metrics(m: &mut Exposition, shared: &Shared) {
    const PARTS: [(Part, &str, &str); 3] = [
        (
            Part::Total,
            "orthrus_command_duration_seconds",
            "Time from reading a request to its reply being ready to write, by command family.",
        ),
        (
            Part::Backend,
            "orthrus_command_backend_duration_seconds",
            "Part of a request's time spent waiting for cluster nodes (the longest round trip among its parts), by command family.",
        ),
        (
            Part::Proxy,
            "orthrus_command_proxy_duration_seconds",
            "orthrus's own part of a request's time (the total minus the backend part), by command family.",
        ),
    ];
    for (part, name, help) in PARTS {
        let used: Vec<(Family, Summary)> = Family::ALL
            .into_iter()
            .map(|family| (family, shared.latency.summary(family, part)))
            .filter(|(_, summary)| summary.count() > 0)
            .collect();
        if !used.is_empty() {
            m.family(name, "histogram", help);
        }
        for (family, summary) in used {
            m.histogram(name, &[("family", family.name())], &summary);
        }
    }
    let nodes = shared.node_latency.summaries();
    let name = "orthrus_backend_duration_seconds";
    if !nodes.is_empty() {
        let help = "Round trip of requests to each cluster node on the shared connections.";
        m.family(name, "histogram", help);
    }
    for (addr, summary) in nodes {
        m.histogram(name, &[("node", &addr.to_string())], &summary);
    }
    let map = shared.slots.load();
    let name = "orthrus_node_connections";
    if !map.nodes().is_empty() {
        let help = "Connections open to each cluster node, of every kind and worker (bounded by backend.max_connections_per_node).";
        m.family(name, "gauge", help);
    }
    for node in map.nodes() {
        let open = shared.node_quota.open(&node.addr);
        m.sample(name, &[("node", &node.addr.to_string())], open);
    }
}

/// Builds the text format. Label values here are fixed strings without
/// quotes, backslashes or newlines, so they need no escaping.
#[derive(Default)]
struct Exposition {
    out: String,
}

impl Exposition {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = write!(self.out, "# HELP {name} {help}\n# TYPE {name} {kind}\n");
    }

    fn counter(&mut self, name: &str, help: &str, value: u64) {
        self.family(name, "counter", help);
        self.sample(name, &[], value);
    }

    fn gauge(&mut self, name: &str, help: &str, value: impl Display) {
        self.family(name, "gauge", help);
        self.sample(name, &[], value);
    }

    /// The `_bucket`, `_sum` and `_count` samples of one histogram.
    fn histogram(&mut self, name: &str, labels: &[(&str, &str)], summary: &Summary) {
        let bucket = format!("{name}_bucket");
        let count = summary.count();
        let bounds = latency::PROMETHEUS_EXPONENTS
            .map(|exp| {
                let le = ((1u64 << exp) as f64 / 1e6).to_string();
                (le, summary.below_power_of_two(exp))
            })
            .chain([("+Inf".to_owned(), count)]);
        for (le, below) in bounds {
            let mut with_le = labels.to_vec();
            with_le.push(("le", &le));
            self.sample(&bucket, &with_le, below);
        }
        self.sample(&format!("{name}_sum"), labels, summary.sum_seconds());
        self.sample(&format!("{name}_count"), labels, count);
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl Display) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{k}=\"{v}\"");
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {value}");
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::observe::stats::WorkerStats;

    #[test]
    fn metrics_are_well_formed() {
        let shared = Shared::for_tests(2);
        WorkerStats::bump(&shared.stats[1].commands);
        WorkerStats::bump(&shared.stats[0].commands);
        shared
            .latency
            .worker(0)
            .record(Family::Hash, 100, Some(Duration::from_micros(50)));
        shared.latency.worker(1).record(Family::Hash, 200, None);
        let text = exposition(&shared);
        let mut typed = std::collections::HashSet::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').unwrap_or_default();
                assert!(matches!(kind, "counter" | "gauge" | "histogram"), "{line}");
                assert_eq!(kind == "counter", name.ends_with("_total"), "{line}");
                assert!(typed.insert(name.to_owned()), "two TYPE lines: {line}");
                continue;
            }
            if line.starts_with('#') {
                continue;
            }
            let (series, value) = line.rsplit_once(' ').unwrap_or_default();
            let name = series.split('{').next().unwrap_or_default();
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|suffix| name.strip_suffix(suffix))
                .filter(|family| typed.contains(*family));
            assert!(
                typed.contains(name) || family.is_some(),
                "no TYPE before {line}"
            );
            assert!(value.parse::<f64>().is_ok(), "{line}");
        }
        assert!(text.contains("\northrus_commands_total 2\n"), "{text}");
        assert!(text.contains("\northrus_worker_threads 2\n"), "{text}");
        assert!(
            text.contains("\northrus_cluster_slots_covered 0\n"),
            "{text}"
        );
        assert!(
            text.contains("\northrus_cluster_nodes{role=\"replica\",health=\"failed\"} 0\n"),
            "{text}"
        );
        let hash = "orthrus_command_duration_seconds_bucket{family=\"hash\"";
        assert!(
            text.contains(&format!("\n{hash},le=\"0.000064\"}} 0\n")),
            "{text}"
        );
        assert!(
            text.contains(&format!("\n{hash},le=\"0.000128\"}} 1\n")),
            "{text}"
        );
        assert!(
            text.contains(&format!("\n{hash},le=\"+Inf\"}} 2\n")),
            "{text}"
        );
        let backend = "orthrus_command_backend_duration_seconds_count{family=\"hash\"} 1";
        assert!(text.contains(backend), "{text}");
        assert!(!text.contains("family=\"string\""), "{text}");
    }
}
