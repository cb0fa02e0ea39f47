//! The kept keys' places by hash, for [`super::TopK`]: open addressing with
//! linear probing in a table at least twice as large as the keys it holds,
//! so that a lookup, an insert or a removal (by backward shift: no
//! tombstones) reads a few adjacent entries and never allocates.

/// A free entry's place.
const EMPTY: u32 = u32::MAX;

#[derive(Debug)]
pub(super) struct Index {
    /// `(hash, place)`, `place` [`EMPTY`] when free.
    entries: Vec<(u64, u32)>,
    /// `64 - log2(entries.len())`: a hash's home is its Fibonacci product's
    /// top bits.
    shift: u32,
    len: usize,
}

impl Index {
    /// Room for `keys` keys.
    pub(super) fn with_capacity(keys: usize) -> Index {
        let size = keys.saturating_mul(2).max(2).next_power_of_two();
        Index {
            entries: vec![(0, EMPTY); size],
            shift: 64 - size.trailing_zeros(),
            len: 0,
        }
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.len
    }

    fn home(&self, hash: u64) -> usize {
        // Every bit of the hash moves the top ones (the sketch picks its
        // cells with the low bits of each half).
        usize::try_from(hash.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> self.shift).unwrap_or(0)
    }

    fn next(&self, at: usize) -> usize {
        at.wrapping_add(1) & self.entries.len().wrapping_sub(1)
    }

    /// Where `hash` is in the table, if it is.
    fn find(&self, hash: u64) -> Option<usize> {
        let mut at = self.home(hash);
        for _ in 0..self.entries.len() {
            let &(h, place) = self.entries.get(at)?;
            if place == EMPTY {
                return None;
            }
            if h == hash {
                return Some(at);
            }
            at = self.next(at);
        }
        None
    }

    /// The place kept for `hash`.
    pub(super) fn get(&self, hash: u64) -> Option<usize> {
        let &(_, place) = self.entries.get(self.find(hash)?)?;
        usize::try_from(place).ok()
    }

    /// Adds `hash` at `place`; `hash` must not be in the table, and the
    /// table holds at most the `keys` it was made for.
    pub(super) fn insert(&mut self, hash: u64, place: usize) {
        let Ok(place) = u32::try_from(place) else {
            return;
        };
        if place == EMPTY || self.len.saturating_mul(2) >= self.entries.len() {
            return;
        }
        let mut at = self.home(hash);
        while let Some(entry) = self.entries.get_mut(at) {
            if entry.1 == EMPTY {
                *entry = (hash, place);
                self.len = self.len.saturating_add(1);
                return;
            }
            at = self.next(at);
        }
    }

    /// Takes `hash` out, moving back the entries after it that probed
    /// past it.
    pub(super) fn remove(&mut self, hash: u64) {
        let Some(mut hole) = self.find(hash) else {
            return;
        };
        self.len = self.len.saturating_sub(1);
        let mask = self.entries.len().wrapping_sub(1);
        let mut at = hole;
        loop {
            at = self.next(at);
            let Some(&(h, place)) = self.entries.get(at) else {
                break;
            };
            if place == EMPTY {
                break;
            }
            // It stays unless the hole is between its home and it.
            let home = self.home(h);
            let from_home = at.wrapping_sub(home) & mask;
            let from_hole = at.wrapping_sub(hole) & mask;
            if from_home >= from_hole {
                if let Some(entry) = self.entries.get_mut(hole) {
                    *entry = (h, place);
                }
                hole = at;
            }
        }
        if let Some(entry) = self.entries.get_mut(hole) {
            *entry = (0, EMPTY);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agrees_with_a_map_through_inserts_and_removals() {
        // Few home entries for many keys: long runs, removals in them.
        let mut index = Index::with_capacity(64);
        let mut map = std::collections::HashMap::new();
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for i in 0..20_000usize {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let hash = seed % 97 * 0x0101_0101; // 97 hashes, many colliding homes
            if map.contains_key(&hash) {
                index.remove(hash);
                map.remove(&hash);
            } else if map.len() < 64 {
                index.insert(hash, i);
                map.insert(hash, i);
            }
            assert_eq!(index.len(), map.len());
            for (&h, &place) in &map {
                assert_eq!(index.get(h), Some(place), "after step {i}");
            }
            assert_eq!(index.get(hash), map.get(&hash).copied());
        }
    }

    #[test]
    fn a_full_table_refuses_more() {
        let mut index = Index::with_capacity(2);
        for h in 0..10u64 {
            index.insert(h, 0);
        }
        assert_eq!(index.len(), 2);
        assert_eq!(index.get(9), None);
    }
}
