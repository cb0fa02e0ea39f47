//! Dedicated backend connections: held by one client for as long as it
//! needs one (a blocking command, a WATCH ... EXEC), never shared while
//! held. Each worker keeps a bounded pool per node; idle connections are
//! kept for reuse, and a connection whose client went away mid-command is
//! closed, which makes Redis forget the blocked client.

use std::cell::RefCell;
use std::collections::HashMap;
use std::io;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use orthrus_cluster::NodeAddr;
use orthrus_resp::Protocol;
use tokio::io::AsyncWriteExt;

use super::frames::FrameReader;
use super::stream::NodeStream;
use super::{Env, conn};
use crate::observe::clients::Identity;
use crate::process::quota;

/// Idle connections kept per node and protocol.
const MAX_IDLE: usize = 8;

/// One connection, used by one client at a time.
pub struct Dedicated {
    stream: FrameReader<NodeStream>,
    addr: NodeAddr,
    proto: Protocol,
}

/// The client a lease is counted on (its `dedicated` count, within
/// `client.max_dedicated`).
pub type Holding = Arc<Identity>;

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
    idle: RefCell<HashMap<(NodeAddr, Protocol), Vec<Dedicated>>>,
    busy: RefCell<HashMap<NodeAddr, usize>>,
    /// Told whenever a connection is given back or closed, for the
    /// requests waiting for one.
    freed: tokio::sync::Notify,
}

/// A connection taken from the pool. [`Lease::release`] gives it back;
/// dropping the lease closes the connection.
pub struct Lease {
    conn: Option<Dedicated>,
    pool: Rc<DedicatedPool>,
    /// The count of the client it is lent to, if counted.
    client: Option<Holding>,
}

// === impl DedicatedPool ===

impl DedicatedPool {
    pub fn new(env: Rc<Env>, max_per_node: usize) -> DedicatedPool {
        DedicatedPool {
            env,
            max_per_node,
            idle: RefCell::new(HashMap::new()),
            busy: RefCell::new(HashMap::new()),
            freed: tokio::sync::Notify::new(),
        }
    }

    /// Takes an idle connection to `addr` or opens one, within the bound;
    /// while all are in use, waits for one to be given back, and opening
    /// one waits for a place in the node's bound, both until `deadline`
    /// (the request's). A lease counted in `client` fails at once when the
    /// client holds `client.max_dedicated` already.
    pub async fn take(
        pool: &Rc<DedicatedPool>,
        addr: &NodeAddr,
        proto: Protocol,
        client: Option<&Holding>,
        deadline: Instant,
    ) -> Result<Lease, TakeError> {
        if let Some(held) = client {
            let cap = pool.env.shared.settings.raw.client.max_dedicated;
            if held.dedicated.load(Ordering::Relaxed) >= cap {
                return Err(TakeError::PerClient(cap));
            }
        }
        let deadline = tokio::time::Instant::from_std(deadline);
        loop {
            // Made before the look: a connection freed after it wakes it.
            let freed = pool.freed.notified();
            if pool.reserve(addr) {
                break;
            }
            if crate::time::timeout_at(deadline, freed).await.is_err() {
                return Err(TakeError::Exhausted(pool.max_per_node));
            }
        }
        let idle = pool
            .idle
            .borrow_mut()
            .get_mut(&(addr.clone(), proto))
            .and_then(Vec::pop);
        let opened = match idle {
            Some(conn) => Ok(conn),
            None => {
                let connect = conn::connect(addr, proto, &pool.env.shared);
                match crate::time::timeout_at(deadline, connect).await {
                    Ok(Ok(stream)) => Ok(Dedicated {
                        stream: FrameReader::new(stream, usize::MAX),
                        addr: addr.clone(),
                        proto,
                    }),
                    Ok(Err(e)) if quota::is_full(&e) => Err(TakeError::Crowded(e)),
                    Ok(Err(e)) => Err(TakeError::Connect(e)),
                    Err(_) => Err(TakeError::Late),
                }
            }
        };
        let conn = opened.inspect_err(|_| pool.forget(addr))?;
        if let Some(held) = client {
            held.dedicated.fetch_add(1, Ordering::Relaxed);
        }
        Ok(Lease {
            conn: Some(conn),
            pool: pool.clone(),
            client: client.cloned(),
        })
    }

    /// Closes the idle connections to nodes for which `keep` is false, and
    /// forgets those nodes once none of their connections is lent.
    pub fn prune(&self, keep: impl Fn(&NodeAddr) -> bool) {
        self.idle.borrow_mut().retain(|(addr, _), _| keep(addr));
        self.busy
            .borrow_mut()
            .retain(|addr, n| keep(addr) || *n > 0);
    }

    /// Counts one more connection to `addr` in use, if the bound allows.
    fn reserve(&self, addr: &NodeAddr) -> bool {
        let mut busy = self.busy.borrow_mut();
        let n = busy.entry(addr.clone()).or_insert(0);
        if *n >= self.max_per_node {
            return false;
        }
        *n += 1;
        true
    }

    fn forget(&self, addr: &NodeAddr) {
        if let Some(n) = self.busy.borrow_mut().get_mut(addr) {
            *n = n.saturating_sub(1);
        }
        self.freed.notify_waiters();
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
        let conn = self
            .conn
            .as_mut()
            .ok_or_else(|| io::Error::other("connection already closed"))?;
        let work = conn.call(frame, frames);
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
            let pool = &self.pool;
            pool.forget(&conn.addr);
            let mut idle = pool.idle.borrow_mut();
            let list = idle.entry((conn.addr.clone(), conn.proto)).or_default();
            if list.len() < MAX_IDLE && conn.stream.is_idle() {
                list.push(conn);
            }
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(held) = &self.client {
            held.dedicated.fetch_sub(1, Ordering::Relaxed);
        }
        if let Some(conn) = self.conn.take() {
            self.pool.forget(&conn.addr);
        }
    }
}

// === impl Dedicated ===

impl Dedicated {
    async fn call(&mut self, frame: &[u8], frames: usize) -> io::Result<Bytes> {
        let stream = self.stream.get_mut();
        stream.write_all(frame).await?;
        stream.flush().await?;
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
        let taken = DedicatedPool::take(pool, &addr, Protocol::Resp2, None, deadline);
        crate::time::timeout(BOUND, taken)
            .await
            .expect("waited past the deadline")
    }

    #[tokio::test]
    async fn waiting_for_a_lent_connection_ends_at_the_deadline_given() {
        let pool = pool(1);
        assert!(pool.reserve(&addr()));
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
        assert!(pool.busy.borrow().get(&addr()).is_none_or(|n| *n == 0));
    }
}
