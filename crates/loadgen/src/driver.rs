//! One run: P worker processes against one target, released together.
//!
//! The driver re-executes its own binary as `orthrus-bench worker` P times,
//! waits until every worker has connected and said `ready`, writes `go` to
//! each one's stdin in a tight loop, and collects one `done` line per
//! worker. A thread per worker forwards its stdout lines over a channel, so
//! the first failure is seen at once, whichever worker it comes from, and
//! every wait is bounded and checks for Ctrl-C. Dropping the workers kills
//! and reaps whatever is still running, on success, error or interrupt.

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};

use crate::interrupt::Interrupt;
use crate::results::WorkloadKind;
use crate::worker::{GO, WorkerMessage, WorkerTimes};

/// How often a wait looks at the interrupt flag.
const POLL: Duration = Duration::from_millis(100);
/// How long P processes may take to start and connect: a base plus a share
/// per process, since on 2 cores 80 processes start one after another.
const READY_BASE: Duration = Duration::from_secs(20);
const READY_PER_PROCESS: Duration = Duration::from_millis(500);
/// The longest a run may take: a base plus a generous time per command
/// (200 µs, ten times a loopback round trip) times the commands of all
/// processes. Workers time out on their own on a silent target; this bound
/// only catches a wedged worker.
const RUN_BASE: Duration = Duration::from_secs(120);
const RUN_PER_COMMAND: Duration = Duration::from_micros(200);

/// What one run needs.
#[derive(Debug, Clone)]
pub struct RunSpec<'a> {
    /// The `orthrus-bench` executable to start as workers.
    pub exe: &'a Path,
    /// The target.
    pub addr: SocketAddr,
    /// Worker `w` uses the key prefix `{prefix}:w{w}`.
    pub prefix: &'a str,
    /// P.
    pub processes: usize,
    /// Commands per set per process.
    pub ops: u64,
    /// Which commands.
    pub workload: WorkloadKind,
    /// Each worker's connect/read/write timeout.
    pub io_timeout: Duration,
}

/// The running worker processes of one run.
struct Workers {
    children: Vec<Child>,
    stdins: Vec<Option<ChildStdin>>,
    lines: Receiver<(usize, Line)>,
    /// Whose stdout has closed: they can say nothing more.
    closed: Vec<bool>,
}

/// What a reader thread saw on a worker's stdout.
enum Line {
    Message(WorkerMessage),
    Garbage(String),
    Eof,
}

/// Runs P workers against the target and returns each one's times.
pub fn run(spec: &RunSpec<'_>, interrupt: &Interrupt) -> Result<Vec<WorkerTimes>> {
    let mut workers = Workers::spawn(spec)?;
    let ready_by = Instant::now() + READY_BASE + READY_PER_PROCESS * spec.processes as u32;
    workers.wait_all(spec.processes, ready_by, interrupt, "saying ready", |m| {
        matches!(m, WorkerMessage::Ready).then_some(())
    })?;
    workers.release()?;
    let commands = spec
        .ops
        .saturating_mul(3)
        .saturating_mul(spec.processes as u64);
    let budget = RUN_PER_COMMAND.saturating_mul(u32::try_from(commands).unwrap_or(u32::MAX));
    let done_by = Instant::now() + RUN_BASE + budget;
    let times = workers.wait_all(
        spec.processes,
        done_by,
        interrupt,
        "reporting its times",
        |m| match m {
            WorkerMessage::Done(t) => Some(*t),
            _ => None,
        },
    )?;
    workers.reap()?;
    Ok(times)
}

// === impl Workers ===

impl Workers {
    fn spawn(spec: &RunSpec<'_>) -> Result<Workers> {
        let (tx, rx) = mpsc::channel();
        let mut workers = Workers {
            children: Vec::with_capacity(spec.processes),
            stdins: Vec::with_capacity(spec.processes),
            lines: rx,
            closed: vec![false; spec.processes],
        };
        for w in 0..spec.processes {
            let mut child = Command::new(spec.exe)
                .arg("worker")
                .arg("--addr")
                .arg(spec.addr.to_string())
                .arg("--prefix")
                .arg(format!("{}:w{w}", spec.prefix))
                .arg("--ops")
                .arg(spec.ops.to_string())
                .arg("--workload")
                .arg(spec.workload.as_str())
                .arg("--io-timeout-ms")
                .arg(spec.io_timeout.as_millis().to_string())
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .with_context(|| format!("starting worker {w} ({})", spec.exe.display()))?;
            let stdout = child
                .stdout
                .take()
                .ok_or_else(|| anyhow!("worker {w} has no stdout"))?;
            workers.stdins.push(child.stdin.take());
            workers.children.push(child);
            forward_lines(w, stdout, tx.clone());
        }
        Ok(workers)
    }

    /// Waits for one message per worker that `accept` takes, in worker
    /// order; any `failed`, garbage or early exit is an error.
    fn wait_all<T>(
        &mut self,
        count: usize,
        deadline: Instant,
        interrupt: &Interrupt,
        what: &str,
        accept: impl Fn(&WorkerMessage) -> Option<T>,
    ) -> Result<Vec<T>> {
        if let Some(w) = self.closed.iter().position(|&c| c) {
            bail!("worker {w} exited before {what}{}", self.status_of(w));
        }
        let mut got: Vec<Option<T>> = (0..count).map(|_| None).collect();
        let mut missing = count;
        while missing > 0 {
            interrupt.check()?;
            let now = Instant::now();
            if now >= deadline {
                bail!("{missing} of {count} workers timed out before {what}");
            }
            let (w, line) = match self.lines.recv_timeout(POLL.min(deadline - now)) {
                Ok(next) => next,
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => bail!("every worker closed its stdout"),
            };
            let message = match line {
                Line::Message(m) => m,
                Line::Garbage(text) => bail!("worker {w} printed {text:?}, not a message"),
                Line::Eof => {
                    if let Some(closed) = self.closed.get_mut(w) {
                        *closed = true;
                    }
                    // A fast worker may finish before a slow one reports.
                    if got.get(w).is_some_and(Option::is_some) {
                        continue;
                    }
                    bail!("worker {w} exited before {what}{}", self.status_of(w));
                }
            };
            if let WorkerMessage::Failed { error } = &message {
                bail!("worker {w} failed: {error}");
            }
            let slot = got
                .get_mut(w)
                .ok_or_else(|| anyhow!("unknown worker {w}"))?;
            if slot.is_some() {
                bail!("worker {w} said {message:?} twice");
            }
            *slot = Some(
                accept(&message)
                    .ok_or_else(|| anyhow!("worker {w} said {message:?} out of turn"))?,
            );
            missing -= 1;
        }
        Ok(got.into_iter().flatten().collect())
    }

    /// Writes `go` to every worker, as close together as the pipes allow.
    fn release(&mut self) -> Result<()> {
        let go = format!("{GO}\n");
        for (w, stdin) in self.stdins.iter_mut().enumerate() {
            let pipe = stdin
                .as_mut()
                .ok_or_else(|| anyhow!("worker {w} has no stdin"))?;
            pipe.write_all(go.as_bytes())
                .and_then(|()| pipe.flush())
                .with_context(|| format!("releasing worker {w}"))?;
        }
        Ok(())
    }

    /// Waits for every worker to exit and checks it succeeded.
    fn reap(&mut self) -> Result<()> {
        self.stdins.clear();
        for (w, child) in self.children.iter_mut().enumerate() {
            let status = child
                .wait()
                .with_context(|| format!("waiting for worker {w}"))?;
            if !status.success() {
                bail!("worker {w} reported its times but exited with {status}");
            }
        }
        Ok(())
    }

    /// `" (exit status N)"` if worker `w` has exited, for messages.
    fn status_of(&mut self, w: usize) -> String {
        let status = self.children.get_mut(w).and_then(|c| {
            // The pipe closes a moment before the process is reapable.
            let until = Instant::now() + Duration::from_millis(500);
            loop {
                match c.try_wait() {
                    Ok(Some(status)) => return Some(status),
                    Ok(None) if Instant::now() < until => thread::sleep(Duration::from_millis(10)),
                    _ => return None,
                }
            }
        });
        status.map_or_else(String::new, |s| format!(" ({s})"))
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        self.stdins.clear();
        for child in &mut self.children {
            if matches!(child.try_wait(), Ok(None)) {
                let _ = child.kill();
            }
            let _ = child.wait();
        }
    }
}

/// Forwards worker `w`'s stdout lines until EOF, then one [`Line::Eof`].
fn forward_lines(w: usize, stdout: impl std::io::Read + Send + 'static, tx: Sender<(usize, Line)>) {
    thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let parsed = match serde_json::from_str::<WorkerMessage>(&line) {
                Ok(m) => Line::Message(m),
                Err(_) => Line::Garbage(line),
            };
            if tx.send((w, parsed)).is_err() {
                return;
            }
        }
        let _ = tx.send((w, Line::Eof));
    });
}
