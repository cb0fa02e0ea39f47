//! The HOTKEYS session: one per process, fed by every worker.
//!
//! The request path reads one atomic, the session's generation (0 while
//! none collects). While one does, a worker samples 1 in `SAMPLE` keyed
//! requests (random gaps from a thread-local xorshift) and, when the reply
//! is taken, adds each key's share of the bytes and of the time at the
//! node (in nanoseconds: no division on the request path) to its own
//! [`TopK`] summaries, one sketch for both. Those sit behind a per-worker
//! mutex that only that worker and `HOTKEYS GET` take, with `try_lock` on
//! the request path: a worker never waits (a sample that meets GET
//! reading is dropped). A key longer than [`KEPT_BYTES`] is kept as its
//! first bytes and a marker ([`name`]), so a session's memory is bounded by
//! its COUNT, not by the keys.
//! Totals for every command come from the per-slot load counters
//! (`observe::load`), read at START and at GET.

use std::cell::Cell;
use std::num::NonZeroU32;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use orthrus_cluster::{SLOT_COUNT, Slot};

use super::load::{Counts, SlotLoad};
use super::topk::{METRICS, TopK};

mod name;

use name::{KEPT_BYTES, Shortened};

/// Redis's bound on `COUNT`.
pub const MAX_COUNT: usize = 64;

/// Every session's state.
pub struct HotKeys {
    /// The collecting session's number; 0 when none collects.
    generation: AtomicU32,
    /// 1 in this many keyed requests is sampled.
    sample: AtomicU32,
    /// Sessions started so far: the next one's number.
    starts: AtomicU32,
    session: Mutex<Option<Session>>,
    /// parking_lot's: no poisoning to check, an unlock of one atomic
    /// exchange on the request path.
    workers: Box<[parking_lot::Mutex<WorkerTops>]>,
}

/// What `HOTKEYS START` asked for.
#[derive(Clone, Debug)]
pub struct Options {
    pub cpu: bool,
    pub net: bool,
    pub count: usize,
    pub duration: Option<Duration>,
    pub sample: u32,
    /// Sorted, without repeats; `None` for every slot.
    pub slots: Option<Vec<u16>>,
}

/// A sampled request's keys, as places in its frame, carried until its
/// reply is taken (no copy; no allocation for a one-key request).
#[derive(Debug)]
pub struct Sample {
    generation: NonZeroU32,
    /// The first key's `start..end`.
    first: (u32, u32),
    /// The others', for a request of several keys (empty: no allocation).
    more: Box<[(u32, u32)]>,
}

/// What `HOTKEYS GET` reports.
#[derive(Debug)]
pub struct Report {
    pub options: Options,
    pub active: bool,
    pub start_unix_ms: u64,
    pub duration_ms: u64,
    /// Counts of every keyed request since START, all slots and selected ones.
    pub all: Counts,
    pub selected: Counts,
    /// Bytes and microseconds of the sampled requests in the selected slots.
    pub sampled_bytes: u64,
    pub sampled_micros: u64,
    /// orthrus's own CPU time since START, user and system, in ms.
    pub cpu_user_ms: u64,
    pub cpu_sys_ms: u64,
    pub total_net_bytes: u64,
    pub by_cpu: Vec<(Vec<u8>, u64)>,
    pub by_net: Vec<(Vec<u8>, u64)>,
}

/// Why START was refused.
#[derive(Debug, PartialEq, Eq)]
pub struct AlreadyRunning;

struct Session {
    options: Options,
    generation: u32,
    /// `None` once stopped.
    running_since: Option<Instant>,
    duration: Duration,
    start_unix_ms: u64,
    /// Per-slot totals at START.
    baseline: Vec<Counts>,
    /// Per-slot totals at STOP.
    end: Option<Vec<Counts>>,
    cpu_at_start: (u64, u64),
    cpu_at_end: Option<(u64, u64)>,
}

#[derive(Default)]
struct WorkerTops {
    generation: u32,
    slots: Option<Box<[u64]>>,
    /// Bytes ([`NET`]) and nanoseconds at the node ([`CPU`]), with their
    /// totals over every sampled key of the selected slots.
    tops: Option<TopK>,
}

/// The summaries' weights: request and reply bytes, time at the node.
const NET: usize = 0;
const CPU: usize = 1;

thread_local! {
    static RNG: Cell<u64> = Cell::new(seed());
    /// The session, and how many requests this worker lets pass before
    /// it samples one for it.
    static SKIP: Cell<(u32, u32)> = const { Cell::new((0, 0)) };
}

fn seed() -> u64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let here = &nanos as *const u32 as usize;
    (u64::from(nanos) ^ (here as u64).rotate_left(32)) | 1
}

/// How many requests to let pass before the next sample: uniform in
/// `0..2 * ratio - 1`, so 1 in `ratio` on average, drawn once per sample
/// (a request that is not sampled pays a decrement).
fn gap(ratio: u32) -> u32 {
    RNG.with(|rng| {
        let mut x = rng.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        rng.set(x);
        let span = u64::from(ratio).saturating_mul(2).saturating_sub(1).max(1);
        u32::try_from(x % span).unwrap_or(0)
    })
}

/// orthrus's CPU time so far (user, system) in ms, from `/proc/self/stat`
/// (clock ticks of 10 ms, Linux's fixed `USER_HZ`); 0 elsewhere.
fn cpu_ms() -> (u64, u64) {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return (0, 0);
    };
    // Fields after the command name, which ends with the last ')'.
    let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let mut fields = rest.split_whitespace().skip(11);
    let mut next = || {
        fields
            .next()
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let (user, sys) = (next(), next());
    (user.saturating_mul(10), sys.saturating_mul(10))
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn slot_set(slots: &[u16]) -> Box<[u64]> {
    let mut set = vec![0u64; usize::from(SLOT_COUNT / 64)].into_boxed_slice();
    for &s in slots {
        if let Some(word) = set.get_mut(usize::from(s / 64)) {
            *word |= 1 << (s % 64);
        }
    }
    set
}

fn in_set(set: &[u64], slot: Slot) -> bool {
    let s = slot.get();
    set.get(usize::from(s / 64))
        .is_some_and(|word| word & (1 << (s % 64)) != 0)
}

fn sum(totals: &[Counts], slots: Option<&[u16]>) -> Counts {
    let add = |a: Counts, b: &Counts| Counts {
        requests: a.requests.wrapping_add(b.requests),
        bytes: a.bytes.wrapping_add(b.bytes),
        micros: a.micros.wrapping_add(b.micros),
    };
    match slots {
        None => totals.iter().fold(Counts::default(), add),
        Some(slots) => slots
            .iter()
            .filter_map(|&s| totals.get(usize::from(s)))
            .fold(Counts::default(), add),
    }
}

fn minus(a: Counts, b: Counts) -> Counts {
    Counts {
        requests: a.requests.wrapping_sub(b.requests),
        bytes: a.bytes.wrapping_sub(b.bytes),
        micros: a.micros.wrapping_sub(b.micros),
    }
}

// === impl Sample ===

impl Sample {
    /// A sample for session `generation` of a request with one key, at
    /// `start..end` of its frame; `None` when no session collects.
    #[inline]
    pub fn new(generation: u32, first: (u32, u32)) -> Option<Sample> {
        Some(Sample {
            generation: NonZeroU32::new(generation)?,
            first,
            more: Box::default(),
        })
    }

    /// A sample of a request's keys, `start..end` each, in order (those
    /// beyond `u32` left out); `None` without any.
    pub fn of_keys(
        generation: u32,
        keys: impl IntoIterator<Item = (usize, usize)>,
    ) -> Option<Sample> {
        let mut keys = keys.into_iter().filter_map(|(start, end)| {
            Some((u32::try_from(start).ok()?, u32::try_from(end).ok()?))
        });
        Some(Sample {
            generation: NonZeroU32::new(generation)?,
            first: keys.next()?,
            more: keys.collect(),
        })
    }
}

// === impl HotKeys ===

impl HotKeys {
    pub fn new(workers: usize) -> HotKeys {
        HotKeys {
            generation: AtomicU32::new(0),
            sample: AtomicU32::new(1),
            starts: AtomicU32::new(0),
            session: Mutex::new(None),
            workers: (0..workers.max(1))
                .map(|_| parking_lot::Mutex::new(WorkerTops::default()))
                .collect(),
        }
    }

    /// On the request path: the collecting session's number if this keyed
    /// request is to be sampled.
    #[inline]
    pub fn sampled(&self) -> Option<u32> {
        let generation = self.generation.load(Ordering::Acquire);
        if generation == 0 {
            return None;
        }
        let ratio = self.sample.load(Ordering::Relaxed);
        if ratio <= 1 {
            return Some(generation);
        }
        SKIP.with(|skip| match skip.get() {
            (of, n) if of == generation && n > 0 => {
                skip.set((of, n - 1));
                None
            }
            _ => {
                skip.set((generation, gap(ratio)));
                Some(generation)
            }
        })
    }

    /// Adds a sampled request's reply: each key (a range of `frame`) gets
    /// an equal share of the request and reply bytes and of the time at
    /// the node. Inlined into its one caller, itself out of the way of
    /// requests no session samples.
    #[inline]
    pub fn record(
        &self,
        worker: usize,
        (sample, frame): (Sample, &[u8]),
        bytes: usize,
        took: Option<Duration>,
    ) {
        let Some(tops) = self.workers.get(worker) else {
            return;
        };
        let Some(mut tops) = tops.try_lock() else {
            return; // GET is reading: never wait on the request path
        };
        let tops = &mut *tops;
        if tops.generation != sample.generation.get() {
            return;
        }
        let bytes = u64::try_from(bytes).unwrap_or(u64::MAX);
        // In nanoseconds: no division on the way (GET reports µs).
        let nanos = took.map_or(0, |t| {
            t.as_secs()
                .saturating_mul(1_000_000_000)
                .saturating_add(u64::from(t.subsec_nanos()))
        });
        if sample.more.is_empty() {
            tops.add(frame, sample.first, (bytes, nanos));
        } else {
            tops.add_shares(frame, (sample.first, &sample.more), (bytes, nanos));
        }
    }

    /// HOTKEYS START: a new session, replacing a stopped one.
    pub fn start(&self, options: Options, load: &SlotLoad) -> Result<(), AlreadyRunning> {
        let Ok(mut session) = self.session.lock() else {
            return Err(AlreadyRunning);
        };
        Self::expire(&mut session, &self.generation, load);
        if session.as_ref().is_some_and(|s| s.running_since.is_some()) {
            return Err(AlreadyRunning);
        }
        let generation = self
            .starts
            .fetch_add(1, Ordering::Relaxed)
            .wrapping_add(1)
            .max(1);
        // 10 keys kept per key asked for, as Redis; 1000 counters a sketch
        // row per key asked for (rounded up to a power of two: 16,384 at
        // COUNT 10), ten times Redis's 100: with those, a flat stream's
        // estimates rose with the cells' shared noise and one sampled key
        // in seven beat the lightest kept count and evicted it; now about
        // one in 75 reaches a heap at all.
        let capacity = options.count.saturating_mul(10);
        let width = options.count.saturating_mul(1000);
        let set = options.slots.as_deref().map(slot_set);
        let mut metrics = [false; METRICS];
        metrics[NET] = options.net;
        metrics[CPU] = options.cpu;
        for tops in self.workers.iter() {
            *tops.lock() = WorkerTops {
                generation,
                slots: set.clone(),
                tops: Some(TopK::new(capacity, width, metrics)),
            };
        }
        self.sample.store(options.sample.max(1), Ordering::Relaxed);
        *session = Some(Session {
            duration: options.duration.unwrap_or_default(),
            options,
            generation,
            running_since: Some(Instant::now()),
            start_unix_ms: unix_ms(),
            baseline: load.totals(),
            end: None,
            cpu_at_start: cpu_ms(),
            cpu_at_end: None,
        });
        self.generation.store(generation, Ordering::Release);
        Ok(())
    }

    /// Whether a session collects now.
    pub fn running(&self, load: &SlotLoad) -> bool {
        self.tick(load);
        self.generation.load(Ordering::Acquire) != 0
    }

    /// HOTKEYS STOP: false when no session collects.
    pub fn stop(&self, load: &SlotLoad) -> bool {
        let Ok(mut session) = self.session.lock() else {
            return false;
        };
        Self::expire(&mut session, &self.generation, load);
        match session.as_mut() {
            Some(s) if s.running_since.is_some() => {
                Self::end(s, &self.generation, load, false);
                true
            }
            _ => false,
        }
    }

    /// HOTKEYS RESET: false while a session collects.
    pub fn reset(&self, load: &SlotLoad) -> bool {
        let Ok(mut session) = self.session.lock() else {
            return false;
        };
        Self::expire(&mut session, &self.generation, load);
        if session.as_ref().is_some_and(|s| s.running_since.is_some()) {
            return false;
        }
        *session = None;
        for tops in self.workers.iter() {
            *tops.lock() = WorkerTops::default();
        }
        true
    }

    /// Ends a session whose DURATION has passed (from a timer, and before
    /// every HOTKEYS command).
    pub fn tick(&self, load: &SlotLoad) {
        if self.generation.load(Ordering::Relaxed) == 0 {
            return;
        }
        if let Ok(mut session) = self.session.lock() {
            Self::expire(&mut session, &self.generation, load);
        }
    }

    /// HOTKEYS GET: `None` when there is no session.
    pub fn report(&self, load: &SlotLoad) -> Option<Report> {
        let Ok(mut session) = self.session.lock() else {
            return None;
        };
        Self::expire(&mut session, &self.generation, load);
        let s = session.as_ref()?;
        let options = s.options.clone();
        let now;
        let end = match &s.end {
            Some(end) => end,
            None => {
                now = load.totals();
                &now
            }
        };
        let slots = options.slots.as_deref();
        let all = minus(sum(end, None), sum(&s.baseline, None));
        let selected = minus(sum(end, slots), sum(&s.baseline, slots));
        let (user1, sys1) = s.cpu_at_end.unwrap_or_else(cpu_ms);
        let (user0, sys0) = s.cpu_at_start;
        let duration = match s.running_since {
            Some(since) => since.elapsed(),
            None => s.duration,
        };
        let mut cpu = Merged::default();
        let mut net = Merged::default();
        let (mut sampled_bytes, mut sampled_nanos) = (0u64, 0u64);
        for tops in self.workers.iter() {
            let mut tops = tops.lock();
            if tops.generation != s.generation {
                continue;
            }
            if let Some(top) = &mut tops.tops {
                sampled_bytes = sampled_bytes.saturating_add(top.total(NET));
                sampled_nanos = sampled_nanos.saturating_add(top.total(CPU));
                cpu.add(top, CPU);
                net.add(top, NET);
            }
        }
        Some(Report {
            active: s.running_since.is_some(),
            start_unix_ms: s.start_unix_ms,
            duration_ms: u64::try_from(duration.as_millis()).unwrap_or(u64::MAX),
            all,
            selected,
            sampled_bytes,
            sampled_micros: sampled_nanos / 1_000,
            cpu_user_ms: user1.saturating_sub(user0),
            cpu_sys_ms: sys1.saturating_sub(sys0),
            total_net_bytes: net.total,
            by_cpu: cpu.top(options.count, 1_000),
            by_net: net.top(options.count, 1),
            options,
        })
    }

    fn expire(session: &mut Option<Session>, generation: &AtomicU32, load: &SlotLoad) {
        if let Some(s) = session.as_mut() {
            let due = s
                .running_since
                .is_some_and(|since| !s.duration.is_zero() && since.elapsed() >= s.duration);
            if due {
                Self::end(s, generation, load, true);
            }
        }
    }

    /// Stops collecting. A session that ran its DURATION reports that
    /// duration; one stopped reports how long it ran.
    fn end(s: &mut Session, generation: &AtomicU32, load: &SlotLoad, expired: bool) {
        generation.store(0, Ordering::Release);
        if let Some(since) = s.running_since.take() {
            if !expired {
                s.duration = since.elapsed();
            }
        }
        s.end = Some(load.totals());
        s.cpu_at_end = Some(cpu_ms());
    }
}

// === impl WorkerTops ===

impl WorkerTops {
    /// Adds each key of a request of several keys an equal share.
    #[cold]
    fn add_shares(
        &mut self,
        frame: &[u8],
        (first, more): ((u32, u32), &[(u32, u32)]),
        (bytes, nanos): (u64, u64),
    ) {
        let keys = u64::try_from(more.len())
            .unwrap_or(u64::MAX)
            .saturating_add(1);
        let share = (bytes / keys, nanos / keys);
        for &range in std::iter::once(&first).chain(more) {
            self.add(frame, range, share);
        }
    }

    /// Adds one key's share of a sampled request: `bytes`, and `nanos` at
    /// the node.
    #[inline(always)]
    fn add(&mut self, frame: &[u8], (start, end): (u32, u32), (bytes, nanos): (u64, u64)) {
        let Some(key) = frame.get(start as usize..end as usize) else {
            return;
        };
        if let Some(set) = self.slots.as_deref() {
            if !in_set(set, Slot::for_key(key)) {
                return;
            }
        }
        if let Some(top) = &mut self.tops {
            let mut weights = [0; METRICS];
            weights[NET] = bytes;
            weights[CPU] = nanos;
            let hash = TopK::hash(key);
            if key.len() <= KEPT_BYTES {
                top.add(key, hash, weights);
            } else {
                add_long(top, key, hash, weights);
            }
        }
    }
}

/// Adds a key longer than [`KEPT_BYTES`] under its shortened name.
#[cold]
#[inline(never)]
fn add_long(top: &mut TopK, key: &[u8], hash: u64, weights: [u64; METRICS]) {
    top.add(Shortened::new(key, hash).as_bytes(), hash, weights);
}

/// Every worker's summary of one metric, added up by key.
#[derive(Default)]
struct Merged {
    counts: rustc_hash::FxHashMap<Vec<u8>, u64>,
    total: u64,
}

impl Merged {
    /// Adds `metric` of a worker's summaries.
    fn add(&mut self, top: &mut TopK, metric: usize) {
        self.total = self.total.saturating_add(top.total(metric));
        for (key, count) in top.list(metric) {
            let c = self.counts.entry(key.to_vec()).or_default();
            *c = c.saturating_add(count);
        }
    }

    /// The `count` heaviest keys, their counts divided by `unit`.
    fn top(self, count: usize, unit: u64) -> Vec<(Vec<u8>, u64)> {
        let mut all: Vec<(Vec<u8>, u64)> = self
            .counts
            .into_iter()
            .map(|(key, c)| (key, c / unit.max(1)))
            .filter(|(_, c)| *c > 0)
            .collect();
        all.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        all.truncate(count);
        all
    }
}

#[cfg(test)]
mod tests;
