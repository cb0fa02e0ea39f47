//! The `orthrus` binary: parse the configuration, start logging, bind, and
//! run until SIGINT or SIGTERM; or, as `orthrus rebalance`, move slots
//! between the masters by the load a running orthrus measures or the
//! engine's own per-slot figures.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use orthrus_proxy::config::{self, Config, EXIT_BAD_CONFIG, LogFormat, Overrides};
use orthrus_proxy::rebalance::{Interrupts, Measure, Method};
use tracing_subscriber::EnvFilter;

/// A Redis Cluster proxy: plain Redis clients talk to orthrus as if it were
/// one redis-server.
#[derive(Parser, Debug)]
#[command(name = "orthrus", version, about, long_about = None)]
struct Args {
    /// Address to accept clients on; `unix:/path` for a Unix socket, `none`
    /// for TLS only [default: 127.0.0.1:7777; env ORTHRUS_LISTEN]
    #[arg(long, value_name = "HOST:PORT")]
    listen: Option<String>,
    /// Address to accept TLS clients on (needs --tls-cert-file and
    /// --tls-key-file) [env ORTHRUS_TLS__LISTEN]
    #[arg(long, value_name = "HOST:PORT")]
    tls_listen: Option<String>,
    /// orthrus's certificate chain for TLS clients, PEM [env ORTHRUS_TLS__CERT_FILE]
    #[arg(long, value_name = "FILE")]
    tls_cert_file: Option<String>,
    /// The private key of --tls-cert-file, PEM [env ORTHRUS_TLS__KEY_FILE]
    #[arg(long, value_name = "FILE")]
    tls_key_file: Option<String>,
    /// CA certificates that TLS clients' certificates are verified against
    /// [env ORTHRUS_TLS__CA_CERT_FILE]
    #[arg(long, value_name = "FILE")]
    tls_ca_cert_file: Option<String>,
    /// Whether TLS clients must present a certificate: yes, optional or no
    /// [default: yes with --tls-ca-cert-file, else no; env ORTHRUS_TLS__AUTH_CLIENTS]
    #[arg(long, value_name = "yes|optional|no")]
    tls_auth_clients: Option<String>,
    /// Speak TLS to the cluster nodes [env ORTHRUS_BACKEND__TLS__ENABLED]
    #[arg(long)]
    backend_tls: bool,
    /// CA certificates that the nodes' certificates are verified against
    /// [default: the system's; env ORTHRUS_BACKEND__TLS__CA_CERT_FILE]
    #[arg(long, value_name = "FILE")]
    backend_tls_ca_cert_file: Option<String>,
    /// Client certificate for nodes that require one, PEM
    /// [env ORTHRUS_BACKEND__TLS__CERT_FILE]
    #[arg(long, value_name = "FILE")]
    backend_tls_cert_file: Option<String>,
    /// The private key of --backend-tls-cert-file [env ORTHRUS_BACKEND__TLS__KEY_FILE]
    #[arg(long, value_name = "FILE")]
    backend_tls_key_file: Option<String>,
    /// Name to verify every node's certificate against [default: the node's
    /// host as the cluster announces it; env ORTHRUS_BACKEND__TLS__SERVER_NAME]
    #[arg(long, value_name = "NAME")]
    backend_tls_server_name: Option<String>,
    /// Comma-separated cluster nodes to discover the topology from; any one
    /// reachable node is enough [env ORTHRUS_SEEDS]
    #[arg(long, value_name = "HOST:PORT,...")]
    seeds: Option<String>,
    /// Worker threads; 0 = one per CPU core [default: 0; env ORTHRUS_THREADS]
    #[arg(long, value_name = "N")]
    threads: Option<usize>,
    /// Admin HTTP address for Prometheus /metrics, /healthz and /readyz;
    /// off when unset [env ORTHRUS_METRICS]
    #[arg(long, value_name = "HOST:PORT")]
    metrics: Option<String>,
    /// Password clients must AUTH with [env ORTHRUS_CLIENT__PASSWORD]
    #[arg(long, value_name = "PASSWORD")]
    requirepass: Option<String>,
    /// Password orthrus uses on every cluster node connection
    /// [env ORTHRUS_BACKEND__PASSWORD]
    #[arg(long, value_name = "PASSWORD")]
    backend_password: Option<String>,
    /// Where keyed read-only commands go: master, or replica (a replica of
    /// the slot's master, the master when none is usable; replica reads may
    /// be stale) [default: master; env ORTHRUS_CLUSTER__READ_FROM]
    #[arg(long, value_name = "master|replica")]
    read_from: Option<String>,
    /// What the seeds are: cluster (Redis Cluster nodes), or standalone
    /// (the only seed is one redis-server without cluster mode, serving
    /// every slot) [default: cluster; env ORTHRUS_CLUSTER__MODE]
    #[arg(long, value_name = "cluster|standalone")]
    mode: Option<String>,
    /// Validate the configuration, print it (passwords masked) and exit
    #[arg(long)]
    check_config: bool,
    /// TOML configuration file (see config/orthrus.toml) [env ORTHRUS_CONFIG]
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    tool: Option<Tool>,
}

/// Tools run instead of the proxy.
#[derive(Subcommand, Debug)]
enum Tool {
    /// Move the hottest slots from the busiest masters to the idlest, by the
    /// load a running orthrus measured over the last 10 s; prints the plan,
    /// and carries it out online with --apply
    Rebalance(RebalanceArgs),
}

#[derive(clap::Args, Debug)]
struct RebalanceArgs {
    /// The running orthrus whose load to follow
    #[arg(long, value_name = "HOST:PORT")]
    proxy: String,
    /// orthrus's client password (its --requirepass)
    #[arg(long, value_name = "PASSWORD")]
    password: Option<String>,
    /// orthrus's configuration file: the nodes are reached with its
    /// backend username, password and TLS, as orthrus reaches them
    /// (ORTHRUS_* variables apply too)
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The cluster nodes' password (orthrus's --backend-password); overrides
    /// the one of --config
    #[arg(long, value_name = "PASSWORD")]
    node_password: Option<String>,
    /// Refuse a cluster with a master that has no usable replica
    #[arg(long)]
    require_replicas: bool,
    /// What to even out: requests or bytes as this orthrus measures them
    /// (its own clients only), or the engine's own per-slot figures from
    /// CLUSTER SLOT-STATS of every master (all clients; Valkey 8 and
    /// later): cpu (needs cluster-slot-stats-enabled yes), net-bytes (the
    /// same), keys
    #[arg(long, value_name = "requests|bytes|cpu|net-bytes|keys", default_value = "requests",
          value_parser = ["requests", "bytes", "cpu", "net-bytes", "keys"])]
    by: String,
    /// For --by cpu and net-bytes: how long to watch the nodes' running
    /// totals, in seconds
    #[arg(long, value_name = "SECS", default_value_t = 10.0)]
    sample: f64,
    /// How to move slots: atomic (CLUSTER MIGRATESLOTS, Valkey 9), legacy
    /// (SETSLOT and MIGRATE), or auto: atomic when every master offers it
    #[arg(long, value_name = "auto|atomic|legacy", default_value = "auto",
          value_parser = ["auto", "atomic", "legacy"])]
    method: String,
    /// Every master within this percentage of the mean load
    #[arg(long, value_name = "PCT", default_value_t = 10.0)]
    threshold: f64,
    /// Move at most this many slots
    #[arg(long, value_name = "N", default_value_t = 100)]
    max_moves: usize,
    /// Carry the plan out (without it, nothing changes)
    #[arg(long)]
    apply: bool,
    /// Do not ask for confirmation
    #[arg(long)]
    yes: bool,
}

fn main() -> ExitCode {
    let mut args = Args::parse();
    if let Some(Tool::Rebalance(r)) = args.tool.take() {
        return rebalance(r);
    }
    let file = config::file_path(args.config);
    let overrides = Overrides {
        listen: args.listen,
        seeds: args.seeds,
        threads: args.threads,
        metrics: args.metrics,
        backend_password: args.backend_password,
        requirepass: args.requirepass,
        read_from: args.read_from,
        mode: args.mode,
        tls_listen: args.tls_listen,
        tls_cert_file: args.tls_cert_file,
        tls_key_file: args.tls_key_file,
        tls_ca_cert_file: args.tls_ca_cert_file,
        tls_auth_clients: args.tls_auth_clients,
        backend_tls: args.backend_tls,
        backend_tls_ca_cert_file: args.backend_tls_ca_cert_file,
        backend_tls_cert_file: args.backend_tls_cert_file,
        backend_tls_key_file: args.backend_tls_key_file,
        backend_tls_server_name: args.backend_tls_server_name,
    };
    let settings =
        Config::load(file.as_deref(), std::env::vars(), &overrides).and_then(Config::validate);
    let mut settings = match settings {
        Ok(s) => s,
        Err(e) => {
            eprintln!("orthrus: {e}");
            return ExitCode::from(EXIT_BAD_CONFIG as u8);
        }
    };
    let file_for_reload = file.clone();
    settings.config_file = file;
    if args.check_config {
        return match config::masked_toml(&settings.raw) {
            Ok(text) => {
                println!("# configuration is valid; effective settings:\n{text}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("orthrus: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let log_filter = init_logging(&settings.raw.log);

    let listeners = match orthrus_proxy::bind(&settings) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("orthrus: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    let seeds: Vec<String> = settings.seeds.iter().map(ToString::to_string).collect();
    tracing::info!(
        listen = %listeners.address(),
        tls_listen = %listeners.tls_address().unwrap_or_else(|| "none".to_owned()),
        backend_tls = settings.tls.backend.is_some(),
        seeds = %seeds.join(","),
        threads = settings.threads,
        "orthrus {} listening",
        env!("CARGO_PKG_VERSION")
    );
    let (stops, reloads) = match signals(file_for_reload, overrides, log_filter) {
        Ok(channels) => channels,
        Err(e) => {
            eprintln!("orthrus: cannot listen for signals: {e}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("orthrus: {e}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = runtime.block_on(async {
        let (mut first, mut second) = (stops.clone(), stops);
        let shutdown = async move {
            let _ = first.wait_for(|n| *n >= 1).await;
        };
        let force = async move {
            let _ = second.wait_for(|n| *n >= 2).await;
        };
        orthrus_proxy::run(settings, listeners, shutdown, force, reloads).await
    });
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("orthrus: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `orthrus rebalance`: exit 0 when done, 64 on bad flags, 1 on failure.
fn rebalance(r: RebalanceArgs) -> ExitCode {
    let proxy = match r.proxy.parse() {
        Ok(addr) => addr,
        Err(e) => {
            eprintln!("orthrus rebalance: --proxy {}: {e}", r.proxy);
            return ExitCode::from(EXIT_BAD_CONFIG as u8);
        }
    };
    if !(r.threshold >= 0.0 && r.threshold.is_finite()) {
        eprintln!("orthrus rebalance: --threshold must be a percentage >= 0");
        return ExitCode::from(EXIT_BAD_CONFIG as u8);
    }
    let Ok(sample) = std::time::Duration::try_from_secs_f64(r.sample) else {
        eprintln!("orthrus rebalance: --sample must be a number of seconds >= 0");
        return ExitCode::from(EXIT_BAD_CONFIG as u8);
    };
    let (mut node_auth, node_tls) = match &r.config {
        None => (config::BackendConfig::default(), None),
        Some(file) => {
            match Config::load(Some(file), std::env::vars(), &Overrides::default())
                .and_then(Config::validate)
            {
                Ok(settings) => (settings.raw.backend.clone(), settings.tls.backend.clone()),
                Err(e) => {
                    eprintln!("orthrus rebalance: {e}");
                    return ExitCode::from(EXIT_BAD_CONFIG as u8);
                }
            }
        }
    };
    if r.node_password.is_some() {
        node_auth.password = r.node_password;
    }
    let opts = orthrus_proxy::rebalance::Options {
        proxy,
        password: r.password,
        node_auth,
        node_tls,
        require_replicas: r.require_replicas,
        by: match r.by.as_str() {
            "bytes" => Measure::Bytes,
            "cpu" => Measure::Cpu,
            "net-bytes" => Measure::NetBytes,
            "keys" => Measure::Keys,
            _ => Measure::Requests,
        },
        sample,
        method: match r.method.as_str() {
            "atomic" => Method::Atomic,
            "legacy" => Method::Legacy,
            _ => Method::Auto,
        },
        threshold_pct: r.threshold,
        max_moves: r.max_moves,
        apply: r.apply,
        yes: r.yes,
        interrupts: Interrupts::new(),
    };
    if let Err(e) = rebalance_signals(opts.interrupts.clone()) {
        eprintln!("orthrus rebalance: cannot listen for signals: {e}");
        return ExitCode::FAILURE;
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    let outcome = match runtime {
        Ok(rt) => rt.block_on(orthrus_proxy::rebalance::run(&opts)),
        Err(e) => Err(e.into()),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("orthrus rebalance: {e:#}");
            ExitCode::FAILURE
        }
    }
}

type LogFilter = tracing_subscriber::reload::Handle<EnvFilter, tracing_subscriber::Registry>;

/// Starts logging; the returned handle changes the level on SIGHUP.
fn init_logging(log: &config::LogConfig) -> LogFilter {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&log.level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let (filter, handle) = tracing_subscriber::reload::Layer::new(filter);
    let fmt = tracing_subscriber::fmt::layer()
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let registry = tracing_subscriber::registry().with(filter);
    match log.format {
        LogFormat::Text => registry.with(fmt).init(),
        LogFormat::Json => registry.with(fmt.json()).init(),
    }
    handle
}

/// SIGINT and SIGTERM for `orthrus rebalance`, taken by a thread of their
/// own: during the moves the first is handed to the move under way (which
/// cancels an atomic migration and stops), the second ends the process;
/// at any other time the process ends at once, exit code 130.
fn rebalance_signals(interrupts: Interrupts) -> std::io::Result<()> {
    use nix::sys::signal::{SigSet, Signal};
    let mut set = SigSet::empty();
    set.add(Signal::SIGINT);
    set.add(Signal::SIGTERM);
    set.thread_block().map_err(std::io::Error::from)?;
    std::thread::Builder::new()
        .name("orthrus-signals".into())
        .spawn(move || {
            let mut handed = false;
            loop {
                match set.wait() {
                    Ok(_) if !handed && interrupts.raise() => handed = true,
                    Ok(_) => std::process::exit(130),
                    Err(_) => return,
                }
            }
        })?;
    Ok(())
}

/// SIGHUP, SIGINT and SIGTERM, blocked in every thread and taken by one
/// thread of their own (`sigwait`), so that the runtimes need no signal
/// driver (tokio's looks for signals at every park of every worker).
///
/// SIGINT and SIGTERM are counted: the first stops orthrus gracefully, the
/// second at once. On SIGHUP the configuration is loaded again (file,
/// environment, the same flags), the log level applied here and the rest
/// handed to the proxy; a configuration that does not validate is refused
/// and the old one stays.
///
/// Called before any other thread starts, so that they all inherit the
/// blocked signals.
fn signals(
    file: Option<PathBuf>,
    overrides: Overrides,
    log_filter: LogFilter,
) -> std::io::Result<(
    tokio::sync::watch::Receiver<u32>,
    tokio::sync::mpsc::UnboundedReceiver<orthrus_proxy::Settings>,
)> {
    use nix::sys::signal::{SigSet, Signal};
    let (stops, stop_rx) = tokio::sync::watch::channel(0u32);
    let (reloads, reload_rx) = tokio::sync::mpsc::unbounded_channel();
    let mut set = SigSet::empty();
    for signal in [Signal::SIGHUP, Signal::SIGINT, Signal::SIGTERM] {
        set.add(signal);
    }
    set.thread_block().map_err(std::io::Error::from)?;
    std::thread::Builder::new()
        .name("orthrus-signals".into())
        .spawn(move || {
            loop {
                match set.wait() {
                    Ok(Signal::SIGHUP) => {
                        if let Some(settings) = reload(file.as_deref(), &overrides, &log_filter) {
                            let _ = reloads.send(settings);
                        }
                    }
                    Ok(_) => stops.send_modify(|n| *n += 1),
                    Err(e) => {
                        tracing::error!(error = %e, "cannot wait for signals");
                        return;
                    }
                }
            }
        })?;
    Ok((stop_rx, reload_rx))
}

/// The configuration loaded again for SIGHUP, the log level applied; `None`
/// (and the reason logged) when it does not validate.
fn reload(
    file: Option<&std::path::Path>,
    overrides: &Overrides,
    log_filter: &LogFilter,
) -> Option<orthrus_proxy::Settings> {
    match Config::load(file, std::env::vars(), overrides).and_then(Config::validate) {
        Ok(settings) => {
            if std::env::var_os("RUST_LOG").is_none() {
                if let Err(e) = log_filter.reload(EnvFilter::new(&settings.raw.log.level)) {
                    tracing::warn!(error = %e, "cannot change the log level");
                }
            }
            Some(settings)
        }
        Err(e) => {
            tracing::error!(error = %e, "SIGHUP: configuration refused; keeping the current one");
            None
        }
    }
}
