//! Finding the Redis executables and free loopback ports.

use std::collections::VecDeque;
use std::env;
use std::ffi::OsString;
use std::io;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use crate::DevError;

/// Environment variable naming the `redis-server` executable to use.
pub const REDIS_SERVER_ENV: &str = "REDIS_SERVER";
/// Environment variable naming the `redis-cli` executable to use.
pub const REDIS_CLI_ENV: &str = "REDIS_CLI";

/// The Redis executables that devcluster runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedisBin {
    /// `redis-server`.
    pub server: PathBuf,
    /// `redis-cli`.
    pub cli: PathBuf,
}

// === impl RedisBin ===

impl RedisBin {
    /// Both executables, from `$REDIS_SERVER` / `$REDIS_CLI` when set, else
    /// from `PATH`.
    pub fn locate() -> Result<RedisBin, DevError> {
        Ok(RedisBin {
            server: locate_server()?,
            cli: find_executable("redis-cli", REDIS_CLI_ENV)?,
        })
    }

    /// The server's version, e.g. `"7.0.15"`, from `redis-server --version`.
    pub fn version(&self) -> Result<String, DevError> {
        let out = Command::new(&self.server).arg("--version").output()?;
        let text = String::from_utf8_lossy(&out.stdout);
        // "Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0 ..."
        text.split_whitespace()
            .find_map(|word| word.strip_prefix("v="))
            .map(str::to_owned)
            .ok_or_else(|| DevError::Unexpected {
                cmd: format!("{} --version", self.server.display()),
                detail: text.trim().to_owned(),
            })
    }
}

/// The server the nodes run: Redis, or Valkey (`$REDIS_SERVER` naming a
/// `valkey-server`; `redis-cli` drives both).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    Redis,
    Valkey,
}

/// What the server the nodes run is and can do, looked at once per process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerKind {
    pub engine: Engine,
    /// Built with TLS (a server from a Python wheel may be built without).
    pub tls: bool,
}

/// The kind of the server the nodes run (`$REDIS_SERVER`, else
/// `redis-server` on `PATH`); Redis with TLS when it cannot be run
/// (starting a node then says why).
pub fn server_kind() -> ServerKind {
    static KIND: std::sync::OnceLock<ServerKind> = std::sync::OnceLock::new();
    *KIND.get_or_init(|| {
        let fallback = ServerKind {
            engine: Engine::Redis,
            tls: true,
        };
        let Ok(server) = locate_server() else {
            return fallback;
        };
        let version = Command::new(&server).arg("--version").output();
        let engine = match version {
            Ok(out) if String::from_utf8_lossy(&out.stdout).starts_with("Valkey") => Engine::Valkey,
            _ => Engine::Redis,
        };
        // A server without TLS refuses `--tls-port` before it reads any
        // certificate; one with TLS fails on the missing file instead.
        let probe = Command::new(&server)
            .args(["--port", "0", "--tls-port", "1", "--tls-cert-file"])
            .arg("/nonexistent/orthrus-probe.crt")
            .args(["--tls-key-file", "/nonexistent/orthrus-probe.key"])
            .output();
        let tls = match probe {
            Ok(out) => !String::from_utf8_lossy(&out.stdout).contains("Failed finding TLS support"),
            Err(_) => true,
        };
        ServerKind { engine, tls }
    })
}

/// Only `redis-server`: starting nodes does not need `redis-cli`, so a
/// machine without it can still run them.
pub(crate) fn locate_server() -> Result<PathBuf, DevError> {
    find_executable("redis-server", REDIS_SERVER_ENV)
}

/// A TCP port on 127.0.0.1 that was free a moment ago: bind port 0, read the
/// port the OS chose, close. Another process may take it before the caller
/// binds it, so callers retry on "address in use". Within this process, a
/// port is not handed out twice in a row of `RECENT_PORTS` (256) calls: two
/// calls before either port is bound (a proxy's plain and TLS ports) get
/// two different ports.
pub fn free_port() -> io::Result<u16> {
    static RECENT: Mutex<VecDeque<u16>> = Mutex::new(VecDeque::new());
    let mut recent = RECENT.lock().unwrap_or_else(|e| e.into_inner());
    for _ in 0..64 {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        let port = listener.local_addr()?.port();
        if recent.contains(&port) {
            continue;
        }
        if recent.len() >= RECENT_PORTS {
            recent.pop_front();
        }
        recent.push_back(port);
        return Ok(port);
    }
    Err(io::Error::new(
        io::ErrorKind::AddrInUse,
        "the OS kept choosing ports handed out a moment ago",
    ))
}

/// How many ports [`free_port`] remembers.
const RECENT_PORTS: usize = 256;

fn find_executable(what: &'static str, env_name: &str) -> Result<PathBuf, DevError> {
    if let Some(path) = env::var_os(env_name).filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        // A bare name in the variable is looked up on PATH like the default.
        if path.components().count() > 1 {
            return if is_executable(&path) {
                Ok(path)
            } else {
                Err(DevError::NotInstalled { what })
            };
        }
        return search_path(path.as_os_str()).ok_or(DevError::NotInstalled { what });
    }
    search_path(what.as_ref()).ok_or(DevError::NotInstalled { what })
}

pub(crate) fn search_path(name: &std::ffi::OsStr) -> Option<PathBuf> {
    let path: OsString = env::var_os("PATH")?;
    env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_port_is_bindable() {
        let port = free_port().unwrap();
        assert_ne!(port, 0);
        TcpListener::bind((Ipv4Addr::LOCALHOST, port)).unwrap();
    }

    #[test]
    fn free_ports_asked_in_a_row_differ() {
        let ports: Vec<u16> = (0..100).map(|_| free_port().unwrap()).collect();
        let distinct: std::collections::HashSet<_> = ports.iter().collect();
        assert_eq!(distinct.len(), ports.len());
    }

    #[test]
    fn not_installed_names_the_fix() {
        let err = DevError::NotInstalled {
            what: "redis-server",
        };
        let text = err.to_string();
        assert!(text.starts_with("redis-server not found on PATH (or $REDIS_SERVER)"));
        assert!(text.contains("apt-get install redis-server redis-tools"));
        assert!(text.contains("brew install redis"));
        let cli = DevError::NotInstalled { what: "redis-cli" }.to_string();
        assert!(cli.contains("$REDIS_CLI)"));
    }

    #[test]
    fn missing_directory_entry_is_not_executable() {
        assert!(!is_executable(Path::new("/nonexistent/redis-server")));
        assert!(search_path("orthrus-no-such-binary-xyz".as_ref()).is_none());
    }
}
