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
    /// [`connections`]).
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
            let _ = job.reply.send(Err(error));
            return;
        }
        let conn = self.pick(addr, proto, lane);
        if let Err(job) = conn.send(job) {
            // The task ended between the check and the send: start afresh.
            let conn = self.replace(addr, proto, lane);
            if let Err(job) = conn.send(job) {
                let _ = job.reply.send(Err(BackendError::NotSent));
            }
        }
    }

    fn pick(&self, addr: &NodeAddr, proto: Protocol, lane: Lane) -> BackendConn {
        let i = self.next.get().wrapping_add(1);
        self.next.set(i);
        let mut conns = self.conns.borrow_mut();
        let list = connections(&mut conns, addr, proto, lane);
        let readonly = lane == Lane::Replica;
        if list.len() < self.per_node {
            let conn = BackendConn::spawn(addr.clone(), proto, readonly, self.env.clone());
            list.push(conn.clone());
            return conn;
        }
        // Not empty: it holds `per_node` (at least 1) connections.
        let index = i % list.len();
        let slot = &mut list[index];
        if slot.is_closed() {
            *slot = BackendConn::spawn(addr.clone(), proto, readonly, self.env.clone());
        }
        slot.clone()
    }

    fn replace(&self, addr: &NodeAddr, proto: Protocol, lane: Lane) -> BackendConn {
        let readonly = lane == Lane::Replica;
        let conn = BackendConn::spawn(addr.clone(), proto, readonly, self.env.clone());
        let mut conns = self.conns.borrow_mut();
        let list = connections(&mut conns, addr, proto, lane);
        list.retain(|c| !c.is_closed());
        list.push(conn.clone());
        conn
    }

    /// The worker's node environment (counters, back-off).
    pub fn env(&self) -> &Rc<Env> {
        &self.env
    }
}

/// The connections to `addr` for `proto` and `lane`; the address is cloned
/// only the first time a node is used, not per request.
fn connections<'a>(
    conns: &'a mut HashMap<NodeAddr, [Vec<BackendConn>; 4]>,
    addr: &NodeAddr,
    proto: Protocol,
    lane: Lane,
) -> &'a mut Vec<BackendConn> {
    if !conns.contains_key(addr) {
        conns.insert(addr.clone(), Default::default());
    }
    let [resp2, resp3, resp2_replica, resp3_replica] = conns.get_mut(addr).expect("inserted above");
    match (proto, lane) {
        (Protocol::Resp2, Lane::Master) => resp2,
        (Protocol::Resp3, Lane::Master) => resp3,
        (Protocol::Resp2, Lane::Replica) => resp2_replica,
        (Protocol::Resp3, Lane::Replica) => resp3_replica,
    }
}
