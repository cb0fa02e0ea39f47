//! A worker thread: one thread with a current-thread runtime, its own listener
//! (SO_REUSEPORT, so the kernel spreads connections over workers), its own
//! client sessions and its own backend connections. Nothing on its request
//! path takes a lock or crosses a thread.

use std::io;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use std::sync::atomic::Ordering;

use std::path::Path;

use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};

use crate::observe::clients::ClientAddr;
use crate::observe::stats::WorkerStats;
use crate::process::Shared;
use crate::session;
use crate::worker::WorkerCtx;

/// Runs worker `index` on the calling thread until `Shared::shutdown` is
/// cancelled and its clients are drained.
pub fn run(index: usize, listener: Listener, shared: Arc<Shared>) -> io::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let local = tokio::task::LocalSet::new();
    let ctx = Rc::new(WorkerCtx::new(shared, index));
    local.block_on(&runtime, async move {
        let listener = Acceptor::new(listener)?;
        accept_loop(listener, ctx.clone()).await;
        drain(&ctx).await;
        Ok(())
    })
}

/// Clients connected to every worker.
fn connected(shared: &Shared) -> usize {
    let n: i64 = shared
        .stats
        .iter()
        .map(|w| w.connected_clients.load(Ordering::Relaxed))
        .sum();
    usize::try_from(n).unwrap_or(0)
}

/// Over `client.max_clients`: say so, as Redis does, and close.
async fn refuse(mut stream: impl AsyncWrite + Unpin) {
    let _ = stream
        .write_all(b"-ERR max number of clients reached\r\n")
        .await;
    let _ = stream.shutdown().await;
}

/// After the listener closed: lets this worker's sessions finish their
/// in-flight requests, up to `shutdown_timeout_ms`.
async fn drain(ctx: &WorkerCtx) {
    let deadline = tokio::time::Instant::now()
        + Duration::from_millis(ctx.shared.settings.raw.shutdown_timeout_ms);
    while ctx.stats().connected_clients.load(Ordering::Relaxed) > 0
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn accept_loop(listener: Acceptor, ctx: Rc<WorkerCtx>) {
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(conn) => {
                    if connected(&ctx.shared) >= ctx.shared.live.load().client.max_clients {
                        WorkerStats::bump(&ctx.stats().rejected_connections);
                        match conn {
                            Conn::Tcp(stream, _) => tokio::task::spawn_local(refuse(stream)),
                            Conn::Unix(stream, _) => tokio::task::spawn_local(refuse(stream)),
                        };
                    } else {
                        match conn {
                            Conn::Tcp(stream, peer) => tokio::task::spawn_local(
                                session::serve(stream, ClientAddr::Tcp(peer), ctx.clone()),
                            ),
                            Conn::Unix(stream, path) => tokio::task::spawn_local(
                                session::serve(stream, ClientAddr::Unix(path), ctx.clone()),
                            ),
                        };
                    }
                }
                Err(e) => {
                    // Out of file descriptors and the like: do not spin.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            () = ctx.shared.shutdown.cancelled() => return,
        }
    }
}

/// A worker's listener, as it is handed over from the binding thread.
pub enum Listener {
    Tcp(std::net::TcpListener),
    Unix(std::os::unix::net::UnixListener),
}

/// The same, registered with the worker's runtime.
enum Acceptor {
    Tcp(TcpListener),
    /// With the socket's path, that clients on it are shown with.
    Unix(UnixListener, Arc<Path>),
}

/// An accepted client connection.
enum Conn {
    Tcp(TcpStream, std::net::SocketAddr),
    Unix(UnixStream, Arc<Path>),
}

// === impl Acceptor ===

impl Acceptor {
    fn new(listener: Listener) -> io::Result<Acceptor> {
        Ok(match listener {
            Listener::Tcp(l) => Acceptor::Tcp(TcpListener::from_std(l)?),
            Listener::Unix(l) => {
                let path = l
                    .local_addr()?
                    .as_pathname()
                    .map_or_else(|| Arc::from(Path::new("")), Arc::from);
                Acceptor::Unix(UnixListener::from_std(l)?, path)
            }
        })
    }

    async fn accept(&self) -> io::Result<Conn> {
        match self {
            Acceptor::Tcp(l) => l.accept().await.map(|(s, peer)| Conn::Tcp(s, peer)),
            Acceptor::Unix(l, path) => l.accept().await.map(|(s, _)| Conn::Unix(s, path.clone())),
        }
    }
}
