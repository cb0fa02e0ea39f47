//! `[backend]`: how orthrus connects to the cluster nodes.

use serde::{Deserialize, Serialize};

use super::BackendTlsConfig;

/// `[backend]`: connections to the cluster nodes.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct BackendConfig {
    /// Multiplexed connections per worker thread, per node and per protocol
    /// (RESP2, RESP3); as many again for replica reads (connections that
    /// sent `READONLY`). Default 1.
    pub connections_per_node: usize,
    /// Timeout to establish a backend connection, in milliseconds. Default 1000.
    pub connect_timeout_ms: u64,
    /// A request's deadline, in milliseconds from when it was read: every
    /// redirect and retry (MOVED, ASK, TRYAGAIN, CLUSTERDOWN, a node that
    /// cannot be reached, a failover) happens within it, and when it
    /// expires the client gets an error saying what was happening. A
    /// connection whose oldest request has waited this long for its reply
    /// is deemed dead. Default 5000.
    pub request_timeout_ms: u64,
    /// Dedicated connections (blocking commands, WATCH) per worker thread
    /// and per node. Blocking commands take at most seven eighths of them
    /// (448 of 512); the rest is kept for WATCH, transactions and scripts.
    /// When none is free, such a command waits in turn (first come, first
    /// served) for one to be given back, within what is left of its
    /// `request_timeout_ms` deadline (a blocking command with a timeout:
    /// within that timeout, then its nil), then gets an error. Default 512.
    pub dedicated_per_node: usize,
    /// Connections orthrus opens to one node at most, counted across every
    /// worker and kind (shared, dedicated, subscriptions, tracking,
    /// MONITOR); past it, opening one waits for another to close, at most
    /// `request_timeout_ms` (a blocking command's or WATCH's: what is left
    /// of its deadline), then the request gets an error naming this
    /// setting. Default 2000 (a fifth of a node's default `maxclients`).
    /// Read at start-up.
    pub max_connections_per_node: usize,
    /// ACL user orthrus authenticates as on every node connection (with
    /// `password`). Default: none (`AUTH <password>` as the default user).
    pub username: Option<String>,
    /// Password for the cluster nodes (`requirepass` or the ACL user's).
    /// Default: none (no AUTH).
    pub password: Option<String>,
    /// A file holding `password` (one line; a final newline is dropped),
    /// read at start-up and on SIGHUP, so that the password need not sit
    /// in the configuration, the environment or the command line. Not
    /// together with `password`. Default: none.
    pub password_file: Option<String>,
    /// TLS to the nodes.
    pub tls: BackendTlsConfig,
}

impl Default for BackendConfig {
    fn default() -> Self {
        BackendConfig {
            connections_per_node: 1,
            connect_timeout_ms: 1000,
            request_timeout_ms: 5000,
            dedicated_per_node: 512,
            max_connections_per_node: 2000,
            username: None,
            password: None,
            password_file: None,
            tls: BackendTlsConfig::default(),
        }
    }
}
