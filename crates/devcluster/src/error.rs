//! The one error type of the library: every failure says which node or which
//! command it concerns, so that a failing test reads like a diagnosis.

use std::io;
use std::net::SocketAddr;

/// Why a devcluster operation failed.
#[derive(thiserror::Error, Debug)]
#[non_exhaustive]
pub enum DevError {
    /// `redis-server` or `redis-cli` is neither named by its environment
    /// variable nor found on `PATH`.
    #[error(
        "{what} not found on PATH (or ${}): install it with `apt-get install redis-server redis-tools` (Debian/Ubuntu) or `brew install redis`",
        env_var_for(what)
    )]
    NotInstalled {
        /// `"redis-server"` or `"redis-cli"`.
        what: &'static str,
    },

    /// A system call failed (spawning, temp dirs, sockets, files).
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),

    /// `redis-server` exited, or never answered, while starting.
    #[error("redis-server on port {port} failed to start: {reason}\n--- log tail ---\n{log_tail}")]
    StartFailed {
        /// The client port it was given.
        port: u16,
        /// What was seen (exit status, timeout).
        reason: String,
        /// The last lines of its log file, which usually name the cause.
        log_tail: String,
    },

    /// A bounded wait ran out.
    #[error("timed out: {what}")]
    Timeout {
        /// What was being waited for, and the last state seen.
        what: String,
    },

    /// The server answered a command with an error reply.
    #[error("`{cmd}` failed: {reply}")]
    Server {
        /// The command, arguments joined by spaces (shortened when long).
        cmd: String,
        /// The error reply's text.
        reply: String,
    },

    /// The server sent bytes that are not RESP.
    #[error("protocol error from {addr}: {source}")]
    Protocol {
        /// The server's address.
        addr: SocketAddr,
        /// The parser's reason.
        #[source]
        source: orthrus_resp::ProtocolError,
    },

    /// The server closed the connection before a reply was complete.
    #[error("connection to {addr} closed by the server")]
    Closed {
        /// The server's address.
        addr: SocketAddr,
    },

    /// A reply had a shape that the command never produces.
    #[error("unexpected reply to `{cmd}`: {detail}")]
    Unexpected {
        /// The command.
        cmd: String,
        /// What was wrong with the reply.
        detail: String,
    },

    /// A node index past the end of the cluster.
    #[error("no node {index}: the cluster has {count} nodes")]
    NoSuchNode {
        /// The index asked for.
        index: usize,
        /// How many nodes there are.
        count: usize,
    },

    /// The operation needs a running process and the node was killed.
    #[error("the node on port {port} is not running")]
    NotRunning {
        /// The node's client port.
        port: u16,
    },

    /// Every node is killed or paused, so nobody can be asked.
    #[error("no running, unpaused node to ask")]
    NoLiveNode,

    /// Sending a signal to a node's process failed.
    #[error("sending {signal} to pid {pid}: {source}")]
    Signal {
        /// The signal's name.
        signal: &'static str,
        /// The target process.
        pid: u32,
        /// The errno.
        #[source]
        source: io::Error,
    },

    /// A [`ClusterSpec`](crate::ClusterSpec) that cannot be built.
    #[error("invalid cluster spec: {reason}")]
    BadSpec {
        /// What is wrong with it.
        reason: String,
    },
}

/// The environment variable that overrides the lookup of `what`.
fn env_var_for(what: &str) -> &'static str {
    if what == "redis-cli" {
        crate::binaries::REDIS_CLI_ENV
    } else {
        crate::binaries::REDIS_SERVER_ENV
    }
}
