//! The process's memory: the `memory_limit_mb` guard (its RSS samples
//! also feed `process::room`, the room left to requests still being read),
//! and giving memory back to the system after clients leave (or the reply
//! cache turns over).
//!
//! glibc's malloc returns freed memory to the system only from the top of
//! each arena; what thousands of departed connections freed below live
//! allocations stays resident. `malloc_trim(0)` walks the arenas and
//! releases those free pages. Measured (3,000 idle connections opened, each
//! sent a PING, then closed; one worker): RSS 6.1 MB before, 10.2 MB after
//! the clients left, 5.9 MB after a trim. jemalloc and mimalloc were measured
//! instead of glibc and did worse (docs/performance.md).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::process::Shared;

/// How often the client count is looked at.
const CHECK_EVERY: Duration = Duration::from_millis(250);
/// A trim follows once this many clients left since the peak.
const LEFT_FOR_TRIM: i64 = 256;

/// Samples resident memory every 100 ms against `memory_limit_mb`.
pub async fn watch_limit(shared: Arc<Shared>) {
    let limit_kib = shared.settings.raw.memory_limit_mb.saturating_mul(1024);
    loop {
        let buffered = shared.memory_room.buffered();
        if let Some(rss) = resident_kib() {
            shared
                .memory_room
                .sampled(rss.saturating_mul(1024), buffered);
            let over = rss > limit_kib;
            if shared.over_memory.swap(over, Ordering::Relaxed) != over {
                if over {
                    tracing::warn!(
                        rss_kib = rss,
                        limit_kib,
                        "over memory_limit_mb: refusing new requests"
                    );
                } else {
                    tracing::info!(rss_kib = rss, limit_kib, "back under memory_limit_mb");
                }
            }
        }
        crate::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Trims the allocator once many clients have left (the count fell by
/// [`LEFT_FOR_TRIM`] from its peak since the last trim) and stayed down for
/// a check, and after a client that held many bytes of replies left
/// (`Shared::trim_due`; a worker's arena keeps what such a client freed
/// below its live allocations, up to the client's whole budget). That trim
/// is repeated at the next check: replies to the client still in flight
/// when it left are freed as they arrive. The trim runs on its own thread:
/// it locks each arena in turn, and the workers keep serving meanwhile.
pub async fn give_back_when_clients_leave(shared: Arc<Shared>) {
    let mut peak: i64 = 0;
    let mut again = false;
    let mut churn = CacheChurn::default();
    loop {
        crate::time::sleep(CHECK_EVERY).await;
        let now: i64 = shared
            .stats
            .iter()
            .map(|w| w.connected_clients.load(Ordering::Relaxed))
            .sum();
        peak = peak.max(now);
        let large_left = shared.trim_due.swap(false, Ordering::Relaxed);
        if peak - now >= LEFT_FOR_TRIM || large_left || again || churn.due(&shared) {
            peak = now;
            again = large_left;
            let _ = tokio::task::spawn_blocking(trim).await;
        }
    }
}

/// The reply cache's evictions since the last trim: each worker fills
/// from its own arena and an eviction frees into the filler's, so a store
/// turned over leaves each arena holding free pages below its live
/// entries (4 workers, a 64 MiB budget filled three times over: 82 MiB of
/// RSS for 58 MiB of entries, 69 MiB with one arena). A trim follows once
/// a quarter of the entries held were evicted, at most once a second.
#[derive(Default)]
struct CacheChurn {
    evictions: u64,
    checks: u32,
}

impl CacheChurn {
    fn due(&mut self, shared: &Shared) -> bool {
        self.checks = self.checks.saturating_add(1);
        let Some(cache) = shared.reply_cache() else {
            return false;
        };
        let evictions = cache.stats.evictions.load(Ordering::Relaxed);
        let held = cache.entries() as u64;
        let due = self.checks >= 4 && evictions.saturating_sub(self.evictions) > held / 4;
        if due || evictions < self.evictions {
            self.evictions = evictions;
            self.checks = 0;
        }
        due
    }
}

/// Gives free heap pages back to the system.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn trim() {
    // SAFETY: malloc_trim takes no pointers and glibc serialises it with
    // every other allocator call; it only releases pages that are free.
    let released = unsafe { libc::malloc_trim(0) } != 0;
    tracing::debug!(released, "gave free heap pages back to the system");
}

/// Other allocators (musl, macOS) return memory on their own.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim() {}

/// VmRSS of this process, in KiB.
fn resident_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?;
    line.trim().trim_end_matches("kB").trim().parse().ok()
}
