//! A subscription connection: its task (the client's (un)subscribe
//! commands out, everything the node sends back to the client), and what
//! happens when it is lost or a node drops shard channels: subscribing
//! again where the channels live now.

use std::cell::RefCell;
use std::rc::{Rc, Weak};
use std::time::Duration;

use bytes::Bytes;
use orthrus_cluster::NodeAddr;
use orthrus_resp::{Limits, Protocol, Request, Value};
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

use super::{Inner, Kind};
use crate::node::conn;
use crate::node::forward::error_reply;
use crate::node::frames::{Frame, FrameReader};
use crate::worker::WorkerCtx;

impl Inner {
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

/// A subscription connection's task.
pub(super) async fn run(
    inner: Weak<RefCell<Inner>>,
    kind: Kind,
    addr: NodeAddr,
    proto: Protocol,
    ctx: Rc<WorkerCtx>,
    mut rx: mpsc::UnboundedReceiver<Bytes>,
) {
    let stream = match conn::connect(&addr, proto, &ctx.shared).await {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(node = %addr, error = %e, "cannot open a subscription connection");
            if let Some(this) = inner.upgrade() {
                this.borrow().push.push(error_reply(&format!(
                    "ERR orthrus: cannot subscribe on {addr}: {e}"
                )));
                Inner::on_lost(&this, kind, &addr);
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
                None => break false, // the client is gone
            },
            // A malformed frame is a lost connection: subscribed again
            // elsewhere, nothing piling up unread.
            read = frames.next(1) => {
                let Ok(Frame::Reply(frame) | Frame::Push(frame)) = read else { break true };
                let Some(this) = inner.upgrade() else { break false };
                let value = Value::parse(&frame, &limits).ok().flatten().map(|(v, _)| v);
                Inner::on_frame(&this, kind, &addr, frame, &value.unwrap_or(Value::Null));
            }
        }
    };
    if failed {
        tracing::info!(node = %addr, kind = kind.name(), "subscription connection lost; subscribing again");
        ctx.shared.request_refresh();
        if let Some(this) = inner.upgrade() {
            Inner::on_lost(&this, kind, &addr);
        }
    }
}
