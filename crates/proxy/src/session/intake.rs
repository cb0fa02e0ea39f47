//! Limits on what a client's session buffers of a request not yet
//! complete: `client.query_buffer_limit`, and the room `memory_limit_mb`
//! leaves (`process::room`). Past either, the request is refused and the
//! connection closes once the replies before it are written.

use std::sync::atomic::Ordering;

use bytes::BytesMut;

use super::work::Work;
use super::{Entry, Session, Stream};
use crate::client::Pending;
use crate::node::answer::error_reply;
use crate::observe::stats::WorkerStats;
use crate::process::room::{LARGE_INCOMPLETE, NoRoom, reserve};

impl<S: Stream> Session<S> {
    /// One request buffered past `client.query_buffer_limit` before it is
    /// complete (Redis's `client-query-buffer-limit`): an error, and the
    /// connection closes once the replies before it are written. True if
    /// it queued that error.
    pub(super) fn check_query_buffer(&mut self, w: &mut Work) -> bool {
        let limit = self.ctx.shared.settings.raw.client.query_buffer_limit;
        // Only an incomplete request stays buffered while requests may start.
        if w.input.len() <= limit
            || self.closing
            || self.deferred
            || self.holding()
            || !self.has_room(w)
        {
            return false;
        }
        WorkerStats::bump(&self.ctx.stats().protocol_errors);
        let reply = error_reply(&format!(
            "ERR orthrus: a request over client.query_buffer_limit ({limit} bytes); closing the connection"
        ));
        self.refuse_and_close(w, reply);
        true
    }

    /// With `memory_limit_mb` set, an incomplete request of
    /// [`LARGE_INCOMPLETE`] bytes or more reserves what it is known to need;
    /// one that does not fit (or needs more while orthrus is over the
    /// limit) gets `-OOM` and the connection closes. True if it queued that
    /// error.
    pub(super) fn check_memory_room(&mut self, w: &mut Work) -> bool {
        if !self.ctx.shared.memory_room.is_limited() || self.closing {
            return false;
        }
        let awaiting = w.parser.as_ref().map_or(0, |p| p.awaiting());
        let need = awaiting.max(w.input.len());
        if need < LARGE_INCOMPLETE {
            w.room = None;
            return false;
        }
        let (need, read) = (need as u64, w.input.len() as u64);
        let shared = &self.ctx.shared;
        let over = shared.over_memory.load(Ordering::Relaxed);
        match reserve(&shared.memory_room, over, w.room.take(), need, read) {
            Ok(room) => {
                w.room = Some(room);
                false
            }
            Err(NoRoom { left }) => {
                tracing::warn!(
                    client.id = self.client.id(),
                    client.addr = %self.client.peer(),
                    request_bytes = need,
                    left_bytes = left,
                    "refused a request larger than what memory_limit_mb leaves; closing the client"
                );
                let reply = error_reply(&format!(
                    "OOM orthrus: a request of at least {need} bytes is larger than what memory_limit_mb leaves ({left} bytes); closing the connection"
                ));
                self.refuse_and_close(w, reply);
                true
            }
        }
    }

    /// Drops what is buffered of the request and queues `reply` as the
    /// last: the connection closes once it is written.
    fn refuse_and_close(&mut self, w: &mut Work, reply: bytes::Bytes) {
        w.input = BytesMut::new();
        w.parser = None;
        w.room = None;
        self.closing = true;
        w.queue.push_back(Entry {
            pending: Pending::Last(reply),
            stamp: None,
            bytes: 0,
        });
    }
}
