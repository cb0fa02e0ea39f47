//! The one retry driver. Every path that sends a request to the cluster
//! (shared connections in [`forward`](super::forward), blocking commands,
//! transactions) asks the pure decision ([`orthrus_cluster::decide`]) what
//! a reply means through [`Retry::after_reply`], which counts it, waits as
//! the policy says and tells the caller where to send next; all of it
//! inside one deadline, the request timeout of its upstream
//! (`backend.request_timeout_ms` unless it has its own) from when the
//! request was read. What "send again" means stays the caller's: a shared request
//! goes to the named node, a transaction goes whole to the slot's owner.

use std::time::{Duration, Instant};

use bytes::Bytes;
use orthrus_cluster::{Action, NodeAddr, decide};

use super::Env;
use super::answer::{error_reply, note, still_moving};
use crate::observe::stats::WorkerStats;
use crate::route::prefix::Upstream;
use crate::time::Tick;

/// Time left for the last attempt: a wait that would leave less gives up.
const LAST_TRY: Duration = Duration::from_millis(10);

/// One request's attempts so far and its deadline.
#[derive(Debug)]
pub struct Retry {
    attempt: u32,
    deadline: Instant,
    /// The upstream whose slot map a MOVED patches.
    upstream: Upstream,
}

/// What to do after a reply, once [`Retry::after_reply`] has waited.
#[derive(Debug)]
pub enum Next {
    /// The reply is the answer.
    Reply,
    /// Send again to `addr` (after `ASKING` when `asking`).
    Redirect { addr: NodeAddr, asking: bool },
    /// Send again where the slot map says (TRYAGAIN, CLUSTERDOWN).
    Again,
    /// Answer this: the decision failed the request, or the deadline came.
    Answer(Bytes),
}

// === impl Retry ===

impl Retry {
    /// A request for `upstream` read at `read_at`.
    pub fn new(env: &Env, read_at: Tick, upstream: Upstream) -> Retry {
        Retry::with_start(env, read_at.instant(), upstream)
    }

    /// A request for `upstream` that starts now.
    pub fn from_now(env: &Env, upstream: Upstream) -> Retry {
        Retry::with_start(env, Instant::now(), upstream)
    }

    fn with_start(env: &Env, start: Instant, upstream: Upstream) -> Retry {
        Retry {
            attempt: 0,
            deadline: start + env.shared.request_timeout_of(upstream),
            upstream,
        }
    }

    /// Redirections and retries taken so far.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Moves the deadline on by time the command itself spent (a blocking
    /// command's own wait is not a retry's).
    pub fn extend(&mut self, by: Duration) {
        self.deadline += by;
    }

    /// Decides what `reply` from `from` means, counts it (and patches the
    /// slot map after MOVED), waits as the policy says, and says what next.
    /// When the deadline leaves no time for another attempt: a redirect is
    /// answered with "still redirecting", a TRYAGAIN or CLUSTERDOWN with
    /// the node's own reply (it says what was happening).
    pub async fn after_reply(&mut self, env: &Env, reply: &Bytes, from: &NodeAddr) -> Next {
        let policy = &env.shared.policy;
        let action = decide(reply, self.attempt, policy).with_origin(from);
        note(env, &action, self.upstream);
        if self.attempt == policy.free_redirects
            && matches!(action, Action::Moved { .. } | Action::Ask { .. })
        {
            // Its first wait: the nodes still send it round.
            WorkerStats::bump(&env.stats().redirect_waits);
        }
        let (next, delay) = match action {
            Action::Done => return Next::Reply,
            Action::Fail(reason) => return Next::Answer(error_reply(reason.message())),
            Action::Moved { addr, .. } => (
                Next::Redirect {
                    addr,
                    asking: false,
                },
                policy.redirect_delay(self.attempt),
            ),
            Action::Ask { addr } => {
                // A slot is moving: a reply cached from its old owner may
                // miss a write made on the new one.
                env.shared.cache_all_stale();
                if self.attempt >= policy.free_redirects {
                    // ASKs that go round in circles: look at the topology again.
                    env.shared.request_refresh_of(self.upstream);
                }
                let delay = policy.redirect_delay(self.attempt);
                (Next::Redirect { addr, asking: true }, delay)
            }
            Action::RetryAfter { delay, .. } => (Next::Again, delay),
        };
        if !self.wait(delay).await {
            return Next::Answer(match next {
                Next::Redirect { addr, .. } => still_moving(env, &addr, self.upstream),
                _ => reply.clone(),
            });
        }
        self.attempt += 1;
        next
    }

    /// After a failure that brought no reply: waits `delay`; false, without
    /// waiting, when the deadline leaves no time for another attempt.
    pub async fn after_failure(&mut self, delay: Duration) -> bool {
        if !self.wait(delay).await {
            return false;
        }
        self.attempt += 1;
        true
    }

    /// The wait before resending a request that got no reply: 10 ms,
    /// doubling with each attempt up to 80 ms.
    pub fn failure_delay(&self) -> Duration {
        Duration::from_millis(10u64 << self.attempt.min(3))
    }

    /// Sleeps `delay`, cut short to leave the next attempt some time before
    /// the deadline; false, without sleeping, when too little time is left.
    pub async fn wait(&self, delay: Duration) -> bool {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left <= LAST_TRY {
            return false;
        }
        if !delay.is_zero() {
            crate::time::sleep(delay.min(left - LAST_TRY)).await;
        }
        true
    }
}
