//! Which reads look in the cache and which misses fill: every cacheable
//! read is counted (a count-min sketch per worker, halved every half
//! million reads), and a key is looked for, and filled when missing, once
//! it was read `ADMIT_AT` times lately. A keyspace read uniformly costs a
//! count per read, no lookup and almost no fill.

use std::cell::RefCell;

/// Counters per row (a power of two).
const WIDTH: usize = 1 << 19;
const ROWS: usize = 2;
/// Counts between two halvings.
const AGE_EVERY: u32 = 1 << 19;
/// Reads of a key (this one included) before it is looked for and filled.
/// A million keys read at random, each about once between halvings,
/// rarely get there (the unit test: 0.3 % of reads; at 3, 14 %); of a
/// Zipf(0.99) million read by half a million reads between halvings, the
/// keys up to rank ~15,000 do, which take about 70 % of the reads.
pub const ADMIT_AT: u8 = 5;

struct Sketch {
    /// `ROWS` rows of `WIDTH` counters, one after the other.
    rows: Box<[u8]>,
    counted: u32,
}

thread_local! {
    static SKETCH: RefCell<Option<Sketch>> = const { RefCell::new(None) };
}

/// Counts a read of the key whose [`key_hash`] is `hash`; its estimated
/// reads lately, this one included.
///
/// [`key_hash`]: crate::process::cache::key_hash
pub fn count(hash: u64) -> u8 {
    SKETCH.with(|sketch| {
        let mut sketch = sketch.borrow_mut();
        let sketch = sketch.get_or_insert_with(|| Sketch {
            rows: vec![0; WIDTH * ROWS].into_boxed_slice(),
            counted: 0,
        });
        sketch.count(hash)
    })
}

impl Sketch {
    /// Adds one to `key`'s estimate (only its smallest counters grow:
    /// conservative update); its estimate after.
    fn count(&mut self, hash: u64) -> u8 {
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
    use crate::process::cache::key_hash;

    fn admit(key: &[u8]) -> bool {
        count(key_hash(key)) >= ADMIT_AT
    }

    #[test]
    fn the_sketch_is_the_size_the_store_counts() {
        assert_eq!((WIDTH * ROWS) as u64, crate::process::cache::SKETCH_BYTES);
    }

    #[test]
    fn a_key_is_admitted_at_its_fifth_read_and_a_uniform_keyspace_hardly_ever() {
        for _ in 1..ADMIT_AT {
            assert!(!admit(b"warm:1"));
        }
        assert!(admit(b"warm:1"));
        // A million keys read at random, six reads per key in all (over
        // ten halvings): under 1 % of the reads count as hot.
        let (mut admitted, mut x) = (0usize, 0x2545_f491_4f6c_dd1du64);
        let reads = 6_000_000;
        for _ in 0..reads {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if admit(format!("uniform:{}", x % 1_000_000).as_bytes()) {
                admitted += 1;
            }
        }
        assert!(
            admitted < reads / 100,
            "{admitted} of {reads} uniform reads admitted (1 % allowed)"
        );
    }
}
