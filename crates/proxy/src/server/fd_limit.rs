//! File descriptors: at start-up the soft `RLIMIT_NOFILE` is raised to the
//! hard limit (as Redis does), and the clients that fit under it are
//! counted, so that past that many a new client hears `-ERR max number of
//! clients reached` instead of waiting on an `accept` that fails with
//! `EMFILE`.

use nix::sys::resource::{Resource, getrlimit, setrlimit};

use crate::config::Settings;

/// Descriptors kept for everything that is not a client or a node
/// connection: listeners, the runtime's epoll and eventfd per worker, the
/// admin endpoint and its connections, files read on SIGHUP, the log.
pub const SPARE: u64 = 64;

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

/// Descriptors the node connections take: per worker and per node, the
/// shared connections plus one for pub/sub, MONITOR or the topology,
/// counting at least six nodes (or one per seed, if more). Dedicated
/// connections (blocking commands, WATCH) come out of the clients' share:
/// each belongs to a client.
pub fn for_nodes(settings: &Settings) -> u64 {
    let nodes = settings.seeds.len().max(6) as u64;
    let per_node = settings.raw.backend.connections_per_node as u64 + 1;
    settings.threads as u64 * nodes * per_node
}

/// How many clients fit under a limit of `open_files`, leaving room for
/// the node connections and [`SPARE`]; at least one.
pub fn clients_that_fit(open_files: u64, settings: &Settings) -> usize {
    let room = open_files.saturating_sub(SPARE + for_nodes(settings));
    usize::try_from(room.max(1)).unwrap_or(usize::MAX)
}

/// Raises the limit and returns the clients that fit, saying so once if
/// that is fewer than `client.max_clients`.
pub fn fit_clients(settings: &Settings) -> usize {
    let Some(open_files) = raise() else {
        return usize::MAX;
    };
    let fit = clients_that_fit(open_files, settings);
    let wanted = settings.raw.client.max_clients;
    if fit < wanted {
        tracing::warn!(
            open_files,
            max_clients = wanted,
            lowered_to = fit,
            node_connections = for_nodes(settings),
            spare = SPARE,
            "client.max_clients lowered to fit the open files limit (RLIMIT_NOFILE); \
             raise the hard limit (ulimit -Hn, LimitNOFILE=) to serve more"
        );
    }
    fit
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    #[test]
    fn clients_get_what_nodes_and_spare_leave() {
        let raw = Config {
            seeds: vec!["127.0.0.1:1".to_owned()],
            threads: 2,
            ..Config::default()
        };
        let settings = raw.validate().unwrap();
        // 2 workers x 6 nodes x (1 shared + 1) = 24, plus 64 spare.
        assert_eq!(for_nodes(&settings), 24);
        assert_eq!(clients_that_fit(1088, &settings), 1000);
        assert_eq!(clients_that_fit(64, &settings), 1);
    }
}
