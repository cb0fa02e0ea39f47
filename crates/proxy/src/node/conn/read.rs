//! A connection's reader: complete reply frames handed to the requests
//! they answer (FIFO), pushes to the hooks, and the reply timeout.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::{Future, poll_fn};
use std::io;
use std::pin::Pin;
use std::task::Poll;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use orthrus_cluster::NodeAddr;

use super::{Delivered, Hooks, Inflight};
use crate::node::Env;
use crate::node::frames::{Frame, FrameReader, Frames};
use crate::node::stream::{NodeReadHalf, NodeStream};
use crate::observe::latency::NodeLatency;
use crate::time::Tick;

const READ_CHUNK: usize = 16 * 1024;

/// What the reader of a connection works with.
pub(super) struct Reader<'a> {
    pub inflight: &'a RefCell<VecDeque<Inflight>>,
    pub env: &'a Env,
    pub latency: &'a NodeLatency,
    pub hooks: Option<&'a dyn Hooks>,
    pub addr: &'a NodeAddr,
    /// Set once the handle is gone and everything queued is written: the
    /// reader ends when the last reply is in.
    pub closing: &'a Cell<bool>,
}

pub(super) async fn read_loop(mut rd: NodeReadHalf, reader: &Reader<'_>) -> io::Result<()> {
    let Reader {
        inflight,
        env,
        latency,
        addr,
        ..
    } = *reader;
    let mut frames = Frames::default();
    let timeout = env.shared.request_timeout_at(addr);
    let mut buf = BytesMut::with_capacity(READ_CHUNK);
    let mut last_read = Tick::now();
    let mut answered = false;
    // One timer for the connection's life, moved on only when it fires:
    // reads and requests in between cost no timer operation. It keeps the
    // waker it was last polled with until it fires or is moved, so it is
    // polled again only then, or when the task's waker is another one
    // (told apart by its data pointer, as the session does; 0: not polled).
    let timer = crate::time::sleep_until((Instant::now() + timeout).into());
    tokio::pin!(timer);
    let mut timer_waker = 0usize;
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
            let waker = cx.waker().data() as usize;
            if timer_waker != waker || timer.is_elapsed() {
                if timer.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(None);
                }
                timer_waker = waker;
            }
            Poll::Pending
        })
        .await;
        let Some(read) = read else {
            let next = reply_deadline(inflight, last_read, timeout).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::TimedOut,
                    "no reply within the request timeout",
                )
            })?;
            timer.as_mut().reset(next.into());
            timer_waker = 0;
            continue;
        };
        let n = read?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "node closed the connection",
            ));
        }
        if !answered {
            // The node answers: its connect back-off is over.
            answered = true;
            env.connected(reader.addr);
        }
        last_read = Tick::now();
        let arrived = Arrival {
            at: last_read,
            latency,
            worker: env.worker,
            hooks: reader.hooks,
            addr: reader.addr,
        };
        // Published while the replies are handed out: a reply slot's hook
        // times its request from this read.
        DELIVERING.set(Some(last_read));
        let delivered = deliver(&mut buf, inflight, &mut frames, &arrived);
        DELIVERING.set(None);
        delivered?;
        if reader.closing.get() && inflight.borrow().is_empty() {
            return Ok(()); // the handle is gone and every reply is in
        }
    }
}

/// Reads the second connection a private connection's hooks gave (none:
/// waits forever): every frame on it is a push for them.
pub(super) async fn side_loop(side: Option<NodeStream>, reader: &Reader<'_>) -> io::Result<()> {
    let (Some(stream), Some(hooks)) = (side, reader.hooks) else {
        return std::future::pending().await;
    };
    let mut frames = FrameReader::new(stream, usize::MAX);
    loop {
        if let Frame::Push(push) = frames.next(1).await? {
            hooks.push(reader.addr, push);
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
    last_read: Tick,
    timeout: Duration,
) -> Option<Instant> {
    // The instant first: the tick read after it is no earlier, so the
    // moment worked out below is never later than the due one.
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
            let waited = Tick::now().since(sent.max(last_read));
            timeout
                .checked_sub(waited)
                .filter(|left| !left.is_zero())
                .map(|left| now + left)
        }
    }
}

/// When a read completed, where the node's round trips are counted, and
/// where pushes go.
struct Arrival<'a> {
    at: Tick,
    latency: &'a NodeLatency,
    worker: usize,
    hooks: Option<&'a dyn Hooks>,
    addr: &'a NodeAddr,
}

thread_local! {
    /// When the replies this worker's node connection hands out now were
    /// read (set while `read_loop` runs [`deliver`]).
    static DELIVERING: Cell<Option<Tick>> = const { Cell::new(None) };
}

/// When the reply being handed to its request now was read from the node:
/// a reply slot's hook times the request from it, with no clock read of
/// its own. `None` outside a delivery.
pub fn delivered_at() -> Option<Tick> {
    DELIVERING.get()
}

/// Hands every complete reply in `buf` to the request it answers, and
/// every push to the hooks.
fn deliver(
    buf: &mut BytesMut,
    inflight: &RefCell<VecDeque<Inflight>>,
    frames: &mut Frames,
    arrived: &Arrival<'_>,
) -> io::Result<()> {
    // Most reads end with a whole reply: once it is split off, nothing is
    // left to look at.
    while !buf.is_empty() {
        let want = match inflight.borrow().front() {
            Some(Inflight::Reply { frames, .. }) => *frames,
            _ => 1,
        };
        let frame = match frames.next(buf, want).map_err(io::Error::other)? {
            None => return Ok(()), // every byte read is delivered or scanned
            Some(Frame::Reply(frame)) => frame,
            Some(Frame::Push(push)) => {
                if let Some(hooks) = arrived.hooks {
                    hooks.push(arrived.addr, push);
                }
                continue;
            }
        };
        match inflight.borrow_mut().pop_front() {
            Some(Inflight::Reply { tx, sent, .. }) => {
                let took = arrived.at.since(sent);
                arrived.latency.record(arrived.worker, took);
                tx.send(Ok(Delivered { frame, took }));
            }
            Some(Inflight::Discard) => {}
            None => return Err(io::Error::other("reply without a request")),
        }
    }
    Ok(())
}
