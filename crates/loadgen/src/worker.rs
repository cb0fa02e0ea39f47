//! The worker process: `orthrus-bench worker`, started by the driver, never
//! by hand.
//!
//! It speaks JSON lines on stdout and takes one line on stdin:
//!
//! 1. connect, check the target answers PING, delete the keys that outlive
//!    a round; print `"ready"`;
//! 2. wait for the driver's `go` line, so that all P processes start
//!    together (EOF instead means the driver gave up: exit quietly);
//! 3. run keys, hash and list, timing each; print `{"done": ...}` with the
//!    seconds and the commands sent;
//! 4. on any error, print `{"failed": {"error": ...}}` and exit 1.

use std::io::{self, BufRead, Write};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use orthrus_resp::Value;
use serde::{Deserialize, Serialize};

use crate::conn::{Conn, reply_text};
use crate::results::{PerSet, SetName, WorkloadKind};
use crate::workload::Workload;

/// The line the driver writes to release a worker.
pub const GO: &str = "go";

/// One line a worker prints.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkerMessage {
    /// Connected and checked; waiting for [`GO`].
    Ready,
    /// Finished every set.
    Done(WorkerTimes),
    /// Something went wrong; the run must fail.
    Failed {
        /// The whole error chain, naming the command and the reply.
        error: String,
    },
}

/// What one process measured.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkerTimes {
    /// Seconds per set, and for the three together.
    pub seconds: PerSet<f64>,
    /// Commands sent per set, and in all.
    pub commands: PerSet<u64>,
}

/// What a worker is told on its command line.
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    /// The target.
    pub addr: SocketAddr,
    /// This process's key prefix.
    pub prefix: String,
    /// Commands per set.
    pub ops: u64,
    /// Which commands.
    pub workload: WorkloadKind,
    /// Connect, read and write timeout.
    pub io_timeout: Duration,
}

/// Runs the worker protocol on stdin/stdout; the process's exit code.
pub fn run(config: &WorkerConfig) -> ExitCode {
    let stdin = io::stdin();
    let stdout = io::stdout();
    match serve(config, &mut stdin.lock(), &mut stdout.lock()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let failed = WorkerMessage::Failed {
                error: format!("{e:#}"),
            };
            // If stdout is gone the driver is gone too; nobody to tell.
            let _ = say(&mut stdout.lock(), &failed);
            ExitCode::FAILURE
        }
    }
}

/// The protocol, over any reader and writer (tests drive it in-process).
pub fn serve(
    config: &WorkerConfig,
    input: &mut impl BufRead,
    output: &mut impl Write,
) -> Result<()> {
    let workload = Workload::new(&config.prefix, config.ops, config.workload)?;
    let mut conn = Conn::connect(config.addr, config.io_timeout)?;
    let pong = conn.call(&["PING"])?;
    if !matches!(&pong, Value::Simple(s) if &s[..] == b"PONG") {
        bail!("{} answered PING with {}", config.addr, reply_text(&pong));
    }
    workload.prepare(&mut conn)?;
    say(output, &WorkerMessage::Ready)?;

    let mut line = String::new();
    input
        .read_line(&mut line)
        .context("waiting for the driver's go")?;
    if line.trim() != GO {
        // EOF or anything else: the driver aborted before the start.
        return Ok(());
    }

    let start = Instant::now();
    let mut seconds = PerSet::default();
    let mut commands = PerSet::default();
    for (set, secs, sent) in [
        (SetName::Keys, &mut seconds.keys, &mut commands.keys),
        (SetName::Hash, &mut seconds.hash, &mut commands.hash),
        (SetName::List, &mut seconds.list, &mut commands.list),
    ] {
        let began = Instant::now();
        *sent = workload
            .run(&mut conn, set)
            .with_context(|| format!("{} set against {}", set.as_str(), config.addr))?;
        *secs = began.elapsed().as_secs_f64();
    }
    seconds.proc = start.elapsed().as_secs_f64();
    commands.proc = commands.keys + commands.hash + commands.list;
    workload.cleanup(&mut conn)?;
    say(
        output,
        &WorkerMessage::Done(WorkerTimes { seconds, commands }),
    )
}

/// Writes one message as one JSON line and flushes it.
fn say(output: &mut impl Write, message: &WorkerMessage) -> Result<()> {
    let mut line = serde_json::to_vec(message)?;
    line.push(b'\n');
    output.write_all(&line)?;
    output.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use orthrus_devcluster::{NodeOptions, RedisNode};

    fn config(node: &RedisNode, prefix: &str) -> WorkerConfig {
        WorkerConfig {
            addr: node.addr(),
            prefix: prefix.into(),
            ops: 60,
            workload: WorkloadKind::Modern,
            io_timeout: Duration::from_secs(10),
        }
    }

    fn messages(out: &[u8]) -> Vec<WorkerMessage> {
        String::from_utf8_lossy(out)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    #[test]
    fn ready_then_done_with_times() {
        let node = RedisNode::start(NodeOptions::default()).unwrap();
        let mut out = Vec::new();
        serve(&config(&node, "w:a"), &mut "go\n".as_bytes(), &mut out).unwrap();
        let msgs = messages(&out);
        assert_eq!(msgs.len(), 2);
        assert_eq!(msgs[0], WorkerMessage::Ready);
        let WorkerMessage::Done(times) = msgs[1] else {
            panic!("{msgs:?}")
        };
        assert_eq!(times.commands, Workload::commands(60));
        assert!(times.seconds.keys > 0.0 && times.seconds.hash > 0.0 && times.seconds.list > 0.0);
        let sum = times.seconds.keys + times.seconds.hash + times.seconds.list;
        assert!(times.seconds.proc >= sum && times.seconds.proc < sum + 0.5);
    }

    #[test]
    fn eof_before_go_runs_nothing() {
        let node = RedisNode::start(NodeOptions::default()).unwrap();
        let mut out = Vec::new();
        serve(&config(&node, "w:b"), &mut "".as_bytes(), &mut out).unwrap();
        assert_eq!(messages(&out), vec![WorkerMessage::Ready]);
        assert_eq!(node.cmd(&["DBSIZE"]).unwrap(), Value::Integer(0));
    }

    #[test]
    fn wire_format_is_stable() {
        let ready = serde_json::to_string(&WorkerMessage::Ready).unwrap();
        assert_eq!(ready, "\"ready\"");
        let failed = WorkerMessage::Failed { error: "x".into() };
        assert_eq!(
            serde_json::to_string(&failed).unwrap(),
            r#"{"failed":{"error":"x"}}"#
        );
    }
}
