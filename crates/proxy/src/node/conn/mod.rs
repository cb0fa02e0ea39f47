//! One multiplexed connection to a cluster node.
//!
//! Requests from every client of a worker are queued on it, written
//! together (one syscall for whatever is queued; a lone request to an idle
//! connection is written by its caller), and matched to replies in FIFO
//! order. Replies are forwarded as raw frames found by the reply scanner;
//! nothing is decoded here.
//!
//! - [`queue`] — what the handles and the task share: the jobs yet to
//!   write, the requests in flight, and the socket's write half.
//! - [`read`] — its reader: replies matched to requests, the reply timeout.

use std::cell::Cell;
use std::future::{Future, poll_fn};
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::Poll;
use std::time::Duration;

use super::Env;
use super::client::{self, Dialect, NoDatabase};
use super::slot::{SlotRx, SlotTx, Stock, Stocked};
use super::stream::{NodeStream, NodeWriteHalf};
use crate::process::Shared;
use crate::process::quota::{self, Use};
use crate::time::Tick;
use bytes::{Bytes, BytesMut};
use orthrus_cluster::NodeAddr;
use tokio::io::AsyncWrite;

mod queue;
mod read;

pub use queue::flusher;
use queue::{Queue, QueuedFrame};
pub use read::delivered_at;
use read::{Reader, read_loop, side_loop};

/// Frames at least this large are written on their own instead of being
/// copied into the batch buffer.
const LARGE_FRAME: usize = 16 * 1024;
/// A batch is flushed once it holds this many bytes.
const BATCH_BYTES: usize = 64 * 1024;
/// The `ASKING` command, sent before a command after an ASK redirect.
pub const ASKING: &[u8] = b"*1\r\n$6\r\nASKING\r\n";

/// What a request gets back from a node.
pub type Reply = Result<Delivered, BackendError>;

/// Where a request's [`Reply`] is put.
pub type ReplyTx = SlotTx<Reply>;
/// Waits for a request's [`Reply`]; an error when the connection dropped
/// the request without a reply (read it as [`BackendError::Lost`]).
pub type ReplyRx = SlotRx<Reply>;

thread_local! {
    /// The worker's empty reply slots.
    static REPLY_SLOTS: Stock<Reply> = const { Stock::new() };
}

impl Stocked for Reply {
    fn stock() -> &'static std::thread::LocalKey<Stock<Reply>> {
        &REPLY_SLOTS
    }
}

/// A reply, and how long the node took to give it: from the write of the
/// batch that held the request to the read that completed the reply.
#[derive(Debug)]
pub struct Delivered {
    pub frame: Bytes,
    pub took: Duration,
}

/// Why a request got no reply. Says whether it is safe to resend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    /// Never written to the node (its connection failed a moment ago):
    /// safe to resend.
    #[error("node connection not available")]
    NotSent,
    /// Never written: the node could not be connected to at all (refused,
    /// or no answer within `backend.connect_timeout_ms`). Safe to resend,
    /// but only worth it if another node can take over its slots.
    #[error("node unreachable")]
    Unreachable,
    /// Written, but the connection failed before the reply: the outcome is
    /// unknown, so only a read-only command may be resent.
    #[error("connection to the node lost before the reply")]
    Lost,
    /// Written, but the node sent nothing while the oldest request on the
    /// connection waited `backend.request_timeout_ms`: the connection is
    /// given up and, as with `Lost`, the outcome is unknown.
    #[error("no reply from the node within backend.request_timeout_ms")]
    TimedOut,
    /// Never written: orthrus had as many connections open to the node as
    /// `backend.max_connections_per_node` allows, for the whole wait.
    #[error("as many connections open to the node as backend.max_connections_per_node allows")]
    Crowded,
    /// Never written: every node connection the open files limit leaves
    /// room for was in use for the whole wait.
    #[error("as many node connections open as the open files limit leaves room for")]
    NoDescriptor,
    /// Never written: the node refused to select the client's database
    /// (it serves fewer; a Redis 7 cluster serves one).
    #[error("the node serves fewer databases than the client selected")]
    NoDatabase,
}

/// A request for a node, with where its reply goes. The connection copies
/// a small frame into its queue at once (taking no share of the caller's
/// buffer) and keeps a share of a large one.
pub struct Job<'a> {
    pub frame: &'a Bytes,
    /// Send `ASKING` first (an ASK redirect).
    pub asking: bool,
    /// How many reply frames `frame` produces (a transaction sent as
    /// `MULTI ... EXEC` in one piece produces one per command); they are
    /// delivered together, as one buffer.
    pub frames: usize,
    pub reply: ReplyTx,
}

/// Handle to a connection task (the pool's, one per connection). Dropping
/// it ends the task once its queue is empty and every request written has
/// its reply.
pub struct BackendConn {
    queue: Rc<Queue>,
}

/// What the connections of a private pool (one client's, for client-side
/// caching: `client::tracking`) do beyond carrying requests. The worker's
/// shared connections have none: they skip pushes.
pub trait Hooks {
    /// Sets a new connection up after its handshake, before any request;
    /// may give a second connection to the same node whose frames are all
    /// pushes meant for this one (a RESP2 connection cannot carry them).
    fn prepare<'a>(
        &'a self,
        addr: &'a NodeAddr,
        dialect: Dialect,
        shared: &'a Shared,
        stream: &'a mut NodeStream,
    ) -> Pin<Box<dyn Future<Output = io::Result<Option<NodeStream>>> + 'a>>;
    /// An out-of-band RESP3 push arrived for the connection to `addr`.
    fn push(&self, addr: &NodeAddr, frame: Bytes);
    /// The connection to `addr` failed (it was not closed on purpose).
    fn lost(&self, addr: &NodeAddr);
    /// A request sent on these connections was answered with MOVED.
    fn moved(&self);
}

/// For a tracking connection of `dialect` to `addr`: where its
/// invalidations arrive. A RESP3 connection gets them itself (`None`); a
/// RESP2 one cannot carry pushes, so a RESP3 connection beside it is
/// opened (any database: it only listens) and its client id given, for
/// `CLIENT TRACKING ON REDIRECT <id>`.
pub async fn push_side(
    addr: &NodeAddr,
    dialect: Dialect,
    shared: &Shared,
) -> io::Result<Option<(NodeStream, u64)>> {
    if dialect.proto == orthrus_resp::Protocol::Resp3 {
        return Ok(None);
    }
    let pushes = Dialect {
        proto: orthrus_resp::Protocol::Resp3,
        db: 0,
    };
    let mut side = connect(addr, pushes, shared).await?;
    let id = client::call(&mut side, b"*2\r\n$6\r\nCLIENT\r\n$2\r\nID\r\n")
        .await?
        .as_int()
        .and_then(|id| u64::try_from(id).ok())
        .ok_or_else(|| io::Error::other("CLIENT ID gave no id"))?;
    Ok(Some((side, id)))
}

/// Sends `frame` (a `CLIENT TRACKING ON ...`) on a tracking connection
/// being set up; the node's refusal is the connection's error.
pub async fn track_on(stream: &mut NodeStream, frame: &[u8]) -> io::Result<()> {
    if let orthrus_resp::Value::Error(e) = client::call(stream, frame).await? {
        return Err(io::Error::other(format!(
            "CLIENT TRACKING ON refused: {}",
            String::from_utf8_lossy(&e)
        )));
    }
    Ok(())
}

/// A reply slot of a written request.
enum Inflight {
    /// The `+OK` of an `ASKING` sent before a command.
    Discard,
    Reply {
        tx: ReplyTx,
        frames: usize,
        sent: Tick,
    },
}

impl Inflight {
    /// The slot of a request of `frames` reply frames (0 is taken as 1)
    /// written at `sent`.
    fn reply(tx: ReplyTx, frames: usize, sent: Tick) -> Inflight {
        Inflight::Reply {
            tx,
            frames: frames.max(1),
            sent,
        }
    }
}

// === impl BackendConn ===

impl BackendConn {
    /// Starts the connection task on the current worker; with `readonly`
    /// its handshake sends `READONLY` (for reads sent to a replica), with
    /// `hooks` it is set up and its pushes handled by them.
    pub fn spawn(
        addr: NodeAddr,
        dialect: Dialect,
        readonly: bool,
        env: Rc<Env>,
        hooks: Option<Rc<dyn Hooks>>,
    ) -> BackendConn {
        let queue = Rc::new(Queue::default());
        let task = Task {
            addr,
            dialect,
            readonly,
            env,
            hooks,
        };
        let spawner = task.env.clone();
        spawner.spawn(run(task, queue.clone()));
        BackendConn { queue }
    }

    /// Queues a job, or writes it at once when the connection is idle and
    /// `last` says its client has sent nothing after it; gives it back if
    /// the connection task has ended.
    pub fn send<'a>(&self, job: Job<'a>, last: bool) -> Result<(), Job<'a>> {
        self.queue.push(job, last)
    }

    pub fn is_closed(&self) -> bool {
        self.queue.is_closed()
    }
}

impl Drop for BackendConn {
    fn drop(&mut self) {
        self.queue.abandon(); // to end once the queue is empty
    }
}

/// What a connection task is for.
struct Task {
    addr: NodeAddr,
    dialect: Dialect,
    readonly: bool,
    env: Rc<Env>,
    hooks: Option<Rc<dyn Hooks>>,
}

/// Opens the connection (and sets it up with the hooks, if any).
async fn start(task: &Task) -> io::Result<(NodeStream, Option<NodeStream>)> {
    // A tracking client's connection is its own; the others are shared.
    let use_ = match task.hooks {
        Some(_) => Use::Client,
        None => Use::Shared,
    };
    let mut stream = open(
        &task.addr,
        task.dialect,
        (task.readonly, use_),
        &task.env.shared,
    )
    .await?;
    let side = match &task.hooks {
        Some(hooks) => {
            hooks
                .prepare(&task.addr, task.dialect, &task.env.shared, &mut stream)
                .await?
        }
        None => None,
    };
    Ok((stream, side))
}

async fn run(task: Task, queue: Rc<Queue>) {
    let (addr, env) = (&task.addr, &task.env);
    // The back-off is cleared only once the node has sent something back
    // (the reader does it): a node that accepts connections and drops them
    // at once (a process dying as it starts, a full accept queue, a proxy
    // with nothing behind it) must see the back-off grow, not a connect
    // every 50 ms.
    let (stream, side) = match start(&task).await {
        Ok(opened) => opened,
        Err(e) if quota::is_full(&e) => {
            tracing::warn!(node = %addr, error = %e, "cannot connect to node");
            // Never resent: the wait took the request's deadline.
            let bound = match e
                .get_ref()
                .is_some_and(|inner| inner.is::<quota::NoDescriptor>())
            {
                true => BackendError::NoDescriptor,
                false => BackendError::Crowded,
            };
            queue.close(bound);
            return;
        }
        Err(e) if e.get_ref().is_some_and(|inner| inner.is::<NoDatabase>()) => {
            // The node is well: only this database is not to be had there.
            tracing::debug!(node = %addr, error = %e, "database refused");
            queue.close(BackendError::NoDatabase);
            return;
        }
        Err(e) => {
            tracing::warn!(node = %addr, error = %e, "cannot connect to node");
            env.failed(addr, true);
            env.shared.request_refresh_at(addr);
            if queue.close(BackendError::Unreachable) > 0 {
                env.note_resends(); // they may wait for a failover
            }
            return;
        }
    };
    tracing::debug!(node = %addr, resp = task.dialect.proto.version(), db = task.dialect.db, "backend connected");
    let (rd, wr) = stream.into_split();
    *queue.wr.borrow_mut() = Some(wr);
    let inflight = &queue.inflight;
    let upstream = usize::from(env.shared.upstream_number(addr));
    let latency = env
        .shared
        .node_latency
        .get(addr, env.shared.stats.len(), upstream);
    let closing = Cell::new(false);
    let reader = Reader {
        inflight,
        env,
        latency: &latency,
        hooks: task.hooks.as_deref(),
        addr,
        closing: &closing,
    };
    // Biased: polled in order, without drawing a random number on every
    // wake-up (each branch runs for the connection's life).
    let result = tokio::select! {
        biased;
        r = async {
            write_loop(&queue).await?;
            if inflight.borrow().is_empty() {
                return Ok(());
            }
            closing.set(true);
            std::future::pending().await
        } => r,
        r = read_loop(rd, &reader) => r,
        r = side_loop(side, &reader) => r,
    };
    let lost = inflight.borrow().len();
    let error = match &result {
        Err(e) if e.kind() == io::ErrorKind::TimedOut => BackendError::TimedOut,
        _ => BackendError::Lost,
    };
    for slot in inflight.borrow_mut().drain(..) {
        if let Inflight::Reply { tx, .. } = slot {
            tx.send(Err(error));
        }
    }
    if queue.close(BackendError::NotSent) + lost > 0 {
        env.note_resends();
    }
    match result {
        Ok(()) => tracing::debug!(node = %addr, "backend connection closed"),
        Err(e) => {
            tracing::warn!(node = %addr, error = %e, in_flight = lost, "backend connection lost");
            env.failed(addr, false);
            env.shared.request_refresh_at(addr);
            if let Some(hooks) = &task.hooks {
                hooks.lost(addr);
            }
        }
    }
}

/// Opens a connection a client holds for itself to a node with the live
/// timeout, credentials and TLS settings (its upstream's,
/// [`Shared::node_settings`]), counted in the bounds (waiting for a place
/// at most its request timeout).
pub async fn connect(addr: &NodeAddr, dialect: Dialect, shared: &Shared) -> io::Result<NodeStream> {
    open(addr, dialect, (false, Use::Client), shared).await
}

/// [`connect`], sending `READONLY` in the handshake when `readonly`,
/// counted for `use_`.
async fn open(
    addr: &NodeAddr,
    dialect: Dialect,
    (readonly, use_): (bool, Use),
    shared: &Shared,
) -> io::Result<NodeStream> {
    let node = shared.node_settings(addr);
    let backend = &node.backend;
    let deadline = tokio::time::Instant::now() + Duration::from_millis(backend.request_timeout_ms);
    let counted = shared.node_quota.take(addr, use_, deadline).await?;
    let stream = client::connect(
        addr,
        dialect,
        Duration::from_millis(backend.connect_timeout_ms),
        backend,
        readonly,
        node.tls.as_ref(),
    )
    .await?;
    Ok(stream.counted(counted))
}

async fn write_loop(queue: &Queue) -> io::Result<()> {
    let inflight = &queue.inflight;
    let mut batch = BytesMut::with_capacity(BATCH_BYTES);
    while let Some(job) = poll_fn(|cx| queue.poll_next(cx)).await {
        queue.busy.set(true);
        // One clock read per batch: its requests leave together (read
        // again after a write that may have waited).
        let mut sent = Tick::now();
        let mut next = Some(job);
        while let Some(job) = next.take() {
            // A client that went away no longer needs its request sent.
            let gone = job.reply.as_ref().is_some_and(ReplyTx::is_closed);
            if job.asking && !gone {
                batch.extend_from_slice(ASKING);
                inflight.borrow_mut().push_back(Inflight::Discard);
            }
            if let QueuedFrame::Copied(len) = job.frame {
                queue.take_copied(len, &mut batch, gone);
            }
            if !gone {
                if let Some(tx) = job.reply {
                    inflight
                        .borrow_mut()
                        .push_back(Inflight::reply(tx, job.frames, sent));
                }
                if let QueuedFrame::Shared(frame) = &job.frame {
                    if !batch.is_empty() {
                        write_all(queue, &batch).await?;
                        batch.clear();
                    }
                    write_all(queue, frame).await?;
                    sent = Tick::now();
                }
            }
            if batch.len() < BATCH_BYTES {
                next = queue.try_next();
            }
        }
        queue.rewind();
        if !batch.is_empty() {
            write_all(queue, &batch).await?;
            batch.clear();
        }
        // TLS: what its records still hold.
        poll_fn(|cx| with_writer(queue, |wr| wr.poll_flush(cx))).await?;
        queue.busy.set(false);
    }
    queue.wr.borrow_mut().take(); // its FIN: nothing more is sent
    Ok(())
}

/// Writes all of `buf` on the connection's write half (borrowed for each
/// poll only: between them, an idle connection's callers may look at it).
async fn write_all(queue: &Queue, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        let n = poll_fn(|cx| with_writer(queue, |wr| wr.poll_write(cx, buf))).await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        buf = buf.get(n..).unwrap_or_default();
    }
    Ok(())
}

/// Calls `f` with the connection's write half; an error once it is gone.
fn with_writer<T>(
    queue: &Queue,
    f: impl FnOnce(Pin<&mut NodeWriteHalf>) -> Poll<io::Result<T>>,
) -> Poll<io::Result<T>> {
    match queue.wr.borrow_mut().as_mut() {
        Some(wr) => f(Pin::new(wr)),
        None => Poll::Ready(Err(io::ErrorKind::NotConnected.into())),
    }
}
