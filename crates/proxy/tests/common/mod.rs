//! Test harness: the real `orthrus` binary in front of a real cluster
//! started by devcluster, on free loopback ports.

#![allow(dead_code, unreachable_pub)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use orthrus_devcluster::{Cluster, ClusterSpec, Value, free_port};

pub mod admin;
pub mod rebalance;
pub mod replication;
pub mod routes;
pub mod tls;

/// A running orthrus process; killed on drop. Its log goes to a file that
/// is printed if the test fails.
pub struct Proxy {
    child: Child,
    pub addr: SocketAddr,
    log: PathBuf,
}

impl Proxy {
    /// Starts orthrus on a free port with these seeds and extra flags, and
    /// waits until it serves the cluster.
    pub fn start(seeds: &[SocketAddr], extra: &[&str]) -> Proxy {
        Proxy::start_env(seeds, extra, &[])
    }

    /// [`Proxy::start`] with these environment variables (`ORTHRUS_...`).
    pub fn start_env(seeds: &[SocketAddr], extra: &[&str], env: &[(&str, &str)]) -> Proxy {
        let proxy = Proxy::spawn(seeds, extra, env);
        proxy.wait_ready(Duration::from_secs(20));
        proxy.wait_probes_gone(Duration::from_secs(10));
        proxy
    }

    /// Starts orthrus without waiting for the cluster.
    pub fn spawn(seeds: &[SocketAddr], extra: &[&str], env: &[(&str, &str)]) -> Proxy {
        Proxy::spawn_under(&[], seeds, extra, env)
    }

    /// [`Proxy::spawn`] through `wrapper`, a command that execs its
    /// arguments (such as `prlimit --nofile=200:200 --`), if one is given.
    pub fn spawn_under(
        wrapper: &[&str],
        seeds: &[SocketAddr],
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Proxy {
        let port = free_port().expect("free port");
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let log =
            std::env::temp_dir().join(format!("orthrus-test-{}-{port}.log", std::process::id()));
        let seeds: Vec<String> = seeds.iter().map(ToString::to_string).collect();
        let orthrus = env!("CARGO_BIN_EXE_orthrus");
        let mut cmd = match wrapper.split_first() {
            Some((first, rest)) => {
                let mut cmd = Command::new(first);
                cmd.args(rest).arg(orthrus);
                cmd
            }
            None => Command::new(orthrus),
        };
        cmd.arg("--listen")
            .arg(addr.to_string())
            .arg("--seeds")
            .arg(seeds.join(","))
            .args(extra)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"));
        for (k, v) in env {
            if v.is_empty() {
                cmd.env_remove(k);
            } else {
                cmd.env(k, v);
            }
        }
        let child = cmd.spawn().expect("start orthrus");
        let proxy = Proxy { child, addr, log };
        proxy.wait_listening(Duration::from_secs(10));
        proxy
    }

    pub fn wait_listening(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while TcpStream::connect(self.addr).is_err() {
            assert!(
                Instant::now() < deadline,
                "orthrus did not listen:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until a keyed command gets a real answer, not CLUSTERDOWN.
    pub fn wait_ready(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(reply) = self.raw_command(&["GET", "orthrus-test:ready"]) {
                if !reply.starts_with(b"-") {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "orthrus never became ready:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until the connections that probed for readiness are closed on
    /// orthrus's side too (only the asking one is counted), so that a test
    /// counting clients sees its own. Returns at once where INFO does not
    /// say (a proxy that refuses it).
    pub fn wait_probes_gone(&self, timeout: Duration) {
        orthrus_devcluster::wait_until(timeout, "readiness probes closed", || {
            let Ok(reply) = self.raw_command(&["INFO", "clients"]) else {
                return Ok(());
            };
            let text = String::from_utf8_lossy(&reply);
            if !text.contains("connected_clients:") || text.contains("connected_clients:1\r\n") {
                Ok(())
            } else {
                Err(text.into_owned())
            }
        })
        .unwrap_or_else(|e| panic!("{e}\n{}", self.log_text()));
    }

    /// Logs `s` in with `AUTH auth...`, then sends `probe` until it is
    /// answered `+OK` (orthrus has found the cluster), for at most 20 s.
    pub fn log_in(&self, s: &mut TcpStream, auth: &[&str], probe: &[&str]) {
        let mut args = vec!["AUTH"];
        args.extend_from_slice(auth);
        assert_eq!(send(s, &args), "+OK\r\n");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let reply = send(s, probe);
            if reply == "+OK\r\n" {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "never served the cluster: {reply}\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn url(&self) -> String {
        format!("redis://{}/", self.addr)
    }

    pub fn client(&self) -> redis::Connection {
        let client = redis::Client::open(self.url()).expect("client");
        let con = client.get_connection().expect("connect to orthrus");
        con.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        con
    }

    pub fn stream(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr).expect("connect to orthrus");
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        s
    }

    /// Sends one command over a fresh connection; returns the raw reply.
    pub fn raw_command(&self, args: &[&str]) -> std::io::Result<Vec<u8>> {
        let mut s = TcpStream::connect(self.addr)?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        s.write_all(&encode(args))?;
        read_reply(&mut s)
    }

    /// A numeric field of `INFO all`.
    pub fn info_field(&self, field: &str) -> i64 {
        let mut con = self.client();
        let info: String = redis::cmd("INFO").arg("all").query(&mut con).expect("INFO");
        orthrus_devcluster::info_field(&info, field)
            .unwrap_or_else(|| panic!("no {field} in INFO:\n{info}"))
            .parse()
            .expect("numeric INFO field")
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends SIGTERM (or another signal) to the process.
    pub fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("kill");
        assert!(status.success());
    }

    /// Waits for the process to exit, at most `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let log = self.log_text();
            let tail: Vec<&str> = log.lines().rev().take(60).collect();
            eprintln!("--- orthrus log (last lines) ---");
            for line in tail.iter().rev() {
                eprintln!("{line}");
            }
        }
        let _ = std::fs::remove_file(&self.log);
    }
}

/// Whether the tests run on `engine`; when not, says so (`SKIPPED:
/// why`) for the caller to return.
pub fn runs_on(engine: orthrus_devcluster::Engine, why: &str) -> bool {
    let on = orthrus_devcluster::server_kind().engine == engine;
    if !on {
        eprintln!("SKIPPED: {why}");
    }
    on
}

/// A cluster of `masters` masters and `replicas` replicas each.
pub fn cluster(masters: usize, replicas: usize) -> Cluster {
    Cluster::start(ClusterSpec::new(masters, replicas)).expect("start cluster")
}

/// Sends one command and reads its reply, as text.
pub fn send(s: &mut (impl Read + Write), args: &[&str]) -> String {
    s.write_all(&encode(args)).expect("send");
    reply_text(s)
}

/// Reads one reply, as text.
pub fn reply_text(s: &mut impl Read) -> String {
    String::from_utf8_lossy(&read_reply(s).expect("reply")).into_owned()
}

/// RESP encoding of a command.
pub fn encode(args: &[&str]) -> Vec<u8> {
    encode_bytes(&args.iter().map(|a| a.as_bytes()).collect::<Vec<_>>())
}

pub fn encode_bytes(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Reads exactly one reply frame (RESP2 or RESP3) from the stream.
pub fn read_reply(s: &mut impl Read) -> std::io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    loop {
        if let Some(n) = frame_len(&buf, 0) {
            assert_eq!(
                n,
                buf.len(),
                "read past one reply: {:?}",
                String::from_utf8_lossy(&buf)
            );
            return Ok(buf);
        }
        // A bulk string's body is read whole once its header is in.
        if let Some(rest) = bulk_rest(&buf) {
            let start = buf.len();
            buf.resize(start + rest, 0);
            s.read_exact(&mut buf[start..])?;
            continue;
        }
        let mut byte = [0u8; 1];
        // One byte at a time so no following reply is consumed.
        if s.read(&mut byte)? == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "closed",
            ));
        }
        buf.push(byte[0]);
    }
}

/// What is left of a top-level bulk string whose header line `buf` has
/// just completed: its body and final CRLF.
fn bulk_rest(buf: &[u8]) -> Option<usize> {
    if !matches!(buf.first(), Some(b'$' | b'!' | b'=')) || !buf.ends_with(b"\r\n") {
        return None;
    }
    let header = &buf[1..buf.len() - 2];
    if header.contains(&b'\r') {
        return None; // the header ended earlier: the body is being read
    }
    let n: usize = std::str::from_utf8(header).ok()?.parse().ok()?;
    Some(n + 2)
}

/// Length of the complete frame starting at `at`, if complete.
pub fn frame_len(buf: &[u8], at: usize) -> Option<usize> {
    let line_end = buf.get(at..)?.windows(2).position(|w| w == b"\r\n")? + at;
    let kind = *buf.get(at)?;
    let header = std::str::from_utf8(&buf[at + 1..line_end]).ok()?;
    let after = line_end + 2;
    match kind {
        b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => Some(after - at),
        b'$' | b'!' | b'=' => {
            let n: i64 = header.parse().ok()?;
            if n < 0 {
                return Some(after - at);
            }
            let end = after + n as usize + 2;
            (buf.len() >= end).then_some(end - at)
        }
        b'*' | b'~' | b'>' | b'%' | b'|' => {
            let n: i64 = header.parse().ok()?;
            let items = if kind == b'%' || kind == b'|' {
                n * 2
            } else {
                n.max(0)
            };
            let mut pos = after;
            for _ in 0..items {
                pos += frame_len(buf, pos)?;
            }
            if kind == b'|' {
                pos += frame_len(buf, pos)?;
            }
            Some(pos - at)
        }
        _ => panic!("bad reply byte {kind}"),
    }
}

/// The clients of node `i` with tracking on (flag `t` in its CLIENT LIST).
pub fn tracking_conns(cluster: &Cluster, i: usize) -> usize {
    let mut node = cluster.nodes()[i].connect().expect("node");
    let list = match node.cmd(&["CLIENT", "LIST"]).expect("CLIENT LIST") {
        Value::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
        other => panic!("CLIENT LIST: {other:?}"),
    };
    list.lines()
        .filter(|l| {
            l.split(' ')
                .any(|f| f.strip_prefix("flags=").is_some_and(|f| f.contains('t')))
        })
        .count()
}

/// The slot of `key` and a master other than its owner now: where a test
/// moves the slot behind orthrus's back, so that orthrus meets MOVED.
pub fn slot_and_other_master(cluster: &Cluster, key: &[u8]) -> (u16, usize) {
    let slot = orthrus_cluster::Slot::for_key(key).get();
    let from = cluster.master_of_slot(slot).expect("owner");
    let masters = cluster.masters().expect("masters");
    let to = *masters
        .iter()
        .find(|&&m| m != from)
        .expect("another master");
    (slot, to)
}

/// Which node index of `cluster` owns `key` now.
pub fn owner_of(cluster: &Cluster, key: &[u8]) -> usize {
    let slot = orthrus_cluster::Slot::for_key(key).get();
    cluster.master_of_slot(slot).expect("owner")
}

/// Runs `cmd` to its end with piped output; panics if it is still running
/// after `timeout` (a start-up check that no longer fails would otherwise
/// leave orthrus serving and the test hanging).
pub fn run_to_exit(mut cmd: std::process::Command, timeout: Duration) -> std::process::Output {
    let mut child = cmd
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start orthrus");
    let finished = orthrus_devcluster::wait_until(timeout, "orthrus to exit", || {
        match child.try_wait().expect("wait for orthrus") {
            Some(_) => Ok(()),
            None => Err("still running".to_owned()),
        }
    });
    if let Err(e) = finished {
        let _ = child.kill();
        let _ = child.wait();
        panic!("{e}");
    }
    child.wait_with_output().expect("orthrus output")
}

/// A `kB` figure of `/proc/PID/status` (`"VmRSS:"`, `"VmHWM:"`, ...).
pub fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in {status}"))
}

/// Resident memory of process `pid`, in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS:")
}
