//! The outputs besides the table: the header naming the machine, the
//! markdown and JSON files, and where they are written.
//!
//! `results.json` is the whole [`Report`]; `report.md` is the header, a
//! markdown table per level and the plain-text table as printed;
//! `ratio.svg` is the chart. Without `--out`, a full run writes them to
//! `bench/results/<start time>-<host>/` under the workspace root (found by
//! walking up from the current directory; the current directory outside a
//! workspace), where they are meant to be committed, and a `--quick` run to
//! `target/orthrus-bench/<start time>-<host>/`, out of version control. The
//! start time is to the second, and a directory that already holds files is
//! never written into unless `--overwrite` says so: a run never replaces
//! recorded figures by accident.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};

use crate::results::{LevelResult, Report, SetName, TargetResult, ratio_percent};
use crate::table::{self, percent, seconds};

/// The files one comparison writes.
#[derive(Debug, Clone)]
pub struct Written {
    /// `results.json`.
    pub json: PathBuf,
    /// `report.md`.
    pub markdown: PathBuf,
    /// `ratio.svg`.
    pub svg: PathBuf,
}

/// The header lines above the tables.
pub fn header(report: &Report) -> String {
    let m = &report.machine;
    let s = &report.settings;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "orthrus-bench compare, started {} on {}",
        report.started, m.hostname
    );
    let _ = writeln!(out, "machine: {}", m.summary());
    let _ = writeln!(
        out,
        "versions: redis-server {}, orthrus {}, git {}",
        m.redis_version, m.orthrus_version, m.git_commit
    );
    let _ = writeln!(
        out,
        "workload: {}, {} commands per set per process (keys {}, hash {}, list {}), \
         request/response, one connection per process",
        s.workload, s.ops, s.commands.keys, s.commands.hash, s.commands.list
    );
    let levels: Vec<String> = s.levels.iter().map(usize::to_string).collect();
    let repeats: Vec<String> = s.repeats.iter().map(usize::to_string).collect();
    let _ = writeln!(
        out,
        "levels: {} (repeats: {})",
        levels.join(", "),
        repeats.join(", ")
    );
    for t in &report.targets {
        let role = if t.baseline {
            " (baseline of Ratio)"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "target {}: {} at {}{role}",
            t.name,
            describe(&t.kind),
            t.addr
        );
    }
    out.push_str("times in seconds; Ratio = single avg / target avg\n");
    out
}

/// The header and every level's table, as printed on stdout.
pub fn text(report: &Report) -> String {
    let mut out = header(report);
    for level in &report.levels {
        out.push('\n');
        out.push_str(&table::render_level(level, &report.targets));
    }
    out
}

/// `report.md`.
pub fn markdown(report: &Report) -> String {
    let m = &report.machine;
    let mut out = format!(
        "# orthrus-bench compare: {} on {}\n\n",
        report.started, m.hostname
    );
    let _ = writeln!(out, "- Machine: {}", m.summary());
    let _ = writeln!(
        out,
        "- redis-server {}, orthrus {}, git {}",
        m.redis_version, m.orthrus_version, m.git_commit
    );
    let _ = writeln!(
        out,
        "- Workload: {}, {} commands per set per process, request/response over one connection, every reply checked",
        report.settings.workload, report.settings.ops
    );
    let _ = writeln!(out, "- Duration: {:.0} s", report.duration_secs);
    for t in &report.targets {
        let _ = writeln!(out, "- `{}`: {} at {}", t.name, describe(&t.kind), t.addr);
    }
    out.push_str("\nTimes in seconds (Min/Max/Avg over all processes and repeats); ");
    out.push_str(
        "Ratio = single avg / target avg, above 100% means faster than the single server.\n",
    );
    out.push_str("\n![ratio chart](ratio.svg)\n");
    for level in &report.levels {
        let plural = if level.repeats == 1 { "" } else { "s" };
        let _ = write!(
            out,
            "\n## {} concurrency ({} repeat{plural})\n\n",
            level.concurrency, level.repeats
        );
        out.push_str("| set |");
        let mut rule = String::from("|---|");
        for t in &report.targets {
            let _ = write!(out, " {0} min | {0} max | {0} avg |", t.name);
            rule.push_str("---:|---:|---:|");
            if !t.baseline {
                let _ = write!(out, " {} ratio |", t.name);
                rule.push_str("---:|");
            }
        }
        let _ = write!(out, "\n{rule}\n");
        for set in SetName::ALL {
            let _ = write!(out, "| {} |", set.as_str());
            for t in &report.targets {
                let Some(r) = level.target(&t.name) else {
                    continue;
                };
                let s = r.stats.get(set);
                let _ = write!(
                    out,
                    " {} | {} | {} |",
                    seconds(s.min),
                    seconds(s.max),
                    seconds(s.avg)
                );
                if let Some(ratio) = &r.ratio_percent {
                    let _ = write!(out, " {} |", percent(*ratio.get(set)));
                }
            }
            out.push('\n');
        }
        per_repeat(&mut out, report, level);
    }
    out.push_str("\n## As printed\n\n```text\n");
    out.push_str(&text(report));
    out.push_str("```\n");
    out
}

/// A level's proc Ratio in each repeat, against the baseline's run of the
/// same repeat (the targets of a repeat run one right after the other), and
/// with two measured targets or more, in how many repeats each had the
/// highest: a steady lead told from an average that one repeat decides.
fn per_repeat(out: &mut String, report: &Report, level: &LevelResult) {
    let Some(base) = report
        .targets
        .iter()
        .find(|t| t.baseline)
        .and_then(|b| level.target(&b.name))
    else {
        return;
    };
    let measured: Vec<&TargetResult> = report
        .targets
        .iter()
        .filter(|t| !t.baseline)
        .filter_map(|t| level.target(&t.name))
        .collect();
    if level.repeats < 2 || measured.is_empty() {
        return;
    }
    let base = base.proc_avg_per_repeat();
    // ratios[target][repeat]
    let ratios: Vec<Vec<Option<f64>>> = measured
        .iter()
        .map(|t| {
            t.proc_avg_per_repeat()
                .iter()
                .zip(&base)
                .map(|(t, b)| Some(ratio_percent((*b)?, (*t)?)))
                .collect()
        })
        .collect();
    out.push_str("\nProc Ratio in each repeat (the baseline's proc avg in that repeat / the target's):\n\n| repeat |");
    let mut rule = String::from("|---:|");
    for t in &measured {
        let _ = write!(out, " {} |", t.target);
        rule.push_str("---:|");
    }
    let _ = write!(out, "\n{rule}\n");
    let mut highest = vec![0usize; measured.len()];
    for repeat in 0..base.len() {
        let _ = write!(out, "| {} |", repeat + 1);
        let row: Vec<Option<f64>> = ratios
            .iter()
            .map(|r| r.get(repeat).copied().flatten())
            .collect();
        for ratio in &row {
            match ratio {
                Some(r) => {
                    let _ = write!(out, " {} |", percent(*r));
                }
                None => out.push_str(" - |"),
            }
        }
        out.push('\n');
        let top = row
            .iter()
            .flatten()
            .copied()
            .fold(f64::NEG_INFINITY, f64::max);
        for (count, ratio) in highest.iter_mut().zip(&row) {
            *count += usize::from(*ratio == Some(top));
        }
    }
    if measured.len() > 1 {
        out.push_str("| highest in |");
        for count in highest {
            let _ = write!(out, " {count} of {} |", base.len());
        }
        out.push('\n');
    }
}

/// Writes `results.json`, `report.md` and `ratio.svg` into `dir`, which
/// must be missing or empty unless `overwrite`.
pub fn write_files(report: &Report, dir: &Path, overwrite: bool) -> Result<Written> {
    check_out_dir(dir, overwrite)?;
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let written = Written {
        json: dir.join("results.json"),
        markdown: dir.join("report.md"),
        svg: dir.join("ratio.svg"),
    };
    let mut json = serde_json::to_string_pretty(report)?;
    json.push('\n');
    let files = [
        (&written.json, json),
        (&written.markdown, markdown(report)),
        (&written.svg, crate::svg::ratio_chart(report)),
    ];
    for (path, contents) in files {
        fs::write(path, contents).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(written)
}

/// Where a run writes without `--out`: `bench/results/<stamp>-<host>` for a
/// full run, `target/orthrus-bench/<stamp>-<host>` for a `--quick` one,
/// under the workspace root (or the current directory outside a
/// workspace). `stamp` is [`dir_stamp`]'s.
pub fn default_out_dir(quick: bool, stamp: &str, host: &str) -> PathBuf {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let root = workspace_root(&cwd).unwrap_or(cwd);
    out_dir_under(&root, quick, stamp, host)
}

fn out_dir_under(root: &Path, quick: bool, stamp: &str, host: &str) -> PathBuf {
    let parent = if quick {
        root.join("target").join("orthrus-bench")
    } else {
        root.join("bench").join("results")
    };
    parent.join(format!("{stamp}-{host}"))
}

/// `Ok` when `dir` is missing or empty, or when `overwrite`; otherwise an
/// error naming it. Checked before a run starts and again before writing.
pub fn check_out_dir(dir: &Path, overwrite: bool) -> Result<()> {
    if overwrite {
        return Ok(());
    }
    let occupied = match fs::read_dir(dir) {
        Ok(mut entries) => entries.next().is_some(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => return Err(e).with_context(|| format!("reading {}", dir.display())),
    };
    if occupied {
        bail!(
            "{} already holds files: pass --out with another directory, or --overwrite to replace them",
            dir.display()
        );
    }
    Ok(())
}

/// A start time as a directory name: `2026-12-01T064018Z` (UTC, no colons).
pub fn dir_stamp(time: SystemTime) -> String {
    utc_stamp(time).1.replace(':', "")
}

/// The nearest ancestor of `start` whose Cargo.toml has a `[workspace]`.
fn workspace_root(start: &Path) -> Option<PathBuf> {
    start.ancestors().find_map(|dir| {
        let manifest = fs::read_to_string(dir.join("Cargo.toml")).ok()?;
        manifest
            .lines()
            .any(|l| l.trim() == "[workspace]")
            .then(|| dir.to_path_buf())
    })
}

/// `(YYYY-MM-DD, YYYY-MM-DDTHH:MM:SSZ)` in UTC for `time`.
pub fn utc_stamp(time: SystemTime) -> (String, String) {
    let secs = time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    let date = format!("{y:04}-{m:02}-{d:02}");
    let full = format!(
        "{date}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    );
    (date, full)
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's
/// algorithm), to name result folders without a date crate.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

fn describe(kind: &crate::results::TargetKind) -> String {
    use crate::results::TargetKind;
    match kind {
        TargetKind::Single => "redis-server started by orthrus-bench".to_owned(),
        TargetKind::Orthrus { masters, replicas } => format!(
            "orthrus in front of a {masters}-master cluster ({replicas} replicas each), started by orthrus-bench"
        ),
        TargetKind::External => "external, not started or flushed by orthrus-bench".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn markdown_and_text_hold_every_level_and_target() {
        let report = crate::results::sample_report();
        let text = text(&report);
        assert!(text.starts_with("orthrus-bench compare, started 2026-01-02T03:04:05Z on box\n"));
        assert!(text.contains("versions: redis-server 7.0.15, orthrus 0.1.0, git abc1234"));
        assert!(text.contains("\n1 concurrency\n") && text.contains("\n5 concurrency\n"));
        let md = markdown(&report);
        assert!(md.contains("## 5 concurrency (1 repeat)"));
        assert!(md.contains("| set | single min | single max | single avg | cluster3 min |"));
        assert!(
            md.contains("| keys | 1.0000 | 1.0000 | 1.0000 | 1.8000 | 1.8000 | 1.8000 | 55.56% |"),
            "{md}"
        );
        assert!(md.contains(&text), "the printed text is in report.md");
        let dir = tempfile::tempdir().unwrap();
        let written = write_files(&report, &dir.path().join("nested"), false).unwrap();
        let back: Report =
            serde_json::from_str(&fs::read_to_string(written.json).unwrap()).unwrap();
        assert_eq!(back, report);
        assert!(
            fs::read_to_string(written.svg)
                .unwrap()
                .starts_with("<?xml")
        );
    }

    /// Three repeats: `cluster3` faster than the other target in the first
    /// two and slower in the third, each against that repeat's baseline.
    #[test]
    fn a_levels_ratio_in_each_repeat_and_who_had_the_highest() {
        let mut report = crate::results::sample_report();
        let proc = |p: f64| crate::results::PerSet {
            keys: 1.0,
            hash: 1.0,
            list: 1.0,
            proc: p,
        };
        // runs[repeat][process]; proc avgs per repeat: single 2, 4, 2.
        let runs = |procs: [[f64; 2]; 3]| -> Vec<Vec<_>> {
            procs
                .iter()
                .map(|r| r.iter().map(|&p| proc(p)).collect())
                .collect()
        };
        let single = runs([[1.0, 3.0], [4.0, 4.0], [2.0, 2.0]]);
        let fast = runs([[4.0, 4.0], [5.0, 5.0], [8.0, 8.0]]);
        let slow = runs([[8.0, 8.0], [10.0, 6.0], [4.0, 4.0]]);
        let level = &mut report.levels[1];
        level.repeats = 3;
        level.targets = [("single", single), ("cluster3", fast), ("a<b>&\"c", slow)]
            .into_iter()
            .map(|(name, runs)| TargetResult::from_runs(name.into(), runs).unwrap())
            .collect();
        let md = markdown(&report);
        let table = md.split("## 5 concurrency").nth(1).unwrap();
        assert!(table.contains("| repeat | cluster3 | a<b>&\"c |\n"), "{md}");
        assert!(table.contains("| 1 | 50.00% | 25.00% |\n"), "{md}");
        assert!(table.contains("| 2 | 80.00% | 50.00% |\n"), "{md}");
        assert!(table.contains("| 3 | 25.00% | 50.00% |\n"), "{md}");
        assert!(table.contains("| highest in | 2 of 3 | 1 of 3 |\n"), "{md}");
        // One repeat: no such table.
        let level_one = md.split("## 5 concurrency").next().unwrap();
        assert!(!level_one.contains("in each repeat"), "{md}");
    }

    #[test]
    fn dates_in_utc() {
        assert_eq!(utc_stamp(UNIX_EPOCH).1, "1970-01-01T00:00:00Z");
        let t = UNIX_EPOCH + Duration::from_secs(951_782_400 + 3661); // 2000-02-29
        assert_eq!(
            utc_stamp(t),
            ("2000-02-29".into(), "2000-02-29T01:01:01Z".into())
        );
        let t = UNIX_EPOCH + Duration::from_secs(1_798_675_200); // 2026-12-31
        assert_eq!(utc_stamp(t).0, "2026-12-31");
    }

    #[test]
    fn workspace_root_is_found_from_a_crate_dir() {
        let here = Path::new(env!("CARGO_MANIFEST_DIR"));
        let root = workspace_root(here).unwrap();
        assert!(root.join("crates").is_dir());
        let out = default_out_dir(false, "2026-01-02T030405Z", "box");
        assert_eq!(out, root.join("bench/results/2026-01-02T030405Z-box"));
        let out = default_out_dir(true, "2026-01-02T030405Z", "box");
        assert_eq!(
            out,
            root.join("target/orthrus-bench/2026-01-02T030405Z-box")
        );
    }

    #[test]
    fn stamps_name_directories_to_the_second() {
        let t = UNIX_EPOCH + Duration::from_secs(1_798_675_200 + 3661); // 2026-12-31
        assert_eq!(dir_stamp(t), "2026-12-31T010101Z");
        assert_ne!(dir_stamp(t), dir_stamp(t + Duration::from_secs(1)));
    }

    #[test]
    fn results_are_never_overwritten_without_the_flag() {
        let report = crate::results::sample_report();
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("run");
        check_out_dir(&dir, false).unwrap();
        let written = write_files(&report, &dir, false).unwrap();
        let before = fs::read_to_string(&written.json).unwrap();

        let mut other = report.clone();
        other.started = "2027-01-01T00:00:00Z".into();
        let err = write_files(&other, &dir, false).unwrap_err().to_string();
        assert!(
            err.contains("already holds files") && err.contains("--overwrite"),
            "{err}"
        );
        assert!(check_out_dir(&dir, false).is_err());
        assert_eq!(
            fs::read_to_string(&written.json).unwrap(),
            before,
            "untouched"
        );

        write_files(&other, &dir, true).unwrap();
        assert!(
            fs::read_to_string(&written.json)
                .unwrap()
                .contains("2027-01-01")
        );

        let empty = tmp.path().join("empty");
        fs::create_dir(&empty).unwrap();
        check_out_dir(&empty, false).unwrap();
    }
}
