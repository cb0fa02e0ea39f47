//! The plan of a comparison: the flags of `compare` ([`CompareArgs`]), and
//! the [`Plan`] they make with their defaults applied (and `--quick`'s),
//! checked before anything is started.
//!
//! The flags live here rather than in `cli`, so that the comparison depends
//! on its plan and the command line on both, never the other way round.

use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Result, bail, ensure};
use clap::Args;

use crate::results::WorkloadKind;
use crate::targets::{External, Topology};
use crate::workload::Workload;

/// Commands per set per process by default: 1.2-1.7 s per set for one
/// process against a single redis-server on the 2-core machine it was
/// measured on (release build; see the crate README).
pub const DEFAULT_OPS: u64 = 20_000;
/// `--quick`: a smoke test, well under a second per run.
pub const QUICK_OPS: u64 = 300;
/// The original's concurrency levels.
pub const DEFAULT_LEVELS: [usize; 5] = [1, 5, 20, 40, 80];
/// `--quick` levels.
pub const QUICK_LEVELS: [usize; 2] = [1, 2];
/// Repeats per level and target, as the original...
pub const DEFAULT_REPEATS: usize = 4;
/// ...which ran 3 at 80 concurrency.
pub const REPEATS_AT_80: usize = 3;
/// The most worker processes one run may start.
pub const MAX_PROCESSES: usize = 1000;

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

    /// The commands of the sets: `modern` (HSET of 10 fields, LPOP with a
    /// count) or `classic` (only commands and forms Redis 3.2 knew: HMSET,
    /// no count arguments; for proxies of that era). Both send as many
    /// commands and check every reply.
    #[arg(long, value_name = "modern|classic", default_value = "modern")]
    pub workload: WorkloadKind,

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

    /// Where to write results.json, report.md and ratio.svg [default, under
    /// the workspace root: bench/results/START-HOST/ for a full run,
    /// target/orthrus-bench/START-HOST/ with --quick; START is the UTC start
    /// time to the second]. A directory that already holds files is refused
    /// before anything starts, unless --overwrite.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,

    /// Write into the output directory even if it already holds files
    /// (replacing results.json, report.md and ratio.svg).
    #[arg(long)]
    pub overwrite: bool,

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

/// Everything the flags decide, checked.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Concurrency levels, in order.
    pub levels: Vec<usize>,
    /// Repeats for each level.
    pub repeats: Vec<usize>,
    /// Commands per set per process.
    pub ops: u64,
    /// `--quick`.
    pub quick: bool,
    /// `--workload`.
    pub workload: WorkloadKind,
    /// Targets to start.
    pub topologies: Vec<Topology>,
    /// `--single`: the baseline, not started.
    pub single: Option<External>,
    /// `--target`s.
    pub externals: Vec<External>,
    /// `--orthrus`.
    pub orthrus: Option<PathBuf>,
    /// `--orthrus-threads`.
    pub orthrus_threads: Option<usize>,
    /// `--replicas`.
    pub replicas: usize,
    /// `--out`.
    pub out: Option<PathBuf>,
    /// `--overwrite`.
    pub overwrite: bool,
    /// Key prefix of this comparison; workers add level, repeat, target and
    /// worker number.
    pub prefix: String,
    /// Worker connect/read/write timeout.
    pub io_timeout: Duration,
    /// `--quiet`.
    pub quiet: bool,
}

// === impl Plan ===

impl Plan {
    /// Applies the defaults (and `--quick`'s) and checks the flags.
    pub fn from_args(args: &CompareArgs) -> Result<Plan> {
        let levels = match &args.levels {
            Some(levels) => levels.clone(),
            None if args.quick => QUICK_LEVELS.to_vec(),
            None => DEFAULT_LEVELS.to_vec(),
        };
        ensure!(!levels.is_empty(), "--levels is empty");
        if let Some(bad) = levels.iter().find(|&&p| p == 0 || p > MAX_PROCESSES) {
            bail!("concurrency level {bad} is outside 1..={MAX_PROCESSES}");
        }
        let repeats = levels
            .iter()
            .map(|&p| match args.repeats {
                Some(r) => r,
                None if args.quick => 1,
                None if p >= 80 => REPEATS_AT_80,
                None => DEFAULT_REPEATS,
            })
            .collect::<Vec<_>>();
        ensure!(
            repeats.iter().all(|&r| r > 0),
            "--repeats must be at least 1"
        );
        let ops = args
            .ops
            .unwrap_or(if args.quick { QUICK_OPS } else { DEFAULT_OPS });

        let mut topologies = Vec::new();
        for name in args
            .topologies
            .iter()
            .map(|s| s.trim())
            .filter(|s| !s.is_empty())
        {
            if name != "none" {
                let topology: Topology = name.parse()?;
                if !topologies.contains(&topology) {
                    topologies.push(topology);
                }
            }
        }
        let single = args
            .single
            .as_deref()
            .map(|addr| -> Result<External> {
                Ok(External {
                    name: "single".into(),
                    addr: crate::targets::resolve(addr)?,
                })
            })
            .transpose()?;
        let externals = args
            .targets
            .iter()
            .map(|t| External::parse_named(t))
            .collect::<Result<Vec<_>>>()?;
        let prefix = args.prefix.clone().unwrap_or_else(default_prefix);
        Workload::new(&prefix, ops, args.workload)?;
        let plan = Plan {
            levels,
            repeats,
            ops,
            quick: args.quick,
            workload: args.workload,
            topologies,
            single,
            externals,
            orthrus: args.orthrus.clone(),
            orthrus_threads: args.orthrus_threads,
            replicas: args.replicas,
            out: args.out.clone(),
            overwrite: args.overwrite,
            prefix,
            io_timeout: Duration::from_secs(args.io_timeout.max(1)),
            quiet: args.quiet,
        };
        plan.check_names()?;
        Ok(plan)
    }

    /// Target names in table order: the baseline, the started clusters, the
    /// `--target`s. Names must be unique: they key the JSON and the chart.
    fn names(&self) -> Vec<String> {
        let baseline = (self.single.is_some() || self.topologies.contains(&Topology::Single))
            .then(|| "single".to_owned());
        let clusters = self
            .topologies
            .iter()
            .filter(|t| **t != Topology::Single)
            .map(|t| t.name());
        baseline
            .into_iter()
            .chain(clusters)
            .chain(self.externals.iter().map(|e| e.name.clone()))
            .collect()
    }

    fn check_names(&self) -> Result<()> {
        ensure!(
            self.single.is_some() || self.topologies.contains(&Topology::Single),
            "no baseline for Ratio: keep `single` in --topologies or pass --single HOST:PORT"
        );
        let names = self.names();
        for (i, name) in names.iter().enumerate() {
            ensure!(!names[..i].contains(name), "two targets are named {name:?}");
        }
        ensure!(
            names.len() > 1,
            "nothing to compare with the baseline: add a topology or a --target"
        );
        Ok(())
    }

    /// Process-runs in the whole comparison, for the progress bar.
    pub(crate) fn total_units(&self) -> u64 {
        let targets = self.names().len() as u64;
        self.levels
            .iter()
            .zip(&self.repeats)
            .map(|(&p, &r)| p as u64 * r as u64 * targets)
            .sum()
    }
}

/// `orthrus-bench:<seconds since the epoch, base 36>`: unique per run, so
/// keys a run left behind on an external target (after a kill -9) never
/// collide with the next run's.
fn default_prefix() -> String {
    let mut n = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut digits = Vec::new();
    while n > 0 || digits.is_empty() {
        digits.push(char::from_digit((n % 36) as u32, 36).unwrap_or('0'));
        n /= 36;
    }
    format!("orthrus-bench:{}", digits.iter().rev().collect::<String>())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        compare: CompareArgs,
    }

    fn plan(args: &[&str]) -> Result<Plan> {
        let flags = Flags::try_parse_from(["compare"].iter().chain(args))?;
        Plan::from_args(&flags.compare)
    }

    #[test]
    fn defaults_follow_the_original() {
        let p = plan(&[]).unwrap();
        assert_eq!(p.levels, [1, 5, 20, 40, 80]);
        assert_eq!(p.repeats, [4, 4, 4, 4, 3]);
        assert_eq!(p.ops, DEFAULT_OPS);
        assert_eq!(
            p.topologies,
            [Topology::Single, Topology::Cluster(3), Topology::Cluster(6)]
        );
        assert_eq!(p.names(), ["single", "cluster3", "cluster6"]);
        assert_eq!(p.total_units(), (4 * (1 + 5 + 20 + 40) + 3 * 80) * 3);
        assert!(p.prefix.starts_with("orthrus-bench:"));
        assert_eq!(p.workload, WorkloadKind::Modern);
        let p = plan(&["--workload", "classic"]).unwrap();
        assert_eq!(p.workload, WorkloadKind::Classic);
        assert!(plan(&["--workload", "ancient"]).is_err());
    }

    #[test]
    fn quick_is_small_and_explicit_flags_win() {
        let p = plan(&["--quick"]).unwrap();
        assert_eq!(
            (p.levels.clone(), p.repeats.clone(), p.ops),
            (vec![1, 2], vec![1, 1], QUICK_OPS)
        );
        let p = plan(&["--quick", "--levels", "3", "--ops", "50", "--repeats", "2"]).unwrap();
        assert_eq!((p.levels, p.repeats, p.ops), (vec![3], vec![2], 50));
    }

    #[test]
    fn external_targets_and_baselines() {
        let p = plan(&[
            "--topologies",
            "none",
            "--single",
            "127.0.0.1:1",
            "--target",
            "x=127.0.0.1:2",
        ])
        .unwrap();
        assert_eq!(p.names(), ["single", "x"]);
        assert!(
            plan(&["--topologies", "cluster3"])
                .unwrap_err()
                .to_string()
                .contains("baseline")
        );
        assert!(
            plan(&["--topologies", "single"])
                .unwrap_err()
                .to_string()
                .contains("nothing to compare")
        );
        let dup = plan(&[
            "--topologies",
            "single,cluster3",
            "--target",
            "cluster3=127.0.0.1:2",
        ]);
        assert!(dup.unwrap_err().to_string().contains("two targets"));
        assert!(plan(&["--levels", "0"]).is_err());
        assert!(plan(&["--prefix", "a{b}"]).is_err());
        assert!(plan(&["--topologies", "single,mesh"]).is_err());
    }

    #[test]
    fn default_prefixes_are_base36_seconds() {
        let p = default_prefix();
        let tail = p.strip_prefix("orthrus-bench:").unwrap();
        assert!(
            tail.len() >= 6 && tail.chars().all(|c| c.is_ascii_alphanumeric()),
            "{p}"
        );
    }
}
