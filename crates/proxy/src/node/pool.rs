//! A worker's backend connections: per node, per protocol and per lane
//! (master requests, or replica reads on connections that sent `READONLY`),
//! a few long-lived multiplexed connections, made on first use and remade
//! after a failure, with a back-off so a dead node is not hammered with
//! connects.

use rustc_hash::FxHashMap as HashMap;
use std::cell::{Cell, RefCell};
use std::rc::Rc;

use orthrus_cluster::NodeAddr;
use orthrus_resp::Protocol;

use super::conn::{BackendConn, BackendError, Job};
use super::{Blocked, Env};

/// One worker's connections; only its own thread touches it.
pub struct Pool {
    env: Rc<Env>,
    per_node: usize,
    /// Per node, the connections of each protocol and lane (see
    /// [`list_index`]).
    conns: RefCell<HashMap<NodeAddr, [Vec<BackendConn>; 4]>>,
    next: Cell<usize>,
}

/// Which of a node's connections a request takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lane {
    /// Requests for the node as the slot's master: connections that never
    /// sent `READONLY`, so a master demoted by a failover answers MOVED
    /// instead of serving what the client meant for the master.
    Master,
    /// Reads sent to a replica: connections whose handshake sent
    /// `READONLY`.
    Replica,
}

impl Pool {
    pub fn new(env: Rc<Env>, per_node: usize) -> Pool {
        Pool {
            env,
            per_node: per_node.max(1),
            conns: RefCell::new(HashMap::default()),
            next: Cell::new(0),
        }
    }

    /// Queues `job` on a connection to `addr`. If the node is in back-off,
    /// the job fails at once as never sent (`Unreachable` when the node
    /// could not be connected to at all).
    pub fn send(&self, addr: &NodeAddr, proto: Protocol, lane: Lane, job: Job) {
        if let Some(blocked) = self.env.backing_off(addr) {
            let error = match blocked {
                Blocked::Lost => BackendError::NotSent,
                Blocked::Unreachable => BackendError::Unreachable,
            };
            job.reply.send(Err(error));
            return;
        }
        let i = self.next.get().wrapping_add(1);
        self.next.set(i);
        let mut conns = self.conns.borrow_mut();
        let list = match conns.get_mut(addr) {
            Some(lists) => &mut lists[list_index(proto, lane)],
            // The address is cloned only the first time a node is used.
            None => &mut conns.entry(addr.clone()).or_default()[list_index(proto, lane)],
        };
        let readonly = lane == Lane::Replica;
        if list.len() < self.per_node {
            list.push(BackendConn::spawn(
                addr.clone(),
                proto,
                readonly,
                self.env.clone(),
            ));
        }
        // Not empty: it holds at least one connection.
        let index = i % list.len();
        let slot = &mut list[index];
        if slot.is_closed() {
            *slot = BackendConn::spawn(addr.clone(), proto, readonly, self.env.clone());
        }
        if let Err(job) = slot.send(job) {
            // A connection that ends as it is made refuses at once.
            job.reply.send(Err(BackendError::NotSent));
        }
    }

    /// The worker's node environment (counters, back-off).
    pub fn env(&self) -> &Rc<Env> {
        &self.env
    }
}

/// Where the connections of `proto` and `lane` are in a node's lists.
fn list_index(proto: Protocol, lane: Lane) -> usize {
    match (proto, lane) {
        (Protocol::Resp2, Lane::Master) => 0,
        (Protocol::Resp3, Lane::Master) => 1,
        (Protocol::Resp2, Lane::Replica) => 2,
        (Protocol::Resp3, Lane::Replica) => 3,
    }
}
