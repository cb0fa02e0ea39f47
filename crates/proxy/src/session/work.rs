//! What a session holds only while it has work, and the worker's stock of
//! it.

use std::cell::RefCell;
use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};
use orthrus_resp::RequestParser;

use super::output::Output;
use super::{Entry, Stamp};
use crate::observe::hotkeys::Sample;
use crate::process::room::Reservation;
use crate::time::Tick;

thread_local! {
    /// What idle sessions gave up, for the next busy one: boxes, so that
    /// one moves between a session and the stock without a copy or an
    /// allocation.
    #[allow(clippy::vec_box)]
    static STOCK: RefCell<Vec<Box<Work>>> = const { RefCell::new(Vec::new()) };
}

/// How many given up [`Work`]s a worker keeps.
const STOCK_MAX: usize = 64;
/// Reply queue entries a session keeps room for once its queue is empty.
pub(super) const QUEUE_KEPT: usize = 16;

/// What a session holds only while it has work: bytes read and not parsed,
/// the replies it owes, what it is writing. Boxed and given up once the
/// client is idle, so that an idle connection's task stays small (tokio
/// pads a task's cell to 128 bytes: this keeps it at 256); a worker keeps
/// a few given up ones for the next busy client, so that a client sending
/// one request at a time does not allocate one per request.
pub(super) struct Work {
    /// This client's parser, while a request of it is incomplete; the
    /// worker's shared one otherwise.
    pub parser: Option<Box<RequestParser>>,
    /// Bytes read and not parsed yet (an incomplete request); empty, and
    /// without a buffer, between requests.
    pub input: BytesMut,
    pub queue: VecDeque<Entry>,
    /// The requests of the entries whose pending value does not hold
    /// them (their stamp says `kept`), in queue order.
    pub frames: VecDeque<Bytes>,
    /// The keys of the entries a HOTKEYS session sampled, in queue order.
    pub samples: VecDeque<Sample>,
    pub output: Output,
    /// When the requests being parsed were read: one clock read per read.
    pub read_at: Tick,
    /// Bytes of the requests in `queue` (counted in the client's budget,
    /// `client.max_pending_bytes`, as their frames are held until answered).
    pub request_bytes: usize,
    /// Since when the client has held more than
    /// `client.output_buffer_soft_limit` without taking its output.
    pub over_soft_since: Option<Tick>,
    /// The room reserved under `memory_limit_mb` for a large request
    /// being read.
    pub room: Option<Reservation>,
    /// Entries at the head of the queue sent before requests of this
    /// worker had to be sent again ([`Env::resends`]): nothing starts
    /// until they are answered, so that a request of this client sent
    /// again does not reach its node after one the client sent later.
    ///
    /// [`Env::resends`]: crate::node::Env::resends
    pub replay_left: usize,
}

// === impl Work ===

impl Work {
    /// One from the worker's stock, or a new one.
    pub fn take() -> Box<Work> {
        STOCK.with_borrow_mut(Vec::pop).unwrap_or_else(|| {
            Box::new(Work {
                parser: None,
                input: BytesMut::new(),
                queue: VecDeque::new(),
                frames: VecDeque::new(),
                samples: VecDeque::new(),
                output: Output::default(),
                read_at: Tick::now(),
                request_bytes: 0,
                over_soft_since: None,
                room: None,
                replay_left: 0,
            })
        })
    }

    /// The request at the head of the queue, answered: out of the queue,
    /// of [`Work::frames`] and of [`Work::request_bytes`].
    pub fn pop_answered(&mut self) {
        let Some(entry) = self.queue.pop_front() else {
            return;
        };
        self.request_bytes = self.request_bytes.saturating_sub(entry.bytes);
        self.replay_left = self.replay_left.saturating_sub(1);
        self.drop_stamp(entry.stamp);
    }

    /// The request at the head of the queue, counted already: its stamp
    /// goes, and with it the frame kept for it, so that nothing counts it
    /// again.
    pub fn uncount_head(&mut self) {
        let stamp = self.queue.front_mut().and_then(|e| e.stamp.take());
        self.drop_stamp(stamp);
    }

    /// A stamp leaving the head of the queue: the frame kept for its
    /// request, the front of `frames`, goes with it.
    fn drop_stamp(&mut self, stamp: Option<Stamp>) {
        if stamp.is_some_and(|stamp| stamp.kept) {
            self.frames.pop_front();
        }
    }

    /// Nothing read and unparsed, owed or unwritten.
    pub fn is_idle(&self) -> bool {
        self.parser.is_none()
            && self.input.is_empty()
            && self.queue.is_empty()
            && self.output.is_empty()
    }

    /// Back to the worker's stock (an idle one: it holds no request).
    pub fn give_back(self: Box<Work>) {
        debug_assert!(self.frames.is_empty(), "a kept frame without its entry");
        STOCK.with_borrow_mut(|stock| {
            if stock.len() < STOCK_MAX {
                stock.push(self);
            }
        });
    }
}
