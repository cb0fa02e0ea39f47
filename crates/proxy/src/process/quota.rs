//! The bounds on connections to nodes, counted across every worker and
//! every kind of connection (shared, dedicated, subscription links,
//! tracking clients' private ones, MONITOR): `backend.max_connections_per_node`
//! to each node, and to all nodes together the share of the open files
//! limit `server::fd_limit` leaves them, of which connections a client
//! holds for itself cannot take the part kept for the workers' shared
//! ones. A connection holds a [`Counted`] for as long as it is open; past a
//! bound, opening one waits for another to close, within the request's
//! deadline, then fails with an error naming the bound, before the node
//! itself would refuse a connection at its `maxclients` (which would reach
//! whichever client asked next, not the one holding many), and before
//! orthrus would run out of descriptors (which would fail whatever opens
//! next: a client's accept, a topology refresh).

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex, OnceLock};

use orthrus_cluster::NodeAddr;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// One open connection's places in the counts; dropping it frees them.
#[derive(Debug)]
pub struct Counted {
    _node: OwnedSemaphorePermit,
    _fds: Option<Fds>,
}

/// Places in the open files share.
#[derive(Debug)]
struct Fds {
    _all: OwnedSemaphorePermit,
    _own: Option<OwnedSemaphorePermit>,
}

/// What a connection is for, as the bounds see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Use {
    /// A worker's shared connection to a node.
    Shared,
    /// One a client holds for itself: dedicated, subscriptions, tracking,
    /// MONITOR.
    Client,
}

/// The process's count of open connections per node, and of all of them.
pub struct NodeQuota {
    per_node: usize,
    nodes: Mutex<HashMap<NodeAddr, Arc<Semaphore>>>,
    /// Set once at start-up, from the open files limit.
    fds: OnceLock<FdShare>,
}

/// The node connections' share of the open files limit.
struct FdShare {
    total: usize,
    all: Arc<Semaphore>,
    /// What [`Use::Client`] connections may take of `all`.
    own: Arc<Semaphore>,
}

/// No connection to the node could be counted before the deadline.
#[derive(Debug, thiserror::Error)]
#[error(
    "all {per_node} connections orthrus may open to node {addr} stayed in use for the request's timeout (backend.max_connections_per_node)"
)]
pub struct Full {
    pub per_node: usize,
    pub addr: NodeAddr,
}

/// No descriptor for one more node connection came free before the
/// deadline.
#[derive(Debug, thiserror::Error)]
#[error(
    "all {total} node connections the open files limit leaves room for stayed in use for the request's timeout (RLIMIT_NOFILE: raise ulimit -n)"
)]
pub struct NoDescriptor {
    pub total: usize,
}

// === impl NodeQuota ===

impl NodeQuota {
    pub fn new(per_node: usize) -> NodeQuota {
        NodeQuota {
            per_node,
            nodes: Mutex::new(HashMap::new()),
            fds: OnceLock::new(),
        }
    }

    /// Bounds every node connection together at `total`, of which
    /// `shared` are kept for [`Use::Shared`] ones; the first call counts.
    pub fn limit_descriptors(&self, total: usize, shared: usize) {
        let _ = self.fds.set(FdShare {
            total,
            all: Arc::new(Semaphore::new(total)),
            own: Arc::new(Semaphore::new(total.saturating_sub(shared))),
        });
    }

    pub fn per_node(&self) -> usize {
        self.per_node
    }

    /// Counts one more connection to `addr` for `use_`, waiting until
    /// `deadline` for one to close while a bound is reached.
    pub async fn take(
        &self,
        addr: &NodeAddr,
        use_: Use,
        deadline: Instant,
    ) -> Result<Counted, io::Error> {
        let node = self.node(addr);
        let full = || Full {
            per_node: self.per_node,
            addr: addr.clone(),
        };
        let node = match crate::time::timeout_at(deadline, node.acquire_owned()).await {
            Ok(Ok(counted)) => counted,
            // The semaphore is never closed; a timeout is the bound.
            Ok(Err(_)) | Err(_) => return Err(io::Error::other(full())),
        };
        let fds = match self.fds.get() {
            Some(share) => Some(share.take(use_, deadline).await?),
            None => None,
        };
        Ok(Counted {
            _node: node,
            _fds: fds,
        })
    }

    /// The semaphore of `addr`. Nodes with no open connection are
    /// forgotten whenever a new one is added, so departed nodes do not
    /// pile up.
    fn node(&self, addr: &NodeAddr) -> Arc<Semaphore> {
        let mut nodes = self.nodes.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(node) = nodes.get(addr) {
            return node.clone();
        }
        // A permit holds its semaphore: one held only here counts nothing.
        nodes.retain(|_, node| Arc::strong_count(node) > 1);
        let node = Arc::new(Semaphore::new(self.per_node));
        nodes.insert(addr.clone(), node.clone());
        node
    }

    /// Connections to `addr` open now.
    pub fn open(&self, addr: &NodeAddr) -> usize {
        let nodes = self.nodes.lock().unwrap_or_else(|e| e.into_inner());
        nodes
            .get(addr)
            .map_or(0, |n| self.per_node.saturating_sub(n.available_permits()))
    }
}

// === impl FdShare ===

impl FdShare {
    async fn take(&self, use_: Use, deadline: Instant) -> io::Result<Fds> {
        let none = || io::Error::other(NoDescriptor { total: self.total });
        let own = match use_ {
            Use::Shared => None,
            Use::Client => {
                match crate::time::timeout_at(deadline, self.own.clone().acquire_owned()).await {
                    Ok(Ok(own)) => Some(own),
                    Ok(Err(_)) | Err(_) => return Err(none()),
                }
            }
        };
        match crate::time::timeout_at(deadline, self.all.clone().acquire_owned()).await {
            Ok(Ok(all)) => Ok(Fds {
                _all: all,
                _own: own,
            }),
            Ok(Err(_)) | Err(_) => Err(none()),
        }
    }
}

/// Whether `e` is a bound's error (an I/O error carrying a [`Full`] or a
/// [`NoDescriptor`]): the node is not at fault.
pub fn is_full(e: &io::Error) -> bool {
    e.get_ref()
        .is_some_and(|inner| inner.is::<Full>() || inner.is::<NoDescriptor>())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn the_bound_waits_then_fails_and_a_closed_connection_frees_a_place() {
        let quota = NodeQuota::new(2);
        let addr: NodeAddr = "127.0.0.1:7000".parse().unwrap();
        let soon = || Instant::now() + Duration::from_millis(20);
        let a = quota.take(&addr, Use::Client, soon()).await.unwrap();
        let _b = quota.take(&addr, Use::Client, soon()).await.unwrap();
        assert_eq!(quota.open(&addr), 2);
        let err = quota.take(&addr, Use::Client, soon()).await.unwrap_err();
        assert!(is_full(&err));
        assert!(err.to_string().contains("backend.max_connections_per_node"));
        drop(a);
        assert!(quota.take(&addr, Use::Client, soon()).await.is_ok());
    }

    #[tokio::test]
    async fn clients_connections_leave_the_shared_part_of_the_descriptors() {
        let quota = NodeQuota::new(100);
        quota.limit_descriptors(3, 1);
        let soon = || Instant::now() + Duration::from_millis(20);
        let node = |port: u16| -> NodeAddr { format!("127.0.0.1:{port}").parse().unwrap() };
        let a = quota.take(&node(1), Use::Client, soon()).await.unwrap();
        let _b = quota.take(&node(2), Use::Client, soon()).await.unwrap();
        let err = quota.take(&node(3), Use::Client, soon()).await.unwrap_err();
        assert!(is_full(&err));
        assert!(err.to_string().contains("RLIMIT_NOFILE"), "{err}");
        // The last place is a shared connection's.
        let shared = quota.take(&node(3), Use::Shared, soon()).await.unwrap();
        assert!(quota.take(&node(4), Use::Shared, soon()).await.is_err());
        drop(a);
        assert!(quota.take(&node(4), Use::Client, soon()).await.is_ok());
        drop(shared);
        assert!(quota.take(&node(5), Use::Shared, soon()).await.is_ok());
    }
}
