//! A worker's backend connections: per node and per protocol, a few
//! long-lived multiplexed connections, made on first use and remade after a
//! failure, with a back-off so a dead node is not hammered with connects.

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
    /// Per node, the RESP2 and the RESP3 connections.
    conns: RefCell<HashMap<NodeAddr, [Vec<BackendConn>; 2]>>,
    next: Cell<usize>,
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
    pub fn send(&self, addr: &NodeAddr, proto: Protocol, job: Job) {
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
            Some(lists) => &mut lists[proto_index(proto)],
            // The address is cloned only the first time a node is used.
            None => &mut conns.entry(addr.clone()).or_default()[proto_index(proto)],
        };
        if list.len() < self.per_node {
            list.push(BackendConn::spawn(addr.clone(), proto, self.env.clone()));
        }
        // Not empty: it holds at least one connection.
        let index = i % list.len();
        let slot = &mut list[index];
        if slot.is_closed() {
            *slot = BackendConn::spawn(addr.clone(), proto, self.env.clone());
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

fn proto_index(proto: Protocol) -> usize {
    match proto {
        Protocol::Resp2 => 0,
        Protocol::Resp3 => 1,
    }
}
