//! Pub/sub: SUBSCRIBE/PSUBSCRIBE (on one master: the cluster broadcasts
//! PUBLISH to every node; patterns that may match keyspace notifications
//! on every master, as each node sends its own) and SSUBSCRIBE (on each
//! master owning subscribed shard channels).
//!
//! A client has at most one connection to each master for all of these
//! (its links, RESP3 to the node whatever the client speaks: RESP3 lets one
//! connection hold channels, patterns and shard channels and carry
//! tracking invalidations beside them; a RESP2 client gets each push
//! written as RESP2 would). A client tracking keys in BCAST mode has its
//! tracking on the same links ([`Links`]).
//!
//! Everything a subscription connection receives — confirmations,
//! messages, PING replies in RESP2 subscriber mode — goes to the client as
//! a push, in the order the node sent it. The client's (un)subscribe
//! commands are written to those connections when they reach the head of
//! the client's reply queue, so their confirmations follow every earlier
//! reply. orthrus keeps what each connection is subscribed to: when a
//! connection fails, or a node drops shard channels because their slot
//! moved (`sunsubscribe` the client did not ask for), it subscribes again
//! where they live now, and swallows the confirmations of those
//! re-subscriptions. A client whose pushes pile up past
//! `client.max_push_bytes` is disconnected.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet, VecDeque};
use std::rc::{Rc, Weak};

use bytes::{Bytes, BytesMut};
use orthrus_cluster::{NodeAddr, Slot};
use orthrus_resp::{Protocol, Request, encode};
use tokio::sync::{mpsc, oneshot};

use crate::client::{Pending, PushSink};
use crate::node::Done;
use crate::node::answer::error_reply;
use crate::node::conn::Hooks;
use crate::route::prefix::Place;
use crate::worker::WorkerCtx;

mod link;
mod tracked;

pub use tracked::Links;

/// SUBSCRIBE/PSUBSCRIBE go to the master of this slot, and so does
/// PUBLISH: the cluster broadcasts messages to every node, but PUBLISH
/// counts only the receivers on the node that ran it.
const CLASSIC_SLOT: Slot = match Slot::new(0) {
    Some(s) => s,
    None => unreachable!(),
};

/// Where PUBLISH is sent.
pub fn publish_target() -> crate::node::forward::Target {
    crate::node::forward::Target::Slot(Place::of(CLASSIC_SLOT))
}

/// A client's subscriptions. Shared with the connection tasks.
pub struct PubSub {
    inner: Rc<RefCell<Inner>>,
    /// Counted in `pubsub_clients` (from its first subscription on; a
    /// client that only tracks keys has links but is not counted).
    counted: Cell<bool>,
}

struct Inner {
    ctx: Rc<WorkerCtx>,
    proto: Protocol,
    push: PushSink,
    classic: Option<SubConn>,
    shards: HashMap<NodeAddr, SubConn>,
    /// Every other master's connection for keyspace notifications.
    notify: HashMap<NodeAddr, SubConn>,
    /// The connection to each master the client uses.
    links: HashMap<NodeAddr, Link>,
    /// BCAST tracking on the links, when on.
    tracker: Option<Tracker>,
    /// Shard channels to subscribe again without telling the client.
    resubscribing: HashSet<Bytes>,
    /// Shard channels the client asked to leave.
    leaving: HashSet<Bytes>,
    /// The client's pub/sub command in progress (one at a time: each is
    /// deferred) and how many replies of the nodes it still waits for.
    waiter: Option<(usize, oneshot::Sender<()>)>,
}

/// A client's connection to one master.
struct Link {
    tx: mpsc::UnboundedSender<Bytes>,
    /// Who gets the next frames that are not pushes, oldest first; with
    /// none waiting, such a frame is a subscription command's error.
    replies: VecDeque<ReplyTo>,
}

/// Who a link's next reply that is not a push is for.
enum ReplyTo {
    /// A client's PING in RESP2 subscriber mode.
    Ping,
    /// A CLIENT TRACKING command (its reply sent on, if anyone waits).
    Tracking(Option<oneshot::Sender<Bytes>>),
}

/// Tracking on the links: who hears the invalidations, and the command
/// that turns it on on a new link.
struct Tracker {
    hooks: Weak<dyn Hooks>,
    on: Bytes,
}

/// What the client holds of one kind on one link: its command queue (the
/// link's) and what it holds.
struct SubConn {
    tx: mpsc::UnboundedSender<Bytes>,
    addr: NodeAddr,
    channels: HashSet<Bytes>,
    patterns: HashSet<Bytes>,
    count: i64,
    /// SSUBSCRIBE commands sent and not yet confirmed, oldest first.
    unconfirmed: Vec<Vec<Bytes>>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Classic,
    Shard,
    /// The same (P)SUBSCRIBEs on another master, for its keyspace
    /// notifications only (each node sends its own; PUBLISH is broadcast).
    Notify,
}

// === impl PubSub ===

impl PubSub {
    pub fn new(ctx: Rc<WorkerCtx>, proto: Protocol, push: PushSink) -> PubSub {
        PubSub {
            counted: Cell::new(false),
            inner: Rc::new(RefCell::new(Inner {
                ctx,
                proto,
                push,
                classic: None,
                shards: HashMap::new(),
                notify: HashMap::new(),
                links: HashMap::new(),
                tracker: None,
                resubscribing: HashSet::new(),
                leaving: HashSet::new(),
                waiter: None,
            })),
        }
    }

    /// Whether the client is in subscriber mode (RESP2 then allows only
    /// the pub/sub commands, PING, QUIT and RESET).
    pub fn active(&self) -> bool {
        let inner = self.inner.borrow();
        inner
            .classic
            .as_ref()
            .is_some_and(|c| c.count > 0 || !c.channels.is_empty() || !c.patterns.is_empty())
            || inner
                .shards
                .values()
                .any(|c| c.count > 0 || !c.channels.is_empty() || !c.unconfirmed.is_empty())
    }

    /// The client switched protocols (HELLO) while subscribed to nothing:
    /// its pushes change form (its links speak RESP3 whatever it speaks).
    pub fn set_proto(&self, proto: Protocol) {
        self.inner.borrow_mut().proto = proto;
    }

    /// Runs a pub/sub command (`name` in lower case).
    pub fn command(&self, name: &str, req: &Request) -> Pending {
        if !self.counted.replace(true) {
            self.inner
                .borrow()
                .ctx
                .stats()
                .pubsub_clients
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        let frame = req.frame().clone();
        let args: Vec<Bytes> = (1..req.arg_count())
            .filter_map(|i| req.arg_bytes(i))
            .collect();
        let inner = self.inner.clone();
        let name = name.to_owned();
        Pending::deferred(Box::pin(async move {
            // Runs when every earlier reply is written: confirmations follow
            // them. It ends when the node has confirmed, so the client's next
            // command sees the subscriber mode this one leads to.
            let reply = Inner::send(&inner, &name, frame, args);
            Inner::settle(&inner).await;
            Done::unmeasured(reply)
        }))
    }

    /// PING in RESP2 subscriber mode is answered by a subscription
    /// connection that is in subscriber mode itself.
    pub fn ping(&self, req: &Request) -> Pending {
        let inner = self.inner.clone();
        let frame = req.frame().clone();
        Pending::deferred(Box::pin(async move {
            let sent = {
                let i = inner.borrow();
                let subscribed =
                    |c: &&SubConn| c.count > 0 || !c.channels.is_empty() || !c.patterns.is_empty();
                let conn = i
                    .classic
                    .as_ref()
                    .filter(subscribed)
                    .or_else(|| i.shards.values().find(subscribed));
                conn.map(|c| (c.addr.clone(), c.tx.clone()))
            };
            let sent = sent.map(|(addr, tx)| {
                if let Some(link) = inner.borrow_mut().links.get_mut(&addr) {
                    link.replies.push_back(ReplyTo::Ping);
                }
                tx.send(frame)
            });
            Done::unmeasured(match sent {
                Some(Ok(())) => {
                    inner.borrow_mut().expect(1);
                    Inner::settle(&inner).await;
                    Bytes::new()
                }
                _ => Bytes::from_static(b"*2\r\n$4\r\npong\r\n$0\r\n\r\n"),
            })
        }))
    }
}

impl Drop for PubSub {
    fn drop(&mut self) {
        if !self.counted.get() {
            return;
        }
        let inner = self.inner.borrow();
        inner
            .ctx
            .stats()
            .pubsub_clients
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

// === impl Inner ===

impl Inner {
    /// The command being sent will be answered by `n` frames.
    fn expect(&mut self, n: usize) {
        let (tx, _) = oneshot::channel();
        self.waiter = Some((n.max(1), tx));
    }

    /// Waits (bounded) until the nodes answered the command just sent.
    async fn settle(this: &Rc<RefCell<Inner>>) {
        let (tx, rx) = oneshot::channel();
        let timeout = {
            let mut inner = this.borrow_mut();
            match inner.waiter.as_mut() {
                Some((_, waiting)) => *waiting = tx,
                None => return,
            }
            inner.ctx.shared.request_timeout()
        };
        let _ = crate::time::timeout(timeout, rx).await;
        this.borrow_mut().waiter = None;
    }

    /// A node answered the client's command (a confirmation, a pong, an error).
    fn answered(&mut self) {
        if let Some((left, _)) = self.waiter.as_mut() {
            *left = left.saturating_sub(1);
            if *left == 0 {
                if let Some((_, tx)) = self.waiter.take() {
                    let _ = tx.send(());
                }
            }
        }
    }

    /// Sends a client's (un)subscribe command; returns the immediate reply
    /// (empty when the node's confirmations will carry it).
    fn send(this: &Rc<RefCell<Inner>>, name: &str, frame: Bytes, args: Vec<Bytes>) -> Bytes {
        match name {
            "subscribe" | "psubscribe" => match Inner::conn(this, Kind::Classic, None) {
                Ok(tx) => {
                    this.borrow_mut().expect(args.len());
                    if wants_notifications(name, &args) {
                        Inner::notify_all(this, &frame);
                    }
                    queue(&tx, frame)
                }
                Err(e) => e,
            },
            "unsubscribe" | "punsubscribe" => {
                let mut inner = this.borrow_mut();
                for c in inner.notify.values() {
                    let _ = c.tx.send(frame.clone());
                }
                let held = inner.classic.as_ref().map(|c| {
                    let names = if name == "unsubscribe" {
                        &c.channels
                    } else {
                        &c.patterns
                    };
                    (c.tx.clone(), names.len())
                });
                match held {
                    Some((tx, held)) => {
                        inner.expect(if args.is_empty() { held } else { args.len() });
                        queue(&tx, frame)
                    }
                    None => inner.empty_unsubscribe(name, &args),
                }
            }
            "ssubscribe" => {
                let Some(slot) = one_slot(&args) else {
                    return error_reply("CROSSSLOT Keys in request don't hash to the same slot");
                };
                let map = this.borrow().ctx.slots();
                let Some(addr) = map.master(slot).cloned() else {
                    return crate::node::answer::no_owner(&map);
                };
                match Inner::conn(this, Kind::Shard, Some(&addr)) {
                    Ok(tx) => {
                        let mut inner = this.borrow_mut();
                        inner.expect(args.len());
                        if let Some(c) = inner.shards.get_mut(&addr) {
                            c.unconfirmed.push(args);
                        }
                        queue(&tx, frame)
                    }
                    Err(e) => e,
                }
            }
            "sunsubscribe" => {
                let mut inner = this.borrow_mut();
                // Without arguments, every shard channel held is left: the
                // node's confirmations name them, and each must read as
                // asked for, not as a channel the node dropped.
                let leaving: Vec<Bytes> = match args.is_empty() {
                    true => inner
                        .shards
                        .values()
                        .flat_map(|c| c.channels.iter().cloned())
                        .collect(),
                    false => args.clone(),
                };
                inner.leaving.extend(leaving);
                let targets: Vec<mpsc::UnboundedSender<Bytes>> = if args.is_empty() {
                    inner
                        .shards
                        .values()
                        .filter(|c| !c.channels.is_empty())
                        .map(|c| c.tx.clone())
                        .collect()
                } else {
                    inner
                        .shards
                        .values()
                        .filter(|c| args.iter().any(|a| c.channels.contains(a)))
                        .map(|c| c.tx.clone())
                        .collect()
                };
                if targets.is_empty() {
                    return inner.empty_unsubscribe(name, &args);
                }
                for tx in targets {
                    let _ = tx.send(frame.clone());
                }
                Bytes::new()
            }
            _ => error_reply("ERR orthrus: not a pub/sub command"),
        }
    }

    /// The command queue of the connection of `kind` (to `addr` for shard
    /// channels), started if there is none.
    fn conn(
        this: &Rc<RefCell<Inner>>,
        kind: Kind,
        addr: Option<&NodeAddr>,
    ) -> Result<mpsc::UnboundedSender<Bytes>, Bytes> {
        let inner = this.borrow_mut();
        let existing = match (kind, addr) {
            (Kind::Classic, _) => inner.classic.as_ref().map(|c| c.tx.clone()),
            (Kind::Shard, Some(a)) => inner.shards.get(a).map(|c| c.tx.clone()),
            (Kind::Notify, Some(a)) => inner.notify.get(a).map(|c| c.tx.clone()),
            (Kind::Shard | Kind::Notify, None) => None,
        };
        if let Some(tx) = existing {
            return Ok(tx);
        }
        let addr = match addr {
            Some(a) => a.clone(),
            None => {
                let map = inner.ctx.slots();
                map.master(CLASSIC_SLOT)
                    .cloned()
                    .ok_or_else(|| crate::node::answer::no_owner(&map))?
            }
        };
        drop(inner);
        let tx = Inner::link(this, &addr);
        let mut inner = this.borrow_mut();
        let conn = SubConn {
            tx: tx.clone(),
            addr: addr.clone(),
            channels: HashSet::new(),
            patterns: HashSet::new(),
            count: 0,
            unconfirmed: Vec::new(),
        };
        match kind {
            Kind::Classic => inner.classic = Some(conn),
            Kind::Shard => {
                inner.shards.insert(addr.clone(), conn);
            }
            Kind::Notify => {
                inner.notify.insert(addr, conn);
            }
        }
        Ok(tx)
    }

    /// Sends a (P)SUBSCRIBE that may match keyspace notifications to every
    /// master but the one the classic connection is on.
    fn notify_all(this: &Rc<RefCell<Inner>>, frame: &Bytes) {
        let map = this.borrow().ctx.slots();
        let classic = map.master(CLASSIC_SLOT).cloned();
        for addr in map.masters() {
            if Some(&addr) == classic.as_ref() {
                continue;
            }
            if let Ok(tx) = Inner::conn(this, Kind::Notify, Some(&addr)) {
                let _ = tx.send(frame.clone());
            }
        }
    }

    /// What Redis answers to an UNSUBSCRIBE with nothing subscribed.
    fn empty_unsubscribe(&self, name: &str, args: &[Bytes]) -> Bytes {
        let mut out = BytesMut::new();
        let channels: Vec<Option<&Bytes>> = if args.is_empty() {
            vec![None]
        } else {
            args.iter().map(Some).collect()
        };
        for ch in channels {
            encode::push_header(&mut out, 3, self.proto);
            encode::bulk(&mut out, name.as_bytes());
            match ch {
                Some(c) => encode::bulk(&mut out, c),
                None => encode::null(&mut out, self.proto),
            }
            encode::integer(&mut out, 0);
        }
        out.freeze()
    }
}

fn queue(tx: &mpsc::UnboundedSender<Bytes>, frame: Bytes) -> Bytes {
    match tx.send(frame) {
        Ok(()) => Bytes::new(),
        Err(_) => error_reply("ERR orthrus: the subscription connection closed; try again"),
    }
}

/// Whether a (P)SUBSCRIBE may match keyspace notification channels
/// (`__keyspace@0__:key`, `__keyevent@0__:event`), which each node sends
/// only to its own subscribers.
fn wants_notifications(name: &str, args: &[Bytes]) -> bool {
    args.iter().any(|a| {
        if name == "psubscribe" {
            matches!(a.first(), Some(b'_' | b'*' | b'?' | b'['))
        } else {
            is_notification(a)
        }
    })
}

fn is_notification(channel: &[u8]) -> bool {
    channel.starts_with(b"__keyspace@") || channel.starts_with(b"__keyevent@")
}

/// The slot all shard channels hash to, if they share one.
fn one_slot(channels: &[Bytes]) -> Option<Slot> {
    let first = Slot::for_key(channels.first()?);
    channels
        .iter()
        .all(|c| Slot::for_key(c) == first)
        .then_some(first)
}
