//! File descriptors: at start-up the soft `RLIMIT_NOFILE` is raised to the
//! hard limit (as Redis does) and shared out, so that no `accept` or
//! `connect` fails with `EMFILE`:
//!
//! - [`SPARE`] for what is neither a client nor a node connection, two a
//!   upstream for the topology refresher's own connections, and the admin
//!   endpoint's connections ([`admin_connections`]) when it runs;
//! - node connections: each worker's shared connections to each node (at
//!   least six nodes counted), and for every client room for
//!   `client.max_dedicated` connections of its own (a blocking command, a
//!   WATCH), or for as many as `backend.dedicated_per_node` allows when
//!   that is fewer;
//! - clients: what is left, so past that many a new client hears `-ERR max
//!   number of clients reached` instead of waiting on an `accept` that
//!   fails.
//!
//! The node connections' share is then a bound (`process::quota`): one
//! more waits for one to close, within the request's deadline, then that
//! request gets an error naming the limit. Clients' connections of their
//! own (dedicated, subscriptions, tracking, MONITOR) cannot take the part
//! kept for the shared connections.

use nix::sys::resource::{Resource, getrlimit, setrlimit};

use crate::config::Settings;

/// Descriptors kept for everything that is not a client or a node
/// connection: listeners, the runtime's epoll and eventfd per worker, the
/// timer and signal threads, files read on SIGHUP, the log.
pub const SPARE: u64 = 64;

/// The topology refresher's connections per upstream: the one it asks
/// `CLUSTER SHARDS`, and the one it learns `COMMAND` from.
const DISCOVERY: u64 = 2;

/// Nodes counted at least, whatever the seeds: a cluster of three masters
/// with a replica each.
const MIN_NODES: u64 = 6;

/// How the open files limit is shared out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    pub open_files: u64,
    /// `client.max_clients` is capped at it.
    pub clients: usize,
    /// Connections open to every node together, of every kind.
    pub node_connections: usize,
    /// Of those, kept for the workers' shared connections.
    pub shared_connections: usize,
    /// The admin endpoint's connections at once.
    pub admin_connections: usize,
}

/// Raises the soft limit to the hard one; returns the soft limit in force
/// afterwards (`None` if it cannot be read).
pub fn raise() -> Option<u64> {
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    if soft < hard {
        match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            Ok(()) => return Some(hard),
            Err(e) => tracing::warn!(soft, hard, error = %e, "cannot raise the open files limit"),
        }
    }
    Some(soft)
}

/// Nodes counted: at least [`MIN_NODES`], or one per seed if more.
fn nodes(settings: &Settings) -> u64 {
    (settings.seeds.len() as u64).max(MIN_NODES)
}

/// The workers' shared connections: per worker and per node,
/// `backend.connections_per_node` plus one (a replica's, a reconnection's).
pub fn for_shared(settings: &Settings) -> u64 {
    let per_node = settings.raw.backend.connections_per_node as u64 + 1;
    (settings.threads as u64)
        .saturating_mul(nodes(settings))
        .saturating_mul(per_node)
}

/// The admin endpoint's connections under a limit of `open_files`: an
/// eighth of it, between 16 and `http::MAX_CONNECTIONS` (256).
pub fn admin_connections(open_files: u64) -> usize {
    let eighth = usize::try_from(open_files / 8).unwrap_or(usize::MAX);
    eighth.clamp(16, crate::http::MAX_CONNECTIONS)
}

/// Shares out a limit of `open_files` (see the module's doc); at least
/// one client.
pub fn budget(open_files: u64, settings: &Settings) -> Budget {
    let upstreams = settings.upstreams.len() as u64 + 1;
    let admin = admin_connections(open_files);
    let admin_fds = match settings.metrics {
        // Its connections, and the few it refuses with a 503.
        Some(_) => admin as u64 + 8,
        None => 0,
    };
    let kept = SPARE + DISCOVERY * upstreams + admin_fds;
    let shared = for_shared(settings);
    let room = open_files.saturating_sub(kept).saturating_sub(shared);
    // Each client needs itself and its dedicated connections, until the
    // workers' dedicated pools are full.
    let own = settings.raw.client.max_dedicated as u64;
    let dedicated_max = (settings.threads as u64)
        .saturating_mul(nodes(settings))
        .saturating_mul(settings.raw.backend.dedicated_per_node as u64);
    let clients = (room / own.saturating_add(1))
        .max(room.saturating_sub(dedicated_max))
        .max(1);
    let to_usize = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
    Budget {
        open_files,
        clients: to_usize(clients),
        node_connections: to_usize(open_files.saturating_sub(kept).saturating_sub(clients)),
        shared_connections: to_usize(shared),
        admin_connections: admin,
    }
}

/// Raises the limit and shares it out, saying so once if fewer clients
/// fit than `client.max_clients`; `None` when the limit cannot be read
/// (nothing is bounded then).
pub fn share(settings: &Settings) -> Option<Budget> {
    let budget = budget(raise()?, settings);
    let wanted = settings.raw.client.max_clients;
    if budget.clients < wanted {
        tracing::warn!(
            open_files = budget.open_files,
            max_clients = wanted,
            lowered_to = budget.clients,
            node_connections = budget.node_connections,
            spare = SPARE,
            "client.max_clients lowered to fit the open files limit (RLIMIT_NOFILE), with room for \
             each client's node connections (client.max_dedicated); raise the hard limit \
             (ulimit -Hn, LimitNOFILE=) to serve more"
        );
    }
    Some(budget)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    #[test]
    fn clients_get_what_the_nodes_and_the_rest_leave() {
        let raw = Config {
            seeds: vec!["127.0.0.1:1".to_owned()],
            threads: 2,
            ..Config::default()
        };
        let settings = raw.validate().unwrap();
        // 2 workers x 6 nodes x (1 shared + 1) = 24 shared; 64 spare and
        // 2 for discovery; each client with its 2 dedicated.
        assert_eq!(for_shared(&settings), 24);
        let b = budget(1090, &settings);
        assert_eq!(b.clients, (1090 - 66 - 24) / 3);
        assert_eq!(b.node_connections, 1090 - 66 - 333);
        assert!(b.node_connections >= 24 + 2 * 333);
        assert_eq!(budget(300, &settings).clients, 70);
        assert_eq!(budget(64, &settings).clients, 1);
        // Past what the dedicated pools hold (2 x 6 x 512), each more
        // client needs one descriptor.
        let big = budget(1_000_000, &settings);
        assert_eq!(big.clients as u64, 1_000_000 - 66 - 24 - 6144);
        assert_eq!(big.admin_connections, 256);
        assert_eq!(budget(200, &settings).admin_connections, 25);
    }

    #[test]
    fn the_admin_endpoint_takes_its_share_when_it_runs() {
        let raw = Config {
            seeds: vec!["127.0.0.1:1".to_owned()],
            threads: 1,
            metrics: Some("127.0.0.1:9121".to_owned()),
            ..Config::default()
        };
        let settings = raw.validate().unwrap();
        // 200 - 64 - 2 - (25 + 8) admin - 12 shared = 89 for clients and theirs.
        assert_eq!(budget(200, &settings).clients, 89 / 3);
    }
}
