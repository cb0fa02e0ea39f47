//! Sending a request to the node that should answer it, and following the
//! cluster's redirections until there is a reply for the client.
//!
//! The decision what to do with a reply is the pure
//! [`orthrus_cluster::decide`]; this module carries it out: patch the slot
//! map on MOVED, send `ASKING` with the command on ASK, wait and resend on
//! TRYAGAIN and CLUSTERDOWN, and resend requests that never reached a node.
//!
//! Every retry happens within one deadline per request,
//! `backend.request_timeout_ms` from when it was read (its `Remote` was
//! made in the same turn). A request whose master cannot be connected to
//! waits (is parked) while the topology shows a replica that can be
//! promoted, and fails at once when none can; a request already written to
//! a node that failed is resent only if it just reads.
//!
//! A read the client allows on replicas ([`Access::ReplicaRead`]) goes to
//! a usable replica of the slot's master, on a connection that sent
//! `READONLY`; if that replica fails, is loading or answers a redirect,
//! the read goes to another replica (once) or to the master, within the
//! same deadline.

use std::future::Future;
use std::pin::Pin;
use std::rc::Weak;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use orthrus_cluster::{NodeAddr, replica_declined};
use orthrus_resp::{ReplyClass, classify};

use super::answer::{error_reply, no_owner, still_moving};
use super::client::Dialect;
use super::conn::{BackendError, Delivered, Job, Reply, ReplyRx};
use super::pool::{Lane, Pool};
use super::replica::pick_replica;
use super::retry::{Next, Retry};
use super::slot::Hook;
pub use super::target::Target;
use super::target::{can_take_over, owner};
use super::{Done, Env};
use crate::config::ReadFrom;
use crate::observe::latency::micros;
use crate::observe::load::WorkerLoad;
use crate::observe::stats::WorkerStats;
use crate::time::Tick;

/// Longest wait between two attempts of a request parked for a failover,
/// so that it is drained soon after the promotion is seen.
const PARKED_RETRY: Duration = Duration::from_millis(100);

/// What a command may do: where it may go, and whether it may be sent
/// again after its connection failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// It may write: to the master only, and never resent once written.
    Write,
    /// It only reads; from the master.
    Read,
    /// It only reads, and a replica of the slot's master may answer.
    ReplicaRead,
    /// It only reads; from a replica when its upstream's `read_from`
    /// says `replica` (a client that has not said READONLY or READWRITE).
    UpstreamRead,
}

/// A request sent to the cluster whose reply the client still waits for.
pub struct Remote {
    frame: Bytes,
    target: Target,
    dialect: Dialect,
    access: Access,
    /// Replicas this read was sent to; the last of them is `sent_to` while
    /// `on_replica`.
    replicas_tried: u8,
    on_replica: bool,
    /// The node it was last sent to (a redirect with an empty host means
    /// this node's host).
    sent_to: NodeAddr,
    /// When it was sent first: its deadline is `request_timeout` later.
    started: Tick,
    /// Time spent waiting for nodes so far (every earlier attempt's round
    /// trip), in microseconds: with the small fields above it fills one
    /// word, so that a request moves as a small value on its common path.
    backend_us: u32,
    /// The reply's slot; [`Remote::poll_done`] puts back a reply that must
    /// go through [`resolve`] (a redirect, an error).
    rx: ReplyRx,
}

/// How a request fares on its way.
pub enum Sent {
    Remote(Remote),
    /// No node to send it to: `reply` is the error to answer; `frame` is
    /// the request, given back.
    Refused {
        reply: Bytes,
        frame: Bytes,
    },
}

// === impl Access ===

impl Access {
    /// `Read` for a read-only command, else `Write`.
    pub fn of(readonly: bool) -> Access {
        if readonly {
            Access::Read
        } else {
            Access::Write
        }
    }

    /// Whether the command only reads (so it may be resent).
    pub fn reads(self) -> bool {
        self != Access::Write
    }
}

// === impl Remote ===

impl Remote {
    /// The request.
    pub fn frame(&self) -> &Bytes {
        &self.frame
    }

    /// Polls for the reply without following anything: `Some` when the
    /// reply is the client's as it is (no error to look at), `None` when
    /// it must go through [`resolve`] (a redirect, a retry, a failure),
    /// `Pending` until it arrives.
    pub fn poll_done(&mut self, cx: &mut Context<'_>) -> Poll<Option<Done>> {
        match std::task::ready!(Pin::new(&mut self.rx).poll(cx)) {
            Ok(Ok(delivered)) if is_answer(&delivered) => Poll::Ready(Some(self.done(delivered))),
            other => {
                self.rx.put_back(other.unwrap_or(Err(BackendError::Lost)));
                Poll::Ready(None)
            }
        }
    }

    /// The client's reply from a node's answer that [`is_answer`].
    pub fn done(&self, delivered: Delivered) -> Done {
        // Most requests made one attempt: no earlier wait to add.
        let backend = match self.backend_us {
            0 => delivered.took,
            _ => self.backend() + delivered.took,
        };
        Done::from_nodes(delivered.frame, backend)
    }

    /// Time spent waiting for nodes before the last attempt.
    fn backend(&self) -> Duration {
        Duration::from_micros(u64::from(self.backend_us))
    }

    /// Adds an attempt's round trip to the time spent waiting for nodes.
    fn waited(&mut self, took: Duration) {
        let us = u32::try_from(micros(took)).unwrap_or(u32::MAX);
        self.backend_us = self.backend_us.saturating_add(us);
    }

    /// Offers the reply to `hook` when it arrives, before this request's
    /// task is woken for it (until [`Remote::unhook`]).
    pub fn hook(&self, hook: Weak<dyn Hook<Reply>>) {
        self.rx.hook(hook);
    }

    pub fn unhook(&self) {
        self.rx.unhook();
    }

    /// Counts the request, answered with `done`, in its slot's load (its
    /// upstream's, for a named upstream).
    pub fn count(&self, load: &WorkerLoad, done: &Done) {
        if let Target::Slot(place) = self.target {
            let bytes = self.frame.len().saturating_add(done.reply.len());
            let took = done.backend.unwrap_or_default();
            load.add(place, bytes, took);
            if done.reply.first() == Some(&b'-') {
                load.error(place.upstream);
            }
        }
    }
}

/// Whether a node's answer is the client's reply as it is: no error to
/// look at (a redirect, TRYAGAIN, a replica declining, ...).
pub fn is_answer(delivered: &Delivered) -> bool {
    delivered.frame.first() != Some(&b'-')
}

/// Sends `frame` towards `target` on this worker's connections.
pub fn forward(
    pool: &Pool,
    frame: Bytes,
    target: Target,
    dialect: Dialect,
    access: Access,
) -> Sent {
    forward_from(pool, frame, target, dialect, access, Tick::now())
}

/// [`forward`] for a request whose deadline counts from `start` (when it
/// was read, in this turn): no clock read of its own.
pub fn forward_from(
    pool: &Pool,
    frame: Bytes,
    target: Target,
    dialect: Dialect,
    access: Access,
    start: Tick,
) -> Sent {
    let env = pool.env();
    let map = target.map(env);
    let replica = match (access, &target) {
        (Access::ReplicaRead, Target::Slot(place)) => pick_replica(env, &map, place.slot, None),
        (Access::UpstreamRead, Target::Slot(place))
            if env.shared.read_from_of(place.upstream) == ReadFrom::Replica =>
        {
            pick_replica(env, &map, place.slot, None)
        }
        _ => None,
    };
    let Some(addr) = replica.or_else(|| owner(&map, &target)).cloned() else {
        return Sent::Refused {
            reply: no_owner(&map),
            frame,
        };
    };
    let on_replica = replica.is_some();
    if let Target::Slot(place) = target {
        env.load().prefetch(place);
        if access.reads() {
            let stats = env.stats();
            WorkerStats::bump(if on_replica {
                &stats.reads_replica
            } else {
                &stats.reads_master
            });
        }
    }
    let lane = if on_replica {
        Lane::Replica
    } else {
        Lane::Master
    };
    let rx = send_on(pool, &addr, &frame, dialect, lane, false);
    Sent::Remote(Remote {
        frame,
        target,
        dialect,
        access,
        replicas_tried: u8::from(on_replica),
        on_replica,
        sent_to: addr,
        started: start,
        backend_us: 0,
        rx,
    })
}

/// Waits for the reply of `remote`, following redirections, and returns
/// what the client gets, with the time spent waiting for nodes.
pub async fn resolve(pool: &Pool, mut remote: Remote) -> Done {
    // A plain answer is taken as the session takes one: no deadline timer
    // (the node connection's reply timer fails a silent node's requests).
    if let Some(done) = std::future::poll_fn(|cx| remote.poll_done(cx)).await {
        remote.count(pool.env().load(), &done);
        return done;
    }
    let reply = Box::pin(follow(pool, &mut remote)).await;
    let done = Done::from_nodes(reply, remote.backend());
    remote.count(pool.env().load(), &done);
    done
}

/// Resolves every request of a command split over several nodes; its
/// backend time is the longest of theirs (they run at once).
pub async fn resolve_all(
    pool: &Pool,
    sent: impl IntoIterator<Item = Sent, IntoIter: ExactSizeIterator>,
) -> (Vec<Bytes>, Duration) {
    let sent = sent.into_iter();
    let mut replies = Vec::with_capacity(sent.len());
    let mut backend = Duration::ZERO;
    for s in sent {
        replies.push(match s {
            Sent::Remote(remote) => {
                let done = resolve(pool, remote).await;
                backend = backend.max(done.backend.unwrap_or_default());
                done.reply
            }
            Sent::Refused { reply, .. } => reply,
        });
    }
    (replies, backend)
}

async fn follow(pool: &Pool, remote: &mut Remote) -> Bytes {
    let env = pool.env();
    let mut retry = Retry::new(env, remote.started, remote.target.upstream());
    // If the deadline passes while a retry waits for its reply: what the
    // cluster said last (a busy machine may not answer the last try in time).
    let mut last: Option<Bytes> = None;
    loop {
        // (A reply put back by `poll_done` is in the slot already.)
        let reply = match crate::time::timeout_at(retry.deadline().into(), &mut remote.rx).await {
            Ok(reply) => reply.unwrap_or(Err(BackendError::Lost)),
            // Still queued or written: its outcome is unknown.
            Err(_) => {
                return last.unwrap_or_else(|| give_up(env, remote, BackendError::TimedOut));
            }
        };
        let reply = if remote.on_replica {
            match declined_by_replica(pool, remote, reply, &retry).await {
                Ok(reply) => reply,
                Err(Some(refusal)) => return refusal,
                Err(None) => continue,
            }
        } else {
            reply
        };
        let frame = match reply {
            Ok(delivered) => {
                remote.waited(delivered.took);
                delivered.frame
            }
            Err(error) => match retry_after_failure(env, remote, &retry, error) {
                Some(delay) if retry.after_failure(delay).await => {
                    if let Err(refusal) = resend(pool, remote) {
                        return refusal;
                    }
                    continue;
                }
                _ => return give_up(env, remote, error),
            },
        };
        if classify(&frame) == ReplyClass::Moved {
            pool.moved();
        }
        match retry.after_reply(env, &frame, &remote.sent_to).await {
            Next::Reply => return frame,
            Next::Answer(reply) => return reply,
            Next::Redirect { addr, asking } => {
                // What its client sent after it may have gone ahead.
                env.note_resends();
                if retry.attempt() > env.shared.policy.free_redirects {
                    last = Some(still_moving(env, &addr, remote.target.upstream()));
                }
                remote.rx = send(pool, &addr, &remote.frame, remote.dialect, asking);
                remote.sent_to = addr;
            }
            Next::Again => {
                env.note_resends();
                last = Some(frame);
                if let Err(refusal) = resend(pool, remote) {
                    return refusal;
                }
            }
        }
    }
}

/// A replica's reply to a read: given back when it is the client's answer;
/// otherwise (the replica failed, or declined with a redirect, `LOADING`,
/// ...) the read is sent to another replica once, else to the master, and
/// `Err(None)` says to wait for that. `Err(Some)` is the client's reply
/// when the deadline leaves no time for it.
async fn declined_by_replica(
    pool: &Pool,
    remote: &mut Remote,
    reply: Reply,
    retry: &Retry,
) -> Result<Reply, Option<Bytes>> {
    let declined = match &reply {
        Ok(delivered) => replica_declined(&delivered.frame),
        Err(_) => true,
    };
    if !declined {
        return Ok(reply);
    }
    let env = pool.env();
    if !retry.wait(Duration::ZERO).await {
        return Err(Some(match reply {
            Ok(delivered) => delivered.frame,
            Err(error) => give_up(env, remote, error),
        }));
    }
    if let Ok(delivered) = &reply {
        remote.waited(delivered.took);
        if matches!(
            classify(&delivered.frame),
            ReplyClass::Moved | ReplyClass::Ask
        ) {
            // The replica no longer follows the slot's master.
            env.shared.request_refresh_of(remote.target.upstream());
        }
    }
    WorkerStats::bump(&env.stats().replica_fallbacks);
    let map = remote.target.map(env);
    let another = match remote.target {
        Target::Slot(place) if remote.replicas_tried < 2 => {
            pick_replica(env, &map, place.slot, Some(&remote.sent_to))
        }
        _ => None,
    };
    if let Some(addr) = another {
        remote.replicas_tried += 1;
        remote.rx = send_on(
            pool,
            addr,
            &remote.frame,
            remote.dialect,
            Lane::Replica,
            false,
        );
        remote.sent_to = addr.clone();
        return Err(None);
    }
    remote.on_replica = false;
    resend(pool, remote).map_err(Some)?;
    Err(None)
}

/// How long to wait before resending a request that got no reply, or
/// `None` if it must not be resent.
fn retry_after_failure(
    env: &Env,
    remote: &Remote,
    retry: &Retry,
    error: BackendError,
) -> Option<Duration> {
    match error {
        // A write whose outcome is unknown is never resent behind the
        // client's back.
        BackendError::Lost | BackendError::TimedOut if !remote.access.reads() => None,
        // The wait for a place already took the request's deadline.
        BackendError::Crowded | BackendError::NoDescriptor | BackendError::NoDatabase => None,
        // Sent again once the node's connect back-off is over, not after a
        // fixed wait: a pipelining client's requests that a lost connection
        // never wrote are sent again one by one (only the head of its queue
        // is followed), and a wait each would take a long pipeline past its
        // deadline. After two attempts the fixed wait is a floor, so a
        // connection that keeps failing is not retried in a tight loop.
        BackendError::Lost | BackendError::TimedOut | BackendError::NotSent => {
            let map = remote.target.map(env);
            let left = owner(&map, &remote.target)
                .and_then(|addr| env.backoff_left(addr))
                .unwrap_or_default();
            Some(if retry.attempt() < 2 {
                left
            } else {
                left.max(retry.failure_delay())
            })
        }
        BackendError::Unreachable => {
            let map = remote.target.map(env);
            if !can_take_over(&map, &remote.target, &remote.sent_to) {
                return None;
            }
            // Parked until a replica is promoted: look at the topology
            // often meanwhile (the refresher coalesces these).
            env.shared.request_refresh_of(remote.target.upstream());
            Some(PARKED_RETRY.min(Duration::from_millis(10u64 << retry.attempt().min(4))))
        }
    }
}

/// The reply to a request given up after `error`.
fn give_up(env: &Env, remote: &Remote, error: BackendError) -> Bytes {
    WorkerStats::bump(&env.stats().backend_errors);
    let node = &remote.sent_to;
    // The node's upstream's: its connection's wait, also for a request
    // sent to every master (whose own upstream is the default one).
    let upstream = env.shared.upstream_number(node);
    let timeout = env.shared.request_timeout_of(upstream);
    let ms = timeout.as_millis();
    let setting = env.shared.request_timeout_setting(upstream);
    let outcome = if remote.access.reads() {
        ""
    } else {
        "; the command may or may not have been applied"
    };
    error_reply(&match error {
        BackendError::NotSent => format!(
            "CLUSTERDOWN orthrus: node {node} is unreachable and no other node took over its slots within {ms} ms"
        ),
        BackendError::Unreachable => format!(
            "CLUSTERDOWN orthrus: node {node} is unreachable and no replica can take over its slots"
        ),
        BackendError::Lost => {
            format!("ERR orthrus: connection to node {node} lost before its reply{outcome}")
        }
        // Every request in flight on a connection fails when the oldest
        // one's wait runs out: a younger one says so rather than claim a
        // wait it did not have.
        BackendError::TimedOut if remote.started.elapsed() < timeout => {
            format!(
                "ERR orthrus: no reply from node {node} to an earlier request within {ms} ms ({setting}), so its connection was given up before this one's reply{outcome}"
            )
        }
        BackendError::TimedOut => {
            format!("ERR orthrus: no reply from node {node} within {ms} ms ({setting}){outcome}")
        }
        BackendError::Crowded => format!(
            "ERR orthrus: all {} connections orthrus may open to node {node} stayed in use for {ms} ms (backend.max_connections_per_node)",
            env.shared.node_quota.per_node()
        ),
        BackendError::NoDescriptor => format!(
            "ERR orthrus: every node connection the open files limit leaves room for stayed in use for {ms} ms (RLIMIT_NOFILE: raise ulimit -n)"
        ),
        BackendError::NoDatabase => format!(
            "ERR DB index is out of range: node {node} refused to select database {}",
            remote.dialect.db
        ),
    })
}

/// Routes `remote` again with the current slot map and sends it.
fn resend(pool: &Pool, remote: &mut Remote) -> Result<(), Bytes> {
    let map = remote.target.map(pool.env());
    let addr = owner(&map, &remote.target).ok_or_else(|| no_owner(&map))?;
    remote.rx = send(pool, addr, &remote.frame, remote.dialect, false);
    remote.sent_to = addr.clone();
    Ok(())
}

fn send(pool: &Pool, addr: &NodeAddr, frame: &Bytes, dialect: Dialect, asking: bool) -> ReplyRx {
    send_on(pool, addr, frame, dialect, Lane::Master, asking)
}

/// Queues `frame` on a shared connection to `addr` of `lane`.
fn send_on(
    pool: &Pool,
    addr: &NodeAddr,
    frame: &Bytes,
    dialect: Dialect,
    lane: Lane,
    asking: bool,
) -> ReplyRx {
    send_frames_on(pool, addr, frame, dialect, lane, asking, 1)
}

/// Queues `frame` on a shared connection to `addr` (as the slot's master);
/// its `frames` replies come back together.
pub fn send_frames(
    pool: &Pool,
    addr: &NodeAddr,
    frame: &Bytes,
    dialect: Dialect,
    asking: bool,
    frames: usize,
) -> ReplyRx {
    send_frames_on(pool, addr, frame, dialect, Lane::Master, asking, frames)
}

fn send_frames_on(
    pool: &Pool,
    addr: &NodeAddr,
    frame: &Bytes,
    dialect: Dialect,
    lane: Lane,
    asking: bool,
    frames: usize,
) -> ReplyRx {
    let (tx, rx) = super::slot::slot();
    let job = Job {
        frame,
        asking,
        frames,
        reply: tx,
    };
    pool.send(addr, dialect, lane, job);
    rx
}
