//! Log lines for events an outsider can repeat at will (a client over
//! `max_clients`, a wrong password): at most one a second per kind, with
//! the count of those left out, so that a flood cannot fill the log.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// One kind of event's log rate: at most one line a second.
pub struct Throttle {
    /// Milliseconds since `epoch()` before which nothing is logged.
    next_ms: AtomicU64,
    /// Events since the last line.
    skipped: AtomicU64,
}

/// A fixed starting point for the clock, shared by every throttle.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

// === impl Throttle ===

impl Throttle {
    pub const fn new() -> Throttle {
        Throttle {
            next_ms: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
        }
    }

    /// Counts an event. `Some(n)` when it should be logged now, `n` being
    /// the events not logged since the last line.
    pub fn allow(&self) -> Option<u64> {
        let now = u64::try_from(epoch().elapsed().as_millis()).unwrap_or(u64::MAX);
        let next = self.next_ms.load(Ordering::Relaxed);
        if now < next
            || self
                .next_ms
                .compare_exchange(next, now + 1000, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            self.skipped.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        Some(self.skipped.swap(0, Ordering::Relaxed))
    }
}

impl Default for Throttle {
    fn default() -> Self {
        Throttle::new()
    }
}

#[cfg(test)]
mod tests {
    use super::Throttle;

    #[test]
    fn one_line_a_second_with_the_count_left_out() {
        let t = Throttle::new();
        assert_eq!(t.allow(), Some(0));
        assert_eq!(t.allow(), None);
        assert_eq!(t.allow(), None);
        std::thread::sleep(std::time::Duration::from_millis(1050));
        assert_eq!(t.allow(), Some(2));
    }
}
