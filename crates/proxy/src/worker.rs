//! What every task of one worker shares: the process-wide state, the
//! worker's index, and its connections to the cluster's nodes. Built once
//! per worker thread; nothing in it is locked or crosses a thread.

use std::rc::Rc;
use std::sync::Arc;

use orthrus_cluster::{NodeAddr, SlotMap};

use crate::config::Config;

use crate::node::Env;
use crate::node::dedicated::DedicatedPool;
use crate::node::pool::Pool;
use crate::observe::latency::Latency;
use crate::observe::stats::WorkerStats;
use crate::process::{Held, Shared};
use crate::route::table::CommandTable;

/// What every task of a worker shares.
pub struct WorkerCtx {
    pub shared: Arc<Shared>,
    pub index: usize,
    pub pool: Pool,
    pub dedicated: Rc<DedicatedPool>,
}

// === impl WorkerCtx ===

impl WorkerCtx {
    pub fn new(shared: Arc<Shared>, index: usize) -> WorkerCtx {
        let env = Rc::new(Env::new(shared.clone(), index));
        let backend = &shared.settings.raw.backend;
        WorkerCtx {
            pool: Pool::new(env.clone(), backend.connections_per_node),
            dedicated: Rc::new(DedicatedPool::new(env, backend.dedicated_per_node)),
            shared,
            index,
        }
    }

    /// The same worker's context with `pool` for the cluster's nodes (a
    /// tracking client's own connections).
    pub fn with_pool(&self, pool: Pool) -> WorkerCtx {
        WorkerCtx {
            shared: self.shared.clone(),
            index: self.index,
            pool,
            dedicated: self.dedicated.clone(),
        }
    }

    /// Runs `task` on this worker, its polls counted.
    pub fn spawn<F: std::future::Future + 'static>(
        &self,
        task: F,
    ) -> tokio::task::JoinHandle<F::Output> {
        self.pool.env().spawn(task)
    }

    /// The current slot map: the worker's copy, the one way worker code
    /// reads it (as [`Self::commands`] and [`Self::live`] for theirs).
    pub fn slots(&self) -> Held<SlotMap> {
        self.pool.env().slots()
    }

    pub fn commands(&self) -> Held<CommandTable> {
        self.pool.env().commands()
    }

    /// The settings SIGHUP can change.
    pub fn live(&self) -> Held<Config> {
        self.pool.env().live()
    }

    pub fn stats(&self) -> &WorkerStats {
        self.pool.env().stats()
    }

    pub fn latency(&self) -> &Latency {
        self.shared.latency.worker(self.index)
    }

    /// Forgets what this worker keeps per node (shared connections, idle
    /// dedicated ones, back-off) for nodes the topology no longer has.
    /// Nothing while the slot map is empty (no discovery yet, or none that
    /// worked).
    pub fn forget_departed_nodes(&self) {
        let env = self.pool.env();
        let map = env.slots();
        if map.nodes().is_empty() {
            return;
        }
        let keep = |addr: &NodeAddr| map.node(addr).is_some();
        self.pool.prune(keep);
        self.dedicated.prune(keep);
        env.prune(keep);
    }
}
