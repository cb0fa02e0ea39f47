//! `orthrus-bench compare` end to end: the real binary, real worker
//! processes, a real redis-server and (when built) orthrus in front of a
//! real 3-master cluster.
//!
//! The orthrus binary is looked up next to the test executable
//! (target/<profile>/orthrus). When it is missing, the tests that want it
//! measure a second plain redis-server instead and say so loudly on stderr
//! — unless ORTHRUS_BENCH_REQUIRE_PROXY is set (CI sets it), in which case a
//! missing binary fails the test.

mod common;

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use orthrus_devcluster::{NodeOptions, RedisNode};
use orthrus_loadgen::results::{Report, SetName, WorkloadKind};

/// Any one comparison in these tests finishes well within this.
const RUN_TIMEOUT: Duration = Duration::from_secs(120);

fn bench() -> Command {
    Command::new(env!("CARGO_BIN_EXE_orthrus-bench"))
}

/// Runs `cmd` to completion within [`RUN_TIMEOUT`], killing it otherwise.
fn run_bounded(cmd: &mut Command) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = wait_bounded(&mut child, RUN_TIMEOUT);
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_end(&mut stdout)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_end(&mut stderr)
        .unwrap();
    let status = status.unwrap_or_else(|| {
        panic!(
            "orthrus-bench did not finish within {RUN_TIMEOUT:?}; stderr:\n{}",
            String::from_utf8_lossy(&stderr)
        )
    });
    Output {
        status,
        stdout,
        stderr,
    }
}

/// The exit status, or `None` (after killing it) when `limit` passed.
/// Output is read after exit: the quick runs print a few KB at most, far
/// below a pipe's buffer.
fn wait_bounded(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

/// Checks one level's block of the text table and returns its rows' cells.
fn check_block(lines: &[&str], groups: usize) {
    assert!(
        lines[1].starts_with("Test|      Single Redis     |"),
        "{}",
        lines[1]
    );
    assert!(
        lines[2].starts_with("set |  Min     Max     Avg  |"),
        "{}",
        lines[2]
    );
    assert!(lines[2].ends_with("Ratio"), "{}", lines[2]);
    assert!(lines[3].starts_with("----+") && lines[3].chars().all(|c| c == '-' || c == '+'));
    let width = lines[2].len();
    for (row, set) in lines[4..8].iter().zip(SetName::ALL) {
        assert_eq!(row.len(), width, "ragged row {row:?}");
        let mut cells = row.split('|');
        assert_eq!(cells.next(), Some(set.as_str()));
        let cells: Vec<&str> = cells.collect();
        // Min/Max/Avg per group, one Ratio per measured target.
        assert_eq!(cells.len(), 3 * groups + (groups - 1), "{row}");
        for cell in &cells[..3 * groups] {
            let value: f64 = cell
                .trim()
                .parse()
                .unwrap_or_else(|_| panic!("{cell:?} in {row}"));
            assert!(
                value > 0.0 && cell.trim().split('.').nth(1).map(str::len) == Some(4),
                "{row}"
            );
        }
        for cell in &cells[3 * groups..] {
            let pct = cell
                .trim()
                .strip_suffix('%')
                .unwrap_or_else(|| panic!("{row}"));
            let value: f64 = pct.parse().unwrap();
            assert!(
                value > 0.0 && pct.split('.').nth(1).map(str::len) == Some(2),
                "{row}"
            );
        }
    }
}

fn check_table(stdout: &str, levels: &[usize], groups: usize) {
    assert!(stdout.contains("machine: "), "{stdout}");
    assert!(stdout.contains("versions: redis-server "), "{stdout}");
    let lines: Vec<&str> = stdout.lines().collect();
    for level in levels {
        let header = format!("{level} concurrency");
        let at = lines
            .iter()
            .position(|l| *l == header)
            .unwrap_or_else(|| panic!("no {header:?} in\n{stdout}"));
        check_block(&lines[at..at + 8], groups);
    }
}

fn check_json(path: &Path, names: &[&str], levels: &[usize]) -> Report {
    let report: Report = serde_json::from_str(&fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(report.settings.levels, levels);
    let got: Vec<&str> = report.targets.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(got, names);
    assert!(report.targets[0].baseline);
    assert!(report.machine.cores >= 1);
    assert_eq!(report.levels.len(), levels.len());
    for (level, &p) in report.levels.iter().zip(levels) {
        assert_eq!(level.concurrency, p);
        assert_eq!(level.targets.len(), names.len());
        for (t, result) in level.targets.iter().enumerate() {
            assert_eq!(result.runs.len(), level.repeats);
            assert!(result.runs.iter().all(|run| run.len() == p));
            for set in SetName::ALL {
                let s = result.stats.get(set);
                assert_eq!(s.samples, p * level.repeats);
                assert!(0.0 < s.min && s.min <= s.avg && s.avg <= s.max, "{s:?}");
            }
            assert_eq!(
                result.ratio_percent.is_some(),
                t > 0,
                "only the baseline has no ratio"
            );
        }
    }
    report
}

fn check_svg(path: &Path, measured: &[&str]) {
    let text = fs::read_to_string(path).unwrap();
    let doc = roxmltree::Document::parse(&text).unwrap_or_else(|e| panic!("invalid XML: {e}"));
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let series: Vec<&str> = doc
        .descendants()
        .filter(|n| n.attribute("class") == Some("series"))
        .map(|n| n.attribute("data-target").unwrap())
        .collect();
    assert_eq!(series, measured, "one series per measured target");
    for group in doc
        .descendants()
        .filter(|n| n.attribute("class") == Some("series"))
    {
        let lines = group
            .children()
            .filter(|n| n.has_tag_name("polyline"))
            .count();
        assert_eq!(lines, 4, "keys, hash, list and proc");
    }
}

#[test]
fn quick_comparison_prints_the_table_and_writes_json_markdown_and_svg() {
    let out = tempfile::tempdir().unwrap();
    let orthrus = common::orthrus_binary(
        "skipping the orthrus (cluster3) target and measuring a second plain redis-server instead",
    );
    let plain = RedisNode::start(NodeOptions::default()).unwrap();
    let mut cmd = bench();
    cmd.args([
        "compare", "--quick", "--levels", "1,2", "--ops", "200", "--quiet",
    ])
    .arg("--out")
    .arg(out.path());
    let names: &[&str] = match &orthrus {
        Some(path) => {
            cmd.args(["--topologies", "single,cluster3", "--orthrus"])
                .arg(path);
            &["single", "cluster3"]
        }
        None => {
            cmd.args(["--topologies", "single", "--target"])
                .arg(format!("plain={}", plain.addr()));
            &["single", "plain"]
        }
    };
    let output = run_bounded(&mut cmd);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(stderr.is_empty(), "--quiet printed {stderr}");

    check_table(&stdout, &[1, 2], 2);
    let report = check_json(&out.path().join("results.json"), names, &[1, 2]);
    if orthrus.is_some() {
        assert_ne!(report.machine.orthrus_version, "not used");
    }
    check_svg(&out.path().join("ratio.svg"), &names[1..]);
    let md = fs::read_to_string(out.path().join("report.md")).unwrap();
    assert!(
        md.contains("## 2 concurrency") && md.contains("```text\n"),
        "{md}"
    );
    assert!(
        md.contains(stdout.trim_end()),
        "report.md holds the printed table"
    );
}

#[test]
fn a_wrong_reply_fails_the_run_naming_the_command() {
    let good = RedisNode::start(NodeOptions::default()).unwrap();
    let wrong = RedisNode::start(NodeOptions::default()).unwrap();
    // Worker 0 of the first run against `wrong` will HSET this key.
    let planted = "t2:p1:r0:wrong:w0:h:0";
    wrong.cmd(&["SET", planted, "not a hash"]).unwrap();
    let out = tempfile::tempdir().unwrap();
    let output = run_bounded(
        bench()
            .args([
                "compare",
                "--topologies",
                "none",
                "--levels",
                "1",
                "--repeats",
                "1",
            ])
            .args(["--ops", "200", "--prefix", "t2", "--quiet"])
            .arg("--single")
            .arg(good.addr().to_string())
            .arg("--target")
            .arg(format!("wrong={}", wrong.addr()))
            .arg("--out")
            .arg(out.path()),
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("target wrong"), "{stderr}");
    assert!(
        stderr.contains(&format!("wrong reply to `HSET {planted} f0 v0.0")),
        "{stderr}"
    );
    assert!(stderr.contains("WRONGTYPE"), "{stderr}");
    assert!(
        !out.path().join("results.json").exists(),
        "a failed run writes no results"
    );
    // The keys set ran before the hash set failed; the baseline was left
    // clean by its workers, and the planted key is untouched.
    assert_eq!(
        good.cmd(&["DBSIZE"]).unwrap(),
        orthrus_resp::Value::Integer(0)
    );
    assert!(wrong.cmd(&["EXISTS", planted]).unwrap() == orthrus_resp::Value::Integer(1));
}

/// Process ids of every descendant of `root`, with their command lines.
fn descendants(root: u32) -> Vec<(u32, String)> {
    let mut all = Vec::new();
    for entry in fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        let cmdline = fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        all.push((pid, ppid.unwrap_or(0), cmdline.replace('\0', " ")));
    }
    let mut found = vec![root];
    let mut out = Vec::new();
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        for (pid, ppid, cmd) in &all {
            if *ppid == parent && !found.contains(pid) {
                found.push(*pid);
                out.push((*pid, cmd.clone()));
            }
        }
        i += 1;
    }
    out
}

/// Running (not a zombie) with the same command line.
fn still_running(pid: u32, cmdline: &str) -> bool {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next());
    let now = fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    !matches!(state, None | Some("Z" | "X")) && now.replace('\0', " ") == cmdline
}

#[test]
fn sigint_mid_run_leaves_no_process_behind() {
    let out = tempfile::tempdir().unwrap();
    let orthrus = common::orthrus_binary(
        "skipping the orthrus (cluster3) target and measuring a second plain redis-server instead",
    );
    let mut cmd = bench();
    // Enough work that the run is still going when the signal comes.
    cmd.args([
        "compare",
        "--levels",
        "3",
        "--repeats",
        "1",
        "--ops",
        "5000000",
        "--quiet",
    ])
    .arg("--out")
    .arg(out.path());
    let plain;
    match &orthrus {
        Some(path) => {
            cmd.args(["--topologies", "single,cluster3", "--orthrus"])
                .arg(path);
        }
        None => {
            plain = RedisNode::start(NodeOptions::default()).unwrap();
            cmd.args(["--topologies", "single", "--target"])
                .arg(format!("plain={}", plain.addr()));
        }
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let driver = child.id();

    // Wait until the workers of the first run are up, and note everything.
    let deadline = Instant::now() + Duration::from_secs(60);
    let procs = loop {
        let procs = descendants(driver);
        let workers = procs
            .iter()
            .filter(|(_, cmd)| cmd.contains(" worker "))
            .count();
        if workers == 3 {
            break procs;
        }
        assert!(
            Instant::now() < deadline,
            "no 3 workers after 60 s: {procs:?}"
        );
        if let Some(status) = child.try_wait().unwrap() {
            let mut stderr = String::new();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut stderr)
                .unwrap();
            panic!("the driver exited early ({status}):\n{stderr}");
        }
        thread::sleep(Duration::from_millis(50));
    };
    assert!(
        procs
            .iter()
            .any(|(_, cmd)| cmd.contains("redis-server") || cmd.contains("valkey-server")),
        "{procs:?}"
    );
    if orthrus.is_some() {
        assert!(
            procs.iter().any(|(_, cmd)| cmd.contains("--seeds")),
            "{procs:?}"
        );
    }
    thread::sleep(Duration::from_millis(300));

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(driver).unwrap()),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let status = wait_bounded(&mut child, Duration::from_secs(30))
        .expect("the driver did not exit within 30 s of SIGINT");
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("interrupted"), "{stderr}");

    let left: Vec<&(u32, String)> = procs
        .iter()
        .filter(|(pid, cmd)| still_running(*pid, cmd))
        .collect();
    assert!(left.is_empty(), "still running after SIGINT: {left:?}");
    assert!(!out.path().join("results.json").exists());
}

/// The one directory under `parent`, which must exist.
fn only_dir(parent: &Path) -> PathBuf {
    let dirs: Vec<PathBuf> = fs::read_dir(parent)
        .unwrap_or_else(|e| panic!("{}: {e}", parent.display()))
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    dirs[0].clone()
}

#[test]
fn quick_runs_go_under_target_and_nothing_is_overwritten() {
    // A throwaway workspace root, so that default directories land in it.
    let root = tempfile::tempdir().unwrap();
    fs::write(root.path().join("Cargo.toml"), "[workspace]\n").unwrap();
    let a = RedisNode::start(NodeOptions::default()).unwrap();
    let b = RedisNode::start(NodeOptions::default()).unwrap();
    let compare = |extra: &[&str]| {
        let mut cmd = bench();
        cmd.current_dir(root.path())
            .args(["compare", "--topologies", "none", "--levels", "1"])
            .args(["--repeats", "1", "--ops", "30", "--quiet"])
            .arg("--single")
            .arg(a.addr().to_string())
            .arg("--target")
            .arg(format!("b={}", b.addr()))
            .args(extra);
        run_bounded(&mut cmd)
    };

    let quick = compare(&["--quick", "--workload", "classic"]);
    assert!(quick.status.success(), "{quick:?}");
    assert!(String::from_utf8_lossy(&quick.stdout).contains("workload: classic, "));
    let quick_dir = only_dir(&root.path().join("target/orthrus-bench"));
    let json = quick_dir.join("results.json");
    let report: Report = serde_json::from_str(&fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report.settings.workload, WorkloadKind::Classic);
    assert!(
        !root.path().join("bench").exists(),
        "a quick run writes nothing under bench/"
    );

    let full = compare(&[]);
    assert!(full.status.success(), "{full:?}");
    let full_dir = only_dir(&root.path().join("bench/results"));
    let name = full_dir.file_name().unwrap().to_str().unwrap().to_owned();
    // <YYYY-MM-DD>T<HHMMSS>Z-<host>
    assert_eq!(name.as_bytes()[10], b'T', "{name}");
    assert_eq!(name.as_bytes()[17], b'Z', "{name}");

    // An occupied --out is refused before anything runs, and left alone.
    let before = fs::read(&json).unwrap();
    let refused = compare(&["--quick", "--out", quick_dir.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("already holds files") && stderr.contains("--overwrite"),
        "{stderr}"
    );
    assert_eq!(fs::read(&json).unwrap(), before);

    let replaced = compare(&[
        "--quick",
        "--overwrite",
        "--out",
        quick_dir.to_str().unwrap(),
    ]);
    assert!(replaced.status.success(), "{replaced:?}");
    assert_ne!(fs::read(&json).unwrap(), before, "--overwrite replaces");
}
