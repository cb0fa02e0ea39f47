//! Tracking on a client's links: in BCAST mode a node sends the
//! invalidations of every write under the prefixes, whichever connection
//! read the keys, so the client's commands need not go over the tracking
//! connection and one RESP3 link per master carries the invalidations
//! beside the client's subscriptions.

use std::cell::RefCell;
use std::future::Future;
use std::rc::{Rc, Weak};

use bytes::Bytes;
use orthrus_cluster::NodeAddr;
use tokio::sync::oneshot;

use super::{Inner, PubSub, ReplyTo, Tracker};
use crate::node::answer::error_reply;
use crate::node::conn::Hooks;

/// A client's links, as its tracking sees them.
#[derive(Clone)]
pub struct Links(Weak<RefCell<Inner>>);

const TRACKING_OFF: &[u8] = b"*3\r\n$6\r\nCLIENT\r\n$8\r\nTRACKING\r\n$3\r\noff\r\n";

impl PubSub {
    /// The client's links, for its tracking.
    pub fn links(&self) -> Links {
        Links(Rc::downgrade(&self.inner))
    }
}

impl Links {
    /// Turns tracking on with `on` (a `CLIENT TRACKING ON ... BCAST`) on a
    /// link to each of `masters`, and on every link opened later;
    /// invalidations go to `hooks`. Resolves once every master answered.
    pub fn track(
        &self,
        hooks: Weak<dyn Hooks>,
        on: Bytes,
        masters: Vec<NodeAddr>,
    ) -> impl Future<Output = Result<(), Bytes>> + use<> {
        let this = self.0.upgrade();
        let asked = this.map(|this| {
            // Opened before tracking is set: each gets `on` once, below.
            for addr in &masters {
                Inner::link(&this, addr);
            }
            this.borrow_mut().tracker = Some(Tracker {
                hooks,
                on: on.clone(),
            });
            masters
                .iter()
                .map(|addr| (addr.clone(), ask(&this, addr, on.clone())))
                .collect::<Vec<_>>()
        });
        settled(asked)
    }

    /// CLIENT TRACKING ON again: `added` (the new prefixes and options) on
    /// every link, `on` (all of them) on the links opened later.
    pub fn retrack(
        &self,
        added: Bytes,
        on: Bytes,
    ) -> impl Future<Output = Result<(), Bytes>> + use<> {
        let this = self.0.upgrade();
        let asked = this.map(|this| {
            if let Some(tracker) = this.borrow_mut().tracker.as_mut() {
                tracker.on = on;
            }
            let addrs: Vec<NodeAddr> = this.borrow().links.keys().cloned().collect();
            addrs
                .into_iter()
                .map(|addr| {
                    let rx = ask(&this, &addr, added.clone());
                    (addr, rx)
                })
                .collect::<Vec<_>>()
        });
        settled(asked)
    }

    /// Opens a link to each of `masters` that has none (a new master, a
    /// lost link): tracking is turned on first on each.
    pub fn keep(&self, masters: &[NodeAddr]) {
        if let Some(this) = self.0.upgrade() {
            for addr in masters {
                Inner::link(&this, addr);
            }
        }
    }

    /// Tracking is off: links that hold subscriptions turn it off, the
    /// others close.
    pub fn untrack(&self) {
        let Some(this) = self.0.upgrade() else { return };
        let mut inner = this.borrow_mut();
        inner.tracker = None;
        let addrs: Vec<NodeAddr> = inner.links.keys().cloned().collect();
        for addr in addrs {
            if !inner.holds(&addr) {
                inner.links.remove(&addr);
            } else if let Some(link) = inner.links.get_mut(&addr) {
                link.replies.push_back(ReplyTo::Tracking(None));
                let _ = link.tx.send(Bytes::from_static(TRACKING_OFF));
            }
        }
    }
}

/// Sends `frame` on the link to `addr`; its reply comes on the receiver.
fn ask(this: &Rc<RefCell<Inner>>, addr: &NodeAddr, frame: Bytes) -> oneshot::Receiver<Bytes> {
    let (tx, rx) = oneshot::channel();
    let link_tx = Inner::link(this, addr);
    if let Some(link) = this.borrow_mut().links.get_mut(addr) {
        link.replies.push_back(ReplyTo::Tracking(Some(tx)));
    }
    let _ = link_tx.send(frame);
    rx
}

/// Waits for every reply; the first refusal or lost link is the error.
async fn settled(asked: Option<Vec<(NodeAddr, oneshot::Receiver<Bytes>)>>) -> Result<(), Bytes> {
    let Some(asked) = asked else {
        return Err(error_reply("ERR orthrus: the client is closing"));
    };
    let mut result = Ok(());
    for (addr, rx) in asked {
        let failure = match rx.await {
            Ok(reply) if matches!(reply.first(), Some(b'-' | b'!')) => Some(
                String::from_utf8_lossy(reply.get(1..).unwrap_or_default())
                    .trim_end()
                    .to_owned(),
            ),
            Ok(_) => None,
            Err(_) => Some("connection closed".to_owned()),
        };
        if let (Some(why), Ok(())) = (failure, &result) {
            result = Err(error_reply(&format!(
                "ERR orthrus: cannot track keys on node {addr}: {why}"
            )));
        }
    }
    result
}
