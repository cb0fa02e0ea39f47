//! The users mode's targets and check. The reference: one redis-server
//! with `requirepass` and the world's users (`ACL SETUSER`). orthrus: in
//! front of a 3-master cluster (the default upstream), with a standalone
//! upstream `b` behind `c:` and a standalone upstream `mir` mirroring
//! `m:`, started with the world's configuration file.
//!
//! A sequence is run on each side after every server of that side is
//! flushed directly (FLUSHALL, SCRIPT FLUSH, FUNCTION FLUSH; orthrus's
//! side also through orthrus, which forgets the scripts it knows). The
//! replies are compared as in the plain mode; then the data each side
//! ends with: the reference's keyspace against the union of the default
//! cluster's masters and `b`'s (with `c:` put back before each name when
//! the route removes it); and `mir` must hold exactly the default
//! cluster's `m:` keys, with the same values, within [`MIRROR_WAIT`]
//! (copies are fire and forget).

use std::net::SocketAddr;
use std::process::{Child, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use orthrus_devcluster::{
    Cluster, ClusterSpec, NodeOptions, RedisNode, free_port, spawn_tied, tied_command,
};

use crate::diff::{Difference, first_difference, show};
use crate::keyspace::{self, Keyspace, Wire, all_ok};
use crate::run;
use crate::sequence::Sequence;
use crate::targets::orthrus_binary;
use crate::world::{CUT, DEFAULT_PASSWORD, MIRRORED, World};

/// How long the mirror may take to hold the default upstream's `m:` keys.
pub const MIRROR_WAIT: Duration = Duration::from_secs(2);
const READY_TIMEOUT: Duration = Duration::from_secs(30);
const FLUSH: &[&[&str]] = &[&["FLUSHALL"], &["SCRIPT", "FLUSH"], &["FUNCTION", "FLUSH"]];

/// Where everything is.
#[derive(Clone, Debug)]
pub struct UserTargets {
    pub single: SocketAddr,
    pub proxy: SocketAddr,
    pub masters: Vec<SocketAddr>,
    pub b: SocketAddr,
    pub mir: SocketAddr,
    pub world: World,
}

/// Started processes; killed on drop.
pub struct Started {
    pub targets: UserTargets,
    _single: RedisNode,
    _cluster: Cluster,
    _b: RedisNode,
    _mir: RedisNode,
    proxy: Child,
    _config: tempfile::NamedTempFile,
}

/// Starts the reference with the world's users, the cluster, `b`, `mir`
/// and orthrus with the world's configuration.
pub fn start(world: World) -> Result<Started> {
    let binary = orthrus_binary()?;
    let single = RedisNode::start(NodeOptions::default().with_password(DEFAULT_PASSWORD))
        .context("starting the single redis-server")?;
    for user in &world.users {
        let mut wire =
            Wire::connect(single.addr(), Some(DEFAULT_PASSWORD)).map_err(anyhow::Error::msg)?;
        let mut args = vec!["ACL".to_string(), "SETUSER".to_string(), user.name.clone()];
        args.extend(user.reference_rules());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let reply = wire.call(&args).map_err(anyhow::Error::msg)?;
        if !reply.starts_with(b"+OK") {
            bail!("ACL SETUSER {}: {}", user.name, show(&reply));
        }
    }
    let node = NodeOptions::cluster().with_config("cluster-node-timeout", "30000");
    let cluster =
        Cluster::start(ClusterSpec::new(3, 0).with_node(node)).context("starting the cluster")?;
    let b = RedisNode::start(NodeOptions::default()).context("starting upstream b")?;
    let mir = RedisNode::start(NodeOptions::default()).context("starting upstream mir")?;
    let mut config = tempfile::NamedTempFile::new().context("config file")?;
    std::io::Write::write_all(
        &mut config,
        world
            .config(&b.addr().to_string(), &mir.addr().to_string())
            .as_bytes(),
    )?;
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()?));
    let seeds: Vec<String> = cluster.seeds().iter().map(SocketAddr::to_string).collect();
    let mut cmd = tied_command(&binary);
    // One worker: copies to the mirror leave in the order the requests
    // came, whatever connection sent them.
    cmd.arg("--listen")
        .arg(addr.to_string())
        .arg("--seeds")
        .arg(seeds.join(","))
        .arg("--config")
        .arg(config.path())
        .arg("--threads")
        .arg("1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    crate::targets::with_cache(&mut cmd);
    let proxy = spawn_tied(cmd).with_context(|| format!("starting {}", binary.display()))?;
    let mut started = Started {
        targets: UserTargets {
            single: single.addr(),
            proxy: addr,
            masters: cluster.nodes().iter().map(RedisNode::addr).collect(),
            b: b.addr(),
            mir: mir.addr(),
            world,
        },
        _single: single,
        _cluster: cluster,
        _b: b,
        _mir: mir,
        proxy,
        _config: config,
    };
    started.wait_ready()?;
    Ok(started)
}

/// Runs `seq` on both sides (each flushed first) and compares the replies,
/// then the data.
pub fn check(t: &UserTargets, seq: &Sequence) -> Result<Option<Difference>, String> {
    all_ok(t.single, Some(DEFAULT_PASSWORD), FLUSH)?;
    let single = run::run(t.single, seq);
    reset_proxy_side(t)?;
    let proxy = run::run(t.proxy, seq);
    if let Some(d) = first_difference(&single, &proxy) {
        return Ok(Some(d));
    }
    let last = seq.steps.len().saturating_sub(1);
    let reference = keyspace::dump(t.single, Some(DEFAULT_PASSWORD), b"")?;
    let mut primary = Keyspace::new();
    for m in &t.masters {
        primary.extend(keyspace::dump(*m, None, b"")?);
    }
    let b_prefix = if t.world.cut { CUT.as_bytes() } else { b"" };
    let on_b = keyspace::dump(t.b, None, b_prefix)?;
    let mut stored = primary.clone();
    stored.extend(on_b);
    if let Some((key, s, p)) = keyspace::first_difference(&reference, &stored) {
        return Ok(Some(data_difference(
            last,
            "(keyspace)",
            &key,
            s,
            p,
            "the data differs after the sequence",
        )));
    }
    let wanted = keyspace::under(&primary, MIRRORED.as_bytes());
    let deadline = Instant::now() + MIRROR_WAIT;
    loop {
        let mirrored = keyspace::under(&keyspace::dump(t.mir, None, b"")?, MIRRORED.as_bytes());
        match keyspace::first_difference(&wanted, &mirrored) {
            None => return Ok(None),
            Some((key, s, p)) if Instant::now() > deadline => {
                return Ok(Some(data_difference(
                    last,
                    "(mirror)",
                    &key,
                    s,
                    p,
                    "the mirror differs from the default upstream's m: keys (single: the default upstream)",
                )));
            }
            Some(_) => thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// Flushes every server of orthrus's side, through orthrus first (so it
/// forgets the scripts and functions it knows), then each directly.
fn reset_proxy_side(t: &UserTargets) -> Result<(), String> {
    all_ok(t.proxy, Some(DEFAULT_PASSWORD), FLUSH)?;
    for addr in t.masters.iter().chain([&t.b, &t.mir]) {
        all_ok(*addr, None, FLUSH)?;
    }
    Ok(())
}

fn data_difference(
    step: usize,
    what: &str,
    key: &[u8],
    single: Option<Vec<u8>>,
    proxy: Option<Vec<u8>>,
    why: &str,
) -> Difference {
    let text = |v: Option<Vec<u8>>| v.map_or_else(|| "(no such key)".to_string(), |v| show(&v));
    Difference {
        step,
        conn: 0,
        command: format!("{what} {}", crate::sequence::quote_arg(key)),
        single: text(single),
        proxy: text(proxy),
        why: why.to_string(),
    }
}

// === impl Started ===

impl Started {
    /// Waits until orthrus serves every upstream, then flushes.
    fn wait_ready(&mut self) -> Result<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        let sets: &[&[&str]] = &[
            &["SET", "ready", "1"],
            &["SET", "c:ready", "1"],
            &["SET", "m:ready", "1"],
        ];
        loop {
            if let Some(status) = self.proxy.try_wait()? {
                bail!("orthrus exited at start: {status}");
            }
            let last = match all_ok(self.targets.proxy, Some(DEFAULT_PASSWORD), sets) {
                Ok(()) => match reset_proxy_side(&self.targets) {
                    Ok(()) => return Ok(()),
                    Err(e) => e,
                },
                Err(e) => e,
            };
            if Instant::now() > deadline {
                bail!("orthrus did not serve every upstream within {READY_TIMEOUT:?}: {last}");
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
