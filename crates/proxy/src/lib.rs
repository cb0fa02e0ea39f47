//! orthrus: a Redis Cluster proxy. Plain Redis clients connect to it and
//! speak RESP as if it were one redis-server; orthrus routes each command
//! to the master that owns its keys, follows the cluster's redirections and
//! returns the replies in order.
//!
//! # Layout
//!
//! - [`config`]: the configuration struct, its layers (file, environment,
//!   flags) and validation.
//! - [`server`]: listeners, worker threads, start and stop.
//! - `worker`: one thread-per-core worker and its accept loop.
//! - `session`: a client connection (the reader here, the writer in
//!   `session/writer.rs`; replies in request order).
//! - `command_table` / `command_kind`: where each command's keys are and
//!   how orthrus handles it.
//! - `split` / `fanout` / `scan`: cross-slot multi-key commands split per
//!   slot, keyspace-wide commands sent to every master, SCAN across masters.
//! - `forward`: sending to the owning node and following MOVED, ASK,
//!   TRYAGAIN and CLUSTERDOWN.
//! - `pool` / `backend`: the multiplexed, pipelined backend connections.
//! - `dedicated` / `blocking`: connections held by one client (blocking
//!   commands, WATCH), from a bounded per-node pool.
//! - `transaction`: MULTI/EXEC queued by orthrus and sent in one piece;
//!   WATCH on a dedicated connection.
//! - `pubsub`: subscriptions on dedicated connections, followed when
//!   their slot moves or their node fails.
//! - `topology`: discovery and refresh of the slot map.
//! - `local` / `info` / `cluster_cmd`: commands answered by orthrus itself
//!   (the handshake, INFO, CLUSTER as a one-node cluster).
//! - `clients`: the registry of connected clients (CLIENT LIST/KILL).
//! - `shared` / `stats`: state shared by the workers, counters and
//!   instantaneous ops/sec.
//! - `latency` / `slowlog`: per-family and per-node latency histograms, and
//!   the SLOWLOG.
//! - `admin` / `metrics`: the admin HTTP endpoint (`/metrics`, `/healthz`,
//!   `/readyz`) on its own thread, and the Prometheus text it serves.
//! - `node_client`: a small client for topology and handshake queries.

// The modules below `server` are private; within them `pub` means "offered
// to the rest of the crate".
#![allow(unreachable_pub)]

pub mod config;
pub mod server;

mod admin;
mod backend;
mod blocking;
mod clients;
mod cluster_cmd;
mod command_kind;
mod command_table;
mod dedicated;
mod fanout;
mod forward;
mod info;
mod latency;
mod local;
mod metrics;
mod node_client;
mod pool;
mod pubsub;
mod scan;
mod session;
mod shared;
mod slowlog;
mod split;
mod stats;
mod topology;
mod transaction;
mod worker;

pub use config::{Config, Settings};
pub use server::{bind, run};
