//! Client-side caching (CLIENT TRACKING): a tracking client's own
//! connections and the invalidations they bring.
//!
//! In BCAST mode (without NOLOOP) a node sends the invalidations of every
//! write under the prefixes to every connection tracking them, whoever
//! read the keys: the client's commands go over the worker's shared
//! connections, and tracking is turned on on the client's links (one RESP3
//! connection per master, [`Links`]), which carry its subscriptions too.
//! The invalidations come as pushes there, for a RESP2 client as well.
//! NOLOOP needs the writes on the tracking connection itself, so a BCAST
//! client with NOLOOP tracks as in the default mode.
//!
//! In the default mode Redis remembers the keys *a connection* read, so a
//! tracking client gets
//! a private pool ([`Pool::private`]): one connection per master (and per
//! protocol it used), opened on first use, each set up with `CLIENT
//! TRACKING ON` and the client's options, and every command of the client
//! goes over them (its [`Tracking::ctx`]). A RESP3 connection receives its
//! invalidations as pushes between replies; a RESP2 one cannot, so it
//! redirects them (on the node) to a second, RESP3 connection that only
//! listens. In BCAST mode a connection to every master is kept open, as
//! invalidations come from any writer.
//!
//! Invalidations go to the client as RESP3 pushes, or with REDIRECT to the
//! client it names, through the registry (that client may be on another
//! worker); a REDIRECT client that left makes the tracking client's
//! redirect broken, as in Redis. A tracking connection that fails, one to
//! a node gone from the topology (closed with the worker's ones to it),
//! or a request of the client answered with MOVED (its slot moved: the new
//! owner does not know what the client read), gives the client an
//! invalidation of every key, and the connection is opened again on next
//! use.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use orthrus_cluster::NodeAddr;
use orthrus_resp::{Protocol, Request, encode};

use crate::acl::{self, Access};
use crate::client::PushSink;
use crate::client::invalidation::{invalidate_push, invalidation, redir_broken};
use crate::client::subscriptions::Links;
use crate::node::answer::error_reply;
use crate::node::client::Dialect;
use crate::node::conn::{self, Hooks};
use crate::node::forward::send_frames;
use crate::node::pool::Pool;
use crate::node::stream::NodeStream;
use crate::observe::clients::Invalidation;
use crate::process::Shared;
use crate::route::table::Route;
use crate::worker::WorkerCtx;

mod options;

pub use options::Options;

/// How often a BCAST client's connections to every master are looked at
/// (a master that failed over, a connection lost).
const BCAST_KEEP: Duration = Duration::from_secs(1);

/// A client's tracking, from CLIENT TRACKING ON to OFF, RESET or its exit.
pub struct Tracking {
    state: Rc<State>,
    /// The worker's context with the client's own pool (the worker's own
    /// when tracking is on the links): every command of a tracking client
    /// is started with it.
    pub ctx: Rc<WorkerCtx>,
    /// The client's links, when tracking is on them.
    links: Option<Links>,
}

/// What the connections' hooks and the client share.
struct State {
    /// False once tracking is off: connections still finishing requests
    /// drop what they receive.
    on: Cell<bool>,
    options: RefCell<Options>,
    /// CLIENT TRACKING REDIRECT (an orthrus client id; 0: none).
    redirect: Cell<u64>,
    /// The REDIRECT client left (TRACKINGINFO `broken_redirect`).
    broken: Cell<bool>,
    /// CLIENT CACHING was given for the next command.
    caching: Cell<bool>,
    /// The client's protocol and database: its connections' set-up.
    dialect: Cell<Dialect>,
    push: PushSink,
    shared: Arc<Shared>,
    /// Per node, the id (on that node) of the connection that listens for
    /// the RESP2 connection's invalidations.
    listeners: RefCell<HashMap<NodeAddr, u64>>,
    /// The client's user when its key rules apply: its invalidations name
    /// only keys it may read ([`Tracking::set_reader`]).
    reader: RefCell<Option<Arc<acl::User>>>,
}

// === impl Tracking ===

impl Tracking {
    /// Whether tracking with `options` goes on the client's links (BCAST
    /// without NOLOOP).
    pub fn on_links(options: &Options) -> bool {
        options.bcast && !options.noloop
    }

    /// Turns tracking on for a client of `dialect` whose pushes go to `push`:
    /// on `links` when given (see [`Tracking::on_links`]), else over a
    /// private pool.
    pub fn new(
        ctx: &Rc<WorkerCtx>,
        options: Options,
        redirect: u64,
        dialect: Dialect,
        push: PushSink,
        links: Option<Links>,
    ) -> Tracking {
        let bcast = options.bcast;
        let state = Rc::new(State {
            on: Cell::new(true),
            options: RefCell::new(options),
            redirect: Cell::new(redirect),
            broken: Cell::new(false),
            caching: Cell::new(false),
            dialect: Cell::new(dialect),
            push,
            shared: ctx.shared.clone(),
            listeners: RefCell::new(HashMap::new()),
            reader: RefCell::new(None),
        });
        ctx.stats().tracking_clients.fetch_add(1, Ordering::Relaxed);
        if let Some(links) = links {
            ctx.spawn(keep_links(
                Rc::downgrade(ctx),
                Rc::downgrade(&state),
                links.clone(),
            ));
            return Tracking {
                state,
                ctx: ctx.clone(),
                links: Some(links),
            };
        }
        let pool = Pool::private(ctx.pool.env().clone(), state.clone());
        let own = ctx.with_pool(pool);
        if bcast {
            own.spawn(keep_bcast(Rc::downgrade(&own), Rc::downgrade(&state)));
        }
        Tracking {
            state,
            ctx: own,
            links: None,
        }
    }

    /// Resolves once the client's connections are ready: in BCAST mode
    /// one to every master (invalidations come from any writer), so that
    /// a write right after the `+OK` is seen.
    pub fn ready(&self) -> impl Future<Output = Result<(), Bytes>> + use<> {
        let ctx = self.ctx.clone();
        let dialect = self.state.dialect.get();
        let bcast = self.state.options.borrow().bcast;
        let on_links = self.links.as_ref().map(|links| {
            let on = {
                let options = self.state.options.borrow();
                options.command(&options.prefixes, None)
            };
            let hooks: Weak<dyn Hooks> = Rc::downgrade(&self.state) as Weak<State>;
            links.track(hooks, on, ctx.shared.masters())
        });
        async move {
            if let Some(tracked) = on_links {
                return tracked.await;
            }
            if !bcast {
                return Ok(());
            }
            let masters = ctx.shared.masters();
            let targets: Vec<(NodeAddr, Dialect)> =
                masters.into_iter().map(|addr| (addr, dialect)).collect();
            exchange(&ctx.pool, &targets, |_| PING.clone()).await
        }
    }

    /// CLIENT TRACKING ON again: new options, prefixes added, another
    /// REDIRECT. Runs when the client has nothing in flight (the command is
    /// deferred), so every connection's set-up is done and none is busy.
    pub fn update(
        &self,
        options: Options,
        added: Vec<Bytes>,
        redirect: u64,
    ) -> impl Future<Output = Result<(), Bytes>> + use<> {
        let (ctx, state) = (self.ctx.clone(), self.state.clone());
        let on_links = self.links.clone();
        async move {
            if let Some(links) = on_links {
                return update_links(&links, &state, options, added, redirect).await;
            }
            let open = ctx.pool.open_conns();
            // Connections still opening are set up once this answers.
            exchange(&ctx.pool, &open, |_| PING.clone()).await?;
            let listeners = state.listeners.borrow().clone();
            let result = exchange(&ctx.pool, &open, |(addr, dialect)| {
                let listener = match dialect.proto {
                    Protocol::Resp2 => listeners.get(addr).copied(),
                    Protocol::Resp3 => None,
                };
                options.command(&added, listener)
            })
            .await;
            let mut current = state.options.borrow_mut();
            let mut prefixes = std::mem::take(&mut current.prefixes);
            for p in added {
                if !prefixes.contains(&p) {
                    prefixes.push(p);
                }
            }
            *current = Options {
                prefixes,
                ..options
            };
            state.redirect.set(redirect);
            state.broken.set(false);
            result
        }
    }

    pub fn options(&self) -> Options {
        self.state.options.borrow().clone()
    }

    /// CLIENT GETREDIR.
    pub fn redirect(&self) -> u64 {
        self.state.redirect.get()
    }

    /// The client switched protocols (HELLO) or databases (SELECT): its
    /// pushes change form, and its next commands go over connections of
    /// the new protocol and database (set up for tracking as they open).
    pub fn set_dialect(&self, dialect: Dialect) {
        self.state.dialect.set(dialect);
    }

    /// The user whose key rules bound the keys the client's invalidations
    /// name (`None`: every key), set when tracking starts and at each AUTH.
    /// A node sends a BCAST client the invalidation of every key written
    /// under its prefixes, whoever may read it; Redis filters them by the
    /// subscriber's read permission since 2026 (7.0 sent them all), and so
    /// does orthrus: a key the user may not read is left out, an
    /// invalidation left with none is not sent.
    pub fn set_reader(&self, user: Option<Arc<acl::User>>) {
        *self.state.reader.borrow_mut() = user;
    }

    /// CLIENT CACHING YES|NO (checked against the mode already).
    pub fn set_caching(&self) {
        self.state.caching.set(true);
    }

    /// Before a command of the client starts: a CLIENT CACHING given for
    /// it goes first on the connection that will run it (every master's
    /// for a command that is not for one slot), and is then spent. CLIENT
    /// commands leave it for the next command, as in Redis.
    pub fn before(&self, req: &Request, route: &Route) {
        if !self.state.caching.get()
            || req
                .arg(0)
                .is_some_and(|n| n.eq_ignore_ascii_case(b"client"))
        {
            return;
        }
        self.state.caching.set(false);
        let options = self.state.options.borrow();
        let frame = match (options.optin, options.optout) {
            (true, _) => CACHING_YES.clone(),
            (_, true) => CACHING_NO.clone(),
            _ => return,
        };
        let dialect = self.state.dialect.get();
        let masters = match route {
            Route::Slot(place) | Route::Blocking(place) => self
                .ctx
                .slots_of(place.upstream)
                .master(place.slot)
                .into_iter()
                .cloned()
                .collect(),
            Route::Local(_)
            | Route::Reject(_)
            | Route::Transaction
            | Route::Subscription(_)
            | Route::Admin(_) => Vec::new(),
            _ => self.ctx.shared.masters(),
        };
        for addr in masters {
            let rx = send_frames(&self.ctx.pool, &addr, &frame, dialect, false, 1);
            // Kept until written (a dropped reply slot is not sent).
            self.ctx.spawn(async move {
                let _ = rx.await;
            });
        }
    }

    /// CLIENT TRACKINGINFO, in Redis 7.0's form.
    pub fn info(tracking: Option<&Tracking>, proto: Protocol) -> Bytes {
        let mut out = BytesMut::new();
        encode::map_header(&mut out, 3, proto);
        encode::bulk(&mut out, b"flags");
        let (flags, redirect, prefixes) = match tracking {
            None => (vec!["off"], -1, Vec::new()),
            Some(t) => {
                let s = &t.state;
                let options = s.options.borrow();
                let mut flags = options.flags();
                let caching = s.caching.get();
                if options.optin && caching {
                    flags.push("caching-yes");
                }
                if options.optout && caching {
                    flags.push("caching-no");
                }
                if options.noloop {
                    flags.push("noloop");
                }
                if s.broken.get() {
                    flags.push("broken_redirect");
                }
                let redirect = i64::try_from(s.redirect.get()).unwrap_or(i64::MAX);
                (flags, redirect, options.prefixes.clone())
            }
        };
        encode::set_header(&mut out, flags.len(), proto);
        for flag in flags {
            encode::bulk(&mut out, flag.as_bytes());
        }
        encode::bulk(&mut out, b"redirect");
        encode::integer(&mut out, redirect);
        encode::bulk(&mut out, b"prefixes");
        encode::array_header(&mut out, prefixes.len());
        for p in &prefixes {
            encode::bulk(&mut out, p);
        }
        out.freeze()
    }
}

impl Drop for Tracking {
    fn drop(&mut self) {
        // Connections still finishing requests close when they are done;
        // what they receive meanwhile is no longer the client's.
        self.state.on.set(false);
        if let Some(links) = &self.links {
            links.untrack();
        }
        self.ctx
            .stats()
            .tracking_clients
            .fetch_sub(1, Ordering::Relaxed);
    }
}

// === impl State ===

impl State {
    /// Hands an invalidation to whoever gets the client's, with the keys
    /// its user may not read left out.
    fn relay(&self, keys: Invalidation) {
        let keys = match (keys, &*self.reader.borrow()) {
            (Some(keys), Some(user)) => {
                let readable: Vec<Bytes> = keys
                    .into_iter()
                    .filter(|key| user.may_access_key(key, Access::READ))
                    .collect();
                if readable.is_empty() {
                    return;
                }
                Some(readable)
            }
            (keys, _) => keys,
        };
        let redirect = self.redirect.get();
        let resp3 = self.dialect.get().proto == Protocol::Resp3;
        if redirect != 0 {
            if !self.shared.clients.send_invalidation(redirect, keys) {
                self.broken.set(true);
                if resp3 {
                    self.push.push(redir_broken(redirect));
                }
            }
        } else if resp3 {
            self.push.push(invalidate_push(&keys));
        }
    }
}

impl Hooks for State {
    fn prepare<'a>(
        &'a self,
        addr: &'a NodeAddr,
        dialect: Dialect,
        shared: &'a Shared,
        stream: &'a mut NodeStream,
    ) -> Pin<Box<dyn Future<Output = io::Result<Option<NodeStream>>> + 'a>> {
        Box::pin(async move {
            let (side, listener) = match conn::push_side(addr, dialect, shared).await? {
                Some((side, id)) => (Some(side), Some(id)),
                None => (None, None),
            };
            let frame = {
                let options = self.options.borrow();
                options.command(&options.prefixes, listener)
            };
            conn::track_on(stream, &frame).await?;
            if let Some(id) = listener {
                self.listeners.borrow_mut().insert(addr.clone(), id);
            }
            Ok(side)
        })
    }

    fn push(&self, _addr: &NodeAddr, frame: Bytes) {
        if !self.on.get() {
            return;
        }
        if let Some(keys) = invalidation(&frame) {
            self.relay(keys);
        }
    }

    fn lost(&self, addr: &NodeAddr) {
        if self.on.get() {
            tracing::info!(node = %addr, "tracking connection lost; invalidating every key of the client");
            self.relay(None);
        }
    }

    fn moved(&self) {
        if self.on.get() {
            self.relay(None);
        }
    }
}

const PING: Bytes = Bytes::from_static(b"*1\r\n$4\r\nPING\r\n");
const CACHING_YES: Bytes =
    Bytes::from_static(b"*3\r\n$6\r\nCLIENT\r\n$7\r\nCACHING\r\n$3\r\nyes\r\n");
const CACHING_NO: Bytes =
    Bytes::from_static(b"*3\r\n$6\r\nCLIENT\r\n$7\r\nCACHING\r\n$2\r\nno\r\n");

/// Sends `frame(target)` on the private pool's connection to each target
/// and waits for every reply; the first failure is the error.
async fn exchange(
    pool: &Pool,
    targets: &[(NodeAddr, Dialect)],
    frame: impl Fn(&(NodeAddr, Dialect)) -> Bytes,
) -> Result<(), Bytes> {
    let sent: Vec<_> = targets
        .iter()
        .map(|t| {
            (
                t.0.clone(),
                send_frames(pool, &t.0, &frame(t), t.1, false, 1),
            )
        })
        .collect();
    let mut result = Ok(());
    for (addr, rx) in sent {
        let failure = match rx.await {
            Ok(Ok(delivered)) if delivered.frame.first() == Some(&b'-') => Some(
                String::from_utf8_lossy(delivered.frame.get(1..).unwrap_or_default())
                    .trim_end()
                    .to_owned(),
            ),
            Ok(Ok(_)) => None,
            Ok(Err(e)) => Some(e.to_string()),
            Err(_) => Some("connection closed".to_owned()),
        };
        if let (Some(why), Ok(())) = (failure, &result) {
            result = Err(error_reply(&format!(
                "ERR orthrus: cannot track keys on node {addr}: {why}"
            )));
        }
    }
    result
}

/// CLIENT TRACKING ON again for a client tracking on its links.
async fn update_links(
    links: &Links,
    state: &State,
    options: Options,
    added: Vec<Bytes>,
    redirect: u64,
) -> Result<(), Bytes> {
    if options.noloop {
        return Err(error_reply(
            "ERR orthrus: NOLOOP must be given when BCAST tracking is turned on",
        ));
    }
    let mut prefixes = state.options.borrow().prefixes.clone();
    for p in &added {
        if !prefixes.contains(p) {
            prefixes.push(p.clone());
        }
    }
    let result = links
        .retrack(
            options.command(&added, None),
            options.command(&prefixes, None),
        )
        .await;
    *state.options.borrow_mut() = Options {
        prefixes,
        ..options
    };
    state.redirect.set(redirect);
    state.broken.set(false);
    result
}

/// Keeps a link to every master while the client tracks on its links: a
/// new master (a failover) or a lost link gets one again.
async fn keep_links(ctx: Weak<WorkerCtx>, state: Weak<State>, links: Links) {
    loop {
        crate::time::sleep(BCAST_KEEP).await;
        let (Some(ctx), Some(state)) = (ctx.upgrade(), state.upgrade()) else {
            return;
        };
        if !state.on.get() {
            return;
        }
        let masters: Vec<NodeAddr> = ctx
            .shared
            .masters()
            .into_iter()
            .filter(|addr| ctx.pool.env().backing_off(addr).is_none())
            .collect();
        links.keep(&masters);
    }
}

/// Keeps a BCAST client's connection to every master open while it
/// tracks: a new master (a failover) or a lost connection gets one again.
async fn keep_bcast(ctx: Weak<WorkerCtx>, state: Weak<State>) {
    loop {
        crate::time::sleep(BCAST_KEEP).await;
        let (Some(ctx), Some(state)) = (ctx.upgrade(), state.upgrade()) else {
            return;
        };
        if !state.on.get() {
            return;
        }
        let dialect = state.dialect.get();
        for addr in ctx.shared.masters() {
            if ctx.pool.env().backing_off(&addr).is_none() {
                ctx.pool.open(&addr, dialect);
            }
        }
    }
}
