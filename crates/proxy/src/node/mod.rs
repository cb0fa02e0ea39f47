//! The way to the cluster's nodes. Everything here carries frames and
//! replies and knows nothing of clients.
//!
//! - [`conn`] — one multiplexed, pipelined connection shared by every client
//!   of a worker (requests queued, written together, replies matched FIFO).
//! - [`pool`] — a worker's shared connections, per node and protocol, with a
//!   back-off after failures.
//! - [`dedicated`] — connections lent to one client at a time (blocking
//!   commands, WATCH ... EXEC), from a bounded per-node pool.
//! - [`forward`] — sending a request to the node that owns its slot and
//!   following MOVED, ASK, TRYAGAIN and CLUSTERDOWN until there is a reply.
//! - [`frames`] — the one reader of a node's bytes: replies of one or more
//!   frames, and RESP3 pushes wherever they arrive.
//! - [`retry`] — the one retry driver: what a reply means, how long to
//!   wait and where to send next, inside the request's deadline.
//! - [`slot`] — reply slots: a one-shot channel within a worker thread, how a
//!   connection hands a reply to the client task waiting for it.
//! - [`client`] — a small one-request-at-a-time client (handshakes, topology
//!   queries).
//! - [`topology`] — discovery and refresh of the slot map, on its own thread.
//! - [`stream`] — a connection to a node, plain or TLS.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use orthrus_cluster::NodeAddr;

use orthrus_cluster::SlotMap;

use crate::config::Config;
use crate::observe::load::WorkerLoad;
use crate::observe::stats::{WorkerStats, worker_index};
use crate::process::cache::ReplyCache;
use crate::process::{Held, Local, Shared};
use crate::route::prefix::{Prefixes, Upstream};
use crate::route::table::CommandTable;

pub mod answer;
pub mod client;
pub mod conn;
pub mod dedicated;
pub mod forward;
pub mod frames;
pub mod pool;
pub mod replica;
pub mod retry;
pub mod slot;
pub mod stream;
pub mod target;
pub mod topology;

const FIRST_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// What one worker's node connections share: the process-wide state, the
/// worker's index (whose counters they bump) and which nodes are in
/// back-off after a failed connection.
pub struct Env {
    pub shared: Arc<Shared>,
    pub worker: usize,
    backoff: RefCell<HashMap<NodeAddr, Backoff>>,
    /// Turns over for every replica read, spreading them over a master's
    /// replicas.
    spread: Cell<usize>,
    /// The request being started is the last its client has sent for now:
    /// an idle connection may write it at once ([`conn`]).
    last_request: Cell<bool>,
    /// Sessions of this worker waiting for replies: while any other one
    /// is, requests are queued and written together, not one by one.
    waiting: Cell<usize>,
    /// Turns over whenever requests on this worker's connections failed
    /// unanswered (a connection lost, a node in back-off): they are sent
    /// again one by one as their clients follow them, and a session that
    /// sees it turn starts nothing new until what it has sent is answered.
    resends: Cell<u32>,
    /// This worker's copies of what every request reads.
    slots: Local<SlotMap>,
    /// The named upstreams' slot maps, upstream `n` at `n - 1`.
    named: Box<[Local<SlotMap>]>,
    commands: Local<CommandTable>,
    prefixes: Local<Prefixes>,
    live: Local<Config>,
    cache: Local<Option<Arc<ReplyCache>>>,
    /// This worker's per-slot load table.
    load: Arc<WorkerLoad>,
}

/// After a failure, connecting to the node again waits until `retry_at`.
#[derive(Clone, Copy)]
struct Backoff {
    delay: Duration,
    retry_at: Instant,
    /// The last attempt could not even connect (refused, timed out): the
    /// node is down, not just one of its connections.
    unreachable: bool,
}

/// Why a node gets no requests for now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Blocked {
    /// An established connection failed a moment ago.
    Lost,
    /// The last attempt to connect failed.
    Unreachable,
}

/// A finished request's reply, and how long of its time was spent waiting
/// for nodes (for the latency figures and the SLOWLOG).
pub struct Done {
    pub reply: Bytes,
    /// `None` when not measured.
    pub backend: Option<Duration>,
}

// === impl Env ===

impl Env {
    pub fn new(shared: Arc<Shared>, worker: usize) -> Env {
        Env {
            slots: Local::new(&shared.slots),
            named: shared
                .upstreams
                .iter()
                .map(|u| Local::new(&u.slots))
                .collect(),
            commands: Local::new(&shared.commands),
            prefixes: Local::new(&shared.prefixes),
            live: Local::new(&shared.live),
            cache: Local::new(&shared.cache),
            load: shared.load.worker(worker),
            shared,
            worker,
            backoff: RefCell::new(HashMap::new()),
            spread: Cell::new(worker),
            last_request: Cell::new(false),
            waiting: Cell::new(0),
            resends: Cell::new(0),
        }
    }

    /// The current slot map of the default upstream (the worker's copy:
    /// no arc-swap load).
    pub fn slots(&self) -> Held<SlotMap> {
        self.slots.get(&self.shared.slots)
    }

    /// The current slot map of `upstream`.
    #[inline]
    pub fn slots_of(&self, upstream: Upstream) -> Held<SlotMap> {
        let local = usize::from(upstream)
            .checked_sub(1)
            .and_then(|at| self.named.get(at));
        match (local, self.shared.named(upstream)) {
            (Some(local), Some(named)) => local.get(&named.slots),
            _ => self.slots(),
        }
    }

    /// The current command table.
    pub fn commands(&self) -> Held<CommandTable> {
        self.commands.get(&self.shared.commands)
    }

    /// The routes by key prefix.
    pub fn prefixes(&self) -> Held<Prefixes> {
        self.prefixes.get(&self.shared.prefixes)
    }

    /// `f` of the routes by key prefix (no handle taken: the request
    /// path's way).
    #[inline]
    pub fn with_prefixes<R>(&self, f: impl FnOnce(&Prefixes) -> R) -> R {
        self.prefixes.with(&self.shared.prefixes, f)
    }

    /// The settings SIGHUP can change.
    pub fn live(&self) -> Held<Config> {
        self.live.get(&self.shared.live)
    }

    /// `f` of the settings SIGHUP can change, with no handle kept.
    #[inline]
    pub fn with_live<R>(&self, f: impl FnOnce(&Config) -> R) -> R {
        self.live.with(&self.shared.live, f)
    }

    /// `f` of the reply cache, while it is on.
    #[inline]
    pub fn with_cache<R>(&self, f: impl FnOnce(&Arc<ReplyCache>) -> R) -> Option<R> {
        if !self
            .shared
            .cache_on
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            return None;
        }
        self.cache
            .with(&self.shared.cache, |cache| cache.as_ref().map(f))
    }

    /// This worker's per-slot load table.
    pub fn load(&self) -> &WorkerLoad {
        &self.load
    }

    #[allow(
        clippy::indexing_slicing,
        reason = "`Shared::new` makes one entry per worker, and `worker_index` keeps the index below their number"
    )]
    pub fn stats(&self) -> &WorkerStats {
        &self.shared.stats[worker_index(self.worker, self.shared.stats.len())]
    }

    /// Forgets the back-off of nodes for which `keep` is false.
    pub fn prune(&self, keep: impl Fn(&NodeAddr) -> bool) {
        self.backoff.borrow_mut().retain(|addr, _| keep(addr));
    }

    /// Whether connecting to `addr` must wait (it failed a moment ago), and
    /// why.
    pub fn backing_off(&self, addr: &NodeAddr) -> Option<Blocked> {
        let backoff = self.backoff.borrow();
        let b = backoff.get(addr).filter(|b| Instant::now() < b.retry_at)?;
        Some(if b.unreachable {
            Blocked::Unreachable
        } else {
            Blocked::Lost
        })
    }

    /// How long connecting to `addr` must still wait, if it must.
    pub fn backoff_left(&self, addr: &NodeAddr) -> Option<Duration> {
        let backoff = self.backoff.borrow();
        let left = backoff
            .get(addr)?
            .retry_at
            .checked_duration_since(Instant::now())?;
        (!left.is_zero()).then_some(left)
    }

    /// A connection to `addr` failed (`unreachable`: could not be made at
    /// all): back off before the next attempt.
    pub fn failed(&self, addr: &NodeAddr, unreachable: bool) {
        let mut backoff = self.backoff.borrow_mut();
        let delay = backoff
            .get(addr)
            .map_or(FIRST_BACKOFF, |b| (b.delay * 2).min(MAX_BACKOFF));
        backoff.insert(
            addr.clone(),
            Backoff {
                delay,
                retry_at: Instant::now() + delay,
                unreachable,
            },
        );
    }

    /// A different number each call, to spread reads over replicas.
    pub fn spread(&self) -> usize {
        let n = self.spread.get().wrapping_add(1);
        self.spread.set(n);
        n
    }

    /// Runs `task` on this worker, its polls counted (INFO's
    /// `orthrus_task_polls`).
    pub fn spawn<F: Future + 'static>(
        self: &Rc<Self>,
        task: F,
    ) -> tokio::task::JoinHandle<F::Output> {
        tokio::task::spawn_local(Polled {
            task: Box::pin(task),
            env: self.clone(),
        })
    }

    /// Says whether the request about to start is the last one its client
    /// has sent for now (set by the session around each request).
    pub fn set_last_request(&self, last: bool) {
        self.last_request.set(last);
    }

    pub fn last_request(&self) -> bool {
        self.last_request.get()
    }

    /// Requests on this worker's connections failed unanswered, to be sent
    /// again ([`Env::resends`]).
    pub fn note_resends(&self) {
        self.resends.set(self.resends.get().wrapping_add(1));
    }

    /// A number that changes whenever requests on this worker's
    /// connections failed unanswered: one of them sent again after a
    /// request its client sent later would reach the node out of order.
    pub fn resends(&self) -> u32 {
        self.resends.get()
    }

    /// A session starts (`true`) or stops waiting for replies.
    pub fn count_waiting(&self, waiting: bool) {
        let n = self.waiting.get();
        self.waiting.set(if waiting {
            n.saturating_add(1)
        } else {
            n.saturating_sub(1)
        });
    }

    /// Whether a session other than the caller (counted as waiting or
    /// not, `me`) waits for replies.
    pub fn others_waiting(&self, me: bool) -> bool {
        self.waiting.get() > usize::from(me)
    }

    /// A connection to `addr` works again: the node sent something back.
    pub fn connected(&self, addr: &NodeAddr) {
        self.backoff.borrow_mut().remove(addr);
    }
}

/// A task whose polls are counted in its worker's statistics.
struct Polled<F> {
    task: Pin<Box<F>>,
    env: Rc<Env>,
}

impl<F: Future> Future for Polled<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        WorkerStats::bump(&self.env.stats().task_polls);
        self.task.as_mut().poll(cx)
    }
}

// === impl Done ===

impl Done {
    /// A reply orthrus made without asking a node.
    pub fn local(reply: Bytes) -> Done {
        Done {
            reply,
            backend: Some(Duration::ZERO),
        }
    }

    pub fn from_nodes(reply: Bytes, backend: Duration) -> Done {
        Done {
            reply,
            backend: Some(backend),
        }
    }

    /// A reply whose backend time orthrus does not measure.
    pub fn unmeasured(reply: Bytes) -> Done {
        Done {
            reply,
            backend: None,
        }
    }
}
