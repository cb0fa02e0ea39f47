//! One multiplexed connection to a cluster node.
//!
//! Requests from every client of a worker are queued on it, written
//! together (one syscall for whatever is queued), and matched to replies in
//! FIFO order. Replies are forwarded as raw frames found by the reply
//! scanner; nothing is decoded here.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::{Future, poll_fn};
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use super::slot::{SlotRx, SlotTx, Stock, Stocked};
use super::stream::{NodeReadHalf, NodeStream, NodeWriteHalf};
use super::{Env, client};
use crate::observe::latency::NodeLatency;
use crate::process::Shared;
use bytes::{Bytes, BytesMut};
use orthrus_cluster::NodeAddr;
use orthrus_resp::{Protocol, ReplyScanner};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Frames at least this large are written on their own instead of being
/// copied into the batch buffer.
const LARGE_FRAME: usize = 16 * 1024;
/// A batch is flushed once it holds this many bytes.
const BATCH_BYTES: usize = 64 * 1024;
const READ_CHUNK: usize = 16 * 1024;
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
        proto: Protocol,
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

/// The jobs waiting to be written, shared by the handles and the task on
/// one worker thread: queuing a job is a push and, when the task sleeps,
/// one wake-up — no channel, no atomic operation.
#[derive(Default)]
struct Queue {
    jobs: RefCell<VecDeque<Queued>>,
    /// The frames of the queued small jobs, in order; the writer takes each
    /// job's bytes from `head` on, and the buffer starts over once every
    /// job is taken.
    bytes: RefCell<Vec<u8>>,
    head: Cell<usize>,
    /// The task, while it waits for jobs.
    waker: Cell<Option<Waker>>,
    /// The handle was dropped.
    abandoned: Cell<bool>,
    /// The task has ended: jobs are refused.
    closed: Cell<bool>,
}

/// A job in the queue.
struct Queued {
    frame: QueuedFrame,
    asking: bool,
    frames: usize,
    reply: ReplyTx,
}

/// Where a queued job's frame is.
enum QueuedFrame {
    /// The next this many bytes of `Queue::bytes`.
    Copied(usize),
    /// A frame of `LARGE_FRAME` or more, written from its own buffer.
    Shared(Bytes),
}

/// A reply slot of a written request.
enum Inflight {
    /// The `+OK` of an `ASKING` sent before a command.
    Discard,
    Reply {
        tx: ReplyTx,
        frames: usize,
        sent: Instant,
    },
}

// === impl BackendConn ===

impl BackendConn {
    /// Starts the connection task on the current worker; with `readonly`
    /// its handshake sends `READONLY` (for reads sent to a replica), with
    /// `hooks` it is set up and its pushes handled by them.
    pub fn spawn(
        addr: NodeAddr,
        proto: Protocol,
        readonly: bool,
        env: Rc<Env>,
        hooks: Option<Rc<dyn Hooks>>,
    ) -> BackendConn {
        let queue = Rc::new(Queue::default());
        let task = Task {
            addr,
            proto,
            readonly,
            env,
            hooks,
        };
        tokio::task::spawn_local(run(task, queue.clone()));
        BackendConn { queue }
    }

    /// Queues a job; gives it back if the connection task has ended.
    pub fn send<'a>(&self, job: Job<'a>) -> Result<(), Job<'a>> {
        if self.queue.closed.get() {
            return Err(job);
        }
        let frame = if job.frame.len() >= LARGE_FRAME {
            QueuedFrame::Shared(job.frame.clone())
        } else {
            self.queue.bytes.borrow_mut().extend_from_slice(job.frame);
            QueuedFrame::Copied(job.frame.len())
        };
        self.queue.jobs.borrow_mut().push_back(Queued {
            frame,
            asking: job.asking,
            frames: job.frames,
            reply: job.reply,
        });
        self.queue.wake();
        Ok(())
    }

    pub fn is_closed(&self) -> bool {
        self.queue.closed.get()
    }
}

impl Drop for BackendConn {
    fn drop(&mut self) {
        self.queue.abandoned.set(true);
        self.queue.wake(); // to end once the queue is empty
    }
}

// === impl Queue ===

impl Queue {
    fn wake(&self) {
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
    }

    /// The next job; `None` once the handle is gone and nothing is left.
    fn poll_next(&self, cx: &mut Context<'_>) -> Poll<Option<Queued>> {
        if let Some(job) = self.jobs.borrow_mut().pop_front() {
            return Poll::Ready(Some(job));
        }
        if self.abandoned.get() {
            return Poll::Ready(None);
        }
        self.waker.set(Some(cx.waker().clone()));
        Poll::Pending
    }

    fn try_next(&self) -> Option<Queued> {
        self.jobs.borrow_mut().pop_front()
    }

    /// Appends the next `len` copied bytes, a job's frame, to `batch` (or
    /// just moves past them, when `skip`).
    fn take_copied(&self, len: usize, batch: &mut BytesMut, skip: bool) {
        let head = self.head.get();
        if !skip && let Some(frame) = self.bytes.borrow().get(head..head + len) {
            batch.extend_from_slice(frame);
        }
        self.head.set(head + len);
    }

    /// Once every queued job is taken, the bytes buffer starts over (and
    /// gives back what a burst grew it to).
    fn rewind(&self) {
        if self.jobs.borrow().is_empty() {
            let mut bytes = self.bytes.borrow_mut();
            bytes.clear();
            bytes.shrink_to(BATCH_BYTES);
            self.head.set(0);
        }
    }

    /// Refuses every job still queued (none of them was written) and every
    /// later one.
    fn close(&self, error: BackendError) {
        self.closed.set(true);
        let jobs = std::mem::take(&mut *self.jobs.borrow_mut());
        self.rewind();
        for job in jobs {
            job.reply.send(Err(error));
        }
    }
}

/// What a connection task is for.
struct Task {
    addr: NodeAddr,
    proto: Protocol,
    readonly: bool,
    env: Rc<Env>,
    hooks: Option<Rc<dyn Hooks>>,
}

/// Opens the connection (and sets it up with the hooks, if any).
async fn start(task: &Task) -> io::Result<(NodeStream, Option<NodeStream>)> {
    let mut stream = open(&task.addr, task.proto, task.readonly, &task.env.shared).await?;
    let side = match &task.hooks {
        Some(hooks) => {
            hooks
                .prepare(&task.addr, task.proto, &task.env.shared, &mut stream)
                .await?
        }
        None => None,
    };
    Ok((stream, side))
}

async fn run(task: Task, queue: Rc<Queue>) {
    let (addr, env) = (&task.addr, &task.env);
    let (stream, side) = match start(&task).await {
        Ok(opened) => {
            env.connected(addr);
            opened
        }
        Err(e) => {
            tracing::warn!(node = %addr, error = %e, "cannot connect to node");
            env.failed(addr, true);
            env.shared.request_refresh();
            queue.close(BackendError::Unreachable);
            return;
        }
    };
    tracing::debug!(node = %addr, resp = task.proto.version(), "backend connected");
    let (rd, wr) = stream.into_split();
    let inflight = RefCell::new(VecDeque::new());
    let latency = env.shared.node_latency.get(addr, env.shared.stats.len());
    // Set once the handle is gone and everything queued is written: the
    // reader ends when the last reply is in.
    let closing = Cell::new(false);
    let reader = Reader {
        inflight: &inflight,
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
            write_loop(wr, &queue, &inflight).await?;
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
    queue.close(BackendError::NotSent);
    match result {
        Ok(()) => tracing::debug!(node = %addr, "backend connection closed"),
        Err(e) => {
            tracing::warn!(node = %addr, error = %e, in_flight = lost, "backend connection lost");
            env.failed(addr, false);
            env.shared.request_refresh();
            if let Some(hooks) = &task.hooks {
                hooks.lost(addr);
            }
        }
    }
}

/// Opens a connection to a node with the live timeout, credentials and
/// TLS settings.
pub async fn connect(addr: &NodeAddr, proto: Protocol, shared: &Shared) -> io::Result<NodeStream> {
    open(addr, proto, false, shared).await
}

/// [`connect`], sending `READONLY` in the handshake when `readonly`.
async fn open(
    addr: &NodeAddr,
    proto: Protocol,
    readonly: bool,
    shared: &Shared,
) -> io::Result<NodeStream> {
    let live = shared.live.load_full();
    let tls = shared.tls.load_full();
    client::connect(
        addr,
        proto,
        shared.connect_timeout(),
        &live.backend,
        readonly,
        tls.backend.as_ref(),
    )
    .await
}

async fn write_loop(
    mut wr: NodeWriteHalf,
    queue: &Queue,
    inflight: &RefCell<VecDeque<Inflight>>,
) -> io::Result<()> {
    let mut batch = BytesMut::with_capacity(BATCH_BYTES);
    while let Some(job) = poll_fn(|cx| queue.poll_next(cx)).await {
        // One clock read per batch: its requests leave together (read
        // again after a write that may have waited).
        let mut sent = Instant::now();
        let mut next = Some(job);
        while let Some(job) = next.take() {
            // A client that went away no longer needs its request sent.
            let gone = job.reply.is_closed();
            if job.asking && !gone {
                batch.extend_from_slice(ASKING);
                inflight.borrow_mut().push_back(Inflight::Discard);
            }
            if let QueuedFrame::Copied(len) = job.frame {
                queue.take_copied(len, &mut batch, gone);
            }
            if !gone {
                inflight.borrow_mut().push_back(Inflight::Reply {
                    tx: job.reply,
                    frames: job.frames.max(1),
                    sent,
                });
                if let QueuedFrame::Shared(frame) = &job.frame {
                    if !batch.is_empty() {
                        wr.write_all(&batch).await?;
                        batch.clear();
                    }
                    wr.write_all(frame).await?;
                    sent = Instant::now();
                }
            }
            if batch.len() < BATCH_BYTES {
                next = queue.try_next();
            }
        }
        queue.rewind();
        if !batch.is_empty() {
            wr.write_all(&batch).await?;
            batch.clear();
        }
        wr.flush().await?; // TLS: what its records still hold
    }
    Ok(())
}

/// What the reader of a connection works with.
struct Reader<'a> {
    inflight: &'a RefCell<VecDeque<Inflight>>,
    env: &'a Env,
    latency: &'a NodeLatency,
    hooks: Option<&'a dyn Hooks>,
    addr: &'a NodeAddr,
    closing: &'a Cell<bool>,
}

async fn read_loop(mut rd: NodeReadHalf, reader: &Reader<'_>) -> io::Result<()> {
    let Reader {
        inflight,
        env,
        latency,
        ..
    } = *reader;
    let mut scan = ScanState::default();
    let timeout = env.shared.request_timeout();
    let mut buf = BytesMut::with_capacity(READ_CHUNK);
    let mut last_read = Instant::now();
    // One timer for the connection's life, moved on only when it fires:
    // reads and requests in between cost no timer operation. It keeps the
    // task's waker from its first poll until it fires or is moved, so it
    // is polled again only then (the task's waker never changes).
    let timer = tokio::time::sleep_until((last_read + timeout).into());
    tokio::pin!(timer);
    let mut timer_waits = false;
    loop {
        if buf.capacity() - buf.len() < READ_CHUNK / 4 {
            buf.reserve(READ_CHUNK);
        }
        let read = poll_fn(|cx| {
            if let Poll::Ready(read) =
                tokio_util::io::poll_read_buf(Pin::new(&mut rd), cx, &mut buf)
            {
                return Poll::Ready(Some(read));
            }
            if !timer_waits || timer.is_elapsed() {
                if timer.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(None);
                }
                timer_waits = true;
            }
            Poll::Pending
        })
        .await;
        let Some(read) = read else {
            let next = reply_deadline(inflight, last_read, timeout).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::TimedOut,
                    "no reply within backend.request_timeout_ms",
                )
            })?;
            timer.as_mut().reset(next.into());
            timer_waits = false;
            continue;
        };
        let n = read?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "node closed the connection",
            ));
        }
        last_read = Instant::now();
        let arrived = Arrival {
            at: last_read,
            latency,
            worker: env.worker,
            hooks: reader.hooks,
            addr: reader.addr,
        };
        deliver(&mut buf, inflight, &mut scan, &arrived)?;
        if reader.closing.get() && inflight.borrow().is_empty() {
            return Ok(()); // the handle is gone and every reply is in
        }
    }
}

/// Reads the second connection a private connection's hooks gave (none:
/// waits forever): every frame on it is a push for them.
async fn side_loop(side: Option<NodeStream>, reader: &Reader<'_>) -> io::Result<()> {
    let (Some(mut stream), Some(hooks)) = (side, reader.hooks) else {
        return std::future::pending().await;
    };
    let mut scanner = ReplyScanner::default();
    let mut buf = BytesMut::with_capacity(1024);
    loop {
        buf.reserve(1024);
        if stream.read_buf(&mut buf).await? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "node closed the push connection",
            ));
        }
        while let Some(n) = scanner.scan(&buf).map_err(io::Error::other)? {
            let frame = buf.split_to(n).freeze();
            if frame.first() == Some(&b'>') {
                hooks.push(reader.addr, frame);
            }
        }
    }
}

/// When the connection's reply timer must look again, or `None` when a
/// request in flight has waited `timeout` with nothing arriving: the wait
/// is counted from the later of the last read (the node was alive then)
/// and the write of the oldest request in flight, so a request written
/// while the connection was idle gets its full time and no more, and a
/// silent node fails each request about `timeout` after it was written.
///
/// The timer is set no later than that moment (both instants only move
/// forward), so it may fire early — then it is moved on — never late.
fn reply_deadline(
    inflight: &RefCell<VecDeque<Inflight>>,
    last_read: Instant,
    timeout: Duration,
) -> Option<Instant> {
    let now = Instant::now();
    let oldest = inflight.borrow().iter().find_map(|slot| match slot {
        Inflight::Reply { sent, .. } => Some(*sent),
        Inflight::Discard => None,
    });
    match oldest {
        // Nothing in flight: a request written from now on is due no
        // sooner than `timeout` from now.
        None => Some(now + timeout),
        Some(sent) => {
            let due = sent.max(last_read) + timeout;
            (now < due).then_some(due)
        }
    }
}

/// Where the reader is in the reply it is waiting for: the resumable
/// scanner (a large reply arriving in many reads is walked once) and the
/// frames of a multi-frame reply already complete.
#[derive(Default)]
struct ScanState {
    scanner: ReplyScanner,
    done_len: usize,
    done_frames: usize,
}

/// When a read completed, where the node's round trips are counted, and
/// where pushes go.
struct Arrival<'a> {
    at: Instant,
    latency: &'a NodeLatency,
    worker: usize,
    hooks: Option<&'a dyn Hooks>,
    addr: &'a NodeAddr,
}

/// Hands every complete reply in `buf` to the request it answers.
fn deliver(
    buf: &mut BytesMut,
    inflight: &RefCell<VecDeque<Inflight>>,
    scan: &mut ScanState,
    arrived: &Arrival<'_>,
) -> io::Result<()> {
    loop {
        let frames = match inflight.borrow().front() {
            Some(Inflight::Reply { frames, .. }) => *frames,
            _ => 1,
        };
        while scan.done_frames < frames {
            let rest = buf.get(scan.done_len..).unwrap_or_default();
            if rest.is_empty() {
                return Ok(()); // every byte read is delivered or scanned
            }
            match scan.scanner.scan(rest).map_err(io::Error::other)? {
                Some(n) => {
                    scan.done_len += n;
                    scan.done_frames += 1;
                }
                None => return Ok(()),
            }
        }
        let frame = buf.split_to(scan.done_len).freeze();
        scan.done_len = 0;
        scan.done_frames = 0;
        if frames == 1 && frame.first() == Some(&b'>') {
            // An out-of-band RESP3 push: not the reply to anything.
            if let Some(hooks) = arrived.hooks {
                hooks.push(arrived.addr, frame);
            }
            continue;
        }
        match inflight.borrow_mut().pop_front() {
            Some(Inflight::Reply { tx, sent, .. }) => {
                let took = arrived.at.saturating_duration_since(sent);
                arrived.latency.record(arrived.worker, took);
                tx.send(Ok(Delivered { frame, took }));
            }
            Some(Inflight::Discard) => {}
            None => return Err(io::Error::other("reply without a request")),
        }
    }
}
