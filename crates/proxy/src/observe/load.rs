//! Load per slot: requests, bytes (request and reply) and time at the node
//! for every one of the 16,384 slots, always on. Each worker owns one table
//! and is its only writer, so a count is a relaxed load and store (no
//! read-modify-write, no shared cache line); readers sum the workers.
//!
//! Named upstreams (`[upstreams.NAME]`) are counted per slot too, each in
//! a table of its own that its worker makes at its first request (an
//! upstream no request went to costs no memory); error replies are
//! counted per upstream, the default one included.
//!
//! A timer keeps a ring of the last five 2-second intervals, so that
//! `ORTHRUS HOTSLOTS` gives rates over the last 10 s; INFO and `/metrics`
//! add the totals up by the slot's current master.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use orthrus_cluster::{NodeAddr, SLOT_COUNT, Slot, SlotMap};

use crate::route::prefix::{DEFAULT_UPSTREAM, Place, Upstream};

/// How often the ring takes an interval.
pub const INTERVAL: Duration = Duration::from_secs(2);
/// Intervals kept: the window is `INTERVAL * RING` long.
const RING: usize = 5;
/// What `ORTHRUS HOTSLOTS` rates are taken over: every interval kept.
pub const WINDOW: Duration = Duration::from_secs(INTERVAL.as_secs() * RING as u64);

/// Every worker's table, and the recent intervals.
pub struct SlotLoad {
    workers: Box<[Arc<WorkerLoad>]>,
    window: Mutex<Window>,
}

/// One worker's counts, one entry per slot.
pub struct WorkerLoad {
    slots: Box<[SlotCounter]>,
    /// Named upstream `n`'s table at `n - 1`, once it had a request.
    named: Box<[OnceLock<Box<[SlotCounter]>>]>,
    /// Error replies, per upstream (the default one at 0).
    errors: Box<[AtomicU64]>,
}

/// One upstream's counts so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UpstreamCounts {
    pub counts: Counts,
    pub errors: u64,
}

/// What has been counted for one slot (or a set of them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub requests: u64,
    /// Request and reply bytes.
    pub bytes: u64,
    /// Microseconds from a request written to its node to its reply read.
    pub micros: u64,
}

/// One slot's rates over the recent window.
#[derive(Clone, Copy, Debug)]
pub struct SlotRate {
    pub slot: Slot,
    pub requests_per_sec: f64,
    pub bytes_per_sec: f64,
}

/// A master's share of the counts so far.
#[derive(Clone, Debug)]
pub struct MasterLoad {
    pub addr: NodeAddr,
    /// The upstream it is a master of (the default one: 0).
    pub upstream: usize,
    pub counts: Counts,
}

#[derive(Default)]
struct SlotCounter {
    requests: AtomicU64,
    bytes: AtomicU64,
    nanos: AtomicU64,
}

/// Requests and bytes of one interval, per upstream and slot (saturating
/// at `u32::MAX`; no slots for an upstream without requests).
struct Interval {
    started: Instant,
    deltas: Vec<Box<[(u32, u32)]>>,
}

struct Window {
    /// Totals when the newest interval ended, per upstream.
    last: Vec<Vec<Counts>>,
    last_at: Instant,
    ring: VecDeque<Interval>,
}

// === impl WorkerLoad ===

impl WorkerLoad {
    fn new(named: usize) -> WorkerLoad {
        WorkerLoad {
            slots: new_table(),
            named: (0..named).map(|_| OnceLock::new()).collect(),
            errors: (0..=named).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// The table of `upstream`, if it has one yet.
    fn table(&self, upstream: usize) -> Option<&[SlotCounter]> {
        match upstream.checked_sub(1) {
            None => Some(&self.slots),
            Some(at) => self.named.get(at)?.get().map(|t| &**t),
        }
    }

    /// Counts an error reply from `upstream`.
    pub fn error(&self, upstream: Upstream) {
        if let Some(c) = self.errors.get(usize::from(upstream)) {
            bump(c, 1);
        }
    }

    /// Counts one request to `place` whose request and reply together
    /// were `bytes` long and which spent `took` at its node. Only the
    /// owning worker calls it.
    #[inline]
    pub fn add(&self, place: Place, bytes: usize, took: Duration) {
        if place.upstream == DEFAULT_UPSTREAM {
            if let Some(c) = self.slots.get(place.slot.index()) {
                c.add(bytes, took);
            }
        } else {
            self.add_named(place, bytes, took);
        }
    }

    /// Asks the CPU to bring `place`'s counters into its cache, where
    /// [`WorkerLoad::add`] will find them when the reply comes: a request
    /// to a random slot otherwise stalls there on a cache miss (a table is
    /// 384 KiB). Both ends, as an entry may straddle two cache lines.
    #[inline]
    pub fn prefetch(&self, place: Place) {
        if let Some(c) = self
            .table(usize::from(place.upstream))
            .and_then(|t| t.get(place.slot.index()))
        {
            let start = std::ptr::from_ref(c).cast::<i8>();
            prefetch(start);
            prefetch(start.wrapping_add(size_of::<SlotCounter>() - 1));
        }
    }

    /// [`WorkerLoad::add`] for a named upstream's table, made at its
    /// first request.
    #[cold]
    fn add_named(&self, place: Place, bytes: usize, took: Duration) {
        let at = usize::from(place.upstream).wrapping_sub(1);
        if let Some(table) = self.named.get(at) {
            if let Some(c) = table.get_or_init(new_table).get(place.slot.index()) {
                c.add(bytes, took);
            }
        }
    }
}

/// A table of every slot's counters.
fn new_table() -> Box<[SlotCounter]> {
    (0..SLOT_COUNT).map(|_| SlotCounter::default()).collect()
}

impl SlotCounter {
    #[inline]
    fn add(&self, bytes: usize, took: Duration) {
        bump(&self.requests, 1);
        bump(&self.bytes, u64::try_from(bytes).unwrap_or(u64::MAX));
        let nanos = took
            .as_secs()
            .wrapping_mul(1_000_000_000)
            .wrapping_add(u64::from(took.subsec_nanos()));
        bump(&self.nanos, nanos);
    }

    fn counts(&self) -> Counts {
        Counts {
            requests: self.requests.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            micros: self.nanos.load(Ordering::Relaxed) / 1000,
        }
    }
}

/// Starts loading the cache line holding `at` into every cache level,
/// without waiting for it.
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
#[inline]
fn prefetch(at: *const i8) {
    use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
    // SAFETY: a prefetch is a hint: it reads nothing the program sees and
    // cannot fault, whatever the address.
    unsafe { _mm_prefetch::<_MM_HINT_T0>(at) }
}

/// Elsewhere no hint: the counters are found by the load itself.
#[cfg(not(target_arch = "x86_64"))]
#[inline]
fn prefetch(_at: *const i8) {}

/// The single writer's increment: no atomic read-modify-write needed.
fn bump(counter: &AtomicU64, n: u64) {
    counter.store(
        counter.load(Ordering::Relaxed).wrapping_add(n),
        Ordering::Relaxed,
    );
}

// === impl Counts ===

impl Counts {
    fn plus(self, other: Counts) -> Counts {
        Counts {
            requests: self.requests.wrapping_add(other.requests),
            bytes: self.bytes.wrapping_add(other.bytes),
            micros: self.micros.wrapping_add(other.micros),
        }
    }
}

// === impl SlotLoad ===

impl SlotLoad {
    /// Tables for `workers` workers, with room for `named` named upstreams.
    pub fn new(workers: usize, named: usize) -> SlotLoad {
        SlotLoad {
            workers: (0..workers.max(1))
                .map(|_| Arc::new(WorkerLoad::new(named)))
                .collect(),
            window: Mutex::new(Window {
                last: Vec::new(),
                last_at: Instant::now(),
                ring: VecDeque::new(),
            }),
        }
    }

    /// The table of worker `index`, for it to keep.
    pub fn worker(&self, index: usize) -> Arc<WorkerLoad> {
        let n = self.workers.len();
        #[allow(
            clippy::indexing_slicing,
            reason = "`new` makes at least one table, and the index is taken modulo their number"
        )]
        self.workers[index % n].clone()
    }

    /// Upstreams counted: the default one and every named one.
    fn upstreams(&self) -> usize {
        self.workers
            .first()
            .map_or(0, |w| w.named.len())
            .saturating_add(1)
    }

    /// Every slot's counts so far, summed over the workers and over
    /// every upstream (slot `n` of each cluster added up): HOTKEYS' totals,
    /// as its keys are of every upstream.
    pub fn totals(&self) -> Vec<Counts> {
        let mut all = self.totals_of(0);
        for upstream in 1..self.upstreams() {
            let more = self.totals_of(upstream);
            for (total, c) in all.iter_mut().zip(more) {
                *total = total.plus(c);
            }
        }
        all
    }

    /// [`SlotLoad::totals`] of upstream `upstream` (empty while no
    /// request went to it).
    fn totals_of(&self, upstream: usize) -> Vec<Counts> {
        let mut totals = Vec::new();
        for worker in self.workers.iter() {
            let Some(table) = worker.table(upstream) else {
                continue;
            };
            if totals.is_empty() {
                totals = vec![Counts::default(); usize::from(SLOT_COUNT)];
            }
            for (total, c) in totals.iter_mut().zip(table.iter()) {
                *total = total.plus(c.counts());
            }
        }
        totals
    }

    /// Closes the current interval (from a timer every [`INTERVAL`]).
    pub fn tick(&self) {
        let totals: Vec<Vec<Counts>> = (0..self.upstreams()).map(|u| self.totals_of(u)).collect();
        let now = Instant::now();
        let Ok(mut window) = self.window.lock() else {
            return;
        };
        let deltas = totals
            .iter()
            .enumerate()
            .map(|(u, now)| {
                let before = window.last.get(u).map_or(&[][..], Vec::as_slice);
                now.iter()
                    .enumerate()
                    .map(|(i, now)| {
                        let before = before.get(i).copied().unwrap_or_default();
                        let d =
                            |a: u64, b: u64| u32::try_from(a.wrapping_sub(b)).unwrap_or(u32::MAX);
                        (d(now.requests, before.requests), d(now.bytes, before.bytes))
                    })
                    .collect()
            })
            .collect();
        let started = window.last_at;
        window.ring.push_back(Interval { started, deltas });
        while window.ring.len() > RING {
            window.ring.pop_front();
        }
        window.last = totals;
        window.last_at = now;
    }

    /// The `n` slots of `upstream` with the most requests per second over
    /// the recent window (the ring's intervals and what came since),
    /// busiest first; slots without requests are left out.
    pub fn hottest(&self, n: usize, upstream: Upstream) -> Vec<SlotRate> {
        let u = usize::from(upstream);
        let totals = self.totals_of(u);
        let now = Instant::now();
        let Ok(window) = self.window.lock() else {
            return Vec::new();
        };
        let since = window.ring.front().map_or(window.last_at, |i| i.started);
        let secs = now.saturating_duration_since(since).as_secs_f64().max(1e-3);
        let last = window.last.get(u).map_or(&[][..], Vec::as_slice);
        let mut rates: Vec<SlotRate> = Slot::all()
            .filter_map(|slot| {
                let i = slot.index();
                let live = totals.get(i)?;
                let last = last.get(i).copied().unwrap_or_default();
                let mut requests = live.requests.wrapping_sub(last.requests);
                let mut bytes = live.bytes.wrapping_sub(last.bytes);
                for interval in &window.ring {
                    let delta = interval.deltas.get(u).and_then(|d| d.get(i));
                    let (r, b) = delta.copied().unwrap_or_default();
                    requests = requests.saturating_add(u64::from(r));
                    bytes = bytes.saturating_add(u64::from(b));
                }
                (requests > 0).then(|| SlotRate {
                    slot,
                    requests_per_sec: requests as f64 / secs,
                    bytes_per_sec: bytes as f64 / secs,
                })
            })
            .collect();
        rates.sort_by(|a, b| {
            b.requests_per_sec
                .total_cmp(&a.requests_per_sec)
                .then(b.bytes_per_sec.total_cmp(&a.bytes_per_sec))
        });
        rates.truncate(n);
        rates
    }

    /// Each upstream's counts so far, the default one's first (the sum of
    /// its slots').
    pub fn by_upstream(&self) -> Vec<UpstreamCounts> {
        (0..self.upstreams())
            .map(|u| UpstreamCounts {
                counts: self
                    .totals_of(u)
                    .into_iter()
                    .fold(Counts::default(), Counts::plus),
                errors: self
                    .workers
                    .iter()
                    .filter_map(|w| w.errors.get(u))
                    .fold(0, |n, e| n.wrapping_add(e.load(Ordering::Relaxed))),
            })
            .collect()
    }

    /// The counts so far added up by each slot's master, for every
    /// upstream's map in `maps` (the default one's first, upstream `n` at
    /// `n`), in the order of each map's masters. A slot that changed
    /// masters brings its past counts to its new one.
    pub fn by_master(&self, maps: &[Arc<SlotMap>]) -> Vec<MasterLoad> {
        let mut out = Vec::new();
        for (u, map) in maps.iter().enumerate() {
            let totals = self.totals_of(u);
            let mut masters: Vec<MasterLoad> = map
                .masters()
                .into_iter()
                .map(|addr| MasterLoad {
                    addr,
                    upstream: u,
                    counts: Counts::default(),
                })
                .collect();
            for (slot, counts) in Slot::all().zip(totals) {
                let Some(owner) = map.master(slot) else {
                    continue;
                };
                if let Some(m) = masters.iter_mut().find(|m| &m.addr == owner) {
                    m.counts = m.counts.plus(counts);
                }
            }
            out.extend(masters);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_sum_over_workers_and_rates_rank_the_busiest_slot_first() {
        let load = SlotLoad::new(2, 0);
        let (hot, cold) = (Slot::for_key(b"hot"), Slot::for_key(b"cold"));
        for _ in 0..10 {
            load.worker(0)
                .add(Place::of(hot), 100, Duration::from_micros(5));
            load.worker(1)
                .add(Place::of(hot), 100, Duration::from_micros(5));
        }
        load.worker(1).add(Place::of(cold), 10, Duration::ZERO);
        let totals = load.totals();
        assert_eq!(
            totals[hot.index()],
            Counts {
                requests: 20,
                bytes: 2000,
                micros: 100
            }
        );
        load.tick();
        load.worker(0).add(Place::of(hot), 100, Duration::ZERO);
        let rates = load.hottest(5, 0);
        assert_eq!(rates.len(), 2);
        assert_eq!(rates[0].slot, hot);
        assert_eq!(rates[1].slot, cold);
        assert!(rates[0].requests_per_sec > rates[1].requests_per_sec);
        assert_eq!(load.hottest(1, 0).len(), 1);
    }

    #[test]
    fn a_named_upstream_has_its_own_table_once_it_had_a_request() {
        let load = SlotLoad::new(2, 2);
        let slot = Slot::for_key(b"user:1");
        assert!(load.totals_of(1).is_empty() && load.totals_of(2).is_empty());
        let place = Place { upstream: 1, slot };
        load.worker(0).add(place, 50, Duration::ZERO);
        load.worker(1).add(place, 50, Duration::ZERO);
        load.worker(1).add(Place::of(slot), 10, Duration::ZERO);
        assert_eq!(load.totals_of(1)[slot.index()].requests, 2);
        assert!(load.totals_of(2).is_empty(), "upstream 2 had no request");
        load.tick();
        load.worker(0).add(place, 50, Duration::ZERO);
        let rates = load.hottest(5, 1);
        assert_eq!(rates.len(), 1);
        assert_eq!(rates[0].slot, slot);
        assert!(load.hottest(5, 2).is_empty());
        let by = load.by_upstream();
        let requests: Vec<u64> = by.iter().map(|u| u.counts.requests).collect();
        assert_eq!(requests, [1, 3, 0]);
        assert_eq!(by[1].counts.bytes, 150);
        // HOTKEYS' totals: every upstream's, slot by slot.
        assert_eq!(load.totals()[slot.index()].requests, 4);
    }
}
