//! orthrus's SLOWLOG: the requests whose reply took longer than
//! `slowlog.log_slower_than_us`, newest first, at most `slowlog.max_len`.
//!
//! The time is the whole time through orthrus (from reading the request to
//! its reply being ready), not Redis's execution time; each entry also
//! says how much of it was the longest node round trip and how much was
//! orthrus's own. Only slow requests take the lock; the check is one
//! relaxed load.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use orthrus_resp::{Request, encode};

use super::clients::ClientAddr;
use super::latency::micros;

/// Arguments kept per entry, and bytes per argument (Redis's limits).
const MAX_ARGS: usize = 32;
const MAX_ARG_BYTES: usize = 128;

/// One logged request.
#[derive(Clone, Debug)]
pub struct Entry {
    pub id: u64,
    /// Unix time the request finished, in seconds.
    pub time: u64,
    pub total_us: u64,
    /// `None` when the backend time is not measured (pub/sub).
    pub backend_us: Option<u64>,
    pub args: Vec<Bytes>,
    pub client_addr: String,
    pub client_name: Bytes,
}

/// The log, shared by every worker.
pub struct SlowLog {
    /// Microseconds; negative turns the log off, 0 logs everything.
    slower_than_us: AtomicI64,
    max_len: AtomicUsize,
    next_id: AtomicU64,
    entries: Mutex<VecDeque<Entry>>,
}

/// What is known of a finished request.
pub struct Finished<'a> {
    pub frame: &'a Bytes,
    /// Microseconds from its read to its reply, as every figure counts it.
    pub total_us: u64,
    pub backend: Option<Duration>,
    pub peer: &'a ClientAddr,
    pub name: Option<Bytes>,
}

impl SlowLog {
    pub fn new(slower_than_us: i64, max_len: usize) -> SlowLog {
        SlowLog {
            slower_than_us: AtomicI64::new(slower_than_us),
            max_len: AtomicUsize::new(max_len),
            next_id: AtomicU64::new(0),
            entries: Mutex::new(VecDeque::new()),
        }
    }

    /// Applies reloaded settings.
    pub fn configure(&self, slower_than_us: i64, max_len: usize) {
        self.slower_than_us.store(slower_than_us, Ordering::Relaxed);
        self.max_len.store(max_len, Ordering::Relaxed);
        if let Ok(mut entries) = self.entries.lock() {
            entries.truncate(max_len);
        }
    }

    /// CONFIG SET slowlog-log-slower-than / slowlog-max-len through
    /// orthrus (with `admin.passthrough`): the nodes' and orthrus's own.
    /// Either may be left as it is.
    pub fn set(&self, slower_than_us: Option<i64>, max_len: Option<usize>) {
        let slower = slower_than_us.unwrap_or_else(|| self.slower_than_us.load(Ordering::Relaxed));
        let max_len = max_len.unwrap_or_else(|| self.max_len.load(Ordering::Relaxed));
        self.configure(slower, max_len);
    }

    /// Whether a request that took `total_us` microseconds belongs in the
    /// log (every request asks).
    pub fn is_slow(&self, total_us: u64) -> bool {
        let limit = self.slower_than_us.load(Ordering::Relaxed);
        limit >= 0 && total_us >= limit.unsigned_abs()
    }

    /// Logs a request (the caller checked [`SlowLog::is_slow`]). Commands
    /// that may carry passwords (AUTH, HELLO, MIGRATE, CONFIG, ACL) are
    /// never logged.
    pub fn push(&self, done: Finished<'_>) {
        let args = arguments(done.frame);
        let secret = args.first().is_some_and(|name| {
            [&b"auth"[..], b"hello", b"migrate", b"config", b"acl"]
                .iter()
                .any(|n| name.eq_ignore_ascii_case(n))
        });
        let max_len = self.max_len.load(Ordering::Relaxed);
        if secret || max_len == 0 {
            return;
        }
        let entry = Entry {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            time: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            total_us: done.total_us,
            backend_us: done.backend.map(micros),
            args,
            client_addr: done.peer.to_string(),
            client_name: done.name.unwrap_or_default(),
        };
        if let Ok(mut entries) = self.entries.lock() {
            entries.push_front(entry);
            entries.truncate(max_len);
        }
    }

    pub fn len(&self) -> usize {
        self.entries.lock().map_or(0, |e| e.len())
    }

    pub fn reset(&self) {
        if let Ok(mut entries) = self.entries.lock() {
            entries.clear();
        }
    }

    /// The newest `count` entries (all of them for `None`).
    pub fn newest(&self, count: Option<usize>) -> Vec<Entry> {
        let Ok(entries) = self.entries.lock() else {
            return Vec::new();
        };
        let n = count.unwrap_or(entries.len());
        entries.iter().take(n).cloned().collect()
    }
}

/// `SLOWLOG GET [count] | LEN | RESET | HELP`.
pub fn command(log: &SlowLog, req: &Request) -> Bytes {
    let sub = req.arg(1).unwrap_or_default().to_ascii_lowercase();
    let argc = req.arg_count();
    let mut out = BytesMut::new();
    match (sub.as_slice(), argc) {
        (b"get", 2 | 3) => {
            let count = match req.arg(2) {
                None => Some(10),
                Some(n) => match std::str::from_utf8(n)
                    .ok()
                    .and_then(|n| n.parse::<i64>().ok())
                {
                    Some(-1) => None,
                    Some(n) if n >= 0 => Some(usize::try_from(n).unwrap_or(usize::MAX)),
                    _ => {
                        encode::error(&mut out, b"ERR count should be greater than or equal to -1");
                        return out.freeze();
                    }
                },
            };
            let entries = log.newest(count);
            encode::array_header(&mut out, entries.len());
            for entry in &entries {
                entry.encode(&mut out);
            }
        }
        (b"len", 2) => encode::integer(&mut out, i64::try_from(log.len()).unwrap_or(i64::MAX)),
        (b"reset", 2) => {
            log.reset();
            encode::simple(&mut out, b"OK");
        }
        (b"help", 2) => {
            encode::array_header(&mut out, HELP.len());
            for line in HELP {
                encode::simple(&mut out, line.as_bytes());
            }
        }
        (b"get", _) => {
            let msg = format!(
                "ERR unknown subcommand or wrong number of arguments for '{}'. Try SLOWLOG HELP.",
                String::from_utf8_lossy(req.arg(1).unwrap_or_default())
            );
            encode::error(&mut out, msg.as_bytes());
        }
        (b"len" | b"reset" | b"help", _) => {
            let msg = format!(
                "ERR wrong number of arguments for 'slowlog|{}' command",
                String::from_utf8_lossy(&sub)
            );
            encode::error(&mut out, msg.as_bytes());
        }
        _ => {
            let shown: String = String::from_utf8_lossy(req.arg(1).unwrap_or_default())
                .chars()
                .take(128)
                .collect();
            let msg = format!("ERR unknown subcommand '{shown}'. Try SLOWLOG HELP.");
            encode::error(&mut out, msg.as_bytes());
        }
    }
    out.freeze()
}

const HELP: &[&str] = &[
    "SLOWLOG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "GET [<count>]",
    "    Return top <count> entries from orthrus's slowlog (default: 10, -1 mean all).",
    "    Entries are made of:",
    "    id, timestamp, time in microseconds through orthrus, arguments array,",
    "    client IP and port, client name, backend time in microseconds, orthrus's",
    "    own time in microseconds (-1 when not measured)",
    "LEN",
    "    Return the length of the slowlog.",
    "RESET",
    "    Reset the slowlog.",
    "HELP",
    "    Prints this help.",
];

impl Entry {
    /// Redis's six fields (id, time, microseconds, arguments, client
    /// address, client name), then orthrus's two: the backend and the
    /// proxy part of the time, in microseconds (-1 when not measured).
    pub fn encode(&self, out: &mut BytesMut) {
        encode::array_header(out, 8);
        encode::integer(out, i64::try_from(self.id).unwrap_or(i64::MAX));
        encode::integer(out, i64::try_from(self.time).unwrap_or(i64::MAX));
        encode::integer(out, i64::try_from(self.total_us).unwrap_or(i64::MAX));
        encode::array_header(out, self.args.len());
        for arg in &self.args {
            encode::bulk(out, arg);
        }
        encode::bulk(out, self.client_addr.as_bytes());
        encode::bulk(out, &self.client_name);
        match self.backend_us {
            Some(backend) => {
                encode::integer(out, i64::try_from(backend).unwrap_or(i64::MAX));
                let proxy = self.total_us.saturating_sub(backend);
                encode::integer(out, i64::try_from(proxy).unwrap_or(i64::MAX));
            }
            None => {
                encode::integer(out, -1);
                encode::integer(out, -1);
            }
        }
    }
}

/// The arguments of a request frame (a well-formed multibulk: orthrus
/// re-encodes inline requests), shortened as Redis shortens them: at most
/// 32, the last saying how many more there were; each at most 128 bytes,
/// followed by how many more there were.
fn arguments(frame: &[u8]) -> Vec<Bytes> {
    let Some((header, mut rest)) = split_line(frame) else {
        return Vec::new();
    };
    let Some(count) = header.strip_prefix(b"*").and_then(parse_len) else {
        return Vec::new();
    };
    let mut args = Vec::with_capacity(count.min(MAX_ARGS));
    for i in 0..count {
        if i + 1 == MAX_ARGS && count > MAX_ARGS {
            args.push(Bytes::from(format!(
                "... ({} more arguments)",
                count - MAX_ARGS + 1
            )));
            break;
        }
        let Some((header, body)) = split_line(rest) else {
            break;
        };
        let Some(len) = header.strip_prefix(b"$").and_then(parse_len) else {
            break;
        };
        let Some(value) = body.get(..len) else {
            break;
        };
        args.push(if len > MAX_ARG_BYTES {
            let mut v = value.get(..MAX_ARG_BYTES).unwrap_or_default().to_vec();
            v.extend_from_slice(format!("... ({} more bytes)", len - MAX_ARG_BYTES).as_bytes());
            Bytes::from(v)
        } else {
            Bytes::copy_from_slice(value)
        });
        rest = body.get(len + 2..).unwrap_or_default();
    }
    args
}

/// The first line of `bytes` (without its CRLF) and what follows it.
fn split_line(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let end = bytes.windows(2).position(|w| w == b"\r\n")?;
    Some((bytes.get(..end)?, bytes.get(end + 2..)?))
}

fn parse_len(digits: &[u8]) -> Option<usize> {
    std::str::from_utf8(digits).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(args: &[&[u8]]) -> Bytes {
        Request::from_args(args).into_frame()
    }

    #[test]
    fn arguments_are_shortened_like_redis() {
        let long = vec![b'x'; 200];
        let args = arguments(&frame(&[b"SET", b"k", &long]));
        assert_eq!(args.len(), 3);
        assert_eq!(&args[0][..], b"SET");
        assert_eq!(args[2].len(), 128 + "... (72 more bytes)".len());
        assert!(args[2].ends_with(b"... (72 more bytes)"));

        let many: Vec<Vec<u8>> = (0..40).map(|i| format!("a{i}").into_bytes()).collect();
        let refs: Vec<&[u8]> = many.iter().map(Vec::as_slice).collect();
        let args = arguments(&frame(&refs));
        assert_eq!(args.len(), 32);
        assert_eq!(&args[30][..], b"a30");
        assert_eq!(&args[31][..], b"... (9 more arguments)");
    }

    #[test]
    fn keeps_the_newest_and_never_passwords() {
        let log = SlowLog::new(0, 2);
        let peer = ClientAddr::Tcp("127.0.0.1:5000".parse().unwrap());
        for name in [&b"GET"[..], b"AUTH", b"SET", b"DEL"] {
            let f = frame(&[name, b"secret"]);
            assert!(log.is_slow(0));
            log.push(Finished {
                frame: &f,
                total_us: 5,
                backend: Some(Duration::from_micros(3)),
                peer: &peer,
                name: None,
            });
        }
        let names: Vec<Bytes> = log
            .newest(None)
            .into_iter()
            .map(|e| e.args[0].clone())
            .collect();
        assert_eq!(names, vec![Bytes::from("DEL"), Bytes::from("SET")]);
        log.configure(-1, 2);
        assert!(!log.is_slow(100_000_000));
        log.configure(1000, 1);
        assert_eq!(log.len(), 1);
        assert!(!log.is_slow(999));
        assert!(log.is_slow(1000));
        log.reset();
        assert_eq!(log.len(), 0);
    }
}
