//! The heaviest keys of a stream in bounded memory, for [`METRICS`]
//! weights at once (bytes and time): a count-min sketch (two rows,
//! conservative update) estimates every key's weights, and a min-heap per
//! weight, indexed by key, keeps the `capacity` keys with the largest
//! estimates. An estimate never understates a key's weight (it may add
//! what other keys of the same cells weigh).
//!
//! Each cell of the sketch holds one counter per weight, so one hash and
//! one pair of cells serve every weight: the counters of one weight are
//! exactly those a sketch of its own would have.
//!
//! A key whose estimate is below the lightest kept one cannot be in the
//! heap (a kept key's count is an earlier estimate of it, and estimates
//! only grow), so most updates of a long tail cost one hash and two
//! cells, and never touch the heap, the map or the allocator.
//!
//! A key found kept has its next weights gathered aside, unlooked-at,
//! for as long as the same key comes again and again (a hot key's
//! repeats): they go into the sketch and the heaps together when another
//! key comes or the summaries are read. For the sketch (conservative
//! update) one update by the sum is exactly the updates one by one.
//!
//! [`TopK::space_saving`] (no sketch: a new key takes the lightest one's
//! place and inherits its count) is the plain Space-Saving it was measured
//! against.

use std::hash::{BuildHasher, Hasher};

use rustc_hash::FxBuildHasher;

mod index;

use index::Index;

/// How many weights every key carries.
pub const METRICS: usize = 2;

/// The summaries: at most `capacity` keys for each weight asked for.
#[derive(Debug)]
pub struct TopK {
    sketch: Sketch,
    tops: [Option<Top>; METRICS],
    /// Every weight added, of every metric (kept or not).
    totals: [u64; METRICS],
    /// The weights a kept key's repeats added since it was last found.
    pending: Pending,
}

/// Weights of one key, not yet in the sketch, the heaps or the totals.
#[derive(Debug, Default)]
struct Pending {
    /// Whether `key` is gathering.
    live: bool,
    hash: u64,
    key: Vec<u8>,
    weights: [u64; METRICS],
}

/// Two rows of `width` cells (a power of two; 0 for no sketch), a counter
/// per weight in each cell.
#[derive(Debug)]
struct Sketch {
    cells: Vec<[u64; METRICS]>,
    width: usize,
}

/// The kept keys of one weight.
#[derive(Debug)]
struct Top {
    capacity: usize,
    /// A min-heap on `count` of places in `kept`.
    heap: Vec<Node>,
    /// The kept keys; each stays at its place until it is evicted, so
    /// that moving a key in the heap only rewrites two places.
    kept: Vec<Kept>,
    /// Each kept key's place in `kept`, by the key's hash.
    index: Index,
    /// The lightest kept count once `capacity` keys are kept, else 0: an
    /// estimate at or under it is not let in.
    floor: u64,
}

#[derive(Clone, Copy, Debug)]
struct Node {
    count: u64,
    /// Where in `kept` its key is.
    place: usize,
}

#[derive(Debug)]
struct Kept {
    hash: u64,
    /// Reused by the next key that takes this place.
    key: Vec<u8>,
    /// Where in `heap` it is.
    at: usize,
}

/// A key buffer this many times as large as the key it takes next is
/// given back rather than reused (one long key does not pin its memory).
const KEY_SLACK: usize = 4;

// === impl TopK ===

impl TopK {
    /// Keeps `capacity` keys for each weight `metrics` asks for, with
    /// `width` cells a sketch row (rounded up to a power of two).
    pub fn new(capacity: usize, width: usize, metrics: [bool; METRICS]) -> TopK {
        let width = width.max(1).next_power_of_two();
        TopK {
            sketch: Sketch {
                cells: vec![[0; METRICS]; width.saturating_mul(2)],
                width,
            },
            tops: metrics.map(|on| on.then(|| Top::new(capacity))),
            totals: [0; METRICS],
            pending: Pending::default(),
        }
    }

    /// Plain Space-Saving for the first weight: no sketch, a new key
    /// inherits the lightest key's count.
    #[cfg(test)]
    pub fn space_saving(capacity: usize) -> TopK {
        TopK {
            sketch: Sketch {
                cells: Vec::new(),
                width: 0,
            },
            tops: std::array::from_fn(|m| (m == 0).then(|| Top::new(capacity))),
            totals: [0; METRICS],
            pending: Pending::default(),
        }
    }

    /// The hash [`TopK::add`] takes. Its two halves pick the key's cell
    /// in each sketch row.
    #[inline(always)]
    pub fn hash(key: &[u8]) -> u64 {
        let mut hasher = FxBuildHasher.build_hasher();
        hasher.write(key);
        hasher.finish()
    }

    /// The sum of every weight `metric` added, whether its keys are
    /// kept or not.
    pub fn total(&mut self, metric: usize) -> u64 {
        self.flush();
        self.totals.get(metric).copied().unwrap_or(0)
    }

    /// The keys kept for `metric`, with their counts, heaviest first.
    pub fn list(&mut self, metric: usize) -> Vec<(&[u8], u64)> {
        self.flush();
        self.top(metric).map_or_else(Vec::new, Top::list)
    }

    /// Adds the weights gathered for the pending key.
    #[inline(never)]
    fn flush(&mut self) {
        let pending = &mut self.pending;
        if !std::mem::take(&mut pending.live) {
            return;
        }
        let weights = std::mem::take(&mut pending.weights);
        if weights == [0; METRICS] {
            return; // found kept once, not repeated
        }
        let key = std::mem::take(&mut pending.key);
        self.add_now(&key, self.pending.hash, weights);
        self.pending.key = key;
    }

    fn top(&self, metric: usize) -> Option<&Top> {
        self.tops.get(metric).and_then(Option::as_ref)
    }

    /// Adds `weights` to `key`, whose [`TopK::hash`] is `hash`. Inlined
    /// into its one caller on the request path: only keys that may be
    /// kept call out.
    #[inline(always)]
    pub fn add(&mut self, key: &[u8], hash: u64, weights: [u64; METRICS]) {
        let pending = &mut self.pending;
        if pending.live {
            if pending.hash == hash && same(&pending.key, key) {
                for (p, w) in pending.weights.iter_mut().zip(weights) {
                    *p = p.wrapping_add(w);
                }
                return;
            }
            self.flush();
        }
        if self.add_now(key, hash, weights) {
            self.pend(key, hash);
        }
    }

    /// Makes `key`, just found kept, the one whose repeats are gathered.
    #[cold]
    fn pend(&mut self, key: &[u8], hash: u64) {
        let pending = &mut self.pending;
        if pending.key.capacity() > key.len().max(64).saturating_mul(KEY_SLACK) {
            pending.key = key.to_vec();
        } else {
            pending.key.clear();
            pending.key.extend_from_slice(key);
        }
        pending.hash = hash;
        pending.live = true;
    }

    /// [`TopK::add`] without gathering: true if every heap already kept
    /// `key` (its next updates, if no other key comes between, change
    /// nothing but its counts and places: they can be gathered).
    #[inline(always)]
    fn add_now(&mut self, key: &[u8], hash: u64, weights: [u64; METRICS]) -> bool {
        // Wrapping: 2^64 bytes or nanoseconds are not reached.
        for (total, weight) in self.totals.iter_mut().zip(weights) {
            *total = total.wrapping_add(weight);
        }
        let estimates = self.sketch.update(hash, weights);
        let mut kept = true;
        for (m, (top, weight)) in self.tops.iter_mut().zip(weights).enumerate() {
            let Some(top) = top else { continue };
            let estimate = estimates.and_then(|e| e.get(m).copied());
            if let Some(e) = estimate {
                // A kept count is an earlier estimate of its key, never
                // above the estimate now: a key at or under the lightest
                // count is under every kept key, known without looking
                // further (see the module's doc).
                if e <= top.floor {
                    kept = false;
                    continue;
                }
            }
            kept &= top.keep(&self.sketch, m, (key, hash), weight, estimate);
            top.floor = match top.heap.first() {
                Some(root) if top.heap.len() >= top.capacity => root.count,
                _ => 0,
            };
        }
        kept
    }
}

/// Whether two keys are equal: a hot key of 8 to 16 bytes in two
/// compares of eight bytes, no call.
#[inline(always)]
fn same(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    if (8..=16).contains(&n) {
        let word = |s: &[u8], at: usize| {
            s.get(at..at.wrapping_add(8))
                .and_then(|w| <[u8; 8]>::try_from(w).ok())
                .map(u64::from_ne_bytes)
        };
        let last = n.wrapping_sub(8);
        return word(a, 0) == word(b, 0) && word(a, last) == word(b, last);
    }
    a == b
}

// === impl Sketch ===

impl Sketch {
    /// The cells of `hash`, one in each row.
    #[inline]
    fn cells(&self, hash: u64) -> (usize, usize) {
        let mask = self.width.wrapping_sub(1);
        let a = usize::try_from(hash).unwrap_or(0) & mask;
        let b = usize::try_from(hash >> 32).unwrap_or(0) & mask | self.width;
        (a, b)
    }

    /// The estimate of `metric` for the key of `hash`.
    fn read(&self, hash: u64, metric: usize) -> u64 {
        let (a, b) = self.cells(hash);
        let get = |at: usize| {
            self.cells
                .get(at)
                .and_then(|c| c.get(metric))
                .copied()
                .unwrap_or(0)
        };
        get(a).min(get(b))
    }

    /// Adds `weights` to the key's counters (only to those at its lowest:
    /// conservative update) and returns its new estimates; `None` without
    /// a sketch.
    #[inline(always)]
    fn update(&mut self, hash: u64, weights: [u64; METRICS]) -> Option<[u64; METRICS]> {
        if self.width == 0 {
            return None;
        }
        let (a, b) = self.cells(hash);
        let (&ca, &cb) = (self.cells.get(a)?, self.cells.get(b)?);
        let mut estimates = weights;
        for ((e, x), y) in estimates.iter_mut().zip(ca).zip(cb) {
            *e = x.min(y).wrapping_add(*e);
        }
        for at in [a, b] {
            if let Some(cell) = self.cells.get_mut(at) {
                for (c, e) in cell.iter_mut().zip(estimates) {
                    *c = (*c).max(e);
                }
            }
        }
        Some(estimates)
    }
}

// === impl Top ===

impl Top {
    fn new(capacity: usize) -> Top {
        let capacity = capacity.max(1);
        Top {
            capacity,
            // Sized once: filling the summary neither grows nor rehashes.
            heap: Vec::with_capacity(capacity),
            kept: Vec::with_capacity(capacity),
            index: Index::with_capacity(capacity),
            floor: 0,
        }
    }

    /// The rest of [`TopK::add`], for a key that may be one of the kept;
    /// true if it already was. A kept key's count is brought up to date
    /// before anything else (no refresh of the lightest count on its way),
    /// so that its repeats one by one and gathered leave the heap alike.
    #[inline(never)]
    fn keep(
        &mut self,
        sketch: &Sketch,
        metric: usize,
        (key, hash): (&[u8], u64),
        weight: u64,
        estimate: Option<u64>,
    ) -> bool {
        if let Some(place) = self.index.get(hash) {
            let Some(kept) = self.kept.get(place) else {
                return false;
            };
            if *kept.key != *key {
                return false; // another key with the same hash: left out
            }
            let at = kept.at;
            if let Some(node) = self.heap.get_mut(at) {
                node.count = estimate.unwrap_or_else(|| node.count.saturating_add(weight));
            }
            self.sift_down(at);
            return true;
        }
        if let Some(e) = estimate {
            if self.heap.len() >= self.capacity && e <= self.lightest(sketch, metric) {
                return false;
            }
        }
        if self.heap.len() < self.capacity {
            let at = self.heap.len();
            self.kept.push(Kept {
                hash,
                key: key.to_vec(),
                at,
            });
            self.heap.push(Node {
                count: estimate.unwrap_or(weight),
                place: at,
            });
            self.index.insert(hash, at);
            self.sift_up(at);
            return false;
        }
        // The lightest key gives its place to this one.
        let Some(root) = self.heap.first_mut() else {
            return false;
        };
        root.count = estimate.unwrap_or_else(|| root.count.saturating_add(weight));
        let place = root.place;
        let Some(kept) = self.kept.get_mut(place) else {
            return false;
        };
        let old = std::mem::replace(&mut kept.hash, hash);
        if kept.key.capacity() > key.len().max(64).saturating_mul(KEY_SLACK) {
            kept.key = key.to_vec();
        } else {
            kept.key.clear();
            kept.key.extend_from_slice(key);
        }
        self.index.remove(old);
        self.index.insert(hash, place);
        self.sift_down(0);
        false
    }

    /// The keys with their counts, heaviest first.
    fn list(&self) -> Vec<(&[u8], u64)> {
        let mut all: Vec<(&[u8], u64)> = self
            .heap
            .iter()
            .filter_map(|n| Some((&*self.kept.get(n.place)?.key, n.count)))
            .collect();
        all.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        all
    }

    /// The lightest kept key's count, brought up to its estimate now (a
    /// kept count is the estimate when it was last added to).
    fn lightest(&mut self, sketch: &Sketch, metric: usize) -> u64 {
        for _ in 0..4 {
            let Some(root) = self.heap.first() else {
                return 0;
            };
            let Some(kept) = self.kept.get(root.place) else {
                break;
            };
            let now = sketch.read(kept.hash, metric);
            if now <= root.count {
                break;
            }
            if let Some(root) = self.heap.first_mut() {
                root.count = now;
            }
            self.sift_down(0);
        }
        self.heap.first().map_or(0, |n| n.count)
    }

    /// Puts `node` at `at` of the heap, and tells its key where it is.
    fn place(&mut self, at: usize, node: Node) {
        if let Some(slot) = self.heap.get_mut(at) {
            *slot = node;
        }
        if let Some(kept) = self.kept.get_mut(node.place) {
            kept.at = at;
        }
    }

    fn sift_up(&mut self, mut at: usize) {
        let Some(&moving) = self.heap.get(at) else {
            return;
        };
        while at > 0 {
            let parent = (at - 1) / 2;
            let Some(&up) = self.heap.get(parent) else {
                break;
            };
            if up.count <= moving.count {
                break;
            }
            self.place(at, up);
            at = parent;
        }
        self.place(at, moving);
    }

    /// Moves the node at `at` down to its place: each lighter child moves
    /// up one level, and the node is written once, where it stops.
    fn sift_down(&mut self, mut at: usize) {
        let Some(&moving) = self.heap.get(at) else {
            return;
        };
        loop {
            // Places stay far below `usize::MAX` (a heap of at most 640).
            let left = at.wrapping_mul(2).wrapping_add(1);
            let Some(&l) = self.heap.get(left) else {
                break;
            };
            let right = left.wrapping_add(1);
            let (child, lighter) = match self.heap.get(right) {
                Some(&r) if r.count < l.count => (right, r),
                _ => (left, l),
            };
            if lighter.count >= moving.count {
                break;
            }
            self.place(at, lighter);
            at = child;
        }
        self.place(at, moving);
    }
}

#[cfg(test)]
mod tests;
