//! State shared by every worker: read-mostly, never locked on the request
//! path. The slot map and the command table are snapshots swapped
//! atomically; the refresher is woken through a `Notify`, which coalesces
//! any number of wake-ups into one refresh.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use arc_swap::ArcSwap;
use orthrus_cluster::{NodeAddr, RedirectPolicy, Slot, SlotMap};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::clients::Registry;
use crate::command_table::CommandTable;
use crate::config::Settings;
use crate::stats::WorkerStats;

/// What every worker reads.
pub struct Shared {
    pub settings: Settings,
    pub policy: RedirectPolicy,
    /// The current slot map; empty until the first discovery succeeds.
    pub slots: ArcSwap<SlotMap>,
    pub commands: ArcSwap<CommandTable>,
    /// The cluster's `redis_version`, reported in INFO and HELLO.
    pub redis_version: ArcSwap<String>,
    /// One entry per worker.
    pub stats: Vec<WorkerStats>,
    /// Every connected client, for CLIENT LIST and CLIENT KILL.
    pub clients: Registry,
    pub started: Instant,
    refresh: Notify,
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
        Arc::new(Shared {
            settings,
            policy,
            slots: ArcSwap::from_pointee(SlotMap::empty()),
            commands: ArcSwap::from_pointee(CommandTable::builtin()),
            redis_version: ArcSwap::from_pointee("7.0.0".to_owned()),
            stats,
            clients: Registry::default(),
            started: Instant::now(),
            refresh: Notify::new(),
            shutdown: CancellationToken::new(),
            next_client_id: AtomicU64::new(1),
            refreshes: AtomicU64::new(0),
            commands_learnt: AtomicBool::new(false),
        })
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
