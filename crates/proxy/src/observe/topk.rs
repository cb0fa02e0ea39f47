//! The heaviest keys of a weighted stream in bounded memory: a count-min
//! sketch (two rows, conservative update) estimates every key's weight, and
//! a min-heap indexed by key keeps the `capacity` keys with the largest
//! estimates. An estimate never understates a key's weight (it may add what
//! other keys of the same buckets weigh).
//!
//! A key whose estimate is below the lightest kept one cannot be in the
//! heap (a kept key's count is an earlier estimate of it, and estimates
//! only grow), so most updates of a long tail cost one hash and two
//! counters, and never touch the heap, the map or the allocator.
//!
//! [`TopK::space_saving`] (no sketch: a new key takes the lightest one's
//! place and inherits its count) is the plain Space-Saving it was measured
//! against.

use std::hash::{BuildHasher, Hasher};

use rustc_hash::{FxBuildHasher, FxHashMap as HashMap};

/// The summary, at most `capacity` keys.
#[derive(Debug)]
pub struct TopK {
    capacity: usize,
    /// Two rows of counters, `width` each (a power of two).
    sketch: Vec<u64>,
    width: usize,
    /// A min-heap on `count` of places in `kept`.
    heap: Vec<Node>,
    /// The kept keys; each stays at its place until it is evicted, so
    /// that moving a key in the heap only rewrites two places.
    kept: Vec<Kept>,
    /// Each kept key's place in `kept`, by the key's hash.
    index: HashMap<u64, usize>,
    /// Every weight added.
    total: u64,
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
    /// Keeps `capacity` keys, with `width` counters a sketch row (rounded
    /// up to a power of two).
    pub fn new(capacity: usize, width: usize) -> TopK {
        let width = width.max(1).next_power_of_two();
        TopK {
            sketch: vec![0; width.saturating_mul(2)],
            width,
            ..TopK::space_saving(capacity)
        }
    }

    /// Plain Space-Saving: no sketch, a new key inherits the lightest
    /// key's count.
    pub fn space_saving(capacity: usize) -> TopK {
        let capacity = capacity.max(1);
        TopK {
            capacity,
            sketch: Vec::new(),
            width: 0,
            // Sized once: filling the summary neither grows nor rehashes.
            heap: Vec::with_capacity(capacity),
            kept: Vec::with_capacity(capacity),
            index: HashMap::with_capacity_and_hasher(capacity, FxBuildHasher),
            total: 0,
        }
    }

    /// The hash [`TopK::add`] takes: computed once for a key that goes
    /// into several summaries. Its two halves pick the key's counter in
    /// each sketch row.
    pub fn hash(key: &[u8]) -> u64 {
        let mut hasher = FxBuildHasher.build_hasher();
        hasher.write(key);
        hasher.finish()
    }

    /// The sum of every weight added.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Adds `weight` to `key`, whose [`TopK::hash`] is `hash`.
    #[inline]
    pub fn add(&mut self, key: &[u8], hash: u64, weight: u64) {
        self.total = self.total.saturating_add(weight);
        let estimate = self.update(hash, weight);
        if let Some(e) = estimate {
            // A kept count is an earlier estimate of its key, never above
            // the estimate now: a key at or under the lightest count is
            // under every kept key, known without looking further.
            if self.heap.len() >= self.capacity && e <= self.heap.first().map_or(0, |n| n.count) {
                return; // not one of the kept keys (see the module's doc)
            }
        }
        self.keep(key, hash, weight, estimate);
    }

    /// The rest of [`TopK::add`], for a key that may be one of the kept.
    #[inline(never)]
    fn keep(&mut self, key: &[u8], hash: u64, weight: u64, estimate: Option<u64>) {
        if let Some(e) = estimate {
            if self.heap.len() >= self.capacity && e <= self.lightest() {
                return;
            }
        }
        if let Some(&place) = self.index.get(&hash) {
            let Some(kept) = self.kept.get(place) else {
                return;
            };
            if *kept.key != *key {
                return; // another key with the same hash: left out
            }
            let at = kept.at;
            if let Some(node) = self.heap.get_mut(at) {
                node.count = estimate.unwrap_or_else(|| node.count.saturating_add(weight));
            }
            self.sift_down(at);
            return;
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
            return;
        }
        // The lightest key gives its place to this one.
        let Some(root) = self.heap.first_mut() else {
            return;
        };
        root.count = estimate.unwrap_or_else(|| root.count.saturating_add(weight));
        let place = root.place;
        let Some(kept) = self.kept.get_mut(place) else {
            return;
        };
        let old = std::mem::replace(&mut kept.hash, hash);
        if kept.key.capacity() > key.len().max(64).saturating_mul(KEY_SLACK) {
            kept.key = key.to_vec();
        } else {
            kept.key.clear();
            kept.key.extend_from_slice(key);
        }
        self.index.remove(&old);
        self.index.insert(hash, place);
        self.sift_down(0);
    }

    /// The keys with their counts, heaviest first.
    pub fn list(&self) -> Vec<(&[u8], u64)> {
        let mut all: Vec<(&[u8], u64)> = self
            .heap
            .iter()
            .filter_map(|n| Some((&*self.kept.get(n.place)?.key, n.count)))
            .collect();
        all.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        all
    }

    /// The two counters of `hash`.
    fn buckets(&self, hash: u64) -> (usize, usize) {
        let mask = self.width.wrapping_sub(1);
        let a = usize::try_from(hash).unwrap_or(0) & mask;
        let b = usize::try_from(hash >> 32).unwrap_or(0) & mask | self.width;
        (a, b)
    }

    fn read(&self, (a, b): (usize, usize)) -> u64 {
        let get = |at| self.sketch.get(at).copied().unwrap_or(0);
        get(a).min(get(b))
    }

    /// Adds `weight` to the key's counters (only to those at its lowest:
    /// conservative update) and returns its new estimate; `None` without
    /// a sketch.
    fn update(&mut self, hash: u64, weight: u64) -> Option<u64> {
        if self.width == 0 {
            return None;
        }
        let at = self.buckets(hash);
        let estimate = self.read(at).saturating_add(weight);
        for i in [at.0, at.1] {
            if let Some(c) = self.sketch.get_mut(i) {
                *c = (*c).max(estimate);
            }
        }
        Some(estimate)
    }

    /// The lightest kept key's count, brought up to its estimate now (a
    /// kept count is the estimate when it was last added to).
    fn lightest(&mut self) -> u64 {
        for _ in 0..4 {
            let Some(root) = self.heap.first() else {
                return 0;
            };
            let Some(kept) = self.kept.get(root.place) else {
                break;
            };
            let now = self.read(self.buckets(kept.hash));
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
            let left = at.saturating_mul(2).saturating_add(1);
            let Some(&l) = self.heap.get(left) else {
                break;
            };
            let (child, lighter) = match self.heap.get(left.saturating_add(1)) {
                Some(&r) if r.count < l.count => (left.saturating_add(1), r),
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
mod tests {
    use super::*;

    /// A Zipf(1) stream over `n` keys, from a fixed seed.
    pub(crate) fn zipf(n: usize, len: usize, seed: u64) -> Vec<usize> {
        zipf_s(n, len, 1.0, seed)
    }

    #[test]
    fn exact_while_under_capacity() {
        for mut top in [TopK::new(4, 1024), TopK::space_saving(4)] {
            for (key, w) in [(b"a", 5), (b"b", 1), (b"a", 2), (b"c", 9)] {
                top.add(key, TopK::hash(key), w);
            }
            assert_eq!(
                top.list(),
                vec![(&b"c"[..], 9), (&b"a"[..], 7), (&b"b"[..], 1)]
            );
            assert_eq!(top.total(), 17);
        }
    }

    #[test]
    fn finds_the_heavy_keys_of_a_skewed_stream_in_few_counters() {
        // 10,000 keys, 200,000 updates, 100 counters (10 per key asked).
        let stream = zipf(10_000, 200_000, 0x9e37_79b9_7f4a_7c15);
        let mut exact = vec![0u64; 10_000];
        let mut top = TopK::new(100, 1000);
        for &k in &stream {
            exact[k] += 1;
            let key = format!("key:{k}");
            top.add(key.as_bytes(), TopK::hash(key.as_bytes()), 1);
        }
        let mut truth: Vec<usize> = (0..10_000).collect();
        truth.sort_by_key(|&k| std::cmp::Reverse(exact[k]));
        let found: Vec<String> = top
            .list()
            .iter()
            .take(10)
            .map(|(k, _)| String::from_utf8_lossy(k).into_owned())
            .collect();
        let hits = truth[..10]
            .iter()
            .filter(|k| found.contains(&format!("key:{k}")))
            .count();
        assert!(hits >= 9, "{hits} of the top 10 found: {found:?}");
        assert!(top.heap.len() <= 100 && top.index.len() <= 100 && top.kept.len() <= 100);
    }

    #[test]
    fn heap_places_and_index_agree_after_many_evictions() {
        // Uniform over many keys with varying weights: most updates evict.
        let mut top = TopK::new(20, 16);
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for i in 0..20_000u64 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let key = format!("k{}{}", seed % 5_000, "x".repeat((seed % 7) as usize));
            top.add(key.as_bytes(), TopK::hash(key.as_bytes()), 1 + i % 5);
        }
        assert_eq!(top.heap.len(), 20);
        for (at, node) in top.heap.iter().enumerate() {
            let kept = &top.kept[node.place];
            assert_eq!(kept.at, at);
            assert_eq!(top.index[&kept.hash], node.place);
            assert_eq!(kept.hash, TopK::hash(&kept.key));
            for child in [2 * at + 1, 2 * at + 2] {
                if let Some(c) = top.heap.get(child) {
                    assert!(node.count <= c.count, "heap order at {at}");
                }
            }
        }
        assert_eq!(top.index.len(), 20);
    }

    /// The measurement behind the choice of structure: recall of the true
    /// top 10 and time per update of plain Space-Saving, the count-min
    /// sketch in front of a heap, and HeavyKeeper (Redis's), on a uniform
    /// and two Zipf streams. Prints its figures; run with
    /// `cargo test --release -p orthrus-proxy --lib topk -- --ignored --nocapture`.
    #[test]
    #[ignore = "a measurement, not a check"]
    fn top_k_structures_measured() {
        for s_exp in [0.0f64, 1.0, 2.0] {
            let n = 10_000;
            let stream = zipf_s(n, 500_000, s_exp, 0x1234_5678_9abc_def1);
            let mut exact = vec![0u64; n];
            for &k in &stream {
                exact[k] += 1;
            }
            let mut truth: Vec<usize> = (0..n).collect();
            truth.sort_by_key(|&k| std::cmp::Reverse(exact[k]));
            let truth: Vec<String> = truth[..10].iter().map(|k| format!("key:{k}")).collect();
            let keys: Vec<String> = stream.iter().map(|k| format!("key:{k}")).collect();

            let recall = |found: &[String]| truth.iter().filter(|k| found.contains(k)).count();
            let run = |name: &str, top: &mut dyn FnMut(&[u8]), list: &dyn Fn() -> Vec<String>| {
                let t = std::time::Instant::now();
                for k in &keys {
                    top(k.as_bytes());
                }
                let ns = t.elapsed().as_nanos() as f64 / keys.len() as f64;
                println!(
                    "zipf s={s_exp}: {name}: {}/10 in {ns:.0} ns/update",
                    recall(&list())
                );
            };
            let ss = std::cell::RefCell::new(TopK::space_saving(100));
            run(
                "space-saving, 100 keys",
                &mut |k| ss.borrow_mut().add(k, TopK::hash(k), 1),
                &|| names(&ss.borrow()),
            );
            let cm = std::cell::RefCell::new(TopK::new(100, 1000));
            run(
                "count-min 2x1024 + heap of 100",
                &mut |k| cm.borrow_mut().add(k, TopK::hash(k), 1),
                &|| names(&cm.borrow()),
            );
            let hk = std::cell::RefCell::new(HeavyKeeper::new(2, 1024, 100));
            run(
                "heavykeeper 2x1024 + 100 kept",
                &mut |k| hk.borrow_mut().add(k),
                &|| hk.borrow().top(),
            );
        }
    }

    fn names(top: &TopK) -> Vec<String> {
        top.list()
            .iter()
            .take(10)
            .map(|(k, _)| String::from_utf8_lossy(k).into_owned())
            .collect()
    }

    fn zipf_s(n: usize, len: usize, s: f64, mut seed: u64) -> Vec<usize> {
        let weights: Vec<f64> = (1..=n).map(|r| 1.0 / (r as f64).powf(s)).collect();
        let sum: f64 = weights.iter().sum();
        let mut cumulative = Vec::with_capacity(n);
        let mut acc = 0.0;
        for w in &weights {
            acc += w / sum;
            cumulative.push(acc);
        }
        (0..len)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let u = (seed >> 11) as f64 / (1u64 << 53) as f64;
                cumulative.partition_point(|&c| c < u).min(n - 1)
            })
            .collect()
    }

    /// HeavyKeeper (Yang et al., 2018) with unit weights: `rows` arrays of
    /// `width` (fingerprint, count) buckets, decay with probability 1.08^-count,
    /// and a top-k list of the estimated counts (as Redis's CHK keeps).
    struct HeavyKeeper {
        rows: Vec<Vec<(u64, u64)>>,
        top: Vec<(String, u64)>,
        k: usize,
        rng: u64,
    }

    impl HeavyKeeper {
        fn new(rows: usize, width: usize, k: usize) -> HeavyKeeper {
            HeavyKeeper {
                rows: vec![vec![(0, 0); width]; rows],
                top: Vec::new(),
                k,
                rng: 0x9e37_79b9_7f4a_7c15,
            }
        }

        fn hash(key: &[u8], seed: u64) -> u64 {
            use std::hash::{BuildHasher, Hasher};
            let mut h = rustc_hash::FxBuildHasher.build_hasher();
            h.write_u64(seed);
            h.write(key);
            h.finish() | 1
        }

        fn add(&mut self, key: &[u8]) {
            let fp = Self::hash(key, 0);
            let mut estimate = 0;
            for (j, row) in self.rows.iter_mut().enumerate() {
                let width = row.len() as u64;
                let bucket = &mut row[(Self::hash(key, j as u64 + 1) % width) as usize];
                if bucket.1 == 0 || bucket.0 == fp {
                    *bucket = (fp, bucket.1 + 1);
                    estimate = estimate.max(bucket.1);
                } else {
                    self.rng ^= self.rng << 13;
                    self.rng ^= self.rng >> 7;
                    self.rng ^= self.rng << 17;
                    let u = (self.rng >> 11) as f64 / (1u64 << 53) as f64;
                    if u < 1.08f64.powi(-(bucket.1.min(1000) as i32)) {
                        bucket.1 -= 1;
                        if bucket.1 == 0 {
                            *bucket = (fp, 1);
                            estimate = estimate.max(1);
                        }
                    }
                }
            }
            let key = String::from_utf8_lossy(key).into_owned();
            if let Some(entry) = self.top.iter_mut().find(|(k, _)| *k == key) {
                entry.1 = entry.1.max(estimate);
            } else if self.top.len() < self.k {
                self.top.push((key, estimate));
            } else if let Some(min) = self.top.iter_mut().min_by_key(|(_, c)| *c) {
                if estimate > min.1 {
                    *min = (key, estimate);
                }
            }
        }

        fn top(&self) -> Vec<String> {
            let mut top = self.top.clone();
            top.sort_by_key(|b| std::cmp::Reverse(b.1));
            top.into_iter().take(10).map(|(k, _)| k).collect()
        }
    }
}
