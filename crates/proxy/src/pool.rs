//! A worker's backend connections: per node and per protocol, a few
//! long-lived multiplexed connections, made on first use and remade after a
//! failure, with a back-off so a dead node is not hammered with connects.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

use orthrus_cluster::NodeAddr;
use orthrus_resp::Protocol;

use crate::backend::{BackendConn, BackendError, Job};
use crate::worker::WorkerCtx;

const FIRST_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// One worker's connections; only its own thread touches it.
pub struct Pool {
    per_node: usize,
    conns: RefCell<HashMap<(NodeAddr, Protocol), Vec<BackendConn>>>,
    health: RefCell<HashMap<NodeAddr, Backoff>>,
    next: Cell<usize>,
}

/// After a failure, connecting to the node again waits until `retry_at`.
#[derive(Clone, Copy)]
struct Backoff {
    delay: Duration,
    retry_at: Instant,
}

impl Pool {
    pub fn new(per_node: usize) -> Pool {
        Pool {
            per_node: per_node.max(1),
            conns: RefCell::new(HashMap::new()),
            health: RefCell::new(HashMap::new()),
            next: Cell::new(0),
        }
    }

    /// Queues `job` on a connection to `addr`. If the node is in back-off,
    /// the job fails at once as never sent.
    pub fn send(&self, ctx: &Rc<WorkerCtx>, addr: &NodeAddr, proto: Protocol, job: Job) {
        if self
            .health
            .borrow()
            .get(addr)
            .is_some_and(|b| Instant::now() < b.retry_at)
        {
            let _ = job.reply.send(Err(BackendError::NotSent));
            return;
        }
        let conn = self.pick(ctx, addr, proto);
        if let Err(job) = conn.send(job) {
            // The task ended between the check and the send: start afresh.
            let conn = self.replace(ctx, addr, proto);
            if let Err(job) = conn.send(job) {
                let _ = job.reply.send(Err(BackendError::NotSent));
            }
        }
    }

    fn pick(&self, ctx: &Rc<WorkerCtx>, addr: &NodeAddr, proto: Protocol) -> BackendConn {
        let mut conns = self.conns.borrow_mut();
        let list = conns.entry((addr.clone(), proto)).or_default();
        if list.len() < self.per_node {
            let conn = BackendConn::spawn(addr.clone(), proto, ctx.clone());
            list.push(conn.clone());
            return conn;
        }
        let i = self.next.get().wrapping_add(1);
        self.next.set(i);
        let index = i % list.len();
        match list.get_mut(index) {
            Some(conn) if !conn.is_closed() => conn.clone(),
            Some(slot) => {
                *slot = BackendConn::spawn(addr.clone(), proto, ctx.clone());
                slot.clone()
            }
            None => BackendConn::spawn(addr.clone(), proto, ctx.clone()),
        }
    }

    fn replace(&self, ctx: &Rc<WorkerCtx>, addr: &NodeAddr, proto: Protocol) -> BackendConn {
        let conn = BackendConn::spawn(addr.clone(), proto, ctx.clone());
        let mut conns = self.conns.borrow_mut();
        let list = conns.entry((addr.clone(), proto)).or_default();
        list.retain(|c| !c.is_closed());
        list.push(conn.clone());
        conn
    }

    /// A connection to `addr` failed: back off before the next attempt.
    pub fn failed(&self, addr: &NodeAddr) {
        let mut health = self.health.borrow_mut();
        let delay = health
            .get(addr)
            .map_or(FIRST_BACKOFF, |b| (b.delay * 2).min(MAX_BACKOFF));
        health.insert(
            addr.clone(),
            Backoff {
                delay,
                retry_at: Instant::now() + delay,
            },
        );
    }

    /// A connection to `addr` works again.
    pub fn connected(&self, addr: &NodeAddr) {
        self.health.borrow_mut().remove(addr);
    }
}
