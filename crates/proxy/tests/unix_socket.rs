//! `--listen unix:/path`: a Unix socket for the sidecar case, as the real
//! binary serves it, in front of a real cluster.

mod common;

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// orthrus on a Unix socket; killed on drop.
struct UnixProxy {
    child: Child,
    log: PathBuf,
}

impl UnixProxy {
    fn spawn(path: &Path, seeds: &str, env: &[(&str, &str)]) -> UnixProxy {
        let log = path.with_extension("log");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_orthrus"));
        cmd.arg("--listen")
            .arg(format!("unix:{}", path.display()))
            .arg("--seeds")
            .arg(seeds)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"));
        for (k, v) in env {
            cmd.env(k, v);
        }
        UnixProxy {
            child: cmd.spawn().expect("start orthrus"),
            log,
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for UnixProxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn call(path: &Path, request: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut s = UnixStream::connect(path)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(request)?;
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while common::frame_len(&out, 0).is_none() {
        let n = s.read(&mut buf)?;
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
    Ok(out)
}

/// Waits until a keyed command over the socket gets a real answer.
fn wait_ready(proxy: &UnixProxy, path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(reply) = call(path, &common::encode(&["GET", "unix:ready"])) {
            if !reply.is_empty() && !reply.starts_with(b"-") {
                return;
            }
        }
        assert!(
            Instant::now() < deadline,
            "orthrus never served on {}:\n{}",
            path.display(),
            proxy.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn serves_on_a_unix_socket_with_its_permissions_and_removes_it_on_shutdown() {
    let cluster = common::cluster(3, 0);
    let seeds = cluster
        .seeds()
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("orthrus.sock");
    let mut proxy = UnixProxy::spawn(&path, &seeds, &[("ORTHRUS_UNIX_SOCKET_PERM", "770")]);
    wait_ready(&proxy, &path);

    let mode = std::fs::metadata(&path)
        .expect("socket file")
        .permissions()
        .mode();
    assert_eq!(
        mode & 0o777,
        0o770,
        "unix_socket_perm 770 gave {:o}",
        mode & 0o777
    );

    // Keys on every master, through the socket.
    for i in 0..30 {
        let key = format!("unix:{i}");
        let set = call(&path, &common::encode(&["SET", &key, "v"])).expect("SET");
        assert_eq!(set, b"+OK\r\n");
        let get = call(&path, &common::encode(&["GET", &key])).expect("GET");
        assert_eq!(get, b"$1\r\nv\r\n");
    }
    // redis-cli -s, as a user would.
    let out = Command::new("redis-cli")
        .arg("-s")
        .arg(&path)
        .args(["set", "unix:cli", "ok"])
        .output()
        .expect("redis-cli");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "OK");
    // CLIENT LIST shows the socket as Redis does (path:0).
    let list = call(&path, &common::encode(&["CLIENT", "LIST"])).expect("CLIENT LIST");
    let shown = format!("addr={}:0", path.display());
    assert!(
        String::from_utf8_lossy(&list).contains(&shown),
        "{}",
        String::from_utf8_lossy(&list)
    );

    // A second orthrus on the same path is refused while the first lives.
    let mut second = UnixProxy::spawn(&path, &seeds, &[]);
    let status = second
        .wait_exit(Duration::from_secs(10))
        .expect("second exits");
    assert!(!status.success());
    assert!(
        second.log_text().contains("in use by a live process"),
        "log: {}",
        second.log_text()
    );
    // ... and the first still serves.
    assert_eq!(
        call(&path, &common::encode(&["GET", "unix:cli"])).expect("GET"),
        b"$2\r\nok\r\n"
    );

    let kill = Command::new("kill")
        .arg("-TERM")
        .arg(proxy.child.id().to_string())
        .status()
        .expect("kill");
    assert!(kill.success());
    let status = proxy
        .wait_exit(Duration::from_secs(15))
        .expect("exits on SIGTERM");
    assert!(status.success(), "{}", proxy.log_text());
    assert!(!path.exists(), "the socket file is left behind");
}

#[test]
fn a_stale_socket_file_is_replaced() {
    let cluster = common::cluster(1, 0);
    let seeds = cluster
        .seeds()
        .first()
        .map(ToString::to_string)
        .expect("a seed");
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("stale.sock");
    // A socket file whose process is gone.
    drop(std::os::unix::net::UnixListener::bind(&path).expect("bind"));
    assert!(path.exists());
    let proxy = UnixProxy::spawn(&path, &seeds, &[]);
    wait_ready(&proxy, &path);
}
