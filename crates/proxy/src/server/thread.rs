//! A worker thread: one thread with a current-thread runtime, its own
//! listeners (SO_REUSEPORT, so the kernel spreads connections over
//! workers; a plain one, a TLS one, or both), its own client sessions and
//! its own backend connections. Nothing on its request path takes a lock
//! or crosses a thread.
//!
//! A TLS client's handshake runs in its own task, with the certificates
//! current when it connected, before its session starts; the session is
//! then the same code over a TLS stream instead of a TCP one.

use std::io::{self, Write as _};
use std::rc::Rc;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use std::sync::atomic::Ordering;

use std::net::SocketAddr;
use std::path::Path;

use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};

use crate::observe::clients::ClientAddr;
use crate::observe::stats::WorkerStats;
use crate::observe::throttle::Throttle;
use crate::process::Shared;
use crate::server::protected;
use crate::session;
use crate::worker::WorkerCtx;

/// How often a worker looks for nodes gone from the topology.
const FORGET_EVERY: Duration = Duration::from_secs(1);

/// How long a TLS client may take to finish its handshake.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs worker `index` on the calling thread until `Shared::shutdown` is
/// cancelled and its clients are drained.
pub fn run(index: usize, listeners: Listeners, shared: Arc<Shared>) -> io::Result<()> {
    // A local runtime: its tasks need not be `Send`, and each is scheduled
    // once when woken (a `LocalSet` on a current-thread runtime queues it
    // in the set and wakes the set in the runtime). No time driver: its
    // timers are the timer thread's (`crate::time`), so a park is the IO
    // driver's alone, with no hook: what the turn's requests left held for
    // the node connections is written by a task of the worker's own
    // (`node::conn::flusher`), woken only in a turn that held some (and,
    // with more than one client waiting, writing after one more look at
    // the reactor).
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build_local(tokio::runtime::LocalOptions::default())?;
    let ctx = Rc::new(WorkerCtx::new(shared, index));
    runtime.block_on(async move {
        let plain = listeners.plain.map(Acceptor::new).transpose()?;
        let tls = listeners
            .tls
            .map(|l| TcpListener::from_std(l).map(Acceptor::Tls))
            .transpose()?;
        // The accept loop runs as a task of its own; this future only
        // waits for it, then drains.
        let acceptor = ctx.spawn(accept_loop(plain, tls, ctx.clone()));
        ctx.spawn(forget_departed_nodes(ctx.clone()));
        let env = ctx.pool.env().clone();
        // More than one client waits: one besides any one of them.
        ctx.spawn(crate::node::conn::flusher(move || env.others_waiting(true)));
        if let Err(e) = acceptor.await {
            if e.is_panic() {
                std::panic::resume_unwind(e.into_panic());
            }
        }
        drain(&ctx).await;
        Ok(())
    })
}

/// Every [`FORGET_EVERY`], drops the connections and state the worker
/// keeps for nodes gone from the topology: with pod addresses churning,
/// they would pile up on every worker.
async fn forget_departed_nodes(ctx: Rc<WorkerCtx>) {
    loop {
        tokio::select! {
            () = crate::time::sleep(FORGET_EVERY) => ctx.forget_departed_nodes(),
            () = ctx.shared.shutdown.cancelled() => return,
        }
    }
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

/// Over `client.max_clients`, as Redis says it.
const MAX_CLIENTS_REACHED: &[u8] = b"-ERR max number of clients reached\r\n";

/// Clients refused over `max_clients` are logged at most once a second.
static MAX_CLIENTS_LOG: Throttle = Throttle::new();

/// Failed accepts are logged at most once a second.
static ACCEPT_FAILED_LOG: Throttle = Throttle::new();

/// Says why (`reply`) and closes.
async fn refuse(mut stream: impl AsyncWrite + Unpin, reply: &'static [u8]) {
    let _ = stream.write_all(reply).await;
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
        crate::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn accept_loop(plain: Option<Acceptor>, tls: Option<Acceptor>, ctx: Rc<WorkerCtx>) {
    let mut reserve = Reserve::new();
    loop {
        let accepted = tokio::select! {
            accepted = accept(plain.as_ref()) => accepted,
            accepted = accept(tls.as_ref()) => accepted,
            () = ctx.shared.shutdown.cancelled() => return,
        };
        match accepted {
            // A TLS client counts from accept: its handshake holds a
            // descriptor and memory too. Over the limit it is closed at
            // once (the error could only be read after a handshake).
            Ok(Conn::Tls(stream, peer)) => {
                if over_max_clients(&ctx, &ClientAddr::Tcp(peer)) {
                    drop(stream);
                } else {
                    let handshaking = Handshaking::count(&ctx);
                    ctx.spawn(serve_tls(stream, peer, handshaking, ctx.clone()));
                }
            }
            Ok(Conn::Tcp(stream, peer)) => {
                admit(session::TcpClient::new(stream), ClientAddr::Tcp(peer), &ctx);
            }
            Ok(Conn::Unix(stream, path)) => admit(stream, ClientAddr::Unix(path), &ctx),
            Err(e) => {
                let out_of_fds = matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE));
                if out_of_fds
                    && reserve
                        .turn_away([plain.as_ref(), tls.as_ref()], &ctx)
                        .await
                {
                    continue;
                }
                // Out of file descriptors and the like: do not spin.
                if let Some(skipped) = ACCEPT_FAILED_LOG.allow() {
                    tracing::warn!(error = %e, failures_not_logged = skipped, "accept failed");
                }
                crate::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Starts a session for a new client, or refuses it over
/// `client.max_clients` or by protected mode.
fn admit<S: session::Stream>(stream: S, peer: ClientAddr, ctx: &Rc<WorkerCtx>) {
    let live = ctx.live();
    if over_max_clients(ctx, &peer) {
        ctx.spawn(refuse(stream, MAX_CLIENTS_REACHED));
    } else if protected::denies(&live, &peer) {
        WorkerStats::bump(&ctx.stats().rejected_connections);
        tracing::debug!(client.addr = %peer, "protected mode: not a loopback client");
        ctx.spawn(refuse(stream, protected::DENIED));
    } else {
        ctx.spawn(session::serve(stream, peer, ctx.clone()));
    }
}

/// Whether another client would go over `client.max_clients` (or what
/// fits under the open files limit); if so, counts and logs the refusal.
fn over_max_clients(ctx: &WorkerCtx, peer: &ClientAddr) -> bool {
    let max_clients = ctx
        .live()
        .client
        .max_clients
        .min(ctx.shared.clients_that_fit.load(Ordering::Relaxed));
    if connected(&ctx.shared) < max_clients {
        return false;
    }
    WorkerStats::bump(&ctx.stats().rejected_connections);
    if let Some(skipped) = MAX_CLIENTS_LOG.allow() {
        tracing::warn!(
            client.addr = %peer,
            max_clients,
            refused_since_last_line = skipped,
            "max number of clients reached: new client refused"
        );
    }
    true
}

/// A descriptor a worker holds back (on `/dev/null`) for when an accept
/// fails for lack of descriptors, which the open files budget
/// (`server::fd_limit`) should never let happen: given up for a moment, it
/// lets the worker take the next waiting client and tell it `-ERR max
/// number of clients reached` (a TLS client is only closed), rather than
/// leave it in the kernel's queue.
struct Reserve(Option<std::fs::File>);

impl Reserve {
    fn new() -> Reserve {
        Reserve(std::fs::File::open("/dev/null").ok())
    }

    /// Turns away one client waiting on either listener; false when there
    /// was none, or no descriptor to free.
    async fn turn_away(&mut self, acceptors: [Option<&Acceptor>; 2], ctx: &WorkerCtx) -> bool {
        if self.0.take().is_none() {
            self.0 = std::fs::File::open("/dev/null").ok();
            return false;
        }
        let mut turned = false;
        for acceptor in acceptors.into_iter().flatten() {
            // Only a client already waiting: one poll, never a wait.
            let mut accept = std::pin::pin!(acceptor.accept());
            let ready = std::future::poll_fn(|cx| Poll::Ready(accept.as_mut().poll(cx))).await;
            let Poll::Ready(Ok(conn)) = ready else {
                continue;
            };
            // Written at once, without the reactor (which has not seen the
            // socket writable yet), into an empty socket buffer: it fits.
            // A TLS client could read nothing before a handshake.
            match conn {
                Conn::Tcp(stream, _) => {
                    if let Ok(mut stream) = stream.into_std() {
                        let _ = stream.write(MAX_CLIENTS_REACHED);
                    }
                }
                Conn::Unix(stream, _) => {
                    if let Ok(mut stream) = stream.into_std() {
                        let _ = stream.write(MAX_CLIENTS_REACHED);
                    }
                }
                Conn::Tls(..) => {}
            }
            WorkerStats::bump(&ctx.stats().rejected_connections);
            if let Some(skipped) = MAX_CLIENTS_LOG.allow() {
                tracing::warn!(
                    refused_since_last_line = skipped,
                    "out of file descriptors (RLIMIT_NOFILE): new client refused"
                );
            }
            turned = true;
            break;
        }
        self.0 = std::fs::File::open("/dev/null").ok();
        turned
    }
}

/// A TLS client in its handshake, counted among the connected clients
/// until the handshake ends (its session then counts it).
struct Handshaking(Rc<WorkerCtx>);

impl Handshaking {
    fn count(ctx: &Rc<WorkerCtx>) -> Handshaking {
        ctx.stats()
            .connected_clients
            .fetch_add(1, Ordering::Relaxed);
        Handshaking(ctx.clone())
    }
}

impl Drop for Handshaking {
    fn drop(&mut self) {
        self.0
            .stats()
            .connected_clients
            .fetch_sub(1, Ordering::Relaxed);
    }
}

/// Waits for the next client of `acceptor`; never, without one.
async fn accept(acceptor: Option<&Acceptor>) -> io::Result<Conn> {
    match acceptor {
        Some(acceptor) => acceptor.accept().await,
        None => std::future::pending().await,
    }
}

/// Does a TLS client's handshake (with the certificates current now), then
/// serves it like any client.
async fn serve_tls(
    stream: TcpStream,
    peer: SocketAddr,
    handshaking: Handshaking,
    ctx: Rc<WorkerCtx>,
) {
    let Some(config) = ctx.shared.tls.load().server.clone() else {
        return; // tls.listen was removed by a reload: no certificate
    };
    let _ = stream.set_nodelay(true);
    let handshake = tokio_rustls::TlsAcceptor::from(config).accept(stream);
    let stream = match crate::time::timeout(TLS_HANDSHAKE_TIMEOUT, handshake).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => {
            tracing::info!(client.addr = %peer, error = %e, "TLS handshake with a client failed");
            return;
        }
        Err(_) => {
            tracing::info!(client.addr = %peer, "TLS handshake with a client timed out");
            return;
        }
    };
    // Its own task from here on: the handshake's state is not kept. Its
    // slot passes to the session, checked again as any client's.
    drop(handshaking);
    admit(stream, ClientAddr::Tcp(peer), &ctx);
}

/// What one worker accepts on, as handed over from the binding thread.
pub struct Listeners {
    pub plain: Option<Listener>,
    pub tls: Option<std::net::TcpListener>,
}

/// A worker's plain listener.
pub enum Listener {
    Tcp(std::net::TcpListener),
    Unix(std::os::unix::net::UnixListener),
}

/// A listener registered with the worker's runtime.
enum Acceptor {
    Tcp(TcpListener),
    /// With the socket's path, that clients on it are shown with.
    Unix(UnixListener, Arc<Path>),
    /// Clients that start with a TLS handshake.
    Tls(TcpListener),
}

/// An accepted client connection.
enum Conn {
    Tcp(TcpStream, SocketAddr),
    Unix(UnixStream, Arc<Path>),
    /// Its TLS handshake is still to be done.
    Tls(TcpStream, SocketAddr),
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
            Acceptor::Tls(l) => l.accept().await.map(|(s, peer)| Conn::Tls(s, peer)),
        }
    }
}
