//! Counters. Each worker owns one [`WorkerStats`] and bumps it with relaxed
//! atomics (uncontended: no lock, no shared cache line between workers);
//! readers sum all workers.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

/// A worker's entry among `len` per-worker ones: its own index, with no
/// division unless it is out of range (then taken modulo `len`).
#[inline]
pub fn worker_index(worker: usize, len: usize) -> usize {
    if worker < len {
        worker
    } else {
        worker % len.max(1)
    }
}

/// One worker's counters, aligned so that no two workers' counters share
/// a cache line (or an adjacent-line prefetch pair).
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct WorkerStats {
    pub connections_received: AtomicU64,
    pub connected_clients: AtomicI64,
    /// Clients waiting in a blocking command.
    pub blocked_clients: AtomicI64,
    /// Clients holding subscription connections.
    pub pubsub_clients: AtomicI64,
    /// Clients with CLIENT TRACKING on.
    pub tracking_clients: AtomicI64,
    pub commands: AtomicU64,
    pub moved: AtomicU64,
    pub ask: AtomicU64,
    /// Requests redirected past the free redirects (MOVED/ASK again and
    /// again: source and target disagreed while a slot moved), which
    /// waited before going on; each request counted once.
    pub redirect_waits: AtomicU64,
    pub tryagain: AtomicU64,
    pub clusterdown: AtomicU64,
    pub backend_errors: AtomicU64,
    pub protocol_errors: AtomicU64,
    pub rejected_commands: AtomicU64,
    /// Connections refused over `client.max_clients`.
    pub rejected_connections: AtomicU64,
    /// Keyed read-only commands sent to the slot's master.
    pub reads_master: AtomicU64,
    /// Keyed read-only commands sent to a replica.
    pub reads_replica: AtomicU64,
    /// Replica reads sent on to another node (the replica failed, was
    /// loading, or answered a redirect).
    pub replica_fallbacks: AtomicU64,
    /// Replica reads sent to a replica in `cluster.availability_zone`.
    pub reads_same_zone: AtomicU64,
    /// Replica reads sent to a replica of another (or no) zone: none in
    /// the zone was usable.
    pub reads_other_zone: AtomicU64,
    /// Times the worker's tasks were polled (the request path's hand-offs:
    /// divided by commands, task polls per request).
    pub task_polls: AtomicU64,
    /// Copies of requests sent to a route's mirror upstreams.
    pub mirror_sent: AtomicU64,
    /// Copies not sent: the mirror's queue was full.
    pub mirror_dropped: AtomicU64,
    /// Copies a mirror failed or answered with an error.
    pub mirror_errors: AtomicU64,
}

/// A consistent-enough sum over every worker.
#[derive(Clone, Copy, Debug, Default)]
pub struct Totals {
    pub connections_received: u64,
    pub connected_clients: i64,
    pub blocked_clients: i64,
    pub pubsub_clients: i64,
    pub tracking_clients: i64,
    pub commands: u64,
    pub moved: u64,
    pub ask: u64,
    pub redirect_waits: u64,
    pub tryagain: u64,
    pub clusterdown: u64,
    pub backend_errors: u64,
    pub protocol_errors: u64,
    pub rejected_commands: u64,
    pub rejected_connections: u64,
    pub reads_master: u64,
    pub reads_replica: u64,
    pub replica_fallbacks: u64,
    pub reads_same_zone: u64,
    pub reads_other_zone: u64,
    pub task_polls: u64,
    pub mirror_sent: u64,
    pub mirror_dropped: u64,
    pub mirror_errors: u64,
}

impl WorkerStats {
    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// CONFIG RESETSTAT: the counters start again from 0 (gauges stay).
    pub fn reset(&self) {
        for c in [
            &self.connections_received,
            &self.commands,
            &self.moved,
            &self.ask,
            &self.redirect_waits,
            &self.tryagain,
            &self.clusterdown,
            &self.backend_errors,
            &self.protocol_errors,
            &self.rejected_commands,
            &self.rejected_connections,
            &self.reads_master,
            &self.reads_replica,
            &self.replica_fallbacks,
            &self.reads_same_zone,
            &self.reads_other_zone,
            &self.task_polls,
            &self.mirror_sent,
            &self.mirror_dropped,
            &self.mirror_errors,
        ] {
            c.store(0, Ordering::Relaxed);
        }
    }
}

/// Holds one unit of a gauge while alive (a blocked client, a subscriber).
pub struct GaugeGuard<'a>(&'a AtomicI64);

impl<'a> GaugeGuard<'a> {
    pub fn new(gauge: &'a AtomicI64) -> Self {
        gauge.fetch_add(1, Ordering::Relaxed);
        GaugeGuard(gauge)
    }
}

impl Drop for GaugeGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Sums the counters of every worker.
pub fn totals(workers: &[WorkerStats]) -> Totals {
    let mut t = Totals::default();
    for w in workers {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        t.connections_received += get(&w.connections_received);
        t.connected_clients += w.connected_clients.load(Ordering::Relaxed);
        t.blocked_clients += w.blocked_clients.load(Ordering::Relaxed);
        t.pubsub_clients += w.pubsub_clients.load(Ordering::Relaxed);
        t.tracking_clients += w.tracking_clients.load(Ordering::Relaxed);
        t.commands += get(&w.commands);
        t.moved += get(&w.moved);
        t.ask += get(&w.ask);
        t.redirect_waits += get(&w.redirect_waits);
        t.tryagain += get(&w.tryagain);
        t.clusterdown += get(&w.clusterdown);
        t.backend_errors += get(&w.backend_errors);
        t.protocol_errors += get(&w.protocol_errors);
        t.rejected_commands += get(&w.rejected_commands);
        t.rejected_connections += get(&w.rejected_connections);
        t.reads_master += get(&w.reads_master);
        t.reads_replica += get(&w.reads_replica);
        t.replica_fallbacks += get(&w.replica_fallbacks);
        t.reads_same_zone += get(&w.reads_same_zone);
        t.reads_other_zone += get(&w.reads_other_zone);
        t.task_polls += get(&w.task_polls);
        t.mirror_sent += get(&w.mirror_sent);
        t.mirror_dropped += get(&w.mirror_dropped);
        t.mirror_errors += get(&w.mirror_errors);
    }
    t
}

/// Instantaneous operations per second, as Redis computes it: the command
/// counter sampled every 100 ms, averaged over the last 16 samples.
#[derive(Default)]
pub struct OpsMeter {
    samples: std::sync::Mutex<std::collections::VecDeque<(std::time::Instant, u64)>>,
}

impl OpsMeter {
    pub const INTERVAL: Duration = Duration::from_millis(100);
    const SAMPLES: usize = 16;

    /// Takes one sample of the total command count (from a timer, never
    /// from the request path).
    pub fn sample(&self, commands: u64) {
        let Ok(mut samples) = self.samples.lock() else {
            return;
        };
        samples.push_back((std::time::Instant::now(), commands));
        while samples.len() > Self::SAMPLES + 1 {
            samples.pop_front();
        }
    }

    pub fn per_second(&self) -> u64 {
        let Ok(samples) = self.samples.lock() else {
            return 0;
        };
        match (samples.front(), samples.back()) {
            (Some(&(t0, c0)), Some(&(t1, c1))) if t1 > t0 => {
                let secs = (t1 - t0).as_secs_f64();
                (c1.saturating_sub(c0) as f64 / secs).round() as u64
            }
            _ => 0,
        }
    }
}
