//! A worker's backend connections: per node, per database, per protocol
//! and per lane (master requests, or replica reads on connections that sent
//! `READONLY`), a few long-lived multiplexed connections, made on first use and remade
//! after a failure, with a back-off so a dead node is not hammered with
//! connects. A client that tracks keys for client-side caching has a
//! private pool of its own ([`Pool::private`]): one connection per node,
//! database and protocol, set up and listened to by its [`Hooks`], its departed nodes
//! forgotten with the worker's.

use rustc_hash::FxHashMap as HashMap;
use std::cell::{Cell, RefCell};
use std::rc::Rc;

use orthrus_cluster::NodeAddr;
use orthrus_resp::Protocol;

use super::client::Dialect;
use super::conn::{BackendConn, BackendError, Hooks, Job};
use super::{Blocked, Env};

/// One worker's connections; only its own thread touches it.
pub struct Pool {
    env: Rc<Env>,
    per_node: usize,
    /// Per node, the connections of each database, protocol and lane.
    conns: RefCell<HashMap<NodeAddr, NodeConns>>,
    next: Cell<usize>,
    /// A private pool's: what its connections do beyond requests.
    hooks: Option<Rc<dyn Hooks>>,
}

/// One node's connections: database 0's, by protocol and lane (see
/// [`list_mut`]), and those of the other databases clients selected, each
/// made on first use like database 0's. Few databases are in use at once
/// in practice: they are looked up in order, and database 0, the common
/// case, costs no lookup at all.
#[derive(Default)]
struct NodeConns {
    zero: [Vec<BackendConn>; 4],
    other: Vec<(u32, [Vec<BackendConn>; 4])>,
}

impl NodeConns {
    #[inline]
    fn list_mut(&mut self, dialect: Dialect, lane: Lane) -> &mut Vec<BackendConn> {
        let lists = match dialect.db {
            0 => &mut self.zero,
            db => self.other_db(db),
        };
        list_mut(lists, dialect.proto, lane)
    }

    /// The lists of database `db` (not 0), made on its first use.
    #[cold]
    fn other_db(&mut self, db: u32) -> &mut [Vec<BackendConn>; 4] {
        if !self.other.iter().any(|(d, _)| *d == db) {
            self.other.push((db, Default::default()));
        }
        match self.other.iter_mut().find(|(d, _)| *d == db) {
            Some((_, lists)) => lists,
            None => &mut self.zero, // never: pushed above
        }
    }

    fn all(&self) -> impl Iterator<Item = (u32, &[Vec<BackendConn>; 4])> {
        std::iter::once((0, &self.zero)).chain(self.other.iter().map(|(db, lists)| (*db, lists)))
    }
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
            hooks: None,
        }
    }

    /// One client's own pool: a connection per node and protocol, each set
    /// up by `hooks`, which also get its pushes.
    pub fn private(env: Rc<Env>, hooks: Rc<dyn Hooks>) -> Pool {
        Pool {
            hooks: Some(hooks),
            ..Pool::new(env, 1)
        }
    }

    /// Makes sure a connection to `addr` of `dialect` (master lane) is
    /// open or opening.
    pub fn open(&self, addr: &NodeAddr, dialect: Dialect) {
        let mut conns = self.conns.borrow_mut();
        let list = conns
            .entry(addr.clone())
            .or_default()
            .list_mut(dialect, Lane::Master);
        list.retain(|c| !c.is_closed());
        if list.is_empty() {
            list.push(self.spawn(addr, dialect, false));
        }
    }

    /// The nodes and dialects of the master-lane connections open now.
    pub fn open_conns(&self) -> Vec<(NodeAddr, Dialect)> {
        let conns = self.conns.borrow();
        let mut out = Vec::new();
        for (addr, node) in conns.iter() {
            for (db, lists) in node.all() {
                let [resp2, resp3, ..] = lists;
                for (proto, list) in [(Protocol::Resp2, resp2), (Protocol::Resp3, resp3)] {
                    if list.iter().any(|c| !c.is_closed()) {
                        out.push((addr.clone(), Dialect { proto, db }));
                    }
                }
            }
        }
        out
    }

    /// A request sent on this pool's connections was answered with MOVED.
    pub fn moved(&self) {
        if let Some(hooks) = &self.hooks {
            hooks.moved();
        }
    }

    fn spawn(&self, addr: &NodeAddr, dialect: Dialect, readonly: bool) -> BackendConn {
        BackendConn::spawn(
            addr.clone(),
            dialect,
            readonly,
            self.env.clone(),
            self.hooks.clone(),
        )
    }

    /// Queues `job` on a connection to `addr`. If the node is in back-off,
    /// the job fails at once as never sent (`Unreachable` when the node
    /// could not be connected to at all).
    pub fn send(&self, addr: &NodeAddr, dialect: Dialect, lane: Lane, job: Job<'_>) {
        if let Some(blocked) = self.env.backing_off(addr) {
            let error = match blocked {
                Blocked::Lost => BackendError::NotSent,
                Blocked::Unreachable => BackendError::Unreachable,
            };
            self.env.note_resends();
            job.reply.send(Err(error));
            return;
        }
        let i = self.next.get().wrapping_add(1);
        self.next.set(i);
        let mut conns = self.conns.borrow_mut();
        let list = match conns.get_mut(addr) {
            Some(node) => node.list_mut(dialect, lane),
            // The address is cloned only the first time a node is used.
            None => conns
                .entry(addr.clone())
                .or_default()
                .list_mut(dialect, lane),
        };
        let readonly = lane == Lane::Replica;
        if list.len() < self.per_node {
            list.push(self.spawn(addr, dialect, readonly));
        }
        // Not empty: it holds at least one connection (most often just
        // one: no division then).
        let index = match list.len() {
            1 => 0,
            n => i % n,
        };
        let Some(slot) = list.get_mut(index) else {
            self.env.note_resends();
            job.reply.send(Err(BackendError::NotSent));
            return;
        };
        if slot.is_closed() {
            *slot = self.spawn(addr, dialect, readonly);
        }
        if let Err(job) = slot.send(job, self.env.last_request()) {
            // A connection that ends as it is made refuses at once.
            self.env.note_resends();
            job.reply.send(Err(BackendError::NotSent));
        }
    }

    /// Forgets the connections to nodes for which `keep` is false (nodes
    /// gone from the topology); each ends once its requests are answered.
    /// A private pool's hooks hear of each open one as lost: what the
    /// node would have invalidated is no longer heard.
    pub fn prune(&self, keep: impl Fn(&NodeAddr) -> bool) {
        let mut gone = Vec::new();
        self.conns.borrow_mut().retain(|addr, node| {
            let kept = keep(addr);
            let open = || {
                node.all()
                    .any(|(_, lists)| lists.iter().flatten().any(|c| !c.is_closed()))
            };
            if !kept && self.hooks.is_some() && open() {
                gone.push(addr.clone());
            }
            kept
        });
        if let Some(hooks) = &self.hooks {
            for addr in &gone {
                hooks.lost(addr);
            }
        }
    }

    /// The worker's node environment (counters, back-off).
    pub fn env(&self) -> &Rc<Env> {
        &self.env
    }
}

/// Where the connections of `proto` and `lane` are in a node's lists.
#[inline]
fn list_mut(
    lists: &mut [Vec<BackendConn>; 4],
    proto: Protocol,
    lane: Lane,
) -> &mut Vec<BackendConn> {
    let [resp2, resp3, replica2, replica3] = lists;
    match (proto, lane) {
        (Protocol::Resp2, Lane::Master) => resp2,
        (Protocol::Resp3, Lane::Master) => resp3,
        (Protocol::Resp2, Lane::Replica) => replica2,
        (Protocol::Resp3, Lane::Replica) => replica3,
    }
}
