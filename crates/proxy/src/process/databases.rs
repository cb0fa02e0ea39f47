//! How many databases the nodes of each upstream serve: a Redis 7 cluster
//! one, a Valkey 9 cluster its `cluster-databases`, a standalone server
//! its `databases`. Asked once per upstream, by `SELECT` on a connection
//! of the topology's (see `node::topology`), so that a client's `SELECT n`
//! is answered at once, as the nodes would answer it, and a request in a
//! database its key's upstream lacks is refused before it is sent.

use std::sync::OnceLock;

use crate::route::prefix::Upstream;

/// One upstream's databases, as its nodes answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Served {
    /// Databases 0 to `count - 1` are served.
    pub count: u32,
    /// The node's error for a database past them (or a negative one):
    /// Redis 7's `ERR SELECT is not allowed in cluster mode`, Valkey's
    /// `ERR DB index is out of range`.
    pub refusal: String,
}

/// Per upstream (the default one first), once known.
pub struct Databases {
    per_upstream: Box<[OnceLock<Served>]>,
}

impl Databases {
    pub fn new(upstreams: usize) -> Databases {
        Databases {
            per_upstream: (0..upstreams).map(|_| OnceLock::new()).collect(),
        }
    }

    /// What `upstream`'s nodes serve; `None` until asked.
    pub fn of(&self, upstream: Upstream) -> Option<&Served> {
        self.per_upstream.get(usize::from(upstream))?.get()
    }

    pub fn known(&self, upstream: Upstream) -> bool {
        self.of(upstream).is_some()
    }

    /// Records what `upstream`'s nodes answered (the first answer stays:
    /// the count is fixed in a node's configuration).
    pub fn learnt(&self, upstream: Upstream, served: Served) {
        if let Some(cell) = self.per_upstream.get(usize::from(upstream)) {
            let _ = cell.set(served);
        }
    }

    /// The error for a request in database `db` whose key goes to
    /// `upstream`, if its nodes lack it; none while not known (the
    /// connection's own `SELECT` then decides).
    pub fn refusal(&self, upstream: Upstream, db: u32) -> Option<&str> {
        self.of(upstream)
            .filter(|served| db >= served.count)
            .map(|served| served.refusal.as_str())
    }
}
