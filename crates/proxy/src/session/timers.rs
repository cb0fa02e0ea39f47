//! A session's timers: the idle timeout and the end of a CLIENT PAUSE.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use orthrus_resp::Request;
use tokio::time::Sleep;

use super::{End, Session, Stream};
use crate::client::subscriptions::PubSub;
use crate::time::Tick;

/// What a session keeps only once it needs it (boxed: most clients never
/// do, and every idle connection's memory is mostly its session).
#[derive(Default)]
pub(super) struct Timers {
    /// A request held by CLIENT PAUSE (the ones after it wait with it),
    /// and when it was read.
    pub held: Option<(Request, Tick)>,
    /// When the pause of the held request ends.
    pause: Option<Pin<Box<Sleep>>>,
    /// When the client has been silent for `client.idle_timeout_s`.
    idle: Option<Pin<Box<Sleep>>>,
}

// === impl Session ===

impl<S: Stream> Session<S> {
    /// Whether the CLIENT PAUSE timer of a held request has fired (polling
    /// it registers the task otherwise).
    pub(super) fn poll_pause_timer(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(timers) = &mut self.timers else {
            return false;
        };
        let fired = timers
            .pause
            .as_mut()
            .is_some_and(|timer| timer.as_mut().poll(cx).is_ready());
        if fired {
            timers.pause = None;
        }
        fired
    }

    /// Whether a request is held by CLIENT PAUSE.
    pub(super) fn holding(&self) -> bool {
        self.timers.as_ref().is_some_and(|t| t.held.is_some())
    }

    /// Holds `req`, read at `read` (and what follows it), until `until`.
    pub(super) fn hold(&mut self, req: Request, read: Tick, until: Instant) {
        let timers = self.timers.get_or_insert_with(Box::default);
        timers.held = Some((req, read));
        let until = tokio::time::Instant::from_std(until);
        timers.pause = Some(Box::pin(crate::time::sleep_until(until)));
    }

    /// Until when `req` must wait, while CLIENT PAUSE is in force: every
    /// command with ALL, those that may write (or replicate: EVAL,
    /// PUBLISH) with WRITE, as Redis decides.
    pub(super) fn paused_until(&self, req: &Request) -> Option<Instant> {
        let clients = &self.ctx.shared.clients;
        if !clients.pausing() {
            return None;
        }
        let table = self.ctx.commands();
        // EXEC writes what its queue writes.
        let exec_writes = req.arg(0).is_some_and(|n| n.eq_ignore_ascii_case(b"exec"))
            && self.client.multi.as_ref().is_some_and(|m| m.writes);
        let writes = self.ctx.shared.scripts.may_write(&table, req);
        clients.paused_until(exec_writes || writes)
    }

    pub(super) fn with_idle_timer(mut self) -> Session<S> {
        self.reset_idle_timer();
        self
    }

    /// How long this client may stay silent, from now. Subscribers and
    /// clients in a WATCH are never timed out, nor (checked when the time
    /// is up) clients waiting for replies, blocked ones among them: as in
    /// Redis. (Inlined: every request's poll asks.)
    #[inline]
    pub(super) fn reset_idle_timer(&mut self) {
        let secs = self
            .ctx
            .pool
            .env()
            .with_live(|live| live.client.idle_timeout_s);
        let subscribed = self.client.pubsub.as_ref().is_some_and(PubSub::active);
        if secs == 0 || subscribed || self.client.watch.is_some() {
            if let Some(timers) = &mut self.timers {
                timers.idle = None;
            }
            return;
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
        let timers = self.timers.get_or_insert_with(Box::default);
        match &mut timers.idle {
            Some(sleep) => sleep.as_mut().reset(deadline),
            None => timers.idle = Some(Box::pin(crate::time::sleep_until(deadline))),
        }
    }

    /// Whether the client has been silent too long; `idle`: it is owed
    /// nothing.
    pub(super) fn poll_idle(&mut self, idle: bool, cx: &mut Context<'_>) -> Poll<End> {
        let Some(sleep) = self.timers.as_mut().and_then(|t| t.idle.as_mut()) else {
            return Poll::Pending;
        };
        if sleep.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        if !idle {
            // Replies became due meanwhile: not idle.
            self.reset_idle_timer();
            return self.poll_idle(true, cx);
        }
        tracing::debug!(client.id = self.client.id(), "idle timeout");
        Poll::Ready(End::Gone)
    }
}
