//! Helpers shared by the integration tests.

// Each test binary uses a different subset of these.
#![allow(dead_code)]

use std::fs;
use std::thread;
use std::time::{Duration, Instant};

use orthrus_devcluster::Value;

/// Whether `pid` is a live server (redis-server or valkey-server): not
/// gone, not a zombie awaiting its reaper, and still named so (a reused pid
/// does not count).
pub(crate) fn redis_alive(pid: u32) -> bool {
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // "<pid> (<comm>) <state> ...": comm may hold spaces, so split at the
    // last parenthesis.
    let Some((head, tail)) = stat.rsplit_once(')') else {
        return false;
    };
    let server = head.contains("(redis-server") || head.contains("(valkey-server");
    server && !tail.trim_start().starts_with(['Z', 'X'])
}

/// Waits (bounded) until `pid` is no longer a server.
pub(crate) fn wait_gone(pid: u32, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while redis_alive(pid) {
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(20));
    }
    true
}

/// Polls `check` every 50 ms until it is true or `timeout` passes.
pub(crate) fn eventually(timeout: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if check() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(50));
    }
}

/// The text of a bulk or simple string reply.
pub(crate) fn text(value: &Value) -> String {
    match value {
        Value::Bulk(b) | Value::Simple(b) | Value::Error(b) => {
            String::from_utf8_lossy(b).into_owned()
        }
        other => panic!("not a string reply: {other:?}"),
    }
}

/// The value of `field:` in an INFO reply.
pub(crate) fn info_field(info: &Value, field: &str) -> Option<String> {
    orthrus_devcluster::info_field(&text(info), field).map(str::to_owned)
}
