//! A weighted Space-Saving summary: the heaviest keys of a stream in a
//! fixed number of counters. A key already counted adds its weight; a new
//! key takes the place of the lightest one and inherits its count (so a
//! count may overstate a key by at most the weight it inherited, never
//! understate it). The counters are a min-heap indexed by key, so an
//! update costs a hash lookup and O(log capacity) moves.

use rustc_hash::FxHashMap as HashMap;

/// The summary, at most `capacity` keys.
#[derive(Debug)]
pub struct TopK {
    capacity: usize,
    /// A min-heap on `count`.
    heap: Vec<Counter>,
    /// Each key's place in `heap`.
    index: HashMap<Box<[u8]>, usize>,
    /// Every weight added.
    total: u64,
}

#[derive(Debug)]
struct Counter {
    key: Box<[u8]>,
    count: u64,
}

// === impl TopK ===

impl TopK {
    pub fn new(capacity: usize) -> TopK {
        TopK {
            capacity: capacity.max(1),
            heap: Vec::new(),
            index: HashMap::default(),
            total: 0,
        }
    }

    /// The sum of every weight added.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Adds `weight` to `key`.
    pub fn add(&mut self, key: &[u8], weight: u64) {
        self.total = self.total.saturating_add(weight);
        if let Some(&at) = self.index.get(key) {
            if let Some(c) = self.heap.get_mut(at) {
                c.count = c.count.saturating_add(weight);
            }
            self.sift_down(at);
            return;
        }
        if self.heap.len() < self.capacity {
            let at = self.heap.len();
            self.heap.push(Counter {
                key: key.into(),
                count: weight,
            });
            self.index.insert(key.into(), at);
            self.sift_up(at);
            return;
        }
        // The lightest key gives its place (and its count) to this one.
        let Some(root) = self.heap.first_mut() else {
            return;
        };
        let old = std::mem::replace(&mut root.key, key.into());
        root.count = root.count.saturating_add(weight);
        self.index.remove(&old);
        self.index.insert(key.into(), 0);
        self.sift_down(0);
    }

    /// The keys with their counts, heaviest first.
    pub fn list(&self) -> Vec<(&[u8], u64)> {
        let mut all: Vec<(&[u8], u64)> = self.heap.iter().map(|c| (&*c.key, c.count)).collect();
        all.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        all
    }

    fn count(&self, at: usize) -> u64 {
        self.heap.get(at).map_or(u64::MAX, |c| c.count)
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        for at in [a, b] {
            if let Some(c) = self.heap.get(at) {
                if let Some(place) = self.index.get_mut(&c.key) {
                    *place = at;
                }
            }
        }
    }

    fn sift_up(&mut self, mut at: usize) {
        while at > 0 {
            let parent = (at - 1) / 2;
            if self.count(parent) <= self.count(at) {
                break;
            }
            self.swap(parent, at);
            at = parent;
        }
    }

    fn sift_down(&mut self, mut at: usize) {
        loop {
            let left = at.saturating_mul(2).saturating_add(1);
            let right = left.saturating_add(1);
            let mut least = at;
            for child in [left, right] {
                if child < self.heap.len() && self.count(child) < self.count(least) {
                    least = child;
                }
            }
            if least == at {
                return;
            }
            self.swap(at, least);
            at = least;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Zipf(1) stream over `n` keys, from a fixed seed.
    pub(crate) fn zipf(n: usize, len: usize, mut seed: u64) -> Vec<usize> {
        let weights: Vec<f64> = (1..=n).map(|r| 1.0 / r as f64).collect();
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

    #[test]
    fn exact_while_under_capacity() {
        let mut top = TopK::new(4);
        for (key, w) in [(b"a", 5), (b"b", 1), (b"a", 2), (b"c", 9)] {
            top.add(key, w);
        }
        assert_eq!(
            top.list(),
            vec![(&b"c"[..], 9), (&b"a"[..], 7), (&b"b"[..], 1)]
        );
        assert_eq!(top.total(), 17);
    }

    #[test]
    fn finds_the_heavy_keys_of_a_skewed_stream_in_few_counters() {
        // 10,000 keys, 200,000 updates, 100 counters (10 per key asked).
        let stream = zipf(10_000, 200_000, 0x9e37_79b9_7f4a_7c15);
        let mut exact = vec![0u64; 10_000];
        let mut top = TopK::new(100);
        for &k in &stream {
            exact[k] += 1;
            top.add(format!("key:{k}").as_bytes(), 1);
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
        assert!(top.heap.len() <= 100 && top.index.len() <= 100);
    }

    /// The measurement behind choosing Space-Saving: recall of the true
    /// top 10 and time per update, against HeavyKeeper given the same
    /// number of counters, on Zipf streams. Prints its figures; run with
    /// `cargo test --release -p orthrus-proxy --lib topk -- --ignored --nocapture`.
    #[test]
    #[ignore = "a measurement, not a check"]
    fn space_saving_against_heavykeeper() {
        for s_exp in [1.0f64, 2.0] {
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

            let t = std::time::Instant::now();
            let mut ss = TopK::new(100);
            for k in &keys {
                ss.add(k.as_bytes(), 1);
            }
            let ss_ns = t.elapsed().as_nanos() as f64 / keys.len() as f64;
            let ss_top: Vec<String> = ss.list()[..10]
                .iter()
                .map(|(k, _)| String::from_utf8_lossy(k).into_owned())
                .collect();

            for width in [50, 500] {
                let t = std::time::Instant::now();
                let mut hk = HeavyKeeper::new(2, width, 10);
                for k in &keys {
                    hk.add(k.as_bytes());
                }
                let hk_ns = t.elapsed().as_nanos() as f64 / keys.len() as f64;
                let hk_top = hk.top();

                let recall = |found: &[String]| truth.iter().filter(|k| found.contains(k)).count();
                println!(
                    "zipf s={s_exp}: space-saving {}/10 in {ss_ns:.0} ns/update; heavykeeper ({width} a row) {}/10 in {hk_ns:.0} ns/update",
                    recall(&ss_top),
                    recall(&hk_top)
                );
            }
        }
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
            self.top.iter().map(|(k, _)| k.clone()).collect()
        }
    }
}
