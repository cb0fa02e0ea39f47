//! ACL LOG: failed logins and requests refused by a user's rules, newest
//! first, at most 128 (Redis's `acllog-max-len`). Written only when
//! something is refused, under a lock no request path takes otherwise.
//! The same refusal (reason, object, user) within 60 s adds to its entry's
//! count, as in Redis.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use orthrus_resp::{Protocol, encode};

/// Entries kept.
const MAX_LEN: usize = 128;
/// Repeats of one refusal within this many milliseconds share an entry.
const MERGE_MS: u64 = 60_000;

/// What was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    Auth,
    Command,
    Key,
    Channel,
}

/// One entry.
#[derive(Clone, Debug)]
struct Entry {
    id: u64,
    count: u64,
    reason: Reason,
    /// The command, key or channel refused (`AUTH` for a login).
    object: String,
    username: String,
    client_info: String,
    created_ms: u64,
    updated_ms: u64,
}

/// The log, shared by every worker.
#[derive(Default)]
pub struct AclLog {
    entries: Mutex<(VecDeque<Entry>, u64)>,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

// === impl AclLog ===

impl AclLog {
    /// Records a refusal.
    pub fn record(&self, reason: Reason, object: &str, username: &str, client_info: String) {
        let now = now_ms();
        let Ok(mut guard) = self.entries.lock() else {
            return;
        };
        let (entries, next_id) = &mut *guard;
        if let Some(e) = entries.iter_mut().find(|e| {
            e.reason == reason
                && e.object == object
                && e.username == username
                && now.saturating_sub(e.updated_ms) < MERGE_MS
        }) {
            e.count += 1;
            e.updated_ms = now;
            e.client_info = client_info;
            return;
        }
        entries.push_front(Entry {
            id: *next_id,
            count: 1,
            reason,
            object: object.to_owned(),
            username: username.to_owned(),
            client_info,
            created_ms: now,
            updated_ms: now,
        });
        *next_id += 1;
        entries.truncate(MAX_LEN);
    }

    /// `ACL LOG [count | RESET]`.
    pub fn command(&self, arg: Option<&[u8]>, proto: Protocol) -> Bytes {
        let mut out = BytesMut::new();
        let Ok(mut guard) = self.entries.lock() else {
            encode::error(&mut out, b"ERR ACL LOG unavailable");
            return out.freeze();
        };
        let count = match arg {
            None => 10,
            Some(a) if a.eq_ignore_ascii_case(b"reset") => {
                guard.0.clear();
                encode::simple(&mut out, b"OK");
                return out.freeze();
            }
            Some(a) => match std::str::from_utf8(a)
                .ok()
                .and_then(|s| s.parse::<usize>().ok())
            {
                Some(n) => n,
                None => {
                    encode::error(&mut out, b"ERR value is out of range, must be positive");
                    return out.freeze();
                }
            },
        };
        let now = now_ms();
        let shown: Vec<&Entry> = guard.0.iter().take(count).collect();
        encode::array_header(&mut out, shown.len());
        for e in shown {
            encode::map_header(&mut out, 10, proto);
            let field = |out: &mut BytesMut, k: &str, v: &str| {
                encode::bulk(out, k.as_bytes());
                encode::bulk(out, v.as_bytes());
            };
            encode::bulk(&mut out, b"count");
            encode::integer(&mut out, i64::try_from(e.count).unwrap_or(i64::MAX));
            field(&mut out, "reason", e.reason.name());
            field(&mut out, "context", "toplevel");
            field(&mut out, "object", &e.object);
            field(&mut out, "username", &e.username);
            let age = now.saturating_sub(e.created_ms) as f64 / 1000.0;
            field(&mut out, "age-seconds", &format!("{age:.3}"));
            field(&mut out, "client-info", &e.client_info);
            for (k, v) in [
                ("entry-id", e.id),
                ("timestamp-created", e.created_ms),
                ("timestamp-last-updated", e.updated_ms),
            ] {
                encode::bulk(&mut out, k.as_bytes());
                encode::integer(&mut out, i64::try_from(v).unwrap_or(i64::MAX));
            }
        }
        out.freeze()
    }
}

// === impl Reason ===

impl Reason {
    fn name(self) -> &'static str {
        match self {
            Reason::Auth => "auth",
            Reason::Command => "command",
            Reason::Key => "key",
            Reason::Channel => "channel",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeats_merge_and_reset_clears() {
        let log = AclLog::default();
        log.record(Reason::Auth, "AUTH", "alice", "id=1".to_owned());
        log.record(Reason::Auth, "AUTH", "alice", "id=2".to_owned());
        log.record(Reason::Command, "flushall", "alice", "id=2".to_owned());
        let reply = log.command(None, Protocol::Resp2);
        let text = String::from_utf8_lossy(&reply);
        assert!(
            text.starts_with("*2\r\n*20\r\n$5\r\ncount\r\n:1\r\n$6\r\nreason\r\n$7\r\ncommand"),
            "{text}"
        );
        assert!(
            text.contains("$5\r\ncount\r\n:2\r\n$6\r\nreason\r\n$4\r\nauth"),
            "{text}"
        );
        assert_eq!(
            &log.command(Some(b"reset"), Protocol::Resp2)[..],
            b"+OK\r\n"
        );
        assert_eq!(&log.command(None, Protocol::Resp2)[..], b"*0\r\n");
    }
}
