//! Which misses fill: a key is admitted once it was asked for again while
//! the last few hundred thousand cacheable reads were counted (a
//! count-min sketch per worker, halved as it fills), so a keyspace read
//! uniformly costs a lookup and a count, and no fill.

use std::cell::RefCell;
use std::hash::{BuildHasher, Hasher};

/// Counters per row (a power of two).
const WIDTH: usize = 1 << 19;
const ROWS: usize = 2;
/// Counts between two halvings.
const AGE_EVERY: u32 = 1 << 19;
/// Reads of a key (this one included) before it fills.
const ADMIT_AT: u8 = 3;

struct Sketch {
    /// `ROWS` rows of `WIDTH` counters, one after the other.
    rows: Box<[u8]>,
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
            rows: vec![0; WIDTH * ROWS].into_boxed_slice(),
            counted: 0,
            hasher: rustc_hash::FxBuildHasher,
        });
        sketch.count(key) >= ADMIT_AT
    })
}

impl Sketch {
    /// Adds one to `key`'s estimate (only its smallest counters grow:
    /// conservative update); its estimate after.
    fn count(&mut self, key: &[u8]) -> u8 {
        let mut h = self.hasher.build_hasher();
        h.write(key);
        let hash = h.finish();
        // 19 bits for each row, from each half of the hash.
        let at = [
            (hash >> 45) as usize & (WIDTH - 1),
            (hash >> 13) as usize & (WIDTH - 1),
        ];
        let (first, second) = self.rows.split_at_mut(WIDTH);
        let (Some(a), Some(b)) = (first.get_mut(at[0]), second.get_mut(at[1])) else {
            return 0;
        };
        let least = (*a).min(*b).saturating_add(1);
        *a = (*a).max(least);
        *b = (*b).max(least);
        self.counted += 1;
        if self.counted >= AGE_EVERY {
            self.counted = 0;
            for c in self.rows.iter_mut() {
                *c >>= 1;
            }
        }
        least
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_fills_at_its_third_read_and_a_new_one_does_not() {
        assert!(!admit(b"cold:1"));
        assert!(!admit(b"cold:1"));
        assert!(admit(b"cold:1"));
        // A million keys read once each, then a hundred thousand of them
        // again: none is hot.
        let mut admitted = 0;
        for round in [1_000_000, 100_000] {
            admitted += (0..round)
                .filter(|i| admit(format!("uniform:{i}").as_bytes()))
                .count();
        }
        assert!(
            admitted < 11_000,
            "{admitted} of 1,100,000 reads admitted (1 % allowed)"
        );
    }
}
