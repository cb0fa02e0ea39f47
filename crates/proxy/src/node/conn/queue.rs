//! The jobs a connection's task has yet to write, shared by the
//! connection's handles and its task on one worker thread.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::task::{Context, Poll, Waker};

use bytes::{Bytes, BytesMut};

use super::{BATCH_BYTES, BackendError, Job, LARGE_FRAME, ReplyTx};

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
    pub reply: ReplyTx,
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
    /// Queues a job, copying a small frame into the queue's buffer; gives
    /// the job back if the connection task has ended.
    pub(super) fn push<'a>(&self, job: Job<'a>) -> Result<(), Job<'a>> {
        if self.closed.get() {
            return Err(job);
        }
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
            reply: job.reply,
        });
        self.wake();
        Ok(())
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
        let jobs = std::mem::take(&mut *self.jobs.borrow_mut());
        self.rewind();
        for job in jobs {
            job.reply.send(Err(error));
        }
    }
}
