//! A session's timers: the idle timeout and the end of a CLIENT PAUSE.

use std::task::{Context, Poll};
use std::time::Duration;

use orthrus_resp::Request;

use super::{End, Session, Stream};
use crate::client::subscriptions::PubSub;

// === impl Session ===

impl<S: Stream> Session<S> {
    /// Whether the CLIENT PAUSE timer of a held request has fired (polling
    /// it registers the task otherwise).
    pub(super) fn poll_pause_timer(&mut self, cx: &mut Context<'_>) -> bool {
        let fired = self
            .pause_timer
            .as_mut()
            .is_some_and(|timer| timer.as_mut().poll(cx).is_ready());
        if fired {
            self.pause_timer = None;
        }
        fired
    }

    /// Until when `req` must wait, while CLIENT PAUSE is in force: every
    /// command with ALL, those that may write (or replicate: EVAL,
    /// PUBLISH) with WRITE, as Redis decides.
    pub(super) fn paused_until(&self, req: &Request) -> Option<std::time::Instant> {
        let clients = &self.ctx.shared.clients;
        if !clients.pausing() {
            return None;
        }
        let table = self.ctx.shared.commands.load();
        // EXEC writes what its queue writes.
        let exec_writes = req.arg(0).is_some_and(|n| n.eq_ignore_ascii_case(b"exec"))
            && self.client.multi.as_ref().is_some_and(|m| m.writes);
        clients.paused_until(exec_writes || table.may_write(req))
    }

    pub(super) fn with_idle_timer(mut self) -> Session<S> {
        self.reset_idle_timer();
        self
    }

    /// How long this client may stay silent, from now. Subscribers and
    /// clients in a WATCH are never timed out, nor (checked when the time
    /// is up) clients waiting for replies, blocked ones among them: as in
    /// Redis.
    pub(super) fn reset_idle_timer(&mut self) {
        let secs = self.ctx.shared.live.load().client.idle_timeout_s;
        let subscribed = self.client.pubsub.as_ref().is_some_and(PubSub::active);
        if secs == 0 || subscribed || self.client.watch.is_some() {
            self.idle = None;
            return;
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
        match &mut self.idle {
            Some(sleep) => sleep.as_mut().reset(deadline),
            None => self.idle = Some(Box::pin(tokio::time::sleep_until(deadline))),
        }
    }

    pub(super) fn poll_idle(&mut self, cx: &mut Context<'_>) -> Poll<End> {
        let Some(sleep) = &mut self.idle else {
            return Poll::Pending;
        };
        if sleep.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        if !self.queue.is_empty() {
            // Replies became due meanwhile: not idle.
            self.reset_idle_timer();
            return self.poll_idle(cx);
        }
        tracing::debug!(client.id = self.client.id, "idle timeout");
        Poll::Ready(End::Gone)
    }
}
