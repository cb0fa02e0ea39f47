//! The topology refresher: one background task, on its own thread, that
//! discovers the cluster from any reachable node and swaps in a new slot
//! map. The request path never waits for it.
//!
//! It asks `CLUSTER SHARDS` (Redis 7) and falls back to `CLUSTER SLOTS`;
//! with `cluster.mode = "standalone"` it only checks that the one
//! redis-server answers `PING`, and gives it every slot.
//! It runs at start-up (retrying with back-off until some seed answers,
//! while orthrus already listens and answers `-CLUSTERDOWN`), periodically,
//! and whenever a worker asks: after a MOVED or a backend failure. Every
//! upstream (the default one and those named in `[upstreams]`) has its own
//! loop on that thread, refreshed from its own nodes and seeds, so that
//! one that cannot be reached holds back no other.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use orthrus_cluster::{NodeAddr, SlotMap};
use orthrus_resp::Value;

use crate::config::{BackendConfig, BackendTls, DEFAULT_NAME, Mode};
use crate::node::client::NodeClient;
use crate::process::Shared;
use crate::process::engine::Engine;
use crate::route::prefix::{DEFAULT_UPSTREAM, Upstream};
use crate::route::table::CommandTable;

/// Wait after a trigger, so that a burst of MOVEDs makes one refresh.
const DEBOUNCE: Duration = Duration::from_millis(20);
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// Starts the refresher thread.
pub fn spawn(shared: Arc<Shared>) -> io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("orthrus-topology".into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    tracing::error!(error = %e, "cannot start the topology refresher");
                    return;
                }
            };
            runtime.block_on(refresher(shared));
        })
}

/// One loop per upstream, each with its own back-off, so that an
/// upstream that cannot be reached never holds back another's refresh.
async fn refresher(shared: Arc<Shared>) {
    let count = shared.upstreams.len().saturating_add(1);
    let mut loops = tokio::task::JoinSet::new();
    for upstream in (0..=Upstream::MAX).take(count) {
        loops.spawn(keep_fresh(Arc::clone(&shared), upstream));
    }
    while loops.join_next().await.is_some() {}
}

/// Refreshes `upstream` at start-up (with back-off until one of its nodes
/// answers), every `cluster.refresh_interval_ms`, and when asked.
async fn keep_fresh(shared: Arc<Shared>, upstream: Upstream) {
    let name = shared
        .named(upstream)
        .map_or(DEFAULT_NAME, |u| u.settings.name.as_str());
    let mut backoff = FIRST_BACKOFF;
    let mut known = false;
    loop {
        shared.count_refresh();
        match refresh_once(&shared, upstream).await {
            Ok(()) => {
                known = true;
                backoff = FIRST_BACKOFF;
                forget_departed(&shared);
                tokio::select! {
                    () = shared.refresh_requested(upstream) => crate::time::sleep(DEBOUNCE).await,
                    // Read each time: SIGHUP may change it.
                    () = crate::time::sleep(shared.refresh_interval()) => {}
                }
            }
            Err(e) => {
                if known {
                    tracing::warn!(upstream = name, error = %e, "topology refresh failed");
                } else {
                    tracing::warn!(upstream = name, error = %e, retry_in_ms = backoff.as_millis() as u64, "cluster not reachable yet");
                }
                tokio::select! {
                    () = shared.refresh_requested(upstream) => {}
                    () = crate::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

/// Nodes gone from every upstream take their latency series along, once
/// no connection records into them (looked at after every refresh: the
/// workers close theirs after the change).
fn forget_departed(shared: &Shared) {
    let maps: Vec<_> = shared
        .upstream_maps()
        .into_iter()
        .map(|(_, _, map)| map)
        .filter(|map| !map.nodes().is_empty())
        .collect();
    if !maps.is_empty() {
        shared
            .node_latency
            .retain(|addr| maps.iter().any(|map| map.node(addr).is_some()));
    }
}

/// Asks the known nodes of `upstream`, then its seeds, until one describes
/// it.
async fn refresh_once(shared: &Shared, upstream: Upstream) -> io::Result<()> {
    let slots = shared.slots_of(upstream);
    let (name, seeds, mode) = match shared.named(upstream) {
        Some(named) => (
            named.settings.name.as_str(),
            &named.settings.seeds,
            named.settings.mode,
        ),
        None => (DEFAULT_NAME, &shared.settings.seeds, shared.settings.mode),
    };
    let current = slots.load_full();
    let mut candidates: Vec<NodeAddr> = current.masters();
    candidates.extend(current.nodes().iter().map(|n| n.addr.clone()));
    candidates.extend(seeds.iter().cloned());
    let mut seen = std::collections::HashSet::new();
    candidates.retain(|a| seen.insert(a.clone()));
    // Spread the load of refreshing over the nodes.
    let start = usize::try_from(shared.refreshes()).unwrap_or(0) % candidates.len().max(1);
    candidates.rotate_left(start);

    let mut last_error = io::Error::other("no seed configured");
    for addr in candidates {
        let node = shared.node_settings(&addr);
        let timeout =
            Duration::from_millis(node.backend.connect_timeout_ms).max(Duration::from_millis(500));
        match discover(&addr, mode, timeout, &node.backend, node.tls.as_ref()).await {
            Ok(map) => {
                // Learn the command table first, so that the first client
                // served already routes with the cluster's own table.
                if upstream == DEFAULT_UPSTREAM && !shared.commands_learnt() {
                    learn(shared, &addr, timeout).await;
                }
                if !shared.databases.known(upstream) {
                    ask_databases(shared, (upstream, name), &addr, timeout).await;
                }
                install(shared, (upstream, name), &current, map);
                return Ok(());
            }
            Err(e) => last_error = io::Error::new(e.kind(), format!("{addr}: {e}")),
        }
    }
    Err(last_error)
}

async fn discover(
    addr: &NodeAddr,
    mode: Mode,
    timeout: Duration,
    backend: &BackendConfig,
    tls: Option<&BackendTls>,
) -> io::Result<SlotMap> {
    let mut node = NodeClient::connect(addr, timeout, backend, tls).await?;
    if mode == Mode::Standalone {
        // A server still loading its data set answers -LOADING.
        if let Value::Error(e) = node.cmd(&[b"PING"]).await? {
            return Err(io::Error::other(format!(
                "PING: {}",
                String::from_utf8_lossy(&e)
            )));
        }
        return Ok(SlotMap::standalone(addr.clone()));
    }
    let shards = node.cmd(&[b"CLUSTER", b"SHARDS"]).await?;
    let map = if shards.is_error() {
        let slots = node.cmd(&[b"CLUSTER", b"SLOTS"]).await?;
        if let Value::Error(e) = &slots {
            return Err(io::Error::other(format!(
                "CLUSTER SLOTS: {}",
                String::from_utf8_lossy(e)
            )));
        }
        SlotMap::from_slots(&slots, addr)
    } else {
        SlotMap::from_shards(&shards, addr)
    }
    .map_err(io::Error::other)?;
    if map.covered_slots() == 0 {
        return Err(io::Error::other("the node knows no slot owner"));
    }
    Ok(map)
}

fn install(shared: &Shared, (upstream, name): (Upstream, &str), current: &SlotMap, map: SlotMap) {
    let slots = shared.slots_of(upstream);
    let changed = !current.same_layout(&map);
    if changed {
        // Cached replies were read under the old owners' tracking.
        if let Some(cache) = shared.reply_cache() {
            cache.invalidate_all();
        }
        // Seeds are checked at start-up; two upstreams whose seeds are
        // different nodes of one cluster are found only here.
        let maps = shared.upstream_maps();
        let others = maps
            .iter()
            .enumerate()
            .filter(|(n, _)| *n != usize::from(upstream));
        for (_, (other, _, their)) in others {
            if map
                .nodes()
                .iter()
                .any(|node| their.node(&node.addr).is_some())
            {
                tracing::error!(
                    upstream = name,
                    other,
                    "these upstreams share nodes: each must be a cluster of its own (their nodes' settings and counts are mixed up); fix [upstreams] and restart"
                );
            }
        }
    }
    // Published before it is announced: whoever reads the log line finds
    // the new owners in place.
    let map = Arc::new(map);
    slots.store(Arc::clone(&map));
    if changed {
        let masters = map.masters();
        tracing::info!(
            upstream = name,
            masters = masters.len(),
            nodes = map.nodes().len(),
            slots_covered = map.covered_slots(),
            masters_list = %masters
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(","),
            "topology changed"
        );
        for (start, end, owner) in map.slot_ranges() {
            tracing::debug!(start, end, owner = %owner, "slot range");
        }
    }
}

/// Learns how many databases the nodes of `upstream` serve, from `addr`.
async fn ask_databases(
    shared: &Shared,
    (upstream, name): (Upstream, &str),
    addr: &NodeAddr,
    timeout: Duration,
) {
    let node = shared.node_settings(addr);
    let asked = async {
        let mut client =
            NodeClient::connect(addr, timeout, &node.backend, node.tls.as_ref()).await?;
        client.databases().await
    };
    match asked.await {
        Ok(served) => {
            tracing::info!(
                upstream = name,
                databases = served.count,
                "databases the nodes serve"
            );
            shared.databases.learnt(upstream, served);
        }
        Err(e) => {
            tracing::warn!(upstream = name, error = %e, "could not ask how many databases the nodes serve")
        }
    }
}

/// Learns the command table and the server version from one node.
async fn learn(shared: &Shared, addr: &NodeAddr, timeout: Duration) {
    let tls = shared.tls.load_full();
    let backend = &shared.live.load_full().backend;
    let Ok(mut node) = NodeClient::connect(addr, timeout, backend, tls.backend.as_ref()).await
    else {
        return;
    };
    match node.cmd(&[b"COMMAND"]).await {
        Ok(reply) => match CommandTable::from_command_reply(&reply) {
            Some(table) => {
                let commands = table.len();
                shared.commands.store(Arc::new(table));
                shared.mark_commands_learnt();
                tracing::info!(commands, node = %addr, "command table learnt from the cluster");
            }
            None => {
                tracing::warn!(node = %addr, "COMMAND reply not understood; using the built-in table")
            }
        },
        Err(e) => {
            tracing::warn!(node = %addr, error = %e, "COMMAND failed; using the built-in table")
        }
    }
    if let Ok(info) = node.cmd(&[b"INFO", b"server"]).await {
        if let Some(text) = info.as_bytes().and_then(|b| std::str::from_utf8(b).ok()) {
            // HELLO without a protocol answers in the one spoken.
            let hello = node.cmd(&[b"HELLO"]).await.ok();
            let engine = Engine::from_node(text, hello.as_ref());
            shared.engine.store(Arc::new(engine));
        }
    }
}
