//! What every task of one worker shares: the process-wide state, the
//! worker's index, and its connections to the cluster's nodes. Built once
//! per worker thread; nothing in it is locked or crosses a thread.

use std::cell::RefCell;
use std::rc::{Rc, Weak};
use std::sync::Arc;

use orthrus_cluster::{NodeAddr, SlotMap};

use crate::config::Config;

use crate::node::Env;
use crate::node::dedicated::DedicatedPool;
use crate::node::pool::Pool;
use crate::observe::latency::Latency;
use crate::observe::stats::WorkerStats;
use crate::process::{Held, Shared};
use crate::route::prefix::{Prefixes, Upstream};
use crate::route::table::CommandTable;

/// What every task of a worker shares.
pub struct WorkerCtx {
    pub shared: Arc<Shared>,
    pub index: usize,
    pub pool: Pool,
    pub dedicated: Rc<DedicatedPool>,
    /// The contexts of the worker's tracking clients, each with its own
    /// pool (see [`Self::with_pool`]), pruned with the worker's.
    own_pools: Rc<RefCell<Vec<Weak<WorkerCtx>>>>,
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
            own_pools: Rc::default(),
        }
    }

    /// The same worker's context with `pool` for the cluster's nodes (a
    /// tracking client's own connections); its departed nodes are
    /// forgotten with the worker's for as long as it lives.
    pub fn with_pool(&self, pool: Pool) -> Rc<WorkerCtx> {
        let ctx = Rc::new(WorkerCtx {
            shared: self.shared.clone(),
            index: self.index,
            pool,
            dedicated: self.dedicated.clone(),
            own_pools: self.own_pools.clone(),
        });
        let mut own = self.own_pools.borrow_mut();
        own.retain(|c| c.strong_count() > 0);
        own.push(Rc::downgrade(&ctx));
        ctx
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

    /// The current slot map of `upstream`.
    pub fn slots_of(&self, upstream: Upstream) -> Held<SlotMap> {
        self.pool.env().slots_of(upstream)
    }

    pub fn commands(&self) -> Held<CommandTable> {
        self.pool.env().commands()
    }

    /// The routes by key prefix (SIGHUP may replace them).
    pub fn prefixes(&self) -> Held<Prefixes> {
        self.pool.env().prefixes()
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

    /// Forgets what this worker keeps per node (shared connections, those
    /// of its tracking clients' own pools, idle dedicated ones, back-off)
    /// for nodes no upstream's topology has any longer. A slot map still
    /// empty (no discovery yet, or none that worked) is left out: no
    /// request has gone to its nodes. Nothing while every map is empty.
    pub fn forget_departed_nodes(&self) {
        let env = self.pool.env();
        let maps: Vec<_> = self
            .shared
            .upstream_maps()
            .into_iter()
            .map(|(_, _, map)| map)
            .filter(|map| !map.nodes().is_empty())
            .collect();
        if maps.is_empty() {
            return;
        }
        let keep = |addr: &NodeAddr| maps.iter().any(|map| map.node(addr).is_some());
        self.pool.prune(keep);
        // Taken out first: a pool's hooks run as it is pruned.
        let own: Vec<Rc<WorkerCtx>> = {
            let mut own = self.own_pools.borrow_mut();
            own.retain(|c| c.strong_count() > 0);
            own.iter().filter_map(Weak::upgrade).collect()
        };
        for ctx in own {
            ctx.pool.prune(keep);
        }
        self.dedicated.prune(keep);
        env.prune(keep);
    }
}
