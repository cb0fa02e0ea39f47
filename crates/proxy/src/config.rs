//! The configuration: one serde struct, loaded from a TOML file, then
//! `ORTHRUS_*` environment variables, then command-line flags (each layer
//! wins over the one before), and validated once at start-up.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use orthrus_cluster::NodeAddr;
use serde::{Deserialize, Serialize};

mod backend;
mod cache;
mod client;
mod listen;
mod tls;
mod upstreams;
mod users;
mod validate;

pub use upstreams::{DEFAULT_NAME, RouteConfig, UpstreamConfig, UpstreamSettings};
pub use users::{UserConfig, UserRules};

pub use backend::BackendConfig;
pub use cache::CacheConfig;
pub use client::ClientConfig;
pub use listen::Listen;
pub use tls::{AuthClients, BackendTls, BackendTlsConfig, Tls, TlsConfig};

/// The top-level settings, as environment variables name them.
const SETTINGS: &[&str] = &[
    "listen",
    "tls",
    "seeds",
    "threads",
    "announce",
    "unix_socket_perm",
    "metrics",
    "shutdown_timeout_ms",
    "memory_limit_mb",
    "protected_mode",
    "cluster",
    "cache",
    "backend",
    "client",
    "slowlog",
    "log",
    "admin",
];

/// Settings that no longer exist, and what replaced them (said instead of a
/// bare "unknown field").
const REMOVED: &[(&str, &str)] = &[(
    "cluster.max_redirects",
    "removed: a request no longer has a count of redirects but one deadline, \
     backend.request_timeout_ms, for all its redirects and retries; delete this line",
)];

/// Exit code for a configuration that cannot be used (`EX_USAGE`).
pub const EXIT_BAD_CONFIG: i32 = 64;

/// Everything orthrus can be told. Every field has a default, so an empty
/// file (or no file) is a valid configuration.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Address clients connect to: `ip:port`, or `unix:/path/to.sock` for
    /// a Unix socket (a sidecar on the same host), or `none` for no plain
    /// listener (TLS only, with `tls.listen`). Default `127.0.0.1:7777`.
    pub listen: String,
    /// Permissions of the Unix socket file, in octal as for chmod (e.g.
    /// `"770"`), like Redis's `unixsocketperm`. Default: none (the
    /// process's umask decides).
    pub unix_socket_perm: Option<String>,
    /// Cluster nodes to discover the topology from, `host:port` each; any
    /// one reachable seed is enough. Default: none (must be set).
    pub seeds: Vec<String>,
    /// Worker threads, each with its own listener, sessions and backend
    /// connections. 0 means one per CPU core. Default 0.
    pub threads: usize,
    /// `ip:port` that CLUSTER SLOTS/SHARDS/NODES give as orthrus's own
    /// address (behind NAT or a load balancer). Default: the address each
    /// client connected to.
    pub announce: Option<String>,
    /// Admin HTTP address for Prometheus `/metrics`, `/healthz` and
    /// `/readyz`. Default: none (off).
    pub metrics: Option<String>,
    /// On SIGTERM/SIGINT, how long in-flight requests may take to finish
    /// before orthrus exits anyway, in milliseconds. Default 10000.
    pub shutdown_timeout_ms: u64,
    /// Resident memory, in MiB, above which orthrus refuses new requests
    /// for the cluster with `-OOM` (connections stay open; local commands
    /// such as PING and INFO still answer). A request still being read of
    /// 64 KiB or more reserves what its headers announce; one that does
    /// not fit in what is left gets `-OOM` and its connection is closed.
    /// 0 = no limit. Default 0.
    pub memory_limit_mb: u64,
    /// Redis's `protected-mode`: while no client password and no user is
    /// configured, only loopback clients (127.0.0.0/8, ::1, the Unix
    /// socket) are served; any other client gets a `-DENIED` explanation
    /// and is closed. Applies at once on SIGHUP. Default true.
    pub protected_mode: bool,
    /// Topology discovery and refresh.
    pub cluster: ClusterConfig,
    /// Connections from orthrus to the cluster nodes.
    pub backend: BackendConfig,
    /// Limits on what one client may send or hold.
    pub client: ClientConfig,
    /// orthrus's SLOWLOG.
    pub slowlog: SlowlogConfig,
    /// Logging.
    pub log: LogConfig,
    /// Administrative commands through orthrus.
    pub admin: AdminConfig,
    /// The reply cache.
    pub cache: CacheConfig,
    /// The TLS listener for clients.
    pub tls: TlsConfig,
    /// More clusters (or standalone servers) by name, besides the default
    /// one the top-level `seeds` name. Read at start-up.
    pub upstreams: std::collections::BTreeMap<String, UpstreamConfig>,
    /// Which keys go to which upstream, by prefix (the longest wins; keys
    /// no route takes go to the default upstream). Re-read on SIGHUP
    /// while `upstreams` stays the same.
    pub routes: Vec<RouteConfig>,
}

/// `[admin]`: administrative commands (CONFIG, SAVE, DEBUG, ACL, ...).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdminConfig {
    /// Send administrative commands to the nodes instead of refusing them:
    /// CONFIG SET/REWRITE, ACL changes and LATENCY RESET to every node
    /// (masters and replicas), SAVE/BGSAVE/BGREWRITEAOF/MEMORY PURGE and
    /// keyless DEBUG to every master, CONFIG GET and the read-only ACL,
    /// LATENCY and MEMORY subcommands to one master, DEBUG/PFDEBUG with a
    /// key to the key's master, MONITOR from every master. SHUTDOWN,
    /// REPLICAOF, FAILOVER and MODULE stay refused. Clients must have authenticated when a
    /// password is set (as for every command). Reloadable. Default false.
    pub passthrough: bool,
}

/// `[cluster]`: how the topology is learnt and kept current.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterConfig {
    /// What the seeds are: `cluster` (Redis Cluster nodes; the topology is
    /// asked with CLUSTER SHARDS or SLOTS), or `standalone` (one
    /// redis-server without cluster mode, given as the only seed, that
    /// serves every slot; no CLUSTER command is sent to it). Read at
    /// start-up. Default `cluster`.
    pub mode: String,
    /// Periodic topology refresh, in milliseconds. Default 5000.
    pub refresh_interval_ms: u64,
    /// Where keyed read-only commands go: `master`, or `replica` (a
    /// replica of the slot's master, spread over its replicas; the master
    /// when none is usable or one declines). Replica reads may be stale:
    /// replication is asynchronous. A client that sends `READONLY` gets
    /// replica reads whatever this says, `READWRITE` takes its connection
    /// back to the master. `az-affinity` is `replica` that says
    /// `availability_zone` must be set; `az-affinity-replicas-and-primary`
    /// also takes the slot's master in that zone before a replica of
    /// another. Default `master`.
    pub read_from: String,
    /// The availability zone orthrus runs in. When set, a read sent to
    /// replicas goes to a replica that announces this zone (Valkey's
    /// `availability-zone`, in CLUSTER SHARDS) first, then to another
    /// replica, then to the master. Read at start-up. Default: none.
    pub availability_zone: Option<String>,
}

/// What the seeds are (`cluster.mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// Redis Cluster nodes.
    #[default]
    Cluster,
    /// One redis-server without cluster mode, serving every slot.
    Standalone,
}

/// Where keyed read-only commands go (`cluster.read_from`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReadFrom {
    /// The slot's master, as for writes.
    #[default]
    Master,
    /// A replica of the slot's master; the master when none is usable.
    Replica,
}

/// `[slowlog]`: which requests SLOWLOG GET shows.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SlowlogConfig {
    /// Requests whose reply took at least this long through orthrus are
    /// logged, in microseconds; 0 logs every request, a negative value
    /// none. Default 10000 (Redis's slowlog-log-slower-than).
    pub log_slower_than_us: i64,
    /// Entries kept; the oldest go first. At most 10000. Default 128
    /// (Redis's slowlog-max-len).
    pub max_len: usize,
}

/// `[log]`: what is logged and how.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// A `tracing` filter (`info`, `orthrus_proxy=debug`, ...); `RUST_LOG`
    /// wins when set. Default `info`.
    pub level: String,
    /// `text` or `json`. Default `text`.
    pub format: LogFormat,
}

/// Log output format.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Values given on the command line; `None` leaves the lower layers alone.
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    pub listen: Option<String>,
    pub seeds: Option<String>,
    pub threads: Option<usize>,
    pub metrics: Option<String>,
    pub backend_password: Option<String>,
    pub requirepass: Option<String>,
    pub read_from: Option<String>,
    pub mode: Option<String>,
    pub tls_listen: Option<String>,
    pub tls_cert_file: Option<String>,
    pub tls_key_file: Option<String>,
    pub tls_ca_cert_file: Option<String>,
    pub tls_auth_clients: Option<String>,
    /// `--backend-tls`: only ever turns TLS on.
    pub backend_tls: bool,
    pub backend_tls_ca_cert_file: Option<String>,
    pub backend_tls_cert_file: Option<String>,
    pub backend_tls_key_file: Option<String>,
    pub backend_tls_server_name: Option<String>,
}

/// A setting that cannot be used, named so the operator can find it.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("configuration: {0}")]
    Load(#[from] config::ConfigError),
    #[error("configuration: {setting}: {reason}")]
    Removed {
        setting: &'static str,
        reason: &'static str,
    },
    #[error("configuration: {setting}: {reason}")]
    Invalid {
        setting: std::borrow::Cow<'static, str>,
        reason: String,
    },
}

/// The validated form the proxy runs with.
#[derive(Clone, Debug)]
pub struct Settings {
    pub listen: Listen,
    pub seeds: Vec<NodeAddr>,
    pub threads: usize,
    pub announce: Option<SocketAddr>,
    /// Where the admin HTTP endpoint listens, if anywhere.
    pub metrics: Option<SocketAddr>,
    /// The file the configuration came from, if any (shown in INFO).
    pub config_file: Option<PathBuf>,
    /// Where a new client's keyed reads go until it sends READONLY or
    /// READWRITE.
    pub read_from: ReadFrom,
    /// What the seeds are.
    pub mode: Mode,
    /// The named upstreams, numbered from 1 in this order.
    pub upstreams: Vec<UpstreamSettings>,
    /// The routes by key prefix.
    pub prefixes: crate::route::prefix::Prefixes,
    /// The TLS listener's address and the certificates, loaded.
    pub tls: Tls,
    pub raw: Config,
}

// === impl Config ===

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: "127.0.0.1:7777".to_owned(),
            unix_socket_perm: None,
            seeds: Vec::new(),
            threads: 0,
            announce: None,
            metrics: None,
            shutdown_timeout_ms: 10_000,
            memory_limit_mb: 0,
            protected_mode: true,
            cluster: ClusterConfig::default(),
            backend: BackendConfig::default(),
            client: ClientConfig::default(),
            slowlog: SlowlogConfig::default(),
            log: LogConfig::default(),
            admin: AdminConfig::default(),
            cache: CacheConfig::default(),
            tls: TlsConfig::default(),
            upstreams: std::collections::BTreeMap::new(),
            routes: Vec::new(),
        }
    }
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            mode: "cluster".to_owned(),
            refresh_interval_ms: 5000,
            read_from: "master".to_owned(),
            availability_zone: None,
        }
    }
}

impl Default for SlowlogConfig {
    fn default() -> Self {
        SlowlogConfig {
            log_slower_than_us: 10_000,
            max_len: 128,
        }
    }
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            level: "info".to_owned(),
            format: LogFormat::Text,
        }
    }
}

impl Config {
    /// Loads file < environment < flags. `env` is the process environment
    /// (passed in so tests can supply their own).
    pub fn load(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
        flags: &Overrides,
    ) -> Result<Config, ConfigError> {
        let mut builder = config::Config::builder();
        if let Some(path) = file {
            builder = builder.add_source(config::File::from(path).format(config::FileFormat::Toml));
        }
        // Only variables that name a setting: other tools share the prefix
        // (ORTHRUS_CONFIG is the file itself), and must not stop orthrus.
        // A misspelt key inside a known section is still refused.
        let env: config::Map<String, String> = env
            .into_iter()
            .filter(|(k, _)| {
                k.strip_prefix("ORTHRUS_").is_some_and(|rest| {
                    let top = rest
                        .split("__")
                        .next()
                        .unwrap_or_default()
                        .to_ascii_lowercase();
                    SETTINGS.contains(&top.as_str())
                })
            })
            .collect();
        builder = builder.add_source(
            config::Environment::with_prefix("ORTHRUS")
                .prefix_separator("_")
                .separator("__")
                .list_separator(",")
                .with_list_parse_key("seeds")
                .with_list_parse_key("cache.prefixes")
                .with_list_parse_key("cache.commands")
                .try_parsing(true)
                .source(Some(env)),
        );
        if let Some(listen) = &flags.listen {
            builder = builder.set_override("listen", listen.as_str())?;
        }
        if let Some(seeds) = &flags.seeds {
            let list: Vec<String> = split_list(seeds);
            builder = builder.set_override("seeds", list)?;
        }
        if let Some(metrics) = &flags.metrics {
            builder = builder.set_override("metrics", metrics.as_str())?;
        }
        if let Some(password) = &flags.requirepass {
            builder = builder.set_override("client.password", password.as_str())?;
        }
        if let Some(password) = &flags.backend_password {
            builder = builder.set_override("backend.password", password.as_str())?;
        }
        if let Some(read_from) = &flags.read_from {
            builder = builder.set_override("cluster.read_from", read_from.as_str())?;
        }
        if let Some(mode) = &flags.mode {
            builder = builder.set_override("cluster.mode", mode.as_str())?;
        }
        if let Some(threads) = flags.threads {
            builder = builder.set_override("threads", threads as u64)?;
        }
        let strings = [
            ("tls.listen", &flags.tls_listen),
            ("tls.cert_file", &flags.tls_cert_file),
            ("tls.key_file", &flags.tls_key_file),
            ("tls.ca_cert_file", &flags.tls_ca_cert_file),
            ("tls.auth_clients", &flags.tls_auth_clients),
            ("backend.tls.ca_cert_file", &flags.backend_tls_ca_cert_file),
            ("backend.tls.cert_file", &flags.backend_tls_cert_file),
            ("backend.tls.key_file", &flags.backend_tls_key_file),
            ("backend.tls.server_name", &flags.backend_tls_server_name),
        ];
        for (key, value) in strings {
            if let Some(value) = value {
                builder = builder.set_override(key, value.as_str())?;
            }
        }
        if flags.backend_tls {
            builder = builder.set_override("backend.tls.enabled", true)?;
        }
        let built = builder.build()?;
        for (setting, reason) in REMOVED {
            if built.get::<config::Value>(setting).is_ok() {
                return Err(ConfigError::Removed { setting, reason });
            }
        }
        Ok(built.try_deserialize()?)
    }
}

// === impl Mode ===

impl Mode {
    /// The setting's value, case-insensitive.
    fn parse(value: &str) -> Result<Mode, ConfigError> {
        match value.to_ascii_lowercase().as_str() {
            "cluster" => Ok(Mode::Cluster),
            "standalone" => Ok(Mode::Standalone),
            other => Err(invalid(
                "cluster.mode",
                format!("{other:?} is not one of cluster, standalone"),
            )),
        }
    }

    /// The setting's spelling, for INFO.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Cluster => "cluster",
            Mode::Standalone => "standalone",
        }
    }
}

// === impl ReadFrom ===

impl ReadFrom {
    /// The setting's value, case-insensitive. `prefer-replica` is refused
    /// with its reason: `replica` already prefers replicas and falls back
    /// to the master (docs/replicas.md, "Why no prefer-replica").
    fn parse(value: &str) -> Result<ReadFrom, ConfigError> {
        ReadFrom::parse_as("cluster.read_from", value)
    }

    /// [`ReadFrom::parse`] for the setting named `setting`.
    fn parse_as(
        setting: impl Into<std::borrow::Cow<'static, str>>,
        value: &str,
    ) -> Result<ReadFrom, ConfigError> {
        match value.to_ascii_lowercase().as_str() {
            "master" => Ok(ReadFrom::Master),
            // With `cluster.availability_zone`, checked by `validate`.
            "replica" | "az-affinity" | "az-affinity-replicas-and-primary" => Ok(ReadFrom::Replica),
            "prefer-replica" | "prefer_replica" | "preferreplica" => Err(invalid(
                setting,
                "\"prefer-replica\" is not offered: \"replica\" already sends reads to a \
                 replica and falls back to the master when none is usable or one declines \
                 (see docs/replicas.md); use master or replica"
                    .to_owned(),
            )),
            other => Err(invalid(
                setting,
                format!(
                    "{other:?} is not one of master, replica, az-affinity, az-affinity-replicas-and-primary"
                ),
            )),
        }
    }

    /// The setting's spelling, for INFO.
    pub fn name(self) -> &'static str {
        match self {
            ReadFrom::Master => "master",
            ReadFrom::Replica => "replica",
        }
    }
}

impl Settings {
    pub fn limits(&self) -> orthrus_resp::Limits {
        orthrus_resp::Limits {
            max_bulk_len: self.raw.client.max_bulk_len,
            max_array_len: self.raw.client.max_args,
            max_inline_len: self.raw.client.max_inline_len,
            ..orthrus_resp::Limits::default()
        }
    }
}

/// The config file given on the command line, if any.
pub fn file_path(flag: Option<PathBuf>) -> Option<PathBuf> {
    flag.or_else(|| std::env::var_os("ORTHRUS_CONFIG").map(PathBuf::from))
}

/// The configuration as TOML, with every password replaced by `********`:
/// what `orthrus --check-config` prints.
pub fn masked_toml(config: &Config) -> Result<String, toml::ser::Error> {
    let mut shown = config.clone();
    let mask = |p: &mut Option<String>| {
        if p.is_some() {
            *p = Some("********".to_owned());
        }
    };
    mask(&mut shown.backend.password);
    mask(&mut shown.client.password);
    for upstream in shown.upstreams.values_mut() {
        mask(&mut upstream.password);
    }
    for user in shown.client.users.values_mut() {
        match user {
            UserConfig::Password(pass) => *pass = "********".to_owned(),
            UserConfig::Rules(rules) => {
                let masked: Vec<&str> = rules
                    .rules
                    .split_ascii_whitespace()
                    .map(|rule| match rule.chars().next() {
                        Some('>' | '<') => ">********",
                        Some('#' | '!') => "#********",
                        _ => rule,
                    })
                    .collect();
                rules.rules = masked.join(" ");
            }
        }
    }
    toml::to_string_pretty(&shown)
}

/// Seeds, `host:port` each, comma-separated lists split; a bad one is
/// refused as `setting`, its message starting with `context`.
fn seed_list(
    setting: &'static str,
    context: &str,
    seeds: &[String],
) -> Result<Vec<NodeAddr>, ConfigError> {
    seeds
        .iter()
        .flat_map(|s| split_list(s))
        .map(|s| {
            s.parse::<NodeAddr>()
                .map_err(|e| invalid(setting, format!("{context}{s:?}: {e}")))
        })
        .collect()
}

fn split_list(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

fn invalid(setting: impl Into<std::borrow::Cow<'static, str>>, reason: String) -> ConfigError {
    ConfigError::Invalid {
        setting: setting.into(),
        reason,
    }
}

#[cfg(test)]
mod tests;
