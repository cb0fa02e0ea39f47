//! The command line: `orthrus-bench compare`, `conn-memory`, `zipf`,
//! `cache-check` and the hidden `worker`.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::cachecheck::CacheCheckArgs;
use crate::conn_memory::{self, ConnMemoryArgs};
use crate::interrupt::{EXIT_INTERRUPTED, Interrupted};
use crate::plan::CompareArgs;
use crate::results::WorkloadKind;
use crate::worker::{self, WorkerConfig};
use crate::zipf::ZipfArgs;

/// Load driver for orthrus: the Cerberus comparison, and memory per client
/// connection.
///
/// The Cerberus comparison is the benchmark published with Cerberus (a Redis
/// Cluster proxy): 1 to 80 concurrent client processes, on an 8-core host,
/// each ran the same keys, hash and list command sets request/response
/// against a single redis-server and against the proxy in front of a
/// 3-master and a 6-master cluster. Its Ratio, kept here, is the single
/// server's average time for a set divided by the target's average time for
/// the same set (over every process and repeat), in percent: above 100% the
/// target was faster than one redis-server.
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
    /// Run the Cerberus comparison (see `orthrus-bench --help`).
    ///
    /// For each concurrency level P, P worker processes each run the keys,
    /// hash and list sets against every target; prints the Min/Max/Avg/Ratio
    /// table and writes JSON, markdown and an SVG chart.
    Compare(CompareArgs),
    /// Measure what client connections cost running servers or proxies in
    /// memory.
    ///
    /// RSS (from /proc/PID/status) at idle, with N idle connections, after
    /// one PING on each, and after they all closed.
    ConnMemory(ConnMemoryArgs),
    /// GETs and SETs over Zipf-distributed keys (a few hot, a long tail)
    /// from many client threads, against running targets one after the
    /// other: commands/s, latency and, with --pid, CPU per command.
    Zipf(ZipfArgs),
    /// Check the reply cache against a cluster and an orthrus it starts
    /// itself: staleness under a writer that bypasses orthrus,
    /// read-your-writes while a slot migrates, a master fails over and
    /// FLUSHALL runs, and RSS with the budget filled (1 and 4 workers).
    ///
    /// Each part prints its figures and PASSED or FAILED; the exit code is
    /// 1 when a part failed. Everything is bounded by the flags and by
    /// --timeout per part.
    CacheCheck(CacheCheckArgs),
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
        CliCommand::Zipf(args) => match crate::zipf::run(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("orthrus-bench zipf: error: {e:#}");
                ExitCode::FAILURE
            }
        },
        CliCommand::CacheCheck(args) => match crate::cachecheck::run(&args) {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => ExitCode::FAILURE,
            Err(e) if e.downcast_ref::<Interrupted>().is_some() => {
                eprintln!("orthrus-bench: interrupted; every process it started has been stopped");
                ExitCode::from(EXIT_INTERRUPTED)
            }
            Err(e) => {
                eprintln!("orthrus-bench cache-check: error: {e:#}");
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
