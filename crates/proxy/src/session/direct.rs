//! A plain TCP client's socket, shared by its session and the worker's node
//! connections, so that a reply can go to the client from the node
//! connection that read it, without waking the session.
//!
//! When a session goes to sleep owing exactly one reply, a plain keyed
//! request's, with nothing else to write or read, it lends its [`Work`]
//! here and hooks the request's reply slot. The node connection's reader
//! offers the reply to the hook: if it is the client's answer as it is (no
//! error to follow) and the socket takes all of it in one `try_write`, the
//! reply is written, the request counted (latency, INFO commandstats, the
//! SLOWLOG, the slot's load, a HOTKEYS sample) and the work given back to
//! the worker's stock; the session is not woken, and sleeps until its
//! client sends again. Anything else (an error to follow, a full socket)
//! goes to the session as before; so does the rest of a reply the socket
//! took in part (its request counted already). A session that is woken for
//! any reason first takes its work back.
//!
//! A request then costs two task polls: the session's (its client's
//! readiness) and the node connection's (the node's).

use std::cell::{Cell, OnceCell, RefCell};
use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use super::replies::account;
use super::work::Work;
use crate::cache::serve::{self, Mark};
use crate::client::Pending;
use crate::node::conn::{Delivered, Reply, delivered_at};
use crate::node::forward::is_answer;
use crate::node::slot::Hook;
use crate::observe::clients::Identity;
use crate::time::Tick;
use crate::worker::WorkerCtx;

/// A plain TCP client connection (the session's stream).
pub struct TcpClient(Rc<Direct>);

/// What a client's session and the node connections share.
pub struct Direct {
    stream: RefCell<TcpStream>,
    /// The session's work while it is lent: one request in flight.
    lent: RefCell<Option<Box<Work>>>,
    /// The size of the last reply written here, for the session's estimate
    /// of its replies' size.
    last_reply: Cell<Option<u32>>,
    /// Writes answered here since the session last looked (the reply
    /// cache's count of the client's unanswered writes).
    writes_answered: Cell<u32>,
    /// Whose requests are counted, and where.
    owner: OnceCell<Owner>,
}

struct Owner {
    ctx: Rc<WorkerCtx>,
    identity: Arc<Identity>,
}

// === impl TcpClient ===

impl TcpClient {
    pub fn new(stream: TcpStream) -> TcpClient {
        TcpClient(Rc::new(Direct {
            stream: RefCell::new(stream),
            lent: RefCell::new(None),
            last_reply: Cell::new(None),
            writes_answered: Cell::new(0),
            owner: OnceCell::new(),
        }))
    }

    fn with<T>(&self, f: impl FnOnce(Pin<&mut TcpStream>) -> T) -> T {
        f(Pin::new(&mut self.0.stream.borrow_mut()))
    }

    /// Nagle off.
    pub(super) fn no_delay(&self) {
        let _ = self.0.stream.borrow().set_nodelay(true);
    }

    /// orthrus's own address on it.
    pub(super) fn local_addr(&self) -> Option<SocketAddr> {
        self.0.stream.borrow().local_addr().ok()
    }

    /// What it shares with the node connections.
    pub(super) fn shared(&self) -> &Rc<Direct> {
        &self.0
    }
}

impl AsyncRead for TcpClient {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.with(|s| s.poll_read(cx, buf))
    }
}

impl AsyncWrite for TcpClient {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.with(|s| s.poll_write(cx, buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.with(|s| s.poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.with(|s| s.poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.with(|s| s.poll_shutdown(cx))
    }
}

// === impl Direct ===

impl Direct {
    /// Names the session whose requests this counts (once, as it starts).
    pub(super) fn bind(&self, ctx: &Rc<WorkerCtx>, identity: &Arc<Identity>) {
        let _ = self.owner.set(Owner {
            ctx: ctx.clone(),
            identity: identity.clone(),
        });
    }

    /// Lends the session's work, whose one entry is a request in flight,
    /// and hooks that request's reply slot.
    pub(super) fn lend(self: &Rc<Self>, work: Box<Work>) {
        if let Some(Pending::Remote(remote)) = work.queue.front().map(|e| &e.pending) {
            let hook: Weak<dyn Hook<Reply>> = Rc::downgrade(self) as Weak<dyn Hook<Reply>>;
            remote.hook(hook);
        }
        *self.lent.borrow_mut() = Some(work);
    }

    /// The session's work back, if it is still lent (its reply not
    /// written here), unhooked; and the size of the last reply written
    /// here, if one was since.
    pub(super) fn take_back(&self) -> (Option<Box<Work>>, Option<u32>) {
        let work = self.lent.borrow_mut().take();
        if let Some(Pending::Remote(remote)) = work
            .as_ref()
            .and_then(|w| w.queue.front())
            .map(|e| &e.pending)
        {
            remote.unhook();
        }
        (work, self.last_reply.take())
    }

    /// How many writes the reply cache marked were answered here since
    /// the last call.
    pub(super) fn take_writes_answered(&self) -> u32 {
        self.writes_answered.take()
    }

    /// Counts a reply's request and writes the reply to the client; gives
    /// back what the socket did not take, for the session to write (it
    /// does not count the request again).
    fn write(&self, delivered: Delivered) -> Option<Delivered> {
        let (Ok(mut lent), Some(owner)) = (self.lent.try_borrow_mut(), self.owner.get()) else {
            return Some(delivered);
        };
        // The one entry of lent work is the request this reply answers.
        let Some(work) = lent.as_mut() else {
            return Some(delivered);
        };
        let Work {
            queue,
            samples,
            frames,
            ..
        } = &mut **work;
        let Some(entry) = queue.front() else {
            return Some(delivered);
        };
        let (Pending::Remote(remote), Ok(stream)) = (&entry.pending, self.stream.try_borrow())
        else {
            return Some(delivered);
        };
        // Counted before the client can see the reply, as the session does.
        let took = delivered.took;
        let done = remote.done(delivered);
        let ctx = &owner.ctx;
        remote.count(ctx.pool.env().load(), &done);
        if let Some(stamp) = &entry.stamp
            && let Some(frame) = entry.frame(frames.front())
        {
            let total = delivered_at()
                .unwrap_or_else(Tick::now)
                .micros_since(stamp.read);
            account(ctx, &owner.identity, stamp, frame, total, &done, samples);
            // What a write changed is stale again before its client learns
            // it was done (`cache::serve::written`).
            if stamp.cache != Mark::None {
                self.written(ctx, stamp.cache);
            }
        }
        let written = stream.try_write(&done.reply).unwrap_or(0);
        if written < done.reply.len() {
            // Counted: the session writes the rest without counting it.
            work.uncount_head();
            return Some(Delivered {
                frame: done.reply.slice(written..),
                took,
            });
        }
        drop(stream);
        self.last_reply
            .set(Some(u32::try_from(written).unwrap_or(u32::MAX)));
        work.pop_answered();
        if let Some(work) = lent.take_if(|w| w.is_idle()) {
            work.give_back();
        }
        None
    }
}

impl Direct {
    #[cold]
    fn written(&self, ctx: &WorkerCtx, mark: Mark) {
        serve::written(ctx, mark);
        self.writes_answered
            .set(self.writes_answered.get().saturating_add(1));
    }
}

impl Hook<Reply> for Direct {
    fn offer(&self, reply: Reply) -> Option<Reply> {
        match reply {
            Ok(delivered) if is_answer(&delivered) => self.write(delivered).map(Ok),
            other => Some(other),
        }
    }
}
