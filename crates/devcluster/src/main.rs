//! `orthrus-devcluster`: starts a throwaway Redis Cluster (or one plain
//! server) on loopback, prints its addresses, and keeps it until SIGINT,
//! SIGTERM or SIGHUP, then stops every node it started.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use orthrus_devcluster::{Cluster, ClusterSpec, NodeOptions, RedisNode};

#[derive(Parser, Debug)]
#[command(name = "orthrus-devcluster", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Start a Redis Cluster on free loopback ports.
    Up {
        /// Number of masters; the 16384 slots are split evenly over them.
        #[arg(long, default_value_t = 3)]
        masters: usize,
        /// Replicas per master.
        #[arg(long, default_value_t = 1)]
        replicas: usize,
        /// Write the comma-separated node addresses here once the cluster is
        /// ready (atomically, so a script can wait for the file to appear).
        /// Removed again on shutdown.
        #[arg(long)]
        seeds_file: Option<PathBuf>,
        /// Protect every node with this password (requirepass/masterauth).
        #[arg(long, env = "ORTHRUS_DEVCLUSTER_PASSWORD")]
        password: Option<String>,
    },
    /// Start one plain (non-cluster) redis-server.
    Single {
        /// Client port; default: a free one.
        #[arg(long)]
        port: Option<u16>,
        /// Protect it with this password.
        #[arg(long, env = "ORTHRUS_DEVCLUSTER_PASSWORD")]
        password: Option<String>,
        /// Write its address here once it is ready; removed on shutdown.
        #[arg(long)]
        addr_file: Option<PathBuf>,
    },
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    // Installed before anything starts: a signal that arrives while nodes
    // are starting is kept and acted on as soon as start-up returns, so
    // nothing is left running.
    let stop = stop_signal()?;
    match cli.command {
        Command::Up {
            masters,
            replicas,
            seeds_file,
            password,
        } => {
            let mut node = NodeOptions::cluster();
            if let Some(password) = &password {
                node = node.with_password(password);
            }
            let spec = ClusterSpec::new(masters, replicas).with_node(node);
            up(spec, seeds_file.as_deref(), &stop)
        }
        Command::Single {
            port,
            password,
            addr_file,
        } => {
            let mut opts = NodeOptions {
                port,
                ..NodeOptions::default()
            };
            if let Some(password) = &password {
                opts = opts.with_password(password);
            }
            single(opts, addr_file.as_deref(), &stop)
        }
    }
}

fn up(spec: ClusterSpec, seeds_file: Option<&Path>, stop: &mpsc::Receiver<()>) -> Result<()> {
    let cluster = Cluster::start(spec).context("starting the cluster")?;
    let mut out = io::stdout().lock();
    let masters = cluster.masters()?;
    for (i, node) in cluster.nodes().iter().enumerate() {
        if masters.contains(&i) {
            writeln!(out, "master  {}", node.addr())?;
        }
    }
    for &m in &masters {
        for r in cluster.replicas_of(m)? {
            let master = cluster.nodes()[m].addr();
            writeln!(out, "replica {} of {master}", cluster.nodes()[r].addr())?;
        }
    }
    let seeds = cluster
        .seeds()
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",");
    writeln!(out, "seeds: {seeds}")?;
    out.flush()?;
    drop(out);
    serve(&seeds, seeds_file, stop)?;
    drop(cluster);
    Ok(())
}

fn single(opts: NodeOptions, addr_file: Option<&Path>, stop: &mpsc::Receiver<()>) -> Result<()> {
    let node = RedisNode::start(opts).context("starting redis-server")?;
    let addr = node.addr().to_string();
    let mut out = io::stdout().lock();
    writeln!(out, "single  {addr}")?;
    out.flush()?;
    drop(out);
    serve(&addr, addr_file, stop)?;
    drop(node);
    Ok(())
}

/// Publishes `text` in `file` (if any), waits for the stop signal, and
/// removes the file again.
fn serve(text: &str, file: Option<&Path>, stop: &mpsc::Receiver<()>) -> Result<()> {
    if let Some(file) = file {
        write_atomically(file, text)?;
    }
    eprintln!("ready; SIGINT or SIGTERM stops every node");
    // An Err only means the handler's sender is gone, which cannot happen
    // before the process exits; either way it is time to stop.
    let _ = stop.recv();
    eprintln!("stopping");
    if let Some(file) = file {
        let _ = fs::remove_file(file);
    }
    Ok(())
}

/// Writes a sibling temp file and renames it over `path`, so a reader never
/// sees a half-written list.
fn write_atomically(path: &Path, text: &str) -> Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    fs::write(&tmp, format!("{text}\n")).with_context(|| format!("writing {}", tmp.display()))?;
    fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))?;
    Ok(())
}

/// A channel that receives once per SIGINT/SIGTERM/SIGHUP (the `ctrlc`
/// crate's `termination` feature), without unsafe code here.
fn stop_signal() -> Result<mpsc::Receiver<()>> {
    let (tx, rx) = mpsc::sync_channel(1);
    ctrlc::set_handler(move || {
        // Full means a stop is already pending.
        let _ = tx.try_send(());
    })
    .context("installing the signal handler")?;
    Ok(rx)
}
