//! The Lua script bodies orthrus has seen (EVAL, EVAL_RO, SCRIPT LOAD), by
//! SHA1, bounded: `cmd::script` loads one on a master that answers an
//! EVALSHA with `NOSCRIPT`, and answers SCRIPT EXISTS with them. Also the
//! functions that FUNCTION LOAD declared `no-writes`, so that CLIENT PAUSE
//! WRITE lets their FCALLs through as Redis does.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use orthrus_resp::Request;

use crate::route::table::CommandTable;

/// Total bytes of script bodies kept; the oldest go first beyond it.
pub const MAX_SCRIPT_BYTES: usize = 16 * 1024 * 1024;
/// Most script bodies kept.
pub const MAX_SCRIPTS: usize = 10_000;
/// Most `no-writes` function names kept.
const MAX_READ_ONLY_FUNCTIONS: usize = 10_000;

/// Redis's default `busy-reply-threshold` (`lua-time-limit`), in ms.
const DEFAULT_BUSY_MS: u64 = 5000;

/// The script bodies orthrus has seen, by lower-case hex SHA1, and the
/// scripts running now.
pub struct Scripts {
    inner: Mutex<Store>,
    /// Scripts and functions sent and not answered yet: when each was
    /// sent, and whether it is a function.
    running: Arc<Mutex<HashMap<u64, (Instant, bool)>>>,
    next: AtomicU64,
    /// The nodes' `busy-reply-threshold`, as last set through orthrus.
    busy_ms: AtomicU64,
    /// Functions loaded through orthrus with `flags={'no-writes'}`.
    read_only_functions: Mutex<HashSet<Box<[u8]>>>,
}

/// A script in flight; dropping it (the reply came, or the client left)
/// takes it off the list.
pub struct Running {
    running: Arc<Mutex<HashMap<u64, (Instant, bool)>>>,
    id: u64,
}

#[derive(Default)]
struct Store {
    bodies: HashMap<[u8; 40], Bytes>,
    /// Those orthrus loaded on every master (SCRIPT LOAD through it, or a
    /// NOSCRIPT followed): an EVALSHA of one is sent as it is.
    everywhere: HashSet<[u8; 40]>,
    order: VecDeque<[u8; 40]>,
    bytes: usize,
}

// === impl Scripts ===

impl Default for Scripts {
    fn default() -> Self {
        Scripts {
            inner: Mutex::default(),
            running: Arc::default(),
            next: AtomicU64::new(0),
            busy_ms: AtomicU64::new(DEFAULT_BUSY_MS),
            read_only_functions: Mutex::default(),
        }
    }
}

impl Scripts {
    /// Notes a script (or, with `function`, an FCALL) sent to a node.
    pub fn started(&self, function: bool) -> Running {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut running) = self.running.lock() {
            running.insert(id, (Instant::now(), function));
        }
        Running {
            running: self.running.clone(),
            id,
        }
    }

    /// Whether a script has run longer than the busy threshold, and if so
    /// whether it is a function: a node runs nothing else meanwhile, and
    /// Redis answers its other clients `-BUSY`.
    pub fn busy(&self) -> Option<bool> {
        let limit = Duration::from_millis(self.busy_ms.load(Ordering::Relaxed));
        let running = self.running.lock().ok()?;
        running
            .values()
            .find(|(since, _)| since.elapsed() >= limit)
            .map(|(_, function)| *function)
    }

    /// CONFIG SET busy-reply-threshold (or lua-time-limit) through orthrus.
    pub fn set_busy_threshold(&self, ms: u64) {
        self.busy_ms.store(ms, Ordering::Relaxed);
    }

    /// Remembers `body` (EVAL, SCRIPT LOAD), within the bounds.
    pub fn keep(&self, body: &Bytes) {
        if body.len() > MAX_SCRIPT_BYTES {
            return;
        }
        let sha = sha1_hex(body);
        let Ok(mut store) = self.inner.lock() else {
            return;
        };
        if store.bodies.contains_key(&sha) {
            return;
        }
        while store.bytes + body.len() > MAX_SCRIPT_BYTES || store.bodies.len() >= MAX_SCRIPTS {
            let Some(old) = store.order.pop_front() else {
                break;
            };
            if let Some(b) = store.bodies.remove(&old) {
                store.bytes -= b.len();
            }
            store.everywhere.remove(&old);
        }
        store.bytes += body.len();
        store.order.push_back(sha);
        store.bodies.insert(sha, body.clone());
    }

    /// Remembers `body` as loaded on every master (SCRIPT LOAD).
    pub fn keep_everywhere(&self, body: &Bytes) {
        self.keep(body);
        let sha = sha1_hex(body);
        if let Ok(mut store) = self.inner.lock() {
            if store.bodies.contains_key(&sha) {
                store.everywhere.insert(sha);
            }
        }
    }

    /// Whether orthrus loaded the script `sha` on every master.
    pub fn everywhere(&self, sha: &[u8]) -> bool {
        let Ok(key) = <[u8; 40]>::try_from(sha.to_ascii_lowercase()) else {
            return false;
        };
        self.inner
            .lock()
            .is_ok_and(|store| store.everywhere.contains(&key))
    }

    /// The body of the script whose SHA1 is `sha` (any case), if kept.
    pub fn body(&self, sha: &[u8]) -> Option<Bytes> {
        let key: [u8; 40] = sha.to_ascii_lowercase().try_into().ok()?;
        self.inner.lock().ok()?.bodies.get(&key).cloned()
    }

    /// SCRIPT FLUSH: the nodes forget every script, and so does orthrus.
    pub fn clear(&self) {
        if let Ok(mut store) = self.inner.lock() {
            *store = Store::default();
        }
    }

    /// Notes the functions a FUNCTION LOAD library registers, and which of
    /// them declare `no-writes`.
    pub fn keep_library(&self, body: &[u8]) {
        let Ok(mut read_only) = self.read_only_functions.lock() else {
            return;
        };
        for (name, no_writes) in registered_functions(body) {
            if !no_writes {
                read_only.remove(name);
            } else if read_only.len() < MAX_READ_ONLY_FUNCTIONS {
                read_only.insert(name.into());
            }
        }
    }

    /// FUNCTION DELETE, FLUSH or RESTORE. orthrus does not keep which
    /// functions a library held: it forgets them all, so that none is
    /// taken for read-only by mistake (until loaded through it again).
    pub fn forget_functions(&self) {
        if let Ok(mut read_only) = self.read_only_functions.lock() {
            read_only.clear();
        }
    }

    /// Whether `req` may write or replicate, as CLIENT PAUSE WRITE judges
    /// it (and an EXEC whose queue holds it): its command's flags, unless
    /// it is a script or function call that declares it does not write.
    pub fn may_write(&self, table: &CommandTable, req: &Request) -> bool {
        table.may_write(req) && !self.declares_no_writes(req)
    }

    /// Whether `req` is a script or function call that declares it does
    /// not write: an EVAL whose shebang says `no-writes`, an EVALSHA of a
    /// body kept here that says so, or an FCALL of a function loaded with
    /// that flag.
    fn declares_no_writes(&self, req: &Request) -> bool {
        let name = req.arg(0).unwrap_or_default();
        let Some(what) = req.arg(1) else {
            return false;
        };
        if name.eq_ignore_ascii_case(b"eval") {
            shebang_says_no_writes(what)
        } else if name.eq_ignore_ascii_case(b"evalsha") {
            self.body(what)
                .is_some_and(|body| shebang_says_no_writes(&body))
        } else if name.eq_ignore_ascii_case(b"fcall") {
            self.read_only_functions
                .lock()
                .is_ok_and(|set| set.contains(what))
        } else {
            false
        }
    }
}

/// Whether a script's body declares `flags=no-writes` in its shebang
/// (`#!lua flags=no-writes`), which Redis reads as a promise it keeps.
fn shebang_says_no_writes(body: &[u8]) -> bool {
    let shebang = body.split(|&b| b == b'\n').next().unwrap_or_default();
    shebang.starts_with(b"#!") && shebang.windows(9).any(|w| w == b"no-writes")
}

/// The functions a library's code registers, each with whether it declares
/// `no-writes`: `redis.register_function{function_name='f', callback=...,
/// flags={'no-writes'}}` (the form that can carry flags) or
/// `redis.register_function('f', ...)` (never read-only). Read from the
/// text, not run: each registration is looked at up to the next one, and
/// anything not understood counts as a function that may write.
fn registered_functions(body: &[u8]) -> Vec<(&[u8], bool)> {
    const CALL: &[u8] = b"register_function";
    let starts: Vec<usize> = body
        .windows(CALL.len())
        .enumerate()
        .filter(|(_, w)| *w == CALL)
        .map(|(i, _)| i + CALL.len())
        .collect();
    let mut found = Vec::new();
    for (n, &start) in starts.iter().enumerate() {
        let end = starts
            .get(n + 1)
            .map_or(body.len(), |next| next - CALL.len());
        let call = body.get(start..end).unwrap_or_default();
        let rest = call.trim_ascii_start();
        if rest.first() == Some(&b'(') {
            if let Some(name) = quoted(rest.get(1..).unwrap_or_default()) {
                found.push((name, false));
            }
            continue;
        }
        if rest.first() != Some(&b'{') {
            continue;
        }
        let Some(at) = find(rest, b"function_name") else {
            continue;
        };
        let after = rest.get(at + b"function_name".len()..).unwrap_or_default();
        let Some(value) = after.trim_ascii_start().strip_prefix(b"=") else {
            continue;
        };
        let Some(name) = quoted(value) else {
            continue;
        };
        let no_writes = find(rest, b"flags").is_some()
            && (find(rest, b"'no-writes'").is_some() || find(rest, b"\"no-writes\"").is_some());
        found.push((name, no_writes));
    }
    found
}

/// The string in single or double quotes at the start of `text` (after
/// blanks).
fn quoted(text: &[u8]) -> Option<&[u8]> {
    let text = text.trim_ascii_start();
    let quote = *text.first().filter(|q| matches!(q, b'\'' | b'"'))?;
    let inner = text.get(1..)?;
    let end = inner.iter().position(|&b| b == quote)?;
    inner.get(..end)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(mut running) = self.running.lock() {
            running.remove(&self.id);
        }
    }
}

/// Lower-case hex SHA1, as Redis names scripts.
fn sha1_hex(body: &[u8]) -> [u8; 40] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digest = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, body);
    let mut out = [0u8; 40];
    let hex = |nibble: u8| HEX.get(usize::from(nibble)).copied().unwrap_or(b'0');
    for (pair, byte) in out.chunks_exact_mut(2).zip(digest.as_ref()) {
        if let [high, low] = pair {
            *high = hex(byte >> 4);
            *low = hex(byte & 0xf);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha1_names_scripts_as_redis_does() {
        // SCRIPT LOAD "return 1+1" in Redis.
        assert_eq!(
            &sha1_hex(b"return 1+1"),
            b"a27e7e8a43702b7046d4f6a7ccf5b60cef6b9bd9"
        );
    }

    #[test]
    fn functions_declaring_no_writes_are_known_by_name() {
        let library = br#"#!lua name=lib
            redis.register_function{
                function_name='ro',
                callback=function() return "hello" end,
                flags={'no-writes'}
            }
            redis.register_function{function_name="rw", callback=function(keys) return 1 end}
            redis.register_function('plain', function() return 'no-writes' end)
        "#;
        assert_eq!(
            registered_functions(library),
            vec![(&b"ro"[..], true), (b"rw", false), (b"plain", false)]
        );
        let scripts = Scripts::default();
        scripts.keep_library(library);
        let fcall = |name: &str| Request::from_args(&["FCALL", name, "0"]);
        assert!(scripts.declares_no_writes(&fcall("ro")));
        assert!(!scripts.declares_no_writes(&fcall("rw")));
        assert!(!scripts.declares_no_writes(&fcall("plain")));
        // Loaded again without the flag: no longer read-only.
        scripts.keep_library(b"redis.register_function{function_name='ro', callback=f}");
        assert!(!scripts.declares_no_writes(&fcall("ro")));
        scripts.keep_library(library);
        scripts.forget_functions();
        assert!(!scripts.declares_no_writes(&fcall("ro")));

        let body = Bytes::from_static(b"#!lua flags=no-writes\nreturn 2");
        scripts.keep(&body);
        let sha = String::from_utf8(sha1_hex(&body).to_vec()).unwrap();
        assert!(scripts.declares_no_writes(&Request::from_args(&["EVALSHA", &sha, "0"])));
        scripts.keep(&Bytes::from_static(b"return 2"));
        let sha = String::from_utf8(sha1_hex(b"return 2").to_vec()).unwrap();
        assert!(!scripts.declares_no_writes(&Request::from_args(&["EVALSHA", &sha, "0"])));
    }

    #[test]
    fn bodies_are_kept_within_bounds_oldest_first() {
        let scripts = Scripts::default();
        let big = Bytes::from(vec![b'x'; MAX_SCRIPT_BYTES / 2 + 1]);
        let other = Bytes::from(vec![b'y'; MAX_SCRIPT_BYTES / 2 + 1]);
        scripts.keep(&big);
        scripts.keep(&other);
        assert!(scripts.body(&sha1_hex(&big)).is_none(), "evicted");
        assert_eq!(scripts.body(&sha1_hex(&other)), Some(other.clone()));
        let upper = sha1_hex(&other).to_ascii_uppercase();
        assert!(scripts.body(&upper).is_some(), "any case");
        scripts.clear();
        assert!(scripts.body(&sha1_hex(&other)).is_none());
    }
}
