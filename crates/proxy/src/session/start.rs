//! Parsing what a client sent and starting its requests, in order, while
//! there is room for them.

use std::cell::RefCell;
use std::sync::atomic::Ordering;

use bytes::BytesMut;
use orthrus_resp::{Request, RequestParser};

use super::dispatch::dispatch;
use super::pushes::push_sink;
use super::work::Work;
use super::{Entry, INPUT_KEPT, Session, Stamp, Stream};
use crate::client::Pending;
use crate::node::answer::error_reply;
use crate::observe::clients::Closer;
use crate::observe::stats::WorkerStats;
use crate::time::Tick;

thread_local! {
    /// The parser of every session of a worker between requests.
    static PARSER: RefCell<Option<RequestParser>> = const { RefCell::new(None) };
}

impl<S: Stream> Session<S> {
    /// Parses and starts every complete request buffered, in order, until
    /// one must finish before the next may start. True if any started.
    /// `read_now`: the input was read in this poll (see `parse_with`).
    ///
    /// Sessions of a worker share one parser: its state matters only while
    /// a request is incomplete, and only then does a session keep a parser
    /// of its own.
    pub(super) fn start_requests(&mut self, w: &mut Work, read_now: bool) -> bool {
        if w.input.is_empty() && !self.holding() {
            return false;
        }
        let resends = self.ctx.pool.env().resends();
        if resends != self.resends_seen {
            self.resends_seen = resends;
            w.replay_left = w.queue.len();
        }
        let limits = self.ctx.shared.settings.limits();
        let started = match w.parser.take() {
            Some(mut own) => {
                let started = self.parse_with(w, &mut own, read_now);
                if !w.input.is_empty() {
                    w.parser = Some(own);
                }
                started
            }
            None => PARSER.with_borrow_mut(|shared| {
                let parser = shared.get_or_insert_with(|| RequestParser::new(limits.clone()));
                let started = self.parse_with(w, parser, read_now);
                if !w.input.is_empty() {
                    let fresh = RequestParser::new(limits);
                    w.parser = Some(Box::new(std::mem::replace(parser, fresh)));
                } else if self.closing {
                    parser.reset();
                }
                started
            }),
        };
        if w.input.is_empty() && w.input.capacity() > INPUT_KEPT {
            w.input = BytesMut::new(); // after a burst
        }
        started
    }

    fn parse_with(&mut self, w: &mut Work, parser: &mut RequestParser, read_now: bool) -> bool {
        let mut started = false;
        // Input first: the room is looked at once nothing is left to start.
        while !self.deferred
            && !self.closing
            && (!w.input.is_empty() || self.holding())
            && self.has_room(w)
        {
            // Each request goes to `start` from where it was parsed (or
            // held): no move of it through a common place first.
            let queued = match self.timers.as_mut().and_then(|t| t.held.take()) {
                // Held by CLIENT PAUSE: its deadline starts now.
                Some((req, read)) => self.start(w, req, read, false, true),
                // Everything read is parsed: no call to find nothing.
                None if w.input.is_empty() => break,
                None => {
                    // Redis's pre-AUTH limits, read per request: AUTH may
                    // be the request just before this one.
                    parser.set_unauthenticated(!self.client.authenticated);
                    match parser.parse(&mut w.input) {
                        Ok(Some(req)) => {
                            let read = w.read_at;
                            self.start(w, req, read, read_now, false)
                        }
                        Ok(None) => break,
                        Err(e) => {
                            WorkerStats::bump(&self.ctx.stats().protocol_errors);
                            tracing::debug!(client.id = self.client.id(), error = %e, "protocol error");
                            w.queue.push_back(Entry {
                                pending: Pending::Last(error_reply(&format!("ERR {e}"))),
                                stamp: None,
                                bytes: 0,
                            });
                            true
                        }
                    }
                }
            };
            if !queued {
                break;
            }
            if let Some(entry) = w.queue.back() {
                self.deferred = matches!(entry.pending, Pending::Deferred(_));
                self.closing = matches!(entry.pending, Pending::Last(_));
                w.request_bytes += entry.bytes;
            }
            started = true;
        }
        started
    }

    /// Starts `req`, read at `read` (`read_now`: in this poll), and queues
    /// its entry; false when CLIENT PAUSE holds it instead (`was_held`: it
    /// was held already).
    #[inline]
    fn start(
        &mut self,
        w: &mut Work,
        req: Request,
        read: Tick,
        read_now: bool,
        was_held: bool,
    ) -> bool {
        if let Some(until) = self.paused_until(&req) {
            // CLIENT PAUSE: it waits, and so does what follows; Redis
            // counts the client as blocked meanwhile.
            if !was_held {
                self.ctx
                    .stats()
                    .blocked_clients
                    .fetch_add(1, Ordering::Relaxed);
            }
            self.hold(req, read, until);
            return false;
        }
        if was_held {
            self.ctx
                .stats()
                .blocked_clients
                .fetch_sub(1, Ordering::Relaxed);
        }
        let pushes = &mut self.pushes;
        let limit = self.ctx.shared.settings.raw.client.max_push_bytes;
        let sink = |closer: Closer| push_sink(pushes, limit, closer);
        // The last request read so far, while no other client of the
        // worker waits for replies, may be written at once by an idle node
        // connection.
        let env = self.ctx.pool.env();
        env.set_last_request(w.input.is_empty() && !env.others_waiting(self.waiting));
        // Its deadline counts from its read if that was in this poll; a
        // request held (CLIENT PAUSE) or left from an earlier poll starts
        // its own clock now.
        let start = if read_now { read } else { Tick::now() };
        let run = dispatch(
            &mut self.client,
            req,
            start,
            sink,
            &self.ctx,
            &mut w.samples,
        );
        env.set_last_request(false);
        let bytes = match (&run.frame, &run.pending) {
            (Some(frame), _) => frame.len(),
            (None, Pending::Remote(remote)) => remote.frame().len(),
            (None, _) => 0,
        };
        let kept = run.frame.map(|frame| w.frames.push_back(frame)).is_some();
        // The entry is made in its place in the queue (no move of it from
        // the stack).
        w.queue.push_back(Entry {
            pending: run.pending,
            stamp: Some(Stamp {
                read,
                family: run.family,
                kept,
                ran: run.ran,
                stat: run.stat,
                hot: run.hot,
                cache: run.cache,
            }),
            bytes,
        });
        true
    }
}
