//! One `redis-server` process in its own temporary directory.

use std::fs::{self, File};
use std::io::{self, Write};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use orthrus_resp::Value;
use tempfile::TempDir;

use crate::binaries::{free_port, locate_server};
use crate::{Conn, DevError, signal, spawner};

/// How long a starting server may take to answer.
pub const START_TIMEOUT: Duration = Duration::from_secs(10);
/// `cluster-node-timeout` unless overridden: short, so that failover tests
/// take seconds, long enough not to flap on a busy 2-core machine.
pub const DEFAULT_NODE_TIMEOUT_MS: u32 = 2000;

/// Tries with fresh ports when another process took the chosen one between
/// [`free_port`] and the server's bind.
const START_ATTEMPTS: usize = 5;
/// How long one readiness probe may wait for an answer.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);
const PROBE_INTERVAL: Duration = Duration::from_millis(10);
/// Log lines quoted in a [`DevError::StartFailed`].
const LOG_TAIL_LINES: usize = 25;

const CONF_FILE: &str = "redis.conf";
const LOG_FILE: &str = "redis.log";
/// stdout and stderr: Redis prints config-file errors there, before it opens
/// its log file.
const STDIO_FILE: &str = "stdio.log";
const NODES_FILE: &str = "nodes.conf";
const SOCKET_FILE: &str = "redis.sock";

/// How to start a node.
#[derive(Clone, Debug, Default)]
pub struct NodeOptions {
    /// `cluster-enabled yes`, with its own cluster bus port.
    pub cluster: bool,
    /// The client port; `None` picks a free one.
    pub port: Option<u16>,
    /// Extra redis.conf directives, written after the defaults (so they
    /// override them) as `key value`, the value verbatim (it may hold several
    /// words); an empty value is written as `""`.
    pub config: Vec<(String, String)>,
    /// The password devcluster sends with AUTH on its own connections. It
    /// does not configure the server: see [`NodeOptions::with_password`].
    pub password: Option<String>,
    /// TLS only: see [`NodeOptions::with_tls`].
    pub tls: Option<TlsFiles>,
}

/// A node's certificate, its key, and the CA it verifies peers with
/// (PEM files).
#[derive(Clone, Debug)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
}

/// A running (or killed, or paused) `redis-server`. Dropping it kills the
/// process and deletes its directory, also while a test unwinds from a panic.
#[derive(Debug)]
pub struct RedisNode {
    opts: NodeOptions,
    server: PathBuf,
    dir: TempDir,
    port: u16,
    cluster_port: Option<u16>,
    child: Option<Child>,
    paused: AtomicBool,
    /// The client port it tells the cluster instead of its own (0: its
    /// own): a [`Relay`](crate::Relay) in front of it.
    announced: AtomicU16,
}

// === impl NodeOptions ===

impl NodeOptions {
    /// Options for a cluster node.
    pub fn cluster() -> NodeOptions {
        NodeOptions {
            cluster: true,
            ..NodeOptions::default()
        }
    }

    /// Protects the server with `password` (`requirepass`), lets replicas
    /// authenticate to their master (`masterauth`), and makes devcluster AUTH
    /// with it.
    pub fn with_password(mut self, password: &str) -> NodeOptions {
        self.config.push(("requirepass".into(), password.into()));
        self.config.push(("masterauth".into(), password.into()));
        self.password = Some(password.into());
        self
    }

    /// TLS only: the client port is a `tls-port` (no plain port), the
    /// cluster bus and replication use TLS too, and clients may present a
    /// certificate (`tls-auth-clients optional`; override with
    /// [`NodeOptions::with_config`]). devcluster itself talks to the node
    /// over a Unix socket in its directory.
    pub fn with_tls(mut self, files: TlsFiles) -> NodeOptions {
        self.tls = Some(files);
        self
    }

    /// Adds one redis.conf directive.
    pub fn with_config(mut self, key: &str, value: &str) -> NodeOptions {
        self.config.push((key.into(), value.into()));
        self
    }
}

// === impl RedisNode ===

impl RedisNode {
    /// Starts a server and waits (at most [`START_TIMEOUT`]) until it
    /// answers. Picks free ports unless `opts.port` is set, and picks new
    /// ones if they were taken before the server could bind them.
    pub fn start(opts: NodeOptions) -> Result<RedisNode, DevError> {
        let server = locate_server()?;
        let dir = tempfile::Builder::new()
            .prefix("orthrus-redis-")
            .tempdir()?;
        let mut node = RedisNode {
            opts,
            server,
            dir,
            port: 0,
            cluster_port: None,
            child: None,
            paused: AtomicBool::new(false),
            announced: AtomicU16::new(0),
        };
        let attempts = if node.opts.port.is_some() {
            1
        } else {
            START_ATTEMPTS
        };
        let mut attempt = 0;
        loop {
            attempt += 1;
            node.pick_ports()?;
            // A failed attempt may have written a nodes.conf naming its ports.
            remove_if_exists(&node.dir.path().join(NODES_FILE))?;
            match node.launch() {
                Ok(()) => return Ok(node),
                Err(e) if attempt < attempts && is_port_clash(&e) => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// `127.0.0.1:port`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    /// The client port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The cluster bus port, for cluster nodes.
    pub fn cluster_port(&self) -> Option<u16> {
        self.cluster_port
    }

    /// The client port it announces to the cluster (`CLUSTER SLOTS`,
    /// `SHARDS`, `NODES`, and to its replicas) when that is not its own.
    pub fn announced_port(&self) -> Option<u16> {
        Some(self.announced.load(Ordering::Relaxed)).filter(|&p| p != 0)
    }

    /// Makes a cluster node announce `port` as its client port
    /// (`cluster-announce-port`), now and after a restart; its cluster bus
    /// port stays its own. Other nodes learn it by gossip.
    pub fn announce_port(&self, port: u16) -> Result<(), DevError> {
        self.cmd_ok(&["CONFIG", "SET", "cluster-announce-port", &port.to_string()])?;
        self.announced.store(port, Ordering::Relaxed);
        Ok(())
    }

    /// The process id; `None` once killed.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The options it was started with.
    pub fn options(&self) -> &NodeOptions {
        &self.opts
    }

    /// Its temporary directory (config, log, nodes.conf).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The last `lines` lines of its log file and of its stdout/stderr.
    pub fn log_tail(&self, lines: usize) -> String {
        let mut out = tail(&self.dir.path().join(LOG_FILE), lines);
        let stdio = tail(&self.dir.path().join(STDIO_FILE), lines);
        if !stdio.is_empty() {
            out.push_str("--- stdout/stderr ---\n");
            out.push_str(&stdio);
        }
        out
    }

    /// A new connection, authenticated when the options carry a password.
    pub fn connect(&self) -> Result<Conn, DevError> {
        self.connect_timeout(crate::conn::DEFAULT_TIMEOUT)
    }

    /// Like [`RedisNode::connect`], with another connect/read/write timeout.
    pub fn connect_timeout(&self, timeout: Duration) -> Result<Conn, DevError> {
        let mut conn = self.open(timeout)?;
        if let Some(password) = &self.opts.password {
            conn.auth(password)?;
        }
        Ok(conn)
    }

    /// One command on a fresh connection. Error replies are
    /// `Ok(Value::Error)`.
    pub fn cmd<A: AsRef<[u8]>>(&self, args: &[A]) -> Result<Value, DevError> {
        self.connect()?.cmd(args)
    }

    /// One command on a fresh connection; error replies are errors.
    pub fn cmd_ok<A: AsRef<[u8]>>(&self, args: &[A]) -> Result<Value, DevError> {
        self.connect()?.cmd_ok(args)
    }

    /// SIGKILL, then reap. Does nothing when already killed.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // Fails only if the process is already reaped, which cannot
            // happen while we hold the Child; wait() then reaps it.
            let _ = child.kill();
            let _ = child.wait();
        }
        self.paused.store(false, Ordering::Relaxed);
    }

    /// SIGSTOP: the process keeps its sockets but answers nothing.
    pub fn pause(&self) -> Result<(), DevError> {
        signal::stop(self.running_pid()?)?;
        self.paused.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// SIGCONT after [`RedisNode::pause`].
    pub fn resume(&self) -> Result<(), DevError> {
        signal::resume(self.running_pid()?)?;
        self.paused.store(false, Ordering::Relaxed);
        Ok(())
    }

    /// Whether [`RedisNode::pause`] stopped it (and it was not resumed).
    pub fn is_paused(&self) -> bool {
        self.paused.load(Ordering::Relaxed)
    }

    /// Starts it again on the same ports and directory, killing it first if
    /// it runs. A cluster node reloads its nodes.conf and rejoins.
    pub fn restart(&mut self) -> Result<(), DevError> {
        self.kill();
        self.launch()
    }

    /// Whether the process is alive; notices a process that died by itself.
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut().map(Child::try_wait) {
            Some(Ok(None)) => true,
            Some(Ok(Some(_)) | Err(_)) => {
                self.child = None;
                self.paused.store(false, Ordering::Relaxed);
                false
            }
            None => false,
        }
    }

    /// Started, not killed, not paused: worth sending a command to.
    pub(crate) fn is_live(&self) -> bool {
        self.child.is_some() && !self.is_paused()
    }

    fn running_pid(&self) -> Result<u32, DevError> {
        self.pid().ok_or(DevError::NotRunning { port: self.port })
    }

    fn pick_ports(&mut self) -> io::Result<()> {
        self.port = match self.opts.port {
            Some(port) => port,
            None => free_port()?,
        };
        self.cluster_port = None;
        if self.opts.cluster {
            // Never port + 10000: nothing says that one is free.
            let mut bus = free_port()?;
            while bus == self.port {
                bus = free_port()?;
            }
            self.cluster_port = Some(bus);
        }
        Ok(())
    }

    /// Writes the config, spawns the server, waits until it answers.
    fn launch(&mut self) -> Result<(), DevError> {
        let conf = self.write_config()?;
        let stdio = File::create(self.dir.path().join(STDIO_FILE))?;
        let mut cmd = spawner::server_command(&self.server);
        cmd.arg(&conf)
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(stdio.try_clone()?)
            .stderr(stdio);
        let child = spawner::spawn(cmd)?;
        self.child = Some(child);
        self.paused.store(false, Ordering::Relaxed);
        let result = self.wait_ready();
        if result.is_err() {
            self.kill();
        }
        result
    }

    fn wait_ready(&mut self) -> Result<(), DevError> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let status = match self.child.as_mut() {
                Some(child) => child.try_wait()?,
                None => return Err(self.start_failed("killed while starting".into())),
            };
            if let Some(status) = status {
                return Err(self.start_failed(format!("redis-server exited: {status}")));
            }
            if self.answers_as_itself() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(self.start_failed(format!(
                    "no answer on {} within {:?}",
                    self.addr(),
                    START_TIMEOUT
                )));
            }
            thread::sleep(PROBE_INTERVAL);
        }
    }

    /// Whether our own process answers on the port. Checking the pid in
    /// `INFO server` guards against another program that happens to listen
    /// on the port we picked: then ours fails to bind and is retried.
    fn answers_as_itself(&self) -> bool {
        let Ok(mut conn) = self.open(PROBE_TIMEOUT) else {
            return false;
        };
        if let Some(password) = &self.opts.password {
            // A wrong password shows up later, on the first real command,
            // with the server's own message.
            if conn.cmd(&["AUTH", password.as_str()]).is_err() {
                return false;
            }
        }
        match conn.cmd(&["INFO", "server"]) {
            // Password protected and we were not told the password: ours
            // only if its config sets one (then the exit check catches a
            // failed bind); otherwise another server holds the port, and
            // ours fails to bind and is retried.
            Ok(Value::Error(e)) => e.starts_with(b"NOAUTH") && self.sets_password(),
            Ok(reply) => reply.as_str().is_some_and(|info| {
                info_field(info, "process_id") == self.pid().map(|p| p.to_string()).as_deref()
            }),
            Err(_) => false,
        }
    }

    /// Whether the node's config protects it with a password.
    fn sets_password(&self) -> bool {
        self.opts
            .config
            .iter()
            .any(|(key, _)| key.eq_ignore_ascii_case("requirepass"))
    }

    /// A connection, not authenticated: over TCP, or for a TLS-only node
    /// over its Unix socket.
    fn open(&self, timeout: Duration) -> Result<Conn, DevError> {
        match &self.opts.tls {
            None => Conn::connect_timeout(self.addr(), timeout),
            Some(_) => Conn::connect_unix(&self.unix_socket(), self.addr(), timeout),
        }
    }

    /// Where a TLS-only node also listens, for devcluster's own use.
    pub fn unix_socket(&self) -> PathBuf {
        self.dir.path().join(SOCKET_FILE)
    }

    fn start_failed(&self, reason: String) -> DevError {
        DevError::StartFailed {
            port: self.port,
            reason,
            log_tail: self.log_tail(LOG_TAIL_LINES),
        }
    }

    fn write_config(&self) -> io::Result<PathBuf> {
        let dir = self.dir.path();
        let mut text = String::new();
        let mut line = |key: &str, value: &str| {
            text.push_str(key);
            text.push(' ');
            text.push_str(value);
            text.push('\n');
        };
        line("bind", "127.0.0.1");
        match &self.opts.tls {
            None => line("port", &self.port.to_string()),
            Some(tls) => {
                line("port", "0");
                line("tls-port", &self.port.to_string());
                line("tls-cert-file", &quote(&tls.cert.to_string_lossy()));
                line("tls-key-file", &quote(&tls.key.to_string_lossy()));
                line("tls-ca-cert-file", &quote(&tls.ca.to_string_lossy()));
                line("tls-auth-clients", "optional");
                line("tls-replication", "yes");
                if self.cluster_port.is_some() {
                    line("tls-cluster", "yes");
                }
                line(
                    "unixsocket",
                    &quote(&dir.join(SOCKET_FILE).to_string_lossy()),
                );
                line("unixsocketperm", "700");
            }
        }
        line("dir", &quote(&dir.to_string_lossy()));
        line("logfile", &quote(&dir.join(LOG_FILE).to_string_lossy()));
        line("save", "\"\"");
        line("appendonly", "no");
        line("protected-mode", "no");
        line("daemonize", "no");
        line("enable-debug-command", "local");
        // The 5 s default batches replicas that start syncing together; here
        // it would only delay every cluster start by 5 s.
        line("repl-diskless-sync-delay", "0");
        if let Some(bus) = self.cluster_port {
            line("cluster-enabled", "yes");
            line(
                "cluster-config-file",
                &quote(&dir.join(NODES_FILE).to_string_lossy()),
            );
            line("cluster-node-timeout", &DEFAULT_NODE_TIMEOUT_MS.to_string());
            line("cluster-port", &bus.to_string());
            // CLUSTER SLOTS lists a replica only once its replication offset
            // is non-zero, and on an idle master only these pings move it:
            // at the 10 s default, every start would wait 10 s for replicas.
            line("repl-ping-replica-period", "1");
            if let Some(port) = self.announced_port() {
                line("cluster-announce-port", &port.to_string());
            }
        }
        for (key, value) in &self.opts.config {
            line(key, if value.is_empty() { "\"\"" } else { value });
        }
        let path = dir.join(CONF_FILE);
        fs::File::create(&path)?.write_all(text.as_bytes())?;
        Ok(path)
    }
}

impl Drop for RedisNode {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The value of `name:` in an INFO reply.
pub fn info_field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines().find_map(|line| {
        line.strip_prefix(name)
            .and_then(|rest| rest.strip_prefix(':'))
            .map(str::trim)
    })
}

fn is_port_clash(err: &DevError) -> bool {
    matches!(err, DevError::StartFailed { log_tail, .. } if log_tail.contains("Address already in use"))
}

/// A redis.conf string argument: quoted, with `\` and `"` escaped.
fn quote(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        if c == '\\' || c == '"' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

fn tail(path: &Path, lines: usize) -> String {
    let Ok(text) = fs::read_to_string(path) else {
        return String::new();
    };
    let all: Vec<&str> = text.lines().collect();
    let start = all.len().saturating_sub(lines);
    let mut out = all[start..].join("\n");
    if !out.is_empty() {
        out.push('\n');
    }
    out
}

fn remove_if_exists(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_config_strings() {
        assert_eq!(quote("/tmp/a b"), "\"/tmp/a b\"");
        assert_eq!(quote(r#"a"b\c"#), r#""a\"b\\c""#);
    }

    #[test]
    fn reads_info_fields() {
        let info = "# Server\r\nredis_version:7.0.15\r\nprocess_id:42\r\n";
        assert_eq!(info_field(info, "process_id"), Some("42"));
        assert_eq!(info_field(info, "redis_version"), Some("7.0.15"));
        assert_eq!(info_field(info, "process"), None);
    }

    #[test]
    fn tail_keeps_the_last_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        fs::write(&path, "a\nb\nc\n").unwrap();
        assert_eq!(tail(&path, 2), "b\nc\n");
        assert_eq!(tail(&path, 10), "a\nb\nc\n");
        assert_eq!(tail(&dir.path().join("missing"), 3), "");
    }
}
