//! Throwaway `redis-server` processes and Redis Clusters on loopback, for
//! tests, the load driver and the demo.
//!
//! Every node runs in its own temporary directory, on ports the OS reported
//! free (never fixed ports, never `port + 10000` for the cluster bus), with
//! persistence off. Dropping a [`RedisNode`] or a [`Cluster`] SIGKILLs its
//! processes and deletes their directories, also when a test panics; on
//! Linux the kernel also kills them if this process is killed. Every
//! wait is bounded and fails with an error that says what it last saw.
//!
//! ```no_run
//! use orthrus_devcluster::{Cluster, ClusterSpec};
//! # fn main() -> Result<(), orthrus_devcluster::DevError> {
//! let cluster = Cluster::start(ClusterSpec::new(3, 1))?;
//! let owner = cluster.master_of_slot(0)?;
//! cluster.nodes()[owner].cmd_ok(&["SET", "{a}x", "1"])?;
//! # Ok(()) }
//! ```
//!
//! # Layout
//!
//! - `error`: [`DevError`], the library's one error type.
//! - `binaries`: finding `redis-server`/`redis-cli` ([`RedisBin`]) and
//!   [`free_port`].
//! - `conn`: [`Conn`], a small blocking RESP client with timeouts (over
//!   TCP, or the Unix socket of a TLS-only node).
//! - `node`: [`NodeOptions`] and [`RedisNode`], one server process;
//!   [`NodeOptions::with_tls`] makes it TLS-only (`port 0`, `tls-port`,
//!   TLS on the cluster bus and for replication) with [`TlsFiles`] the
//!   caller made.
//! - `signal`: SIGSTOP/SIGCONT for pausing nodes.
//! - `spawner`: starts servers so that they die with this process even when
//!   it is killed and no Drop runs ([`tied_command`], [`spawn_tied`]; also
//!   for other programs, such as orthrus in front of a cluster).
//! - `topology`: parsing `CLUSTER NODES` and `CLUSTER SLOTS`.
//! - `cluster`: [`ClusterSpec`] and [`Cluster`]: creation, waits, failover.
//! - `migration`: slot migration in steps on [`Cluster`].
//! - `relay`: [`Relay`], a TCP relay in front of one node that delays,
//!   throttles, black-holes, resets, cuts or refuses on command
//!   ([`Fault`], [`Cut`]); [`Cluster::relay`] makes a node announce it.
//! - `main.rs`: the `orthrus-devcluster` binary (`up`, `single`).

mod binaries;
mod cluster;
mod conn;
mod error;
mod migration;
mod node;
mod relay;
mod signal;
mod spawner;
mod topology;

pub use binaries::{
    Engine, REDIS_CLI_ENV, REDIS_SERVER_ENV, RedisBin, ServerKind, free_port, server_kind,
};
pub use cluster::{CREATE_TIMEOUT, Cluster, ClusterSpec, wait_until};
pub use conn::{COMMAND_TEXT_MAX, Conn, DEFAULT_TIMEOUT, command_text};
pub use error::DevError;
pub use node::{
    DEFAULT_NODE_TIMEOUT_MS, NodeOptions, RedisNode, START_TIMEOUT, TlsFiles, info_field,
};
pub use orthrus_resp::Value;
pub use relay::{Cut, Fault, Relay};
pub use spawner::{server_command as tied_command, spawn as spawn_tied};
pub use topology::SLOT_COUNT;
