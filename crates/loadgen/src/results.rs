//! The result types shared by the workers, the driver and the outputs.
//!
//! Everything here is serde-serializable: a worker prints its
//! [`PerSet<f64>`] times as one JSON line, and the driver writes the whole
//! [`Report`] as `results.json`, which tests and later tooling parse back.

use serde::{Deserialize, Serialize};

use crate::machine::Machine;

/// Version of the `results.json` layout; bumped on incompatible changes.
pub const SCHEMA_VERSION: u32 = 1;

/// One of the three timed sets, or `Proc`, the whole process (all three).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SetName {
    /// String commands: SET, GET, INCR, ..., MSET/MGET across slots.
    Keys,
    /// Hash commands on a ~10-field hash.
    Hash,
    /// List commands on a 10-element list.
    List,
    /// The three sets together, as the process ran them.
    Proc,
}

/// Which commands the sets are made of: both kinds send the same number of
/// commands per round and check every reply exactly.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WorkloadKind {
    /// Today's commands: `HSET` of several fields and `LPOP key count`
    /// (Redis 4.0 and 6.2).
    #[default]
    Modern,
    /// Only what Redis 3.2 understood, for proxies of that era: `HMSET`
    /// instead of a multi-field `HSET`, and no count arguments.
    Classic,
}

/// A value for each of the table's rows: keys, hash, list and proc.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PerSet<T> {
    /// The keys set.
    pub keys: T,
    /// The hash set.
    pub hash: T,
    /// The list set.
    pub list: T,
    /// The whole process.
    pub proc: T,
}

/// Min, Max and Avg of one set's seconds over all processes and repeats.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    /// The fastest process, seconds.
    pub min: f64,
    /// The slowest process, seconds.
    pub max: f64,
    /// The mean over all processes and repeats, seconds.
    pub avg: f64,
    /// How many process times went in.
    pub samples: usize,
}

/// How a target came to be measured.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum TargetKind {
    /// A redis-server started by the driver.
    Single,
    /// orthrus started by the driver in front of a cluster it started.
    Orthrus {
        /// Masters in the cluster.
        masters: usize,
        /// Replicas per master.
        replicas: usize,
    },
    /// An address given with `--single` or `--target`; not started, not
    /// flushed.
    External,
}

/// One column group of the table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetInfo {
    /// Short name: `single`, `cluster3`, `cluster6`, or the `--target` NAME.
    pub name: String,
    /// The column group's heading, e.g. `Orthrus + Cluster (3)`.
    pub label: String,
    /// Where the workers connected.
    pub addr: String,
    /// Started or external.
    #[serde(flatten)]
    pub kind: TargetKind,
    /// The target every Ratio is computed against.
    pub baseline: bool,
}

/// One target at one concurrency level.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TargetResult {
    /// [`TargetInfo::name`].
    pub target: String,
    /// Min/Max/Avg per set over all processes and repeats.
    pub stats: PerSet<Stats>,
    /// Baseline avg / this avg, in percent; absent for the baseline itself.
    pub ratio_percent: Option<PerSet<f64>>,
    /// The raw process times: `runs[repeat][process]`.
    pub runs: Vec<Vec<PerSet<f64>>>,
}

/// One concurrency level: one block of the table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LevelResult {
    /// P, the number of worker processes.
    pub concurrency: usize,
    /// How many times each target was run at this level.
    pub repeats: usize,
    /// In the order of [`Report::targets`].
    pub targets: Vec<TargetResult>,
}

/// What the comparison was asked to do.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settings {
    /// Commands per set per process (asked for; rounded up to whole rounds).
    pub ops: u64,
    /// Commands each process actually sent per set.
    pub commands: PerSet<u64>,
    /// The concurrency levels, in run order.
    pub levels: Vec<usize>,
    /// Repeats of each level, per target.
    pub repeats: Vec<usize>,
    /// Whether `--quick` was given.
    pub quick: bool,
    /// The commands of the sets; `modern` in reports written before there
    /// was a choice.
    #[serde(default)]
    pub workload: WorkloadKind,
}

/// Everything `results.json` holds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// [`SCHEMA_VERSION`].
    pub schema: u32,
    /// UTC start time, `YYYY-MM-DDTHH:MM:SSZ`.
    pub started: String,
    /// Wall time of the whole comparison, seconds.
    pub duration_secs: f64,
    /// The machine it ran on.
    pub machine: Machine,
    /// The options.
    pub settings: Settings,
    /// The column groups, baseline first.
    pub targets: Vec<TargetInfo>,
    /// One entry per concurrency level.
    pub levels: Vec<LevelResult>,
}

// === impl WorkloadKind ===

impl WorkloadKind {
    /// Its name on the command line and in the JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkloadKind::Modern => "modern",
            WorkloadKind::Classic => "classic",
        }
    }
}

impl std::str::FromStr for WorkloadKind {
    type Err = String;

    fn from_str(s: &str) -> Result<WorkloadKind, String> {
        match s {
            "modern" => Ok(WorkloadKind::Modern),
            "classic" => Ok(WorkloadKind::Classic),
            _ => Err(format!(
                "unknown workload {s:?}: expected modern or classic"
            )),
        }
    }
}

impl std::fmt::Display for WorkloadKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

// === impl SetName ===

impl SetName {
    /// The table's rows, in order.
    pub const ALL: [SetName; 4] = [SetName::Keys, SetName::Hash, SetName::List, SetName::Proc];

    /// The row label, as in the original table.
    pub fn as_str(self) -> &'static str {
        match self {
            SetName::Keys => "keys",
            SetName::Hash => "hash",
            SetName::List => "list",
            SetName::Proc => "proc",
        }
    }
}

// === impl PerSet ===

impl<T> PerSet<T> {
    /// The value for `set`.
    pub fn get(&self, set: SetName) -> &T {
        match set {
            SetName::Keys => &self.keys,
            SetName::Hash => &self.hash,
            SetName::List => &self.list,
            SetName::Proc => &self.proc,
        }
    }

    /// Builds each field from its set.
    pub fn from_fn(mut f: impl FnMut(SetName) -> T) -> PerSet<T> {
        PerSet {
            keys: f(SetName::Keys),
            hash: f(SetName::Hash),
            list: f(SetName::List),
            proc: f(SetName::Proc),
        }
    }
}

// === impl Stats ===

impl Stats {
    /// Min/Max/Avg of `samples`; `None` when there are none or one is not a
    /// finite number (a time is never NaN unless something upstream broke).
    pub fn from_samples(samples: &[f64]) -> Option<Stats> {
        if samples.is_empty() || samples.iter().any(|s| !s.is_finite()) {
            return None;
        }
        let min = samples.iter().copied().fold(f64::INFINITY, f64::min);
        let max = samples.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let avg = samples.iter().sum::<f64>() / samples.len() as f64;
        Some(Stats {
            min,
            max,
            avg,
            samples: samples.len(),
        })
    }
}

// === impl TargetResult ===

impl TargetResult {
    /// Summarises `runs` (`runs[repeat][process]`); `None` if a run is empty.
    pub fn from_runs(target: String, runs: Vec<Vec<PerSet<f64>>>) -> Option<TargetResult> {
        let stats_for = |set: SetName| {
            let all: Vec<f64> = runs.iter().flatten().map(|t| *t.get(set)).collect();
            Stats::from_samples(&all)
        };
        let stats = PerSet {
            keys: stats_for(SetName::Keys)?,
            hash: stats_for(SetName::Hash)?,
            list: stats_for(SetName::List)?,
            proc: stats_for(SetName::Proc)?,
        };
        Some(TargetResult {
            target,
            stats,
            ratio_percent: None,
            runs,
        })
    }

    /// The proc time averaged over the processes of each repeat, in run
    /// order (`None` for a repeat with no process).
    pub fn proc_avg_per_repeat(&self) -> Vec<Option<f64>> {
        self.runs
            .iter()
            .map(|run| {
                let procs: Vec<f64> = run.iter().map(|t| t.proc).collect();
                Stats::from_samples(&procs).map(|s| s.avg)
            })
            .collect()
    }

    /// Sets [`TargetResult::ratio_percent`] against the baseline's stats:
    /// baseline avg / this avg, as the original defined Ratio.
    pub fn set_ratio(&mut self, baseline: &PerSet<Stats>) {
        self.ratio_percent = Some(PerSet::from_fn(|set| {
            ratio_percent(baseline.get(set).avg, self.stats.get(set).avg)
        }));
    }
}

// === impl LevelResult ===

impl LevelResult {
    /// This level's result for the target named `name`.
    pub fn target(&self, name: &str) -> Option<&TargetResult> {
        self.targets.iter().find(|r| r.target == name)
    }
}

/// `baseline / target` in percent; 0 when the target took no time at all
/// (which only a broken clock produces, and which must not print `inf`).
pub fn ratio_percent(baseline_avg: f64, target_avg: f64) -> f64 {
    if target_avg > 0.0 {
        baseline_avg / target_avg * 100.0
    } else {
        0.0
    }
}

/// A small report with a baseline and two measured targets (one with a
/// name that needs escaping), for tests of the outputs.
#[cfg(test)]
pub(crate) fn sample_report() -> Report {
    let info = |name: &str, baseline: bool| TargetInfo {
        name: name.into(),
        label: name.into(),
        addr: "127.0.0.1:1".into(),
        kind: if baseline {
            TargetKind::Single
        } else {
            TargetKind::External
        },
        baseline,
    };
    let times = |k: f64| PerSet {
        keys: k,
        hash: k * 1.5,
        list: k * 1.2,
        proc: k * 3.7,
    };
    let levels = [1usize, 5]
        .iter()
        .map(|&p| {
            let mut targets: Vec<TargetResult> =
                [("single", 1.0), ("cluster3", 1.8), ("a<b>&\"c", 0.9)]
                    .iter()
                    .map(|&(name, k)| {
                        let runs = vec![
                            (0..p)
                                .map(|w| times(k * p as f64 + w as f64 * 0.01))
                                .collect(),
                        ];
                        TargetResult::from_runs(name.into(), runs).unwrap()
                    })
                    .collect();
            let baseline = targets[0].stats;
            for t in &mut targets[1..] {
                t.set_ratio(&baseline);
            }
            LevelResult {
                concurrency: p,
                repeats: 1,
                targets,
            }
        })
        .collect();
    Report {
        schema: SCHEMA_VERSION,
        started: "2026-01-02T03:04:05Z".into(),
        duration_secs: 12.0,
        machine: Machine {
            hostname: "box".into(),
            cores: 2,
            cpu_model: "CPU".into(),
            kernel: "6.1".into(),
            os: "Debian".into(),
            redis_version: "7.0.15".into(),
            orthrus_version: "0.1.0".into(),
            git_commit: "abc1234".into(),
        },
        settings: Settings {
            ops: 100,
            commands: PerSet {
                keys: 110,
                hash: 104,
                list: 108,
                proc: 322,
            },
            levels: vec![1, 5],
            repeats: vec![1, 1],
            quick: false,
            workload: WorkloadKind::Modern,
        },
        targets: vec![
            info("single", true),
            info("cluster3", false),
            info("a<b>&\"c", false),
        ],
        levels,
    }
}

#[cfg(test)]
#[path = "results_tests.rs"]
mod tests;
