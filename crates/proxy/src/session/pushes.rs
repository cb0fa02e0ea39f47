//! What a session writes besides replies: its push queue (pub/sub
//! messages, a tracking client's invalidations) and the invalidations
//! other clients redirect to it.

use std::task::{Context, Poll};

use crate::client::PushSink;
use crate::client::invalidation::{is_flush, redirected};
use crate::client::subscriptions::PubSub;
use crate::observe::clients::{Closer, Signal};

use super::work::Work;
use super::{OUTPUT_BATCH, Pushes, Session};

// === impl Session ===

impl<S> Session<S> {
    /// Queues the invalidations other clients redirected to this one.
    pub(super) fn take_mail(&mut self) {
        self.client.signal().clear(Signal::MAIL);
        let mail = self.ctx.shared.clients.take_invalidations(self.client.id());
        let subscribed = self.client.pubsub.as_ref().is_some_and(PubSub::active);
        let pushes = redirected(mail, self.client.proto, subscribed);
        if pushes.is_empty() {
            return;
        }
        let limit = self.ctx.shared.settings.raw.client.max_push_bytes;
        let sink = push_sink(&mut self.pushes, limit, self.client.closer());
        for push in pushes {
            sink.push(push);
        }
    }

    /// Appends the pushes that are already there.
    pub(super) fn take_pushes(&mut self, w: &mut Work, cx: &mut Context<'_>) {
        let Some(pushes) = &mut self.pushes else {
            return;
        };
        let mut flushed = false;
        while w.output.len() < OUTPUT_BATCH {
            match pushes.rx.poll_recv(cx) {
                Poll::Ready(Some(push)) => {
                    pushes.sink.written(push.len());
                    // Every master sends its own invalidation of every
                    // key for one FLUSHALL: one says it all.
                    let flush = is_flush(&push);
                    if !(flush && flushed) {
                        w.output.push(push);
                    }
                    flushed |= flush;
                }
                Poll::Ready(None) | Poll::Pending => break,
            }
        }
    }
}

/// The client's push queue, made on first use.
pub(super) fn push_sink(
    pushes: &mut Option<Box<Pushes>>,
    limit: usize,
    closer: Closer,
) -> PushSink {
    pushes
        .get_or_insert_with(|| {
            let (sink, rx) = PushSink::new(limit, closer);
            Box::new(Pushes { sink, rx })
        })
        .sink
        .clone()
}
