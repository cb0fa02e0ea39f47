//! State shared by every worker: read-mostly, never locked on the request
//! path. The slot map and the command table are snapshots swapped
//! atomically; the refresher is woken through a `Notify`, which coalesces
//! any number of wake-ups into one refresh.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use orthrus_cluster::{NodeAddr, RedirectPolicy, SlotMap};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use self::quota::NodeQuota;
use crate::config::{Config, ReadFrom, Settings, Tls};
use crate::observe::clients::Registry;
use crate::observe::commands::CommandStats;
use crate::observe::hotkeys::HotKeys;
use crate::observe::latency;
use crate::observe::load::SlotLoad;
use crate::observe::slowlog::SlowLog;
use crate::observe::stats::{OpsMeter, WorkerStats};
use crate::route::prefix::{Prefixes, Upstream};
use crate::route::table::CommandTable;
use crate::scripts::Scripts;

pub mod cache;
pub mod databases;
pub mod engine;
pub mod quota;
pub mod room;
mod swapped;
mod upstreams;
pub use swapped::{Held, Local, Swapped};
pub use upstreams::NamedUpstream;

/// The settings a reload applies at once (read from `Shared::live` where
/// they are used); any other setting that changes needs a restart.
const LIVE: &[&str] = &[
    "protected_mode",
    "client.password",
    "client.password_file",
    "backend.password_file",
    "client.users",
    "client.max_clients",
    "client.idle_timeout_s",
    "backend.request_timeout_ms",
    "backend.connect_timeout_ms",
    "backend.username",
    "backend.password",
    "cluster.refresh_interval_ms",
    "slowlog.log_slower_than_us",
    "slowlog.max_len",
    "log.level",
    "admin.passthrough",
    "tls.cert_file",
    "tls.key_file",
    "tls.ca_cert_file",
    "tls.auth_clients",
    "backend.tls",
    "routes",
    "cache.enabled",
    "cache.max_memory_mb",
    "cache.max_age_ms",
    "cache.prefixes",
    "cache.commands",
];

/// What every worker reads.
pub struct Shared {
    pub settings: Settings,
    /// The settings that SIGHUP can change without a restart are read from
    /// here (client passwords and limits, timeouts, refresh interval).
    pub live: Swapped<Config>,
    /// The users of `live`, parsed; replaced with it.
    pub users: Swapped<crate::acl::Users>,
    /// The certificates and keys new connections use (clients' and
    /// nodes'); read again on SIGHUP.
    pub tls: ArcSwap<Tls>,
    pub policy: RedirectPolicy,
    /// Whether any upstream's `read_from` (the default one's included) is
    /// `replica`: if none, a read of a client that said neither READONLY
    /// nor READWRITE goes to the master without asking its upstream.
    pub replica_reads: bool,
    /// `cluster.availability_zone`, and whether reads sent to replicas take
    /// the slot's master in that zone before a replica of another
    /// (`read_from = "az-affinity-replicas-and-primary"`).
    pub zone: Option<(String, bool)>,
    /// The current slot map; empty until the first discovery succeeds.
    pub slots: Swapped<SlotMap>,
    /// The named upstreams, upstream `n` at `n - 1` (the default one's
    /// map is `slots`).
    pub upstreams: Box<[NamedUpstream]>,
    /// Which keys go to which upstream; replaced on SIGHUP while the
    /// upstreams stay the same.
    pub prefixes: Swapped<Prefixes>,
    pub commands: Swapped<CommandTable>,
    /// The reply cache, while `[cache] enabled` (workers read their copy,
    /// `node::Env::with_cache`; others [`Shared::reply_cache`]);
    /// `cache_on` says so without a look at it.
    pub cache: Swapped<Option<Arc<crate::process::cache::ReplyCache>>>,
    pub cache_on: AtomicBool,
    /// How many databases each upstream's nodes serve.
    pub databases: databases::Databases,
    /// What the nodes run, reported in INFO and HELLO.
    pub engine: ArcSwap<engine::Engine>,
    /// One entry per worker.
    pub stats: Vec<WorkerStats>,
    /// Per-family request latency, one entry per worker.
    pub latency: latency::Families,
    /// Round trips per cluster node.
    pub node_latency: latency::Nodes,
    /// Connections open to each node, within `backend.max_connections_per_node`.
    pub node_quota: NodeQuota,
    pub ops: OpsMeter,
    /// Requests, bytes and node time per slot, one table per worker.
    pub load: SlotLoad,
    /// The HOTKEYS session.
    pub hotkeys: HotKeys,
    pub slowlog: SlowLog,
    /// ACL LOG.
    pub acl_log: crate::observe::acl_log::AclLog,
    /// Calls and errors per command (INFO commandstats/errorstats).
    pub commands_seen: CommandStats,
    /// Every connected client, for CLIENT LIST and CLIENT KILL.
    pub clients: Registry,
    /// Lua script bodies seen, so EVALSHA works on every master.
    pub scripts: Scripts,
    pub started: Instant,
    /// One per upstream, the default one's first: each upstream's
    /// refresher waits on its own.
    refresh: Vec<Notify>,
    /// Clients that fit under the open files limit (see
    /// `server::fd_limit`); `client.max_clients` is capped at it.
    pub clients_that_fit: AtomicUsize,
    /// Set while resident memory is over `memory_limit_mb`.
    pub over_memory: AtomicBool,
    /// The room `memory_limit_mb` leaves to requests still being read.
    pub memory_room: Arc<room::MemoryRoom>,
    /// A client that held many bytes of replies left: the allocator is
    /// trimmed at the next look (`server::memory`).
    pub trim_due: AtomicBool,
    /// Cancelled on SIGTERM/SIGINT: stop accepting and reading, finish
    /// what is in flight.
    pub shutdown: CancellationToken,
    next_client_id: AtomicU64,
    refreshes: AtomicU64,
    commands_learnt: AtomicBool,
}

impl Shared {
    pub fn new(settings: Settings) -> Arc<Shared> {
        let memory_room = Arc::new(room::MemoryRoom::new(settings.raw.memory_limit_mb));
        let policy = RedirectPolicy::default();
        let stats = (0..settings.threads)
            .map(|_| WorkerStats::default())
            .collect();
        let latency = latency::Families::new(settings.threads);
        let commands_seen = CommandStats::new(settings.threads);
        let slowlog = SlowLog::new(
            settings.raw.slowlog.log_slower_than_us,
            settings.raw.slowlog.max_len,
        );
        let node_quota = NodeQuota::new(settings.raw.backend.max_connections_per_node);
        let threads = settings.threads;
        let upstreams = settings
            .upstreams
            .iter()
            .map(|u| NamedUpstream {
                settings: u.clone(),
                slots: Swapped::from_pointee(SlotMap::empty()),
            })
            .collect();
        let prefixes = settings.prefixes.clone();
        let named = settings.upstreams.len();
        let replica_reads = settings.read_from == ReadFrom::Replica
            || settings
                .upstreams
                .iter()
                .any(|u| u.read_from == ReadFrom::Replica);
        let zone = settings.raw.cluster.availability_zone.clone().map(|zone| {
            let read_from = &settings.raw.cluster.read_from;
            (
                zone,
                read_from.eq_ignore_ascii_case("az-affinity-replicas-and-primary"),
            )
        });
        let settings_cache = settings.raw.cache.clone();
        Arc::new(Shared {
            live: Swapped::from_pointee(settings.raw.clone()),
            users: Swapped::from_pointee(settings.raw.client.parsed_users()),
            tls: ArcSwap::from_pointee(settings.tls.clone()),
            settings,
            policy,
            replica_reads,
            zone,
            slots: Swapped::from_pointee(SlotMap::empty()),
            upstreams,
            prefixes: Swapped::from_pointee(prefixes),
            commands: Swapped::from_pointee(CommandTable::builtin()),
            engine: ArcSwap::from_pointee(engine::Engine::default()),
            stats,
            latency,
            node_latency: latency::Nodes::default(),
            node_quota,
            ops: OpsMeter::default(),
            load: SlotLoad::new(threads, named),
            hotkeys: HotKeys::new(threads),
            slowlog,
            acl_log: Default::default(),
            commands_seen,
            clients: Registry::default(),
            scripts: Scripts::default(),
            started: Instant::now(),
            refresh: (0..=named).map(|_| Notify::new()).collect(),
            databases: databases::Databases::new(named + 1),
            cache: Swapped::from_pointee(settings_cache.enabled.then(|| {
                let cache = crate::process::cache::ReplyCache::new(&settings_cache, threads);
                Arc::new(cache)
            })),
            cache_on: AtomicBool::new(settings_cache.enabled),
            clients_that_fit: AtomicUsize::new(usize::MAX),
            over_memory: AtomicBool::new(false),
            memory_room,
            trim_due: AtomicBool::new(false),
            shutdown: CancellationToken::new(),
            next_client_id: AtomicU64::new(1),
            refreshes: AtomicU64::new(0),
            commands_learnt: AtomicBool::new(false),
        })
    }

    /// A default configuration with `threads` workers and a seed nobody
    /// listens on, for unit tests.
    #[cfg(test)]
    pub fn for_tests(threads: usize) -> Arc<Shared> {
        let config = Config {
            seeds: vec!["127.0.0.1:1".to_owned()],
            threads,
            ..Config::default()
        };
        Shared::new(config.validate().expect("valid config"))
    }

    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.live.load().backend.request_timeout_ms)
    }

    pub fn refresh_interval(&self) -> Duration {
        Duration::from_millis(self.live.load().cluster.refresh_interval_ms)
    }

    /// Takes a reloaded, validated configuration: what can change at run
    /// time changes now, and new connections use the certificates and keys
    /// just read; returns the names of the settings that changed and of
    /// those that changed but need a restart. Never the values.
    pub fn reload(&self, settings: Settings) -> (Vec<String>, Vec<String>) {
        let new = settings.raw;
        // Routes name upstreams by their numbers: new routes (and the
        // upstreams' TLS) apply while the upstreams are the ones running,
        // by name.
        let same_upstreams = settings.upstreams.len() == self.upstreams.len()
            && settings
                .upstreams
                .iter()
                .zip(self.upstreams.iter())
                .all(|(new, running)| new.name == running.settings.name);
        let mut tls = settings.tls;
        if !same_upstreams {
            tls.named.clone_from(&self.tls.load().named);
        }
        // Stored before it is logged: whoever reads the line gets the new
        // certificates on the next connection.
        let tls = Arc::new(tls);
        self.tls.store(Arc::clone(&tls));
        if tls.server.is_some() || tls.backend.is_some() || tls.named.iter().any(Option::is_some) {
            tracing::info!(
                clients = tls.server.is_some() && self.settings.tls.listen.is_some(),
                nodes = tls.backend.is_some() || tls.named.iter().any(Option::is_some),
                "TLS certificates and keys read again; new connections use them"
            );
        }
        let old = self.live.load_full();
        let logged_out: Vec<&String> = old
            .client
            .users
            .iter()
            .filter(|(name, before)| new.client.users.get(*name) != Some(before))
            .map(|(name, _)| name)
            .collect();
        let (mut changed, mut restart): (Vec<String>, Vec<String>) =
            differences(&old, &new).into_iter().partition(|name| {
                // An upstream's TLS files are read again with the others'
                // while the upstreams are the ones running.
                let tls = name.starts_with("upstreams.") && name.ends_with(".tls");
                LIVE.contains(&name.as_str()) || (tls && same_upstreams)
            });
        if let Some(at) = changed.iter().position(|name| name == "routes") {
            if same_upstreams {
                self.prefixes.store(Arc::new(settings.prefixes));
            } else {
                restart.push(changed.remove(at));
            }
        }
        self.slowlog
            .configure(new.slowlog.log_slower_than_us, new.slowlog.max_len);
        if new.cache != old.cache {
            // A new store (or none): the old one's memory goes with it.
            let cache = new.cache.enabled.then(|| {
                let workers = self.settings.threads;
                Arc::new(crate::process::cache::ReplyCache::new(&new.cache, workers))
            });
            self.cache_on.store(false, Ordering::Release);
            self.cache.store(Arc::new(cache));
            self.cache_on.store(new.cache.enabled, Ordering::Release);
        }
        self.users.store(Arc::new(new.client.parsed_users()));
        self.live.store(Arc::new(new));
        // A user changed or removed is logged out: its clients are closed,
        // as Redis's ACL SETUSER/DELUSER do, once the new users are in
        // place (a client closed then logs in with the new rules).
        for name in logged_out {
            let closed = self.clients.close_user(name.as_bytes());
            tracing::info!(user = %name, closed, "user changed or removed: its clients closed");
        }
        (changed, restart)
    }

    /// Asks every upstream's refresher for a topology refresh soon; never
    /// waits.
    pub fn request_refresh(&self) {
        for each in &self.refresh {
            each.notify_one();
        }
    }

    /// Asks `upstream`'s refresher for a refresh soon (a MOVED there, a
    /// CLUSTERDOWN from one of its nodes): the other upstreams are not
    /// asked.
    pub fn request_refresh_of(&self, upstream: Upstream) {
        if let Some(each) = self.refresh.get(usize::from(upstream)) {
            each.notify_one();
        }
    }

    /// [`Shared::request_refresh_of`] the upstream `addr` is a node of
    /// (a connection to it failed).
    pub fn request_refresh_at(&self, addr: &NodeAddr) {
        self.request_refresh_of(self.upstream_number(addr));
    }

    /// Resolves when a refresh of `upstream` has been requested.
    pub async fn refresh_requested(&self, upstream: Upstream) {
        match self.refresh.get(usize::from(upstream)) {
            Some(each) => each.notified().await,
            None => std::future::pending().await,
        }
    }

    pub fn next_client_id(&self) -> u64 {
        self.next_client_id.fetch_add(1, Ordering::Relaxed)
    }

    pub fn count_refresh(&self) {
        self.refreshes.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether the command table came from the cluster's `COMMAND` reply.
    pub fn commands_learnt(&self) -> bool {
        self.commands_learnt.load(Ordering::Relaxed)
    }

    pub fn mark_commands_learnt(&self) {
        self.commands_learnt.store(true, Ordering::Relaxed);
    }

    pub fn refreshes(&self) -> u64 {
        self.refreshes.load(Ordering::Relaxed)
    }
}

/// The names (`listen`, `client.password`, ...) of the settings that differ
/// between two configurations: every top-level value, and every value of a
/// section, compared whole.
fn differences(old: &Config, new: &Config) -> Vec<String> {
    let flat = |config: &Config| -> Vec<(String, toml::Value)> {
        let Ok(toml::Value::Table(top)) = toml::Value::try_from(config) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (key, value) in top {
            match value {
                // Each upstream's settings by name: its TLS is reloadable.
                toml::Value::Table(section) if key == "upstreams" => {
                    for (name, upstream) in section {
                        match upstream {
                            toml::Value::Table(fields) => out.extend(
                                fields
                                    .into_iter()
                                    .map(|(k, v)| (format!("{key}.{name}.{k}"), v)),
                            ),
                            other => out.push((format!("{key}.{name}"), other)),
                        }
                    }
                }
                toml::Value::Table(section) => {
                    out.extend(section.into_iter().map(|(k, v)| (format!("{key}.{k}"), v)));
                }
                value => out.push((key, value)),
            }
        }
        out
    };
    let (old, new) = (flat(old), flat(new));
    let mut names: Vec<String> = new
        .iter()
        .filter(|(name, value)| old.iter().find(|(n, _)| n == name).map(|(_, v)| v) != Some(value))
        .map(|(name, _)| name.clone())
        .collect();
    names.extend(
        old.iter()
            .filter(|(name, _)| !new.iter().any(|(n, _)| n == name))
            .map(|(name, _)| name.clone()),
    );
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reload_names_what_changed_and_what_needs_a_restart() {
        let shared = Shared::for_tests(1);
        let mut new = Config::clone(&shared.live.load());
        new.client.password = Some("secret".to_owned());
        new.log.level = "debug".to_owned();
        new.memory_limit_mb = 512;
        new.listen = "127.0.0.1:1".to_owned();
        new.slowlog.max_len = 3;
        let (mut changed, mut restart) = shared.reload(new.validate().expect("valid"));
        changed.sort();
        restart.sort();
        assert_eq!(changed, ["client.password", "log.level", "slowlog.max_len"]);
        assert_eq!(restart, ["listen", "memory_limit_mb"]);
        assert_eq!(shared.live.load().slowlog.max_len, 3);
        let same = Config::clone(&shared.live.load());
        let (changed, restart) = shared.reload(same.validate().expect("valid"));
        assert!(changed.is_empty() && restart.is_empty());
    }

    /// A configuration with one named upstream, `b`.
    fn with_b() -> Config {
        let text = r#"
            seeds = ["127.0.0.1:1"]
            [upstreams.b]
            seeds = ["127.0.0.1:2"]
        "#;
        toml::from_str(text).expect("parse")
    }

    #[test]
    fn an_upstreams_tls_reloads_and_its_other_settings_need_a_restart() {
        let config = with_b();
        let shared = Shared::new(config.clone().validate().expect("valid"));
        let mut new = config;
        let b = new.upstreams.get_mut("b").expect("b");
        b.tls = Some(crate::config::BackendTlsConfig::default());
        b.request_timeout_ms = Some(300);
        let (changed, restart) = shared.reload(new.validate().expect("valid"));
        assert_eq!(changed, ["upstreams.b.tls"]);
        assert_eq!(restart, ["upstreams.b.request_timeout_ms"]);
    }

    #[tokio::test]
    async fn a_refresh_asked_of_one_upstream_wakes_only_its_refresher() {
        let shared = Shared::new(with_b().validate().expect("valid"));
        let asked = |upstream| {
            let shared = &shared;
            async move {
                crate::time::timeout(
                    Duration::from_millis(20),
                    shared.refresh_requested(upstream),
                )
                .await
                .is_ok()
            }
        };
        shared.request_refresh_of(1);
        assert!(asked(1).await && !asked(0).await);
        shared.request_refresh_at(&NodeAddr::new("127.0.0.1", 2));
        assert!(asked(1).await && !asked(0).await);
        shared.request_refresh_at(&NodeAddr::new("127.0.0.1", 9));
        assert!(asked(0).await && !asked(1).await);
        shared.request_refresh();
        assert!(asked(0).await && asked(1).await);
    }
}
