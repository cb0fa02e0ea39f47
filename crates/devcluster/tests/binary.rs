//! The `orthrus-devcluster` binary: `up` until SIGTERM, leaving nothing.

mod support;

use std::fs;
use std::net::SocketAddr;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use orthrus_devcluster::{Conn, RedisBin};
use support::{eventually, info_field, wait_gone};

/// The binary under test; Drop stops it with SIGTERM (so that it stops its
/// nodes) and SIGKILLs it only if that does not work.
struct Running(Option<Child>);

impl Running {
    fn pid(&self) -> u32 {
        self.0.as_ref().map(Child::id).unwrap()
    }

    fn exited(&mut self) -> bool {
        self.0
            .as_mut()
            .is_some_and(|c| c.try_wait().unwrap().is_some())
    }

    fn terminate(&mut self, timeout: Duration) -> Option<Output> {
        let child = self.0.take()?;
        sigterm(child.id());
        let mut child = child;
        if !eventually(timeout, || child.try_wait().unwrap().is_some()) {
            let _ = child.kill();
        }
        child.wait_with_output().ok()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.terminate(Duration::from_secs(10));
    }
}

fn sigterm(pid: u32) {
    let status = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn up_serves_until_sigterm_and_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let seeds_file = dir.path().join("seeds");
    let child = Command::new(env!("CARGO_BIN_EXE_orthrus-devcluster"))
        .args(["up", "--masters", "3", "--replicas", "0", "--seeds-file"])
        .arg(&seeds_file)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut running = Running(Some(child));

    let ready = eventually(Duration::from_secs(60), || {
        seeds_file.exists() || running.exited()
    });
    assert!(ready && seeds_file.exists(), "no seeds file");
    let seeds: Vec<SocketAddr> = fs::read_to_string(&seeds_file)
        .unwrap()
        .trim()
        .split(',')
        .map(|s| s.parse().unwrap())
        .collect();
    assert_eq!(seeds.len(), 3);

    let pids: Vec<u32> = seeds
        .iter()
        .map(|&addr| {
            let info = Conn::connect(addr)
                .unwrap()
                .cmd_ok(&["INFO", "server"])
                .unwrap();
            info_field(&info, "process_id").unwrap().parse().unwrap()
        })
        .collect();

    let cli = RedisBin::locate().unwrap().cli;
    let port = seeds[0].port().to_string();
    for (args, expected) in [
        (&["set", "foo", "bar"][..], "OK"),
        (&["get", "foo"][..], "bar"),
    ] {
        let out = Command::new(&cli)
            .args(["-h", "127.0.0.1", "-c", "-p", &port])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), expected);
    }

    assert!(!running.exited());
    let pid = running.pid();
    let out = running.terminate(Duration::from_secs(20)).unwrap();
    assert!(
        out.status.success(),
        "exit {:?}; stderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
    for pid in pids {
        assert!(
            wait_gone(pid, Duration::from_secs(5)),
            "redis-server {pid} left running"
        );
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stdout.lines().filter(|l| l.starts_with("master ")).count(),
        3,
        "{stdout}"
    );
    let seeds_line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("seeds: "))
        .unwrap();
    assert_eq!(seeds_line.split(',').count(), 3);
    assert!(!seeds_file.exists(), "the seeds file outlived the cluster");
}

/// Even SIGKILL, which runs no destructor, leaves no server behind: the
/// kernel kills the nodes with their parent.
#[test]
fn a_killed_devcluster_takes_its_servers_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let addr_file = dir.path().join("addr");
    let child = Command::new(env!("CARGO_BIN_EXE_orthrus-devcluster"))
        .args(["single", "--addr-file"])
        .arg(&addr_file)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut running = Running(Some(child));
    let ready = eventually(Duration::from_secs(20), || {
        addr_file.exists() || running.exited()
    });
    assert!(ready && addr_file.exists(), "no address file");
    let addr: SocketAddr = fs::read_to_string(&addr_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let info = Conn::connect(addr)
        .unwrap()
        .cmd_ok(&["INFO", "server"])
        .unwrap();
    let server_pid: u32 = info_field(&info, "process_id").unwrap().parse().unwrap();
    assert!(support::redis_alive(server_pid));

    let mut child = running.0.take().unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        wait_gone(server_pid, Duration::from_secs(5)),
        "redis-server {server_pid} outlived its killed parent"
    );
}
