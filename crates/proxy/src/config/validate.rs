//! Checking a loaded configuration once at start-up, and resolving what
//! needs resolving (addresses, the listener, TLS files) into [`Settings`].

use std::net::SocketAddr;

use super::{Config, ConfigError, Listen, Mode, ReadFrom, Settings, Tls, invalid, seed_list};

impl Config {
    /// Checks every value and resolves what needs resolving.
    pub fn validate(mut self) -> Result<Settings, ConfigError> {
        self.client.password = password(
            "client.password_file",
            self.client.password.take(),
            self.client.password_file.as_deref(),
        )?;
        self.backend.password = password(
            "backend.password_file",
            self.backend.password.take(),
            self.backend.password_file.as_deref(),
        )?;
        for (name, user) in &self.client.users {
            user.to_user(name)
                .map_err(|e| invalid("client.users", format!("user {name}: {e}")))?;
        }
        let listen = Listen::parse(&self.listen, self.unix_socket_perm.as_deref())?;
        let seeds = seed_list("seeds", "", &self.seeds)?;
        if seeds.is_empty() {
            return Err(invalid(
                "seeds",
                "at least one cluster node is needed (--seeds host:port,...)".to_owned(),
            ));
        }
        let mode = Mode::parse(&self.cluster.mode)?;
        if mode == Mode::Standalone && seeds.len() > 1 {
            return Err(invalid(
                "seeds",
                format!(
                    "cluster.mode is standalone: give the one redis-server as the only seed, \
                     not {} of them",
                    seeds.len()
                ),
            ));
        }
        let read_from = ReadFrom::parse(&self.cluster.read_from)?;
        let zoned = ["az-affinity", "az-affinity-replicas-and-primary"];
        if let Some(mode) = zoned
            .iter()
            .find(|z| self.cluster.read_from.eq_ignore_ascii_case(z))
            .filter(|_| self.cluster.availability_zone.is_none())
        {
            return Err(invalid(
                "cluster.read_from",
                format!("{mode:?} needs cluster.availability_zone, the zone orthrus runs in"),
            ));
        }
        let (upstreams, prefixes) =
            super::upstreams::validate(&self.upstreams, &self.routes, (&seeds, read_from))?;
        let announce = socket_addr("announce", self.announce.as_deref())?;
        let metrics = socket_addr("metrics", self.metrics.as_deref())?;
        if self.backend.username.is_some() && self.backend.password.is_none() {
            return Err(invalid(
                "backend.username",
                "needs backend.password too".to_owned(),
            ));
        }
        let threads = match self.threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n if n > 1024 => return Err(invalid("threads", format!("{n} is more than 1024"))),
            n => n,
        };
        positive(
            "backend.connections_per_node",
            self.backend.connections_per_node as u64,
        )?;
        if self.backend.connections_per_node > 64 {
            return Err(invalid(
                "backend.connections_per_node",
                "at most 64".to_owned(),
            ));
        }
        positive(
            "backend.connect_timeout_ms",
            self.backend.connect_timeout_ms,
        )?;
        connection_bound(&self, threads)?;
        positive(
            "backend.dedicated_per_node",
            self.backend.dedicated_per_node as u64,
        )?;
        positive(
            "backend.request_timeout_ms",
            self.backend.request_timeout_ms,
        )?;
        positive(
            "cluster.refresh_interval_ms",
            self.cluster.refresh_interval_ms,
        )?;
        positive("client.max_pending", self.client.max_pending as u64)?;
        positive("client.max_dedicated", self.client.max_dedicated as u64)?;
        positive(
            "client.max_pending_bytes",
            self.client.max_pending_bytes as u64,
        )?;
        positive("client.max_bulk_len", self.client.max_bulk_len as u64)?;
        positive("client.max_args", self.client.max_args as u64)?;
        positive("client.max_inline_len", self.client.max_inline_len as u64)?;
        positive("client.max_push_bytes", self.client.max_push_bytes as u64)?;
        positive(
            "client.query_buffer_limit",
            self.client.query_buffer_limit as u64,
        )?;
        positive(
            "client.max_tracking_prefixes",
            self.client.max_tracking_prefixes as u64,
        )?;
        positive(
            "client.max_tracking_prefix_bytes",
            self.client.max_tracking_prefix_bytes as u64,
        )?;
        positive("client.max_clients", self.client.max_clients as u64)?;
        positive("shutdown_timeout_ms", self.shutdown_timeout_ms)?;
        positive("cache.max_memory_mb", self.cache.max_memory_mb)?;
        positive("cache.max_age_ms", self.cache.max_age_ms)?;
        for command in &mut self.cache.commands {
            command.make_ascii_lowercase();
            if !super::cache::DEFAULT_COMMANDS.contains(&command.as_str()) {
                return Err(invalid(
                    "cache.commands",
                    format!(
                        "{command:?} is not one of the read-only single-key commands orthrus caches ({})",
                        super::cache::DEFAULT_COMMANDS.join(", ")
                    ),
                ));
            }
        }
        if self.slowlog.max_len > 10_000 {
            return Err(invalid("slowlog.max_len", "at most 10000".to_owned()));
        }
        if tracing_subscriber::EnvFilter::try_new(&self.log.level).is_err() {
            return Err(invalid(
                "log.level",
                format!("{:?} is not a log filter", self.log.level),
            ));
        }
        let tls = Tls::load(&self)?;
        if listen == Listen::None && tls.listen.is_none() {
            return Err(invalid(
                "listen",
                "is none and there is no tls.listen: clients could not connect at all".to_owned(),
            ));
        }
        Ok(Settings {
            listen,
            seeds,
            threads,
            announce,
            metrics,
            config_file: None,
            read_from,
            mode,
            upstreams,
            prefixes,
            tls,
            raw: self,
        })
    }
}

/// A password given directly or in a file (one line, a final newline
/// dropped), never both.
fn password(
    setting: &'static str,
    given: Option<String>,
    file: Option<&str>,
) -> Result<Option<String>, ConfigError> {
    let Some(path) = file else {
        return Ok(given);
    };
    if given.is_some() {
        return Err(invalid(
            setting,
            "the password is set directly too: keep one of the two".to_owned(),
        ));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| invalid(setting, format!("cannot read {path:?}: {e}")))?;
    let line = text.strip_suffix('\n').unwrap_or(&text);
    let line = line.strip_suffix('\r').unwrap_or(line);
    if line.is_empty() || line.contains('\n') {
        return Err(invalid(
            setting,
            format!("{path:?} must hold the password on one line"),
        ));
    }
    Ok(Some(line.to_owned()))
}

/// `backend.max_connections_per_node` must hold every worker's shared
/// connections to a node (two protocols, master and replica lanes), so
/// that plain commands always have theirs; and stays within what a
/// semaphore counts.
fn connection_bound(config: &Config, threads: usize) -> Result<(), ConfigError> {
    let bound = config.backend.max_connections_per_node;
    let shared = threads
        .saturating_mul(config.backend.connections_per_node)
        .saturating_mul(4);
    if bound < shared {
        return Err(invalid(
            "backend.max_connections_per_node",
            format!(
                "{bound} is less than the {shared} shared connections the workers may keep to one node (threads x backend.connections_per_node x 4)"
            ),
        ));
    }
    if bound > 1_000_000 {
        return Err(invalid(
            "backend.max_connections_per_node",
            format!("{bound} is more than 1000000"),
        ));
    }
    Ok(())
}

fn positive(setting: &'static str, value: u64) -> Result<(), ConfigError> {
    if value == 0 {
        return Err(invalid(setting, "must be greater than 0".to_owned()));
    }
    Ok(())
}

/// An optional `ip:port` setting.
fn socket_addr(
    setting: &'static str,
    value: Option<&str>,
) -> Result<Option<SocketAddr>, ConfigError> {
    value
        .map(|a| {
            a.parse::<SocketAddr>()
                .map_err(|e| invalid(setting, format!("{a:?} is not an ip:port: {e}")))
        })
        .transpose()
}
