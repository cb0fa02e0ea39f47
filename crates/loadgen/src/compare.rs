//! `orthrus-bench compare`: plan the runs, start the targets, run every
//! level × repeat × target, print each level's table as it completes, and
//! write the files.
//!
//! Within a level the targets take turns repeat by repeat rather than one
//! target's repeats back to back, so that a slow drift of the machine
//! (thermal, a neighbour's build) spreads over every target instead of
//! landing on one; and each repeat starts one target further along (single,
//! cluster3, cluster6; then cluster3, cluster6, single; ...), so that no
//! target always runs right after the same one.

use std::path::Path;
use std::time::{Instant, SystemTime};

use anyhow::{Context, Result, bail};

use crate::driver::{self, RunSpec};
use crate::interrupt::{Interrupt, Interrupted};
use crate::machine;
use crate::machine::Machine;
use crate::plan::{CompareArgs, Plan};
use crate::progress::Progress;
use crate::proxy::ProxyOptions;
use crate::report::{self, default_out_dir, dir_stamp, utc_stamp};
use crate::results::{LevelResult, PerSet, Report, SCHEMA_VERSION, Settings, TargetResult};
use crate::table;
use crate::targets::{Target, Topology, orthrus_binary};
use crate::workload::Workload;

/// Runs the comparison the flags describe.
pub fn run(args: &CompareArgs) -> Result<()> {
    let plan = Plan::from_args(args)?;
    let interrupt = Interrupt::install()?;
    let result = compare(&plan, &interrupt);
    // Workers and servers also die of a terminal's Ctrl-C, and what the
    // driver then sees is their failure: report the cause instead.
    if interrupt.is_set() {
        return Err(Interrupted.into());
    }
    result
}

/// The comparison, with an interrupt flag of the caller's.
pub fn compare(plan: &Plan, interrupt: &Interrupt) -> Result<()> {
    let began = Instant::now();
    let now = SystemTime::now();
    let (_, started) = utc_stamp(now);
    // Decided and checked before anything starts: a long run must not end
    // by refusing to write, nor by replacing figures already recorded.
    let dir = plan
        .out
        .clone()
        .unwrap_or_else(|| default_out_dir(plan.quick, &dir_stamp(now), &machine::hostname()));
    report::check_out_dir(&dir, plan.overwrite)?;
    let proxy = if plan
        .topologies
        .iter()
        .any(|t| matches!(t, Topology::Cluster(_)))
    {
        Some(ProxyOptions {
            binary: orthrus_binary(plan.orthrus.as_deref())?,
            threads: plan.orthrus_threads,
            replicas: plan.replicas,
            env: Vec::new(),
        })
    } else {
        None
    };
    let exe = std::env::current_exe().context("locating orthrus-bench itself")?;
    let progress = Progress::new(plan.total_units(), plan.quiet);
    let mut targets = start_targets(plan, proxy.as_ref(), interrupt, &progress)?;

    let mut report = Report {
        schema: SCHEMA_VERSION,
        started,
        duration_secs: 0.0,
        machine: Machine::probe(proxy.as_ref().map(|p| p.binary.as_path())),
        settings: Settings {
            ops: plan.ops,
            commands: Workload::commands(plan.ops),
            levels: plan.levels.clone(),
            repeats: plan.repeats.clone(),
            quick: plan.quick,
            workload: plan.workload,
        },
        targets: targets.iter().map(|t| t.info.clone()).collect(),
        levels: Vec::new(),
    };
    progress.print(&report::header(&report));

    for (&level, &repeats) in plan.levels.iter().zip(&plan.repeats) {
        let mut runs: Vec<Vec<Vec<PerSet<f64>>>> = vec![Vec::new(); targets.len()];
        for repeat in 0..repeats {
            for t in turns(repeat, targets.len()) {
                let Some(target) = targets.get_mut(t) else {
                    continue;
                };
                progress.running(level, &target.info.name, repeat, repeats);
                let times =
                    run_once(plan, &exe, target, level, repeat, interrupt).with_context(|| {
                        format!(
                            "P={level}, target {}, repeat {}",
                            target.info.name,
                            repeat + 1
                        )
                    })?;
                if let Some(slot) = runs.get_mut(t) {
                    slot.push(times);
                }
                progress.finished(level);
            }
        }
        let result = summarise(level, repeats, &report, runs)?;
        progress.print(&format!(
            "\n{}",
            table::render_level(&result, &report.targets)
        ));
        report.levels.push(result);
    }
    report.duration_secs = began.elapsed().as_secs_f64();
    progress.finish();
    progress.note("stopping the targets");
    drop(targets);

    let written = report::write_files(&report, &dir, plan.overwrite)?;
    progress.note(&format!(
        "wrote {}, {} and {} ({:.0} s in all)",
        written.markdown.display(),
        written.json.display(),
        written.svg.display(),
        report.duration_secs
    ));
    Ok(())
}

/// The order in which `targets` targets run in repeat `repeat`: every
/// target once, starting `repeat` places along.
fn turns(repeat: usize, targets: usize) -> impl Iterator<Item = usize> {
    (0..targets).map(move |i| (repeat + i) % targets)
}

/// The baseline first, then started clusters, then `--target`s.
fn start_targets(
    plan: &Plan,
    proxy: Option<&ProxyOptions>,
    interrupt: &Interrupt,
    progress: &Progress,
) -> Result<Vec<Target>> {
    let mut targets = Vec::new();
    match &plan.single {
        Some(ext) => targets.push(Target::external(ext, true)?),
        None => targets.push(Target::start_single()?),
    }
    for topology in &plan.topologies {
        interrupt.check()?;
        if let (Topology::Cluster(masters), Some(opts)) = (topology, proxy) {
            progress.note(&format!(
                "starting a {masters}-master cluster and orthrus in front of it"
            ));
            targets.push(Target::start_orthrus(*masters, opts, interrupt)?);
        }
    }
    for ext in &plan.externals {
        targets.push(Target::external(ext, false)?);
    }
    Ok(targets)
}

/// One run of P workers against one target; each process's seconds.
fn run_once(
    plan: &Plan,
    exe: &Path,
    target: &mut Target,
    level: usize,
    repeat: usize,
    interrupt: &Interrupt,
) -> Result<Vec<PerSet<f64>>> {
    target.prepare_run()?;
    let prefix = format!("{}:p{level}:r{repeat}:{}", plan.prefix, target.info.name);
    let spec = RunSpec {
        exe,
        addr: target.addr,
        prefix: &prefix,
        processes: level,
        ops: plan.ops,
        workload: plan.workload,
        io_timeout: plan.io_timeout,
    };
    let times = driver::run(&spec, interrupt)?;
    let expected = Workload::commands(plan.ops);
    if let Some(bad) = times.iter().find(|t| t.commands != expected) {
        bail!(
            "a worker sent {:?} commands, expected {expected:?}",
            bad.commands
        );
    }
    Ok(times.into_iter().map(|t| t.seconds).collect())
}

/// One level's results, with ratios against the baseline.
fn summarise(
    level: usize,
    repeats: usize,
    report: &Report,
    runs: Vec<Vec<Vec<PerSet<f64>>>>,
) -> Result<LevelResult> {
    let mut results = Vec::new();
    for (info, runs) in report.targets.iter().zip(runs) {
        let result = TargetResult::from_runs(info.name.clone(), runs)
            .with_context(|| format!("no valid times for {} at P={level}", info.name))?;
        results.push(result);
    }
    let baseline = report
        .targets
        .iter()
        .zip(&results)
        .find(|(info, _)| info.baseline)
        .map(|(_, r)| r.stats)
        .context("no baseline target")?;
    for (info, result) in report.targets.iter().zip(&mut results) {
        if !info.baseline {
            result.set_ratio(&baseline);
        }
    }
    Ok(LevelResult {
        concurrency: level,
        repeats,
        targets: results,
    })
}

#[cfg(test)]
mod tests {
    use super::turns;

    #[test]
    fn each_repeat_runs_every_target_once_starting_one_further() {
        let order = |repeat| turns(repeat, 3).collect::<Vec<_>>();
        assert_eq!(order(0), [0, 1, 2]);
        assert_eq!(order(1), [1, 2, 0]);
        assert_eq!(order(2), [2, 0, 1]);
        assert_eq!(order(3), [0, 1, 2]);
        assert_eq!(turns(5, 1).collect::<Vec<_>>(), [0]);
        assert_eq!(turns(0, 0).count(), 0);
    }
}
