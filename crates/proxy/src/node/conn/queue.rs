//! The jobs a connection's task has yet to write, the requests written
//! and waiting for their replies, and the socket's write half: shared by
//! the connection's handles and its task on one worker thread.
//!
//! A job for an idle connection (nothing queued, nothing in flight, the
//! writer not in the middle of a batch) that is the last request its
//! client has sent for now is written at once by the caller, with one
//! `try_write`: the connection's task is not woken to write it. Every
//! other job is queued, and the task writes what has gathered in one
//! write (50 clients' requests still leave together).

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use bytes::{Bytes, BytesMut};

use super::{BATCH_BYTES, BackendError, Inflight, Job, LARGE_FRAME, ReplyTx};
use crate::node::stream::NodeWriteHalf;

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
    /// The task, while it waits for jobs.
    waker: Cell<Option<Waker>>,
    /// What was written, oldest first, waiting for its reply.
    pub inflight: RefCell<VecDeque<Inflight>>,
    /// The socket's write half, once connected; taken when the task ends.
    pub wr: RefCell<Option<NodeWriteHalf>>,
    /// The task holds a batch it has not finished writing.
    pub busy: Cell<bool>,
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

// === impl Queue ===

impl Queue {
    /// Queues a job, copying a small frame into the queue's buffer, or
    /// writes it at once (`last`: its client has sent nothing after it);
    /// gives the job back if the connection task has ended.
    pub(super) fn push<'a>(&self, job: Job<'a>, last: bool) -> Result<(), Job<'a>> {
        if self.closed.get() {
            return Err(job);
        }
        let job = if last {
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
        self.jobs.borrow_mut().push_back(Queued {
            frame,
            asking: job.asking,
            frames: job.frames,
            reply: Some(job.reply),
        });
        self.wake();
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
        self.inflight.borrow_mut().push_back(Inflight::Reply {
            tx: job.reply,
            frames: job.frames.max(1),
            sent: Instant::now(),
        });
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
    pub(super) fn poll_next(&self, cx: &mut Context<'_>) -> Poll<Option<Queued>> {
        if let Some(job) = self.jobs.borrow_mut().pop_front() {
            return Poll::Ready(Some(job));
        }
        if self.abandoned.get() {
            return Poll::Ready(None);
        }
        self.waker.set(Some(cx.waker().clone()));
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
    /// later one.
    pub(super) fn close(&self, error: BackendError) {
        self.closed.set(true);
        self.wr.borrow_mut().take();
        let jobs = std::mem::take(&mut *self.jobs.borrow_mut());
        self.rewind();
        for reply in jobs.into_iter().filter_map(|job| job.reply) {
            reply.send(Err(error));
        }
    }
}
