//! A client's queue of pushes (pub/sub messages and confirmations): filled
//! by its subscription connections, drained by the session writer between
//! replies, bounded by the bytes not yet written (`client.max_push_bytes`).

use std::cell::Cell;
use std::rc::Rc;

use crate::observe::clients::Closer;
use bytes::Bytes;
use tokio::sync::mpsc;

/// Where pushes for one client go; bounded by bytes not yet written.
#[derive(Clone)]
pub struct PushSink {
    tx: mpsc::UnboundedSender<Bytes>,
    queued: Rc<Cell<usize>>,
    limit: usize,
    gone: Closer,
}

// === impl PushSink ===

impl PushSink {
    pub fn new(limit: usize, gone: Closer) -> (PushSink, mpsc::UnboundedReceiver<Bytes>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let sink = PushSink {
            tx,
            queued: Rc::new(Cell::new(0)),
            limit,
            gone,
        };
        (sink, rx)
    }

    /// Queues a push; past the limit, disconnects the client instead.
    pub fn push(&self, frame: Bytes) {
        let queued = self.queued.get() + frame.len();
        if queued > self.limit {
            if !self.gone.is_closed() {
                tracing::warn!(
                    queued,
                    limit = self.limit,
                    "subscriber too slow: disconnecting it"
                );
                self.gone.close();
            }
            return;
        }
        self.queued.set(queued);
        let _ = self.tx.send(frame);
    }

    /// The writer has written `n` bytes of pushes.
    pub fn written(&self, n: usize) {
        self.queued.set(self.queued.get().saturating_sub(n));
    }
}
