//! A client connection: one task that reads requests, starts them, and
//! writes their replies in request order.
//!
//! Each time the task runs it reads what the socket has, parses every
//! complete request in it (any pipeline depth) and starts each one through
//! [`dispatch`] (local answers at once; the rest queued on the worker's node
//! connections), queuing one [`Pending`] reply per request. Then it takes
//! every reply at the head of that queue that is ready, and writes them in
//! one write. It sleeps until the socket, the reply at the head, a push or
//! a signal wakes it.
//!
//! Limits: at most `client.max_pending` replies queued and
//! `client.max_pending_bytes` held ([`budget`]: the output, plus the
//! replies owed at the size of the largest recent ones, never counted
//! small), past which orthrus stops reading the client (TCP pushes back);
//! at most [`OUTPUT_BATCH`] bytes taken into the output; the
//! `client.output_buffer_*` limits, past which the client is closed.
//! An idle client holds no read buffer and at most a small write buffer.

use std::cell::RefCell;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use orthrus_resp::Protocol;
use tokio::io::ReadBuf;
use tokio::sync::mpsc;

use crate::client::{Client, Pending, PushSink, ReplyMode};
use crate::observe::clients::{ClientAddr, Identity, Signal};
use crate::observe::stats::WorkerStats;
use crate::route::kind::Family;
use crate::time::Tick;
use crate::worker::WorkerCtx;

mod admit;
mod budget;
mod direct;
mod dispatch;
mod intake;
mod output;
mod pushes;
mod replies;
mod start;
mod stream;
mod timers;
mod work;

pub use direct::TcpClient;
pub use stream::Stream;
use timers::Timers;
use work::Work;

/// Bytes read at a time.
const READ_CHUNK: usize = 16 * 1024;
/// Reads in one turn of a session (each at most four chunks): a client
/// sending a large request (a million-key MGET is 20 MB) must let the
/// worker's other clients in between its reads, as a redis-server does.
const READS_PER_TURN: u32 = 16;
/// An input buffer up to this size is kept between requests (requests
/// split off it hold shares of it until they are answered); a larger one
/// is given up once empty.
const INPUT_KEPT: usize = 1024;
/// Replies are not taken into the output past this many unwritten bytes.
const OUTPUT_BATCH: usize = 64 * 1024;
/// What a client may pipeline behind a deferred command before orthrus
/// stops reading it until that command is done.
const DEFERRED_BUFFER: usize = 1024 * 1024;

thread_local! {
    /// Every session of a worker reads into this buffer and keeps only what
    /// it read: an idle connection holds no read buffer of its own.
    static SCRATCH: RefCell<Vec<u8>> = RefCell::new(vec![0; READ_CHUNK]);
}

/// What the session needs to account for a request once its reply is
/// ready.
struct Stamp {
    /// When the request was read.
    read: Tick,
    family: Family,
    /// Its request, for the SLOWLOG and INFO commandstats, is in
    /// [`Work::frames`], in queue order; false while the entry's
    /// `Pending::Remote` holds it. (A request in the entry itself made
    /// every entry 152 bytes, moved with a call to `memcpy`; at 104 its
    /// moves are inlined.)
    kept: bool,
    /// False if it was refused before it ran (never in the SLOWLOG).
    ran: bool,
    /// Its number in INFO commandstats.
    stat: Option<u16>,
    /// A HOTKEYS session sampled it: its keys are in [`Work::samples`],
    /// in request order (a flag here keeps every entry as small as before).
    hot: bool,
    /// What its reply makes stale in the reply cache (a write's slot).
    cache: crate::cache::serve::Mark,
}

/// One request's place in the reply queue.
struct Entry {
    pending: Pending,
    /// `None` for a protocol error (never timed).
    stamp: Option<Stamp>,
    /// The request's size, counted in [`Work::request_bytes`].
    bytes: usize,
}

impl Entry {
    /// Its request, for the SLOWLOG and commandstats: the one `frames`
    /// keeps for it (`frames`' front when this entry is the queue's), or
    /// the frame of the `Remote` that holds it.
    fn frame<'a>(&'a self, kept: Option<&'a Bytes>) -> Option<&'a Bytes> {
        match (&self.stamp, &self.pending) {
            (Some(Stamp { kept: true, .. }), _) => kept,
            (_, Pending::Remote(remote)) => Some(remote.frame()),
            _ => None,
        }
    }
}

/// The client's push queue (pub/sub), made on its first subscription.
struct Pushes {
    sink: PushSink,
    rx: mpsc::UnboundedReceiver<Bytes>,
}

/// A connected client and everything its task keeps.
struct Session<S> {
    ctx: Rc<WorkerCtx>,
    stream: S,
    client: Client,
    /// What the session holds while it has work; `None` while the client
    /// is idle.
    work: Option<Box<Work>>,
    pushes: Option<Box<Pushes>>,
    /// Bytes assumed per queued reply, from the client's recent replies.
    reply_hint: u32,
    /// [`Env::resends`] when this session last started requests.
    ///
    /// [`Env::resends`]: crate::node::Env::resends
    resends_seen: u32,
    /// The last queued request is deferred: later requests wait for it.
    deferred: bool,
    /// A reply after which the connection closes is queued (QUIT, a
    /// protocol error): nothing more is read.
    closing: bool,
    /// Counted among the worker's sessions waiting for replies
    /// (`Env::count_waiting`).
    waiting: bool,
    /// Shutting down: nothing more is read; the queue is finished.
    draining: bool,
    /// Which waker is registered with the client's signal: its data
    /// pointer, 0 for none (a whole `Waker` would grow every idle
    /// connection's task cell). A poll with a waker whose data differs
    /// registers that one; a task's wakers share their data.
    registered: usize,
    /// CLIENT PAUSE's held request and the idle timer, once either is
    /// needed (most clients never need them).
    timers: Option<Box<Timers>>,
}

/// The client is gone or finished (or its worker stopped): tell whoever
/// waits on it, and forget it.
impl<S> Drop for Session<S> {
    fn drop(&mut self) {
        tracing::debug!(client.id = self.client.id(), "disconnected");
        if let Some(work) = &self.work {
            self.note_leaving(work);
        }
        self.ctx.shared.clients.remove(self.client.id());
        let stats = self.ctx.stats();
        stats.connected_clients.fetch_sub(1, Ordering::Relaxed);
        if self.waiting {
            self.ctx.pool.env().count_waiting(false);
        }
        if self.timers.as_ref().is_some_and(|t| t.held.is_some()) {
            stats.blocked_clients.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// How a session ended.
enum End {
    /// The client went away or was closed: nothing more to write.
    Gone,
    /// Every reply is written (QUIT, protocol error, shutdown).
    Finished,
}

/// Serves one client until it disconnects. The task's future is the
/// session itself (no async state machine around it), so that an idle
/// connection costs little more than its [`Session`].
pub fn serve<S: Stream>(
    stream: S,
    peer: ClientAddr,
    ctx: Rc<WorkerCtx>,
) -> impl Future<Output = ()> {
    stream.prepare();
    let stats = ctx.stats();
    WorkerStats::bump(&stats.connections_received);
    stats.connected_clients.fetch_add(1, Ordering::Relaxed);
    let client = new_client(&stream, peer, &ctx);
    ctx.shared.clients.update(client.entry(ctx.index));
    // No span around the task: an idle connection's memory is mostly its
    // task, and a span added 48 bytes to it. Events name the client.
    tracing::debug!(client.addr = %client.peer(), client.id = client.id(), "connected");
    Task {
        session: Session::new(stream, client, ctx),
        ending: None,
    }
}

/// A session as a task: runs it, then closes the connection.
struct Task<S> {
    session: Session<S>,
    /// Set once the session is over: what is left is closing.
    ending: Option<End>,
}

impl<S: Stream> Future for Task<S> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let task = self.get_mut();
        let end = match task.ending.take() {
            Some(end) => end,
            None => match task.session.poll(cx) {
                Poll::Ready(end) => end,
                Poll::Pending => return Poll::Pending,
            },
        };
        if matches!(end, End::Finished) {
            // Every reply is written: say so with a FIN.
            if Pin::new(&mut task.session.stream)
                .poll_shutdown(cx)
                .is_pending()
            {
                task.ending = Some(End::Finished);
                return Poll::Pending;
            }
        }
        Poll::Ready(())
    }
}

fn new_client(stream: &impl Stream, peer: ClientAddr, ctx: &WorkerCtx) -> Client {
    let live = ctx.live();
    let identity = Arc::new(Identity {
        id: ctx.shared.next_client_id(),
        peer,
        local: stream.local(),
        created: Instant::now(),
        signal: Signal::default(),
        dedicated: AtomicUsize::new(0),
    });
    Client {
        identity,
        proto: Protocol::Resp2,
        db: 0,
        names: None,
        multi: None,
        watch: None,
        monitor: None,
        pubsub: None,
        tracking: None,
        authenticated: live.client.password.is_none() && live.client.users.is_empty(),
        reply: ReplyMode::On,
        read_from: None,
        writes_unanswered: 0,
    }
}

// === impl Session ===

impl<S: Stream> Session<S> {
    fn new(stream: S, client: Client, ctx: Rc<WorkerCtx>) -> Session<S> {
        if let Some(direct) = stream.direct() {
            direct.bind(&ctx, &client.identity);
        }
        Session {
            work: None,
            pushes: None,
            reply_hint: u32::try_from(ctx.shared.settings.raw.client.max_pending_bytes / 64)
                .unwrap_or(u32::MAX),
            resends_seen: ctx.pool.env().resends(),
            deferred: false,
            closing: false,
            waiting: false,
            draining: ctx.shared.shutdown.is_cancelled(),
            registered: 0,
            timers: None,
            stream,
            client,
            ctx,
        }
        .with_idle_timer()
    }

    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<End> {
        // Raised by CLIENT KILL, a subscriber's overflow or shutdown; read
        // before the work below, registered before sleeping.
        let signal = self.client.signal().bits();
        if signal & Signal::CLOSE != 0 {
            return Poll::Ready(End::Gone);
        }
        self.draining |= signal & Signal::DRAIN != 0;
        if signal & Signal::MAIL != 0 {
            self.take_mail();
        }
        self.poll_pause_timer(cx);
        if let Some(direct) = self.stream.direct() {
            let (lent, size) = direct.take_back();
            self.work = self.work.take().or(lent);
            if self.client.writes_unanswered > 0 {
                let unanswered = &mut self.client.writes_unanswered;
                *unanswered = unanswered.saturating_sub(direct.take_writes_answered());
            }
            if let Some(size) = size {
                self.fold_reply_size(size);
            }
        }
        let mut work = self.work.take().unwrap_or_else(Work::take);
        if let Some(end) = self.run(&mut work, cx) {
            self.note_leaving(&work);
            return Poll::Ready(end);
        }
        let work = self.lend(work);
        // Lent work (`None`) waits for its one reply too.
        let waiting = work.as_ref().is_none_or(|w| !w.queue.is_empty());
        if waiting != self.waiting {
            self.ctx.pool.env().count_waiting(waiting);
            self.waiting = waiting;
        }
        let idle = match work {
            Some(work) if work.is_idle() => {
                work.give_back();
                true
            }
            Some(work) => {
                self.work = Some(work);
                false
            }
            None => false, // lent: a reply is owed
        };
        if self.poll_pause_timer(cx) {
            cx.waker().wake_by_ref(); // the pause ended meanwhile
        }
        let waker = cx.waker().data() as usize;
        if self.registered != waker {
            self.client.signal().register(cx.waker());
            self.registered = waker;
        }
        if self.client.signal().bits() != signal {
            cx.waker().wake_by_ref(); // raised meanwhile
        }
        self.poll_idle(idle, cx)
    }

    /// Lends the work to the node connections ([`direct`]) when all it
    /// holds is one plain request in flight and the client is owed nothing
    /// else; gives it back otherwise.
    fn lend(&self, work: Box<Work>) -> Option<Box<Work>> {
        let Some(direct) = self.stream.direct() else {
            return Some(work);
        };
        let lendable = work.queue.len() == 1
            && work.queue.front().is_some_and(|entry| {
                matches!(entry.pending, Pending::Remote(_)) && entry.stamp.is_some()
            })
            && work.output.is_empty()
            && work.input.is_empty()
            && work.parser.is_none()
            && self.pushes.is_none()
            && self.client.tracking.is_none()
            && !(self.closing || self.draining || self.deferred || self.holding());
        if !lendable {
            return Some(work);
        }
        direct.lend(work);
        None
    }

    /// Reads, starts requests and writes replies until none of them can
    /// go on. `Some` when the session is over.
    fn run(&mut self, w: &mut Work, cx: &mut Context<'_>) -> Option<End> {
        // Once the socket has said Pending, the waker is registered and
        // nothing can arrive before the worker next parks: asking again in
        // this poll would cost a readiness check and learn nothing.
        let mut read_blocked = false;
        let mut reads = 0u32;
        // Replies are looked for at first, and again only once requests
        // started, an error was queued or output was written (a deferred
        // command waits for that): a reply in flight cannot arrive from this
        // thread's node connections while this poll runs, and one that comes
        // from elsewhere wakes the task again, so asking again would learn
        // nothing.
        let mut replies_due = true;
        loop {
            let mut progress = false;
            let reading = !read_blocked && self.wants_input(w);
            if reading {
                if reads == READS_PER_TURN {
                    cx.waker().wake_by_ref(); // the rest in a later turn
                    return None;
                }
                match self.poll_read(w, cx) {
                    Poll::Ready(Ok(0) | Err(_)) => return Some(End::Gone),
                    Poll::Ready(Ok(_)) => {
                        w.read_at = Tick::now();
                        reads += 1;
                        progress = true;
                    }
                    Poll::Pending => read_blocked = true,
                }
            }
            // Read in this poll: its requests may count their deadlines
            // from `read_at`.
            let started = self.start_requests(w, reads > 0);
            progress |= started;
            replies_due |= started;
            if !w.input.is_empty() {
                replies_due |= self.check_query_buffer(w) || self.check_memory_room(w);
            } else if w.room.is_some() {
                w.room = None; // the large request is read
            }
            if progress {
                // Bytes read or a request started: not idle (one look at
                // the live settings for both).
                self.reset_idle_timer();
            }
            if replies_due {
                replies_due = false;
                match self.take_replies(w, cx) {
                    Ok(took) => progress |= took,
                    Err(_) => return Some(End::Gone),
                }
            }
            if !w.output.is_empty() {
                match w.output.poll_flush(&mut self.stream, cx) {
                    Poll::Ready(Ok(())) => {
                        w.over_soft_since = None;
                        replies_due = true;
                        progress |= !w.queue.is_empty()
                            || (!reading && !read_blocked && self.wants_input(w));
                    }
                    Poll::Ready(Err(_)) => return Some(End::Gone),
                    // The client does not take what it is sent.
                    Poll::Pending if self.over_output_limit(w) => return Some(End::Gone),
                    Poll::Pending => {}
                }
            }
            if (self.closing || self.draining) && w.queue.is_empty() && w.output.is_empty() {
                return Some(End::Finished);
            }
            if !progress {
                return None;
            }
        }
    }

    /// Whether to read from the client now.
    fn wants_input(&self, w: &Work) -> bool {
        !self.closing
            && !self.draining
            && self.has_room(w)
            && ((!self.deferred && !self.holding()) || w.input.len() < DEFERRED_BUFFER)
    }

    /// Reads what the socket has. With nothing buffered, reads into the
    /// worker's scratch buffer and keeps a copy of just what arrived: in
    /// the input buffer's room, taken back from the requests before once
    /// they are all dropped, or in a new buffer.
    fn poll_read(&mut self, w: &mut Work, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let stream = Pin::new(&mut self.stream);
        if w.input.is_empty() {
            SCRATCH.with_borrow_mut(|scratch| {
                let mut buf = ReadBuf::new(scratch.as_mut_slice());
                std::task::ready!(stream.poll_read(cx, &mut buf))?;
                let read = buf.filled();
                if !w.input.try_reclaim(read.len()) {
                    w.input = BytesMut::with_capacity(read.len().max(INPUT_KEPT));
                }
                w.input.extend_from_slice(read);
                Poll::Ready(Ok(read.len()))
            })
        } else {
            if w.input.capacity() - w.input.len() < READ_CHUNK / 4 {
                w.input.reserve(READ_CHUNK);
            }
            // At most a few chunks at a time: what one turn parses stays
            // small however much the socket holds.
            let mut room = bytes::BufMut::limit(&mut w.input, READ_CHUNK * 4);
            tokio_util::io::poll_read_buf(stream, cx, &mut room)
        }
    }
}

#[cfg(test)]
mod tests {
    /// An idle connection's memory is mostly its task: tokio pads a task's
    /// cell to 128 bytes and adds 96 bytes of its own (tokio 1.54), so with
    /// the session task at most 160 bytes the cell is 256 (at 280 it was
    /// 384, at 400 512). Growing it past that costs every connection 128
    /// bytes: keep what only a busy client needs in `Work`, and box what is
    /// rarely used.
    #[test]
    fn the_session_task_fits_a_256_byte_task_cell() {
        let size = std::mem::size_of::<super::Task<super::TcpClient>>();
        assert!(size <= 160, "session task is {size} bytes");
    }

    /// Every request's entry is moved into its client's reply queue and
    /// out of it: up to 128 bytes the compiler moves it inline, past that
    /// with a call to `memcpy`.
    #[test]
    fn a_reply_queue_entry_moves_inline() {
        let size = std::mem::size_of::<super::Entry>();
        assert!(size <= 128, "a reply queue entry is {size} bytes");
    }
}
