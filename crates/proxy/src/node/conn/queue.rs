//! The jobs a connection's task has yet to write, the requests written
//! and waiting for their replies, and the socket's write half: shared by
//! the connection's handles and its task on one worker thread.
//!
//! A job for an idle connection (nothing queued, nothing in flight, the
//! writer not in the middle of a batch) that is the last request its
//! client has sent, while no other session of the worker waits for
//! replies, is written at once by the caller with one `try_write`. Other
//! small jobs for a plain-TCP connection are held, and the worker's
//! [`flusher`] task writes each connection's held jobs with one
//! `try_write` once the tasks that were ready when the first job was held
//! have run (the first held job wakes it, and a woken task runs after
//! those already waiting; as Redis's `beforeSleep`): the requests of every
//! client served in a turn leave together, and the connection's task is
//! not woken (polled for its reads meanwhile, it leaves them: one write a
//! connection a turn, not two). With more than one client waiting, the
//! flusher first looks at the reactor once more, so that the requests that
//! came in meanwhile join those writes. A turn that holds nothing (one
//! client's request written at once) costs the flusher nothing. A large
//! frame, an `ASKING`, TLS, a batch's worth of held bytes or what the
//! socket did not take is the task's to write.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use bytes::{Bytes, BytesMut};

use super::{BATCH_BYTES, BackendError, Inflight, Job, LARGE_FRAME, ReplyTx};
use crate::node::stream::NodeWriteHalf;
use crate::time::Tick;

/// The jobs waiting to be written, shared by the handles and the task on
/// one worker thread: queuing a job is a push and, when the task sleeps,
/// one wake-up — no channel, no atomic operation.
#[derive(Default)]
pub(super) struct Queue {
    jobs: RefCell<VecDeque<Queued>>,
    /// The frames of the queued small jobs, in order; the writer takes each
    /// job's bytes from `head` on, and [`Queue::rewind`] drops the bytes
    /// taken.
    bytes: RefCell<Vec<u8>>,
    head: Cell<usize>,
    /// The task, while it waits for jobs: set by its first wait, taken by
    /// the wake-up. Only the connection's task polls the queue, so a
    /// waker kept from an earlier wait still wakes the right task.
    waker: Cell<Option<Waker>>,
    /// What was written, oldest first, waiting for its reply.
    pub inflight: RefCell<VecDeque<Inflight>>,
    /// The socket's write half, once connected; taken when the task ends.
    pub wr: RefCell<Option<NodeWriteHalf>>,
    /// The task holds a batch it has not finished writing.
    pub busy: Cell<bool>,
    /// Jobs wait in `jobs` for the worker's [`flusher`].
    held: Cell<bool>,
    /// The handle was dropped.
    abandoned: Cell<bool>,
    /// The task has ended: jobs are refused.
    closed: Cell<bool>,
}

/// A job in the queue.
pub(super) struct Queued {
    pub frame: QueuedFrame,
    pub asking: bool,
    pub frames: usize,
    /// `None` for the rest of a frame written at once only in part: its
    /// request is in flight already.
    pub reply: Option<ReplyTx>,
}

/// Where a queued job's frame is.
pub(super) enum QueuedFrame {
    /// The next this many bytes of `Queue::bytes`.
    Copied(usize),
    /// A frame of `LARGE_FRAME` or more, written from its own buffer.
    Shared(Bytes),
}

thread_local! {
    /// The queues holding jobs for the end of this worker's turn.
    static HELD: RefCell<Vec<Rc<Queue>>> = const { RefCell::new(Vec::new()) };
    /// This thread's [`flusher`], while it waits for held jobs.
    static FLUSHER: Cell<Option<Waker>> = const { Cell::new(None) };
    /// A [`flusher`] runs on this thread: jobs may be held for it.
    static HAS_FLUSHER: Cell<bool> = const { Cell::new(false) };
}

/// The worker's task that writes what its connections held: woken by the
/// first job held in a turn, it runs after the tasks that were waiting to
/// run then, and writes every held connection's jobs (`flush_held`).
/// While `look` says that more than one client waits for replies, it
/// first takes one more look at the reactor: it yields, so that tokio
/// polls its driver without blocking and runs the tasks that this made
/// ready before it polls the flusher again, and the requests that came in
/// during the turn leave in the same writes to the nodes (with many
/// clients, fewer and larger writes, and fewer reads for the nodes). Runs
/// for the worker's life; until it has started, and once it is gone,
/// nothing is held.
pub async fn flusher(look: impl Fn() -> bool) {
    /// Nothing is held for a flusher that is gone.
    struct Gone;
    impl Drop for Gone {
        fn drop(&mut self) {
            HAS_FLUSHER.set(false);
            drop(FLUSHER.take());
            // What is still held is the tasks' to write.
            while let Some(queue) = HELD.with_borrow_mut(Vec::pop) {
                queue.held.set(false);
                queue.wake();
            }
        }
    }
    let _gone = Gone;
    HAS_FLUSHER.set(true);
    loop {
        std::future::poll_fn(|cx| {
            if HELD.with_borrow(Vec::is_empty) {
                FLUSHER.set(Some(cx.waker().clone()));
                Poll::Pending
            } else {
                Poll::Ready(())
            }
        })
        .await;
        if look() {
            tokio::task::yield_now().await;
        }
        flush_held();
    }
}

/// Writes what every connection of this worker held during the turn: one
/// write a connection for the turn's requests.
fn flush_held() {
    while let Some(queue) = HELD.with_borrow_mut(Vec::pop) {
        queue.write_held();
    }
}

// === impl Queue ===

impl Queue {
    /// Writes a job at once (`last`, and see [`Queue::write_at_once`]) or
    /// queues it, copying a small frame into the queue's buffer: held for
    /// [`flush_held`] when it can be, else for the task, woken for it.
    /// Gives the job back if the connection task has ended.
    pub(super) fn push<'a>(self: &Rc<Self>, job: Job<'a>, last: bool) -> Result<(), Job<'a>> {
        if self.closed.get() {
            return Err(job);
        }
        let job = if last && !self.held.get() {
            match self.write_at_once(job) {
                Some(job) => job,
                None => return Ok(()),
            }
        } else {
            job
        };
        let frame = if job.frame.len() >= LARGE_FRAME {
            QueuedFrame::Shared(job.frame.clone())
        } else {
            self.bytes.borrow_mut().extend_from_slice(job.frame);
            QueuedFrame::Copied(job.frame.len())
        };
        // Held while they fit one batch; past that the task writes them.
        let hold = matches!(frame, QueuedFrame::Copied(_))
            && !job.asking
            && (self.held.get() || (!self.busy.get() && self.is_plain()))
            && self.bytes.borrow().len() - self.head.get() < BATCH_BYTES
            && HAS_FLUSHER.get();
        self.jobs.borrow_mut().push_back(Queued {
            frame,
            asking: job.asking,
            frames: job.frames,
            reply: Some(job.reply),
        });
        if !hold {
            self.wake();
        } else if !self.held.replace(true) {
            // The turn's first held connection wakes the flusher.
            let first = HELD.with_borrow_mut(|held| {
                held.push(Rc::clone(self));
                held.len() == 1
            });
            if first && let Some(flusher) = FLUSHER.take() {
                flusher.wake();
            }
        }
        Ok(())
    }

    /// Writes a small job straight to an idle plain-TCP connection; gives
    /// it back when it must be queued (the connection is busy or not yet
    /// open, TLS, ASKING first, the socket full or failing: the task deals
    /// with all of that). A frame written in part leaves its rest queued
    /// first, for the task.
    fn write_at_once<'a>(&self, job: Job<'a>) -> Option<Job<'a>> {
        if job.asking
            || job.frame.len() >= LARGE_FRAME
            || self.busy.get()
            || !self.jobs.borrow().is_empty()
            || !self.inflight.borrow().is_empty()
        {
            return Some(job);
        }
        let written = match self.wr.borrow().as_ref() {
            Some(NodeWriteHalf::Plain(wr)) => match wr.try_write(job.frame) {
                Ok(n) => n,
                Err(_) => return Some(job),
            },
            _ => return Some(job),
        };
        self.inflight
            .borrow_mut()
            .push_back(Inflight::reply(job.reply, job.frames, Tick::now()));
        if let Some(rest) = job.frame.get(written..).filter(|rest| !rest.is_empty()) {
            self.bytes.borrow_mut().extend_from_slice(rest);
            self.jobs.borrow_mut().push_back(Queued {
                frame: QueuedFrame::Copied(rest.len()),
                asking: false,
                frames: 0,
                reply: None,
            });
            self.wake();
        }
        None
    }

    fn is_plain(&self) -> bool {
        matches!(self.wr.borrow().as_ref(), Some(NodeWriteHalf::Plain(_)))
    }

    /// Writes the held jobs with one `try_write`; what the socket does not
    /// take (or an error) is left to the task, woken for it.
    fn write_held(&self) {
        self.held.set(false);
        if self.busy.get() || self.closed.get() {
            self.wake();
            return;
        }
        let sent = Tick::now();
        let mut len = 0;
        {
            let mut jobs = self.jobs.borrow_mut();
            let mut inflight = self.inflight.borrow_mut();
            while let Some(Queued {
                frame: QueuedFrame::Copied(n),
                asking: false,
                ..
            }) = jobs.front()
            {
                len += n;
                if let Some(Queued {
                    reply: Some(tx),
                    frames,
                    ..
                }) = jobs.pop_front()
                {
                    inflight.push_back(Inflight::reply(tx, frames, sent));
                }
            }
        }
        // None left (the task took them) or a job only the task can write
        // first: nothing to write here.
        if len > 0 {
            let head = self.head.get();
            let written = match (
                self.wr.borrow().as_ref(),
                self.bytes.borrow().get(head..head + len),
            ) {
                (Some(NodeWriteHalf::Plain(wr)), Some(batch)) => wr.try_write(batch).unwrap_or(0),
                _ => 0,
            };
            self.head.set(head + written);
            if written < len {
                self.jobs.borrow_mut().push_front(Queued {
                    frame: QueuedFrame::Copied(len - written),
                    asking: false,
                    frames: 0,
                    reply: None,
                });
            }
        }
        self.rewind();
        if !self.jobs.borrow().is_empty() {
            self.wake();
        }
    }

    pub(super) fn is_closed(&self) -> bool {
        self.closed.get()
    }

    /// The handle is gone: the task ends once the queue is empty.
    pub(super) fn abandon(&self) {
        self.abandoned.set(true);
        self.wake();
    }

    fn wake(&self) {
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
    }

    /// The next job; `None` once the handle is gone and nothing is left.
    /// Held jobs are left to the flusher (the task, polled for its reads
    /// before it runs, would write them and leave the turn's later ones
    /// for a second write), unless the handle is gone.
    pub(super) fn poll_next(&self, cx: &mut Context<'_>) -> Poll<Option<Queued>> {
        if (!self.held.get() || self.abandoned.get())
            && let Some(job) = self.jobs.borrow_mut().pop_front()
        {
            return Poll::Ready(Some(job));
        }
        if self.abandoned.get() {
            return Poll::Ready(None);
        }
        // Woken by the reader's work (the task's other branches) instead:
        // the waker kept from the last wait stays, no clone and no drop.
        let waker = self.waker.take().unwrap_or_else(|| cx.waker().clone());
        self.waker.set(Some(waker));
        Poll::Pending
    }

    pub(super) fn try_next(&self) -> Option<Queued> {
        self.jobs.borrow_mut().pop_front()
    }

    /// Appends the next `len` copied bytes, a job's frame, to `batch` (or
    /// just moves past them, when `skip`).
    pub(super) fn take_copied(&self, len: usize, batch: &mut BytesMut, skip: bool) {
        let head = self.head.get();
        if !skip && let Some(frame) = self.bytes.borrow().get(head..head + len) {
            batch.extend_from_slice(frame);
        }
        self.head.set(head + len);
    }

    /// Once every queued job is taken, the bytes buffer starts over (and
    /// gives back what a burst grew it to). While jobs keep coming (a slow
    /// node, clients sending all the while) it never empties: the bytes
    /// already taken go once they are half of it, so it holds what is
    /// still to be written and at most as much again.
    pub(super) fn rewind(&self) {
        let mut bytes = self.bytes.borrow_mut();
        let head = self.head.get();
        if self.jobs.borrow().is_empty() {
            bytes.clear();
            bytes.shrink_to(BATCH_BYTES);
            self.head.set(0);
        } else if head >= BATCH_BYTES && head >= bytes.len() / 2 {
            bytes.drain(..head);
            self.head.set(0);
        }
    }

    /// Refuses every job still queued (none of them was written) and every
    /// later one; how many it refused.
    pub(super) fn close(&self, error: BackendError) -> usize {
        self.closed.set(true);
        self.wr.borrow_mut().take();
        let jobs = std::mem::take(&mut *self.jobs.borrow_mut());
        self.rewind();
        let refused = jobs.len();
        for reply in jobs.into_iter().filter_map(|job| job.reply) {
            reply.send(Err(error));
        }
        refused
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;
    use crate::node::slot::slot;

    fn new_job(frame: &Bytes) -> (Job<'_>, crate::node::conn::ReplyRx) {
        let (reply, rx) = slot();
        let job = Job {
            frame,
            asking: false,
            frames: 1,
            reply,
        };
        (job, rx)
    }

    /// Runs `test` on a one-thread runtime with a queue whose write half
    /// is connected to a plain socket, the node's side (non-blocking).
    fn on_a_connection(test: impl AsyncFnOnce(Rc<Queue>, std::net::TcpStream)) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build_local(tokio::runtime::LocalOptions::default())
            .expect("runtime");
        runtime.block_on(async {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            let stream = tokio::net::TcpStream::connect(listener.local_addr().expect("addr"))
                .await
                .expect("connect");
            let (node, _) = listener.accept().expect("accept");
            node.set_nonblocking(true).expect("nonblocking");
            let (_rd, wr) = stream.into_split();
            let queue = Rc::new(Queue::default());
            *queue.wr.borrow_mut() = Some(NodeWriteHalf::Plain(wr));
            test(queue, node).await;
        });
    }

    /// Small jobs pushed during a turn are held (nothing reaches the
    /// node) until the flusher has run, after the tasks waiting to run
    /// when the first was held, then leave in one write, each with its
    /// place in the in-flight queue; the last request of a client for an
    /// idle connection is written at once. With no flusher on the thread,
    /// nothing is held.
    #[test]
    fn a_turns_small_jobs_leave_together_when_the_flusher_runs() {
        on_a_connection(async |queue, mut node| {
            let frames: Vec<Bytes> = (0..3)
                .map(|i| Bytes::from(format!("*2\r\n$3\r\nGET\r\n$1\r\n{i}\r\n")))
                .collect();
            // No flusher yet: not held (the connection's task, woken, is
            // to write it).
            let (job, _rx) = new_job(&frames[0]);
            assert!(queue.push(job, false).is_ok());
            assert!(!queue.held.get());
            queue.jobs.borrow_mut().clear();
            queue.bytes.borrow_mut().clear();
            let flusher = tokio::spawn(flusher(|| false));
            tokio::task::yield_now().await; // the flusher starts and waits
            let mut receivers = Vec::new();
            for frame in &frames {
                let (job, rx) = new_job(frame);
                assert!(queue.push(job, false).is_ok());
                receivers.push(rx);
            }
            let mut buf = [0u8; 256];
            assert!(node.read(&mut buf).is_err(), "held, not written yet");
            assert_eq!(queue.inflight.borrow().len(), 0);
            tokio::task::yield_now().await; // the flusher, woken, runs first
            assert_eq!(queue.inflight.borrow().len(), 3);
            assert!(queue.jobs.borrow().is_empty());
            let want: Vec<u8> = frames.iter().flat_map(|f| f.iter().copied()).collect();
            let mut got = Vec::new();
            while got.len() < want.len() {
                match node.read(&mut buf) {
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                    Err(_) => tokio::task::yield_now().await,
                }
            }
            assert_eq!(got, want);
            // An idle connection again once the replies are in: a
            // client's last request goes at once, nothing held.
            queue.inflight.borrow_mut().clear();
            let (job, _rx) = new_job(&frames[0]);
            assert!(queue.push(job, true).is_ok());
            assert!(!queue.held.get());
            assert_eq!(queue.inflight.borrow().len(), 1);
            flusher.abort();
            let _ = flusher.await;
            assert!(!HAS_FLUSHER.get(), "nothing held once it is gone");
        });
    }

    /// A flusher told to look (more than one client waits) yields before
    /// it writes: a task made ready after it was woken, as by the reactor's
    /// events of that look, runs first, and its job leaves in the same
    /// write as the turn's. Told not to, it writes before that task runs.
    #[test]
    fn a_looking_flusher_writes_the_jobs_of_tasks_woken_meanwhile_too() {
        for look in [true, false] {
            on_a_connection(async |queue, mut node| {
                let frames = [
                    Bytes::from_static(b"*2\r\n$3\r\nGET\r\n$1\r\na\r\n"),
                    Bytes::from_static(b"*2\r\n$3\r\nGET\r\n$1\r\nb\r\n"),
                ];
                let flusher = tokio::task::spawn_local(flusher(move || look));
                tokio::task::yield_now().await; // the flusher starts and waits
                let (job, _a) = new_job(&frames[0]);
                assert!(queue.push(job, false).is_ok(), "held, the flusher woken");
                // Made ready after the flusher: runs after its first poll.
                let later = tokio::task::spawn_local({
                    let queue = queue.clone();
                    let frame = frames[1].clone();
                    async move {
                        let written_before = queue.inflight.borrow().len();
                        let (job, _b) = new_job(&frame);
                        assert!(queue.push(job, false).is_ok());
                        written_before
                    }
                });
                let written_before = later.await.expect("task");
                let mut buf = [0u8; 256];
                let mut got = Vec::new();
                let want = [&frames[0][..], &frames[1][..]].concat();
                while got.len() < want.len() {
                    match node.read(&mut buf) {
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                        Err(_) => tokio::task::yield_now().await,
                    }
                }
                assert_eq!(got, want);
                assert_eq!(queue.inflight.borrow().len(), 2);
                if look {
                    assert_eq!(written_before, 0, "the first job waited for the look");
                } else {
                    assert_eq!(written_before, 1, "the first job left before");
                }
                flusher.abort();
                let _ = flusher.await;
            });
        }
    }

    /// The connection's task, polled during the turn (for its reads), does
    /// not take what is held: the flusher writes a turn's jobs in one
    /// write, not the task some of them and the flusher the rest. Once
    /// the flusher is gone, what it held is the task's again.
    #[test]
    fn held_jobs_are_the_flushers_not_the_tasks() {
        on_a_connection(async |queue, _node| {
            let frame = Bytes::from_static(b"*2\r\n$3\r\nGET\r\n$1\r\na\r\n");
            let mut cx = Context::from_waker(Waker::noop());
            let flusher = tokio::spawn(flusher(|| false));
            tokio::task::yield_now().await; // the flusher starts and waits
            let (job, _a) = new_job(&frame);
            assert!(queue.push(job, false).is_ok());
            assert!(queue.held.get());
            assert!(
                queue.poll_next(&mut cx).is_pending(),
                "held for the flusher"
            );
            let (job, _b) = new_job(&frame);
            assert!(queue.push(job, false).is_ok());
            tokio::task::yield_now().await; // the flusher runs
            assert!(queue.jobs.borrow().is_empty());
            assert_eq!(
                queue.inflight.borrow().len(),
                2,
                "both written by the flusher"
            );
            // Held when the flusher ends: the task takes it.
            let (job, _c) = new_job(&frame);
            assert!(queue.push(job, false).is_ok());
            assert!(queue.held.get());
            flusher.abort();
            let _ = flusher.await;
            assert!(!queue.held.get());
            assert!(queue.poll_next(&mut cx).is_ready());
        });
    }
}
