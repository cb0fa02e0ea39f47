//! What a comparison measures: a redis-server the driver starts, orthrus
//! started in front of a cluster the driver starts, or an address given on
//! the command line (any deployment, any other proxy).
//!
//! Started targets live on free loopback ports, are flushed before every
//! run, and are stopped when their [`Target`] is dropped — at the end, on an
//! error and on Ctrl-C. External targets are neither flushed nor stopped:
//! they may hold someone's data, and every worker deletes what it wrote.

use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use orthrus_devcluster::{Cluster, ClusterSpec, NodeOptions, RedisNode};
use orthrus_resp::Value;

use crate::conn::{Conn, reply_text};
use crate::interrupt::Interrupt;
use crate::proxy::{Proxy, ProxyOptions};
use crate::results::{TargetInfo, TargetKind};

/// How long an external target may take to answer PING.
const PING_TIMEOUT: Duration = Duration::from_secs(5);

/// A target the driver starts itself: `single`, or `cluster<N>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Topology {
    /// One redis-server.
    Single,
    /// orthrus in front of a cluster of this many masters.
    Cluster(usize),
}

/// A `--target NAME=HOST:PORT` or `--single HOST:PORT`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct External {
    /// Its name in the table.
    pub name: String,
    /// Where it listens.
    pub addr: SocketAddr,
}

/// One column group's target, with whatever keeps it running.
pub struct Target {
    /// Name, label, address, kind.
    pub info: TargetInfo,
    /// Where the workers connect.
    pub addr: SocketAddr,
    backing: Backing,
}

enum Backing {
    Single(RedisNode),
    // Field order is drop order: the proxy stops before its cluster.
    Orthrus { proxy: Proxy, cluster: Cluster },
    External,
}

// === impl Topology ===

impl Topology {
    /// Its name in the table and in `--topologies`.
    pub fn name(self) -> String {
        match self {
            Topology::Single => "single".to_owned(),
            Topology::Cluster(n) => format!("cluster{n}"),
        }
    }
}

impl FromStr for Topology {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> Result<Topology> {
        if s == "single" {
            return Ok(Topology::Single);
        }
        let masters = s
            .strip_prefix("cluster")
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|n| (1..=64).contains(n))
            .ok_or_else(|| {
                anyhow!("unknown topology {s:?}: expected single or cluster<N> (N masters, 1..=64)")
            })?;
        Ok(Topology::Cluster(masters))
    }
}

impl fmt::Display for Topology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

// === impl External ===

impl External {
    /// Parses `NAME=HOST:PORT`.
    pub fn parse_named(s: &str) -> Result<External> {
        let (name, addr) = s
            .split_once('=')
            .ok_or_else(|| anyhow!("expected NAME=HOST:PORT, got {s:?}"))?;
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        {
            bail!("target name {name:?} must be non-empty letters, digits, '-', '_' or '.'");
        }
        Ok(External {
            name: name.to_owned(),
            addr: resolve(addr)?,
        })
    }
}

/// Resolves `HOST:PORT` to its first address.
pub fn resolve(s: &str) -> Result<SocketAddr> {
    s.to_socket_addrs()
        .with_context(|| format!("resolving {s:?} (expected HOST:PORT)"))?
        .next()
        .ok_or_else(|| anyhow!("{s:?} resolves to no address"))
}

/// The orthrus binary: `explicit`, else `orthrus` next to this executable
/// (`target/<profile>/orthrus` when run through cargo).
pub fn orthrus_binary(explicit: Option<&Path>) -> Result<PathBuf> {
    let path = match explicit {
        Some(p) => p.to_path_buf(),
        None => std::env::current_exe()
            .context("locating orthrus-bench itself")?
            .with_file_name("orthrus"),
    };
    if !path.is_file() {
        bail!(
            "the orthrus binary is not at {}: build it with `cargo build --release -p orthrus-proxy` \
             (and run orthrus-bench from the same target directory), or pass --orthrus PATH",
            path.display()
        );
    }
    Ok(path)
}

// === impl Target ===

impl Target {
    /// Starts a redis-server on a free port.
    pub fn start_single() -> Result<Target> {
        let node =
            RedisNode::start(NodeOptions::default()).context("starting the single redis-server")?;
        let addr = node.addr();
        Ok(Target {
            info: TargetInfo {
                name: "single".into(),
                label: "Single Redis".into(),
                addr: addr.to_string(),
                kind: TargetKind::Single,
                baseline: true,
            },
            addr,
            backing: Backing::Single(node),
        })
    }

    /// Starts a cluster of `masters` masters and orthrus in front of it, and
    /// waits until orthrus answers `SET` with +OK.
    pub fn start_orthrus(
        masters: usize,
        opts: &ProxyOptions,
        interrupt: &Interrupt,
    ) -> Result<Target> {
        let cluster = Cluster::start(ClusterSpec::new(masters, opts.replicas))
            .with_context(|| format!("starting a {masters}-master cluster"))?;
        interrupt.check()?;
        let (mut proxy, addr) = Proxy::start(opts, &cluster.seeds())?;
        proxy.wait_ready(addr, interrupt)?;
        Ok(Target {
            info: TargetInfo {
                name: Topology::Cluster(masters).name(),
                label: format!("Orthrus + Cluster ({masters})"),
                addr: addr.to_string(),
                kind: TargetKind::Orthrus {
                    masters,
                    replicas: opts.replicas,
                },
                baseline: false,
            },
            addr,
            backing: Backing::Orthrus { proxy, cluster },
        })
    }

    /// A target that already runs; checked with PING.
    pub fn external(ext: &External, baseline: bool) -> Result<Target> {
        let mut conn = Conn::connect(ext.addr, PING_TIMEOUT)
            .with_context(|| format!("target {} at {}", ext.name, ext.addr))?;
        let pong = conn.call(&["PING"])?;
        if !matches!(&pong, Value::Simple(s) if &s[..] == b"PONG") {
            bail!(
                "target {} at {} answered PING with {}",
                ext.name,
                ext.addr,
                reply_text(&pong)
            );
        }
        let label = if baseline {
            "Single Redis".to_owned()
        } else {
            ext.name.clone()
        };
        Ok(Target {
            info: TargetInfo {
                name: ext.name.clone(),
                label,
                addr: ext.addr.to_string(),
                kind: TargetKind::External,
                baseline,
            },
            addr: ext.addr,
            backing: Backing::External,
        })
    }

    /// Empties a started target before a run, and checks that a started
    /// proxy is still alive; does nothing to an external one.
    pub fn prepare_run(&mut self) -> Result<()> {
        match &mut self.backing {
            Backing::Single(node) => {
                node.cmd(&["FLUSHALL"])
                    .context("flushing the single redis-server")?;
            }
            Backing::Orthrus { proxy, cluster } => {
                proxy.check_alive()?;
                cluster.flushall().context("flushing the cluster")?;
            }
            Backing::External => {}
        }
        Ok(())
    }

    /// The processes it keeps running (proxy and redis-servers).
    pub fn pids(&self) -> Vec<u32> {
        match &self.backing {
            Backing::Single(node) => node.pid().into_iter().collect(),
            Backing::Orthrus { proxy, cluster } => std::iter::once(proxy.child.id())
                .chain(cluster.nodes().iter().filter_map(RedisNode::pid))
                .collect(),
            Backing::External => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topologies_parse() {
        assert_eq!("single".parse::<Topology>().unwrap(), Topology::Single);
        assert_eq!(
            "cluster6".parse::<Topology>().unwrap(),
            Topology::Cluster(6)
        );
        assert_eq!(Topology::Cluster(3).to_string(), "cluster3");
        for bad in ["cluster", "cluster0", "clusterx", "Single", "cluster65"] {
            assert!(bad.parse::<Topology>().is_err(), "{bad}");
        }
    }

    #[test]
    fn named_targets_parse() {
        let t = External::parse_named("twemproxy=127.0.0.1:22121").unwrap();
        assert_eq!(t.name, "twemproxy");
        assert_eq!(t.addr, "127.0.0.1:22121".parse().unwrap());
        assert!(External::parse_named("127.0.0.1:1").is_err());
        assert!(External::parse_named("=127.0.0.1:1").is_err());
        assert!(External::parse_named("a b=127.0.0.1:1").is_err());
        assert!(External::parse_named("x=nowhere").is_err());
    }

    #[test]
    fn missing_orthrus_names_the_build_command() {
        let err = orthrus_binary(Some(Path::new("/nonexistent/orthrus"))).unwrap_err();
        assert!(
            err.to_string()
                .contains("cargo build --release -p orthrus-proxy"),
            "{err}"
        );
    }

    #[test]
    fn single_is_flushed_and_external_answers_ping() {
        let mut single = Target::start_single().unwrap();
        assert!(single.info.baseline);
        let node_pids = single.pids();
        assert_eq!(node_pids.len(), 1);
        let mut conn = Conn::connect(single.addr, Duration::from_secs(5)).unwrap();
        conn.call(&["SET", "a", "1"]).unwrap();
        single.prepare_run().unwrap();
        assert_eq!(conn.call(&["DBSIZE"]).unwrap(), Value::Integer(0));

        let ext = External {
            name: "again".into(),
            addr: single.addr,
        };
        let mut other = Target::external(&ext, false).unwrap();
        assert_eq!(other.info.label, "again");
        assert!(other.pids().is_empty());
        conn.call(&["SET", "a", "1"]).unwrap();
        other.prepare_run().unwrap();
        assert_eq!(
            conn.call(&["DBSIZE"]).unwrap(),
            Value::Integer(1),
            "external targets are never flushed"
        );
    }
}
