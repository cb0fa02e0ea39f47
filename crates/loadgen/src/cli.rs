//! The command line: `orthrus-bench compare` and the hidden `worker`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::interrupt::{EXIT_INTERRUPTED, Interrupted};
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
    /// One worker process (started by `compare`, not by hand).
    #[command(hide = true)]
    Worker(WorkerArgs),
}

/// Flags of `compare`.
#[derive(Args, Debug, Clone)]
pub struct CompareArgs {
    /// Concurrency levels: worker processes per run, comma-separated
    /// [default: 1,5,20,40,80; with --quick: 1,2].
    #[arg(long, value_delimiter = ',', value_name = "P,...")]
    pub levels: Option<Vec<usize>>,

    /// Runs per level and target [default: 4, and 3 at 80 and above, as the
    /// original; with --quick: 1].
    #[arg(long, value_name = "R")]
    pub repeats: Option<usize>,

    /// Commands per set per process, rounded up to whole rounds
    /// [default: 20000, 1.2-1.7 s per set for one process against a single
    /// redis-server on a 2-core machine; with --quick: 300].
    #[arg(long, value_name = "N")]
    pub ops: Option<u64>,

    /// A short smoke run: levels 1,2, one repeat, 300 commands per set.
    #[arg(long)]
    pub quick: bool,

    /// Targets to start on free loopback ports: `single` (one redis-server,
    /// the Ratio baseline) and `cluster<N>` (orthrus in front of an N-master
    /// cluster); `none` starts nothing.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "single,cluster3,cluster6"
    )]
    pub topologies: Vec<String>,

    /// Use this running server as the single baseline instead of starting
    /// one. It is not flushed; workers delete the keys they write.
    #[arg(long, value_name = "HOST:PORT")]
    pub single: Option<String>,

    /// Also measure a running target (any deployment or other proxy), shown
    /// as its own column group. Repeatable. Not flushed.
    #[arg(long = "target", value_name = "NAME=HOST:PORT")]
    pub targets: Vec<String>,

    /// The orthrus binary [default: `orthrus` next to this executable].
    #[arg(long, value_name = "PATH")]
    pub orthrus: Option<PathBuf>,

    /// Passed to orthrus as `--threads`.
    #[arg(long, value_name = "N")]
    pub orthrus_threads: Option<usize>,

    /// Replicas per master in the started clusters.
    #[arg(long, default_value_t = 0)]
    pub replicas: usize,

    /// Where to write results.json, report.md and ratio.svg
    /// [default: bench/results/DATE-HOST/ under the workspace root].
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,

    /// Key prefix; worker keys are
    /// `<prefix>:p<P>:r<repeat>:<target>:w<worker>:<k|c|m|h|l>:...`
    /// [default: orthrus-bench:RUNID]. No braces (hash tags).
    #[arg(long, value_name = "PREFIX")]
    pub prefix: Option<String>,

    /// Seconds a worker waits for a connect or a reply before failing.
    #[arg(long, value_name = "SECS", default_value_t = 30)]
    pub io_timeout: u64,

    /// No progress bar and no notes on stderr (the report still goes to
    /// stdout).
    #[arg(long, short)]
    pub quiet: bool,
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
    }
}
