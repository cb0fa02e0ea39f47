//! Dedicated backend connections: held by one client for as long as it
//! needs one (a blocking command, a WATCH ... EXEC), never shared while
//! held. Each worker keeps a bounded pool per node; idle connections are
//! kept for reuse, and a connection whose client went away mid-command is
//! closed, which makes Redis forget the blocked client.
//!
//! The places in a node's bound are handed out first come, first served:
//! a request that finds none free joins the node's queue and gets the
//! next one given back before anyone who asked after it. Blocking
//! commands fill at most the bound less a reserve ([`reserve`]), which
//! is kept for WATCH, transactions and scripts: a client's WATCH never
//! waits behind other clients' blocking commands.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::io;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use orthrus_cluster::NodeAddr;
use tokio::io::AsyncWriteExt;
use tokio::sync::Notify;

use super::client::Dialect;
use super::frames::FrameReader;
use super::stream::NodeStream;
use super::{Env, conn};
use crate::observe::clients::Identity;
use crate::process::quota;

/// Idle connections kept per node, protocol and database.
const MAX_IDLE: usize = 8;

/// One connection, used by one client at a time.
pub struct Dedicated {
    stream: FrameReader<NodeStream>,
    addr: NodeAddr,
    dialect: Dialect,
}

/// The client a lease is counted on (its `dedicated` count, within
/// `client.max_dedicated`).
pub type Holding = Arc<Identity>;

/// What a dedicated connection is taken for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Share {
    /// A blocking command: within the bound less the reserve.
    Blocking,
    /// WATCH, a transaction, a script: anywhere within the bound.
    Exclusive,
}

/// Why no dedicated connection could be had.
#[derive(Debug, thiserror::Error)]
pub enum TakeError {
    #[error(
        "all {0} dedicated connections of this worker to the node stayed in use for the request's timeout"
    )]
    Exhausted(usize),
    #[error("this client already holds {0} dedicated connections (client.max_dedicated)")]
    PerClient(usize),
    /// `backend.max_connections_per_node` reached for the whole wait.
    #[error("{0}")]
    Crowded(io::Error),
    /// The request's deadline came while a connection was being opened.
    #[error("no connection to the node could be opened before the request's deadline")]
    Late,
    #[error("cannot connect to the node: {0}")]
    Connect(#[from] io::Error),
}

/// A worker's dedicated connections.
pub struct DedicatedPool {
    env: Rc<Env>,
    max_per_node: usize,
    idle: RefCell<HashMap<(NodeAddr, Dialect), Vec<Dedicated>>>,
    nodes: RefCell<HashMap<NodeAddr, NodeUse>>,
}

/// A connection taken from the pool. [`Lease::release`] gives it back;
/// dropping the lease closes the connection.
pub struct Lease {
    conn: Option<Dedicated>,
    /// Its place in the node's bound, given back with it.
    place: Place,
}

/// One node's places in use, and who waits for one, oldest first.
#[derive(Default)]
struct NodeUse {
    busy: usize,
    blocking: usize,
    queue: VecDeque<Rc<Ticket>>,
}

/// A request waiting for a place.
struct Ticket {
    share: Share,
    client: Option<Holding>,
    granted: Cell<bool>,
    woken: Notify,
}

/// A place in a node's bound, counted on a client if any; dropping it
/// gives the place to the next one waiting.
struct Place {
    pool: Rc<DedicatedPool>,
    addr: NodeAddr,
    share: Share,
    client: Option<Holding>,
}

/// A ticket in a node's queue; dropped before it became a [`Place`], it
/// leaves the queue or gives back the place it was granted.
struct Waiting<'a> {
    pool: &'a Rc<DedicatedPool>,
    addr: &'a NodeAddr,
    ticket: Rc<Ticket>,
    placed: bool,
}

/// How many of a worker's `per_node` dedicated connections to a node
/// blocking commands leave for WATCH, transactions and scripts: an
/// eighth (64 of the default 512), at least one when there are two.
pub fn reserve(per_node: usize) -> usize {
    match per_node {
        0 | 1 => 0,
        n => (n / 8).max(1),
    }
}

// === impl DedicatedPool ===

impl DedicatedPool {
    pub fn new(env: Rc<Env>, max_per_node: usize) -> DedicatedPool {
        DedicatedPool {
            env,
            max_per_node,
            idle: RefCell::new(HashMap::new()),
            nodes: RefCell::new(HashMap::new()),
        }
    }

    /// [`take_for`](Self::take_for) a WATCH, transaction or script.
    pub async fn take(
        pool: &Rc<DedicatedPool>,
        addr: &NodeAddr,
        dialect: Dialect,
        client: Option<&Holding>,
        deadline: Instant,
    ) -> Result<Lease, TakeError> {
        DedicatedPool::take_for(pool, addr, dialect, client, deadline, Share::Exclusive).await
    }

    /// Takes an idle connection to `addr` or opens one, within the bound
    /// of `share`; while none is free, waits in the node's queue for one
    /// to be given back, and opening one waits for a place in the node's
    /// bound, both until `deadline`. A lease counted in `client` fails at
    /// once when the client holds `client.max_dedicated` already: its
    /// own commands wait behind this one, so none of them could give one
    /// back in time.
    pub async fn take_for(
        pool: &Rc<DedicatedPool>,
        addr: &NodeAddr,
        dialect: Dialect,
        client: Option<&Holding>,
        deadline: Instant,
        share: Share,
    ) -> Result<Lease, TakeError> {
        if let Some(held) = client {
            let cap = pool.env.shared.settings.raw.client.max_dedicated;
            if held.dedicated.load(Ordering::Relaxed) >= cap {
                return Err(TakeError::PerClient(cap));
            }
        }
        let deadline = tokio::time::Instant::from_std(deadline);
        let waiting = pool.enter(addr, share, client);
        while !waiting.ticket.granted.get() {
            let woken = waiting.ticket.woken.notified();
            if crate::time::timeout_at(deadline, woken).await.is_err()
                && !waiting.ticket.granted.get()
            {
                return Err(TakeError::Exhausted(pool.limit(share)));
            }
        }
        let place = waiting.place();
        let idle = pool
            .idle
            .borrow_mut()
            .get_mut(&(addr.clone(), dialect))
            .and_then(Vec::pop);
        let conn = match idle {
            Some(conn) => conn,
            None => {
                let connect = conn::connect(addr, dialect, &pool.env.shared);
                match crate::time::timeout_at(deadline, connect).await {
                    Ok(Ok(stream)) => Dedicated {
                        stream: FrameReader::new(stream, usize::MAX),
                        addr: addr.clone(),
                        dialect,
                    },
                    Ok(Err(e)) if quota::is_full(&e) => return Err(TakeError::Crowded(e)),
                    Ok(Err(e)) => return Err(TakeError::Connect(e)),
                    Err(_) => return Err(TakeError::Late),
                }
            }
        };
        Ok(Lease {
            conn: Some(conn),
            place,
        })
    }

    /// Closes the idle connections to nodes for which `keep` is false, and
    /// forgets those nodes once none of their connections is lent.
    pub fn prune(&self, keep: impl Fn(&NodeAddr) -> bool) {
        self.idle.borrow_mut().retain(|(addr, _), _| keep(addr));
        self.nodes
            .borrow_mut()
            .retain(|addr, n| keep(addr) || n.busy > 0 || !n.queue.is_empty());
    }

    /// The places `share` may fill.
    fn limit(&self, share: Share) -> usize {
        match share {
            Share::Exclusive => self.max_per_node,
            Share::Blocking => self.max_per_node - reserve(self.max_per_node),
        }
    }

    /// Queues a ticket for a place at `addr`, and serves the queue.
    fn enter<'a>(
        self: &'a Rc<Self>,
        addr: &'a NodeAddr,
        share: Share,
        client: Option<&Holding>,
    ) -> Waiting<'a> {
        let ticket = Rc::new(Ticket {
            share,
            client: client.cloned(),
            granted: Cell::new(false),
            woken: Notify::new(),
        });
        self.nodes
            .borrow_mut()
            .entry(addr.clone())
            .or_default()
            .queue
            .push_back(ticket.clone());
        self.serve(addr);
        Waiting {
            pool: self,
            addr,
            ticket,
            placed: false,
        }
    }

    /// Grants places to the tickets of `addr` that fit, oldest first: a
    /// blocking command that does not fit leaves the way to a WATCH
    /// behind it, and a client at its cap to other clients.
    fn serve(&self, addr: &NodeAddr) {
        let cap = self.env.shared.settings.raw.client.max_dedicated;
        let blocking_limit = self.limit(Share::Blocking);
        let mut nodes = self.nodes.borrow_mut();
        let Some(node) = nodes.get_mut(addr) else {
            return;
        };
        let mut i = 0;
        while i < node.queue.len() && node.busy < self.max_per_node {
            let Some(ticket) = node.queue.get(i) else {
                break;
            };
            let fits = ticket.share == Share::Exclusive || node.blocking < blocking_limit;
            let under_cap = ticket
                .client
                .as_ref()
                .is_none_or(|c| c.dedicated.load(Ordering::Relaxed) < cap);
            if !(fits && under_cap) {
                i += 1;
                continue;
            }
            node.busy += 1;
            if ticket.share == Share::Blocking {
                node.blocking += 1;
            }
            if let Some(c) = &ticket.client {
                c.dedicated.fetch_add(1, Ordering::Relaxed);
            }
            ticket.granted.set(true);
            ticket.woken.notify_one();
            node.queue.remove(i);
        }
    }

    /// Gives back a place of `share` at `addr` and serves the queue.
    fn give_back(&self, addr: &NodeAddr, share: Share, client: Option<&Holding>) {
        if let Some(c) = client {
            c.dedicated.fetch_sub(1, Ordering::Relaxed);
        }
        if let Some(node) = self.nodes.borrow_mut().get_mut(addr) {
            node.busy = node.busy.saturating_sub(1);
            if share == Share::Blocking {
                node.blocking = node.blocking.saturating_sub(1);
            }
        }
        self.serve(addr);
    }
}

// === impl Waiting ===

impl Waiting<'_> {
    /// The place granted to the ticket.
    fn place(mut self) -> Place {
        self.placed = true;
        Place {
            pool: self.pool.clone(),
            addr: self.addr.clone(),
            share: self.ticket.share,
            client: self.ticket.client.clone(),
        }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if self.placed {
            return;
        }
        if self.ticket.granted.get() {
            let ticket = &self.ticket;
            self.pool
                .give_back(self.addr, ticket.share, ticket.client.as_ref());
        } else if let Some(node) = self.pool.nodes.borrow_mut().get_mut(self.addr) {
            node.queue.retain(|t| !Rc::ptr_eq(t, &self.ticket));
        }
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        self.pool
            .give_back(&self.addr, self.share, self.client.as_ref());
    }
}

// === impl Lease ===

impl Lease {
    /// Sends `frame` and reads `frames` complete replies, returned together.
    /// `timeout` bounds the wait for them (`None`: wait as long as it takes).
    pub async fn call(
        &mut self,
        frame: &[u8],
        frames: usize,
        timeout: Option<Duration>,
    ) -> io::Result<Bytes> {
        self.call_marked(frame, frames, timeout, || ()).await
    }

    /// [`Lease::call`], with `written` called once `frame` is written to
    /// the node (before its replies are read).
    pub async fn call_marked(
        &mut self,
        frame: &[u8],
        frames: usize,
        timeout: Option<Duration>,
        written: impl FnOnce(),
    ) -> io::Result<Bytes> {
        let conn = self
            .conn
            .as_mut()
            .ok_or_else(|| io::Error::other("connection already closed"))?;
        let work = conn.call(frame, frames, written);
        match timeout {
            Some(t) => crate::time::timeout(t, work)
                .await
                .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no reply in time"))?,
            None => work.await,
        }
    }

    /// Gives the connection back for reuse: only when no reply is pending.
    pub fn release(mut self) {
        if let Some(conn) = self.conn.take() {
            let mut idle = self.place.pool.idle.borrow_mut();
            let list = idle.entry((conn.addr.clone(), conn.dialect)).or_default();
            if list.len() < MAX_IDLE && conn.stream.is_idle() {
                list.push(conn);
            }
        }
        // The place goes back with the lease, once the connection is idle.
    }
}

// === impl Dedicated ===

impl Dedicated {
    async fn call(
        &mut self,
        frame: &[u8],
        frames: usize,
        written: impl FnOnce(),
    ) -> io::Result<Bytes> {
        let stream = self.stream.get_mut();
        stream.write_all(frame).await?;
        stream.flush().await?;
        written();
        self.stream.reply(frames).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::process::Shared;

    /// Ten minutes: a wait that took the whole request timeout instead of
    /// the deadline given would outlast the test's own bound.
    const TIMEOUT_MS: u64 = 600_000;
    const BOUND: Duration = Duration::from_secs(10);

    /// A worker's pool of `per_node` dedicated connections per node, in a
    /// process that opens at most 4 connections to a node.
    fn pool(per_node: usize) -> Rc<DedicatedPool> {
        let mut config = Config {
            seeds: vec!["127.0.0.1:1".to_owned()],
            threads: 1,
            ..Config::default()
        };
        config.backend.request_timeout_ms = TIMEOUT_MS;
        config.backend.max_connections_per_node = 4;
        let shared = Shared::new(config.validate().expect("valid config"));
        Rc::new(DedicatedPool::new(Rc::new(Env::new(shared, 0)), per_node))
    }

    fn addr() -> NodeAddr {
        NodeAddr::new("127.0.0.1", 1)
    }

    /// A connection to [`addr`] within 20 ms from now.
    async fn take_soon(pool: &Rc<DedicatedPool>) -> Result<Lease, TakeError> {
        let deadline = Instant::now() + Duration::from_millis(20);
        let addr = addr();
        let taken = DedicatedPool::take(pool, &addr, Dialect::default(), None, deadline);
        crate::time::timeout(BOUND, taken)
            .await
            .expect("waited past the deadline")
    }

    #[tokio::test]
    async fn waiting_for_a_lent_connection_ends_at_the_deadline_given() {
        let pool = pool(1);
        let _held = hold(&pool, Share::Exclusive);
        let result = take_soon(&pool).await;
        assert!(
            matches!(result, Err(TakeError::Exhausted(1))),
            "{:?}",
            result.err()
        );
    }

    #[tokio::test]
    async fn waiting_for_a_place_in_the_nodes_bound_ends_at_the_deadline_given() {
        let pool = pool(8);
        let quota = &pool.env.shared.node_quota;
        let far = tokio::time::Instant::now() + BOUND;
        let mut held = Vec::new();
        for _ in 0..quota.per_node() {
            held.push(
                quota
                    .take(&addr(), crate::process::quota::Use::Client, far)
                    .await
                    .expect("a place"),
            );
        }
        let result = take_soon(&pool).await;
        assert!(matches!(result, Err(TakeError::Late)), "{:?}", result.err());
        // The place reserved for it is given back.
        assert!(pool.nodes.borrow().get(&addr()).is_none_or(|n| n.busy == 0));
    }

    /// A place at [`addr`], granted at once.
    fn hold(pool: &Rc<DedicatedPool>, share: Share) -> Place {
        let addr = addr();
        let waiting = pool.enter(&addr, share, None);
        assert!(waiting.ticket.granted.get(), "no place free");
        waiting.place()
    }

    #[test]
    fn blocking_commands_leave_the_reserve_to_watch() {
        let pool = pool(16);
        assert_eq!(reserve(16), 2);
        let held: Vec<Place> = (0..14).map(|_| hold(&pool, Share::Blocking)).collect();
        let addr = addr();
        let blocked = pool.enter(&addr, Share::Blocking, None);
        assert!(!blocked.ticket.granted.get());
        // A WATCH behind the waiting blocking command is not kept by it.
        let watch = pool.enter(&addr, Share::Exclusive, None);
        assert!(watch.ticket.granted.get());
        drop(watch);
        // A blocking place given back goes to the one waiting.
        drop(held);
        assert!(blocked.ticket.granted.get());
    }

    #[test]
    fn places_go_to_the_oldest_waiter_first() {
        let pool = pool(2);
        let first = hold(&pool, Share::Exclusive);
        let _second = hold(&pool, Share::Exclusive);
        let addr = addr();
        let a = pool.enter(&addr, Share::Exclusive, None);
        let b = pool.enter(&addr, Share::Exclusive, None);
        assert!(!a.ticket.granted.get() && !b.ticket.granted.get());
        drop(first);
        assert!(a.ticket.granted.get() && !b.ticket.granted.get());
        // A waiter that gives up leaves its place to the next.
        drop(a);
        assert!(b.ticket.granted.get());
    }
}
