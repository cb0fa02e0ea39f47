//! The command line: `orthrus-bench compare` and the hidden `worker`.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::conn_memory::{self, ConnMemoryArgs};
use crate::interrupt::{EXIT_INTERRUPTED, Interrupted};
use crate::plan::CompareArgs;
use crate::results::WorkloadKind;
use crate::worker::{self, WorkerConfig};

/// Load driver for orthrus: reproduces the Cerberus comparison of a single
/// redis-server against a proxy in front of a Redis Cluster.
#[derive(Parser, Debug)]
#[command(name = "orthrus-bench", version)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: CliCommand,
}

/// The subcommands.
#[derive(Subcommand, Debug)]
pub enum CliCommand {
    /// Run the comparison: for each concurrency level P, P worker processes
    /// each run the keys, hash and list sets against every target; prints
    /// the Min/Max/Avg/Ratio table and writes JSON, markdown and an SVG
    /// chart.
    Compare(CompareArgs),
    /// Measure what idle client connections cost running servers or
    /// proxies in memory: RSS (from /proc/PID/status) at idle, with N idle
    /// connections, after one PING on each, and after they all closed.
    ConnMemory(ConnMemoryArgs),
    /// One worker process (started by `compare`, not by hand).
    #[command(hide = true)]
    Worker(WorkerArgs),
}

/// Flags of the hidden `worker`.
#[derive(Args, Debug, Clone)]
pub struct WorkerArgs {
    /// The target.
    #[arg(long)]
    pub addr: SocketAddr,
    /// This process's key prefix.
    #[arg(long)]
    pub prefix: String,
    /// Commands per set.
    #[arg(long)]
    pub ops: u64,
    /// modern or classic.
    #[arg(long, default_value = "modern")]
    pub workload: WorkloadKind,
    /// Connect/read/write timeout, milliseconds.
    #[arg(long, default_value_t = 30_000)]
    pub io_timeout_ms: u64,
}

/// Parses the command line and runs it; the process's exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        CliCommand::Worker(args) => worker::run(&WorkerConfig {
            addr: args.addr,
            prefix: args.prefix,
            ops: args.ops,
            workload: args.workload,
            io_timeout: Duration::from_millis(args.io_timeout_ms.max(1)),
        }),
        CliCommand::Compare(args) => match crate::compare::run(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) if e.downcast_ref::<Interrupted>().is_some() => {
                eprintln!("orthrus-bench: interrupted; every process it started has been stopped");
                ExitCode::from(EXIT_INTERRUPTED)
            }
            Err(e) => {
                eprintln!("orthrus-bench: error: {e:#}");
                ExitCode::FAILURE
            }
        },
        CliCommand::ConnMemory(args) => match conn_memory::run(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("orthrus-bench conn-memory: error: {e:#}");
                ExitCode::FAILURE
            }
        },
    }
}
