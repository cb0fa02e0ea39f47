//! Starting and stopping: the listeners (one per worker, SO_REUSEPORT on
//! one address), the worker threads and the topology refresher.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use socket2::{Domain, Protocol, Socket, Type};

use crate::config::Settings;
use crate::http as admin;
use crate::node::topology;
use crate::process::Shared;

mod thread;

/// Pending connections the kernel queues per listener.
const BACKLOG: i32 = 1024;

/// Binds `count` listeners on `addr` with SO_REUSEPORT. With port 0, the
/// first one picks the port and the others share it.
pub fn bind(addr: SocketAddr, count: usize) -> io::Result<Vec<std::net::TcpListener>> {
    let mut listeners = Vec::with_capacity(count);
    let mut addr = addr;
    for _ in 0..count.max(1) {
        let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
        socket.set_reuse_address(true)?;
        socket.set_reuse_port(true)?;
        socket.set_nonblocking(true)?;
        socket.bind(&addr.into())?;
        socket.listen(BACKLOG)?;
        let listener: std::net::TcpListener = socket.into();
        addr = listener.local_addr()?;
        listeners.push(listener);
    }
    Ok(listeners)
}

/// Runs orthrus on `listeners` (one per worker) until `shutdown` resolves,
/// then stops accepting, lets in-flight requests finish for up to
/// `shutdown_timeout_ms`, and returns; `force` cuts that short.
pub async fn run(
    settings: Settings,
    listeners: Vec<std::net::TcpListener>,
    shutdown: impl Future<Output = ()>,
    force: impl Future<Output = ()>,
    mut reloads: tokio::sync::mpsc::UnboundedReceiver<crate::Config>,
) -> anyhow::Result<()> {
    let shared = Shared::new(settings);
    if shared.settings.raw.memory_limit_mb > 0 {
        tokio::spawn(watch_memory(shared.clone()));
    }
    tokio::spawn(sample_ops(shared.clone()));
    let reloading = shared.clone();
    tokio::spawn(async move {
        while let Some(config) = reloads.recv().await {
            let (changed, restart) = reloading.reload(config);
            tracing::info!(?changed, needs_restart = ?restart, "configuration reloaded");
        }
    });
    if let Some(addr) = shared.settings.metrics {
        let listener = admin::bind(addr).with_context(|| {
            format!("cannot listen for the admin endpoint (--metrics) on {addr}")
        })?;
        admin::spawn(listener, shared.clone()).context("cannot start the admin endpoint")?;
    }
    topology::spawn(shared.clone())?;
    let mut workers = Vec::with_capacity(listeners.len());
    for (index, listener) in listeners.into_iter().enumerate() {
        let shared: Arc<Shared> = shared.clone();
        let handle = std::thread::Builder::new()
            .name(format!("orthrus-worker-{index}"))
            .spawn(move || {
                if let Err(e) = thread::run(index, listener, shared) {
                    tracing::error!(worker = index, error = %e, "worker stopped");
                }
            })?;
        workers.push(handle);
    }
    shutdown.await;
    let deadline = Duration::from_millis(shared.settings.raw.shutdown_timeout_ms);
    tracing::info!(deadline = ?deadline, "shutting down: no new clients, finishing in-flight requests");
    shared.shutdown.cancel();
    shared.clients.drain_all();
    let drained = async {
        while !workers.iter().all(std::thread::JoinHandle::is_finished) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::select! {
        () = drained => tracing::info!("stopped"),
        () = tokio::time::sleep(deadline + Duration::from_millis(500)) => {
            tracing::warn!("shutdown deadline passed with requests still in flight; exiting");
        }
        () = force => anyhow::bail!("second signal: exiting at once"),
    }
    Ok(())
}

/// Samples resident memory every 100 ms against `memory_limit_mb`.
async fn watch_memory(shared: Arc<Shared>) {
    use std::sync::atomic::Ordering;
    let limit_kib = shared.settings.raw.memory_limit_mb.saturating_mul(1024);
    loop {
        if let Some(rss) = resident_kib() {
            let over = rss > limit_kib;
            if shared.over_memory.swap(over, Ordering::Relaxed) != over {
                if over {
                    tracing::warn!(
                        rss_kib = rss,
                        limit_kib,
                        "over memory_limit_mb: refusing new requests"
                    );
                } else {
                    tracing::info!(rss_kib = rss, limit_kib, "back under memory_limit_mb");
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Samples the command counter for INFO's `instantaneous_ops_per_sec`.
async fn sample_ops(shared: Arc<Shared>) {
    let mut tick = tokio::time::interval(crate::observe::stats::OpsMeter::INTERVAL);
    loop {
        tick.tick().await;
        shared
            .ops
            .sample(crate::observe::stats::totals(&shared.stats).commands);
    }
}

/// VmRSS of this process, in KiB.
fn resident_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?;
    line.trim().trim_end_matches("kB").trim().parse().ok()
}
