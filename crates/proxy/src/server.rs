//! Starting and stopping: the listeners (one per worker, SO_REUSEPORT on
//! one address), the worker threads and the topology refresher.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use socket2::{Domain, Protocol, Socket, Type};

use crate::config::Settings;
use crate::shared::Shared;
use crate::{topology, worker};

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

/// Runs orthrus on `listeners` (one per worker) until `shutdown` resolves.
pub async fn run(
    settings: Settings,
    listeners: Vec<std::net::TcpListener>,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let shared = Shared::new(settings);
    topology::spawn(shared.clone())?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut workers = Vec::with_capacity(listeners.len());
    for (index, listener) in listeners.into_iter().enumerate() {
        let shared: Arc<Shared> = shared.clone();
        let stop = stop_rx.clone();
        let handle = std::thread::Builder::new()
            .name(format!("orthrus-worker-{index}"))
            .spawn(move || {
                if let Err(e) = worker::run(index, listener, shared, stop) {
                    tracing::error!(worker = index, error = %e, "worker stopped");
                }
            })?;
        workers.push(handle);
    }
    shutdown.await;
    tracing::info!("shutting down");
    let _ = stop_tx.send(true);
    Ok(())
}
