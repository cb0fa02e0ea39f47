//! `orthrus-bench conn-memory`: what idle client connections cost a server
//! or a proxy in resident memory, and whether it gives the memory back.
//!
//! For each target in turn, with its process id given on the command line:
//!
//! 1. idle: the process's `VmRSS` (from `/proc/PID/status`);
//! 2. open N connections and send nothing; once the process holds N more
//!    open files (it has accepted them all), RSS again: KiB per connection;
//! 3. one `PING` on every connection, every `+PONG` read back: RSS, KiB per
//!    connection against idle (buffers a first request allocates);
//! 4. close them all; once its open files are back near idle, RSS and its
//!    ratio to idle (memory a process keeps after its clients left).
//!
//! Each step waits `--settle-ms` before reading RSS. Everything is bounded:
//! a target that does not accept, answer or close within `--timeout`
//! seconds fails the run, and the connections are closed on every path
//! (they are owned by the step that opened them). The driver raises its own
//! `RLIMIT_NOFILE` to hold N sockets, and refuses a target process whose
//! open-file limit is too small for N.

use std::fmt::Write as _;
use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail, ensure};
use clap::Args;
use nix::sys::resource::{Resource, getrlimit, setrlimit};
use serde::{Deserialize, Serialize};

use crate::targets::External;

/// The most connections one run may open.
pub const MAX_CONNECTIONS: usize = 100_000;
/// File descriptors the driver keeps for itself besides the connections.
const SPARE_FDS: u64 = 64;
const PING: &[u8] = b"*1\r\n$4\r\nPING\r\n";
const PONG: &[u8] = b"+PONG\r\n";
/// How often a wait looks at the target's open files.
const POLL: Duration = Duration::from_millis(20);

/// Flags of `conn-memory`.
#[derive(Args, Debug, Clone)]
pub struct ConnMemoryArgs {
    /// A running server or proxy to measure. Repeatable; measured one after
    /// the other.
    #[arg(long = "target", value_name = "NAME=HOST:PORT", required = true)]
    pub targets: Vec<String>,

    /// The process behind each --target, in the same order (its RSS and
    /// open files are read from /proc/PID).
    #[arg(long = "pid", value_name = "PID", required = true)]
    pub pids: Vec<u32>,

    /// Idle client connections to open against each target.
    #[arg(long, value_name = "N", default_value_t = 3000)]
    pub connections: usize,

    /// Milliseconds to wait after each step before reading RSS.
    #[arg(long, value_name = "MS", default_value_t = 500)]
    pub settle_ms: u64,

    /// Seconds each target may take in all (connect, PING, close).
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    pub timeout: u64,

    /// Print one JSON object per target instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// What one target measured. RSS in KiB.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConnMemory {
    /// The --target NAME.
    pub target: String,
    /// Where the connections went.
    pub addr: String,
    /// The process measured.
    pub pid: u32,
    /// N.
    pub connections: usize,
    /// RSS before any connection.
    pub idle_kib: u64,
    /// RSS with N idle connections.
    pub open_kib: u64,
    /// RSS after every connection sent one PING.
    pub pinged_kib: u64,
    /// RSS after all of them closed.
    pub closed_kib: u64,
    /// (open - idle) / N.
    pub open_kib_per_conn: f64,
    /// (pinged - idle) / N.
    pub pinged_kib_per_conn: f64,
    /// closed / idle.
    pub closed_over_idle: f64,
    /// The process's open files when idle, with N open, and after closing.
    pub fds: [usize; 3],
}

/// One target and the process behind it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subject {
    /// Name and address.
    pub target: External,
    /// Its process.
    pub pid: u32,
}

/// The RSS figures of one measurement, before the arithmetic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rss {
    /// Before any connection.
    pub idle: u64,
    /// With N idle connections.
    pub open: u64,
    /// After one PING each.
    pub pinged: u64,
    /// After closing.
    pub closed: u64,
}

/// The settings every target is measured with.
#[derive(Clone, Copy, Debug)]
struct Steps {
    connections: usize,
    settle: Duration,
    timeout: Duration,
}

// === impl ConnMemory ===

impl ConnMemory {
    /// The figures and their ratios.
    pub fn new(subject: &Subject, connections: usize, rss: Rss, fds: [usize; 3]) -> ConnMemory {
        let per_conn = |kib: u64| (kib as f64 - rss.idle as f64) / connections.max(1) as f64;
        ConnMemory {
            target: subject.target.name.clone(),
            addr: subject.target.addr.to_string(),
            pid: subject.pid,
            connections,
            idle_kib: rss.idle,
            open_kib: rss.open,
            pinged_kib: rss.pinged,
            closed_kib: rss.closed,
            open_kib_per_conn: per_conn(rss.open),
            pinged_kib_per_conn: per_conn(rss.pinged),
            closed_over_idle: rss.closed as f64 / rss.idle.max(1) as f64,
            fds,
        }
    }
}

/// Runs `conn-memory`: measures every target and prints the results.
pub fn run(args: &ConnMemoryArgs) -> Result<()> {
    let subjects = subjects(&args.targets, &args.pids)?;
    ensure!(
        (1..=MAX_CONNECTIONS).contains(&args.connections),
        "--connections must be in 1..={MAX_CONNECTIONS}"
    );
    let steps = Steps {
        connections: args.connections,
        settle: Duration::from_millis(args.settle_ms),
        timeout: Duration::from_secs(args.timeout.max(1)),
    };
    raise_fd_limit(args.connections as u64 + SPARE_FDS)?;
    let mut results = Vec::new();
    for subject in &subjects {
        let result = measure(subject, steps).with_context(|| {
            format!(
                "target {} at {} (pid {})",
                subject.target.name, subject.target.addr, subject.pid
            )
        })?;
        if args.json {
            println!("{}", serde_json::to_string(&result)?);
        }
        results.push(result);
    }
    if !args.json {
        print!("{}", table(&results));
    }
    Ok(())
}

/// Pairs the i-th `--target` with the i-th `--pid`.
pub fn subjects(targets: &[String], pids: &[u32]) -> Result<Vec<Subject>> {
    ensure!(
        targets.len() == pids.len(),
        "{} --target but {} --pid: give one PID per target, in the same order",
        targets.len(),
        pids.len()
    );
    let subjects = targets
        .iter()
        .zip(pids)
        .map(|(t, &pid)| {
            Ok(Subject {
                target: External::parse_named(t)?,
                pid,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    for (i, s) in subjects.iter().enumerate() {
        ensure!(
            !subjects[..i].iter().any(|o| o.target.name == s.target.name),
            "two targets are named {:?}",
            s.target.name
        );
    }
    Ok(subjects)
}

/// `VmRSS` in KiB from the text of `/proc/PID/status`.
pub fn parse_vm_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let mut words = line.split_whitespace().skip(1);
    let kib = words.next()?.parse().ok()?;
    (words.next() == Some("kB")).then_some(kib)
}

/// The soft "Max open files" from the text of `/proc/PID/limits`; `None`
/// when unlimited or absent.
pub fn parse_max_open_files(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.trim_start_matches("Max open files")
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The text table of every target's figures.
pub fn table(results: &[ConnMemory]) -> String {
    let mut out = String::new();
    let n = results.first().map_or(0, |r| r.connections);
    let _ = writeln!(
        out,
        "{:<12} {:>10} {:>14} {:>14} {:>12} {:>8}",
        "target",
        "idle RSS",
        format!("KiB/conn {n}"),
        "KiB/conn PING",
        "RSS closed",
        "÷ idle"
    );
    for r in results {
        let _ = writeln!(
            out,
            "{:<12} {:>10} {:>14.2} {:>14.2} {:>12} {:>8.2}",
            r.target,
            mib(r.idle_kib),
            r.open_kib_per_conn,
            r.pinged_kib_per_conn,
            mib(r.closed_kib),
            r.closed_over_idle
        );
    }
    out
}

fn mib(kib: u64) -> String {
    format!("{:.1} MB", kib as f64 / 1024.0)
}

/// The whole sequence against one target; every connection is closed when
/// this returns, however it returns.
fn measure(subject: &Subject, steps: Steps) -> Result<ConnMemory> {
    let deadline = Instant::now() + steps.timeout;
    let pid = subject.pid;
    // Counted once the count holds still: connections still closing when
    // the measurement began (a readiness check's, or an earlier target's
    // on the same process) would raise the count that the new connections
    // are looked for above.
    thread::sleep(steps.settle);
    let idle_fds = settled_open_files(pid, deadline)?;
    if let Some(max) = read_proc(pid, "limits")
        .ok()
        .and_then(|l| parse_max_open_files(&l))
    {
        let need = (idle_fds + steps.connections) as u64;
        ensure!(
            max >= need,
            "process {pid} may open {max} files, fewer than the {need} that {} more connections need",
            steps.connections
        );
    }
    let idle = rss(pid)?;

    let mut conns = Vec::with_capacity(steps.connections);
    for i in 0..steps.connections {
        conns.push(
            connect(subject.target.addr, deadline).with_context(|| {
                format!("opening connection {} of {}", i + 1, steps.connections)
            })?,
        );
    }
    let open_fds = wait_open_files(pid, deadline, |n| n >= idle_fds + steps.connections)
        .with_context(|| {
            format!(
                "process {pid} did not accept the {} connections: is it the process behind {}?",
                steps.connections, subject.target.addr
            )
        })?;
    thread::sleep(steps.settle);
    let open = rss(pid)?;

    ping_all(&mut conns, deadline)?;
    thread::sleep(steps.settle);
    let pinged = rss(pid)?;

    drop(conns);
    // A process may keep a few descriptors (logs, backends) it opened
    // meanwhile; most of the N must be gone.
    let slack = 16 + steps.connections / 100;
    let closed_fds = wait_open_files(pid, deadline, |n| n <= idle_fds + slack)
        .with_context(|| format!("process {pid} did not close the connections"))?;
    thread::sleep(steps.settle);
    let closed = rss(pid)?;
    let rss = Rss {
        idle,
        open,
        pinged,
        closed,
    };
    Ok(ConnMemory::new(
        subject,
        steps.connections,
        rss,
        [idle_fds, open_fds, closed_fds],
    ))
}

fn connect(addr: SocketAddr, deadline: Instant) -> Result<TcpStream> {
    let left = remaining(deadline)?;
    let stream = TcpStream::connect_timeout(&addr, left)?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// Writes a PING on every connection, then reads every `+PONG`.
fn ping_all(conns: &mut [TcpStream], deadline: Instant) -> Result<()> {
    for (i, conn) in conns.iter_mut().enumerate() {
        conn.set_write_timeout(Some(remaining(deadline)?))?;
        conn.write_all(PING)
            .with_context(|| format!("sending PING on connection {i}"))?;
    }
    let mut reply = [0u8; PONG.len()];
    for (i, conn) in conns.iter_mut().enumerate() {
        conn.set_read_timeout(Some(remaining(deadline)?))?;
        conn.read_exact(&mut reply)
            .with_context(|| format!("reading the reply to PING on connection {i}"))?;
        if reply != PONG {
            bail!(
                "connection {i} answered PING with {:?}",
                String::from_utf8_lossy(&reply)
            );
        }
    }
    Ok(())
}

fn remaining(deadline: Instant) -> Result<Duration> {
    deadline
        .checked_duration_since(Instant::now())
        .filter(|d| !d.is_zero())
        .ok_or_else(|| anyhow!("--timeout passed"))
}

/// Polls the process's open files until `done` says so, or the deadline.
fn wait_open_files(pid: u32, deadline: Instant, done: impl Fn(usize) -> bool) -> Result<usize> {
    loop {
        let n = open_files(pid)?;
        if done(n) {
            return Ok(n);
        }
        if Instant::now() >= deadline {
            bail!("--timeout passed with {n} files open in process {pid}");
        }
        thread::sleep(POLL);
    }
}

/// The process's open files once two reads 100 ms apart agree (or at the
/// deadline, the last read).
fn settled_open_files(pid: u32, deadline: Instant) -> Result<usize> {
    let mut last = open_files(pid)?;
    while Instant::now() < deadline {
        thread::sleep(Duration::from_millis(100));
        let n = open_files(pid)?;
        if n == last {
            break;
        }
        last = n;
    }
    Ok(last)
}

fn open_files(pid: u32) -> Result<usize> {
    let dir = format!("/proc/{pid}/fd");
    Ok(fs::read_dir(&dir)
        .with_context(|| format!("reading {dir} (is process {pid} running, and ours?)"))?
        .count())
}

fn rss(pid: u32) -> Result<u64> {
    let status = read_proc(pid, "status")?;
    parse_vm_rss(&status).ok_or_else(|| anyhow!("no VmRSS in /proc/{pid}/status"))
}

fn read_proc(pid: u32, file: &str) -> Result<String> {
    let path = format!("/proc/{pid}/{file}");
    fs::read_to_string(&path).with_context(|| format!("reading {path}"))
}

/// Raises this process's soft `RLIMIT_NOFILE` to `need` if it is lower.
fn raise_fd_limit(need: u64) -> Result<()> {
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    if soft >= need {
        return Ok(());
    }
    ensure!(
        hard >= need,
        "{need} open files are needed and the hard limit is {hard}: raise it (ulimit -Hn) or lower --connections"
    );
    setrlimit(Resource::RLIMIT_NOFILE, need, hard).context("raising RLIMIT_NOFILE")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vm_rss_is_read_in_kib() {
        let status = "Name:\tredis-server\nVmPeak:\t  100 kB\nVmRSS:\t    7680 kB\nThreads:\t4\n";
        assert_eq!(parse_vm_rss(status), Some(7680));
        assert_eq!(parse_vm_rss("VmRSS:\t12 MB\n"), None);
        assert_eq!(parse_vm_rss("Name:\tx\n"), None);
        let mine = fs::read_to_string("/proc/self/status").unwrap();
        assert!(parse_vm_rss(&mine).unwrap() > 0);
    }

    #[test]
    fn open_file_limits_are_read() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max processes             63448                63448                processes \n\
                      Max open files            1024                 524288               files     \n";
        assert_eq!(parse_max_open_files(limits), Some(1024));
        let unlimited =
            "Max open files            unlimited            unlimited            files\n";
        assert_eq!(parse_max_open_files(unlimited), None);
        let mine = fs::read_to_string("/proc/self/limits").unwrap();
        assert!(parse_max_open_files(&mine).is_some());
    }

    #[test]
    fn targets_pair_with_pids_in_order() {
        let targets = ["a=127.0.0.1:1".to_owned(), "b=127.0.0.1:2".to_owned()];
        let s = subjects(&targets, &[10, 20]).unwrap();
        assert_eq!((s[0].target.name.as_str(), s[0].pid), ("a", 10));
        assert_eq!((s[1].target.name.as_str(), s[1].pid), ("b", 20));
        let err = subjects(&targets, &[10]).unwrap_err().to_string();
        assert!(err.contains("2 --target but 1 --pid"), "{err}");
        let twice = ["a=127.0.0.1:1".to_owned(), "a=127.0.0.1:2".to_owned()];
        assert!(subjects(&twice, &[1, 2]).is_err());
        assert!(subjects(&["127.0.0.1:1".to_owned()], &[1]).is_err());
    }

    #[test]
    fn kib_per_connection_and_ratio() {
        let subject = subjects(&["p=127.0.0.1:1".to_owned()], &[7]).unwrap()[0].clone();
        let rss = Rss {
            idle: 6_000,
            open: 7_230,
            pinged: 19_500,
            closed: 12_000,
        };
        let m = ConnMemory::new(&subject, 3000, rss, [10, 3010, 11]);
        assert!((m.open_kib_per_conn - 0.41).abs() < 1e-9);
        assert!((m.pinged_kib_per_conn - 4.5).abs() < 1e-9);
        assert!((m.closed_over_idle - 2.0).abs() < 1e-9);
        // Memory can shrink while connections are open.
        let m = ConnMemory::new(&subject, 100, Rss { open: 5_900, ..rss }, [0; 3]);
        assert!((m.open_kib_per_conn + 1.0).abs() < 1e-9);
        let text = table(&[m]);
        assert!(text.starts_with("target "), "{text}");
        assert!(text.contains("KiB/conn 100"), "{text}");
        assert!(text.contains("\np "), "{text}");
        assert!(
            text.contains("5.9 MB") && text.contains("11.7 MB"),
            "{text}"
        );
    }
}
