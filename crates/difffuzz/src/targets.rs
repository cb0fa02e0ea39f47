//! The targets the fuzzer starts when none is given: one redis-server, a
//! 3-master cluster (devcluster) and orthrus from the same target
//! directory as this binary, in front of the cluster. Dropping them stops
//! every process.

use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use orthrus_devcluster::{
    Cluster, ClusterSpec, NodeOptions, RedisNode, free_port, spawn_tied, tied_command,
};

use crate::diff::{Targets, reset};

/// How long orthrus may take to serve the cluster.
const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// Started processes; killed on drop.
pub struct Started {
    pub targets: Targets,
    _single: RedisNode,
    _cluster: Cluster,
    proxy: Child,
}

/// The orthrus binary: `orthrus` next to this executable
/// (`target/<profile>/orthrus` when run through cargo).
pub fn orthrus_binary() -> Result<PathBuf> {
    let path = std::env::current_exe()
        .context("locating orthrus-difffuzz itself")?
        .with_file_name("orthrus");
    let path = match path.is_file() {
        true => path,
        // Test binaries live one level down, in target/<profile>/deps.
        false => match path.parent().and_then(|d| d.parent()) {
            Some(up) if up.join("orthrus").is_file() => up.join("orthrus"),
            _ => bail!(
                "the orthrus binary is not at {}: build it with `cargo build -p orthrus-proxy` \
                 in the same target directory, or give --single and --proxy",
                path.display()
            ),
        },
    };
    Ok(path)
}

/// Whether the orthrus a run starts has its reply cache on (`--cache`).
pub static CACHE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Turns the reply cache on for `cmd`, an orthrus, when the run asks.
pub fn with_cache(cmd: &mut std::process::Command) {
    if CACHE.load(std::sync::atomic::Ordering::Relaxed) {
        cmd.env("ORTHRUS_CACHE__ENABLED", "true");
    }
}

/// The reply cache's counters of the orthrus at `proxy`, a line to print
/// (the run's sequences were answered from it that many times).
pub fn cache_line(proxy: SocketAddr, password: Option<&str>) -> Option<String> {
    let mut wire = crate::keyspace::Wire::connect(proxy, password).ok()?;
    let info = wire.call(&["INFO", "cache"]).ok()?;
    let text = String::from_utf8_lossy(&info).into_owned();
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .unwrap_or("?")
            .to_string()
    };
    Some(format!(
        "reply cache: {} hits, {} fills, {} misses, {} invalidations",
        field("cache_hits"),
        field("cache_fills"),
        field("cache_misses"),
        field("cache_invalidations")
    ))
}

/// Starts a redis-server, a 3-master cluster (serving `databases`
/// databases: Valkey's `cluster-databases`) and orthrus.
pub fn start(databases: u32) -> Result<Started> {
    let binary = orthrus_binary()?;
    let single =
        RedisNode::start(NodeOptions::default()).context("starting the single redis-server")?;
    // A long node timeout: a node starved of CPU is never failed over in
    // the middle of a run (this is about answers, not failover).
    let mut node = NodeOptions::cluster().with_config("cluster-node-timeout", "30000");
    if databases > 1 {
        node = node.with_config("cluster-databases", &databases.to_string());
    }
    let cluster =
        Cluster::start(ClusterSpec::new(3, 0).with_node(node)).context("starting the cluster")?;
    let port = free_port()?;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let seeds: Vec<String> = cluster.seeds().iter().map(SocketAddr::to_string).collect();
    let mut cmd = tied_command(&binary);
    cmd.arg("--listen")
        .arg(addr.to_string())
        .arg("--seeds")
        .arg(seeds.join(","))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    with_cache(&mut cmd);
    // Tied to this process: it dies with it, also when it is killed.
    let proxy = spawn_tied(cmd).with_context(|| format!("starting {}", binary.display()))?;
    let mut started = Started {
        targets: Targets {
            single: single.addr(),
            proxy: addr,
        },
        _single: single,
        _cluster: cluster,
        proxy,
    };
    started.wait_ready()?;
    Ok(started)
}

// === impl Started ===

impl Started {
    fn wait_ready(&mut self) -> Result<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(status) = self.proxy.try_wait()? {
                bail!("orthrus exited at start: {status}");
            }
            let last = match TcpStream::connect(self.targets.proxy) {
                Ok(_) => match reset(self.targets.proxy) {
                    Ok(()) => return Ok(()),
                    Err(e) => e,
                },
                Err(e) => e.to_string(),
            };
            if Instant::now() > deadline {
                bail!("orthrus did not serve the cluster within {READY_TIMEOUT:?}: {last}");
            }
            thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        let _ = self.proxy.kill();
        let _ = self.proxy.wait();
    }
}
