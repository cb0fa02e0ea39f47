//! `[client]`: what one client may hold and send.

use serde::{Deserialize, Serialize};

use super::UserConfig;

/// `[client]`: per-client limits.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClientConfig {
    /// Requests one client may have in flight (pipelined, not yet answered)
    /// before orthrus stops reading from it. Default 1024.
    pub max_pending: usize,
    /// Bytes of replies orthrus may hold for one client (its unwritten
    /// output, plus the replies it is owed counted at the size of its
    /// largest recent reply and at no less than a 32nd of this each)
    /// before orthrus stops reading from it: backpressure instead of
    /// Redis's disconnecting. Default 16 MiB.
    pub max_pending_bytes: usize,
    /// Bytes of replies held for a client that does not take them past
    /// which it is closed, with a warning in the log: the hard limit of
    /// Redis's `client-output-buffer-limit` for normal clients. 0 = none.
    /// Default 0.
    pub output_buffer_hard_limit: usize,
    /// The same for the soft limit: a client held over it for
    /// `output_buffer_soft_seconds` is closed. 0 = none. Default 0.
    pub output_buffer_soft_limit: usize,
    /// Seconds a client may stay over `output_buffer_soft_limit`.
    /// Default 0 (closed at once).
    pub output_buffer_soft_seconds: u64,
    /// Password of the default user: clients must `AUTH <password>` (or
    /// `HELLO 3 AUTH default <password>`) first. Default: none.
    pub password: Option<String>,
    /// A file holding `password` (one line; a final newline is dropped),
    /// read at start-up and on SIGHUP, so that the password need not sit
    /// in the configuration, the environment or the command line. Not
    /// together with `password`. Default: none.
    pub password_file: Option<String>,
    /// Named users, for `AUTH <user> <password>`: each a password (the
    /// user may do everything, `+@all ~* &*`), or a table with Redis ACL
    /// rules (`rules = "on >pw ~app:* +@read"`, see docs/security.md).
    /// Default: none.
    pub users: std::collections::HashMap<String, UserConfig>,
    /// Largest bulk string accepted in a request, in bytes. Default 512 MiB.
    pub max_bulk_len: usize,
    /// Most arguments in one request. Default 1048576.
    pub max_args: usize,
    /// Longest inline (telnet-style) request line, in bytes. Default 65536.
    pub max_inline_len: usize,
    /// Clients connected at once, over all workers; past it a new client
    /// gets `-ERR max number of clients reached` and is closed. Default
    /// 10000 (Redis's maxclients).
    pub max_clients: usize,
    /// Seconds a client may stay silent while waiting for nothing before
    /// it is disconnected; 0 = never (Redis's `timeout`). Default 0.
    pub idle_timeout_s: u64,
    /// Pub/sub messages waiting to be written to one subscriber, in bytes;
    /// past it the subscriber is disconnected. Default 32 MiB (Redis's
    /// pubsub client-output-buffer-limit hard limit).
    pub max_push_bytes: usize,
    /// CLIENT TRACKING BCAST prefixes one client may have (those it has
    /// plus those it adds); past it the command gets an error. A node
    /// checks each new prefix against all the others, and orthrus sends
    /// them to every master: 40,000 stalled three masters for 2.8 s.
    /// Default 1000.
    pub max_tracking_prefixes: usize,
    /// Bytes of CLIENT TRACKING BCAST prefixes one client may have, all
    /// together; past it the command gets an error. Default 65536.
    pub max_tracking_prefix_bytes: usize,
    /// Dedicated connections one client may hold at once (its WATCH and a
    /// blocking command); past it the command gets an error at once.
    /// Default 2. Read at start-up.
    pub max_dedicated: usize,
    /// Bytes of one request that may be buffered before it is complete,
    /// and of the commands one MULTI may queue, all together: Redis's
    /// `client-query-buffer-limit`. Past it, a request gets an error and
    /// the connection is closed; a MULTI gets an error and its EXEC
    /// EXECABORT. Default 1 GiB.
    pub query_buffer_limit: usize,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            max_pending: 1024,
            max_pending_bytes: 16 * 1024 * 1024,
            output_buffer_hard_limit: 0,
            output_buffer_soft_limit: 0,
            output_buffer_soft_seconds: 0,
            password: None,
            password_file: None,
            users: std::collections::HashMap::new(),
            max_bulk_len: orthrus_resp::DEFAULT_MAX_BULK_LEN,
            max_args: orthrus_resp::DEFAULT_MAX_ARRAY_LEN,
            max_inline_len: orthrus_resp::DEFAULT_MAX_INLINE_LEN,
            max_push_bytes: 32 * 1024 * 1024,
            max_tracking_prefixes: 1000,
            max_tracking_prefix_bytes: 64 * 1024,
            max_dedicated: 2,
            query_buffer_limit: 1024 * 1024 * 1024,
            max_clients: 10_000,
            idle_timeout_s: 0,
        }
    }
}
