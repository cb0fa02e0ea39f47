//! State shared by every worker: read-mostly, never locked on the request
//! path. The slot map and the command table are snapshots swapped
//! atomically; the refresher is woken through a `Notify`, which coalesces
//! any number of wake-ups into one refresh.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use orthrus_cluster::{NodeAddr, RedirectPolicy, Slot, SlotMap};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::clients::Registry;
use crate::command_table::CommandTable;
use crate::config::{Config, Settings};
use crate::latency::{self, OpsMeter};
use crate::slowlog::SlowLog;
use crate::stats::WorkerStats;

/// What every worker reads.
pub struct Shared {
    pub settings: Settings,
    /// The settings that SIGHUP can change without a restart are read from
    /// here (client passwords and limits, timeouts, refresh interval).
    pub live: ArcSwap<Config>,
    pub policy: RedirectPolicy,
    /// The current slot map; empty until the first discovery succeeds.
    pub slots: ArcSwap<SlotMap>,
    pub commands: ArcSwap<CommandTable>,
    /// The cluster's `redis_version`, reported in INFO and HELLO.
    pub redis_version: ArcSwap<String>,
    /// One entry per worker.
    pub stats: Vec<WorkerStats>,
    /// Per-family request latency, one entry per worker.
    pub latency: latency::Families,
    /// Round trips per cluster node.
    pub node_latency: latency::Nodes,
    pub ops: OpsMeter,
    pub slowlog: SlowLog,
    /// Every connected client, for CLIENT LIST and CLIENT KILL.
    pub clients: Registry,
    pub started: Instant,
    refresh: Notify,
    /// Set while resident memory is over `memory_limit_mb`.
    pub over_memory: AtomicBool,
    /// Cancelled on SIGTERM/SIGINT: stop accepting and reading, finish
    /// what is in flight.
    pub shutdown: CancellationToken,
    next_client_id: AtomicU64,
    refreshes: AtomicU64,
    commands_learnt: AtomicBool,
}

impl Shared {
    pub fn new(settings: Settings) -> Arc<Shared> {
        let policy = RedirectPolicy {
            max_redirects: settings.raw.cluster.max_redirects,
            ..RedirectPolicy::default()
        };
        let stats = (0..settings.threads)
            .map(|_| WorkerStats::default())
            .collect();
        let latency = latency::Families::new(settings.threads);
        let slowlog = SlowLog::new(
            settings.raw.slowlog.log_slower_than_us,
            settings.raw.slowlog.max_len,
        );
        Arc::new(Shared {
            live: ArcSwap::from_pointee(settings.raw.clone()),
            settings,
            policy,
            slots: ArcSwap::from_pointee(SlotMap::empty()),
            commands: ArcSwap::from_pointee(CommandTable::builtin()),
            redis_version: ArcSwap::from_pointee("7.0.0".to_owned()),
            stats,
            latency,
            node_latency: latency::Nodes::default(),
            ops: OpsMeter::default(),
            slowlog,
            clients: Registry::default(),
            started: Instant::now(),
            refresh: Notify::new(),
            over_memory: AtomicBool::new(false),
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

    pub fn connect_timeout(&self) -> Duration {
        Duration::from_millis(self.live.load().backend.connect_timeout_ms)
    }

    pub fn refresh_interval(&self) -> Duration {
        Duration::from_millis(self.live.load().cluster.refresh_interval_ms)
    }

    /// Takes a reloaded, validated configuration: what can change at run
    /// time changes now; returns the names of the settings that changed
    /// and of those that changed but need a restart. Never the values.
    pub fn reload(&self, new: Config) -> (Vec<&'static str>, Vec<&'static str>) {
        let old = self.live.load_full();
        let mut changed = Vec::new();
        let mut restart = Vec::new();
        let mut check = |name: &'static str, differs: bool, live: bool| {
            if differs {
                if live {
                    changed.push(name)
                } else {
                    restart.push(name)
                }
            }
        };
        check(
            "client.password",
            old.client.password != new.client.password,
            true,
        );
        check("client.users", old.client.users != new.client.users, true);
        check(
            "client.max_clients",
            old.client.max_clients != new.client.max_clients,
            true,
        );
        check(
            "client.idle_timeout_s",
            old.client.idle_timeout_s != new.client.idle_timeout_s,
            true,
        );
        check(
            "backend.request_timeout_ms",
            old.backend.request_timeout_ms != new.backend.request_timeout_ms,
            true,
        );
        check(
            "backend.connect_timeout_ms",
            old.backend.connect_timeout_ms != new.backend.connect_timeout_ms,
            true,
        );
        check(
            "backend.username",
            old.backend.username != new.backend.username,
            true,
        );
        check(
            "backend.password",
            old.backend.password != new.backend.password,
            true,
        );
        check(
            "cluster.refresh_interval_ms",
            old.cluster.refresh_interval_ms != new.cluster.refresh_interval_ms,
            true,
        );
        check(
            "slowlog.log_slower_than_us",
            old.slowlog.log_slower_than_us != new.slowlog.log_slower_than_us,
            true,
        );
        check(
            "slowlog.max_len",
            old.slowlog.max_len != new.slowlog.max_len,
            true,
        );
        check("log.level", old.log.level != new.log.level, true);
        check("listen", old.listen != new.listen, false);
        check("seeds", old.seeds != new.seeds, false);
        check("threads", old.threads != new.threads, false);
        check("announce", old.announce != new.announce, false);
        check("metrics", old.metrics != new.metrics, false);
        check(
            "shutdown_timeout_ms",
            old.shutdown_timeout_ms != new.shutdown_timeout_ms,
            false,
        );
        check(
            "cluster.max_redirects",
            old.cluster.max_redirects != new.cluster.max_redirects,
            false,
        );
        check(
            "backend.connections_per_node",
            old.backend.connections_per_node != new.backend.connections_per_node,
            false,
        );
        check(
            "backend.dedicated_per_node",
            old.backend.dedicated_per_node != new.backend.dedicated_per_node,
            false,
        );
        check(
            "client.max_pending",
            old.client.max_pending != new.client.max_pending,
            false,
        );
        check(
            "client.max_bulk_len",
            old.client.max_bulk_len != new.client.max_bulk_len,
            false,
        );
        check(
            "client.max_args",
            old.client.max_args != new.client.max_args,
            false,
        );
        check(
            "client.max_inline_len",
            old.client.max_inline_len != new.client.max_inline_len,
            false,
        );
        check(
            "client.max_push_bytes",
            old.client.max_push_bytes != new.client.max_push_bytes,
            false,
        );
        check("log.format", old.log.format != new.log.format, false);
        self.slowlog
            .configure(new.slowlog.log_slower_than_us, new.slowlog.max_len);
        self.live.store(Arc::new(new));
        (changed, restart)
    }

    /// Asks the refresher for a topology refresh soon; never waits.
    pub fn request_refresh(&self) {
        self.refresh.notify_one();
    }

    /// Resolves when a refresh has been requested.
    pub async fn refresh_requested(&self) {
        self.refresh.notified().await;
    }

    /// Points one slot at a new owner at once (after MOVED); the full
    /// refresh that follows confirms it.
    pub fn patch_slot(&self, slot: Slot, addr: &NodeAddr) {
        if self.slots.load().master(slot) == Some(addr) {
            return;
        }
        self.slots.rcu(|map| {
            let mut map = SlotMap::clone(map);
            map.set_master(slot, addr.clone());
            map
        });
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
