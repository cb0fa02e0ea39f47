//! A worker thread: one thread with a current-thread runtime, its own listener
//! (SO_REUSEPORT, so the kernel spreads connections over workers), its own
//! client sessions and its own backend connections. Nothing on its request
//! path takes a lock or crosses a thread.

use std::io;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use std::sync::atomic::Ordering;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

use crate::observe::stats::WorkerStats;
use crate::process::Shared;
use crate::session;
use crate::worker::WorkerCtx;

/// Runs worker `index` on the calling thread until `Shared::shutdown` is
/// cancelled and its clients are drained.
pub fn run(index: usize, listener: std::net::TcpListener, shared: Arc<Shared>) -> io::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let local = tokio::task::LocalSet::new();
    let ctx = Rc::new(WorkerCtx::new(shared, index));
    local.block_on(&runtime, async move {
        let listener = TcpListener::from_std(listener)?;
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
async fn refuse(mut stream: tokio::net::TcpStream) {
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

async fn accept_loop(listener: TcpListener, ctx: Rc<WorkerCtx>) {
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    if connected(&ctx.shared) >= ctx.shared.live.load().client.max_clients {
                        WorkerStats::bump(&ctx.stats().rejected_connections);
                        tokio::task::spawn_local(refuse(stream));
                    } else {
                        tokio::task::spawn_local(session::serve(stream, peer, ctx.clone()));
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
