//! The command handlers: what orthrus does with each kind of route the
//! command table gives. None of them knows the session; each takes the
//! request, the client's state and the worker's context, and returns the
//! reply to come as a [`Pending`](crate::client::Pending).
//!
//! - [`local`] — commands answered by orthrus itself (the handshake, CLIENT,
//!   SELECT, SLOWLOG, ...), with [`info`] (INFO) and [`cluster`] (CLUSTER as
//!   a one-node cluster at orthrus's own address).
//! - [`hotkeys`] — HOTKEYS over the whole cluster, and ORTHRUS HOTSLOTS.
//! - [`admin`] — administrative commands sent to the nodes, when
//!   `admin.passthrough` is on.
//! - [`split`] — cross-slot multi-key commands split per slot and merged.
//! - [`fanout`] — keyspace-wide commands sent to every master and merged.
//! - [`outbound`] — a request as forwarded: route prefixes cut, copies for
//!   the mirrors made; reached only by requests that passed every check.
//! - [`mirror`] — sending those copies to a route's mirror upstreams.
//! - [`scan`] — SCAN across the masters, the cursor naming the master.
//! - [`script`] — EVALSHA that loads a script orthrus has seen on a master
//!   answering `NOSCRIPT`, and SCRIPT EXISTS/FLUSH knowing those scripts.
//! - [`blocking`] — blocking commands on a dedicated connection.
//! - [`pubsub`] — the (un)subscribe commands and RESP2 subscriber mode.
//! - [`transaction`] — MULTI/EXEC/DISCARD/WATCH/UNWATCH.
//! - [`tracking`] — CLIENT TRACKING/CACHING/GETREDIR/TRACKINGINFO.
//! - [`reply`] — building orthrus's own replies and reading the parts of
//!   nodes' replies that merges need.

pub mod acl;
pub mod admin;
pub mod blocking;
pub mod cluster;
pub mod fanout;
pub mod hotkeys;
pub mod info;
pub mod local;
pub mod mirror;
pub mod outbound;
pub mod pubsub;
pub mod reply;
pub mod scan;
pub mod script;
pub mod split;
pub mod tracking;
pub mod transaction;
