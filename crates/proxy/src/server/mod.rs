//! Starting and stopping: the listeners (one per worker, SO_REUSEPORT on
//! one address; or one Unix socket shared by the workers; and the TLS
//! listener, one per worker too), the worker threads and the topology
//! refresher.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context as _;
use socket2::{Domain, Protocol, Socket, Type};

use crate::config::{Listen, Settings};
use crate::http as admin;
use crate::node::topology;
use crate::process::Shared;

pub mod fd_limit;
mod memory;
pub mod protected;
mod thread;

/// Pending connections the kernel queues per listener.
const BACKLOG: i32 = 1024;

/// What orthrus listens on: the plain listener and the TLS one (either
/// may be absent, not both).
pub struct Listeners {
    plain: Plain,
    /// One per worker (SO_REUSEPORT on `tls.listen`); empty without TLS.
    tls: Vec<std::net::TcpListener>,
}

/// The plain listener: one TCP listener per worker (SO_REUSEPORT on one
/// address), or one Unix socket that every worker accepts from, or none.
enum Plain {
    Tcp(Vec<std::net::TcpListener>),
    Unix {
        listener: std::os::unix::net::UnixListener,
        path: PathBuf,
    },
    None,
}

/// Binds what `listen` and `tls.listen` say, for `threads` workers.
pub fn bind(settings: &Settings) -> anyhow::Result<Listeners> {
    let count = settings.threads;
    let listen = &settings.listen;
    let plain = match listen {
        Listen::Tcp(addr) => bind_tcp(*addr, count).map(Plain::Tcp),
        Listen::Unix { path, perm } => bind_unix(path, *perm).map(|listener| Plain::Unix {
            listener,
            path: path.clone(),
        }),
        Listen::None => Ok(Plain::None),
    }
    .with_context(|| format!("cannot listen on {listen}"))?;
    let tls = match settings.tls.listen {
        Some(addr) => bind_tcp(addr, count)
            .with_context(|| format!("cannot listen for TLS (tls.listen) on {addr}"))?,
        None => Vec::new(),
    };
    Ok(Listeners { plain, tls })
}

/// Binds `count` listeners on `addr` with SO_REUSEPORT. With port 0, the
/// first one picks the port and the others share it.
fn bind_tcp(addr: SocketAddr, count: usize) -> io::Result<Vec<std::net::TcpListener>> {
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

/// Binds a Unix socket at `path`. A file left there by a process that is
/// gone is replaced; one that a live process still accepts on is not.
fn bind_unix(path: &Path, perm: Option<u32>) -> io::Result<std::os::unix::net::UnixListener> {
    use std::os::unix::fs::PermissionsExt as _;
    if path.exists() {
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!("{} is in use by a live process", path.display()),
            ));
        }
        std::fs::remove_file(path)?;
    }
    let listener = std::os::unix::net::UnixListener::bind(path)?;
    listener.set_nonblocking(true)?;
    if let Some(mode) = perm {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    }
    Ok(listener)
}

// === impl Listeners ===

impl Listeners {
    /// Where clients connect in plain text, as an operator writes it.
    pub fn address(&self) -> String {
        match &self.plain {
            Plain::Tcp(list) => first_address(list),
            Plain::Unix { path, .. } => format!("unix:{}", path.display()),
            Plain::None => "none".to_owned(),
        }
    }

    /// Where clients connect over TLS, if they can.
    pub fn tls_address(&self) -> Option<String> {
        (!self.tls.is_empty()).then(|| first_address(&self.tls))
    }

    /// What each of `count` workers accepts on.
    fn split(self, count: usize) -> io::Result<Vec<thread::Listeners>> {
        let count = count.max(1);
        let plain: Vec<Option<thread::Listener>> = match self.plain {
            Plain::Tcp(list) => list
                .into_iter()
                .map(|l| Some(thread::Listener::Tcp(l)))
                .collect(),
            Plain::Unix { listener, .. } => (0..count)
                .map(|_| {
                    listener
                        .try_clone()
                        .map(|l| Some(thread::Listener::Unix(l)))
                })
                .collect::<io::Result<_>>()?,
            Plain::None => (0..count).map(|_| None).collect(),
        };
        let mut tls = self.tls.into_iter();
        Ok(plain
            .into_iter()
            .map(|plain| thread::Listeners {
                plain,
                tls: tls.next(),
            })
            .collect())
    }
}

fn first_address(list: &[std::net::TcpListener]) -> String {
    list.first()
        .and_then(|l| l.local_addr().ok())
        .map_or_else(String::new, |a| a.to_string())
}

/// Runs orthrus on `listeners` (one per worker) until `shutdown` resolves,
/// then stops accepting, lets in-flight requests finish for up to
/// `shutdown_timeout_ms`, and returns; `force` cuts that short.
pub async fn run(
    settings: Settings,
    listeners: Listeners,
    shutdown: impl Future<Output = ()>,
    force: impl Future<Output = ()>,
    mut reloads: tokio::sync::mpsc::UnboundedReceiver<Settings>,
) -> anyhow::Result<()> {
    let shared = Shared::new(settings);
    crate::time::start_keeper().context("cannot start the timer thread")?;
    warn_if_protected(&shared.settings);
    let budget = fd_limit::share(&shared.settings);
    if let Some(budget) = budget {
        shared
            .clients_that_fit
            .store(budget.clients, Ordering::Relaxed);
        shared
            .node_quota
            .limit_descriptors(budget.node_connections, budget.shared_connections);
    }
    if shared.settings.raw.memory_limit_mb > 0 {
        tokio::spawn(memory::watch_limit(shared.clone()));
    }
    tokio::spawn(sample_ops(shared.clone()));
    tokio::spawn(sample_load(shared.clone()));
    tokio::spawn(memory::give_back_when_clients_leave(shared.clone()));
    let reloading = shared.clone();
    tokio::spawn(async move {
        while let Some(settings) = reloads.recv().await {
            let (changed, restart) = reloading.reload(settings);
            tracing::info!(
                changed = %changed.join(","),
                needs_restart = %restart.join(","),
                "configuration reloaded"
            );
        }
    });
    if let Some(addr) = shared.settings.metrics {
        let listener = admin::bind(addr).with_context(|| {
            format!("cannot listen for the admin endpoint (--metrics) on {addr}")
        })?;
        let connections = budget.map_or(admin::MAX_CONNECTIONS, |b| b.admin_connections);
        admin::spawn(listener, connections, shared.clone())
            .context("cannot start the admin endpoint")?;
    }
    topology::spawn(shared.clone())?;
    let socket_file = match &listeners.plain {
        Plain::Unix { path, .. } => Some(path.clone()),
        Plain::Tcp(_) | Plain::None => None,
    };
    let listeners = listeners.split(shared.settings.threads)?;
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
    tracing::info!(
        deadline_ms = deadline.as_millis() as u64,
        "shutting down: no new clients, finishing in-flight requests"
    );
    shared.shutdown.cancel();
    shared.clients.drain_all();
    let drained = async {
        while !workers.iter().all(std::thread::JoinHandle::is_finished) {
            crate::time::sleep(Duration::from_millis(10)).await;
        }
    };
    // No new client can connect once the workers stopped accepting.
    if let Some(path) = socket_file {
        let _ = std::fs::remove_file(path);
    }
    tokio::select! {
        () = drained => tracing::info!("stopped"),
        () = crate::time::sleep(deadline + Duration::from_millis(500)) => {
            tracing::warn!("shutdown deadline passed with requests still in flight; exiting");
        }
        () = force => anyhow::bail!("second signal: exiting at once"),
    }
    Ok(())
}

/// Says at start-up when protected mode will turn clients away: the
/// listener is reachable from other hosts and nothing asks for a password.
fn warn_if_protected(settings: &Settings) {
    let raw = &settings.raw;
    let reachable = [settings.listen.tcp(), settings.tls.listen]
        .into_iter()
        .flatten()
        .any(|addr| !protected::is_local(&crate::observe::clients::ClientAddr::Tcp(addr)));
    if raw.protected_mode && protected::is_open(raw) && reachable {
        tracing::warn!(
            "protected mode: no client password and no user is set, so only loopback \
             clients are served; set client.password (or client.password_file) or \
             protected_mode = false"
        );
    }
}

/// Samples the command counter for INFO's `instantaneous_ops_per_sec`.
async fn sample_ops(shared: Arc<Shared>) {
    let mut tick = crate::time::interval(crate::observe::stats::OpsMeter::INTERVAL);
    loop {
        tick.tick().await;
        shared
            .ops
            .sample(crate::observe::stats::totals(&shared.stats).commands);
        // A HOTKEYS session past its DURATION stops collecting.
        shared.hotkeys.tick(&shared.load);
    }
}

/// Closes an interval of the per-slot load for `ORTHRUS HOTSLOTS`.
async fn sample_load(shared: Arc<Shared>) {
    let mut tick = crate::time::interval(crate::observe::load::INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        shared.load.tick();
    }
}
