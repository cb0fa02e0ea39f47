//! Which misses fill: a key is admitted once it was asked for again while
//! the last few hundred thousand cacheable reads were counted (a
//! count-min sketch per worker, halved as it fills), so a keyspace read
//! uniformly costs a lookup and a count, and no fill.

use std::cell::RefCell;
use std::hash::{BuildHasher, Hasher};

/// Counters per row (a power of two).
const WIDTH: usize = 1 << 14;
const ROWS: usize = 4;
/// Counts between two halvings.
const AGE_EVERY: u32 = 1 << 18;
/// Reads of a key (this one included) before it fills.
const ADMIT_AT: u8 = 2;

struct Sketch {
    rows: Box<[[u8; WIDTH]; ROWS]>,
    counted: u32,
    hasher: rustc_hash::FxBuildHasher,
}

thread_local! {
    static SKETCH: RefCell<Option<Sketch>> = const { RefCell::new(None) };
}

/// Counts a read of `key`; whether it is now hot enough to fill.
pub fn admit(key: &[u8]) -> bool {
    SKETCH.with(|sketch| {
        let mut sketch = sketch.borrow_mut();
        let sketch = sketch.get_or_insert_with(|| Sketch {
            rows: Box::new([[0; WIDTH]; ROWS]),
            counted: 0,
            hasher: rustc_hash::FxBuildHasher,
        });
        sketch.count(key) >= ADMIT_AT
    })
}

impl Sketch {
    /// Adds one to `key`'s counters; its estimate after.
    fn count(&mut self, key: &[u8]) -> u8 {
        let mut h = self.hasher.build_hasher();
        h.write(key);
        let hash = h.finish();
        let mut least = u8::MAX;
        for (row, counters) in self.rows.iter_mut().enumerate() {
            // 14 bits of the hash per row, after mixing in the row.
            let mixed = hash.rotate_left(17 * row as u32) ^ (row as u64).wrapping_mul(0x9e37_79b9);
            let at = (mixed as usize) & (WIDTH - 1);
            if let Some(c) = counters.get_mut(at) {
                *c = c.saturating_add(1);
                least = least.min(*c);
            }
        }
        self.counted += 1;
        if self.counted >= AGE_EVERY {
            self.counted = 0;
            for counters in self.rows.iter_mut() {
                for c in counters.iter_mut() {
                    *c >>= 1;
                }
            }
        }
        least
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_fills_at_its_second_read_and_a_new_one_does_not() {
        assert!(!admit(b"cold:1"));
        assert!(admit(b"cold:1"));
        let admitted = (0..10_000)
            .filter(|i| admit(format!("uniform:{i}").as_bytes()))
            .count();
        assert!(admitted < 100, "{admitted} of 10,000 first reads admitted");
    }
}
