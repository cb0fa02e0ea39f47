//! A client's link to one master: its task (the client's (un)subscribe
//! and tracking commands out, everything the node sends back to whom it
//! is for), and what happens when it is lost or a node drops shard
//! channels: subscribing again where the channels live now.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::{Rc, Weak};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use orthrus_cluster::{NodeAddr, Redirect};
use orthrus_resp::{Limits, Protocol, Request, Value, encode};
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

use super::{Inner, Kind, Link, ReplyTo, is_notification};
use crate::node::answer::error_reply;
use crate::node::client::Dialect;
use crate::node::conn;
use crate::node::frames::{Frame, FrameReader};
use crate::route::prefix::Place;
use crate::worker::WorkerCtx;

/// A link's connection: RESP3, whose pushes carry the messages; channels
/// are the same in every database.
const PUSHES: Dialect = Dialect {
    proto: Protocol::Resp3,
    db: 0,
};

impl Inner {
    /// The command queue of the client's link to `addr`, opened if there
    /// is none; tracking, when on, is turned on first on a new one.
    pub(super) fn link(this: &Rc<RefCell<Inner>>, addr: &NodeAddr) -> mpsc::UnboundedSender<Bytes> {
        let mut inner = this.borrow_mut();
        if let Some(link) = inner.links.get(addr) {
            return link.tx.clone();
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let mut replies = VecDeque::new();
        if let Some(tracker) = &inner.tracker {
            replies.push_back(ReplyTo::Tracking(None));
            let _ = tx.send(tracker.on.clone());
        }
        inner.links.insert(
            addr.clone(),
            Link {
                tx: tx.clone(),
                replies,
            },
        );
        let ctx = inner.ctx.clone();
        ctx.spawn(run(Rc::downgrade(this), addr.clone(), ctx.clone(), rx));
        tx
    }

    /// A frame from the link to `addr`: to whom it is for.
    fn on_link_frame(this: &Rc<RefCell<Inner>>, addr: &NodeAddr, frame: Bytes, value: &Value) {
        let is_push = frame.first() == Some(&b'>');
        if !is_push {
            let to = this
                .borrow_mut()
                .links
                .get_mut(addr)
                .and_then(|l| l.replies.pop_front());
            match to {
                Some(ReplyTo::Tracking(tx)) => {
                    match tx {
                        Some(tx) => drop(tx.send(frame)),
                        None if value.is_error() => {
                            tracing::warn!(node = %addr, reply = %String::from_utf8_lossy(&frame).trim_end(), "CLIENT TRACKING refused on a link");
                        }
                        None => {}
                    }
                    return;
                }
                Some(ReplyTo::Ping) => {
                    let mut inner = this.borrow_mut();
                    inner.push.push(pong(value));
                    inner.answered();
                    return;
                }
                None => {}
            }
        }
        let parts = value.as_array().unwrap_or_default();
        let what = parts
            .first()
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_ascii_lowercase();
        if what == "invalidate" {
            let hooks = this
                .borrow()
                .tracker
                .as_ref()
                .and_then(|t| t.hooks.upgrade());
            if let Some(hooks) = hooks {
                hooks.push(addr, frame);
            }
            return;
        }
        let kind = {
            let inner = this.borrow();
            let shard_error = value.is_error()
                && inner
                    .shards
                    .get(addr)
                    .is_some_and(|c| !c.unconfirmed.is_empty());
            if shard_error || matches!(what.as_str(), "smessage" | "ssubscribe" | "sunsubscribe") {
                Kind::Shard
            } else if inner.classic.as_ref().is_some_and(|c| &c.addr == addr) {
                Kind::Classic
            } else {
                Kind::Notify
            }
        };
        Inner::on_frame(this, kind, addr, frame, value);
    }

    /// The link to `addr` failed: what it held is subscribed again
    /// elsewhere, and tracking hears of the loss.
    fn on_link_lost(this: &Rc<RefCell<Inner>>, addr: &NodeAddr) {
        let (classic, hooks) = {
            let mut inner = this.borrow_mut();
            inner.links.remove(addr);
            let classic = inner.classic.as_ref().is_some_and(|c| &c.addr == addr);
            let hooks = inner.tracker.as_ref().and_then(|t| t.hooks.upgrade());
            (classic, hooks)
        };
        if classic {
            Inner::on_lost(this, Kind::Classic, addr);
        }
        Inner::on_lost(this, Kind::Shard, addr);
        Inner::on_lost(this, Kind::Notify, addr);
        if let Some(hooks) = hooks {
            hooks.lost(addr);
        }
    }

    /// A frame from a subscription connection: update what it holds, and
    /// pass it on unless it belongs to a re-subscription.
    pub(super) fn on_frame(
        this: &Rc<RefCell<Inner>>,
        kind: Kind,
        addr: &NodeAddr,
        frame: Bytes,
        value: &Value,
    ) {
        let mut inner = this.borrow_mut();
        // The link speaks RESP3: a RESP2 client reads its pushes as arrays.
        let frame = match (inner.proto, frame.first()) {
            (Protocol::Resp2, Some(b'>')) => {
                let mut out = BytesMut::with_capacity(frame.len());
                value.encode_for(&mut out, Protocol::Resp2);
                out.freeze()
            }
            _ => frame,
        };
        let parts = value.as_array().unwrap_or_default();
        let what = parts
            .first()
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_ascii_lowercase();
        if kind == Kind::Notify {
            // Only this node's keyspace notifications: its confirmations
            // are orthrus's business, its PUBLISHed messages came through
            // the classic connection already.
            let channel = match what.as_str() {
                "message" => parts.get(1),
                "pmessage" => parts.get(2),
                _ => None,
            };
            if channel
                .and_then(Value::as_bytes)
                .is_some_and(is_notification)
            {
                inner.push.push(frame);
            }
            return;
        }
        let channel = parts
            .get(1)
            .and_then(Value::as_bytes)
            .map(Bytes::copy_from_slice);
        let count = parts.get(2).and_then(Value::as_int);
        let conn = match kind {
            Kind::Classic => inner.classic.as_mut(),
            Kind::Shard => inner.shards.get_mut(addr),
            Kind::Notify => inner.notify.get_mut(addr),
        };
        let Some(conn) = conn else { return };
        if let Some(n) = count {
            conn.count = n;
        }
        let mut forward = true;
        let mut lost = None;
        let confirmed = channel.clone();
        match (what.as_str(), channel) {
            ("subscribe", Some(ch)) => {
                conn.channels.insert(ch);
            }
            ("psubscribe", Some(ch)) => {
                conn.patterns.insert(ch);
            }
            ("unsubscribe", Some(ch)) => {
                conn.channels.remove(&ch);
            }
            ("punsubscribe", Some(ch)) => {
                conn.patterns.remove(&ch);
            }
            ("ssubscribe", Some(ch)) => {
                if let Some(pos) = conn.unconfirmed.iter().position(|cmd| cmd.contains(&ch)) {
                    if let Some(cmd) = conn.unconfirmed.get_mut(pos) {
                        cmd.retain(|c| c != &ch);
                        if cmd.is_empty() {
                            conn.unconfirmed.remove(pos);
                        }
                    }
                }
                conn.channels.insert(ch.clone());
                forward = !inner.resubscribing.remove(&ch);
            }
            ("sunsubscribe", Some(ch)) => {
                conn.channels.remove(&ch);
                if !inner.leaving.remove(&ch) {
                    // The node dropped it: its slot moved. Follow it.
                    forward = false;
                    lost = Some(vec![ch]);
                }
            }
            // An SSUBSCRIBE refused, most likely MOVED: try again where the slot is.
            _ if matches!(frame.first(), Some(b'-' | b'!'))
                && kind == Kind::Shard
                && !conn.unconfirmed.is_empty() =>
            {
                let channels = conn.unconfirmed.remove(0);
                if let Some(Redirect::Moved { slot, addr: to }) = Redirect::parse(&frame) {
                    inner
                        .ctx
                        .shared
                        .patch_slot(Place::of(slot), &to.or_host_of(addr));
                }
                inner.ctx.shared.request_refresh();
                forward = false;
                lost = Some(channels);
            }
            _ => {}
        }
        // A node counts only the shard channels it holds; the client holds
        // those of every master, and Redis's count is all of them.
        let frame = match (kind, what.as_str(), confirmed) {
            (Kind::Shard, "ssubscribe" | "sunsubscribe", Some(ch)) if forward => {
                let held: usize = inner.shards.values().map(|c| c.channels.len()).sum();
                let mut out = BytesMut::new();
                encode::push_header(&mut out, 3, inner.proto);
                encode::bulk(&mut out, what.as_bytes());
                encode::bulk(&mut out, &ch);
                encode::integer(&mut out, i64::try_from(held).unwrap_or(i64::MAX));
                out.freeze()
            }
            _ => frame,
        };
        if forward {
            let is_error = matches!(frame.first(), Some(b'-' | b'!'));
            let confirms = what.ends_with("subscribe") || what == "pong";
            inner.push.push(frame);
            if confirms || is_error {
                inner.answered();
            }
        }
        drop(inner);
        if let Some(channels) = lost {
            Inner::resubscribe_later(this, channels, false);
        }
    }

    /// Whether the client holds anything on the link to `addr`.
    pub(super) fn holds(&self, addr: &NodeAddr) -> bool {
        self.classic.as_ref().is_some_and(|c| &c.addr == addr)
            || self.shards.contains_key(addr)
            || self.notify.contains_key(addr)
    }

    /// Subscribes `channels` (shard channels) again where their slot is now,
    /// after giving the topology a moment to settle. Unless `tell_client`,
    /// their confirmations are not passed on (the client saw them already).
    pub(super) fn resubscribe_later(
        this: &Rc<RefCell<Inner>>,
        channels: Vec<Bytes>,
        tell_client: bool,
    ) {
        let weak = Rc::downgrade(this);
        let ctx = {
            let mut inner = this.borrow_mut();
            if !tell_client {
                inner.resubscribing.extend(channels.iter().cloned());
            }
            inner.ctx.shared.request_refresh();
            inner.ctx.clone()
        };
        ctx.spawn(async move {
            crate::time::sleep(Duration::from_millis(200)).await;
            let Some(this) = weak.upgrade() else { return };
            for ch in channels {
                let req = Request::from_args(&[&b"SSUBSCRIBE"[..], &ch]);
                let _ = Inner::send(&this, "ssubscribe", req.into_frame(), vec![ch]);
            }
        });
    }

    /// A subscription connection failed: subscribe its channels again on
    /// another connection, without telling the client.
    pub(super) fn on_lost(this: &Rc<RefCell<Inner>>, kind: Kind, addr: &NodeAddr) {
        let conn = {
            let mut inner = this.borrow_mut();
            match kind {
                Kind::Classic => inner.classic.take(),
                Kind::Shard => inner.shards.remove(addr),
                // Not subscribed again: that node's notifications stop.
                Kind::Notify => inner.notify.remove(addr).and(None),
            }
        };
        let Some(conn) = conn else { return };
        match kind {
            Kind::Notify => {}
            Kind::Shard => {
                Inner::resubscribe_later(this, conn.channels.into_iter().collect(), false)
            }
            Kind::Classic => {
                let weak = Rc::downgrade(this);
                let ctx = this.borrow().ctx.clone();
                ctx.spawn(async move {
                    crate::time::sleep(Duration::from_millis(200)).await;
                    let Some(this) = weak.upgrade() else { return };
                    for (cmd, names) in
                        [("SUBSCRIBE", conn.channels), ("PSUBSCRIBE", conn.patterns)]
                    {
                        if names.is_empty() {
                            continue;
                        }
                        let mut args: Vec<&[u8]> = vec![cmd.as_bytes()];
                        args.extend(names.iter().map(|n| &n[..]));
                        let frame = orthrus_resp::encode::command(&args);
                        // The client sees these confirmations again; its
                        // subscription count stays right.
                        let _ = Inner::send(&this, &cmd.to_ascii_lowercase(), frame, Vec::new());
                    }
                });
            }
        }
    }
}

/// A link's task.
pub(super) async fn run(
    inner: Weak<RefCell<Inner>>,
    addr: NodeAddr,
    ctx: Rc<WorkerCtx>,
    mut rx: mpsc::UnboundedReceiver<Bytes>,
) {
    let stream = match conn::connect(&addr, PUSHES, &ctx.shared).await {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(node = %addr, error = %e, "cannot open a subscription connection");
            if let Some(this) = inner.upgrade() {
                if this.borrow().holds(&addr) {
                    this.borrow().push.push(error_reply(&format!(
                        "ERR orthrus: cannot subscribe on {addr}: {e}"
                    )));
                }
                Inner::on_link_lost(&this, &addr);
            }
            return;
        }
    };
    let (rd, mut wr) = stream.into_split();
    let mut frames = FrameReader::new(rd, usize::MAX);
    let limits = Limits::for_replies();
    let failed = loop {
        tokio::select! {
            cmd = rx.recv() => match cmd {
                Some(frame) => {
                    if wr.write_all(&frame).await.is_err() || wr.flush().await.is_err() {
                        break true;
                    }
                }
                None => break false, // the client is gone, or closed the link
            },
            // A malformed frame is a lost connection: subscribed again
            // elsewhere, nothing piling up unread.
            read = frames.next(1) => {
                let Ok(Frame::Reply(frame) | Frame::Push(frame)) = read else { break true };
                let Some(this) = inner.upgrade() else { break false };
                let value = Value::parse(&frame, &limits).ok().flatten().map(|(v, _)| v);
                Inner::on_link_frame(&this, &addr, frame, &value.unwrap_or(Value::Null));
            }
        }
    };
    if failed {
        tracing::info!(node = %addr, "subscription connection lost; subscribing again");
        ctx.shared.request_refresh();
        if let Some(this) = inner.upgrade() {
            Inner::on_link_lost(&this, &addr);
        }
    }
}

/// What RESP2's subscriber mode answers to PING, from the node's RESP3
/// answer (`+PONG`, or the argument given).
fn pong(value: &Value) -> Bytes {
    let arg = match value {
        Value::Bulk(b) => &b[..],
        _ => b"",
    };
    let mut out = BytesMut::new();
    encode::array_header(&mut out, 2);
    encode::bulk(&mut out, b"pong");
    encode::bulk(&mut out, arg);
    out.freeze()
}
