//! The bound on connections to one node, counted across every worker and
//! every kind of connection (shared, dedicated, subscription links,
//! tracking clients' private ones, MONITOR): `backend.max_connections_per_node`.
//! A connection holds a [`Counted`] for as long as it is open; past the
//! bound, opening one waits for another to close, within the request's
//! deadline, then fails with an error naming the setting, before the node
//! itself would refuse a connection at its `maxclients` (which would reach
//! whichever client asked next, not the one holding many).

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex};

use orthrus_cluster::NodeAddr;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// One open connection's place in its node's count; dropping it frees the
/// place.
pub type Counted = OwnedSemaphorePermit;

/// The process's count of open connections per node.
pub struct NodeQuota {
    per_node: usize,
    nodes: Mutex<HashMap<NodeAddr, Arc<Semaphore>>>,
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

// === impl NodeQuota ===

impl NodeQuota {
    pub fn new(per_node: usize) -> NodeQuota {
        NodeQuota {
            per_node,
            nodes: Mutex::new(HashMap::new()),
        }
    }

    pub fn per_node(&self) -> usize {
        self.per_node
    }

    /// Counts one more connection to `addr`, waiting until `deadline` for
    /// one to close while the bound is reached.
    pub async fn take(&self, addr: &NodeAddr, deadline: Instant) -> Result<Counted, Full> {
        let node = self.node(addr);
        let full = || Full {
            per_node: self.per_node,
            addr: addr.clone(),
        };
        match crate::time::timeout_at(deadline, node.acquire_owned()).await {
            Ok(Ok(counted)) => Ok(counted),
            // The semaphore is never closed; a timeout is the bound.
            Ok(Err(_)) | Err(_) => Err(full()),
        }
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

/// Whether `e` is the bound's error (an I/O error carrying a [`Full`]).
pub fn is_full(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<Full>())
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
        let a = quota.take(&addr, soon()).await.unwrap();
        let _b = quota.take(&addr, soon()).await.unwrap();
        assert_eq!(quota.open(&addr), 2);
        let err = quota.take(&addr, soon()).await.unwrap_err();
        assert!(err.to_string().contains("backend.max_connections_per_node"));
        drop(a);
        assert!(quota.take(&addr, soon()).await.is_ok());
    }
}
