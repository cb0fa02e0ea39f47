//! Latency histograms: fixed log-linear buckets of relaxed atomic counters.
//!
//! Each worker records into its own histograms (no lock, no locked
//! instruction, no cache line written by another worker); readers add
//! every worker's buckets up.
//! A bucket spans 1/16 of a power of two of microseconds, so a percentile
//! read from the buckets is at most 6.25 % above the true value (values
//! under 16 µs are exact), from 1 µs up to 2^36 µs (19 hours).
//!
//! Per request orthrus keeps three: `total` (from reading the request to
//! its reply being ready to write), `backend` (the longest round trip to a
//! node among the request's parts, redirects included) and `proxy` (the
//! difference: orthrus's own time, queueing included). Per node it keeps
//! the round trip of every reply on the shared connections.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dashmap::DashMap;
use orthrus_cluster::NodeAddr;

use crate::observe::stats::worker_index;
use crate::route::kind::Family;

/// Sub-buckets per power of two: 2^SUB_BITS.
const SUB_BITS: u32 = 4;
const SUB: u64 = 1 << SUB_BITS;
/// Values of 2^MAX_EXP µs and more share the last bucket.
const MAX_EXP: u32 = 36;
/// Bucket count.
pub const BUCKETS: usize = (SUB + (MAX_EXP - SUB_BITS) as u64 * SUB) as usize;

/// The Prometheus buckets' upper bounds are the powers of two from 2^4 µs
/// (16 µs) to 2^25 µs (33.5 s): each is a bucket edge, so counts are exact.
pub const PROMETHEUS_EXPONENTS: std::ops::RangeInclusive<u32> = 4..=25;

/// One histogram of durations: the bucket counts, then the sum of the
/// values in microseconds, in one allocation of its own (so that no two
/// workers' counters share a cache line).
pub struct Histogram {
    counts: Box<[AtomicU64; BUCKETS + 1]>,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: Box::new(std::array::from_fn(|_| AtomicU64::new(0))),
        }
    }
}

impl Histogram {
    /// Records one duration. Only the owning worker's thread writes a
    /// histogram (never reset: CONFIG RESETSTAT moves a baseline instead),
    /// so a plain load and store suffice, no locked read-modify-write;
    /// readers on other threads see each counter whole.
    pub fn record(&self, took: Duration) {
        self.record_us(micros(took));
    }

    /// Records one value in whole microseconds.
    #[inline]
    pub fn record_us(&self, us: u64) {
        if let Some(c) = self.counts.get(bucket(us)) {
            add(c, 1);
        }
        let [.., sum] = &*self.counts;
        add(sum, us);
    }
}

/// `took` in whole microseconds: `as_micros`'s value without its u128
/// arithmetic, which costs more than the rest of counting a request.
pub fn micros(took: Duration) -> u64 {
    took.as_secs()
        .saturating_mul(1_000_000)
        .saturating_add(u64::from(took.subsec_micros()))
}

/// `counter += n` for a counter that only the calling thread writes.
fn add(counter: &AtomicU64, n: u64) {
    counter.store(
        counter.load(Ordering::Relaxed).wrapping_add(n),
        Ordering::Relaxed,
    );
}

/// The bucket a value in microseconds falls in.
fn bucket(us: u64) -> usize {
    if us < SUB {
        return us as usize;
    }
    let exp = 63 - us.leading_zeros();
    if exp >= MAX_EXP {
        return BUCKETS - 1;
    }
    let sub = (us >> (exp - SUB_BITS)) & (SUB - 1);
    (SUB + u64::from(exp - SUB_BITS) * SUB + sub) as usize
}

/// The smallest value in bucket `i`.
fn lower_bound(i: usize) -> u64 {
    let i = i as u64;
    if i < SUB {
        return i;
    }
    let exp = (i - SUB) / SUB + u64::from(SUB_BITS);
    let sub = (i - SUB) % SUB;
    (SUB + sub) << (exp - u64::from(SUB_BITS))
}

/// Several histograms added up, for reading.
#[derive(Clone)]
pub struct Summary {
    counts: Vec<u64>,
    sum_us: u64,
}

impl Default for Summary {
    fn default() -> Self {
        Summary {
            counts: vec![0; BUCKETS],
            sum_us: 0,
        }
    }
}

impl Summary {
    pub fn add(&mut self, h: &Histogram) {
        for (total, c) in self.counts.iter_mut().zip(h.counts.iter()) {
            *total += c.load(Ordering::Relaxed);
        }
        if let Some(sum) = h.counts.get(BUCKETS) {
            self.sum_us += sum.load(Ordering::Relaxed);
        }
    }

    /// What was recorded since `base` was taken.
    pub fn since(&self, base: &Summary) -> Summary {
        Summary {
            counts: self
                .counts
                .iter()
                .zip(&base.counts)
                .map(|(now, then)| now.saturating_sub(*then))
                .collect(),
            sum_us: self.sum_us.saturating_sub(base.sum_us),
        }
    }

    /// Adds `other`'s observations to these.
    pub fn merge(&mut self, other: &Summary) {
        for (total, c) in self.counts.iter_mut().zip(&other.counts) {
            *total += c;
        }
        self.sum_us += other.sum_us;
    }

    pub fn of<'a>(histograms: impl IntoIterator<Item = &'a Histogram>) -> Summary {
        let mut s = Summary::default();
        for h in histograms {
            s.add(h);
        }
        s
    }

    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    pub fn sum_seconds(&self) -> f64 {
        self.sum_us as f64 / 1e6
    }

    /// The value in microseconds that `q` (0..=1) of the observations do
    /// not exceed: the top of the bucket that holds it. 0 when empty.
    pub fn percentile(&self, q: f64) -> u64 {
        let count = self.count();
        if count == 0 {
            return 0;
        }
        let rank = ((q * count as f64).ceil() as u64).clamp(1, count);
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return if i + 1 < BUCKETS {
                    lower_bound(i + 1) - 1
                } else {
                    lower_bound(i)
                };
            }
        }
        lower_bound(BUCKETS - 1)
    }

    /// Observations under `2^exp` µs (`exp` ≥ SUB_BITS, so a bucket edge).
    pub fn below_power_of_two(&self, exp: u32) -> u64 {
        let edge = bucket(1u64 << exp.min(MAX_EXP));
        self.counts.iter().take(edge).sum()
    }
}

/// One worker's per-family histograms.
pub struct Latency {
    families: Vec<Parts>,
}

/// One family's histograms: a request's whole time, its time at nodes,
/// and the rest (orthrus's own).
#[derive(Default)]
struct Parts {
    total: Histogram,
    backend: Histogram,
    proxy: Histogram,
}

impl Default for Latency {
    fn default() -> Self {
        Latency {
            families: (0..Family::COUNT).map(|_| Parts::default()).collect(),
        }
    }
}

/// Which of a request's times.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Part {
    Total,
    Backend,
    Proxy,
}

impl Latency {
    /// Records one request that took `total` microseconds. `backend` is
    /// `None` when its backend time is not known (pub/sub commands): then
    /// only the total counts.
    pub fn record(&self, family: Family, total: u64, backend: Option<Duration>) {
        let Some(parts) = self.families.get(family.index()) else {
            return;
        };
        // In whole microseconds; orthrus's part is the difference.
        parts.total.record_us(total);
        if let Some(backend) = backend {
            let backend = micros(backend);
            parts.backend.record_us(backend);
            parts.proxy.record_us(total.saturating_sub(backend));
        }
    }

    pub fn histogram(&self, family: Family, part: Part) -> Option<&Histogram> {
        let parts = self.families.get(family.index())?;
        Some(match part {
            Part::Total => &parts.total,
            Part::Backend => &parts.backend,
            Part::Proxy => &parts.proxy,
        })
    }
}

/// Every worker's per-family histograms, and the baselines that CONFIG
/// RESETSTAT sets (readers subtract them; the workers' counters are never
/// written by another thread).
pub struct Families {
    workers: Vec<Latency>,
    base: Mutex<HashMap<(Family, Part), Summary>>,
}

impl Families {
    pub fn new(workers: usize) -> Families {
        Families {
            workers: (0..workers.max(1)).map(|_| Latency::default()).collect(),
            base: Mutex::new(HashMap::new()),
        }
    }

    /// Worker `index`'s histograms, to record into.
    #[allow(
        clippy::indexing_slicing,
        reason = "`new` makes at least one worker's histograms, and `worker_index` keeps the index below their number"
    )]
    pub fn worker(&self, index: usize) -> &Latency {
        &self.workers[worker_index(index, self.workers.len())]
    }

    /// One family and part over every worker, since the last reset.
    pub fn summary(&self, family: Family, part: Part) -> Summary {
        let now = self.total(family, part);
        match self.base.lock() {
            Ok(base) => match base.get(&(family, part)) {
                Some(then) => now.since(then),
                None => now,
            },
            Err(_) => now,
        }
    }

    pub fn reset(&self) {
        let mut base = HashMap::new();
        for family in Family::ALL {
            for part in [Part::Total, Part::Backend, Part::Proxy] {
                base.insert((family, part), self.total(family, part));
            }
        }
        if let Ok(mut b) = self.base.lock() {
            *b = base;
        }
    }

    fn total(&self, family: Family, part: Part) -> Summary {
        Summary::of(
            self.workers
                .iter()
                .filter_map(|w| w.histogram(family, part)),
        )
    }
}

/// Round trips to one node, one histogram per worker, and the baseline
/// CONFIG RESETSTAT set.
pub struct NodeLatency {
    per_worker: Box<[Histogram]>,
    base: Mutex<Option<Summary>>,
    /// The upstream the node was found in when first connected to.
    upstream: usize,
}

impl NodeLatency {
    fn new(workers: usize, upstream: usize) -> NodeLatency {
        NodeLatency {
            per_worker: (0..workers.max(1)).map(|_| Histogram::default()).collect(),
            base: Mutex::new(None),
            upstream,
        }
    }

    pub fn record(&self, worker: usize, took: Duration) {
        if let Some(h) = self
            .per_worker
            .get(worker_index(worker, self.per_worker.len()))
        {
            h.record(took);
        }
    }

    /// Since the last reset.
    pub fn summary(&self) -> Summary {
        let now = Summary::of(self.per_worker.iter());
        match self.base.lock().as_deref() {
            Ok(Some(base)) => now.since(base),
            _ => now,
        }
    }

    fn reset(&self) {
        let now = Summary::of(self.per_worker.iter());
        if let Ok(mut base) = self.base.lock() {
            *base = Some(now);
        }
    }
}

/// Round trips per node. An entry is made when a worker first connects to
/// the node (not per request) and dropped when the node leaves the
/// topology; what it had recorded then stays in its upstream's total, so
/// that an upstream's histogram never goes down.
#[derive(Default)]
pub struct Nodes {
    nodes: DashMap<NodeAddr, Arc<NodeLatency>>,
    /// The round trips of nodes dropped, by upstream.
    departed: Mutex<Vec<Summary>>,
}

impl Nodes {
    /// The node's histograms, made at its first connection (in
    /// `upstream`, the default one: 0).
    pub fn get(&self, addr: &NodeAddr, workers: usize, upstream: usize) -> Arc<NodeLatency> {
        self.nodes
            .entry(addr.clone())
            .or_insert_with(|| Arc::new(NodeLatency::new(workers, upstream)))
            .clone()
    }

    /// Keeps the nodes for which `keep` is true, and those a connection
    /// still records into.
    pub fn retain(&self, mut keep: impl FnMut(&NodeAddr) -> bool) {
        let mut gone = Vec::new();
        self.nodes.retain(|addr, node| {
            let stays = keep(addr) || Arc::strong_count(node) > 1;
            if !stays {
                gone.push((node.upstream, node.summary()));
            }
            stays
        });
        if gone.is_empty() {
            return;
        }
        if let Ok(mut departed) = self.departed.lock() {
            for (upstream, summary) in gone {
                if departed.len() <= upstream {
                    departed.resize(upstream.saturating_add(1), Summary::default());
                }
                if let Some(total) = departed.get_mut(upstream) {
                    total.merge(&summary);
                }
            }
        }
    }

    /// Every node's summary, sorted by address.
    pub fn summaries(&self) -> Vec<(NodeAddr, Summary)> {
        let mut out: Vec<(NodeAddr, Summary)> = self
            .nodes
            .iter()
            .map(|e| (e.key().clone(), e.value().summary()))
            .collect();
        out.sort_by_cached_key(|(addr, _)| addr.to_string());
        out
    }

    /// The round trips of each of `upstreams` upstreams: its nodes' (by
    /// the upstream each was first connected in) and its departed ones'.
    pub fn by_upstream(&self, upstreams: usize) -> Vec<Summary> {
        let mut by = match self.departed.lock() {
            Ok(departed) => departed.clone(),
            Err(_) => Vec::new(),
        };
        by.resize(upstreams, Summary::default());
        for e in &self.nodes {
            if let Some(total) = by.get_mut(e.value().upstream) {
                total.merge(&e.value().summary());
            }
        }
        by
    }

    pub fn reset(&self) {
        for e in &self.nodes {
            e.value().reset();
        }
        if let Ok(mut departed) = self.departed.lock() {
            departed.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_contiguous_and_ordered() {
        for i in 1..BUCKETS {
            assert!(lower_bound(i) > lower_bound(i - 1), "bucket {i}");
            assert_eq!(bucket(lower_bound(i)), i, "lower edge of {i}");
            assert_eq!(bucket(lower_bound(i) - 1), i - 1, "below {i}");
        }
        assert_eq!(bucket(0), 0);
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn a_percentile_is_within_one_sixteenth_above() {
        for v in [
            0u64,
            1,
            15,
            16,
            17,
            100,
            999,
            1_000,
            12_345,
            987_654,
            3_600_000_000,
        ] {
            let h = Histogram::default();
            h.record(Duration::from_micros(v));
            let p = Summary::of([&h]).percentile(0.5);
            assert!(p >= v, "{v}: {p}");
            assert!(p as f64 <= v as f64 * 1.0625 + 1.0, "{v}: {p}");
        }
    }

    #[test]
    fn percentiles_split_the_observations() {
        let h = Histogram::default();
        for us in 1..=1000 {
            h.record(Duration::from_micros(us));
        }
        let s = Summary::of([&h]);
        assert_eq!(s.count(), 1000);
        let p50 = s.percentile(0.5);
        let p99 = s.percentile(0.99);
        let p999 = s.percentile(0.999);
        assert!((500..=532).contains(&p50), "{p50}");
        assert!((990..=1023).contains(&p99), "{p99}");
        assert!((999..=1023).contains(&p999), "{p999}");
        assert!((s.sum_seconds() - 0.5005).abs() < 1e-9);
    }

    #[test]
    fn a_duration_counts_its_whole_microseconds() {
        let h = Histogram::default();
        let took = [
            Duration::from_nanos(999),
            Duration::new(3, 999_999_999),
            Duration::new(7, 1_500),
        ];
        for t in took {
            h.record(t);
        }
        let s = Summary::of([&h]);
        assert_eq!(s.below_power_of_two(0), 1, "999 ns is 0 µs");
        let sum: u128 = took.iter().map(Duration::as_micros).sum();
        assert!((s.sum_seconds() - sum as f64 / 1e6).abs() < 1e-9);
    }

    #[test]
    fn prometheus_bounds_are_exact() {
        let h = Histogram::default();
        for us in [15u64, 16, 31, 32, 33, 1 << 20] {
            h.record(Duration::from_micros(us));
        }
        let s = Summary::of([&h]);
        assert_eq!(s.below_power_of_two(4), 1); // < 16 µs
        assert_eq!(s.below_power_of_two(5), 3); // < 32 µs
        assert_eq!(s.below_power_of_two(6), 5); // < 64 µs
        assert_eq!(s.below_power_of_two(20), 5);
        assert_eq!(s.below_power_of_two(21), 6);
    }

    #[test]
    fn backend_and_proxy_split_the_total() {
        let families = Families::new(2);
        families
            .worker(0)
            .record(Family::Hash, 300, Some(Duration::from_micros(200)));
        families.worker(1).record(Family::PubSub, 50, None);
        let get = |f, p| families.summary(f, p);
        assert_eq!(get(Family::Hash, Part::Backend).percentile(1.0), 207);
        assert_eq!(get(Family::Hash, Part::Proxy).percentile(1.0), 103);
        assert_eq!(get(Family::PubSub, Part::Total).count(), 1);
        assert_eq!(get(Family::PubSub, Part::Backend).count(), 0);
        families.reset();
        assert_eq!(get(Family::Hash, Part::Total).count(), 0);
        families.worker(1).record(Family::Hash, 40, None);
        let after = get(Family::Hash, Part::Total);
        assert_eq!((after.count(), after.percentile(0.5)), (1, 41));
        assert_eq!(after.sum_seconds(), 40e-6);
    }

    #[test]
    fn node_reset_moves_the_baseline() {
        let nodes = Nodes::default();
        let addr: NodeAddr = "127.0.0.1:7000".parse().unwrap();
        let node = nodes.get(&addr, 2, 0);
        node.record(0, Duration::from_micros(100));
        node.record(1, Duration::from_micros(100));
        assert_eq!(nodes.summaries()[0].1.count(), 2);
        nodes.reset();
        assert_eq!(nodes.summaries()[0].1.count(), 0);
        node.record(1, Duration::from_micros(100));
        assert_eq!(nodes.summaries()[0].1.count(), 1);
    }

    #[test]
    fn an_upstreams_round_trips_stay_counted_when_its_node_leaves() {
        let nodes = Nodes::default();
        let (a, b): (NodeAddr, NodeAddr) = (
            "127.0.0.1:7000".parse().unwrap(),
            "127.0.0.1:7001".parse().unwrap(),
        );
        nodes.get(&a, 1, 0).record(0, Duration::from_micros(100));
        let node = nodes.get(&b, 1, 1);
        node.record(0, Duration::from_micros(100));
        node.record(0, Duration::from_micros(100));
        drop(node);
        let counts = |nodes: &Nodes| {
            nodes
                .by_upstream(3)
                .iter()
                .map(Summary::count)
                .collect::<Vec<_>>()
        };
        assert_eq!(counts(&nodes), [1, 2, 0]);
        nodes.retain(|addr| *addr == a);
        assert_eq!(nodes.summaries().len(), 1, "b is forgotten");
        assert_eq!(
            counts(&nodes),
            [1, 2, 0],
            "b's round trips stay its upstream's"
        );
        nodes.reset();
        assert_eq!(counts(&nodes), [0, 0, 0]);
    }
}
