//! The Lua script bodies orthrus has seen (EVAL, EVAL_RO, SCRIPT LOAD), by
//! SHA1, bounded: `cmd::script` loads one on a master that answers an
//! EVALSHA with `NOSCRIPT`, and answers SCRIPT EXISTS with them.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;

/// Total bytes of script bodies kept; the oldest go first beyond it.
pub const MAX_SCRIPT_BYTES: usize = 16 * 1024 * 1024;
/// Most script bodies kept.
pub const MAX_SCRIPTS: usize = 10_000;

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
        }
        store.bytes += body.len();
        store.order.push_back(sha);
        store.bodies.insert(sha, body.clone());
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
    for (pair, byte) in out.chunks_exact_mut(2).zip(digest.as_ref()) {
        pair[0] = HEX[usize::from(byte >> 4)];
        pair[1] = HEX[usize::from(byte & 0xf)];
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
