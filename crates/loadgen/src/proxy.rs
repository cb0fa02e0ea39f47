//! The `orthrus` process in front of a started cluster: spawned with
//! `--listen` on a free loopback port and `--seeds` naming the cluster, its
//! output kept in a temporary log that is quoted when it fails, and waited
//! for until it answers `SET` with +OK. Dropping it kills and reaps it.

use std::fs::{self, File};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use orthrus_devcluster::free_port;
use orthrus_resp::Value;
use tempfile::TempDir;

use crate::conn::{Conn, reply_text};
use crate::interrupt::Interrupt;

/// How long orthrus may take to discover its cluster and answer +OK.
pub const PROXY_READY_TIMEOUT: Duration = Duration::from_secs(10);
/// The key the readiness probe writes (and deletes).
pub const READY_KEY: &str = "orthrus-bench:ready";
/// The proxy's log lines quoted when it fails.
const LOG_TAIL_LINES: usize = 30;
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
const PROBE_INTERVAL: Duration = Duration::from_millis(50);

/// How orthrus is started.
#[derive(Clone, Debug)]
pub struct ProxyOptions {
    /// The `orthrus` binary.
    pub binary: PathBuf,
    /// `--threads`, when set.
    pub threads: Option<usize>,
    /// Replicas per master in the clusters behind it.
    pub replicas: usize,
    /// Environment variables for it, such as `ORTHRUS_CACHE__ENABLED`.
    pub env: Vec<(String, String)>,
}

/// A running `orthrus` process; dropping it kills and reaps it.
pub(crate) struct Proxy {
    pub(crate) child: Child,
    log: PathBuf,
    _dir: TempDir,
}

/// One readiness probe: `SET` answers +OK (not `-CLUSTERDOWN`), then `DEL`.
fn probe_set(addr: SocketAddr) -> Result<()> {
    let mut conn = Conn::connect(addr, PROBE_TIMEOUT)?;
    let reply = conn.call(&["SET", READY_KEY, "1"])?;
    if !matches!(&reply, Value::Simple(s) if &s[..] == b"OK") {
        bail!("SET answered {}", reply_text(&reply));
    }
    conn.call(&["DEL", READY_KEY])?;
    Ok(())
}

// === impl Proxy ===

impl Proxy {
    pub(crate) fn start(opts: &ProxyOptions, seeds: &[SocketAddr]) -> Result<(Proxy, SocketAddr)> {
        let dir = tempfile::Builder::new()
            .prefix("orthrus-bench-")
            .tempdir()?;
        let log = dir.path().join("orthrus.log");
        let out = File::create(&log)?;
        let port = free_port()?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let seeds: Vec<String> = seeds.iter().map(SocketAddr::to_string).collect();
        let mut cmd = Command::new(&opts.binary);
        // orthrus-bench's own ORTHRUS_BENCH_* variables stay in the
        // environment: orthrus ignores variables that name no setting.
        cmd.arg("--listen")
            .arg(addr.to_string())
            .arg("--seeds")
            .arg(seeds.join(","));
        if let Some(threads) = opts.threads {
            cmd.arg("--threads").arg(threads.to_string());
        }
        cmd.envs(opts.env.iter().map(|(k, v)| (k, v)));
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("starting {}", opts.binary.display()))?;
        Ok((
            Proxy {
                child,
                log,
                _dir: dir,
            },
            addr,
        ))
    }

    /// Waits until orthrus answers `SET` with +OK: it may say
    /// `-CLUSTERDOWN` while it discovers the cluster.
    pub(crate) fn wait_ready(&mut self, addr: SocketAddr, interrupt: &Interrupt) -> Result<()> {
        let deadline = Instant::now() + PROXY_READY_TIMEOUT;
        loop {
            interrupt.check()?;
            self.check_alive()?;
            let last = match probe_set(addr) {
                Ok(()) => return Ok(()),
                Err(e) => format!("{e:#}"),
            };
            if Instant::now() >= deadline {
                bail!(
                    "orthrus at {addr} did not answer `SET {READY_KEY} 1` with +OK within {:?}; last: {last}\n--- orthrus log ---\n{}",
                    PROXY_READY_TIMEOUT,
                    self.log_tail()
                );
            }
            thread::sleep(PROBE_INTERVAL);
        }
    }

    /// The process id, for its RSS.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(crate) fn check_alive(&mut self) -> Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!(
                "orthrus exited ({status})\n--- orthrus log ---\n{}",
                self.log_tail()
            );
        }
        Ok(())
    }

    fn log_tail(&self) -> String {
        let text = fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
