//! Sending a request to the node that should answer it, and following the
//! cluster's redirections until there is a reply for the client.
//!
//! The decision what to do with a reply is the pure
//! [`orthrus_cluster::decide`]; this module carries it out: patch the slot
//! map on MOVED, send `ASKING` with the command on ASK, wait and resend on
//! TRYAGAIN and CLUSTERDOWN, and resend requests that never reached a node.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use orthrus_cluster::{Action, NodeAddr, Slot, SlotMap, decide};
use orthrus_resp::{Protocol, encode};
use tokio::sync::oneshot;

use super::conn::{BackendError, Job, Reply};
use super::pool::Pool;
use super::{Done, Env};
use crate::observe::stats::WorkerStats;

/// Where a request goes.
#[derive(Clone, Debug)]
pub enum Target {
    Slot(Slot),
    /// Any master (key-less commands).
    Any,
    /// This node (fan-out, SCAN).
    Node(NodeAddr),
}

/// A request sent to the cluster whose reply the client still waits for.
pub struct Remote {
    frame: Bytes,
    target: Target,
    proto: Protocol,
    readonly: bool,
    /// The node it was last sent to (a redirect with an empty host means
    /// this node's host).
    sent_to: NodeAddr,
    /// Redirections and retries taken so far.
    attempt: u32,
    started: Instant,
    /// Time spent waiting for nodes so far (every attempt's round trip).
    backend: Duration,
    rx: oneshot::Receiver<Reply>,
    /// The reply, when it was taken early by [`Remote::is_ready`].
    early: Option<Reply>,
}

/// How a request fares on its way.
pub enum Sent {
    Remote(Remote),
    /// No node to send it to: this error is the reply.
    Refused(Bytes),
}

// === impl Remote ===

impl Remote {
    /// Polls for the reply without following anything: `Some` when the
    /// reply is the client's as it is (no error to look at), `None` when
    /// it must go through [`resolve`] (a redirect, a retry, a failure),
    /// `Pending` until it arrives.
    pub fn poll_done(&mut self, cx: &mut Context<'_>) -> Poll<Option<Done>> {
        if self.early.is_none() {
            let reply = std::task::ready!(Pin::new(&mut self.rx).poll(cx));
            self.early = Some(reply.unwrap_or(Err(BackendError::Lost)));
        }
        match self.early.take() {
            Some(Ok(delivered)) if delivered.frame.first() != Some(&b'-') => Poll::Ready(Some(
                Done::from_nodes(delivered.frame, self.backend + delivered.took),
            )),
            other => {
                self.early = other;
                Poll::Ready(None)
            }
        }
    }
}

/// Sends `frame` towards `target` on this worker's connections.
pub fn forward(pool: &Pool, frame: Bytes, target: Target, proto: Protocol, readonly: bool) -> Sent {
    let map = pool.env().shared.slots.load();
    let Some(addr) = owner(&map, &target).cloned() else {
        return Sent::Refused(no_owner(&map));
    };
    let rx = send(pool, &addr, &frame, proto, false);
    Sent::Remote(Remote {
        frame,
        target,
        proto,
        readonly,
        sent_to: addr,
        attempt: 0,
        started: Instant::now(),
        backend: Duration::ZERO,
        rx,
        early: None,
    })
}

/// Waits for the reply of `remote`, following redirections, and returns
/// what the client gets, with the time spent waiting for nodes.
pub async fn resolve(pool: &Pool, mut remote: Remote) -> Done {
    let reply = follow(pool, &mut remote).await;
    Done::from_nodes(reply, remote.backend)
}

/// Resolves every request of a command split over several nodes; its
/// backend time is the longest of theirs (they run at once).
pub async fn resolve_all(pool: &Pool, sent: Vec<Sent>) -> (Vec<Bytes>, Duration) {
    let mut replies = Vec::with_capacity(sent.len());
    let mut backend = Duration::ZERO;
    for s in sent {
        replies.push(match s {
            Sent::Remote(remote) => {
                let done = resolve(pool, remote).await;
                backend = backend.max(done.backend.unwrap_or_default());
                done.reply
            }
            Sent::Refused(reply) => reply,
        });
    }
    (replies, backend)
}

async fn follow(pool: &Pool, remote: &mut Remote) -> Bytes {
    let stats = pool.env().stats();
    let policy = &pool.env().shared.policy;
    loop {
        let reply = match remote.early.take() {
            Some(reply) => reply,
            None => (&mut remote.rx).await.unwrap_or(Err(BackendError::Lost)),
        };
        let frame = match reply {
            Ok(delivered) => {
                remote.backend += delivered.took;
                delivered.frame
            }
            Err(error) => match retry_after_failure(pool.env(), remote, error) {
                Some(delay) => {
                    tokio::time::sleep(delay).await;
                    remote.attempt += 1;
                    if let Err(refusal) = resend(pool, remote) {
                        return refusal;
                    }
                    continue;
                }
                None => {
                    WorkerStats::bump(&stats.backend_errors);
                    return error_reply(failure_message(error));
                }
            },
        };
        let action = decide(&frame, remote.attempt, policy).with_origin(&remote.sent_to);
        note(pool.env(), &action);
        match action {
            Action::Done => return frame,
            Action::Moved { addr, .. } => {
                remote.attempt += 1;
                remote.rx = send(pool, &addr, &remote.frame, remote.proto, false);
                remote.sent_to = addr;
            }
            Action::Ask { addr } => {
                remote.attempt += 1;
                remote.rx = send(pool, &addr, &remote.frame, remote.proto, true);
                remote.sent_to = addr;
            }
            Action::RetryAfter { delay, .. } => {
                tokio::time::sleep(delay).await;
                remote.attempt += 1;
                if let Err(refusal) = resend(pool, remote) {
                    return refusal;
                }
            }
            Action::Fail(reason) => return error_reply(reason.message()),
        }
    }
}

/// Does what every redirect decision implies whoever follows it (shared
/// requests, blocking commands, transactions): count it, point the slot at
/// its new owner after MOVED, ask for a refresh when the topology changed.
pub fn note(env: &Env, action: &Action) {
    let stats = env.stats();
    match action {
        Action::Done => {}
        Action::Moved { slot, addr } => {
            WorkerStats::bump(&stats.moved);
            env.shared.patch_slot(*slot, addr);
            env.shared.request_refresh();
        }
        Action::Ask { .. } => WorkerStats::bump(&stats.ask),
        Action::RetryAfter { refresh: true, .. } => {
            WorkerStats::bump(&stats.clusterdown);
            env.shared.request_refresh();
        }
        Action::RetryAfter { refresh: false, .. } => WorkerStats::bump(&stats.tryagain),
        Action::Fail(_) => WorkerStats::bump(&stats.backend_errors),
    }
}

/// How long to wait before resending a request that got no reply, or
/// `None` if it must not be resent.
fn retry_after_failure(env: &Env, remote: &Remote, error: BackendError) -> Option<Duration> {
    // A write whose outcome is unknown is never resent behind the client's back.
    if error == BackendError::Lost && !remote.readonly {
        return None;
    }
    let deadline = remote.started + env.shared.request_timeout();
    let delay = Duration::from_millis(10u64 << remote.attempt.min(6));
    (Instant::now() + delay < deadline).then_some(delay)
}

/// Routes `remote` again with the current slot map and sends it.
fn resend(pool: &Pool, remote: &mut Remote) -> Result<(), Bytes> {
    let map = pool.env().shared.slots.load();
    let addr = owner(&map, &remote.target).ok_or_else(|| no_owner(&map))?;
    remote.rx = send(pool, addr, &remote.frame, remote.proto, false);
    remote.sent_to = addr.clone();
    Ok(())
}

fn send(
    pool: &Pool,
    addr: &NodeAddr,
    frame: &Bytes,
    proto: Protocol,
    asking: bool,
) -> oneshot::Receiver<Reply> {
    send_frames(pool, addr, frame, proto, asking, 1)
}

/// Queues `frame` on a shared connection to `addr`; its `frames` replies
/// come back together.
pub fn send_frames(
    pool: &Pool,
    addr: &NodeAddr,
    frame: &Bytes,
    proto: Protocol,
    asking: bool,
    frames: usize,
) -> oneshot::Receiver<Reply> {
    let (tx, rx) = oneshot::channel();
    let job = Job {
        frame: frame.clone(),
        asking,
        frames,
        reply: tx,
    };
    pool.send(addr, proto, job);
    rx
}

pub fn owner<'a>(map: &'a SlotMap, target: &'a Target) -> Option<&'a NodeAddr> {
    match target {
        Target::Slot(slot) => map.master(*slot),
        Target::Any => any_master(map),
        Target::Node(addr) => Some(addr),
    }
}

/// Spreads key-less commands over the masters without allocating.
fn any_master(map: &SlotMap) -> Option<&NodeAddr> {
    use std::sync::atomic::AtomicU16;
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let start = NEXT.fetch_add(4099, Ordering::Relaxed);
    (0..16u16)
        .filter_map(|i| {
            Slot::new(start.wrapping_add(i.wrapping_mul(1024)) % orthrus_cluster::SLOT_COUNT)
        })
        .find_map(|slot| map.master(slot))
}

pub fn no_owner(map: &SlotMap) -> Bytes {
    if map.covered_slots() == 0 {
        error_reply(
            "CLUSTERDOWN orthrus: the cluster topology is not known yet (no seed node has answered)",
        )
    } else {
        error_reply("CLUSTERDOWN Hash slot not served")
    }
}

fn failure_message(error: BackendError) -> &'static str {
    match error {
        BackendError::NotSent => "CLUSTERDOWN orthrus: the node for this key is unreachable",
        BackendError::Lost => {
            "ERR orthrus: connection to the node lost before its reply; the command may or may not have been applied"
        }
    }
}

/// A RESP error reply (`msg` starts with its code, e.g. `ERR ...`).
pub fn error_reply(msg: &str) -> Bytes {
    let mut out = BytesMut::with_capacity(msg.len() + 3);
    encode::error(&mut out, msg.as_bytes());
    out.freeze()
}
