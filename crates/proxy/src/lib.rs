//! orthrus: a Redis Cluster proxy. Plain Redis clients connect to it and
//! speak RESP as if it were one redis-server; orthrus routes each command
//! to the master that owns its keys, follows the cluster's redirections and
//! returns the replies in order.
//!
//! # Layout
//!
//! Modules in the order a request meets them; each imports only modules
//! listed after it.
//!
//! - [`rebalance`]: `orthrus rebalance`, a tool that moves slots between
//!   masters by the load a running orthrus measures; uses `node`'s client.
//! - [`server`]: listeners, worker threads (each a current-thread runtime
//!   with its own accept loop), start and stop.
//! - `http`: the admin HTTP endpoint (`/metrics`, `/healthz`, `/readyz`) on
//!   its own thread, and the Prometheus text it serves.
//! - `session`: a client connection, one task: reads and parses requests,
//!   starts each through one dispatch (route -> handler), writes replies in
//!   request order.
//! - `cmd`: the command handlers (local answers, INFO, CLUSTER emulation,
//!   cross-slot split, fan-out, SCAN, blocking, pub/sub, transactions).
//! - `client`: a client's state (protocol, auth, name, transaction,
//!   subscriptions, push queue) and the reply queue entry, `Pending`.
//! - `worker`: what every task of a worker shares (`WorkerCtx`).
//! - `node`: the way to the cluster's nodes: multiplexed shared
//!   connections, the pool, dedicated connections, forwarding with MOVED/ASK
//!   and retries, a small node client, topology discovery.
//! - `process`: state shared by every worker (`Shared`: settings, slot map,
//!   command table, counters), read-mostly.
//! - `scripts`: the Lua script bodies orthrus has seen, by SHA1, bounded.
//! - `observe`: counters, latency histograms, SLOWLOG, the client registry.
//! - `route`: the command table and the rules for each command. Pure.
//! - [`config`]: the configuration struct, its layers (file, environment,
//!   flags) and validation.
//! - [`acl`]: users with permissions in Redis's ACL rule syntax: the rule
//!   parser and the checks (command, category, keys, channels). Pure.

// The modules below `server` are private; within them `pub` means "offered
// to the rest of the crate".
#![allow(unreachable_pub)]
// No input may panic the proxy: no unwrap, expect, panic or unchecked
// indexing outside tests (allowed locally only where a reason is written).
// Arithmetic on numbers a client sends is checked where they enter: the
// `route` module and the handlers that take counts and cursors deny
// unchecked arithmetic themselves.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::indexing_slicing
    )
)]

pub mod acl;
pub mod config;
pub mod rebalance;
pub mod server;

mod cache;
mod client;
mod cmd;
mod http;
mod node;
mod observe;
mod process;
mod route;
mod scripts;
mod session;
mod time;
mod worker;

pub use config::{Config, Settings};
pub use server::{bind, run};
